/*
 * top.h - the live view: a `top` of a trace over a moving time window.
 *
 * Two layers. The model (top_model.c) knows nothing of terminals: given an
 * open trace, a selection (pids, threads, thread states) and a window of
 * time ending at a cursor, it aggregates the window's samples into a
 * header (samples, threads, achieved rate, errors, on-CPU and GIL shares)
 * and a table of functions, lines or files with their own and total share
 * and time, sorted by any column. It is built from aggregate.c's hotspot
 * table, so a row counts what `pyflame-report --hot` would count for the
 * same samples.
 *
 * The view (top_ui.c) draws that model with ncurses and moves the cursor:
 * it replays a finished trace (`pyflame-report top`), keeps up with one
 * that a recorder is still writing (--follow), and is what
 * `pyflame-record --live` and `pyflame-top` show while they record. It
 * reads the trace through its own read-only libtrace reader, reopened at
 * each refresh to see the recorder's latest commit: it shares nothing with
 * the sampling thread, which never waits for it.
 */
#ifndef PYFLAME_TOP_H
#define PYFLAME_TOP_H

#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "trace.h"

/* ------------------------------------------------------------------ */
/* Model (top_model.c)                                                 */
/* ------------------------------------------------------------------ */

enum top_key {
        TOP_BY_FUNCTION, /* a row per (function, file, first line) */
        TOP_BY_LINE,     /* a row per (file, line) */
        TOP_BY_FILE,     /* a row per file */
        TOP_KEY_COUNT
};

/* The columns, in the order the table shows them. */
enum top_sort {
        TOP_SORT_OWN,        /* own share: samples with the row at the top of the stack */
        TOP_SORT_TOTAL,      /* total share: samples with the row anywhere on the stack */
        TOP_SORT_OWN_TIME,   /* own time (own samples times the sampling period) */
        TOP_SORT_TOTAL_TIME, /* total time */
        TOP_SORT_NAME,       /* the row's name, then file and line */
        TOP_SORT_COUNT
};

/* What to aggregate. */
struct top_query {
        /* Pids, threads and state flags to keep; its from_ns/to_ns are ignored. */
        struct trace_filter filter;
        int64_t cursor_ns; /* the window ends here (exclusive), relative to the start */
        int64_t window_ns; /* its length; 0: from the start of the recording */
        enum top_key key;
        enum top_sort sort;
};

struct top_header {
        int64_t from_ns, to_ns;     /* the window, clipped to the recording */
        int64_t end_ns;             /* the recording's end so far (last sample + 1 if later) */
        bool finalized;             /* the recorder finished the trace */
        char target[256];           /* "pid N: command line" of the target */
        const char *python_version; /* or NULL; owned by the reader */
        uint32_t threads;           /* threads of the selection with samples in the window */
        uint64_t samples;           /* samples in the window that pass the whole filter */
        uint64_t seen;      /* samples in the window of the selected pids and threads, any state */
        uint64_t on_cpu;    /* of `seen`, those on CPU */
        uint64_t holds_gil; /* of `seen`, those holding the GIL */
        uint64_t errors;    /* sampling errors in the whole trace so far (all kinds) */
        double rate_hz;     /* requested rate per thread; 0 when the trace does not say */
        double achieved_hz; /* seen / threads / window seconds; 0 for an empty window */
        int64_t period_ns;  /* time one sample stands for: 1 / rate_hz (or achieved) */
};

struct top_row {
        struct trace_frame f; /* names of the row (its lowest frame id); owned by the reader */
        uint64_t own, total;  /* samples */
        double own_share, total_share; /* of header.samples, 0..1 */
        int64_t own_ns, total_ns;      /* samples times header.period_ns */
};

struct top_view {
        struct top_header h;
        struct top_row *rows; /* sorted by the query's column, then by own, total, name */
        size_t n;
        uint64_t no_frame; /* samples of threads with no Python frame (in no row) */
};

/*
 * Aggregate the window of `q` in `r`. On success fills *out (release with
 * top_view_free; strings point into `r`, which must outlive it) and returns
 * 0; on failure returns a negative trace_status (message on the reader),
 * *out untouched.
 */
int top_view_build(struct trace_reader *r, const struct top_query *q, struct top_view *out);
void top_view_free(struct top_view *v);

/* The end of the recording so far: its duration, or just after its last sample if later. */
int64_t top_end_ns(struct trace_reader *r);

/* Re-sort the rows of `v` by column `sort` (as top_view_build does). */
void top_view_sort(struct top_view *v, enum top_key key, enum top_sort sort);

/*
 * The text a row shows for `key`: "name (file:line)" for functions (its
 * first line), "file:line" for lines, "file" for files. Written to buf
 * (always NUL-terminated); returns buf.
 */
const char *top_row_label(const struct top_row *row, enum top_key key, char *buf, size_t len);

/* ------------------------------------------------------------------ */
/* View (top_ui.c)                                                     */
/* ------------------------------------------------------------------ */

struct top_ui_opts {
        const char *path;    /* the trace */
        const char *title;   /* the program's name, for messages and the header */
        bool follow;         /* keep up with a trace still being written */
        bool live;           /* the trace is ours, being recorded now: follow, and quit stops it */
        int64_t window_ns;   /* initial window; 0: all */
        int64_t at_ns;       /* initial cursor for a replay; -1: the end */
        int64_t interval_ns; /* refresh period, and snapshot period without a terminal */
        enum top_key key;
        enum top_sort sort;
        /* Selection as for pyflame-report: pids, thread names or ids, --idle, --gil. */
        const char *pids, *threads;
        bool idle, gil;
        enum trace_native_view native; /* --no-native, --native-modules; the n key cycles */
        bool async;                    /* the asyncio tasks' samples (--async) */
        /* Set (by a signal handler or another thread) to leave the view. */
        atomic_int *stop;
        /* Called once when the user quits (q) in a live view; may be NULL. */
        void (*on_quit)(void *ctx);
        void *ctx;
        /*
         * When not NULL, the files to read (a recording that rotates),
         * asked at each opening instead of expanding path, which then only
         * names them in messages: malloc'd copies in *paths (freed by the
         * view), *n of them; 0, or -1 when out of memory.
         */
        int (*list_files)(void *ctx, char ***paths, size_t *n);
        /* Repaint the whole screen at each refresh (another program writes to the terminal). */
        bool repaint;
        /* Without a terminal: print snapshots (every interval) instead of the screen. */
        bool plain;
        /* Plain mode: rows per snapshot. */
        unsigned max_rows;
};

/*
 * Run the view until the user quits, *stop is set, or (plain, not
 * following) the one snapshot is printed. Restores the terminal whatever
 * happens. Returns 0, or 2 after printing a message on stderr.
 */
int top_ui_run(const struct top_ui_opts *o);

/*
 * What the user named as one recording (inputs.c): each of `args` a trace
 * file, a directory (its trace files in name order) or a glob the shell
 * left alone, gathered into out->paths. 0, or -1 with the problem, naming
 * the argument, in `err` (nothing is printed). Free with
 * report_inputs_free().
 */
struct report_inputs {
        char **paths;
        size_t n;
};
int report_inputs_expand(char *const *args, size_t n, struct report_inputs *out, char *err,
                         size_t err_size);
void report_inputs_free(struct report_inputs *in);

/* `pyflame-report top` (report/cmd_top.c). */
int cmd_top(int argc, char **argv);

#endif
