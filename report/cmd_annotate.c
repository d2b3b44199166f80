/*
 * cmd_annotate.c - `pyflame-report annotate`: a source file printed with
 * the share of the selected samples beside each line, the way
 * `perf annotate` prints a function's instructions.
 *
 * Per line, self is the share of samples whose innermost frame was at that
 * line, and total the share with that line anywhere on the stack, counted
 * once per sample: the numbers of the --by-line table (both views are the
 * same HOT_BY_LINE aggregation of aggregate.c), over the same denominator,
 * all selected samples. A file's own self and total are counted the same
 * way, total once per sample whatever the number of its lines on the stack.
 *
 * Without --source the hottest file is shown (most self samples), or the N
 * hottest with --top N; names such as "<frozen ...>" or "<string>" are
 * not files and are shown only when --source names them. The text comes from the trace first
 * (stored by pyflame-record), else from this machine's file of that name, said so in the header
 * since it may not be what ran; without either, the lines that have samples are listed alone. Lines
 * with samples past the end of the text (a file changed since it ran) are listed after it.
 */
#include "report.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Columns of source text shown in the text view, then "...". */
#define ANNOTATE_MAX_COLUMNS 240
/* --source may name a file by the end of its path; candidates listed when ambiguous. */
#define ANNOTATE_MAX_LISTED 5

struct annotate_opts {
        struct select_opts select;
        const char *source; /* --source, or NULL for the hottest */
        size_t top;
        bool top_given;
        enum out_format format;
        const char *output;
        const char *path;    /* the first input: messages name it */
        char *const *inputs; /* trace files, directories or globs: one recording */
        size_t n_inputs;
};

/* A file of the trace's Python frames. */
struct afile {
        const char *name; /* owned by the reader */
        uint64_t hash;
        uint64_t self, total;
};

struct files {
        struct afile *v;
        size_t n, cap;
        uint32_t *slots; /* open addressing: index + 1 into v; 0 empty */
        size_t n_slots;
        uint32_t *of_frame; /* per frame id: index + 1 of its file; 0 for none */
};

static void files_free(struct files *fs)
{
        free(fs->v);
        free(fs->slots);
        free(fs->of_frame);
}

/* The index + 1 of file `name`, added when new; 0 when out of memory. */
static uint32_t files_intern(struct files *fs, const char *name)
{
        uint64_t h = pf_hash_bytes(name, strlen(name), 0);
        if ((fs->n + 1) * 2 > fs->n_slots) {
                size_t n = fs->n_slots ? fs->n_slots * 2 : 256;
                uint32_t *t = calloc(n, sizeof(*t));
                if (!t)
                        return 0;
                for (size_t i = 0; i < fs->n_slots; i++) {
                        if (!fs->slots[i])
                                continue;
                        size_t j = fs->v[fs->slots[i] - 1].hash & (n - 1);
                        while (t[j])
                                j = (j + 1) & (n - 1);
                        t[j] = fs->slots[i];
                }
                free(fs->slots);
                fs->slots = t;
                fs->n_slots = n;
        }
        size_t j = h & (fs->n_slots - 1);
        for (; fs->slots[j]; j = (j + 1) & (fs->n_slots - 1)) {
                const struct afile *f = &fs->v[fs->slots[j] - 1];
                if (f->hash == h && !strcmp(f->name, name))
                        return fs->slots[j];
        }
        if (fs->n == fs->cap) {
                size_t cap = fs->cap ? 2 * fs->cap : 64;
                struct afile *p = reallocarray(fs->v, cap, sizeof(*p));
                if (!p)
                        return 0;
                fs->v = p;
                fs->cap = cap;
        }
        fs->v[fs->n++] = (struct afile){.name = name, .hash = h};
        fs->slots[j] = (uint32_t)fs->n;
        return (uint32_t)fs->n;
}

/*
 * Every file of the trace's Python frames, with its self samples (from the
 * line table) and total samples (stacks holding any of its lines, once).
 */
static int files_build(const struct trace_reader *r, const struct stack_counts *sc,
                       const struct hot_table *ht, struct files *fs)
{
        uint32_t n_frames = trace_reader_frame_count(r);
        fs->of_frame = calloc((size_t)n_frames + 1, sizeof(*fs->of_frame));
        if (!fs->of_frame)
                return TRACE_ERR_NOMEM;
        for (uint32_t id = 1; id <= n_frames; id++) {
                struct trace_frame f;
                int rc = trace_reader_frame(r, id, &f);
                if (rc < 0)
                        return rc;
                if (f.kind != TRACE_FRAME_PYTHON || !f.file || !*f.file)
                        continue;
                if (!(fs->of_frame[id] = files_intern(fs, f.file)))
                        return TRACE_ERR_NOMEM;
        }
        for (size_t i = 0; i < ht->n; i++) {
                uint32_t fi = fs->of_frame[ht->rows[i].frame];
                if (fi)
                        fs->v[fi - 1].self += ht->rows[i].self;
        }
        /* Per stack, each file once: `seen` holds the last stack that counted it. */
        uint32_t *seen = calloc(fs->n ? fs->n : 1, sizeof(*seen));
        if (!seen)
                return TRACE_ERR_NOMEM;
        for (uint32_t s = 1; s < sc->n_stacks; s++) {
                if (!sc->counts[s])
                        continue;
                uint32_t cur = s, depth = trace_reader_stack_depth(r, s);
                for (uint32_t d = 0; d < depth; d++) {
                        uint32_t parent, frame;
                        int rc = trace_reader_stack_node(r, cur, &parent, &frame);
                        if (rc < 0) {
                                free(seen);
                                return rc;
                        }
                        uint32_t fi = frame <= n_frames ? fs->of_frame[frame] : 0;
                        if (fi && seen[fi - 1] != s) {
                                seen[fi - 1] = s;
                                fs->v[fi - 1].total += sc->counts[s];
                        }
                        cur = parent;
                }
        }
        free(seen);
        return 0;
}

/* Hottest first: self, then total, then name. */
static int afile_cmp(const void *pa, const void *pb)
{
        const struct afile *a = pa, *b = pb;
        if (a->self != b->self)
                return a->self > b->self ? -1 : 1;
        if (a->total != b->total)
                return a->total > b->total ? -1 : 1;
        return strcmp(a->name, b->name);
}

/* Does `name` end with `tail` at a path component boundary ("work.py" ends "app/work.py")? */
static bool ends_with_path(const char *name, const char *tail)
{
        size_t n = strlen(name), t = strlen(tail);
        return t && t < n && !strcmp(name + n - t, tail) &&
               (tail[0] == '/' || name[n - t - 1] == '/');
}

/*
 * The file --source names: exactly, or by the end of its path when that is
 * unique. Returns its index in fs->v, or -1 after printing why not.
 */
static long find_source(const struct files *fs, const char *path, const char *want)
{
        for (size_t i = 0; i < fs->n; i++)
                if (!strcmp(fs->v[i].name, want))
                        return (long)i;
        long found = -1;
        size_t matches = 0;
        struct pf_buf list = {0};
        for (size_t i = 0; i < fs->n; i++) {
                if (!ends_with_path(fs->v[i].name, want))
                        continue;
                if (matches++ < ANNOTATE_MAX_LISTED) {
                        if (list.len)
                                pf_buf_append(&list, ", ", 2);
                        pf_buf_append(&list, fs->v[i].name, strlen(fs->v[i].name));
                }
                found = (long)i;
        }
        pf_buf_append(&list, "", 1);
        const char *names = list.data ? (const char *)list.data : "";
        if (matches > 1)
                report_fail(path, "--source %s matches %zu files (%s%s); give more of its path",
                            want, matches, names, matches > ANNOTATE_MAX_LISTED ? ", ..." : "");
        else if (!matches)
                report_fail(path,
                            "no frame of the trace is in a file named %s (see the files with "
                            "'" REPORT_PROG " --by-line %s')",
                            want, path);
        pf_buf_free(&list);
        return matches == 1 ? found : -1;
}

static double percent(uint64_t n, uint64_t total)
{
        return total ? 100.0 * (double)n / (double)total : 0.0;
}

/* Length of a valid UTF-8 sequence at s[0, n), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
        size_t len = s[0] < 0x80                   ? 1
                     : s[0] >= 0xc2 && s[0] < 0xe0 ? 2
                     : s[0] >= 0xe0 && s[0] < 0xf0 ? 3
                     : s[0] >= 0xf0 && s[0] < 0xf5 ? 4
                                                   : 0;
        if (!len || len > n)
                return 0;
        for (size_t i = 1; i < len; i++)
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
        return len;
}

/*
 * A line of source as it is shown: bytes that are not UTF-8 become '?',
 * control characters spaces (tabs expanded to 8 columns when `expand`,
 * kept otherwise), trailing white space dropped; cut after `max_columns`
 * columns with "..." (0: never). Appended to `b`.
 */
static void display_line(struct pf_buf *b, const char *s, size_t n, bool expand, size_t max_columns)
{
        while (n > 0 && ((unsigned char)s[n - 1] <= ' ' || s[n - 1] == 0x7f))
                n--;
        size_t col = 0;
        for (size_t i = 0; i < n;) {
                if (max_columns && col >= max_columns) {
                        pf_buf_append(b, "...", 3);
                        return;
                }
                unsigned char c = (unsigned char)s[i];
                if (c == '\t' && expand) {
                        do
                                pf_buf_append(b, " ", 1);
                        while (++col % 8);
                        i++;
                        continue;
                }
                if (c == '\t' || (c >= 0x20 && c != 0x7f && c < 0x80)) {
                        pf_buf_append(b, &s[i++], 1);
                } else if (c < 0x20 || c == 0x7f) {
                        pf_buf_append(b, " ", 1);
                        i++;
                } else {
                        size_t len = utf8_len((const unsigned char *)s + i, n - i);
                        pf_buf_append(b, len ? &s[i] : "?", len ? len : 1);
                        i += len ? len : 1;
                }
                col++;
        }
}

/* "2026-05-28 20:26:40 UTC" */
static const char *utc_time(int64_t ns, char *buf, size_t size)
{
        time_t sec = (time_t)(ns / 1000000000);
        struct tm tm;
        if (ns < 0 || !gmtime_r(&sec, &tm) || !strftime(buf, size, "%Y-%m-%d %H:%M:%S UTC", &tm))
                return "an unknown time";
        return buf;
}

/* Per line of one file: self and total samples, lines 1..n. */
struct line_counts {
        uint64_t *self, *total;
        uint32_t n; /* the last line with samples */
};

static int line_counts_build(const struct hot_table *ht, const struct files *fs,
                             uint32_t file_index, struct line_counts *lc)
{
        *lc = (struct line_counts){0};
        for (size_t i = 0; i < ht->n; i++)
                if (fs->of_frame[ht->rows[i].frame] == file_index + 1 && ht->rows[i].f.line > 0 &&
                    (uint32_t)ht->rows[i].f.line > lc->n)
                        lc->n = (uint32_t)ht->rows[i].f.line;
        lc->self = calloc((size_t)lc->n + 1, sizeof(uint64_t));
        lc->total = calloc((size_t)lc->n + 1, sizeof(uint64_t));
        if (!lc->self || !lc->total)
                return TRACE_ERR_NOMEM;
        for (size_t i = 0; i < ht->n; i++) {
                const struct hot_row *row = &ht->rows[i];
                if (fs->of_frame[row->frame] != file_index + 1 || row->f.line <= 0)
                        continue;
                lc->self[row->f.line] += row->self;
                lc->total[row->f.line] += row->total;
        }
        return 0;
}

static void line_counts_free(struct line_counts *lc)
{
        free(lc->self);
        free(lc->total);
}

/* What annotating one file needs. */
struct annotate_file {
        const struct afile *file;
        struct srcline_text text;
        struct line_counts lc;
        uint64_t samples; /* the selection's samples: every share's denominator */
        bool changed;     /* the text was modified after the recording started */
};

/* Where the text came from, for the header of the text view. */
static void text_origin(const struct annotate_file *af, struct out *o)
{
        char when[64];
        switch (af->text.origin) {
        case SRCLINE_TRACE:
                out_printf(o, "Source: stored in the trace");
                if (af->text.mtime_ns >= 0)
                        out_printf(o, ", modified %s",
                                   utc_time(af->text.mtime_ns, when, sizeof(when)));
                out_puts(o, af->changed ? ", after the recording started: it may differ from "
                                          "what ran before\n"
                                        : "\n");
                break;
        case SRCLINE_LOCAL:
                out_printf(o, "Source: this machine's file (the trace has none): it may differ "
                              "from what ran");
                if (af->changed)
                        out_printf(o, ", and was modified %s, after the recording started",
                                   utc_time(af->text.mtime_ns, when, sizeof(when)));
                out_puts(o, "\n");
                break;
        case SRCLINE_NONE:
                out_puts(o, "Source: not in the trace and not readable here; only the lines with "
                            "samples are listed\n");
                break;
        }
}

static void text_row(struct out *o, struct pf_buf *b, const struct annotate_file *af, uint32_t line,
                     int width, const char *s, size_t n)
{
        uint64_t self = line <= af->lc.n ? af->lc.self[line] : 0;
        uint64_t total = line <= af->lc.n ? af->lc.total[line] : 0;
        char a[16] = "", t[16] = "";
        if (self)
                snprintf(a, sizeof(a), "%.2f", percent(self, af->samples));
        if (total)
                snprintf(t, sizeof(t), "%.2f", percent(total, af->samples));
        b->len = 0;
        if (s)
                display_line(b, s, n, true, ANNOTATE_MAX_COLUMNS);
        out_printf(o, "%7s %7s %*u", a, t, width, line);
        if (b->len) {
                out_puts(o, "  ");
                out_write(o, (const char *)b->data, b->len);
        }
        out_puts(o, "\n");
}

static void annotate_text(const struct annotate_file *af, struct out *o)
{
        const struct afile *f = af->file;
        out_printf(o, "%s: self %.2f%% (%llu of %llu samples), total %.2f%% (%llu)\n", f->name,
                   percent(f->self, af->samples), (unsigned long long)f->self,
                   (unsigned long long)af->samples, percent(f->total, af->samples),
                   (unsigned long long)f->total);
        text_origin(af, o);
        uint32_t last = af->text.n_lines > af->lc.n ? af->text.n_lines : af->lc.n;
        int width = snprintf(NULL, 0, "%u", last ? last : 1);
        if (width < 4)
                width = 4;
        out_printf(o, "%7s %7s %*s  %s\n", "SELF%", "TOTAL%", width, "LINE", "SOURCE");
        struct pf_buf b = {0};
        for (uint32_t line = 1; line <= af->text.n_lines; line++) {
                const char *s;
                size_t n;
                if (srcline_text_line(&af->text, line, &s, &n))
                        text_row(o, &b, af, line, width, s, n);
        }
        /* Lines with samples that the text does not have (or no text at all). */
        bool beyond = false;
        for (uint32_t line = af->text.n_lines + 1; line <= af->lc.n; line++) {
                if (!af->lc.self[line] && !af->lc.total[line])
                        continue;
                if (!beyond && af->text.origin != SRCLINE_NONE)
                        out_printf(o,
                                   "Lines with samples past the end of this text (%u lines): "
                                   "the file changed since it ran\n",
                                   af->text.n_lines);
                beyond = true;
                text_row(o, &b, af, line, width, NULL, 0);
        }
        pf_buf_free(&b);
}

static void json_line(struct out *o, struct pf_buf *b, const struct annotate_file *af,
                      uint32_t line, const char *s, size_t n, bool *first)
{
        uint64_t self = line <= af->lc.n ? af->lc.self[line] : 0;
        uint64_t total = line <= af->lc.n ? af->lc.total[line] : 0;
        out_printf(o,
                   "%s\n    {\"line\": %u, \"self\": %llu, \"self_pct\": %.2f, \"total\": %llu, "
                   "\"total_pct\": %.2f, \"text\": ",
                   *first ? "" : ",", line, (unsigned long long)self, percent(self, af->samples),
                   (unsigned long long)total, percent(total, af->samples));
        *first = false;
        if (!s) {
                out_puts(o, "null}");
                return;
        }
        b->len = 0;
        display_line(b, s, n, false, 0);
        if (pf_buf_append(b, "", 1) < 0) {
                o->nomem = true;
                return;
        }
        out_json_string(o, (const char *)b->data);
        out_puts(o, "}");
}

static void annotate_json(const struct annotate_file *af, struct out *o)
{
        static const char *const origins[] = {
            [SRCLINE_NONE] = NULL, [SRCLINE_TRACE] = "trace", [SRCLINE_LOCAL] = "local"};
        const struct afile *f = af->file;
        out_puts(o, "{\"file\": ");
        out_json_string(o, f->name);
        out_printf(o,
                   ", \"self\": %llu, \"self_pct\": %.2f, \"total\": %llu, \"total_pct\": %.2f, "
                   "\"source\": ",
                   (unsigned long long)f->self, percent(f->self, af->samples),
                   (unsigned long long)f->total, percent(f->total, af->samples));
        out_json_string(o, origins[af->text.origin]);
        if (af->text.mtime_ns >= 0)
                out_printf(o, ", \"mtime_ns\": %lld", (long long)af->text.mtime_ns);
        else
                out_puts(o, ", \"mtime_ns\": null");
        out_printf(o, ", \"modified_after_start\": %s, \"lines\": [",
                   af->changed ? "true" : "false");
        struct pf_buf b = {0};
        bool first = true;
        for (uint32_t line = 1; line <= af->text.n_lines; line++) {
                const char *s;
                size_t n;
                if (srcline_text_line(&af->text, line, &s, &n))
                        json_line(o, &b, af, line, s, n, &first);
        }
        for (uint32_t line = af->text.n_lines + 1; line <= af->lc.n; line++)
                if (af->lc.self[line] || af->lc.total[line])
                        json_line(o, &b, af, line, NULL, 0, &first);
        pf_buf_free(&b);
        out_puts(o, first ? "]}" : "\n  ]}");
}

/* The recording's start, wall clock; -1 unknown. */
static int64_t start_wall_ns(const struct trace_reader *r)
{
        const char *s = trace_reader_meta(r, TRACE_META_START_WALL_NS);
        char *end;
        errno = 0;
        long long v = s ? strtoll(s, &end, 10) : -1;
        return s && !errno && end != s && !*end ? v : -1;
}

static int annotate(struct trace_reader *r, const struct annotate_opts *opts,
                    const struct trace_filter *filter, struct out *o, uint64_t *counted)
{
        struct stack_counts sc = {0};
        struct hot_table ht = {0};
        struct files fs = {0};
        struct srcline_cache *src = NULL;
        size_t *chosen = NULL;
        int rc = stack_counts_build(r, filter, &sc);
        if (rc == 0)
                rc = hot_table_build(r, &sc, HOT_BY_LINE, &ht);
        if (rc == 0)
                rc = files_build(r, &sc, &ht, &fs);
        if (rc < 0)
                goto out;
        *counted = sc.total;
        /* Pick the files: the one --source names, or the hottest with samples. */
        size_t n_chosen = 0;
        chosen = calloc(fs.n ? fs.n : 1, sizeof(*chosen));
        if (!chosen || !(src = srcline_cache_new(r))) {
                rc = TRACE_ERR_NOMEM;
                goto out;
        }
        if (opts->source) {
                long i = find_source(&fs, opts->path, opts->source);
                if (i < 0) {
                        rc = REPORT_EXIT_FAIL;
                        goto out;
                }
                chosen[n_chosen++] = (size_t)i;
        } else {
                size_t *order = chosen;
                for (size_t i = 0; i < fs.n; i++)
                        if ((fs.v[i].self || fs.v[i].total) && fs.v[i].name[0] != '<')
                                order[n_chosen++] = i;
                /* Sort the indexes by the files they point to. */
                for (size_t i = 1; i < n_chosen; i++)
                        for (size_t j = i;
                             j > 0 && afile_cmp(&fs.v[order[j]], &fs.v[order[j - 1]]) < 0; j--) {
                                size_t t = order[j];
                                order[j] = order[j - 1];
                                order[j - 1] = t;
                        }
                if (opts->top && n_chosen > opts->top)
                        n_chosen = opts->top;
        }
        int64_t start = start_wall_ns(r);
        if (opts->format == OUT_JSON)
                out_printf(o, "{\"view\": \"annotate\", \"samples\": %llu, \"files\": [",
                           (unsigned long long)sc.total);
        for (size_t k = 0; k < n_chosen && rc == 0; k++) {
                struct annotate_file af = {.file = &fs.v[chosen[k]], .samples = sc.total};
                srcline_text(src, af.file->name, &af.text);
                if ((rc = srcline_status(src)) < 0)
                        break;
                af.changed = start >= 0 && af.text.mtime_ns > start;
                if ((rc = line_counts_build(&ht, &fs, (uint32_t)chosen[k], &af.lc)) == 0) {
                        if (opts->format == OUT_JSON) {
                                out_puts(o, k ? ",\n  " : "\n  ");
                                annotate_json(&af, o);
                        } else {
                                if (k)
                                        out_puts(o, "\n");
                                annotate_text(&af, o);
                        }
                }
                line_counts_free(&af.lc);
        }
        if (rc == 0 && opts->format == OUT_JSON)
                out_puts(o, n_chosen ? "\n]}\n" : "]}\n");
out:
        free(chosen);
        srcline_cache_free(src);
        files_free(&fs);
        hot_table_free(&ht);
        stack_counts_free(&sc);
        return rc;
}

/* ---- the command ---- */

static void annotate_help(void)
{
        printf("Usage: " REPORT_PROG " annotate [OPTIONS] TRACE...\n"
               "       " REPORT_PROG " --source FILE [OPTIONS] TRACE...\n"
               "Print a source file with the share of samples of each line beside it:\n"
               "SELF%% (the line was running) and TOTAL%% (the line was on the stack), of\n"
               "all selected samples. The text is the one stored in the trace by\n"
               "pyflame-record, else this machine's file of that name.\n"
               "\n"
               "      --source FILE      the file to show, as the trace names it or by the\n"
               "                         end of its path (work.py, pkg/work.py); default:\n"
               "                         the file with the most self samples\n"
               "      --top N            the N hottest files, one after another (0 for all)\n"
               "      --format FORMAT    text or json\n"
               "  -o, --output FILE      write to FILE (replaced only once complete)\n"
               "\n"
               "Selection: --from TIME, --to TIME, --since WHEN, --until WHEN,\n"
               "--pid PID[,PID..], --thread T[,T..],\n"
               "--idle, --gil, --async, --no-native, --native-modules, as for the other\n"
               "views ('" REPORT_PROG " --help').\n"
               "\n"
               "Exit status: 0 on success, 2 on a usage error, a trace that cannot be read\n"
               "or a --source that names no sampled file.\n");
}

enum {
        OPT_SOURCE = 256,
        OPT_TOP,
        OPT_FORMAT,
};

static const struct option long_options[] = {
    {"source", required_argument, NULL, OPT_SOURCE},
    {"top", required_argument, NULL, OPT_TOP},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"output", required_argument, NULL, 'o'},
    SELECT_WINDOW_OPTIONS,
    SELECT_LONG_OPTIONS,
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* Returns 0, 1 when --help was printed, or REPORT_EXIT_FAIL after a usage message. */
static int parse_args(int argc, char **argv, struct annotate_opts *o)
{
        o->top = 1;
        opterr = 0;
        optind = 0; /* a full reset: `report --source` hands over a half-parsed argv */
        for (;;) {
                int c = getopt_long(argc, argv, ":ho:", long_options, NULL);
                if (c == -1)
                        break;
                int sel = select_opts_parse(&o->select, c, optarg);
                if (sel == 1)
                        continue;
                if (sel)
                        return sel;
                switch (c) {
                case OPT_SOURCE:
                        if (o->source && strcmp(o->source, optarg))
                                return report_usage("annotate", "one --source at a time");
                        o->source = optarg;
                        break;
                case OPT_TOP: {
                        char *end;
                        errno = 0;
                        unsigned long long v = strtoull(optarg, &end, 10);
                        if (errno || end == optarg || *end || optarg[0] == '-' || v > SIZE_MAX)
                                return report_usage("annotate",
                                                    "--top: '%s' is not a number of files (0 "
                                                    "shows all)",
                                                    optarg);
                        o->top = (size_t)v;
                        o->top_given = true;
                        break;
                }
                case OPT_FORMAT:
                        if (out_format_parse(optarg, &o->format) < 0 || o->format == OUT_CSV)
                                return report_usage("annotate",
                                                    "--format: '%s' is not text or json", optarg);
                        break;
                case 'o':
                        o->output = optarg;
                        break;
                case 'h':
                        annotate_help();
                        return 1;
                default:
                        return report_bad_option("annotate", c, argv);
                }
        }
        if (o->source && o->top_given)
                return report_usage("annotate",
                                    "--source shows one file and --top the hottest; pick one");
        if (optind >= argc)
                return report_usage("annotate", "no trace file given");
        o->path = argv[optind];
        o->inputs = argv + optind;
        o->n_inputs = (size_t)(argc - optind);
        return select_opts_check(&o->select, "annotate");
}

int cmd_annotate(int argc, char **argv)
{
        struct annotate_opts o = {0};
        int rc = parse_args(argc, argv, &o);
        if (rc) {
                select_opts_free(&o.select);
                return rc == 1 ? REPORT_EXIT_OK : rc;
        }
        struct trace_reader *r = NULL;
        struct select sel = {0};
        struct out out = {0};
        uint64_t counted = 0;
        if ((rc = report_open_inputs(o.inputs, o.n_inputs, o.output, &r)) != 0 ||
            (rc = select_resolve(r, o.path, &o.select, &sel)) != 0)
                goto done;
        int st = annotate(r, &o, &sel.filter, &out, &counted);
        if (st != 0) {
                rc = st > 0 ? st : report_read_failed(o.path, r, st);
                goto done;
        }
        if (counted == 0)
                report_fail(o.path, "note: no sample matches the selection%s",
                            o.select.idle ? "" : " (threads off CPU are left out; try --idle)");
        rc = out_commit(&out, o.output);
done:
        out_free(&out);
        select_free(&sel);
        trace_reader_close(r);
        select_opts_free(&o.select);
        return rc;
}
