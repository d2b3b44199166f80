/*
 * report.h - the internals shared by pyflame-report's source files.
 *
 * pyflame-report is a table of commands (main.c: report, info, diff, merge,
 * top, annotate; pyflame-diff is the diff command under its own name) over a
 * few shared layers:
 *   - options.c turns the view options every command shares (time range,
 *     processes, threads, thread states) into a libtrace struct trace_filter;
 *   - aggregate.c builds the aggregations views are made of (folded stacks,
 *     per-line and per-function hotspots) from one trace_reader_count_by_stack()
 *     pass, working per distinct stack, never per sample, and the same per
 *     time slice, so that `diff` (cmd_diff.c) and --slices reuse exactly
 *     what a single report computes;
 *   - diffstat.c holds the statistics of `diff`;
 *   - output.c buffers everything a command prints and writes it only once
 *     the command has succeeded (to stdout, or atomically to a file), and
 *     prints tables as aligned text, CSV or JSON;
 *   - srcline.c gives source text to the hotspot tables and to annotate (a
 *     file printed with its lines' shares), from the trace when the recorder
 *     stored it, else from this machine's file, lazily and bounded.
 * The exporters (export.h: svg, html, speedscope, pprof, chrome) are one more
 * view of cmd_report.c, their output committed like the others'. The live
 * view of `top` (top.h, cmd_top.c) is built on aggregate.c's hotspot table
 * too; it and aggregate.c form a library of their own that pyflame-record
 * links for --live.
 * Nothing here knows the trace format: traces are read only through
 * libtrace's public trace.h.
 */
#ifndef PYFLAME_REPORT_H
#define PYFLAME_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "out.h"
#include "pfutil.h"
#include "trace.h"

#define REPORT_PROG "pyflame-report"

/* The name messages start with: "pyflame-report", or "pyflame-diff" in that program. */
extern const char report_prog[];
/* The one command of a program that is only that command ("diff"), else NULL. */
extern const char *const report_main_command;

/*
 * Exit statuses. Every failure (usage, unreadable or damaged trace, output
 * that cannot be written) is 2; 1 is `diff`'s gate tripping on a
 * regression, the way diff(1) uses 1 for "different".
 */
enum { REPORT_EXIT_OK = 0, REPORT_EXIT_GATE = 1, REPORT_EXIT_FAIL = 2 };

/* ------------------------------------------------------------------ */
/* Commands (main.c and cmd_*.c)                                       */
/* ------------------------------------------------------------------ */

/* A command gets argv with argv[0] naming the command; returns an exit status. */
struct report_command {
        const char *name;
        int (*run)(int argc, char **argv);
        const char *summary;
};

int cmd_report(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_join(int argc, char **argv);
int cmd_annotate(int argc, char **argv);
/* Print the help of the default `report` command (also the tool's main help). */
void cmd_report_help(void);

/* ------------------------------------------------------------------ */
/* Messages (main.c)                                                   */
/* ------------------------------------------------------------------ */

/*
 * Print "pyflame-report: <subject>: <message>" as one line on stderr (just
 * "pyflame-report: <message>" when subject is NULL). Returns REPORT_EXIT_FAIL
 * so that callers can `return report_fail(...)`.
 */
int report_fail(const char *subject, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * A usage error of command `cmd` (NULL for the default view): one line that
 * ends with the hint to run --help. Returns REPORT_EXIT_FAIL.
 */
int report_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Open the trace at `path`. On success sets *out and returns 0; on failure
 * prints the one-line "pyflame-report: <path>: <problem>" message (with what
 * to do about it where there is something to do) and returns REPORT_EXIT_FAIL.
 */
int report_open(const char *path, struct trace_reader **out);

/*
 * Open what the user named as one recording: a trace file, several files
 * of one rotating recording, a directory (the trace files in it, which
 * must be of one rotation) or a glob the shell left alone (quoted), read
 * in time order as one (trace_reader_open_set). `output` (may be NULL) is
 * checked not to be one of the files. Returns 0 with *out set, or
 * REPORT_EXIT_FAIL after a message naming inputs[0].
 */
int report_open_inputs(char *const *inputs, size_t n, const char *output,
                       struct trace_reader **out);

/*
 * Resolve a wall-clock time (pf_parse_wall_time: ISO-8601 or "-1h" from
 * the end) against trace `r`: nanoseconds from its start, clamped to 0.
 * Returns 0, or REPORT_EXIT_FAIL after a message for an option `what`
 * ("--since") on a trace that has no wall-clock start.
 */
int select_wall_time(struct trace_reader *r, const char *path, const char *what, const char *s,
                     int64_t *ns);

/*
 * Refuse an -o `output` that is the trace file itself (the report would
 * replace the recording). Returns 0, or prints why and returns REPORT_EXIT_FAIL.
 */
int report_check_output(const char *output, const char *trace);

/*
 * Report a libtrace failure `status` met while reading `path` after it was
 * opened (the file is damaged past what open could check). Returns
 * REPORT_EXIT_FAIL.
 */
int report_read_failed(const char *path, const struct trace_reader *r, int status);

/* Output (output.c): out.h. */

/* A column of a table. Cells of numeric kinds print unquoted in JSON. */
enum table_kind {
        TABLE_TEXT,     /* cell.text */
        TABLE_COUNT,    /* cell.num, an unsigned count */
        TABLE_INT,      /* cell.num, printed plainly */
        TABLE_DECIMAL,  /* cell.real, printed with two decimals (percentages, rates) */
        TABLE_DECIMAL3, /* cell.real, three decimals (rates in info's JSON) */
        TABLE_SECONDS,  /* cell.num nanoseconds, printed as seconds with three decimals */
        TABLE_SIGNED,   /* cell.real, two decimals, with a "+" when positive in text (changes) */
        TABLE_PVALUE,   /* cell.real, two significant digits (probabilities) */
        TABLE_BOOL,     /* cell.num != 0: true/false in CSV and JSON, "yes" or blank in text */
};
#define TABLE_TEXT_ONLY 0x1u /* shown in text tables only (a composite such as file:line) */
#define TABLE_DATA_ONLY 0x2u /* in CSV and JSON only (the parts of that composite) */
#define TABLE_RIGHT     0x4u /* a text column aligned right, like numbers */

struct table_column {
        const char *title; /* text and CSV header */
        const char *key;   /* JSON member name */
        enum table_kind kind;
        unsigned flags;
};

/* A cell; `null` prints as empty text, empty CSV field or JSON null. */
struct table_cell {
        const char *text;
        int64_t num;
        double real;
        bool null;
};

/*
 * Rows of cells under fixed columns. Zero-initialise with cols/n_cols set.
 * Text cells point to strings that outlive the table, or to strings the table
 * owns (table_own). Running out of memory sets `nomem`.
 */
struct table {
        const struct table_column *cols;
        size_t n_cols;
        unsigned indent; /* spaces before each line of text output */
        struct table_cell *cells;
        size_t n_rows, cap_rows;
        char **owned;
        size_t n_owned, cap_owned;
        bool nomem;
};

/* Append a row; returns its n_cols zeroed cells, or NULL when out of memory. */
struct table_cell *table_add_row(struct table *t);
/* Take ownership of malloc'ed `s` (freed with the table); returns s, or NULL. */
const char *table_own(struct table *t, char *s);
/* A printf-formatted string owned by the table, or NULL when out of memory. */
const char *table_printf(struct table *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Print as aligned text with a header line, as CSV with a header, or as a JSON array. */
void table_write(const struct table *t, enum out_format f, struct out *o);
void table_free(struct table *t);

/* ------------------------------------------------------------------ */
/* View options and filters (options.c)                                */
/* ------------------------------------------------------------------ */

/* The sample selection every view accepts, as given on the command line. */
struct select_opts {
        const char *from, *to;         /* durations or percentages, NULL when absent */
        const char *since, *until;     /* wall-clock times (pf_parse_wall_time), NULL when absent */
        char *pids;                    /* "PID[,PID...]": every --pid, comma-joined; malloc'ed */
        char *threads;                 /* "TID|PYID|NAME[,...]": every --thread likewise */
        bool idle;                     /* keep samples of threads that were not on CPU */
        bool gil;                      /* keep only samples holding the GIL */
        enum trace_native_view native; /* --no-native, --native-modules */
        bool async;                    /* the asyncio tasks' samples instead of the threads' */
};

/*
 * The command-line front end the commands share. The selection options have
 * these getopt codes (a command's own start after SELECT_OPT_END) and
 * entries for its long-options table; select_opts_parse() handles them.
 */
enum {
        SELECT_OPT_FROM = 0x1000,
        SELECT_OPT_TO,
        SELECT_OPT_PID,
        SELECT_OPT_THREAD,
        SELECT_OPT_IDLE,
        SELECT_OPT_GIL,
        SELECT_OPT_ASYNC,
        SELECT_OPT_NO_NATIVE,
        SELECT_OPT_NATIVE_MODULES,
        SELECT_OPT_SINCE,
        SELECT_OPT_UNTIL,
        SELECT_OPT_END,
};
#define SELECT_LONG_OPTIONS                                                                        \
        {"pid", required_argument, NULL, SELECT_OPT_PID},                                          \
            {"thread", required_argument, NULL, SELECT_OPT_THREAD},                                \
            {"idle", no_argument, NULL, SELECT_OPT_IDLE},                                          \
            {"async", no_argument, NULL, SELECT_OPT_ASYNC},                                        \
            {"no-native", no_argument, NULL, SELECT_OPT_NO_NATIVE},                                \
            {"native-modules", no_argument, NULL, SELECT_OPT_NATIVE_MODULES},                      \
        {                                                                                          \
                "gil", no_argument, NULL, SELECT_OPT_GIL                                           \
        }
#define SELECT_WINDOW_OPTIONS                                                                      \
        {"from", required_argument, NULL, SELECT_OPT_FROM},                                        \
            {"since", required_argument, NULL, SELECT_OPT_SINCE},                                  \
            {"until", required_argument, NULL, SELECT_OPT_UNTIL},                                  \
        {                                                                                          \
                "to", required_argument, NULL, SELECT_OPT_TO                                       \
        }

/*
 * If getopt code `c` is a selection option, take it (its argument in arg)
 * into *o and return 1; return 0 for any other code, REPORT_EXIT_FAIL (after
 * a message) when out of memory.
 */
int select_opts_parse(struct select_opts *o, int c, const char *arg);

/*
 * The usage error for what getopt_long() just refused (code ':' for a
 * missing value, anything else for an unknown option) in command `cmd`
 * (NULL: the default command), naming the option as the user wrote it.
 * Returns REPORT_EXIT_FAIL.
 */
int report_bad_option(const char *cmd, int c, char **argv);

/*
 * Add the items of one --pid or --thread argument to `*list` (repeated
 * options add up). Returns 0, or -1 when out of memory (list unchanged).
 */
int select_opts_append(char **list, const char *arg);

/*
 * Check what can be checked before the trace is open (durations parse, pids
 * are numbers). Returns 0, or prints a usage error for command `cmd` and
 * returns REPORT_EXIT_FAIL.
 */
int select_opts_check(const struct select_opts *o, const char *cmd);
void select_opts_free(struct select_opts *o);

/*
 * A trace_filter resolved against an open trace: percentages of the
 * recording's duration turned into times, thread names and ids into thread
 * references. Owns the arrays the filter points to.
 */
struct select {
        struct trace_filter filter;
        int32_t *pids;
        uint32_t *threads;
};

/*
 * Resolve `o` against `r`. Returns 0, or prints one line naming what does not
 * match (an unknown pid or thread, an empty time range) with the way to list
 * what there is, and returns REPORT_EXIT_FAIL.
 */
int select_resolve(struct trace_reader *r, const char *path, const struct select_opts *o,
                   struct select *out);
void select_free(struct select *s);

/*
 * Where the time window of `f` ends: its to_ns, or else the end of the
 * recording (`sum`, from trace_reader_summary) or just after its last
 * sample, whichever is later.
 */
int64_t select_end_ns(const struct trace_reader *r, const struct trace_filter *f,
                      const struct trace_summary *sum);

/* ------------------------------------------------------------------ */
/* Aggregations (aggregate.c)                                          */
/* ------------------------------------------------------------------ */

/* Samples per stack id, from one trace_reader_count_by_stack() pass. */
struct stack_counts {
        uint64_t *counts; /* n_stacks entries, indexed by stack id */
        uint32_t n_stacks;
        uint64_t total; /* samples counted, the denominator of every percentage */
};

/* Count. Returns 0 or a negative trace_status (read the reader's errmsg). */
int stack_counts_build(struct trace_reader *r, const struct trace_filter *f,
                       struct stack_counts *out);
void stack_counts_free(struct stack_counts *sc);

/*
 * The display name of a frame (its qualname when it has one) and its folded
 * label: "name (file:line)", "name (file)" when the line is unknown, just
 * "name" for pyflame's own pseudo frames. Appended to `b`; returns 0 or -1.
 */
const char *frame_name(const struct trace_frame *f);
int frame_label(struct pf_buf *b, const struct trace_frame *f);

/* The label folded output gives the samples of a thread with no Python frame. */
#define FOLDED_EMPTY_LABEL "<no Python frame>"

/* One line of folded output: a distinct label and its samples. */
struct folded_line {
        const char *text; /* root-first labels joined by ';', owned by the set */
        size_t len;
        uint32_t stack; /* the lowest stack id with this label */
        uint64_t count;
};

struct folded_set {
        struct folded_line *lines;
        size_t n;
        struct pf_buf text;
        /* Per stack id: the index + 1 of the line its samples went to; 0 for none. */
        uint32_t *line_of_stack;
        uint32_t n_stacks;
};

/*
 * Fold the counted stacks into lines sorted by text (bytewise), stacks that
 * print the same merged into one line. ';' and control characters inside a
 * label are replaced by '?' so that the line splits back into its frames.
 * Returns 0 or a negative trace_status.
 */
int folded_build(const struct trace_reader *r, const struct stack_counts *sc,
                 struct folded_set *out);
void folded_free(struct folded_set *fs);

enum hot_key {
        HOT_BY_LINE,     /* identity (file, line) */
        HOT_BY_FUNCTION, /* identity (function, file, first_line) */
        HOT_BY_FILE,     /* identity (file): a module's samples together (the live view) */
};

/* One row of a hotspot table. */
struct hot_row {
        uint32_t frame; /* the lowest frame id with this identity (its names are shown) */
        struct trace_frame f;
        uint64_t self;  /* samples with this at the top of the stack */
        uint64_t total; /* samples with this anywhere on the stack, counted once */
};

struct hot_table {
        struct hot_row *rows; /* sorted: self desc, total desc, then file, line, name */
        size_t n;
        uint64_t no_frame; /* samples with the empty stack (in no row) */
        /* Per frame id: the index + 1 of its row; 0 for a frame in no counted stack. */
        uint32_t *row_of_frame;
        uint32_t n_frames;
};

/* Build the table for `key`. Returns 0 or a negative trace_status. */
int hot_table_build(const struct trace_reader *r, const struct stack_counts *sc, enum hot_key key,
                    struct hot_table *out);
void hot_table_free(struct hot_table *t);

/* ------------------------------------------------------------------ */
/* Time slices (aggregate.c)                                           */
/* ------------------------------------------------------------------ */

/* Samples of one stack in one time slice. */
struct slice_entry {
        uint32_t slice, stack;
        uint64_t count;
};

/*
 * A selection counted per stack as a whole (what a single report counts)
 * and per consecutive time slice [from_ns + i slice_ns, from_ns + (i+1)
 * slice_ns), i < n_slices; samples before the first slice count in it,
 * samples after the last in the last.
 */
struct slice_counts {
        struct stack_counts all;
        int64_t from_ns, slice_ns;
        uint32_t n_slices;
        struct slice_entry *entries; /* sorted by slice, then stack; count > 0 */
        size_t n_entries;
        size_t *first;     /* n_slices + 1 entries: slice i is entries[first[i], first[i+1]) */
        uint64_t *samples; /* per slice: samples of the selection */
        uint64_t *seen;    /* per slice: samples of the selected threads, whatever their state */
        uint64_t *on_cpu;  /* per slice: those of them on CPU */
};

/*
 * Count the samples `f` selects per stack and per slice, in one pass. The
 * state filter of `f` decides what is counted; `seen` and `on_cpu` ignore
 * it, so that a slice's share of time on CPU is known even when only
 * on-CPU samples are selected. n_slices >= 1, slice_ns >= 1. Returns 0 or
 * a negative trace_status.
 */
int slice_counts_build(struct trace_reader *r, const struct trace_filter *f, int64_t from_ns,
                       int64_t slice_ns, uint32_t n_slices, struct slice_counts *out);
void slice_counts_free(struct slice_counts *sc);

/*
 * Add the samples of `entries` (stacks of one slice of the selection `t`
 * was built from) to self[] and total[], arrays of t->n counts indexed like
 * t->rows, with the same rules as hot_table_build. Returns 0 or a negative
 * trace_status.
 */
int hot_table_count(const struct hot_table *t, const struct trace_reader *r,
                    const struct slice_entry *entries, size_t n, uint64_t *self, uint64_t *total);

/* ------------------------------------------------------------------ */
/* Source lines (srcline.c)                                            */
/* ------------------------------------------------------------------ */

struct srcline_cache;

/*
 * A new, empty cache, or NULL when out of memory. Sources come from the
 * trace `r` first (NULL: none), then from this machine's files.
 */
struct srcline_cache *srcline_cache_new(struct trace_reader *r);

/*
 * Line `line` (1-based) of `file` as the trace holds it or as found on this
 * machine, trimmed, control characters made spaces, cut to a screen's
 * width: a malloc'ed string the caller owns, or NULL when the file cannot be
 * read as text (absent, not a regular file, too big, binary), has no such
 * line, or memory runs out. Each file is read at most once; the cache holds
 * a bounded number of bytes.
 */
char *srcline_get(struct srcline_cache *c, const char *file, int32_t line);

/*
 * 0, or the negative trace_status of the first source the trace holds but
 * could not give back (damaged): the caller must not present a report
 * made without it as complete.
 */
int srcline_status(const struct srcline_cache *c);

enum srcline_origin {
        SRCLINE_NONE,  /* not available */
        SRCLINE_TRACE, /* stored in the trace by the recorder */
        SRCLINE_LOCAL, /* read from this machine's file of that name */
};

/* A whole source file as the cache has it; pointers owned by the cache. */
struct srcline_text {
        enum srcline_origin origin; /* SRCLINE_NONE: the rest is empty */
        const char *data;           /* size bytes of text (and a NUL) */
        size_t size;
        const uint32_t *starts; /* offset of each line */
        uint32_t n_lines;       /* a newline at the end starts no line */
        int64_t mtime_ns;       /* modification time (wall clock), -1 unknown */
};

/* The text of `file` (origin SRCLINE_NONE when none can be had). */
void srcline_text(struct srcline_cache *c, const char *file, struct srcline_text *out);
/* Line `line` (1-based) of `t`, without its newline; false when there is no such line. */
bool srcline_text_line(const struct srcline_text *t, uint32_t line, const char **s, size_t *n);

void srcline_cache_free(struct srcline_cache *c);

/* ------------------------------------------------------------------ */
/* Statistics of a comparison (diffstat.c)                             */
/* ------------------------------------------------------------------ */

/*
 * Time blocks for the batch-means variance: one per this many samples of a
 * side, at least 2 and at most DIFFSTAT_BLOCKS_MAX (see diffstat.c).
 */
#define DIFFSTAT_BLOCK_MIN_SAMPLES 50u
#define DIFFSTAT_BLOCKS_MAX        20u

/* The number of time blocks to cut a side of `samples` samples into. */
uint32_t diffstat_blocks_for(uint64_t samples);

/* One side of a comparison: its selection as a whole. */
struct diffstat_side {
        uint64_t samples;  /* N, the denominator of every share */
        uint32_t blocks;   /* time blocks holding at least one sample */
        double sum_n2;     /* sum over blocks of (samples in the block)^2 */
        double scale;      /* 1 to compare shares; the side's sampled seconds for time */
        uint32_t runs;     /* recordings (runs) of a merged side with samples; 0 or 1: one */
        double run_sum_n2; /* sum over runs of (samples in the run)^2 */
};

/* One row's count on one side, and its per-block and per-run sums. */
struct diffstat_cell {
        uint64_t x;        /* samples of the row */
        double sum_x2;     /* sum over blocks of (row's samples in the block)^2 */
        double sum_xn;     /* sum over blocks of row's samples times block's samples */
        double run_sum_x2; /* the same two sums over runs */
        double run_sum_xn;
};

struct diffstat_result {
        double base, new_; /* scale * x / N on each side: a share (0..1) or seconds */
        double change;     /* new_ - base */
        double rel;        /* change / base; INFINITY when base is 0 and new_ is not */
        double se;         /* standard error of change */
        double stat, df;   /* change / se, and its degrees of freedom (INFINITY: normal) */
        double p;          /* two-sided p-value, before any multiple-comparison adjustment */
        bool tested;       /* false: too few samples (p is then 1) */
};

/*
 * Compare one row between two sides (diffstat.c says how). Rows with fewer
 * than `min_samples` samples on both sides together are not tested.
 */
void diffstat_compare(const struct diffstat_side *base, const struct diffstat_cell *cb,
                      const struct diffstat_side *new_, const struct diffstat_cell *cn,
                      uint64_t min_samples, struct diffstat_result *out);

/* Two-sided p-value of `stat` under Student's t with `df` degrees of freedom (normal: INFINITY). */
double diffstat_two_sided_p(double stat, double df);

/*
 * Holm's step-down adjustment of m p-values: adjusted[i] is the smallest
 * family-wise error rate at which test i is rejected. Returns 0, or -1
 * when out of memory (adjusted untouched).
 */
int diffstat_holm(const double *p, size_t m, double *adjusted);

#endif
