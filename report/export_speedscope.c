/*
 * export_speedscope.c - `--format speedscope`: speedscope's JSON file format
 * (https://www.speedscope.app/file-format-schema.json, specified in
 * speedscope's src/lib/file-format-spec.ts).
 *
 * shared.frames holds one frame per label of the model (name, file, line);
 * each thread with selected samples becomes one "sampled" profile whose
 * samples are root-first frame-index arrays in time order. Consecutive
 * samples of a thread in the same stack are written once with their weights
 * added. The unit is nanoseconds and each sample weighs the sampling period
 * (1 / rate_hz, 10 ms when unknown), so a profile's total is its thread's
 * samples times the period; startValue is the thread's first selected
 * sample time (relative to the start of the recording) and endValue adds
 * the total weight, as speedscope lays a sampled profile out by weight.
 */
#include "flame.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A run of consecutive samples of one thread in one node. */
struct ss_run {
        uint32_t node;
        uint64_t count;
};

struct ss_thread {
        struct ss_run *runs;
        size_t n, cap;
        uint64_t samples;
        int64_t first_ns;
};

struct ss_collect {
        struct ex_model *m;
        struct ss_thread *threads; /* indexed by thread ref */
        uint32_t max_ref;
        int status;
};

static int ss_sample(void *ctx, const struct trace_sample *s)
{
        struct ss_collect *c = ctx;
        uint32_t node = ex_sample_node(c->m, s, c->max_ref, &c->status);
        if (node == UINT32_MAX)
                return 1;
        struct ss_thread *t = &c->threads[s->thread];
        if (t->samples == 0)
                t->first_ns = s->t_ns;
        t->samples++;
        if (t->n && t->runs[t->n - 1].node == node) {
                t->runs[t->n - 1].count++;
                return 0;
        }
        if (t->n == t->cap) {
                size_t cap = t->cap ? t->cap * 2 : 64;
                struct ss_run *p = reallocarray(t->runs, cap, sizeof(*p));
                if (!p) {
                        c->status = ex_fail(c->m, TRACE_ERR_NOMEM, "out of memory");
                        return 1;
                }
                t->runs = p;
                t->cap = cap;
        }
        t->runs[t->n++] = (struct ss_run){node, 1};
        return 0;
}

static void ss_frames(struct out *o, const struct ex_model *m)
{
        out_puts(o, "\"shared\":{\"frames\":[");
        for (uint32_t i = 0; i < m->n_labels; i++) {
                const struct ex_label *l = &m->labels[i];
                out_puts(o, i ? ",\n{\"name\":" : "\n{\"name\":");
                out_json_embedded(o, l->name);
                if (*l->file && l->kind != TRACE_FRAME_SPECIAL && l->kind != TRACE_FRAME_TASK) {
                        out_puts(o, ",\"file\":");
                        out_json_embedded(o, l->file);
                        if (l->line >= 0)
                                out_printf(o, ",\"line\":%d", (int)l->line);
                }
                out_puts(o, "}");
        }
        out_puts(o, "]},\n");
}

static void ss_profile_name(struct out *o, const struct trace_thread *t)
{
        char buf[512];
        char tid[32];
        if (t->tid >= 0)
                snprintf(tid, sizeof(tid), "tid %" PRId64, t->tid);
        else
                snprintf(tid, sizeof(tid), "thread %" PRIu32, t->ref);
        if (t->name && *t->name)
                snprintf(buf, sizeof(buf), "%s (%s, pid %" PRId32 ")", t->name, tid, t->pid);
        else
                snprintf(buf, sizeof(buf), "%s (pid %" PRId32 ")", tid, t->pid);
        out_json_embedded(o, buf);
}

static void ss_profile(struct out *o, const struct ex_model *m, const struct trace_thread *info,
                       const struct ss_thread *t, uint64_t weight, uint32_t *path)
{
        out_puts(o, "{\"type\":\"sampled\",\"name\":");
        ss_profile_name(o, info);
        out_printf(o, ",\"unit\":\"nanoseconds\",\"startValue\":%" PRId64 ",\"endValue\":%" PRId64,
                   t->first_ns, t->first_ns + (int64_t)(t->samples * weight));
        out_puts(o, ",\n\"samples\":[");
        for (size_t i = 0; i < t->n; i++) {
                uint32_t depth = ex_model_path(m, t->runs[i].node, path);
                out_puts(o, i ? ",[" : "[");
                for (uint32_t d = 0; d < depth; d++)
                        out_printf(o, "%s%u", d ? "," : "", m->nodes[path[d]].label);
                out_puts(o, (i + 1) % 16 ? "]" : "]\n");
        }
        out_puts(o, "],\n\"weights\":[");
        for (size_t i = 0; i < t->n; i++)
                out_printf(o, "%s%" PRIu64 "%s", i ? "," : "", t->runs[i].count * weight,
                           (i + 1) % 16 ? "" : "\n");
        out_puts(o, "]}");
}

int export_speedscope(struct ex_model *m, const struct trace_filter *filter,
                      const struct export_options *opt, struct out *o)
{
        uint32_t max_ref = 0, max_depth = 0;
        uint32_t *index = ex_thread_index(m, &max_ref);
        struct ss_collect c = {.m = m, .max_ref = max_ref};
        c.threads = calloc((size_t)max_ref + 1, sizeof(*c.threads));
        for (uint32_t n = 0; n < m->n_nodes; n++)
                if (m->nodes[n].depth > max_depth)
                        max_depth = m->nodes[n].depth;
        uint32_t *path = malloc(((size_t)max_depth + 1) * sizeof(*path));
        int rc = 0;
        if (!index || !c.threads || !path)
                rc = ex_fail(m, TRACE_ERR_NOMEM, "out of memory");
        if (rc == 0) {
                int st = trace_reader_foreach_sample(m->r, filter, ss_sample, &c);
                if (st < 0)
                        rc = ex_fail_read(m, st);
                else if (c.status < 0)
                        rc = c.status;
        }
        if (rc == 0) {
                uint64_t weight = (uint64_t)llround(m->period_ns);
                if (weight == 0)
                        weight = 1;
                /* Open on the busiest thread. */
                uint32_t active = 0, n_profiles = 0;
                uint64_t most = 0;
                for (uint32_t ref = 1; ref <= max_ref; ref++) {
                        if (!c.threads[ref].samples || index[ref] == UINT32_MAX)
                                continue;
                        if (c.threads[ref].samples > most) {
                                most = c.threads[ref].samples;
                                active = n_profiles;
                        }
                        n_profiles++;
                }
                out_puts(o,
                         "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\n");
                out_puts(o, "\"name\":");
                out_json_embedded(o, opt->title ? opt->title : "pyflame profile");
                out_printf(o, ",\n\"exporter\":\"pyflame\",\"activeProfileIndex\":%u,\n", active);
                ss_frames(o, m);
                out_puts(o, "\"profiles\":[");
                bool first = true;
                for (uint32_t ref = 1; ref <= max_ref; ref++) {
                        struct trace_thread info;
                        if (!c.threads[ref].samples || index[ref] == UINT32_MAX ||
                            trace_reader_thread_at(m->r, index[ref], &info) < 0)
                                continue;
                        out_puts(o, first ? "\n" : ",\n");
                        first = false;
                        ss_profile(o, m, &info, &c.threads[ref], weight, path);
                }
                if (first) {
                        /* speedscope refuses a file without profiles: say there was nothing. */
                        out_puts(o, "\n{\"type\":\"sampled\",\"name\":\"no samples selected\","
                                    "\"unit\":\"nanoseconds\",\"startValue\":0,\"endValue\":0,"
                                    "\"samples\":[],\"weights\":[]}");
                }
                out_puts(o, "]}\n");
        }
        for (uint32_t ref = 0; c.threads && ref <= max_ref; ref++)
                free(c.threads[ref].runs);
        free(c.threads);
        free(index);
        free(path);
        return rc;
}
