/*
 * cmd_report.c - `pyflame-report [report]`, the views of the samples of a
 * trace: folded stacks (the default), the --by-line and --by-function
 * hotspot tables, and --slices, the top functions of consecutive time
 * slices (where a recording changes phase).
 *
 * Each view is a row of a table and a thin function over aggregate.c: the
 * command parses options, opens the trace, resolves the selection, counts
 * samples per stack in one library pass, hands the counts to the view, and
 * writes the view's buffered output only when everything succeeded.
 *
 * Folded lines are sorted bytewise by their text (not by count): the order
 * is then independent of the selection, so two reports diff line by line,
 * and flamegraph.pl sorts the same way. Samples of a thread with no Python
 * frame are kept, as the single pseudo frame "<no Python frame>", so that
 * widths are true shares of the samples; the tables count them in the
 * denominator and say how many there were.
 */
#include "report.h"
#include "export.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOP_DEFAULT        20
#define SLICES_TOP_DEFAULT 3
/* More slices than this is a table nobody reads, and memory for nothing. */
#define SLICES_MAX 100000
/* Width of the bar of the dominant function's share in the text view of slices. */
#define SLICE_BAR_WIDTH 20

struct report_opts {
        struct select_opts select;
        const struct view *view;
        enum out_format format;
        const char *export_format; /* one of EXPORT_FORMATS, or NULL */
        struct export_options export;
        size_t top;
        bool top_given;
        bool no_source;
        int64_t slice_ns; /* --slices */
        const char *output;
        const char *path;    /* the first input: messages name it */
        char *const *inputs; /* trace files, directories or globs: one recording */
        size_t n_inputs;
};

/* What a view gets: the open trace, the selection's counts, the options, the output. */
struct view_ctx {
        struct trace_reader *r;
        const char *path;
        const struct trace_filter *filter;
        const struct stack_counts *sc;
        const struct report_opts *opts;
        struct out *out;
        uint64_t slices_total; /* samples the slices view counted itself */
};

struct view {
        const char *name;
        /*
         * Returns 0, a negative trace_status (the caller reports it), or
         * REPORT_EXIT_FAIL once it has printed a message of its own.
         */
        int (*render)(struct view_ctx *ctx);
        bool table;  /* csv is offered, and --top applies */
        bool counts; /* built on the samples per stack (ctx->sc), counted first */
};

static double percent(uint64_t n, uint64_t total)
{
        return total ? 100.0 * (double)n / (double)total : 0.0;
}

/* ---- folded ---- */

static void json_frame(struct out *o, const struct trace_frame *f)
{
        out_puts(o, "{\"function\": ");
        out_json_string(o, f->function);
        out_puts(o, ", \"qualname\": ");
        out_json_string(o, f->qualname);
        out_puts(o, ", \"file\": ");
        out_json_string(o, f->file);
        out_puts(o, f->line >= 0 ? ", \"line\": " : ", \"line\": null");
        if (f->line >= 0)
                out_printf(o, "%d", (int)f->line);
        out_puts(o, f->first_line >= 0 ? ", \"first_line\": " : ", \"first_line\": null");
        if (f->first_line >= 0)
                out_printf(o, "%d", (int)f->first_line);
        static const char *const kinds[] = {"python", "native", "special"};
        unsigned k = (unsigned)f->kind;
        out_puts(o, ", \"kind\": ");
        out_json_string(o, k < 3 ? kinds[k] : "unknown");
        out_puts(o, "}");
}

/*
 * Folded stacks as JSON: a table of the frames used (in frame id order) and
 * the stacks as lists of indexes into it, root first, in the order of the
 * folded text. The shape of speedscope's "sampled" profiles.
 */
static int folded_json(struct view_ctx *ctx, const struct folded_set *fs)
{
        const struct trace_reader *r = ctx->r;
        struct out *o = ctx->out;
        uint32_t n_frames = trace_reader_frame_count(r);
        uint32_t *index = calloc((size_t)n_frames + 1, sizeof(*index));
        uint32_t *ids = NULL;
        size_t cap = 0;
        int rc = 0;
        if (!index)
                return TRACE_ERR_NOMEM;
        for (size_t i = 0; i < fs->n; i++) {
                uint32_t depth = trace_reader_stack_depth(r, fs->lines[i].stack);
                if (depth > cap) {
                        uint32_t *p = reallocarray(ids, depth, sizeof(*p));
                        if (!p) {
                                rc = TRACE_ERR_NOMEM;
                                goto out;
                        }
                        ids = p;
                        cap = depth;
                }
                int n = depth ? trace_reader_stack_frames(r, fs->lines[i].stack, ids, cap) : 0;
                if (n < 0 || (uint32_t)n != depth) {
                        rc = n < 0 ? n : TRACE_ERR_CORRUPT;
                        goto out;
                }
                for (int j = 0; j < n; j++)
                        if (ids[j] >= 1 && ids[j] <= n_frames)
                                index[ids[j]] = 1;
        }
        out_printf(o, "{\"view\": \"folded\", \"samples\": %llu, \"frames\": [",
                   (unsigned long long)ctx->sc->total);
        uint32_t next = 0;
        for (uint32_t id = 1; id <= n_frames; id++) {
                if (!index[id])
                        continue;
                struct trace_frame f;
                if ((rc = trace_reader_frame(r, id, &f)) < 0)
                        goto out;
                out_puts(o, next ? ",\n  " : "\n  ");
                json_frame(o, &f);
                index[id] = ++next;
        }
        out_puts(o, next ? "\n], \"stacks\": [" : "], \"stacks\": [");
        for (size_t i = 0; i < fs->n; i++) {
                int n = fs->lines[i].stack == TRACE_STACK_EMPTY
                            ? 0
                            : trace_reader_stack_frames(r, fs->lines[i].stack, ids, cap);
                if (n < 0) {
                        rc = n;
                        goto out;
                }
                out_puts(o, i ? ",\n  {\"frames\": [" : "\n  {\"frames\": [");
                for (int j = 0; j < n; j++)
                        out_printf(o, j ? ", %u" : "%u", (unsigned)(index[ids[j]] - 1));
                out_printf(o, "], \"count\": %llu}", (unsigned long long)fs->lines[i].count);
        }
        out_puts(o, fs->n ? "\n]}\n" : "]}\n");
out:
        free(index);
        free(ids);
        return rc;
}

static int view_folded(struct view_ctx *ctx)
{
        struct folded_set fs;
        int rc = folded_build(ctx->r, ctx->sc, &fs);
        if (rc < 0)
                return rc;
        if (ctx->opts->format == OUT_JSON) {
                rc = folded_json(ctx, &fs);
        } else {
                for (size_t i = 0; i < fs.n; i++) {
                        out_write(ctx->out, fs.lines[i].text, fs.lines[i].len);
                        out_printf(ctx->out, " %llu\n", (unsigned long long)fs.lines[i].count);
                }
        }
        folded_free(&fs);
        return rc;
}

/* ---- hotspot tables ---- */

static const struct table_column line_columns[] = {
    {"SELF", "self", TABLE_COUNT, 0},
    {"SELF%", "self_pct", TABLE_DECIMAL, 0},
    {"TOTAL", "total", TABLE_COUNT, 0},
    {"TOTAL%", "total_pct", TABLE_DECIMAL, 0},
    {"LOCATION", "location", TABLE_TEXT, TABLE_TEXT_ONLY},
    {"FILE", "file", TABLE_TEXT, TABLE_DATA_ONLY},
    {"LINE", "line", TABLE_INT, TABLE_DATA_ONLY},
    {"FUNCTION", "function", TABLE_TEXT, 0},
    {"SOURCE", "source", TABLE_TEXT, 0},
};

static const struct table_column function_columns[] = {
    {"SELF", "self", TABLE_COUNT, 0},
    {"SELF%", "self_pct", TABLE_DECIMAL, 0},
    {"TOTAL", "total", TABLE_COUNT, 0},
    {"TOTAL%", "total_pct", TABLE_DECIMAL, 0},
    {"FUNCTION", "function", TABLE_TEXT, 0},
    {"LOCATION", "location", TABLE_TEXT, TABLE_TEXT_ONLY},
    {"FILE", "file", TABLE_TEXT, TABLE_DATA_ONLY},
    {"FIRST_LINE", "first_line", TABLE_INT, TABLE_DATA_ONLY},
};

#define N_COLUMNS(a) (sizeof(a) / sizeof((a)[0]))

/*
 * "file:line", "file:?" when the line is unknown, "-" for a frame with no
 * file (pyflame's pseudo frames). Owned by the table.
 */
static const char *location(struct table *t, const char *file, int32_t line)
{
        if (!file || !*file)
                return "-";
        if (line < 0)
                return table_printf(t, "%s:?", file ? file : "");
        return table_printf(t, "%s:%d", file ? file : "", (int)line);
}

static int view_hot(struct view_ctx *ctx, enum hot_key key)
{
        const struct report_opts *opts = ctx->opts;
        bool by_line = key == HOT_BY_LINE;
        struct hot_table ht = {0};
        int rc = hot_table_build(ctx->r, ctx->sc, key, &ht);
        if (rc < 0)
                return rc;
        struct table t = {
            .cols = by_line ? line_columns : function_columns,
            .n_cols = by_line ? N_COLUMNS(line_columns) : N_COLUMNS(function_columns),
        };
        struct srcline_cache *src = NULL;
        if (by_line && !opts->no_source && !(src = srcline_cache_new(ctx->r))) {
                hot_table_free(&ht);
                return TRACE_ERR_NOMEM;
        }
        uint64_t total = ctx->sc->total;
        size_t shown = opts->top && opts->top < ht.n ? opts->top : ht.n;
        for (size_t i = 0; i < shown; i++) {
                const struct hot_row *row = &ht.rows[i];
                struct table_cell *c = table_add_row(&t);
                if (!c)
                        break;
                int32_t line = by_line ? row->f.line : row->f.first_line;
                c[0].num = (int64_t)row->self;
                c[1].real = percent(row->self, total);
                c[2].num = (int64_t)row->total;
                c[3].real = percent(row->total, total);
                size_t k = by_line ? 4 : 5;
                c[k].text = location(&t, row->f.file, line);
                c[k + 1].text = row->f.file;
                c[k + 2].num = line;
                c[k + 2].null = line < 0;
                c[by_line ? 7 : 4].text = frame_name(&row->f);
                if (by_line) {
                        char *s = src ? srcline_get(src, row->f.file, line) : NULL;
                        c[8].text = s ? table_own(&t, s) : NULL;
                        c[8].null = !s;
                }
        }
        const char *what = by_line ? "lines" : "functions";
        struct out *o = ctx->out;
        if (opts->format == OUT_JSON) {
                out_printf(o,
                           "{\"view\": \"%s\", \"samples\": %llu, \"no_python_frame\": %llu, "
                           "\"rows_total\": %zu, \"rows\": ",
                           by_line ? "by-line" : "by-function", (unsigned long long)total,
                           (unsigned long long)ht.no_frame, ht.n);
                table_write(&t, OUT_JSON, o);
                out_puts(o, "}\n");
        } else if (opts->format == OUT_CSV) {
                table_write(&t, OUT_CSV, o);
        } else {
                out_printf(o, "%llu samples", (unsigned long long)total);
                if (ht.no_frame)
                        out_printf(o, " (%llu with no Python frame)",
                                   (unsigned long long)ht.no_frame);
                if (shown < ht.n)
                        out_printf(o, "; top %zu of %zu %s\n", shown, ht.n, what);
                else
                        out_printf(o, "; %zu %s\n", ht.n, what);
                table_write(&t, OUT_TEXT, o);
                if (trace_reader_gap_count(ctx->r))
                        out_puts(o, "Files of the set are missing: slices marked gap lie (in part) "
                                    "where no file covers (see info).\n");
        }
        if (t.nomem)
                rc = TRACE_ERR_NOMEM;
        else if (srcline_status(src) < 0)
                rc = srcline_status(src);
        table_free(&t);
        srcline_cache_free(src);
        hot_table_free(&ht);
        return rc;
}

static int view_by_line(struct view_ctx *ctx)
{
        return view_hot(ctx, HOT_BY_LINE);
}

static int view_by_function(struct view_ctx *ctx)
{
        return view_hot(ctx, HOT_BY_FUNCTION);
}

/*
 * The exporters (export.h) draw or convert the selected samples themselves,
 * into the command's output, committed like any view's.
 */
static int view_export(struct view_ctx *ctx)
{
        char err[512] = "";
        int rc = export_to(ctx->r, ctx->filter, ctx->opts->export_format, &ctx->opts->export,
                           ctx->out, err, sizeof(err));
        /* The exporter's message is more precise than what the status alone says. */
        if (rc < 0 && *err)
                return report_fail(ctx->path, "%s", err);
        return rc;
}

/* ---- time slices ---- */

/*
 * The `top` rows with the most self samples in one slice, most first, as
 * indexes into the hot table; returns how many (rows with no sample are
 * left out). Rows are in the whole selection's order, so ties keep it.
 */
static size_t slice_top(const uint64_t *self, size_t n_rows, size_t top, size_t *best)
{
        size_t n = 0;
        for (size_t i = 0; i < n_rows && top; i++) {
                if (!self[i] || (n == top && self[i] <= self[best[top - 1]]))
                        continue;
                size_t j = n < top ? n++ : top - 1;
                while (j > 0 && self[best[j - 1]] < self[i]) {
                        best[j] = best[j - 1];
                        j--;
                }
                best[j] = i;
        }
        return n;
}

static const struct table_column slice_text_columns[] = {
    {"FROM_S", NULL, TABLE_SECONDS, 0}, {"TO_S", NULL, TABLE_SECONDS, 0},
    {"SAMPLES", NULL, TABLE_COUNT, 0},  {"CPU%", NULL, TABLE_DECIMAL, 0},
    {"SHARE%", NULL, TABLE_DECIMAL, 0}, {"BAR", NULL, TABLE_TEXT, 0},
    {"DOMINANT", NULL, TABLE_TEXT, 0},  {"NEXT", NULL, TABLE_TEXT, 0},
};

static const struct table_column slice_data_columns[] = {
    {"FROM_S", "from_s", TABLE_SECONDS, 0}, {"TO_S", "to_s", TABLE_SECONDS, 0},
    {"SAMPLES", "samples", TABLE_COUNT, 0}, {"SEEN", "seen", TABLE_COUNT, 0},
    {"ON_CPU", "on_cpu", TABLE_COUNT, 0},   {"ON_CPU%", "on_cpu_pct", TABLE_DECIMAL, 0},
    {"RANK", "rank", TABLE_INT, 0},         {"FUNCTION", "function", TABLE_TEXT, 0},
    {"FILE", "file", TABLE_TEXT, 0},        {"FIRST_LINE", "first_line", TABLE_INT, 0},
    {"SELF", "self", TABLE_COUNT, 0},       {"SELF%", "self_pct", TABLE_DECIMAL, 0},
    {"GAP", "gap", TABLE_INT, 0},
};
/* The last column: 1 when the slice overlaps time no file of the set covers. */
#define SLICE_GAP_COLUMN (N_COLUMNS(slice_data_columns) - 1)

/* What every row of the slices view needs. */
struct slice_view {
        const struct trace_reader *r;
        const struct slice_counts *sc;
        const struct hot_table *ht;
        int64_t end_ns;
        /* The slice being shown: its counts per row and its top rows. */
        uint32_t i;
        const uint64_t *self;
        const size_t *best;
        size_t n_best;
        size_t dominant; /* the previous slice's top row; SIZE_MAX before any */
};

static int64_t slice_start(const struct slice_view *v)
{
        return v->sc->from_ns + (int64_t)v->i * v->sc->slice_ns;
}

static int64_t slice_end(const struct slice_view *v)
{
        int64_t e = slice_start(v) + v->sc->slice_ns;
        return e < v->end_ns ? e : v->end_ns;
}

/* Does the slice overlap a gap of a set read with files missing (trace_reader_gap_at)? */
static bool slice_in_gap(const struct slice_view *v)
{
        uint32_t n = trace_reader_gap_count(v->r);
        for (uint32_t i = 0; i < n; i++) {
                struct trace_gap g;
                if (trace_reader_gap_at(v->r, i, &g) == 0 && g.from_ns < slice_end(v) &&
                    g.to_ns > slice_start(v))
                        return true;
        }
        return false;
}

static double slice_share(const struct slice_view *v, size_t k)
{
        return percent(v->self[v->best[k]], v->sc->samples[v->i]);
}

/* One line per slice: its dominant function's share as a bar, then the next ones. */
static void slice_text_row(struct slice_view *v, struct table *t)
{
        const struct slice_counts *sc = v->sc;
        struct table_cell *c = table_add_row(t);
        if (!c)
                return;
        c[0].num = slice_start(v);
        c[1].num = slice_end(v);
        c[2].num = (int64_t)sc->samples[v->i];
        c[3].real = percent(sc->on_cpu[v->i], sc->seen[v->i]);
        c[3].null = !sc->seen[v->i];
        c[4].null = !v->n_best;
        /* Time no file covers is shown as such, never as a quiet slice. */
        bool gap = slice_in_gap(v);
        if (!v->n_best) {
                if (gap)
                        c[5].text = table_printf(t, "%s", "(gap: file missing)");
                return;
        }
        double share = slice_share(v, 0);
        c[4].real = share;
        char bar[SLICE_BAR_WIDTH + 1];
        int full = (int)(share / 100.0 * SLICE_BAR_WIDTH + 0.5);
        for (int k = 0; k < SLICE_BAR_WIDTH; k++)
                bar[k] = k < full ? '#' : '.';
        bar[SLICE_BAR_WIDTH] = '\0';
        c[5].text = table_printf(t, "%s", bar);
        /* '*' marks a slice whose dominant function is not the previous slice's. */
        bool changed = v->dominant != SIZE_MAX && v->dominant != v->best[0];
        v->dominant = v->best[0];
        c[6].text =
            table_printf(t, "%s%s", changed ? "* " : "  ", frame_name(&v->ht->rows[v->best[0]].f));
        struct pf_buf next = {0};
        bool nomem = false;
        for (size_t k = 1; k < v->n_best; k++) {
                char item[320];
                snprintf(item, sizeof(item), "%s%s %.1f%%", k > 1 ? ", " : "",
                         frame_name(&v->ht->rows[v->best[k]].f), slice_share(v, k));
                nomem |= pf_buf_append(&next, item, strlen(item)) < 0;
        }
        if (gap)
                nomem |= pf_buf_append(&next, " [partly in a gap]", 18) < 0;
        nomem |= pf_buf_append(&next, "", 1) < 0;
        if (nomem) {
                pf_buf_free(&next);
                t->nomem = true;
                return;
        }
        c[7].text = table_own(t, (char *)next.data);
}

/*
 * CSV, long form for plotting: one row per slice and rank (a slice with no
 * sample: one row), each saying whether the slice lies (in part) in a gap.
 */
static void slice_data_rows(struct slice_view *v, struct table *t)
{
        const struct slice_counts *sc = v->sc;
        bool gap = slice_in_gap(v);
        for (size_t k = 0; k < (v->n_best ? v->n_best : 1); k++) {
                struct table_cell *c = table_add_row(t);
                if (!c)
                        return;
                c[SLICE_GAP_COLUMN].num = gap;
                c[0].num = slice_start(v);
                c[1].num = slice_end(v);
                c[2].num = (int64_t)sc->samples[v->i];
                c[3].num = (int64_t)sc->seen[v->i];
                c[4].num = (int64_t)sc->on_cpu[v->i];
                c[5].real = percent(sc->on_cpu[v->i], sc->seen[v->i]);
                c[5].null = !sc->seen[v->i];
                if (!v->n_best) {
                        for (size_t j = 6; j < SLICE_GAP_COLUMN; j++)
                                c[j].null = true;
                        return;
                }
                const struct trace_frame *f = &v->ht->rows[v->best[k]].f;
                c[6].num = (int64_t)k + 1;
                c[7].text = frame_name(f);
                c[8].text = f->file;
                c[9].num = f->first_line;
                c[9].null = f->first_line < 0;
                c[10].num = (int64_t)v->self[v->best[k]];
                c[11].real = slice_share(v, k);
        }
}

static void slice_json(struct slice_view *v, struct out *o)
{
        const struct slice_counts *sc = v->sc;
        uint32_t i = v->i;
        out_printf(o,
                   "%s\n  {\"from_s\": %.3f, \"to_s\": %.3f, \"samples\": %llu, \"seen\": %llu, "
                   "\"on_cpu\": %llu, \"on_cpu_pct\": ",
                   i ? "," : "", (double)slice_start(v) / 1e9, (double)slice_end(v) / 1e9,
                   (unsigned long long)sc->samples[i], (unsigned long long)sc->seen[i],
                   (unsigned long long)sc->on_cpu[i]);
        if (sc->seen[i])
                out_printf(o, "%.2f", percent(sc->on_cpu[i], sc->seen[i]));
        else
                out_puts(o, "null");
        if (slice_in_gap(v))
                out_puts(o, ", \"gap\": true");
        out_puts(o, ", \"top\": [");
        for (size_t k = 0; k < v->n_best; k++) {
                const struct trace_frame *f = &v->ht->rows[v->best[k]].f;
                out_puts(o, k ? ", {\"function\": " : "{\"function\": ");
                out_json_string(o, frame_name(f));
                out_puts(o, ", \"file\": ");
                out_json_string(o, f->file);
                if (f->first_line >= 0)
                        out_printf(o, ", \"first_line\": %d", (int)f->first_line);
                else
                        out_puts(o, ", \"first_line\": null");
                out_printf(o, ", \"self\": %llu, \"self_pct\": %.2f}",
                           (unsigned long long)v->self[v->best[k]], slice_share(v, k));
        }
        out_puts(o, "]}");
}

/*
 * --slices: the selection cut into consecutive slices of one duration from
 * its start (--from, or the recording's start) to its end (--to, or the
 * end of the recording). Counted in one pass (slice_counts_build), ranked
 * per slice on the rows of the whole selection's function table, so a
 * function has one name and identity across all slices.
 */
static int view_slices(struct view_ctx *ctx)
{
        const struct report_opts *opts = ctx->opts;
        struct trace_summary sum;
        int rc = trace_reader_summary(ctx->r, &sum);
        if (rc < 0)
                return rc;
        int64_t from = ctx->filter->from_ns;
        int64_t end = select_end_ns(ctx->r, ctx->filter, &sum);
        if (end <= from)
                end = from + 1;
        int64_t span = end - from, slice = opts->slice_ns;
        uint64_t n = (uint64_t)(span / slice) + (span % slice != 0);
        if (n > SLICES_MAX)
                return report_fail(ctx->path,
                                   "%llu slices of %.3f s are too many (at most %d): give "
                                   "--slices a longer duration",
                                   (unsigned long long)n, (double)slice / 1e9, SLICES_MAX);
        struct slice_counts sc = {0};
        struct hot_table ht = {0};
        uint64_t *self = NULL, *total = NULL;
        size_t *best = NULL;
        struct table t = {0};
        if ((rc = slice_counts_build(ctx->r, ctx->filter, from, slice, (uint32_t)n, &sc)) < 0 ||
            (rc = hot_table_build(ctx->r, &sc.all, HOT_BY_FUNCTION, &ht)) < 0)
                goto out;
        size_t top = opts->top_given ? opts->top : SLICES_TOP_DEFAULT;
        if (top == 0 || top > ht.n)
                top = ht.n;
        self = calloc(ht.n ? ht.n : 1, sizeof(*self));
        total = calloc(ht.n ? ht.n : 1, sizeof(*total));
        best = calloc(top ? top : 1, sizeof(*best));
        if (!self || !total || !best) {
                rc = TRACE_ERR_NOMEM;
                goto out;
        }
        struct slice_view v = {.r = ctx->r,
                               .sc = &sc,
                               .ht = &ht,
                               .end_ns = end,
                               .self = self,
                               .best = best,
                               .dominant = SIZE_MAX};
        struct out *o = ctx->out;
        bool text = opts->format == OUT_TEXT;
        t.cols = text ? slice_text_columns : slice_data_columns;
        t.n_cols = text ? N_COLUMNS(slice_text_columns) : N_COLUMNS(slice_data_columns);
        if (opts->format == OUT_JSON)
                out_printf(o,
                           "{\"view\": \"slices\", \"slice_s\": %.3f, \"from_s\": %.3f, "
                           "\"to_s\": %.3f, \"samples\": %llu, \"slices\": [",
                           (double)slice / 1e9, (double)from / 1e9, (double)end / 1e9,
                           (unsigned long long)sc.all.total);
        for (uint32_t i = 0; i < sc.n_slices; i++) {
                memset(self, 0, ht.n * sizeof(*self));
                memset(total, 0, ht.n * sizeof(*total));
                if ((rc = hot_table_count(&ht, ctx->r, sc.entries + sc.first[i],
                                          sc.first[i + 1] - sc.first[i], self, total)) < 0)
                        goto out;
                v.i = i;
                v.n_best = slice_top(self, ht.n, top, best);
                if (text)
                        slice_text_row(&v, &t);
                else if (opts->format == OUT_CSV)
                        slice_data_rows(&v, &t);
                else
                        slice_json(&v, o);
        }
        if (opts->format == OUT_JSON) {
                out_puts(o, sc.n_slices ? "\n]}\n" : "]}\n");
        } else if (opts->format == OUT_CSV) {
                table_write(&t, OUT_CSV, o);
        } else {
                out_printf(o,
                           "%llu samples in %u slices of %.3f s. Per slice: the share of its "
                           "samples on CPU, its dominant function by self samples (* where "
                           "that changes), the next %zu.\n",
                           (unsigned long long)sc.all.total, sc.n_slices, (double)slice / 1e9,
                           top ? top - 1 : 0);
                table_write(&t, OUT_TEXT, o);
        }
        if (t.nomem)
                rc = TRACE_ERR_NOMEM;
        ctx->slices_total = sc.all.total;
out:
        table_free(&t);
        free(self);
        free(total);
        free(best);
        hot_table_free(&ht);
        slice_counts_free(&sc);
        return rc;
}

enum { VIEW_FOLDED, VIEW_BY_LINE, VIEW_BY_FUNCTION, VIEW_EXPORT, VIEW_SLICES };

static const struct view views[] = {
    [VIEW_FOLDED] = {"folded", view_folded, false, true},
    [VIEW_BY_LINE] = {"by-line", view_by_line, true, true},
    [VIEW_BY_FUNCTION] = {"by-function", view_by_function, true, true},
    [VIEW_EXPORT] = {"export", view_export, false, false},
    [VIEW_SLICES] = {"slices", view_slices, true, false},
};

/* ---- the command ---- */

void cmd_report_help(void)
{
        printf("Usage: " REPORT_PROG " [report] [OPTIONS] TRACE...\n"
               "Print the samples of a trace as folded stacks (the default) or as a\n"
               "table of hot lines or functions. Several files, a directory or a glob of\n"
               "one rotating recording (pyflame-record's rotation) are read as one, in time\n"
               "order (files missing between them are gaps: see info and --slices).\n"
               "\n"
               "Views:\n"
               "      --folded           one 'frame;frame;... count' line per stack, root\n"
               "                         first, sorted by text (for flamegraph.pl, speedscope)\n"
               "      --by-line          hot lines: self and total samples, source text\n"
               "      --by-function      hot functions: self and total samples\n"
               "      --slices DURATION  consecutive time slices (1s, 500ms): samples, share\n"
               "                         on CPU and the top functions of each, to see phases\n"
               "      --top N            rows of a table to show (default %d, 0 for all);\n"
               "                         with --slices, functions per slice (default %d)\n"
               "      --no-source        --by-line without the source text\n"
               "      --source FILE      annotate FILE: its source with each line's share of\n"
               "                         the samples ('" REPORT_PROG " annotate --help')\n"
               "      --format FORMAT    text, csv or json (folded stacks: text or json);\n"
               "                         or draw or convert the samples: " EXPORT_FORMATS "\n"
               "      --title TEXT       title of an svg or html flame graph\n"
               "      --icicle           svg, html: draw the root at the top\n"
               "  -o, --output FILE      write to FILE (replaced only once complete)\n"
               "\n"
               "Selection (any view):\n"
               "      --from TIME        from TIME after the start: 1.5s, 200ms, 10%%\n"
               "      --to TIME          up to TIME after the start (same units)\n"
               "      --since WHEN       from a wall-clock time: 2026-12-01T22:00:00Z (UTC,\n"
               "                         or with an offset such as +01:00), or -1h, -10m:\n"
               "                         that long before the end of the recording\n"
               "      --until WHEN       up to a wall-clock time (same forms)\n"
               "      --pid PID[,PID..]  only these processes\n"
               "      --thread T[,T..]   only these threads, each an OS thread id, a Python\n"
               "                         thread id or a thread name\n"
               "      --idle             include samples of threads that were not on CPU\n"
               "      --gil              only samples of threads holding the GIL\n"
               "      --async            the samples of asyncio tasks instead (recorded with\n"
               "                         pyflame-record --async): each live task counts once\n"
               "                         a sample, in the stack of awaits it waits in\n"
               "      --no-native        leave out native frames (of traces with native stacks)\n"
               "      --native-modules   show native code as one frame per module (shared\n"
               "                         object) and run of calls in it\n"
               "\n"
               "  -h, --help             this help\n"
               "\n"
               "Exit status: 0 on success, 2 on a usage error or a trace that cannot be read.\n",
               TOP_DEFAULT, SLICES_TOP_DEFAULT);
}

enum {
        OPT_FOLDED = 256,
        OPT_BY_LINE,
        OPT_BY_FUNCTION,
        OPT_TOP,
        OPT_NO_SOURCE,
        OPT_FORMAT,
        OPT_TITLE,
        OPT_ICICLE,
        OPT_SLICES,
        OPT_SOURCE,
};

static const struct option long_options[] = {
    {"folded", no_argument, NULL, OPT_FOLDED},
    {"by-line", no_argument, NULL, OPT_BY_LINE},
    {"by-function", no_argument, NULL, OPT_BY_FUNCTION},
    {"top", required_argument, NULL, OPT_TOP},
    {"no-source", no_argument, NULL, OPT_NO_SOURCE},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"output", required_argument, NULL, 'o'},
    SELECT_WINDOW_OPTIONS,
    SELECT_LONG_OPTIONS,
    {"title", required_argument, NULL, OPT_TITLE},
    {"icicle", no_argument, NULL, OPT_ICICLE},
    {"slices", required_argument, NULL, OPT_SLICES},
    {"source", required_argument, NULL, OPT_SOURCE},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* parse_args() found --source: the arguments are the annotate command's. */
#define PARSE_ANNOTATE 3

/*
 * One option of getopt's, c (its argument in optarg); a view option sets
 * *chosen. Returns 0, 1 when --help was printed, PARSE_ANNOTATE, or
 * REPORT_EXIT_FAIL.
 */
static int report_option(struct report_opts *o, int c, char **argv, const struct view **chosen)
{
        switch (c) {
        case OPT_SLICES:
        case OPT_FOLDED:
        case OPT_BY_LINE:
        case OPT_BY_FUNCTION: {
                bool pct = false;
                if (c == OPT_SLICES && (pf_parse_duration(optarg, &o->slice_ns, &pct) < 0 || pct ||
                                        o->slice_ns < 1000000))
                        return report_usage(NULL,
                                            "--slices: '%s' is not a duration of 1ms or "
                                            "more, such as 1s or 500ms",
                                            optarg);
                const struct view *v = &views[c == OPT_FOLDED    ? VIEW_FOLDED
                                              : c == OPT_BY_LINE ? VIEW_BY_LINE
                                              : c == OPT_SLICES  ? VIEW_SLICES
                                                                 : VIEW_BY_FUNCTION];
                if (*chosen && *chosen != v)
                        return report_usage(NULL,
                                            "--%s and --%s are different views; "
                                            "pick one",
                                            (*chosen)->name, v->name);
                *chosen = v;
                break;
        }
        case OPT_TOP: {
                char *end;
                errno = 0;
                unsigned long long v = strtoull(optarg, &end, 10);
                if (errno || end == optarg || *end || optarg[0] == '-' || v > SIZE_MAX)
                        return report_usage(NULL,
                                            "--top: '%s' is not a number of rows "
                                            "(0 shows all)",
                                            optarg);
                o->top = (size_t)v;
                o->top_given = true;
                break;
        }
        case OPT_NO_SOURCE:
                o->no_source = true;
                break;
        case OPT_SOURCE:
                return PARSE_ANNOTATE;
        case OPT_FORMAT:
                if (!strcmp(optarg, "folded"))
                        optarg = "text";
                o->export_format = NULL;
                if (export_format_known(optarg))
                        o->export_format = optarg;
                else if (out_format_parse(optarg, &o->format) < 0)
                        return report_usage(NULL,
                                            "--format: '%s' is not text, csv, json, "
                                            "or one of " EXPORT_FORMATS,
                                            optarg);
                break;
        case OPT_TITLE:
                o->export.title = optarg;
                break;
        case OPT_ICICLE:
                o->export.icicle = true;
                break;
        case 'o':
                o->output = optarg;
                break;
        case 'h':
                cmd_report_help();
                return 1;
        default:
                return report_bad_option(NULL, c, argv);
        }
        return 0;
}

/* The trace, and what the options mean together. Returns 0 or REPORT_EXIT_FAIL. */
static int report_check(struct report_opts *o, const struct view *chosen, int argc, char **argv)
{
        if (chosen)
                o->view = chosen;
        if (o->export_format) {
                if (chosen && chosen != &views[VIEW_FOLDED])
                        return report_usage(NULL,
                                            "--format %s draws the samples; it does not "
                                            "combine with --%s",
                                            o->export_format, chosen->name);
                o->view = &views[VIEW_EXPORT];
        }
        bool drawn = o->export_format &&
                     (!strcmp(o->export_format, "svg") || !strcmp(o->export_format, "html"));
        if ((o->export.title || o->export.icicle) && !drawn)
                return report_usage(NULL, "--title and --icicle apply to --format svg and html");
        if (o->export_format && !strcmp(o->export_format, "pprof") && !o->output &&
            isatty(STDOUT_FILENO))
                return report_usage(NULL, "pprof output is binary (gzip): give -o FILE or "
                                          "redirect it");
        if (optind >= argc)
                return report_usage(NULL, "no trace file given");
        o->path = argv[optind];
        o->inputs = argv + optind;
        o->n_inputs = (size_t)(argc - optind);
        if (!o->view->table && !o->export_format && o->format == OUT_CSV)
                return report_usage(NULL, "folded stacks come as text or json, not csv; "
                                          "csv is for --by-line and --by-function");
        if (!o->view->table && o->top_given)
                return report_usage(NULL, "--top applies to --by-line and --by-function");
        if (o->no_source && o->view != &views[VIEW_BY_LINE])
                return report_usage(NULL, "--no-source applies to --by-line");
        return select_opts_check(&o->select, NULL);
}

/*
 * Parse the command line into *o. Returns 0, 1 when --help was printed,
 * PARSE_ANNOTATE, or REPORT_EXIT_FAIL after a usage message.
 */
static int parse_args(int argc, char **argv, struct report_opts *o)
{
        o->view = &views[VIEW_FOLDED];
        o->top = TOP_DEFAULT;
        const struct view *chosen = NULL;
        opterr = 0;
        optind = 1;
        for (;;) {
                int c = getopt_long(argc, argv, ":ho:", long_options, NULL);
                if (c == -1)
                        break;
                int rc = select_opts_parse(&o->select, c, optarg);
                if (rc == 1)
                        continue;
                if (rc == 0)
                        rc = report_option(o, c, argv, &chosen);
                if (rc)
                        return rc;
        }
        return report_check(o, chosen, argc, argv);
}

int cmd_report(int argc, char **argv)
{
        struct report_opts o = {0};
        int rc = parse_args(argc, argv, &o);
        if (rc) {
                select_opts_free(&o.select);
                if (rc == PARSE_ANNOTATE)
                        return cmd_annotate(argc, argv);
                return rc == 1 ? REPORT_EXIT_OK : rc;
        }
        struct trace_reader *r = NULL;
        struct select sel = {0};
        struct stack_counts sc = {0};
        struct out out = {0};
        if ((rc = report_open_inputs(o.inputs, o.n_inputs, o.output, &r)) != 0)
                goto done;
        if ((rc = select_resolve(r, o.path, &o.select, &sel)) != 0)
                goto done;
        uint64_t counted = 0;
        int st = o.view->counts ? stack_counts_build(r, &sel.filter, &sc) : 0;
        if (st == 0) {
                struct view_ctx ctx = {.r = r,
                                       .path = o.path,
                                       .filter = &sel.filter,
                                       .sc = &sc,
                                       .opts = &o,
                                       .out = &out};
                st = o.view->render(&ctx);
                counted = o.view->counts ? sc.total : ctx.slices_total;
        }
        if (st != 0) {
                rc = st > 0 ? st : report_read_failed(o.path, r, st);
                goto done;
        }
        if (o.view != &views[VIEW_EXPORT] && counted == 0)
                report_fail(o.path, "note: no sample matches the selection%s",
                            o.select.idle ? "" : " (threads off CPU are left out; try --idle)");
        rc = out_commit(&out, o.output);
done:
        out_free(&out);
        stack_counts_free(&sc);
        select_free(&sel);
        trace_reader_close(r);
        select_opts_free(&o.select);
        return rc;
}
