/*
 * export_html.c - `--format html`: one self-contained page (inline CSS and
 * script, no network, works offline) with
 *   - the recording's details and the selection's totals;
 *   - the interactive flame graph of flame.c, with a search box;
 *   - a timeline: samples per time bucket stacked by on-CPU and idle, and
 *     one strip per thread (the busiest ones; the rest share a row);
 *   - per-function and per-line tables of self and total samples and their
 *     percentages.
 * The tables are computed here from the model's per-stack counts and the
 * stack tree: self goes to the top frame's row, total to every distinct row
 * on the stack once (a stamp per row holds the last stack that touched it,
 * so recursion never counts a sample twice and no total exceeds 100%).
 * The markup is also well-formed XML (void elements closed, the script in a
 * commented CDATA section), which keeps the page checkable by any parser.
 */
#include "flame.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HTML_MAX_ROWS        500u /* rows shown per table */
#define HTML_BUCKETS         120u /* timeline buckets at most */
#define HTML_THREAD_ROWS     16u  /* threads drawn on their own timeline row */
#define HTML_TIMELINE_WIDTH  1200.0
#define HTML_TIMELINE_HEIGHT 140.0
#define HTML_STRIP_HEIGHT    16.0
#define HTML_LABEL_WIDTH     220.0

/* ---- hotspot tables ---- */

struct hot_row {
        uint32_t frame;       /* the first frame id with this identity */
        struct trace_frame f; /* that frame, whose names are shown */
        uint64_t self, total;
        uint32_t stamp; /* last stack + 1 whose total included this row */
};

struct hot_table {
        struct hot_row *rows;
        uint32_t n;
        uint32_t *of_frame; /* frame id -> row */
};

static void hot_free(struct hot_table *t)
{
        free(t->rows);
        free(t->of_frame);
        *t = (struct hot_table){0};
}

/* Map every frame to its row: by (name, file, first_line) or by (file, line). */
static int hot_rows(struct ex_model *m, bool by_line, struct hot_table *t)
{
        uint32_t n_frames = trace_reader_frame_count(m->r);
        struct ex_map ids = {0};
        struct pf_buf key = {0};
        t->of_frame = calloc((size_t)n_frames + 1, sizeof(*t->of_frame));
        t->rows = calloc((size_t)n_frames + 1, sizeof(*t->rows));
        int rc = t->of_frame && t->rows ? 0 : TRACE_ERR_NOMEM;
        for (uint32_t fid = 1; rc == 0 && fid <= n_frames; fid++) {
                struct trace_frame f;
                int st = trace_reader_frame(m->r, fid, &f);
                if (st < 0) {
                        rc = st;
                        break;
                }
                const char *name = f.qualname && *f.qualname ? f.qualname : f.function;
                const char *file = f.file ? f.file : "";
                name = name ? name : "";
                key.len = 0;
                int32_t num = by_line ? f.line : f.first_line;
                if ((!by_line && pf_buf_append(&key, name, strlen(name) + 1) < 0) ||
                    pf_buf_append(&key, file, strlen(file) + 1) < 0 ||
                    pf_buf_append(&key, &num, sizeof(num)) < 0) {
                        rc = TRACE_ERR_NOMEM;
                        break;
                }
                uint32_t row;
                int added = ex_map_intern(&ids, key.data, key.len, &row);
                if (added < 0) {
                        rc = TRACE_ERR_NOMEM;
                        break;
                }
                if (added) {
                        t->rows[row].frame = fid;
                        t->rows[row].f = f;
                        t->rows[row].f.function = name;
                        t->rows[row].f.file = file;
                }
                t->of_frame[fid] = row;
        }
        t->n = ids.n;
        ex_map_free(&ids);
        pf_buf_free(&key);
        return rc;
}

static int hot_build(struct ex_model *m, bool by_line, struct hot_table *t)
{
        int rc = hot_rows(m, by_line, t);
        if (rc < 0)
                return rc == TRACE_ERR_NOMEM ? ex_fail(m, rc, "out of memory")
                                             : ex_fail_read(m, rc);
        for (uint32_t s = 1; s < m->n_stacks; s++) {
                uint64_t count = m->counts[s];
                if (!count)
                        continue;
                uint32_t cur = s, steps = trace_reader_stack_depth(m->r, s);
                bool top = true;
                /* Parents have smaller ids: the walk ends at the empty stack within depth steps. */
                for (uint32_t i = 0; i < steps && cur != TRACE_STACK_EMPTY; i++) {
                        uint32_t parent, frame;
                        int st = trace_reader_stack_node(m->r, cur, &parent, &frame);
                        if (st < 0)
                                return ex_fail_read(m, st);
                        if (parent >= cur || frame == 0 || frame > trace_reader_frame_count(m->r))
                                return ex_fail(m, TRACE_ERR_CORRUPT,
                                               "cannot read the trace: stack %u is damaged", cur);
                        struct hot_row *row = &t->rows[t->of_frame[frame]];
                        if (top)
                                row->self += count;
                        top = false;
                        if (row->stamp != s + 1) {
                                row->stamp = s + 1;
                                row->total += count;
                        }
                        cur = parent;
                }
        }
        return 0;
}

static int hot_cmp(const void *a, const void *b, void *ctx)
{
        const struct hot_table *t = ctx;
        const struct hot_row *x = &t->rows[*(const uint32_t *)a];
        const struct hot_row *y = &t->rows[*(const uint32_t *)b];
        if (x->self != y->self)
                return x->self > y->self ? -1 : 1;
        if (x->total != y->total)
                return x->total > y->total ? -1 : 1;
        return x->frame < y->frame ? -1 : x->frame > y->frame;
}

static void html_pct_cell(struct out *o, uint64_t n, uint64_t total)
{
        double pct = total ? 100.0 * (double)n / (double)total : 0;
        out_printf(o, "<td class=\"num\">%" PRIu64 "</td><td class=\"num\">%.2f%%</td>", n, pct);
}

static int html_table(struct out *o, struct ex_model *m, bool by_line)
{
        struct hot_table t = {0};
        int rc = hot_build(m, by_line, &t);
        uint32_t *order = rc == 0 ? malloc(((size_t)t.n + 1) * sizeof(*order)) : NULL;
        if (rc == 0 && !order)
                rc = ex_fail(m, TRACE_ERR_NOMEM, "out of memory");
        if (rc < 0) {
                hot_free(&t);
                return rc;
        }
        uint32_t n = 0;
        for (uint32_t i = 0; i < t.n; i++)
                if (t.rows[i].total)
                        order[n++] = i;
        qsort_r(order, n, sizeof(*order), hot_cmp, &t);

        const char *id = by_line ? "lines" : "functions";
        out_printf(o, "<section id=\"%s\">\n<h2>%s</h2>\n", id, by_line ? "Lines" : "Functions");
        out_printf(o, "<table class=\"hot sortable\" id=\"%s-table\">\n<thead><tr>", id);
        if (by_line)
                out_puts(o, "<th>Line</th><th>Function</th>");
        else
                out_puts(o, "<th>Function</th><th>File</th><th>First line</th>");
        out_puts(
            o,
            "<th class=\"num\">Self</th><th class=\"num\">Self %</th>"
            "<th class=\"num\">Total</th><th class=\"num\">Total %</th></tr></thead>\n<tbody>\n");
        for (uint32_t i = 0; i < n && i < HTML_MAX_ROWS; i++) {
                const struct hot_row *row = &t.rows[order[i]];
                const struct trace_frame *l = &row->f; /* function: the shown name */
                out_puts(o, "<tr>");
                if (by_line) {
                        out_puts(o, "<td class=\"loc\">");
                        out_xml_text(o, l->file);
                        if (l->line >= 0)
                                out_printf(o, ":%d", (int)l->line);
                        out_puts(o, "</td><td>");
                        out_xml_text(o, l->function);
                        out_puts(o, "</td>");
                } else {
                        out_puts(o, "<td>");
                        out_xml_text(o, l->function);
                        out_puts(o, "</td><td class=\"loc\">");
                        out_xml_text(o, l->file);
                        out_puts(o, "</td><td class=\"num\">");
                        if (l->first_line >= 0)
                                out_printf(o, "%d", (int)l->first_line);
                        out_puts(o, "</td>");
                }
                html_pct_cell(o, row->self, m->total);
                html_pct_cell(o, row->total, m->total);
                out_puts(o, "</tr>\n");
        }
        out_puts(o, "</tbody>\n</table>\n");
        if (n > HTML_MAX_ROWS)
                out_printf(o,
                           "<p class=\"note\">%u more rows with fewer samples are not shown.</p>\n",
                           n - HTML_MAX_ROWS);
        if (m->counts[TRACE_STACK_EMPTY])
                out_printf(o,
                           "<p class=\"note\">%" PRIu64
                           " samples had no Python frame and are in no row.</p>\n",
                           m->counts[TRACE_STACK_EMPTY]);
        out_puts(o, "</section>\n");
        free(order);
        hot_free(&t);
        return 0;
}

/* ---- timeline ---- */

struct tl_state {
        struct ex_model *m;
        int64_t lo, span;
        uint32_t buckets, max_ref;
        uint64_t *on_cpu, *idle; /* per bucket */
        uint32_t *per_thread;    /* (max_ref + 1) x buckets, or NULL when too many threads */
        uint64_t *thread_total;  /* per thread ref */
        int status;
};

static int tl_sample(void *ctx, const struct trace_sample *s)
{
        struct tl_state *c = ctx;
        if (s->thread == 0 || s->thread > c->max_ref) {
                c->status = ex_fail(c->m, TRACE_ERR_CORRUPT,
                                    "cannot read the trace: a sample refers to thread %u, which "
                                    "the trace does not hold (the file is damaged)",
                                    s->thread);
                return 1;
        }
        int64_t off = s->t_ns - c->lo;
        uint32_t b = 0;
        if (off > 0) {
                /* Exact in integers (a double puts 290 ms of 1 s in bucket 28 of 100). */
                uint64_t pos = (uint64_t)off <= UINT64_MAX / c->buckets
                                   ? (uint64_t)off * c->buckets / (uint64_t)c->span
                                   : (uint64_t)((double)off / (double)c->span * c->buckets);
                b = pos >= c->buckets ? c->buckets - 1 : (uint32_t)pos;
        }
        if (s->state & TRACE_STATE_ON_CPU)
                c->on_cpu[b]++;
        else
                c->idle[b]++;
        c->thread_total[s->thread]++;
        if (c->per_thread && c->per_thread[(size_t)s->thread * c->buckets + b] < UINT32_MAX)
                c->per_thread[(size_t)s->thread * c->buckets + b]++;
        return 0;
}

static void tl_seconds(char *buf, size_t len, int64_t ns)
{
        snprintf(buf, len, "%.3f s", (double)ns / 1e9);
}

static void tl_draw(struct out *o, const struct tl_state *c, const uint32_t *index)
{
        struct ex_model *m = c->m;
        double plot_w = HTML_TIMELINE_WIDTH - HTML_LABEL_WIDTH - 10;
        double bw = plot_w / c->buckets;
        uint64_t peak = 1;
        for (uint32_t b = 0; b < c->buckets; b++)
                if (c->on_cpu[b] + c->idle[b] > peak)
                        peak = c->on_cpu[b] + c->idle[b];

        /* The busiest threads get a row each, in trace order; the rest share one. */
        uint32_t rows[HTML_THREAD_ROWS], n_rows = 0;
        bool others = false;
        for (uint32_t k = 0; k < HTML_THREAD_ROWS; k++) {
                uint32_t best = 0;
                for (uint32_t ref = 1; ref <= c->max_ref; ref++) {
                        bool taken = false;
                        for (uint32_t j = 0; j < n_rows; j++)
                                taken = taken || rows[j] == ref;
                        if (!taken && c->thread_total[ref] &&
                            (!best || c->thread_total[ref] > c->thread_total[best]))
                                best = ref;
                }
                if (!best)
                        break;
                rows[n_rows++] = best;
        }
        if (!c->per_thread)
                n_rows = 0;
        uint64_t in_rows = 0;
        for (uint32_t j = 0; j < n_rows; j++)
                in_rows += c->thread_total[rows[j]];
        others = in_rows < m->total;
        double strips_top = HTML_TIMELINE_HEIGHT + 30;
        double height = strips_top + (n_rows + (others ? 1 : 0)) * HTML_STRIP_HEIGHT + 10;

        out_printf(o,
                   "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"timeline\" width=\"%.0f\" "
                   "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" data-buckets=\"%u\" "
                   "data-total=\"%" PRIu64 "\">\n",
                   HTML_TIMELINE_WIDTH, height, HTML_TIMELINE_WIDTH, height, c->buckets, m->total);
        out_printf(o, "<text x=\"%.0f\" y=\"14\" text-anchor=\"end\">%" PRIu64 " samples</text>\n",
                   HTML_LABEL_WIDTH - 8, peak);
        out_printf(o, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">0</text>\n",
                   HTML_LABEL_WIDTH - 8, HTML_TIMELINE_HEIGHT);
        for (uint32_t b = 0; b < c->buckets; b++) {
                double x = HTML_LABEL_WIDTH + b * bw;
                double h_on = HTML_TIMELINE_HEIGHT * (double)c->on_cpu[b] / (double)peak;
                double h_idle = HTML_TIMELINE_HEIGHT * (double)c->idle[b] / (double)peak;
                int64_t t0 = c->lo + (int64_t)((double)c->span * b / c->buckets + 0.5);
                char when[32];
                tl_seconds(when, sizeof(when), t0);
                out_printf(o,
                           "<g class=\"bucket\" data-bucket=\"%u\" data-on-cpu=\"%" PRIu64
                           "\" data-idle=\"%" PRIu64 "\"><title>from %s: %" PRIu64
                           " on CPU, %" PRIu64 " idle</title>",
                           b, c->on_cpu[b], c->idle[b], when, c->on_cpu[b], c->idle[b]);
                out_printf(o,
                           "<rect class=\"oncpu\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                           "height=\"%.2f\"/>",
                           x, HTML_TIMELINE_HEIGHT - h_on, bw > 1.5 ? bw - 1 : bw, h_on);
                out_printf(o,
                           "<rect class=\"idle\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                           "height=\"%.2f\"/></g>\n",
                           x, HTML_TIMELINE_HEIGHT - h_on - h_idle, bw > 1.5 ? bw - 1 : bw, h_idle);
        }
        char lo[32], hi[32];
        tl_seconds(lo, sizeof(lo), c->lo);
        tl_seconds(hi, sizeof(hi), c->lo + c->span);
        out_printf(o, "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n", HTML_LABEL_WIDTH,
                   HTML_TIMELINE_HEIGHT + 16, lo);
        out_printf(o, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">%s</text>\n",
                   HTML_TIMELINE_WIDTH - 10, HTML_TIMELINE_HEIGHT + 16, hi);

        for (uint32_t j = 0; j < n_rows + (others ? 1 : 0); j++) {
                bool is_other = j == n_rows;
                uint32_t ref = is_other ? 0 : rows[j];
                double y = strips_top + j * HTML_STRIP_HEIGHT;
                char name[300];
                struct trace_thread info;
                if (is_other) {
                        snprintf(name, sizeof(name), "other threads");
                } else if (index[ref] != UINT32_MAX &&
                           trace_reader_thread_at(m->r, index[ref], &info) == 0) {
                        if (info.name && *info.name)
                                snprintf(name, sizeof(name), "%s (%" PRId64 ")", info.name,
                                         info.tid);
                        else
                                snprintf(name, sizeof(name), "tid %" PRId64, info.tid);
                } else {
                        snprintf(name, sizeof(name), "thread %u", ref);
                }
                uint64_t samples = is_other ? m->total - in_rows : c->thread_total[ref];
                out_printf(o,
                           "<g class=\"thread-row\" data-samples=\"%" PRIu64 "\"><text x=\"%.0f\" "
                           "y=\"%.1f\" text-anchor=\"end\">",
                           samples, HTML_LABEL_WIDTH - 8, y + HTML_STRIP_HEIGHT - 4);
                out_xml_text(o, name);
                out_puts(o, "</text>\n");
                uint64_t row_peak = 1;
                for (uint32_t b = 0; !is_other && b < c->buckets; b++)
                        if (c->per_thread[(size_t)ref * c->buckets + b] > row_peak)
                                row_peak = c->per_thread[(size_t)ref * c->buckets + b];
                for (uint32_t b = 0; !is_other && b < c->buckets; b++) {
                        uint32_t k = c->per_thread[(size_t)ref * c->buckets + b];
                        if (!k)
                                continue;
                        out_printf(o,
                                   "<rect class=\"strip\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
                                   "height=\"%.1f\" fill-opacity=\"%.2f\"><title>%u samples</title>"
                                   "</rect>\n",
                                   HTML_LABEL_WIDTH + b * bw, y + 1, bw, HTML_STRIP_HEIGHT - 2,
                                   0.15 + 0.85 * (double)k / (double)row_peak, k);
                }
                out_puts(o, "</g>\n");
        }
        out_puts(o, "</svg>\n");
}

static int html_timeline(struct out *o, struct ex_model *m, const struct trace_filter *filter)
{
        struct tl_state c = {.m = m, .lo = m->from_ns};
        uint32_t *index = ex_thread_index(m, &c.max_ref);
        /* The range covers the selection; a trace still being written may run past its end. */
        int64_t hi = m->to_ns;
        for (uint32_t i = 0; i < trace_reader_thread_count(m->r); i++) {
                struct trace_thread t;
                if (trace_reader_thread_at(m->r, i, &t) == 0 && t.last_ns > hi &&
                    !(filter && filter->to_ns))
                        hi = t.last_ns;
        }
        c.span = hi > c.lo ? hi - c.lo : 1;
        double periods = (double)c.span / m->period_ns;
        c.buckets = periods >= HTML_BUCKETS ? HTML_BUCKETS : (periods < 1 ? 1 : (uint32_t)periods);
        c.on_cpu = calloc(c.buckets, sizeof(*c.on_cpu));
        c.idle = calloc(c.buckets, sizeof(*c.idle));
        c.thread_total = calloc((size_t)c.max_ref + 1, sizeof(*c.thread_total));
        /* Per-thread strips only while their counters stay small (4 MiB). */
        if ((size_t)(c.max_ref + 1) * c.buckets <= (4u << 20) / sizeof(uint32_t))
                c.per_thread = calloc((size_t)(c.max_ref + 1) * c.buckets, sizeof(uint32_t));
        int rc = 0;
        if (!index || !c.on_cpu || !c.idle || !c.thread_total)
                rc = ex_fail(m, TRACE_ERR_NOMEM, "out of memory");
        if (rc == 0) {
                int s = trace_reader_foreach_sample(m->r, filter, tl_sample, &c);
                if (s < 0)
                        rc = ex_fail_read(m, s);
                else if (c.status < 0)
                        rc = c.status;
        }
        if (rc == 0) {
                out_puts(o, "<section id=\"timeline\">\n<h2>Timeline</h2>\n");
                out_puts(o, "<p class=\"legend\"><span class=\"key oncpu\"></span> on CPU "
                            "<span class=\"key idle\"></span> not on CPU (samples per time bucket; "
                            "one strip per thread below)</p>\n");
                tl_draw(o, &c, index);
                out_puts(o, "</section>\n");
        }
        free(c.on_cpu);
        free(c.idle);
        free(c.per_thread);
        free(c.thread_total);
        free(index);
        return rc;
}

/* ---- the page ---- */

static const char html_css[] =
    "body { font-family: -apple-system, 'Segoe UI', Verdana, sans-serif; margin: 16px 24px; "
    "color: #222; background: #fff; }\n"
    "h1 { font-size: 22px; margin: 0 0 4px 0; }\n"
    "h2 { font-size: 17px; margin: 28px 0 8px 0; border-bottom: 1px solid #ddd; }\n"
    ".summary { color: #555; margin: 0 0 8px 0; }\n"
    "dl.meta { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; "
    "font-size: 13px; margin: 8px 0; }\n"
    "dl.meta dt { color: #777; } dl.meta dd { margin: 0; font-family: monospace; }\n"
    ".searchbar { margin: 4px 0 8px 0; } .searchbar input { width: 320px; padding: 3px; }\n"
    "table.hot { border-collapse: collapse; font-size: 13px; }\n"
    "table.hot th, table.hot td { padding: 2px 10px; border-bottom: 1px solid #eee; "
    "text-align: left; }\n"
    "table.hot th { cursor: pointer; background: #f6f6f6; position: sticky; top: 0; }\n"
    "table.hot .num { text-align: right; font-variant-numeric: tabular-nums; }\n"
    "table.hot .loc { font-family: monospace; }\n"
    ".note { color: #777; font-size: 13px; }\n"
    "svg.timeline text { font-size: 11px; font-family: Verdana, sans-serif; }\n"
    "svg.timeline .oncpu { fill: #e8702a; } svg.timeline .idle { fill: #b8b8b8; }\n"
    "svg.timeline .strip { fill: #c0392b; }\n"
    ".key { display: inline-block; width: 12px; height: 12px; vertical-align: middle; }\n"
    ".key.oncpu { background: #e8702a; } .key.idle { background: #b8b8b8; }\n";

/* Click a column header to sort a table by it (numbers descending first). */
static const char html_table_js[] =
    "document.querySelectorAll('table.sortable').forEach(function (table) {\n"
    "  table.querySelectorAll('th').forEach(function (th, col) {\n"
    "    th.addEventListener('click', function () {\n"
    "      var body = table.tBodies[0], rows = [].slice.call(body.rows);\n"
    "      var num = th.classList.contains('num'), dir = th.dataset.dir === 'down' ? 1 : -1;\n"
    "      if (!num) dir = -dir;\n"
    "      th.dataset.dir = dir === -1 ? (num ? 'down' : 'up') : (num ? 'up' : 'down');\n"
    "      rows.sort(function (a, b) {\n"
    "        var x = a.cells[col].textContent, y = b.cells[col].textContent;\n"
    "        if (num) return dir * (parseFloat(x || '0') - parseFloat(y || '0'));\n"
    "        return dir * x.localeCompare(y);\n"
    "      });\n"
    "      rows.forEach(function (r) { body.appendChild(r); });\n"
    "    });\n"
    "  });\n"
    "});\n";

static void html_meta_row(struct out *o, const char *key, const char *value)
{
        if (!value || !*value)
                return;
        out_puts(o, "<dt>");
        out_xml_text(o, key);
        out_puts(o, "</dt><dd>");
        out_xml_text(o, value);
        out_puts(o, "</dd>\n");
}

static void html_header(struct out *o, struct ex_model *m, const char *title)
{
        char summary[256];
        ex_model_describe(m, summary, sizeof(summary));
        out_puts(o, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n");
        out_puts(o, "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n");
        out_puts(o, "<title>");
        out_xml_text(o, title);
        out_printf(o, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<header>\n<h1>", html_css);
        out_xml_text(o, title);
        out_puts(o, "</h1>\n<p class=\"summary\" id=\"summary\">");
        out_xml_text(o, summary);
        out_printf(o, "</p>\n<dl class=\"meta\" data-samples=\"%" PRIu64 "\">\n", m->total);
        struct trace_reader *r = m->r;
        const char *wall = trace_reader_meta(r, TRACE_META_START_WALL_NS);
        if (wall) {
                time_t secs = (time_t)(strtoll(wall, NULL, 10) / 1000000000);
                struct tm tm;
                char when[64];
                if (gmtime_r(&secs, &tm) &&
                    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm))
                        html_meta_row(o, "started", when);
        }
        html_meta_row(o, "command", trace_reader_meta(r, TRACE_META_CMDLINE));
        html_meta_row(o, "pids", trace_reader_meta(r, TRACE_META_PIDS));
        html_meta_row(o, "python", trace_reader_meta(r, TRACE_META_PYTHON_VERSION));
        html_meta_row(o, "python build", trace_reader_meta(r, TRACE_META_PYTHON_BUILD));
        html_meta_row(o, "host", trace_reader_meta(r, TRACE_META_HOST));
        html_meta_row(o, "mode", trace_reader_meta(r, TRACE_META_MODE));
        char num[64];
        snprintf(num, sizeof(num), "%" PRIu64 " of %" PRIu64, m->total, m->summary.samples);
        html_meta_row(o, "samples selected", num);
        uint64_t errors = 0;
        for (int k = 0; k < TRACE_ERROR_KIND_COUNT; k++)
                errors += m->summary.errors[k];
        snprintf(num, sizeof(num), "%" PRIu64, errors);
        html_meta_row(o, "sampling errors", num);
        if (!m->summary.finalized)
                html_meta_row(o, "note",
                              "the recording did not finish; it ends at its last commit");
        out_puts(o, "</dl>\n</header>\n");
}

int export_html(struct ex_model *m, const struct trace_filter *filter,
                const struct export_options *opt, struct out *o)
{
        const char *title = opt->title ? opt->title : "pyflame report";
        html_header(o, m, title);

        char subtitle[256];
        ex_model_describe(m, subtitle, sizeof(subtitle));
        out_printf(o, "<section id=\"flame\">\n<h2>%s</h2>\n",
                   opt->icicle ? "Icicle graph" : "Flame graph");
        out_puts(o, "<div class=\"searchbar\"><input id=\"search\" type=\"search\" "
                    "placeholder=\"Search frames (a regular expression)\"/> click a frame to zoom, "
                    "\"all\" or Reset Zoom to go back</div>\n");
        struct flame_svg_opts so = {
            .title = title,
            .subtitle = subtitle,
            .icicle = opt->icicle,
            .width = opt->width,
            .inline_html = true,
        };
        flame_write_svg(o, m, &so);
        out_puts(o, "</section>\n");

        int rc = html_timeline(o, m, filter);
        if (rc == 0)
                rc = html_table(o, m, false);
        if (rc == 0)
                rc = html_table(o, m, true);
        if (rc < 0)
                return rc;
        out_puts(o, "<script>\n//<![CDATA[\n");
        out_puts(o, flame_js);
        out_puts(o, "pyflameInit(document.getElementById('flamegraph'), "
                    "{ input: document.getElementById('search') });\n");
        out_puts(o, html_table_js);
        out_puts(o, "//]]>\n</script>\n</body>\n</html>\n");
        return 0;
}
