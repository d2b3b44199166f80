/*
 * fixtures.h - small deterministic traces for the exporter tests, built
 * through libtrace's writer, with what each should export written down
 * independently of the exporters: every sample (thread, time, state, stack)
 * and, for every frame, the label the folded view gives it, typed by hand.
 *
 * The writer stamps traces with clock_gettime(); fixtures.c defines its own
 * clock_gettime(), which the statically linked libtrace calls instead of
 * libc's, so start times and sample times are the ones chosen here.
 */
#ifndef PYFLAME_TEST_EXPORT_FIXTURES_H
#define PYFLAME_TEST_EXPORT_FIXTURES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "testutil.h"
#include "trace.h"

#define FX_MONO_START  TU_MONO_START /* the fake clock's (tests/common/fakeclock.c) */
#define FX_WALL_START  TU_WALL_START
#define FX_MS          1000000LL
#define FX_PERIOD_NS   (10 * FX_MS) /* every fixture is recorded at 100 Hz */
#define FX_MAX_FRAMES  32
#define FX_MAX_STACKS  1024
#define FX_MAX_THREADS 8

struct fx_sample {
        int thread;   /* index into fx_trace.threads */
        int64_t t_ns; /* relative to the start */
        unsigned state;
        uint32_t stack;
};

struct fx_thread {
        int32_t pid;
        int64_t tid;
        const char *name; /* NULL: unnamed */
        uint32_t ref;
};

struct fx_trace {
        const char *name; /* "basic", "deep", "empty" */
        char path[4096];
        const char *label[FX_MAX_FRAMES];      /* by frame id: the expected label, as valid UTF-8 */
        int first_line[FX_MAX_FRAMES];         /* by frame id */
        uint32_t *stack_frames[FX_MAX_STACKS]; /* by stack id: frame ids root first */
        uint32_t stack_depth[FX_MAX_STACKS];
        struct fx_thread threads[FX_MAX_THREADS];
        int n_threads;
        struct fx_sample *samples;
        size_t n_samples, cap_samples;
        int64_t duration_ns;
};

/* Build fixture `name` ("basic", "deep" or "empty") as a file in `dir`; exits on failure. */
void fx_build(struct fx_trace *t, const char *name, const char *dir);
void fx_free(struct fx_trace *t);

/* Whether sample `s` passes `f` (NULL: all), the way libtrace's filter is specified. */
bool fx_selected(const struct fx_trace *t, const struct fx_sample *s, const struct trace_filter *f);

/*
 * The expected folded counts under `f`: one line "label\x1flabel...\tcount"
 * per distinct root-first label path (the empty stack is "<no Python frame>"),
 * sorted bytewise, into a malloc'ed string.
 */
char *fx_folded(const struct fx_trace *t, const struct trace_filter *f);

/*
 * Write everything the script checks need as JSON: the fixture's threads and
 * each selected sample with its labels, the filter's description and the
 * period. Exits on failure.
 */
void fx_write_expected(FILE *out, const struct fx_trace *t, const struct trace_filter *f);

/* A temporary directory (malloc'ed path) and its recursive removal. */
char *fx_mkdtemp(void);
void fx_rmtree(const char *dir);

#endif
