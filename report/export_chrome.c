/*
 * export_chrome.c - `--format chrome`: Chrome Trace Event JSON, for Perfetto
 * UI and chrome://tracing, made from the raw sample timestamps.
 *
 * Each thread is one track (pid and tid as recorded, named by "M" metadata
 * events). Along a thread's samples in time order, a frame at depth d is
 * open for as long as consecutive samples share the stack prefix up to d (as
 * printed, so a frame whose current line changes starts a new slice); each
 * such run becomes one "X" complete event from the time of its first sample
 * to the time of the first sample that no longer has it. The last sample of
 * a run, and any sample followed by a gap of more than two sampling periods
 * (samples filtered out, a stalled recorder), counts for one period. Slices
 * therefore nest by construction. Timestamps are microseconds since the
 * start of the recording, with nanosecond precision.
 */
#include "flame.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The frames a thread has open: nodes[i] opened at start[i], i < depth. */
struct ch_thread {
        uint32_t *nodes;
        int64_t *start;
        uint32_t depth;
        int64_t last_ns;
        bool seen;
        int32_t pid;
        int64_t tid;
};

struct ch_state {
        struct ex_model *m;
        struct out *o;
        struct ch_thread *threads; /* by thread ref */
        const uint32_t *index;
        uint32_t max_ref, max_depth;
        uint32_t *path;
        int64_t period, gap;
        uint64_t events;
        int status;
};

/*
 * One slice. Kept small (no "cat", no "args": the name already says file and
 * line), as a long recording whose stacks change often makes many of them.
 */
static void ch_event(struct ch_state *c, const struct ch_thread *t, uint32_t node, int64_t from,
                     int64_t to)
{
        struct out *o = c->o;
        const struct ex_label *l = &c->m->labels[c->m->nodes[node].label];
        out_puts(o, c->events++ ? ",\n{\"ph\":\"X\",\"name\":" : "\n{\"ph\":\"X\",\"name\":");
        out_json_embedded(o, l->text);
        out_printf(o, ",\"pid\":%" PRId32 ",\"tid\":%" PRId64 ",\"ts\":", t->pid, t->tid);
        ex_us(o, from);
        out_puts(o, ",\"dur\":");
        ex_us(o, to - from);
        out_puts(o, "}");
}

/*
 * Close the frames of `t` deeper than `keep` at time `at`, outermost first:
 * viewers nest slices with equal start and duration in the order they come,
 * so a caller must precede its callee.
 */
static void ch_close(struct ch_state *c, struct ch_thread *t, uint32_t keep, int64_t at)
{
        for (uint32_t d = keep; d < t->depth; d++)
                ch_event(c, t, t->nodes[d], t->start[d], at);
        if (t->depth > keep)
                t->depth = keep;
}

static int ch_thread_setup(struct ch_state *c, struct ch_thread *t, uint32_t ref)
{
        t->nodes = malloc(((size_t)c->max_depth + 1) * sizeof(*t->nodes));
        t->start = malloc(((size_t)c->max_depth + 1) * sizeof(*t->start));
        if (!t->nodes || !t->start)
                return -1;
        struct trace_thread info;
        if (c->index[ref] != UINT32_MAX &&
            trace_reader_thread_at(c->m->r, c->index[ref], &info) == 0) {
                t->pid = info.pid;
                t->tid = info.tid >= 0 ? info.tid : (int64_t)ref;
        } else {
                t->tid = ref;
        }
        t->seen = true;
        return 0;
}

static int ch_sample(void *ctx, const struct trace_sample *s)
{
        struct ch_state *c = ctx;
        uint32_t node = ex_sample_node(c->m, s, c->max_ref, &c->status);
        if (node == UINT32_MAX)
                return 1;
        struct ch_thread *t = &c->threads[s->thread];
        if (!t->seen && ch_thread_setup(c, t, s->thread) < 0) {
                c->status = ex_fail(c->m, TRACE_ERR_NOMEM, "out of memory");
                return 1;
        }
        if (t->depth && s->t_ns - t->last_ns > c->gap)
                ch_close(c, t, 0, t->last_ns + c->period);
        uint32_t depth = ex_model_path(c->m, node, c->path);
        uint32_t keep = 0;
        while (keep < depth && keep < t->depth && t->nodes[keep] == c->path[keep])
                keep++;
        /* Time runs forward within a thread; a step back closes at the later time. */
        int64_t at = s->t_ns > t->last_ns || !t->depth ? s->t_ns : t->last_ns;
        ch_close(c, t, keep, at);
        for (uint32_t d = keep; d < depth; d++) {
                t->nodes[d] = c->path[d];
                t->start[d] = at;
        }
        t->depth = depth;
        t->last_ns = at;
        return 0;
}

static void ch_metadata(struct ch_state *c)
{
        struct out *o = c->o;
        struct ex_model *m = c->m;
        for (uint32_t ref = 1; ref <= c->max_ref; ref++) {
                struct ch_thread *t = &c->threads[ref];
                struct trace_thread info;
                if (!t->seen || c->index[ref] == UINT32_MAX ||
                    trace_reader_thread_at(m->r, c->index[ref], &info) < 0)
                        continue;
                char name[256];
                if (info.name && *info.name)
                        snprintf(name, sizeof(name), "%s", info.name);
                else
                        snprintf(name, sizeof(name), "thread %" PRId64, t->tid);
                out_puts(o, c->events++ ? ",\n" : "\n");
                out_printf(o,
                           "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%" PRId32
                           ",\"tid\":%" PRId64 ",\"args\":{\"name\":",
                           t->pid, t->tid);
                out_json_embedded(o, name);
                out_puts(o, "}}");
        }
        for (uint32_t i = 0; i < trace_reader_process_count(m->r); i++) {
                struct trace_process p;
                if (trace_reader_process_at(m->r, i, &p) < 0)
                        continue;
                char name[512];
                snprintf(name, sizeof(name), "%s (pid %" PRId32 ")",
                         p.cmdline && *p.cmdline ? p.cmdline : "python", p.pid);
                out_puts(o, c->events++ ? ",\n" : "\n");
                out_printf(o,
                           "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%" PRId32
                           ",\"tid\":0,\"args\":{\"name\":",
                           p.pid);
                out_json_embedded(o, name);
                out_puts(o, "}}");
        }
}

int export_chrome(struct ex_model *m, const struct trace_filter *filter,
                  const struct export_options *opt, struct out *o)
{
        struct ch_state c = {.m = m, .o = o};
        uint32_t *index = ex_thread_index(m, &c.max_ref);
        c.index = index;
        for (uint32_t n = 0; n < m->n_nodes; n++)
                if (m->nodes[n].depth > c.max_depth)
                        c.max_depth = m->nodes[n].depth;
        c.period = llround(m->period_ns) > 0 ? llround(m->period_ns) : 1;
        c.gap = 2 * c.period;
        c.threads = calloc((size_t)c.max_ref + 1, sizeof(*c.threads));
        c.path = malloc(((size_t)c.max_depth + 1) * sizeof(*c.path));
        int rc = 0;
        if (!index || !c.threads || !c.path)
                rc = ex_fail(m, TRACE_ERR_NOMEM, "out of memory");
        if (rc == 0) {
                out_puts(o, "{\"traceEvents\":[");
                int s = trace_reader_foreach_sample(m->r, filter, ch_sample, &c);
                if (s < 0)
                        rc = ex_fail_read(m, s);
                else if (c.status < 0)
                        rc = c.status;
        }
        if (rc == 0) {
                for (uint32_t ref = 1; ref <= c.max_ref; ref++)
                        if (c.threads[ref].seen)
                                ch_close(&c, &c.threads[ref], 0, c.threads[ref].last_ns + c.period);
                ch_metadata(&c);
                out_puts(o,
                         "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"exporter\":\"pyflame\"");
                if (opt->title) {
                        out_puts(o, ",\"title\":");
                        out_json_embedded(o, opt->title);
                }
                const char *wall = trace_reader_meta(m->r, TRACE_META_START_WALL_NS);
                if (wall) {
                        out_puts(o, ",\"start_wall_ns\":");
                        out_json_embedded(o, wall);
                }
                out_puts(o, "}}\n");
        }
        for (uint32_t ref = 0; c.threads && ref <= c.max_ref; ref++) {
                free(c.threads[ref].nodes);
                free(c.threads[ref].start);
        }
        free(c.threads);
        free(c.path);
        free(index);
        return rc;
}
