/*
 * top_model.c - the live view's model (top.h): one window of a trace
 * aggregated into a header and a sorted table, independent of any terminal.
 *
 * One trace_reader_foreach_sample() pass over the window, with the pid and
 * thread filters but not the state filter, counts what the header needs
 * (every selected sample, on CPU, holding the GIL, the threads seen) and,
 * for the samples the state filter keeps, samples per stack. From there the
 * table is aggregate.c's hotspot table (per stack, never per sample), so
 * the view and `pyflame-report --hot` agree on every count.
 */
#include "top.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

struct window_pass {
        uint64_t *counts; /* per stack id */
        uint32_t n_stacks;
        bool *thread_seen; /* per thread ref */
        uint32_t n_threads;
        unsigned require, exclude;
        struct top_header *h;
};

static int window_visit(void *ctx, const struct trace_sample *s)
{
        struct window_pass *p = ctx;
        p->h->seen++;
        if (s->state & TRACE_STATE_ON_CPU)
                p->h->on_cpu++;
        if (s->state & TRACE_STATE_HOLDS_GIL)
                p->h->holds_gil++;
        if (s->thread <= p->n_threads && !p->thread_seen[s->thread]) {
                p->thread_seen[s->thread] = true;
                p->h->threads++;
        }
        if ((s->state & p->require) != p->require || (s->state & p->exclude))
                return 0;
        if (s->stack < p->n_stacks) {
                p->counts[s->stack]++;
                p->h->samples++;
        }
        return 0;
}

/*
 * The target as the header names it: the command line the recorder stored,
 * else the first process's, else the pids. Written to buf; returns buf.
 */
static const char *target_of(const struct trace_reader *r, char *buf, size_t len)
{
        const char *cmd = trace_reader_meta(r, TRACE_META_CMDLINE);
        struct trace_process p;
        if ((!cmd || !*cmd) && trace_reader_process_count(r) &&
            trace_reader_process_at(r, 0, &p) == 0 && p.cmdline && *p.cmdline)
                cmd = p.cmdline;
        const char *pids = trace_reader_meta(r, TRACE_META_PIDS);
        if (cmd && *cmd)
                snprintf(buf, len, "%s%s%s", pids && *pids ? "pid " : "", pids ? pids : "",
                         pids && *pids ? ": " : "");
        else
                snprintf(buf, len, "pid %s", pids ? pids : "?");
        size_t n = strlen(buf);
        if (cmd && n < len)
                snprintf(buf + n, len - n, "%s", cmd);
        return buf;
}

int64_t top_end_ns(struct trace_reader *r)
{
        struct trace_summary sum;
        if (trace_reader_summary(r, &sum) < 0)
                return 0;
        /* Samples may run past the recorded end (a clock that stepped). */
        int64_t end = sum.duration_ns;
        uint32_t n = trace_reader_thread_count(r);
        for (uint32_t i = 0; i < n; i++) {
                struct trace_thread t;
                if (trace_reader_thread_at(r, i, &t) == 0 && t.samples && t.last_ns >= end)
                        end = t.last_ns + 1;
        }
        return end;
}

static int cmp_str(const char *a, const char *b)
{
        return strcmp(a ? a : "", b ? b : "");
}

static int32_t row_line(const struct top_row *r, enum top_key key)
{
        return key == TOP_BY_LINE ? r->f.line : key == TOP_BY_FUNCTION ? r->f.first_line : 0;
}

static int cmp_name(const struct top_row *x, const struct top_row *y, enum top_key key)
{
        int c = key == TOP_BY_FILE ? 0
                                   : cmp_str(x->f.qualname ? x->f.qualname : x->f.function,
                                             y->f.qualname ? y->f.qualname : y->f.function);
        if (c)
                return c;
        if ((c = cmp_str(x->f.file, y->f.file)))
                return c;
        int32_t lx = row_line(x, key), ly = row_line(y, key);
        return lx < ly ? -1 : lx > ly;
}

/* qsort has no context argument: the key and column of the sort in progress. */
static _Thread_local enum top_key sort_key;
static _Thread_local enum top_sort sort_col;

static int row_cmp(const void *a, const void *b)
{
        const struct top_row *x = a, *y = b;
        if (sort_col == TOP_SORT_NAME) {
                int c = cmp_name(x, y, sort_key);
                if (c)
                        return c;
        }
        bool total_first = sort_col == TOP_SORT_TOTAL || sort_col == TOP_SORT_TOTAL_TIME;
        uint64_t kx = total_first ? x->total : x->own, ky = total_first ? y->total : y->own;
        if (kx != ky)
                return kx > ky ? -1 : 1;
        kx = total_first ? x->own : x->total;
        ky = total_first ? y->own : y->total;
        if (kx != ky)
                return kx > ky ? -1 : 1;
        return cmp_name(x, y, sort_key);
}

void top_view_sort(struct top_view *v, enum top_key key, enum top_sort sort)
{
        sort_key = key;
        sort_col = sort;
        if (v->n)
                qsort(v->rows, v->n, sizeof(*v->rows), row_cmp);
}

static const enum hot_key hot_key_of[TOP_KEY_COUNT] = {
    [TOP_BY_FUNCTION] = HOT_BY_FUNCTION,
    [TOP_BY_LINE] = HOT_BY_LINE,
    [TOP_BY_FILE] = HOT_BY_FILE,
};

int top_view_build(struct trace_reader *r, const struct top_query *q, struct top_view *out)
{
        if (!r || !q || !out || (unsigned)q->key >= TOP_KEY_COUNT ||
            (unsigned)q->sort >= TOP_SORT_COUNT || q->window_ns < 0)
                return TRACE_ERR_ARG;
        struct trace_summary sum;
        int rc = trace_reader_summary(r, &sum);
        if (rc < 0)
                return rc;
        struct top_header h = {
            .finalized = sum.finalized,
            .python_version = trace_reader_meta(r, TRACE_META_PYTHON_VERSION),
            .rate_hz = sum.rate_hz,
        };
        for (int k = 0; k < TRACE_ERROR_KIND_COUNT; k++)
                h.errors += sum.errors[k];
        h.end_ns = top_end_ns(r);
        target_of(r, h.target, sizeof(h.target));
        h.to_ns = q->cursor_ns < h.end_ns ? q->cursor_ns : h.end_ns;
        if (h.to_ns < 0)
                h.to_ns = 0;
        h.from_ns = q->window_ns && h.to_ns - q->window_ns > 0 ? h.to_ns - q->window_ns : 0;

        struct window_pass p = {
            .n_stacks = trace_reader_stack_count(r),
            .n_threads = trace_reader_thread_count(r),
            .require = q->filter.state_require,
            .exclude = q->filter.state_exclude,
            .h = &h,
        };
        p.counts = calloc(p.n_stacks ? p.n_stacks : 1, sizeof(*p.counts));
        p.thread_seen = calloc((size_t)p.n_threads + 1, sizeof(*p.thread_seen));
        struct hot_table ht = {0};
        struct top_row *rows = NULL;
        if (!p.counts || !p.thread_seen) {
                rc = TRACE_ERR_NOMEM;
                goto out;
        }
        if (h.to_ns > h.from_ns) {
                /* "All" starts before 0: samples may be slightly negative (trace.sql). */
                struct trace_filter f = q->filter;
                f.from_ns = q->window_ns ? h.from_ns : INT64_MIN;
                f.to_ns = h.to_ns;
                f.state_require = f.state_exclude = 0;
                if ((rc = trace_reader_foreach_sample(r, &f, window_visit, &p)) < 0)
                        goto out;
        }
        struct stack_counts sc = {.counts = p.counts, .n_stacks = p.n_stacks, .total = h.samples};
        if ((rc = hot_table_build(r, &sc, hot_key_of[q->key], &ht)) < 0)
                goto out;

        double secs = (double)(h.to_ns - h.from_ns) / 1e9;
        if (h.threads && secs > 0)
                h.achieved_hz = (double)h.seen / h.threads / secs;
        double per = h.rate_hz > 0 ? h.rate_hz : h.achieved_hz;
        h.period_ns = per > 0 ? (int64_t)(1e9 / per + 0.5) : 0;

        rows = calloc(ht.n ? ht.n : 1, sizeof(*rows));
        if (!rows) {
                rc = TRACE_ERR_NOMEM;
                goto out;
        }
        for (size_t i = 0; i < ht.n; i++) {
                struct top_row *row = &rows[i];
                row->f = ht.rows[i].f;
                row->own = ht.rows[i].self;
                row->total = ht.rows[i].total;
                row->own_share = h.samples ? (double)row->own / (double)h.samples : 0;
                row->total_share = h.samples ? (double)row->total / (double)h.samples : 0;
                row->own_ns = (int64_t)row->own * h.period_ns;
                row->total_ns = (int64_t)row->total * h.period_ns;
        }
        out->h = h;
        out->rows = rows;
        out->n = ht.n;
        out->no_frame = ht.no_frame;
        rows = NULL;
        top_view_sort(out, q->key, q->sort);
out:
        free(rows);
        hot_table_free(&ht);
        free(p.counts);
        free(p.thread_seen);
        return rc;
}

void top_view_free(struct top_view *v)
{
        free(v->rows);
        v->rows = NULL;
        v->n = 0;
}

const char *top_row_label(const struct top_row *row, enum top_key key, char *buf, size_t len)
{
        const struct trace_frame *f = &row->f;
        const char *file = f->file && *f->file ? f->file : "?";
        const char *name = f->qualname && *f->qualname ? f->qualname : f->function;
        if (key == TOP_BY_FILE)
                snprintf(buf, len, "%s", file);
        else if (key == TOP_BY_LINE && f->line >= 0)
                snprintf(buf, len, "%s:%d (%s)", file, (int)f->line, name ? name : "?");
        else if (f->kind == TRACE_FRAME_SPECIAL)
                snprintf(buf, len, "%s", name ? name : "?");
        else if (f->first_line >= 0)
                snprintf(buf, len, "%s (%s:%d)", name ? name : "?", file, (int)f->first_line);
        else
                snprintf(buf, len, "%s (%s)", name ? name : "?", file);
        return buf;
}
