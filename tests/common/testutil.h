/*
 * testutil.h - the test utility library (tests/common), one static library
 * whose parts a test program pulls in only by using them:
 * - testutil.c, for the libtrace unit tests (cmocka, libtrace's internals):
 *   scratch directories, file surgery (copy, truncate, raw SQL on a trace)
 *   and a small reference trace whose every sample the tests know;
 * - fakeclock.c (its own library, fakeclock_dep): a fake clock, so that
 *   traces are the same bytes every run;
 * - die.c: how a program that is not a cmocka test fails.
 */
#ifndef PYFLAME_TESTUTIL_H
#define PYFLAME_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trace.h"

/* A fresh scratch directory (removed by tu_rmdir). Aborts the test on failure. */
char *tu_mkdtemp(void);
/* Remove a scratch directory and everything in it; frees `dir`. */
void tu_rmdir(char *dir);
/* dir/name, malloc'ed. */
char *tu_path(const char *dir, const char *name);

void tu_write_file(const char *path, const void *data, size_t len);
void tu_copy_file(const char *from, const char *to);
long long tu_file_size(const char *path);
void tu_truncate(const char *path, long long size);
/* Run SQL on a database with the plain SQLite API; returns the SQLite code. */
int tu_sql(const char *path, const char *sql);

/*
 * The reference trace (tu_write_reference): processes 100 and 200; threads
 * 1 (pid 100, "MainThread"), 2 (pid 100, "worker"), 3 (pid 200, no name);
 * frames main/work/leaf/other; stacks:
 *   s1 = main, s2 = main>work, s3 = main>work>leaf, s4 = other.
 * Sample i (0 <= i < TU_SAMPLES) is taken by thread 1 + i % 3 at relative
 * time i * 1 ms, in stack tu_stack_of(i) with state tu_state_of(i).
 * Chunks are cut every 7 samples per thread so that every test crosses
 * chunk boundaries.
 */
#define TU_SAMPLES 3000
#define TU_STEP_NS 1000000LL

struct tu_reference {
        uint32_t threads[3];
        uint32_t stacks[5]; /* [0] = TRACE_STACK_EMPTY, [1..4] = s1..s4 */
        uint32_t frames[4];
        int64_t start_mono_ns;
};

uint32_t tu_stack_index(int i); /* 0..4: index into tu_reference.stacks */
unsigned tu_state_of(int i);
uint32_t tu_thread_index(int i); /* 0..2 */

/*
 * Write the reference trace to `path`. With `finalize` false, the writer is
 * flushed after `flushed` samples, then fed the rest, then freed unfinalized.
 */
void tu_write_reference(const char *path, struct tu_reference *ref, bool finalize, int flushed);

/*
 * The fake clock (fakeclock.c): linking it replaces clock_gettime() for the
 * whole program, libpyflametrace.so included. CLOCK_MONOTONIC reads
 * tu_fake_mono_ns (starting at TU_MONO_START; tests move it forward) and
 * CLOCK_REALTIME TU_WALL_START plus as much, plus tu_fake_wall_offset.
 */
#define TU_MONO_START 1000000000000LL       /* 1000 s after boot */
#define TU_WALL_START 1780000000000000000LL /* 2026-05-28 */
extern int64_t tu_fake_mono_ns;
extern int64_t tu_fake_wall_offset;

/* Failing (die.c): "PROGRAM: message" on stderr, exit 1. */
void tu_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* tu_die() naming `what` and the writer's message (w may be NULL) when rc < 0. */
void tu_must(struct trace_writer *w, int rc, const char *what);

#endif
