/*
 * cmd_diff.c - `pyflame-diff BASE NEW` (also `pyflame-report diff`): which
 * functions, lines or stacks take a different share of the samples (or a
 * different amount of time) in one recording than in another, which of
 * those differences are more than sampling noise, and, as a CI gate,
 * whether any of them crosses a rule such as `self:+5pp`.
 *
 * Each side is a trace file, or a time window of one (`run.db@10s..20s`,
 * `run.db@10%..50%`), so two phases of one recording compare too. A side is
 * aggregated exactly as a single report aggregates it (aggregate.c: the
 * hot-spot table or the folded stacks of the selection), and once more per
 * time block (slice_counts_build) for the batch-means variance of
 * diffstat.c; a side merged from several recordings (pyflame-report merge)
 * is also aggregated per recording, for the variance between runs. Rows of
 * the two sides are matched by identity: (function,
 * file, first line), (file, line), or the folded stack's text. Every row is
 * tested on its self and total samples; p-values are Holm-adjusted over
 * all tests made; only a significant change can trip a gate rule.
 *
 * Output: an aligned text table, markdown for a pull-request comment, CSV
 * or JSON, or `stack base_count new_count` lines (difffolded.pl's format,
 * for differential flame graphs). Exit status 0, 1 when a rule tripped
 * (each trip is named on stderr), 2 on bad input.
 */
#include "report.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DIFF_CMD            "diff"
#define DIFF_TOP_DEFAULT    20
#define DIFF_MIN_SAMPLES    20
#define DIFF_CONFIDENCE     0.99
#define DIFF_TRIPS_PER_RULE 20
#define DIFF_SIDES          2

enum diff_view { DIFF_BY_FUNCTION, DIFF_BY_LINE, DIFF_FOLDED };
enum diff_per { PER_SAMPLES, PER_TIME };
enum diff_format { DF_TEXT, DF_MARKDOWN, DF_CSV, DF_JSON, DF_FOLDED };
enum metric { M_SELF, M_TOTAL, M_COUNT };

static const char *const view_names[] = {"function", "line", "stack"};
static const char *const metric_names[M_COUNT] = {"self", "total"};

/* A --fail-on rule: METRIC:THRESHOLD. */
struct gate_rule {
        const char *text;
        enum metric metric;
        enum { RULE_PP, RULE_REL, RULE_TIME } kind;
        double threshold; /* share (0.05 for 5pp), ratio (0.2 for 20%) or seconds; >= 0 */
        bool decrease;    /* "-": trips on a drop of at least threshold, not on a rise */
};

struct diff_opts {
        struct select_opts select; /* --pid, --thread, --idle, --gil; from/to unused */
        enum diff_view view;
        bool view_given;
        enum diff_per per;
        enum diff_format format;
        bool format_given;
        double confidence;
        uint64_t min_samples;
        size_t top;
        bool top_given;
        struct gate_rule *rules;
        size_t n_rules;
        const char *output;
        const char *spec[DIFF_SIDES];
        /* --base-since, --base-until; --since, --until: wall-clock windows per side. */
        const char *since[DIFF_SIDES], *until[DIFF_SIDES];
};

/* One side: a trace, maybe a window of it, and everything counted on it. */
struct side {
        const char *spec; /* as given: PATH or PATH@FROM..TO */
        char *path;       /* the file */
        char *from, *to;  /* the window's ends as given, NULL when open */
        /* Ends by wall clock (pf_parse_wall_time), from the spec or the options. */
        char *since, *until;
        struct trace_reader *r;
        struct select sel;
        int64_t from_ns, end_ns;
        double sample_s; /* seconds one sample stands for (--per time) */
        struct slice_counts sc;
        struct diffstat_side stats;
        struct hot_table ht;
        struct folded_set fs;
        size_t n_rows;
        struct diffstat_cell *cells[M_COUNT]; /* per row of ht or fs */
};

/* A row of the comparison: one identity, found on one side or both. */
struct drow {
        const char *key;
        size_t key_len;
        int64_t idx[DIFF_SIDES]; /* row on each side, -1 when absent */
        struct diffstat_result res[M_COUNT];
        double p_adj[M_COUNT];
        bool significant[M_COUNT];
};

struct diff {
        const struct diff_opts *opts;
        struct side side[DIFF_SIDES];
        struct drow *rows;
        size_t n_rows;
        size_t n_metrics; /* 1 for stacks (self only), 2 otherwise */
        size_t tests;     /* comparisons made, the Holm family */
        double alpha;
        size_t regressions, improvements; /* rows whose self change is significant */
        struct pf_buf keys;
};

/* ---- options ---- */

void cmd_diff_help(void);

void cmd_diff_help(void)
{
        printf("Usage: pyflame-diff [OPTIONS] BASE NEW\n"
               "       pyflame-diff [OPTIONS] SET --base-since WHEN --base-until WHEN\n"
               "                    --since WHEN --until WHEN\n"
               "       " REPORT_PROG " diff [OPTIONS] BASE NEW\n"
               "Compare two recordings, or two time windows of one: which functions take a\n"
               "different share of the samples, and which of those changes are more than\n"
               "sampling noise. BASE and NEW are trace files, directories or quoted globs\n"
               "of one rotating recording (read as one), or windows of them:\n"
               "run.db@10s..20s, run.db@10%%..50%%, run.db@..5s, run.db@30s..,\n"
               "dir@2026-12-01T22:00:00Z..2026-12-01T23:00:00Z, dir@-1h.. (wall clock:\n"
               "ISO-8601 UTC, or before the recording's end).\n"
               "\n"
               "Windows by wall clock (one SET, e.g. this hour against the same hour\n"
               "yesterday, or each side's own):\n"
               "      --base-since WHEN  BASE from WHEN (2026-12-01T22:00:00Z, -25h)\n"
               "      --base-until WHEN  BASE up to WHEN\n"
               "      --since WHEN       NEW from WHEN\n"
               "      --until WHEN       NEW up to WHEN\n"
               "\n"
               "Rows:\n"
               "      --by-function      per function (default)\n"
               "      --by-line          per source line\n"
               "      --folded           per whole stack\n"
               "      --per WHAT         samples: shares of each side's samples (default);\n"
               "                         time: time in each row (samples / sampling rate)\n"
               "\n"
               "Significance:\n"
               "      --confidence C     confidence of the test, default 99%% (95, 0.999, ...);\n"
               "                         family-wise over all rows (Holm), samples in time\n"
               "                         blocks to account for autocorrelation\n"
               "      --min-samples N    test only rows with at least N samples on both sides\n"
               "                         together (default %d)\n"
               "\n"
               "Gate (exit status 1 when a significant change crosses a rule):\n"
               "      --fail-on RULE     METRIC:CHANGE, METRIC self or total, CHANGE +5pp\n"
               "                         (percentage points of share), +20%% (relative),\n"
               "                         or with --per time +50ms; -CHANGE trips on drops\n"
               "                         instead of rises; repeatable\n"
               "\n"
               "Output:\n"
               "      --format FORMAT    text (default), markdown (a pull-request comment),\n"
               "                         csv, json, or folded ('stack base new' lines for\n"
               "                         difffolded flame graphs)\n"
               "      --top N            rows to show (default %d in text and markdown, all\n"
               "                         in csv and json; 0 for all)\n"
               "  -o, --output FILE      write to FILE (replaced only once complete)\n"
               "\n"
               "Selection (both sides):\n"
               "      --pid PID[,PID..]  only these processes\n"
               "      --thread T[,T..]   only these threads (OS id, Python id or name)\n"
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
               "Exit status: 0 no rule tripped, 1 a rule tripped, 2 bad input.\n",
               DIFF_MIN_SAMPLES, DIFF_TOP_DEFAULT);
}

enum {
        OPT_BY_FUNCTION = 256,
        OPT_BY_LINE,
        OPT_FOLDED,
        OPT_PER,
        OPT_CONFIDENCE,
        OPT_MIN_SAMPLES,
        OPT_FAIL_ON,
        OPT_FORMAT,
        OPT_TOP,
        OPT_BASE_SINCE,
        OPT_BASE_UNTIL,
        OPT_SINCE,
        OPT_UNTIL,
};

static const struct option long_options[] = {
    {"by-function", no_argument, NULL, OPT_BY_FUNCTION},
    {"by-line", no_argument, NULL, OPT_BY_LINE},
    {"folded", no_argument, NULL, OPT_FOLDED},
    {"per", required_argument, NULL, OPT_PER},
    {"confidence", required_argument, NULL, OPT_CONFIDENCE},
    {"min-samples", required_argument, NULL, OPT_MIN_SAMPLES},
    {"fail-on", required_argument, NULL, OPT_FAIL_ON},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"top", required_argument, NULL, OPT_TOP},
    {"base-since", required_argument, NULL, OPT_BASE_SINCE},
    {"base-until", required_argument, NULL, OPT_BASE_UNTIL},
    {"since", required_argument, NULL, OPT_SINCE},
    {"until", required_argument, NULL, OPT_UNTIL},
    {"output", required_argument, NULL, 'o'},
    SELECT_LONG_OPTIONS,
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int parse_count(const char *s, uint64_t *v)
{
        char *end;
        errno = 0;
        unsigned long long x = strtoull(s, &end, 10);
        if (errno || end == s || *end || s[0] == '-')
                return -1;
        *v = x;
        return 0;
}

/* "99", "99%", "99.9" or "0.99": a confidence in [0.5, 1). */
static int parse_confidence(const char *s, double *c)
{
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        bool pct = *end == '%';
        if (errno || end == s || (*end && !(pct && !end[1])) || !isfinite(v))
                return -1;
        if (pct || v >= 1.0)
                v /= 100.0;
        if (v < 0.5 || v >= 1.0)
                return -1;
        *c = v;
        return 0;
}

/* METRIC:CHANGE, e.g. self:+5pp, total:+20%, self:+50ms. */
static int parse_rule(const char *s, struct gate_rule *rule)
{
        const char *colon = strchr(s, ':');
        if (!colon)
                return report_usage(DIFF_CMD,
                                    "--fail-on: '%s' is not METRIC:CHANGE (e.g. self:+5pp, "
                                    "total:+20%%)",
                                    s);
        size_t n = (size_t)(colon - s);
        struct gate_rule r = {.text = s};
        if (n == 4 && !strncmp(s, "self", 4))
                r.metric = M_SELF;
        else if (n == 5 && !strncmp(s, "total", 5))
                r.metric = M_TOTAL;
        else
                return report_usage(DIFF_CMD, "--fail-on: '%.*s' is not a metric: self or total",
                                    (int)n, s);
        const char *v = colon + 1;
        char *end;
        errno = 0;
        r.decrease = *v == '-';
        double x = fabs(strtod(v, &end));
        if (errno || end == v || !isfinite(x) || *v == ' ')
                return report_usage(DIFF_CMD,
                                    "--fail-on: '%s' has no number after the colon (e.g. "
                                    "self:+5pp)",
                                    s);
        if (!strcmp(end, "pp")) {
                r.kind = RULE_PP;
                r.threshold = x / 100.0;
        } else if (!strcmp(end, "%")) {
                r.kind = RULE_REL;
                r.threshold = x / 100.0;
        } else if (!strcmp(end, "ms") || !strcmp(end, "s") || !strcmp(end, "us")) {
                r.kind = RULE_TIME;
                r.threshold = x * (!strcmp(end, "s") ? 1.0 : !strcmp(end, "ms") ? 1e-3 : 1e-6);
        } else {
                return report_usage(DIFF_CMD,
                                    "--fail-on: '%s' needs a unit: pp (percentage points of "
                                    "share), %% (relative change) or, with --per time, ms or s",
                                    s);
        }
        *rule = r;
        return 0;
}

static int add_rule(struct diff_opts *o, const char *s)
{
        struct gate_rule r;
        int rc = parse_rule(s, &r);
        if (rc)
                return rc;
        struct gate_rule *p = reallocarray(o->rules, o->n_rules + 1, sizeof(*p));
        if (!p)
                return report_fail(NULL, "out of memory");
        o->rules = p;
        o->rules[o->n_rules++] = r;
        return 0;
}

/*
 * One option of getopt's, c (its argument in optarg). Returns 0, 1 when
 * --help was printed, or REPORT_EXIT_FAIL.
 */
static int diff_option(struct diff_opts *o, int c, char **argv)
{
        switch (c) {
        case OPT_BY_FUNCTION:
        case OPT_BY_LINE:
        case OPT_FOLDED: {
                enum diff_view v = c == OPT_BY_FUNCTION ? DIFF_BY_FUNCTION
                                   : c == OPT_BY_LINE   ? DIFF_BY_LINE
                                                        : DIFF_FOLDED;
                if (o->view_given && o->view != v)
                        return report_usage(DIFF_CMD, "--by-function, --by-line and --folded are "
                                                      "different rows; pick one");
                o->view = v;
                o->view_given = true;
                break;
        }
        case OPT_BASE_SINCE:
        case OPT_BASE_UNTIL:
        case OPT_SINCE:
        case OPT_UNTIL: {
                int64_t ns;
                bool rel;
                if (pf_parse_wall_time(optarg, &ns, &rel) < 0)
                        return report_usage(DIFF_CMD,
                                            "%s: '%s' is not a time such as "
                                            "2026-12-01T22:00:00Z (UTC) or -1h (before the end)",
                                            argv[optind - 1], optarg);
                int side = c == OPT_BASE_SINCE || c == OPT_BASE_UNTIL ? 0 : 1;
                if (c == OPT_BASE_SINCE || c == OPT_SINCE)
                        o->since[side] = optarg;
                else
                        o->until[side] = optarg;
                break;
        }
        case OPT_PER:
                if (!strcmp(optarg, "samples"))
                        o->per = PER_SAMPLES;
                else if (!strcmp(optarg, "time"))
                        o->per = PER_TIME;
                else
                        return report_usage(DIFF_CMD, "--per: '%s' is not samples or time", optarg);
                break;
        case OPT_CONFIDENCE:
                if (parse_confidence(optarg, &o->confidence) < 0)
                        return report_usage(DIFF_CMD,
                                            "--confidence: '%s' is not a confidence "
                                            "between 50%% and 100%% (e.g. 99, 99.9%%, "
                                            "0.95)",
                                            optarg);
                break;
        case OPT_MIN_SAMPLES:
                if (parse_count(optarg, &o->min_samples) < 0)
                        return report_usage(DIFF_CMD,
                                            "--min-samples: '%s' is not a number of "
                                            "samples",
                                            optarg);
                break;
        case OPT_FAIL_ON: {
                int rc = add_rule(o, optarg);
                if (rc)
                        return rc;
                break;
        }
        case OPT_FORMAT:
                if (!strcmp(optarg, "text"))
                        o->format = DF_TEXT;
                else if (!strcmp(optarg, "markdown") || !strcmp(optarg, "md"))
                        o->format = DF_MARKDOWN;
                else if (!strcmp(optarg, "csv"))
                        o->format = DF_CSV;
                else if (!strcmp(optarg, "json"))
                        o->format = DF_JSON;
                else if (!strcmp(optarg, "folded"))
                        o->format = DF_FOLDED;
                else
                        return report_usage(DIFF_CMD,
                                            "--format: '%s' is not text, markdown, csv, "
                                            "json or folded",
                                            optarg);
                o->format_given = true;
                break;
        case OPT_TOP: {
                uint64_t v;
                if (parse_count(optarg, &v) < 0 || v > SIZE_MAX)
                        return report_usage(DIFF_CMD,
                                            "--top: '%s' is not a number of rows (0 "
                                            "shows all)",
                                            optarg);
                o->top = (size_t)v;
                o->top_given = true;
                break;
        }
        case 'o':
                o->output = optarg;
                break;
        case 'h':
                cmd_diff_help();
                return 1;
        default:
                return report_bad_option(DIFF_CMD, c, argv);
        }
        return 0;
}

/* The traces, and what the options mean together. Returns 0 or REPORT_EXIT_FAIL. */
static int diff_check(struct diff_opts *o, int argc, char **argv)
{
        bool windows[DIFF_SIDES];
        for (int i = 0; i < DIFF_SIDES; i++)
                windows[i] = o->since[i] || o->until[i];
        /* One set and a window for each side: two windows of one recording. */
        if (argc - optind == 1 && (windows[0] || windows[1])) {
                if (!windows[0] || !windows[1])
                        return report_usage(DIFF_CMD,
                                            "one trace or set compares two of its windows: give "
                                            "--base-since/--base-until and --since/--until");
                o->spec[0] = o->spec[1] = argv[optind];
        } else if (argc - optind < 2)
                return report_usage(DIFF_CMD, argc - optind == 0
                                                  ? "no traces given: BASE and NEW"
                                                  : "only one trace given: BASE and NEW");
        else if (argc - optind > 2)
                return report_usage(DIFF_CMD, "two traces at a time ('%s' is extra)",
                                    argv[optind + 2]);
        else {
                o->spec[0] = argv[optind];
                o->spec[1] = argv[optind + 1];
        }
        if (o->format == DF_FOLDED) {
                if (o->view_given && o->view != DIFF_FOLDED)
                        return report_usage(DIFF_CMD,
                                            "--format folded writes whole stacks; it does not "
                                            "combine with --by-%s",
                                            o->view == DIFF_BY_LINE ? "line" : "function");
                o->view = DIFF_FOLDED;
        }
        if (!o->top_given && (o->format == DF_CSV || o->format == DF_JSON))
                o->top = 0;
        for (size_t i = 0; i < o->n_rules; i++) {
                const struct gate_rule *r = &o->rules[i];
                if (r->kind == RULE_PP && o->per == PER_TIME)
                        return report_usage(DIFF_CMD,
                                            "--fail-on %s: pp compares shares of samples; with "
                                            "--per time give a time (+50ms) or a relative "
                                            "change (+20%%)",
                                            r->text);
                if (r->kind == RULE_TIME && o->per == PER_SAMPLES)
                        return report_usage(DIFF_CMD,
                                            "--fail-on %s: a time needs --per time; shares "
                                            "change in pp (+5pp) or relatively (+20%%)",
                                            r->text);
                if (r->metric == M_TOTAL && o->view == DIFF_FOLDED)
                        return report_usage(DIFF_CMD,
                                            "--fail-on %s: stacks have only self samples; use "
                                            "self:",
                                            r->text);
        }
        return select_opts_check(&o->select, DIFF_CMD);
}

/* Returns 0, 1 when --help was printed, or REPORT_EXIT_FAIL after a message. */
static int parse_args(int argc, char **argv, struct diff_opts *o)
{
        o->confidence = DIFF_CONFIDENCE;
        o->min_samples = DIFF_MIN_SAMPLES;
        o->top = DIFF_TOP_DEFAULT;
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
                        rc = diff_option(o, c, argv);
                if (rc)
                        return rc;
        }
        return diff_check(o, argc, argv);
}

/* ---- one side ---- */

/*
 * Split PATH@FROM..TO. A spec naming an existing file is a path whatever it
 * holds, so a file called "a@b.db" is still reachable.
 */
static int side_parse(struct side *s, const char *spec)
{
        s->spec = spec;
        struct stat st;
        const char *at = strrchr(spec, '@');
        if (!at || stat(spec, &st) == 0) {
                s->path = strdup(spec);
                return s->path ? 0 : report_fail(NULL, "out of memory");
        }
        const char *win = at + 1, *dots = strstr(win, "..");
        if (!dots || (dots == win && !dots[2]))
                return report_usage(DIFF_CMD,
                                    "%s: '@%s' is not a window FROM..TO (e.g. @10s..20s, "
                                    "@10%%..50%%, @..5s, @30s..)",
                                    spec, win);
        s->path = strndup(spec, (size_t)(at - spec));
        s->from = dots > win ? strndup(win, (size_t)(dots - win)) : NULL;
        s->to = dots[2] ? strdup(dots + 2) : NULL;
        if (!s->path || (dots > win && !s->from) || (dots[2] && !s->to))
                return report_fail(NULL, "out of memory");
        int64_t from = 0, to = 0;
        bool from_pct = false, to_pct = false, rel;
        /* An end that is no offset may be a wall-clock time (--since/--until's). */
        if (s->from && pf_parse_duration(s->from, &from, &from_pct) < 0 &&
            pf_parse_wall_time(s->from, &from, &rel) == 0) {
                s->since = s->from;
                s->from = NULL;
        }
        if (s->to && pf_parse_duration(s->to, &to, &to_pct) < 0 &&
            pf_parse_wall_time(s->to, &to, &rel) == 0) {
                s->until = s->to;
                s->to = NULL;
        }
        if ((s->from && pf_parse_duration(s->from, &from, &from_pct) < 0) ||
            (s->to && pf_parse_duration(s->to, &to, &to_pct) < 0))
                return report_usage(DIFF_CMD,
                                    "%s: the window's ends must be times such as 1.5s, 200ms "
                                    "or 10%% after the start, or wall-clock times such as "
                                    "2026-12-01T22:00:00Z or -1h",
                                    spec);
        if ((s->since || s->until) && (s->from || s->to))
                return report_usage(DIFF_CMD,
                                    "%s: give both ends of the window as offsets or both by "
                                    "wall clock",
                                    spec);
        if (s->since || s->until)
                return 0;
        /* Ends in one unit compare now; mixed ones once the duration is known. */
        if (s->from && s->to && from_pct == to_pct && to <= from)
                return report_usage(DIFF_CMD, "%s: the window is empty: it ends before it starts",
                                    spec);
        return 0;
}

/* A side's window from --base-since/--base-until or --since/--until, if given. */
static int side_wall_window(struct side *s, const char *since, const char *until,
                            const char *options)
{
        if (!since && !until)
                return 0;
        if (s->from || s->to || s->since || s->until)
                return report_usage(DIFF_CMD, "%s: a window is given by %s too; give one", s->spec,
                                    options);
        if ((since && !(s->since = strdup(since))) || (until && !(s->until = strdup(until))))
                return report_fail(NULL, "out of memory");
        return 0;
}

/* Seconds one sample stands for: the achieved per-thread interval, else 1 / requested rate. */
static int side_sample_seconds(struct side *s, const struct trace_summary *sum)
{
        uint64_t intervals = 0;
        double span = 0;
        uint32_t n = trace_reader_thread_count(s->r);
        for (uint32_t i = 0; i < n; i++) {
                struct trace_thread t;
                if (trace_reader_thread_at(s->r, i, &t) < 0 || t.samples < 2 ||
                    t.last_ns <= t.first_ns)
                        continue;
                intervals += t.samples - 1;
                span += (double)(t.last_ns - t.first_ns);
        }
        if (intervals)
                s->sample_s = span / 1e9 / (double)intervals;
        else if (sum->rate_hz > 0)
                s->sample_s = 1.0 / sum->rate_hz;
        else
                return report_fail(s->path,
                                   "--per time needs the sampling rate, and this trace neither "
                                   "records it nor has a thread with two samples; use --per "
                                   "samples");
        return 0;
}

/* Per-row counts of the stacks `e` on side `s` into x[metric][row] (zeroed first). */
static int rows_of(struct side *s, size_t n_metrics, const struct slice_entry *e, size_t n,
                   uint64_t **x)
{
        for (size_t m = 0; m < n_metrics; m++)
                memset(x[m], 0, s->n_rows * sizeof(*x[m]));
        if (n_metrics > 1)
                return hot_table_count(&s->ht, s->r, e, n, x[M_SELF], x[M_TOTAL]);
        for (size_t i = 0; i < n; i++) {
                uint32_t line = s->fs.line_of_stack[e[i].stack];
                if (!line)
                        return TRACE_ERR_CORRUPT;
                x[M_SELF][line - 1] += e[i].count;
        }
        return 0;
}

/* Add one block's per-row counts to the rows' sums. */
static void add_block(struct diffstat_cell *cells, const uint64_t *x, size_t n, uint64_t block_n)
{
        for (size_t i = 0; i < n; i++) {
                if (!x[i])
                        continue;
                double v = (double)x[i];
                cells[i].sum_x2 += v * v;
                cells[i].sum_xn += v * (double)block_n;
        }
}

/* Per-block sums of every row (hot table or folded lines) of a side. */
static int side_blocks(struct side *s, size_t n_metrics)
{
        const struct slice_counts *sc = &s->sc;
        uint64_t *x[M_COUNT] = {NULL, NULL};
        int rc = 0;
        for (size_t m = 0; m < n_metrics; m++) {
                x[m] = calloc(s->n_rows ? s->n_rows : 1, sizeof(*x[m]));
                if (!x[m])
                        rc = TRACE_ERR_NOMEM;
        }
        for (uint32_t b = 0; rc == 0 && b < sc->n_slices; b++) {
                rc = rows_of(s, n_metrics, sc->entries + sc->first[b],
                             sc->first[b + 1] - sc->first[b], x);
                for (size_t m = 0; rc == 0 && m < n_metrics; m++)
                        add_block(s->cells[m], x[m], s->n_rows, sc->samples[b]);
        }
        free(x[0]);
        free(x[1]);
        return rc;
}

/* Is `pid` in the selection's pid list (an empty list keeps every pid)? */
static bool pid_selected(const struct trace_filter *f, int32_t pid)
{
        for (size_t i = 0; i < f->n_pids; i++)
                if (f->pids[i] == pid)
                        return true;
        return f->n_pids == 0;
}

/*
 * A side merged from several recordings: count the selection once per
 * recording (its processes) and add each run's per-row counts to the rows'
 * per-run sums, for the variance between runs.
 */
static int side_runs(struct side *s, size_t n_metrics)
{
        uint32_t n_rec = trace_reader_recording_count(s->r);
        uint32_t n_proc = trace_reader_process_count(s->r);
        if (n_rec < 2)
                return 0;
        int32_t *pids = calloc(n_proc ? n_proc : 1, sizeof(*pids));
        struct slice_entry *e = calloc(s->sc.all.n_stacks ? s->sc.all.n_stacks : 1, sizeof(*e));
        uint64_t *x[M_COUNT] = {NULL, NULL};
        int rc = pids && e ? 0 : TRACE_ERR_NOMEM;
        for (size_t m = 0; rc == 0 && m < n_metrics; m++)
                if (!(x[m] = calloc(s->n_rows ? s->n_rows : 1, sizeof(*x[m]))))
                        rc = TRACE_ERR_NOMEM;
        for (uint32_t rec = 1; rc == 0 && rec <= n_rec; rec++) {
                size_t k = 0;
                for (uint32_t i = 0; i < n_proc; i++) {
                        struct trace_process p;
                        uint32_t origin;
                        if (trace_reader_process_at(s->r, i, &p) == 0 &&
                            trace_reader_process_origin(s->r, i, &origin, NULL) == 0 &&
                            origin == rec && pid_selected(&s->sel.filter, p.pid))
                                pids[k++] = p.pid;
                }
                if (!k)
                        continue;
                struct trace_filter f = s->sel.filter;
                f.pids = pids;
                f.n_pids = k;
                struct stack_counts sc = {0};
                if ((rc = stack_counts_build(s->r, &f, &sc)) < 0)
                        break;
                size_t n = 0;
                for (uint32_t st = 0; st < sc.n_stacks; st++)
                        if (sc.counts[st])
                                e[n++] = (struct slice_entry){0, st, sc.counts[st]};
                uint64_t total = sc.total;
                stack_counts_free(&sc);
                if (!total)
                        continue;
                if ((rc = rows_of(s, n_metrics, e, n, x)) < 0)
                        break;
                for (size_t m = 0; m < n_metrics; m++)
                        for (size_t i = 0; i < s->n_rows; i++) {
                                double v = (double)x[m][i];
                                s->cells[m][i].run_sum_x2 += v * v;
                                s->cells[m][i].run_sum_xn += v * (double)total;
                        }
                s->stats.runs++;
                s->stats.run_sum_n2 += (double)total * (double)total;
        }
        free(pids);
        free(e);
        free(x[0]);
        free(x[1]);
        return rc;
}

/*
 * Open, select, count and aggregate one side. Returns 0, or
 * REPORT_EXIT_FAIL once a message was printed.
 */
static int side_load(struct diff *d, struct side *s)
{
        const struct diff_opts *o = d->opts;
        int rc = report_open_inputs(&s->path, 1, o->output, &s->r);
        if (rc)
                return rc;
        struct select_opts so = o->select;
        so.from = s->from;
        so.to = s->to;
        so.since = s->since;
        so.until = s->until;
        if ((rc = select_resolve(s->r, s->path, &so, &s->sel)) != 0)
                return rc;
        struct trace_summary sum;
        int st = trace_reader_summary(s->r, &sum);
        if (st < 0)
                return report_read_failed(s->path, s->r, st);
        if (o->per == PER_TIME && (rc = side_sample_seconds(s, &sum)) != 0)
                return rc;
        s->from_ns = s->sel.filter.from_ns;
        s->end_ns = select_end_ns(s->r, &s->sel.filter, &sum);
        if (s->end_ns <= s->from_ns)
                s->end_ns = s->from_ns + 1;

        /* How many samples there are decides how many time blocks to cut. */
        struct stack_counts first = {0};
        if ((st = stack_counts_build(s->r, &s->sel.filter, &first)) < 0)
                return report_read_failed(s->path, s->r, st);
        uint64_t total = first.total;
        stack_counts_free(&first);
        if (total == 0)
                return report_fail(s->spec,
                                   "no sample matches the selection%s, so there is nothing to "
                                   "compare",
                                   o->select.idle ? ""
                                                  : " (threads off CPU are left out; try --idle)");
        uint32_t blocks = diffstat_blocks_for(total);
        int64_t span = s->end_ns - s->from_ns;
        int64_t slice_ns = span / blocks + (span % blocks != 0);
        if ((st = slice_counts_build(s->r, &s->sel.filter, s->from_ns, slice_ns, blocks, &s->sc)) <
            0)
                return report_read_failed(s->path, s->r, st);

        s->stats.samples = s->sc.all.total;
        for (uint32_t b = 0; b < s->sc.n_slices; b++) {
                double n = (double)s->sc.samples[b];
                s->stats.blocks += s->sc.samples[b] > 0;
                s->stats.sum_n2 += n * n;
        }
        s->stats.scale = o->per == PER_TIME ? (double)s->stats.samples * s->sample_s : 1.0;

        if (o->view == DIFF_FOLDED) {
                st = folded_build(s->r, &s->sc.all, &s->fs);
                s->n_rows = s->fs.n;
        } else {
                st = hot_table_build(s->r, &s->sc.all,
                                     o->view == DIFF_BY_LINE ? HOT_BY_LINE : HOT_BY_FUNCTION,
                                     &s->ht);
                s->n_rows = s->ht.n;
        }
        if (st < 0)
                return report_read_failed(s->path, s->r, st);
        for (size_t m = 0; m < d->n_metrics; m++) {
                s->cells[m] = calloc(s->n_rows ? s->n_rows : 1, sizeof(*s->cells[m]));
                if (!s->cells[m])
                        return report_fail(s->path, "out of memory");
        }
        for (size_t i = 0; i < s->n_rows; i++) {
                if (o->view == DIFF_FOLDED) {
                        s->cells[M_SELF][i].x = s->fs.lines[i].count;
                } else {
                        s->cells[M_SELF][i].x = s->ht.rows[i].self;
                        s->cells[M_TOTAL][i].x = s->ht.rows[i].total;
                }
        }
        if ((st = side_blocks(s, d->n_metrics)) < 0 || (st = side_runs(s, d->n_metrics)) < 0)
                return report_read_failed(s->path, s->r, st);
        return 0;
}

static void side_free(struct side *s)
{
        free(s->path);
        free(s->from);
        free(s->to);
        free(s->since);
        free(s->until);
        for (size_t m = 0; m < M_COUNT; m++)
                free(s->cells[m]);
        hot_table_free(&s->ht);
        folded_free(&s->fs);
        slice_counts_free(&s->sc);
        select_free(&s->sel);
        trace_reader_close(s->r);
}

/* ---- matching the rows of the two sides ---- */

/* The identity of row i of side s, appended to b (no terminator). */
static int row_key(const struct diff *d, const struct side *s, size_t i, struct pf_buf *b)
{
        if (d->opts->view == DIFF_FOLDED)
                return pf_buf_append(b, s->fs.lines[i].text, s->fs.lines[i].len);
        const struct trace_frame *f = &s->ht.rows[i].f;
        char num[16];
        int32_t line = d->opts->view == DIFF_BY_LINE ? f->line : f->first_line;
        snprintf(num, sizeof(num), "\x1f%d", (int)line);
        const char *file = f->file ? f->file : "";
        if (pf_buf_append(b, file, strlen(file)) < 0 || pf_buf_append(b, num, strlen(num)) < 0)
                return -1;
        if (d->opts->view == DIFF_BY_LINE)
                return 0;
        return pf_buf_append(b, "\x1f", 1) < 0 ? -1
                                               : pf_buf_append(b, f->function, strlen(f->function));
}

struct key_ref {
        size_t off, len;
        int side;
        size_t idx;
};

static const struct pf_buf *sort_keys; /* qsort has no context argument */

static int key_ref_cmp(const void *a, const void *b)
{
        const struct key_ref *x = a, *y = b;
        size_t n = x->len < y->len ? x->len : y->len;
        int c = memcmp(sort_keys->data + x->off, sort_keys->data + y->off, n);
        if (c)
                return c;
        if (x->len != y->len)
                return x->len < y->len ? -1 : 1;
        return x->side - y->side;
}

static int match_rows(struct diff *d)
{
        size_t n = d->side[0].n_rows + d->side[1].n_rows;
        struct key_ref *refs = calloc(n ? n : 1, sizeof(*refs));
        d->rows = calloc(n ? n : 1, sizeof(*d->rows));
        if (!refs || !d->rows) {
                free(refs);
                return TRACE_ERR_NOMEM;
        }
        size_t k = 0;
        for (int s = 0; s < DIFF_SIDES; s++) {
                for (size_t i = 0; i < d->side[s].n_rows; i++) {
                        size_t off = d->keys.len;
                        if (row_key(d, &d->side[s], i, &d->keys) < 0) {
                                free(refs);
                                return TRACE_ERR_NOMEM;
                        }
                        refs[k++] = (struct key_ref){off, d->keys.len - off, s, i};
                }
        }
        sort_keys = &d->keys;
        qsort(refs, n, sizeof(*refs), key_ref_cmp);
        sort_keys = NULL;
        for (size_t i = 0; i < n; i++) {
                struct drow *prev = d->n_rows ? &d->rows[d->n_rows - 1] : NULL;
                const char *key = (const char *)d->keys.data + refs[i].off;
                if (!prev || prev->key_len != refs[i].len || memcmp(prev->key, key, refs[i].len) ||
                    prev->idx[refs[i].side] >= 0) {
                        prev = &d->rows[d->n_rows++];
                        *prev = (struct drow){.key = key, .key_len = refs[i].len, .idx = {-1, -1}};
                }
                prev->idx[refs[i].side] = (int64_t)refs[i].idx;
        }
        free(refs);
        return 0;
}

/* ---- testing ---- */

static int test_rows(struct diff *d)
{
        static const struct diffstat_cell none = {0};
        size_t cap = d->n_rows * d->n_metrics;
        double *p = calloc(cap ? cap : 1, sizeof(*p));
        double *adj = calloc(cap ? cap : 1, sizeof(*adj));
        if (!p || !adj) {
                free(p);
                free(adj);
                return TRACE_ERR_NOMEM;
        }
        size_t m = 0;
        for (size_t i = 0; i < d->n_rows; i++) {
                struct drow *row = &d->rows[i];
                for (size_t k = 0; k < d->n_metrics; k++) {
                        const struct diffstat_cell *c[DIFF_SIDES];
                        for (int s = 0; s < DIFF_SIDES; s++)
                                c[s] = row->idx[s] >= 0 ? &d->side[s].cells[k][row->idx[s]] : &none;
                        diffstat_compare(&d->side[0].stats, c[0], &d->side[1].stats, c[1],
                                         d->opts->min_samples, &row->res[k]);
                        row->p_adj[k] = 1.0;
                        if (row->res[k].tested)
                                p[m++] = row->res[k].p;
                }
        }
        int rc = diffstat_holm(p, m, adj) < 0 ? TRACE_ERR_NOMEM : 0;
        d->tests = m;
        m = 0;
        for (size_t i = 0; rc == 0 && i < d->n_rows; i++) {
                struct drow *row = &d->rows[i];
                for (size_t k = 0; k < d->n_metrics; k++) {
                        if (!row->res[k].tested)
                                continue;
                        row->p_adj[k] = adj[m++];
                        row->significant[k] = row->p_adj[k] <= d->alpha && row->res[k].change != 0;
                }
                if (row->significant[M_SELF]) {
                        if (row->res[M_SELF].change > 0)
                                d->regressions++;
                        else
                                d->improvements++;
                }
        }
        free(p);
        free(adj);
        return rc;
}

static double abs_change(const struct drow *r, enum metric m)
{
        return fabs(r->res[m].change);
}

static struct diff *sort_diff; /* qsort has no context argument */

/* Largest self change first, then largest total change, then identity. */
static int drow_cmp(const void *a, const void *b)
{
        const struct drow *x = a, *y = b;
        for (size_t k = 0; k < sort_diff->n_metrics; k++) {
                double cx = abs_change(x, (enum metric)k), cy = abs_change(y, (enum metric)k);
                if (cx != cy)
                        return cx > cy ? -1 : 1;
        }
        size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
        int c = memcmp(x->key, y->key, n);
        if (c)
                return c;
        return x->key_len < y->key_len ? -1 : x->key_len > y->key_len;
}

/* ---- presenting a row ---- */

/* The side whose names a row shows: the new one when it has the row. */
static const struct side *row_side(const struct diff *d, const struct drow *r, size_t *idx)
{
        int s = r->idx[1] >= 0 ? 1 : 0;
        *idx = (size_t)r->idx[s];
        return &d->side[s];
}

static const char *row_name(const struct diff *d, const struct drow *r)
{
        size_t i;
        const struct side *s = row_side(d, r, &i);
        if (d->opts->view == DIFF_FOLDED)
                return NULL;
        return frame_name(&s->ht.rows[i].f);
}

static const struct trace_frame *row_frame(const struct diff *d, const struct drow *r)
{
        size_t i;
        const struct side *s = row_side(d, r, &i);
        return d->opts->view == DIFF_FOLDED ? NULL : &s->ht.rows[i].f;
}

/* "file:line" of a row (its first line for functions), into buf. */
static const char *row_location(const struct diff *d, const struct drow *r, char *buf, size_t size)
{
        const struct trace_frame *f = row_frame(d, r);
        if (!f || !f->file || !*f->file)
                return "-";
        int32_t line = d->opts->view == DIFF_BY_LINE ? f->line : f->first_line;
        if (line < 0)
                snprintf(buf, size, "%s:?", f->file);
        else
                snprintf(buf, size, "%s:%d", f->file, (int)line);
        return buf;
}

/* Values shown: percent of samples, or milliseconds. */
static double shown(const struct diff *d, double v)
{
        return d->opts->per == PER_TIME ? v * 1e3 : v * 100.0;
}

static uint64_t row_count(const struct diff *d, const struct drow *r, int s, enum metric m)
{
        return r->idx[s] >= 0 ? d->side[s].cells[m][r->idx[s]].x : 0;
}

static const char *sig_word(const struct drow *r, enum metric m)
{
        if (!r->res[m].tested)
                return "-";
        if (!r->significant[m])
                return "";
        return r->res[m].change > 0 ? "regress" : "improve";
}

/* ---- the table (text, csv, json) ---- */

#define MAX_COLUMNS 32

struct columns {
        struct table_column c[MAX_COLUMNS];
        size_t n;
};

static void col(struct columns *cs, const char *title, const char *key, enum table_kind kind,
                unsigned flags)
{
        cs->c[cs->n++] = (struct table_column){title, key, kind, flags};
}

static void metric_columns(struct columns *cs, const struct diff *d, enum metric m)
{
        bool time = d->opts->per == PER_TIME;
        bool self = m == M_SELF;
        unsigned text = self ? 0 : TABLE_DATA_ONLY;
        /* JSON keys, per metric. */
        static const char *const keys[M_COUNT][10] = {
            {"self_base", "self_new", "self_change", "self_change_rel_pct", "self_base_samples",
             "self_new_samples", "self_p", "self_p_adj", "self_tested", "self_significant"},
            {"total_base", "total_new", "total_change", "total_change_rel_pct",
             "total_base_samples", "total_new_samples", "total_p", "total_p_adj", "total_tested",
             "total_significant"},
        };
        col(cs, time ? "BASE_MS" : "BASE%", keys[m][0], TABLE_DECIMAL, text);
        col(cs, time ? "NEW_MS" : "NEW%", keys[m][1], TABLE_DECIMAL, text);
        col(cs, self ? (time ? "CHANGE_MS" : "CHANGE_PP") : (time ? "TOTAL_MS" : "TOTAL_PP"),
            keys[m][2], TABLE_SIGNED, 0);
        if (self)
                col(cs, "REL%", NULL, TABLE_TEXT, TABLE_TEXT_ONLY | TABLE_RIGHT);
        col(cs, "REL%", keys[m][3], TABLE_SIGNED, TABLE_DATA_ONLY);
        col(cs, "BASE_N", keys[m][4], TABLE_COUNT, text);
        col(cs, "NEW_N", keys[m][5], TABLE_COUNT, text);
        col(cs, "P", keys[m][6], TABLE_PVALUE, TABLE_DATA_ONLY);
        col(cs, "P_ADJ", keys[m][7], TABLE_PVALUE, text);
        col(cs, "TESTED", keys[m][8], TABLE_BOOL, TABLE_DATA_ONLY);
        col(cs, self ? "SIG" : "TOTAL_SIG", NULL, TABLE_TEXT, TABLE_TEXT_ONLY);
        col(cs, "SIG", keys[m][9], TABLE_BOOL, TABLE_DATA_ONLY);
}

static void build_columns(struct columns *cs, const struct diff *d)
{
        for (size_t k = 0; k < d->n_metrics; k++)
                metric_columns(cs, d, (enum metric)k);
        switch (d->opts->view) {
        case DIFF_BY_FUNCTION:
                col(cs, "FUNCTION", "function", TABLE_TEXT, 0);
                col(cs, "LOCATION", NULL, TABLE_TEXT, TABLE_TEXT_ONLY);
                col(cs, "FILE", "file", TABLE_TEXT, TABLE_DATA_ONLY);
                col(cs, "FIRST_LINE", "first_line", TABLE_INT, TABLE_DATA_ONLY);
                break;
        case DIFF_BY_LINE:
                col(cs, "LOCATION", NULL, TABLE_TEXT, TABLE_TEXT_ONLY);
                col(cs, "FILE", "file", TABLE_TEXT, TABLE_DATA_ONLY);
                col(cs, "LINE", "line", TABLE_INT, TABLE_DATA_ONLY);
                col(cs, "FUNCTION", "function", TABLE_TEXT, 0);
                break;
        case DIFF_FOLDED:
                col(cs, "STACK", "stack", TABLE_TEXT, 0);
                break;
        }
}

static void fill_metric(struct table *t, struct table_cell *c, size_t *k, const struct diff *d,
                        const struct drow *r, enum metric m)
{
        const struct diffstat_result *res = &r->res[m];
        c[(*k)++].real = shown(d, res->base);
        c[(*k)++].real = shown(d, res->new_);
        c[(*k)++].real = shown(d, res->change);
        bool finite = isfinite(res->rel);
        if (m == M_SELF) {
                struct table_cell *rel = &c[(*k)++];
                if (finite)
                        rel->text = table_printf(t, "%+.1f", 100.0 * res->rel);
                else
                        rel->text = "new";
        }
        c[*k].real = 100.0 * res->rel;
        c[(*k)++].null = !finite;
        c[(*k)++].num = (int64_t)row_count(d, r, 0, m);
        c[(*k)++].num = (int64_t)row_count(d, r, 1, m);
        c[*k].real = res->p;
        c[(*k)++].null = !res->tested;
        c[*k].real = r->p_adj[m];
        c[(*k)++].null = !res->tested;
        c[(*k)++].num = res->tested;
        c[(*k)++].text = sig_word(r, m);
        c[(*k)++].num = r->significant[m];
}

static void fill_row(struct table *t, const struct diff *d, const struct drow *r)
{
        struct table_cell *c = table_add_row(t);
        if (!c)
                return;
        size_t k = 0;
        for (size_t m = 0; m < d->n_metrics; m++)
                fill_metric(t, c, &k, d, r, (enum metric)m);
        const struct trace_frame *f = row_frame(d, r);
        char loc[512];
        switch (d->opts->view) {
        case DIFF_BY_FUNCTION:
                c[k++].text = row_name(d, r);
                c[k++].text = table_printf(t, "%s", row_location(d, r, loc, sizeof(loc)));
                c[k++].text = f->file;
                c[k].num = f->first_line;
                c[k++].null = f->first_line < 0;
                break;
        case DIFF_BY_LINE:
                c[k++].text = table_printf(t, "%s", row_location(d, r, loc, sizeof(loc)));
                c[k++].text = f->file;
                c[k].num = f->line;
                c[k++].null = f->line < 0;
                c[k++].text = row_name(d, r);
                break;
        case DIFF_FOLDED:
                c[k++].text = table_printf(t, "%.*s", (int)r->key_len, r->key);
                break;
        }
}

static size_t rows_shown(const struct diff *d)
{
        size_t top = d->opts->top;
        return top && top < d->n_rows ? top : d->n_rows;
}

static const char *row_noun(const struct diff *d)
{
        static const char *const nouns[] = {"functions", "lines", "stacks"};
        return nouns[d->opts->view];
}

static void text_side(struct out *o, const char *label, const struct side *s, bool time)
{
        out_printf(o, "%s %s: %llu samples in %.3f s", label, s->spec,
                   (unsigned long long)s->stats.samples, (double)(s->end_ns - s->from_ns) / 1e9);
        if (s->stats.runs > 1)
                out_printf(o, ", %u runs", s->stats.runs);
        if (time)
                out_printf(o, ", %.3f ms per sample", s->sample_s * 1e3);
        out_puts(o, "\n");
}

static void write_text(struct diff *d, struct table *t, struct out *o)
{
        bool time = d->opts->per == PER_TIME;
        text_side(o, "base", &d->side[0], time);
        text_side(o, "new ", &d->side[1], time);
        out_printf(o, "by %s, %s; %g%% confidence, Holm-adjusted over %zu tests",
                   view_names[d->opts->view],
                   time ? "time in milliseconds" : "share of samples in percent",
                   100.0 * d->opts->confidence, d->tests);
        out_printf(o, " (rows with %llu+ samples)\n", (unsigned long long)d->opts->min_samples);
        size_t shown_rows = rows_shown(d);
        if (d->regressions || d->improvements)
                out_printf(o, "%zu significant change%s: %zu regression%s, %zu improvement%s",
                           d->regressions + d->improvements,
                           d->regressions + d->improvements == 1 ? "" : "s", d->regressions,
                           d->regressions == 1 ? "" : "s", d->improvements,
                           d->improvements == 1 ? "" : "s");
        else
                out_puts(o, "no significant change");
        if (shown_rows < d->n_rows)
                out_printf(o, "; top %zu of %zu %s\n", shown_rows, d->n_rows, row_noun(d));
        else
                out_printf(o, "; %zu %s\n", d->n_rows, row_noun(d));
        table_write(t, OUT_TEXT, o);
}

static void json_side(struct out *o, const struct side *s, bool time)
{
        out_puts(o, "{\"trace\": ");
        out_json_string(o, s->path);
        out_puts(o, ", \"spec\": ");
        out_json_string(o, s->spec);
        out_printf(o,
                   ", \"from_s\": %.6f, \"to_s\": %.6f, \"samples\": %llu, \"blocks\": %u, "
                   "\"runs\": %u",
                   (double)s->from_ns / 1e9, (double)s->end_ns / 1e9,
                   (unsigned long long)s->stats.samples, s->stats.blocks,
                   s->stats.runs > 1 ? s->stats.runs : 1);
        if (time)
                out_printf(o, ", \"ms_per_sample\": %.6f", s->sample_s * 1e3);
        out_puts(o, "}");
}

/* ---- the gate ---- */

struct trip {
        const struct gate_rule *rule;
        const struct drow *row;
};

static bool rule_trips(const struct gate_rule *g, const struct drow *r)
{
        const struct diffstat_result *res = &r->res[g->metric];
        if (!r->significant[g->metric])
                return false;
        double v = g->kind == RULE_REL ? res->rel : res->change;
        if (g->decrease)
                return res->change < 0 && -v >= g->threshold;
        return res->change > 0 && v >= g->threshold;
}

/* Every (rule, row) that trips, rules in the order given, rows in table order. */
static int gate_eval(const struct diff *d, struct trip **out, size_t *n_out)
{
        struct trip *trips = NULL;
        size_t n = 0, cap = 0;
        for (size_t g = 0; g < d->opts->n_rules; g++) {
                for (size_t i = 0; i < d->n_rows; i++) {
                        if (!rule_trips(&d->opts->rules[g], &d->rows[i]))
                                continue;
                        if (n == cap) {
                                size_t c = cap ? 2 * cap : 16;
                                struct trip *p = reallocarray(trips, c, sizeof(*p));
                                if (!p) {
                                        free(trips);
                                        return TRACE_ERR_NOMEM;
                                }
                                trips = p;
                                cap = c;
                        }
                        trips[n++] = (struct trip){&d->opts->rules[g], &d->rows[i]};
                }
        }
        *out = trips;
        *n_out = n;
        return 0;
}

/* The row as a gate message names it: "name (file:line)" or the stack. */
static void row_title(const struct diff *d, const struct drow *r, char *buf, size_t size)
{
        char loc[512];
        if (d->opts->view == DIFF_FOLDED)
                snprintf(buf, size, "%.*s", (int)r->key_len, r->key);
        else if (d->opts->view == DIFF_BY_LINE)
                snprintf(buf, size, "%s (%s)", row_location(d, r, loc, sizeof(loc)),
                         row_name(d, r));
        else
                snprintf(buf, size, "%s (%s)", row_name(d, r),
                         row_location(d, r, loc, sizeof(loc)));
}

static void format_value(const struct diff *d, double v, char *buf, size_t size)
{
        if (d->opts->per == PER_TIME)
                snprintf(buf, size, "%.2f ms", v * 1e3);
        else
                snprintf(buf, size, "%.2f%%", v * 100.0);
}

static void format_change(const struct diff *d, const struct diffstat_result *res, char *buf,
                          size_t size)
{
        char rel[32];
        if (isfinite(res->rel))
                snprintf(rel, sizeof(rel), "%+.1f%%", 100.0 * res->rel);
        else
                snprintf(rel, sizeof(rel), "new");
        if (d->opts->per == PER_TIME)
                snprintf(buf, size, "%+.2f ms, %s", res->change * 1e3, rel);
        else
                snprintf(buf, size, "%+.2f pp, %s", res->change * 100.0, rel);
}

static void gate_report(const struct diff *d, const struct trip *trips, size_t n)
{
        size_t per_rule = 0;
        for (size_t i = 0; i < n; i++) {
                per_rule = i && trips[i].rule == trips[i - 1].rule ? per_rule + 1 : 0;
                size_t left = 0;
                for (size_t j = i; j < n && trips[j].rule == trips[i].rule; j++)
                        left++;
                if (per_rule == DIFF_TRIPS_PER_RULE) {
                        report_fail(NULL, "gate %s: and %zu more", trips[i].rule->text, left);
                        continue;
                }
                if (per_rule > DIFF_TRIPS_PER_RULE)
                        continue;
                const struct drow *r = trips[i].row;
                const struct diffstat_result *res = &r->res[trips[i].rule->metric];
                char title[1024], a[32], b[32], ch[64];
                row_title(d, r, title, sizeof(title));
                format_value(d, res->base, a, sizeof(a));
                format_value(d, res->new_, b, sizeof(b));
                format_change(d, res, ch, sizeof(ch));
                report_fail(NULL, "gate %s tripped by %s: %s %s -> %s (%s; adjusted p %.2g)",
                            trips[i].rule->text, title, metric_names[trips[i].rule->metric], a, b,
                            ch, r->p_adj[trips[i].rule->metric]);
        }
}

static void json_gate(struct out *o, const struct diff *d, const struct trip *trips, size_t n)
{
        out_puts(o, ", \"gate\": {\"rules\": [");
        for (size_t g = 0; g < d->opts->n_rules; g++) {
                out_puts(o, g ? ", " : "");
                out_json_string(o, d->opts->rules[g].text);
        }
        out_printf(o, "], \"passed\": %s, \"trips\": [", n ? "false" : "true");
        for (size_t i = 0; i < n; i++) {
                char title[1024];
                row_title(d, trips[i].row, title, sizeof(title));
                out_puts(o, i ? ", {\"rule\": " : "{\"rule\": ");
                out_json_string(o, trips[i].rule->text);
                out_puts(o, ", \"row\": ");
                out_json_string(o, title);
                out_puts(o, "}");
        }
        out_puts(o, "]}");
}

/* ---- markdown ---- */

/* Text inside a markdown table cell's code span: no pipe, no backquote, no newline. */
static void md_code(struct out *o, const char *s, size_t n)
{
        out_puts(o, "`");
        for (size_t i = 0; i < n && s[i]; i++) {
                char c = s[i];
                if (c == '|')
                        out_puts(o, "\\|");
                else if (c == '`' || (unsigned char)c < 0x20)
                        out_puts(o, "'");
                else
                        out_write(o, &c, 1);
        }
        out_puts(o, "`");
}

static void md_rows(struct out *o, const struct diff *d, bool regressions)
{
        const char *what = regressions ? "Regressions" : "Improvements";
        size_t listed = 0, total = regressions ? d->regressions : d->improvements;
        if (!total)
                return;
        out_printf(o, "\n#### %s\n\n", what);
        if (d->opts->view == DIFF_FOLDED)
                out_puts(o, "| Stack | Base | New | Change | Relative |\n"
                            "|:--|--:|--:|--:|--:|\n");
        else
                out_printf(o,
                           "| Function | %s | Base | New | Change | Relative |\n"
                           "|:--|:--|--:|--:|--:|--:|\n",
                           d->opts->view == DIFF_BY_LINE ? "Line" : "Location");
        size_t limit = d->opts->top ? d->opts->top : SIZE_MAX;
        /* Rows sorted by |change|: a pass in table order lists the largest first. */
        for (size_t i = 0; i < d->n_rows && listed < limit; i++) {
                const struct drow *r = &d->rows[i];
                const struct diffstat_result *res = &r->res[M_SELF];
                if (!r->significant[M_SELF] || (res->change > 0) != regressions)
                        continue;
                listed++;
                char a[32], b[32], loc[512];
                format_value(d, res->base, a, sizeof(a));
                format_value(d, res->new_, b, sizeof(b));
                out_puts(o, "| ");
                if (d->opts->view == DIFF_FOLDED) {
                        md_code(o, r->key, r->key_len);
                } else {
                        const char *name = row_name(d, r);
                        md_code(o, name, strlen(name));
                        out_puts(o, " | ");
                        const char *l = row_location(d, r, loc, sizeof(loc));
                        md_code(o, l, strlen(l));
                }
                if (d->opts->per == PER_TIME)
                        out_printf(o, " | %s | %s | %+.2f ms | ", a, b, res->change * 1e3);
                else
                        out_printf(o, " | %s | %s | %+.2f pp | ", a, b, res->change * 100.0);
                if (isfinite(res->rel))
                        out_printf(o, "%+.1f%% |\n", 100.0 * res->rel);
                else
                        out_puts(o, "new |\n");
        }
        if (listed < total)
                out_printf(o, "\n…and %zu more.\n", total - listed);
}

/* The gate's verdict: the rules, or what tripped them. */
static void md_gate(struct out *o, const struct diff *d, const struct trip *trips, size_t n)
{
        out_puts(o, n ? "\n**Gate failed**: " : "\n**Gate passed**: ");
        if (!n) {
                for (size_t g = 0; g < d->opts->n_rules; g++) {
                        out_puts(o, g ? ", " : "");
                        md_code(o, d->opts->rules[g].text, strlen(d->opts->rules[g].text));
                }
                out_puts(o, ".\n");
                return;
        }
        for (size_t i = 0; i < n && i < DIFF_TRIPS_PER_RULE; i++) {
                char title[1024], ch[64];
                row_title(d, trips[i].row, title, sizeof(title));
                format_change(d, &trips[i].row->res[trips[i].rule->metric], ch, sizeof(ch));
                out_puts(o, i ? "; " : "");
                md_code(o, trips[i].rule->text, strlen(trips[i].rule->text));
                out_puts(o, " tripped by ");
                md_code(o, title, strlen(title));
                out_printf(o, " (%s)", ch);
        }
        if (n > DIFF_TRIPS_PER_RULE)
                out_printf(o, "; and %zu more", n - DIFF_TRIPS_PER_RULE);
        out_puts(o, ".\n");
}

/*
 * A pull-request comment. Without rules: a summary and the significant
 * regressions and improvements. With rules, the comment leads with the
 * gate's verdict and folds the significant changes into a <details> block:
 * what a reviewer sees at first changes only when the gate's verdict does,
 * not when a change too small to matter happens to be significant.
 */
static void write_markdown(struct diff *d, struct out *o, const struct trip *trips, size_t n)
{
        bool time = d->opts->per == PER_TIME, gate = d->opts->n_rules > 0;
        size_t changes = d->regressions + d->improvements;
        out_puts(o, "### pyflame-diff: ");
        if (gate)
                out_puts(o, n ? "gate failed\n\n" : "gate passed\n\n");
        else if (!changes)
                out_puts(o, "no significant change\n\n");
        else
                out_printf(o, "%zu significant regression%s, %zu improvement%s\n\n", d->regressions,
                           d->regressions == 1 ? "" : "s", d->improvements,
                           d->improvements == 1 ? "" : "s");
        out_puts(o, "Base ");
        md_code(o, d->side[0].spec, strlen(d->side[0].spec));
        out_printf(o, " (%llu samples), new ", (unsigned long long)d->side[0].stats.samples);
        md_code(o, d->side[1].spec, strlen(d->side[1].spec));
        out_printf(o,
                   " (%llu samples); self %s by %s. %g%% confidence, Holm-adjusted over %zu "
                   "tests; rows with fewer than %llu samples are not tested.\n",
                   (unsigned long long)d->side[1].stats.samples, time ? "time" : "share of samples",
                   view_names[d->opts->view], 100.0 * d->opts->confidence, d->tests,
                   (unsigned long long)d->opts->min_samples);
        if (gate)
                md_gate(o, d, trips, n);
        if (gate && changes)
                out_printf(o,
                           "\n<details><summary>Significant changes: %zu regression%s, %zu "
                           "improvement%s</summary>\n",
                           d->regressions, d->regressions == 1 ? "" : "s", d->improvements,
                           d->improvements == 1 ? "" : "s");
        md_rows(o, d, true);
        md_rows(o, d, false);
        if (gate && changes)
                out_puts(o, "\n</details>\n");
}

/* ---- folded (difffolded.pl) ---- */

/* Every stack of either side, by text, with both counts. */
static void write_folded(struct diff *d, struct out *o)
{
        for (size_t i = 0; i < d->n_rows; i++) {
                const struct drow *r = &d->rows[i];
                out_write(o, r->key, r->key_len);
                out_printf(o, " %llu %llu\n", (unsigned long long)row_count(d, r, 0, M_SELF),
                           (unsigned long long)row_count(d, r, 1, M_SELF));
        }
}

/* ---- the command ---- */

static int render(struct diff *d, struct out *o, const struct trip *trips, size_t n_trips)
{
        const struct diff_opts *opts = d->opts;
        if (opts->format == DF_FOLDED) {
                write_folded(d, o);
                return 0;
        }
        if (opts->format == DF_MARKDOWN) {
                write_markdown(d, o, trips, n_trips);
                return 0;
        }
        struct columns cs = {.n = 0};
        build_columns(&cs, d);
        struct table t = {.cols = cs.c, .n_cols = cs.n};
        size_t shown_rows = rows_shown(d);
        for (size_t i = 0; i < shown_rows; i++)
                fill_row(&t, d, &d->rows[i]);
        if (opts->format == DF_TEXT) {
                write_text(d, &t, o);
        } else if (opts->format == DF_CSV) {
                table_write(&t, OUT_CSV, o);
        } else {
                bool time = opts->per == PER_TIME;
                out_printf(o,
                           "{\"view\": \"diff\", \"by\": \"%s\", \"per\": \"%s\", \"unit\": "
                           "\"%s\", \"confidence\": %g, \"min_samples\": %llu, \"tests\": %zu, "
                           "\"base\": ",
                           view_names[opts->view], time ? "time" : "samples", time ? "ms" : "%",
                           opts->confidence, (unsigned long long)opts->min_samples, d->tests);
                json_side(o, &d->side[0], time);
                out_puts(o, ", \"new\": ");
                json_side(o, &d->side[1], time);
                out_printf(o,
                           ", \"significant\": {\"regressions\": %zu, \"improvements\": %zu}, "
                           "\"rows_total\": %zu, \"rows\": ",
                           d->regressions, d->improvements, d->n_rows);
                table_write(&t, OUT_JSON, o);
                if (opts->n_rules)
                        json_gate(o, d, trips, n_trips);
                out_puts(o, "}\n");
        }
        bool nomem = t.nomem;
        table_free(&t);
        return nomem ? TRACE_ERR_NOMEM : 0;
}

static int run(struct diff *d, struct out *out)
{
        const struct diff_opts *o = d->opts;
        int rc;
        for (int s = 0; s < DIFF_SIDES; s++)
                if ((rc = side_parse(&d->side[s], o->spec[s])) != 0 ||
                    (rc = side_wall_window(&d->side[s], o->since[s], o->until[s],
                                           s ? "--since/--until" : "--base-since/--base-until")) !=
                        0)
                        return rc;
        for (int s = 0; s < DIFF_SIDES; s++)
                if ((rc = report_check_output(o->output, d->side[s].path)) != 0)
                        return rc;
        for (int s = 0; s < DIFF_SIDES; s++)
                if ((rc = side_load(d, &d->side[s])) != 0)
                        return rc;
        if (match_rows(d) < 0 || test_rows(d) < 0)
                return report_fail(NULL, "out of memory");
        if (o->format == DF_FOLDED) {
                /* match_rows left them sorted by text: difffolded's order. */
        } else {
                sort_diff = d;
                qsort(d->rows, d->n_rows, sizeof(*d->rows), drow_cmp);
                sort_diff = NULL;
        }
        struct trip *trips = NULL;
        size_t n_trips = 0;
        if (gate_eval(d, &trips, &n_trips) < 0 || render(d, out, trips, n_trips) < 0) {
                free(trips);
                return report_fail(NULL, "out of memory");
        }
        rc = out_commit(out, o->output);
        if (rc == 0 && n_trips) {
                gate_report(d, trips, n_trips);
                rc = REPORT_EXIT_GATE;
        }
        free(trips);
        return rc;
}

int cmd_diff(int argc, char **argv)
{
        struct diff_opts o = {0};
        int rc = parse_args(argc, argv, &o);
        if (rc) {
                select_opts_free(&o.select);
                free(o.rules);
                return rc == 1 ? REPORT_EXIT_OK : rc;
        }
        struct diff d = {
            .opts = &o, .n_metrics = o.view == DIFF_FOLDED ? 1 : 2, .alpha = 1.0 - o.confidence};
        struct out out = {0};
        rc = run(&d, &out);
        out_free(&out);
        for (int s = 0; s < DIFF_SIDES; s++)
                side_free(&d.side[s]);
        free(d.rows);
        pf_buf_free(&d.keys);
        select_opts_free(&o.select);
        free(o.rules);
        return rc;
}
