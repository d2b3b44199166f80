/*
 * test_roundtrip.c - what the writer puts in, the reader gives back: meta,
 * processes, threads, errors, frames, stacks and every sample, through every
 * reader filter and the per-stack aggregation; traces that were never
 * finalized; automatic flushing; the writer's refusals.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>
#include <unistd.h>

#include "pfutil.h"
#include "pyflame-config.h"
#include "testutil.h"
#include "trace.h"
#include "trace_internal.h"

struct fixture {
        char *dir;
        char *path;
        struct tu_reference ref;
        struct trace_reader *r;
};

static int setup_finalized(void **state)
{
        struct fixture *f = calloc(1, sizeof(*f));
        f->dir = tu_mkdtemp();
        f->path = tu_path(f->dir, "ref.pyflame");
        tu_write_reference(f->path, &f->ref, true, 0);
        int rc = trace_reader_open(f->path, &f->r);
        if (rc != 0)
                fail_msg("open: %s", trace_reader_errmsg(f->r));
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fixture *f = *state;
        trace_reader_close(f->r);
        free(f->path);
        tu_rmdir(f->dir);
        free(f);
        return 0;
}

static void test_summary_and_meta(void **state)
{
        struct fixture *f = *state;
        struct trace_summary s;
        assert_int_equal(trace_reader_summary(f->r, &s), 0);
        assert_int_equal(s.samples, TU_SAMPLES);
        assert_int_equal(s.threads, 3);
        assert_int_equal(s.processes, 2);
        assert_int_equal(s.stacks, 5);
        assert_int_equal(s.frames, 4);
        assert_int_equal(s.errors[TRACE_ERROR_TORN], 7);
        assert_int_equal(s.errors[TRACE_ERROR_READ], 0);
        assert_int_equal(s.errors[TRACE_ERROR_LATE], 3);
        assert_true(s.finalized);
        assert_true(s.rate_hz == 1000.0);
        assert_true(s.duration_ns > 0);

        assert_string_equal(trace_reader_meta(f->r, TRACE_META_MODE), "nonblocking");
        assert_string_equal(trace_reader_meta(f->r, "answer"), "42");
        assert_string_equal(trace_reader_meta(f->r, TRACE_META_FORMAT_VERSION), "2");
        assert_string_equal(trace_reader_meta(f->r, TRACE_META_TOOL_VERSION), pf_version());
        assert_string_equal(trace_reader_meta(f->r, TRACE_META_SAMPLES), "3000");
        assert_string_equal(trace_reader_meta(f->r, TRACE_META_ERRORS), "10");
        assert_non_null(trace_reader_meta(f->r, TRACE_META_HOST));
        assert_non_null(strstr(trace_reader_meta(f->r, TRACE_META_KERNEL), "Linux"));
        assert_non_null(trace_reader_meta(f->r, TRACE_META_START_WALL_NS));
        assert_non_null(trace_reader_meta(f->r, TRACE_META_END_WALL_NS));
        assert_non_null(trace_reader_meta(f->r, TRACE_META_END_MONO_NS));
        assert_non_null(trace_reader_meta(f->r, TRACE_META_START_MONO_NS));
        assert_null(trace_reader_meta(f->r, "no such key"));
        int64_t dur = strtoll(trace_reader_meta(f->r, TRACE_META_DURATION_NS), NULL, 10);
        assert_int_equal(dur, s.duration_ns);

        /* meta_at visits every key exactly once. */
        const char *k, *v;
        size_t n = 0;
        bool saw_answer = false;
        while (trace_reader_meta_at(f->r, n, &k, &v)) {
                assert_non_null(k);
                if (!strcmp(k, "answer"))
                        saw_answer = !saw_answer && !strcmp(v, "42");
                n++;
        }
        assert_true(saw_answer);
        assert_int_equal(n, 14); /* 11 written by libtrace, 3 by the test */
        assert_false(trace_reader_meta_at(f->r, n, &k, &v));
}

static void test_processes_threads(void **state)
{
        struct fixture *f = *state;
        assert_int_equal(trace_reader_process_count(f->r), 2);
        struct trace_process p;
        assert_int_equal(trace_reader_process_at(f->r, 0, &p), 0);
        assert_int_equal(p.pid, 100);
        assert_string_equal(p.cmdline, "python3 app.py");
        assert_string_equal(p.python_version, "3.12.1");
        assert_string_equal(p.python_build, "shared");
        assert_int_equal(p.exit_status, -1);
        assert_int_equal(p.end_ns, -1);
        assert_int_equal(trace_reader_process_at(f->r, 1, &p), 0);
        assert_int_equal(p.pid, 200);
        assert_string_equal(p.python_version, "3.11.4");
        assert_int_equal(p.exit_status, 3);
        assert_int_equal(p.end_ns, 2500 * TU_STEP_NS);
        assert_int_equal(trace_reader_process_at(f->r, 2, &p), TRACE_ERR_ARG);

        assert_int_equal(trace_reader_thread_count(f->r), 3);
        static const int32_t pids[3] = {100, 100, 200};
        static const int64_t tids[3] = {1000, 1001, 2000};
        static const uint64_t pyids[3] = {0x7f0000001000ULL, 0xfedcba9876543210ULL, 0};
        static const char *const names[3] = {"MainThread", "worker", NULL};
        for (uint32_t i = 0; i < 3; i++) {
                struct trace_thread t;
                assert_int_equal(trace_reader_thread_at(f->r, i, &t), 0);
                assert_int_equal(t.ref, f->ref.threads[i]);
                assert_int_equal(t.pid, pids[i]);
                assert_int_equal(t.tid, tids[i]);
                assert_int_equal(t.python_thread_id, pyids[i]);
                if (names[i])
                        assert_string_equal(t.name, names[i]);
                else
                        assert_null(t.name);
                assert_int_equal(t.samples, TU_SAMPLES / 3);
                assert_int_equal(t.first_ns, (int64_t)i * TU_STEP_NS);
                assert_int_equal(t.last_ns, (int64_t)(TU_SAMPLES - 3 + i) * TU_STEP_NS);
        }
        struct trace_thread t;
        assert_int_equal(trace_reader_thread_at(f->r, 3, &t), TRACE_ERR_ARG);
}

static void test_frames_stacks(void **state)
{
        struct fixture *f = *state;
        assert_int_equal(trace_reader_frame_count(f->r), 4);
        struct trace_frame fr;
        assert_int_equal(trace_reader_frame(f->r, f->ref.frames[1], &fr), 0);
        assert_string_equal(fr.function, "work");
        assert_string_equal(fr.qualname, "Worker.work");
        assert_string_equal(fr.file, "app.py");
        assert_int_equal(fr.line, 20);
        assert_int_equal(fr.first_line, 18);
        assert_int_equal(fr.kind, TRACE_FRAME_PYTHON);
        assert_int_equal(trace_reader_frame(f->r, f->ref.frames[2], &fr), 0);
        assert_string_equal(fr.function, "leaf");
        assert_null(fr.qualname);
        assert_string_equal(fr.file, "lib/leaf.py");
        assert_int_equal(fr.line, -1);
        assert_int_equal(fr.first_line, -1);
        assert_int_equal(trace_reader_frame(f->r, f->ref.frames[3], &fr), 0);
        assert_int_equal(fr.kind, TRACE_FRAME_SPECIAL);
        assert_int_equal(fr.line, 0);
        assert_int_equal(trace_reader_frame(f->r, 0, &fr), TRACE_ERR_ARG);
        assert_int_equal(trace_reader_frame(f->r, 5, &fr), TRACE_ERR_ARG);

        assert_int_equal(trace_reader_stack_count(f->r), 5);
        uint32_t s3 = f->ref.stacks[3], frames[8], parent, frame;
        assert_int_equal(trace_reader_stack_depth(f->r, s3), 3);
        assert_int_equal(trace_reader_stack_depth(f->r, TRACE_STACK_EMPTY), 0);
        assert_int_equal(trace_reader_stack_frames(f->r, s3, frames, 8), 3);
        assert_int_equal(frames[0], f->ref.frames[0]);
        assert_int_equal(frames[1], f->ref.frames[1]);
        assert_int_equal(frames[2], f->ref.frames[2]);
        /* A short buffer gets the root-most frames and the full depth back. */
        frames[1] = 99;
        assert_int_equal(trace_reader_stack_frames(f->r, s3, frames, 1), 3);
        assert_int_equal(frames[0], f->ref.frames[0]);
        assert_int_equal(frames[1], 99);
        assert_int_equal(trace_reader_stack_frames(f->r, TRACE_STACK_EMPTY, frames, 8), 0);
        assert_int_equal(trace_reader_stack_node(f->r, s3, &parent, &frame), 0);
        assert_int_equal(parent, f->ref.stacks[2]);
        assert_int_equal(frame, f->ref.frames[2]);
        assert_int_equal(trace_reader_stack_node(f->r, f->ref.stacks[4], &parent, &frame), 0);
        assert_int_equal(parent, TRACE_STACK_EMPTY);
        assert_int_equal(trace_reader_stack_node(f->r, TRACE_STACK_EMPTY, &parent, &frame),
                         TRACE_ERR_ARG);
        assert_int_equal(trace_reader_stack_node(f->r, 5, &parent, &frame), TRACE_ERR_ARG);
        assert_int_equal(trace_reader_stack_frames(f->r, 5, frames, 8), TRACE_ERR_ARG);
}

/* Every sample seen exactly once and as written. */
struct seen {
        const struct tu_reference *ref;
        unsigned char *hits;
        int64_t last_t[4];
        size_t n;
        size_t stop_after;
        int bad;
};

static int check_sample(void *ctx, const struct trace_sample *s)
{
        struct seen *c = ctx;
        int64_t i = s->t_ns / TU_STEP_NS;
        if (s->t_ns % TU_STEP_NS || i < 0 || i >= TU_SAMPLES || c->hits[i] ||
            s->thread != c->ref->threads[tu_thread_index((int)i)] ||
            s->stack != c->ref->stacks[tu_stack_index((int)i)] || s->state != tu_state_of((int)i) ||
            s->thread > 3 || s->t_ns < c->last_t[s->thread])
                c->bad++;
        else
                c->hits[i] = 1;
        c->last_t[s->thread] = s->t_ns;
        c->n++;
        return c->stop_after && c->n == c->stop_after ? 7 : 0;
}

typedef bool (*want_fn)(const struct fixture *f, int i);

/* Run one filter both ways and compare with what the reference says. */
static void check_filter(struct fixture *f, const struct trace_filter *flt, want_fn want)
{
        uint64_t expect_total = 0, expect[5] = {0};
        for (int i = 0; i < TU_SAMPLES; i++)
                if (want(f, i)) {
                        expect_total++;
                        expect[tu_stack_index(i)]++;
                }
        uint64_t *counts = NULL, total = 0;
        int rc = trace_reader_count_by_stack(f->r, flt, &counts, &total);
        if (rc != 0)
                fail_msg("count_by_stack: %s", trace_reader_errmsg(f->r));
        assert_int_equal(total, expect_total);
        for (int k = 0; k < 5; k++)
                assert_int_equal(counts[f->ref.stacks[k]], expect[k]);
        free(counts);

        struct seen c = {.ref = &f->ref, .hits = calloc(TU_SAMPLES, 1)};
        assert_int_equal(trace_reader_foreach_sample(f->r, flt, check_sample, &c), 0);
        assert_int_equal(c.bad, 0);
        assert_int_equal(c.n, expect_total);
        for (int i = 0; i < TU_SAMPLES; i++)
                assert_int_equal(c.hits[i], want(f, i) ? 1 : 0);
        free(c.hits);
}

static bool want_all(const struct fixture *f, int i)
{
        return true;
}

static bool want_window(const struct fixture *f, int i)
{
        return i >= 500 && i < 1500;
}

static bool want_tail(const struct fixture *f, int i)
{
        return i >= 2900;
}

static bool want_pid200(const struct fixture *f, int i)
{
        return tu_thread_index(i) == 2;
}

static bool want_threads12(const struct fixture *f, int i)
{
        return tu_thread_index(i) <= 1;
}

static bool want_on_cpu(const struct fixture *f, int i)
{
        return tu_state_of(i) & TRACE_STATE_ON_CPU;
}

static bool want_no_gil(const struct fixture *f, int i)
{
        return !(tu_state_of(i) & TRACE_STATE_HOLDS_GIL);
}

static bool want_gil_off_cpu(const struct fixture *f, int i)
{
        return (tu_state_of(i) & TRACE_STATE_HOLDS_GIL) && !(tu_state_of(i) & TRACE_STATE_ON_CPU);
}

static bool want_combined(const struct fixture *f, int i)
{
        return i >= 100 && i < 2000 && tu_thread_index(i) == 0 &&
               (tu_state_of(i) & TRACE_STATE_ON_CPU);
}

static bool want_none(const struct fixture *f, int i)
{
        return false;
}

static void test_all_samples(void **state)
{
        struct fixture *f = *state;
        check_filter(f, NULL, want_all);
        struct trace_filter zero = {0};
        check_filter(f, &zero, want_all);
}

static void test_filter_time(void **state)
{
        struct fixture *f = *state;
        struct trace_filter w = {.from_ns = 500 * TU_STEP_NS, .to_ns = 1500 * TU_STEP_NS};
        check_filter(f, &w, want_window);
        struct trace_filter tail = {.from_ns = 2900 * TU_STEP_NS}; /* to_ns 0: to the end */
        check_filter(f, &tail, want_tail);
        struct trace_filter past = {.from_ns = 10000 * TU_STEP_NS};
        check_filter(f, &past, want_none);
        struct trace_filter empty = {.from_ns = 5, .to_ns = 5};
        uint64_t *counts = (uint64_t *)0x1, total = 12345;
        assert_int_equal(trace_reader_count_by_stack(f->r, &empty, &counts, &total), TRACE_ERR_ARG);
        assert_ptr_equal(counts, (uint64_t *)0x1); /* outputs untouched on failure */
        assert_int_equal(total, 12345);
}

static void test_filter_pid_thread(void **state)
{
        struct fixture *f = *state;
        int32_t pid200 = 200, pid100 = 100, nopid = 999;
        struct trace_filter by_pid = {.pids = &pid200, .n_pids = 1};
        check_filter(f, &by_pid, want_pid200);
        uint32_t refs[2] = {f->ref.threads[0], f->ref.threads[1]};
        struct trace_filter by_thread = {.threads = refs, .n_threads = 2};
        check_filter(f, &by_thread, want_threads12);
        struct trace_filter by_pid100 = {.pids = &pid100, .n_pids = 1};
        check_filter(f, &by_pid100, want_threads12);
        /* pid and thread lists must both allow a sample. */
        struct trace_filter both = {.pids = &pid200, .n_pids = 1, .threads = refs, .n_threads = 2};
        check_filter(f, &both, want_none);
        struct trace_filter unknown = {.pids = &nopid, .n_pids = 1};
        check_filter(f, &unknown, want_none);
}

static void test_filter_state(void **state)
{
        struct fixture *f = *state;
        struct trace_filter on_cpu = {.state_require = TRACE_STATE_ON_CPU};
        check_filter(f, &on_cpu, want_on_cpu);
        struct trace_filter no_gil = {.state_exclude = TRACE_STATE_HOLDS_GIL};
        check_filter(f, &no_gil, want_no_gil);
        struct trace_filter gil_off = {.state_require = TRACE_STATE_HOLDS_GIL,
                                       .state_exclude = TRACE_STATE_ON_CPU};
        check_filter(f, &gil_off, want_gil_off_cpu);
}

static void test_filter_combined(void **state)
{
        struct fixture *f = *state;
        int32_t pid = 100;
        uint32_t ref = f->ref.threads[0];
        struct trace_filter flt = {.from_ns = 100 * TU_STEP_NS,
                                   .to_ns = 2000 * TU_STEP_NS,
                                   .pids = &pid,
                                   .n_pids = 1,
                                   .threads = &ref,
                                   .n_threads = 1,
                                   .state_require = TRACE_STATE_ON_CPU};
        check_filter(f, &flt, want_combined);
}

static void test_foreach_stops(void **state)
{
        struct fixture *f = *state;
        struct seen c = {.ref = &f->ref, .hits = calloc(TU_SAMPLES, 1), .stop_after = 10};
        assert_int_equal(trace_reader_foreach_sample(f->r, NULL, check_sample, &c), 7);
        assert_int_equal(c.n, 10);
        assert_int_equal(c.bad, 0);
        free(c.hits);
}

static void test_file_stamp(void **state)
{
        struct fixture *f = *state;
        sqlite3 *db;
        sqlite3_stmt *st;
        assert_int_equal(sqlite3_open_v2(f->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_prepare_v2(db,
                                            "SELECT (SELECT application_id FROM "
                                            "pragma_application_id), (SELECT user_version FROM "
                                            "pragma_user_version), (SELECT journal_mode FROM "
                                            "pragma_journal_mode), (SELECT sum(samples) FROM "
                                            "stack_counts), (SELECT sum(samples) FROM threads)",
                                            -1, &st, NULL),
                         SQLITE_OK);
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int64(st, 0), TRACE_APPLICATION_ID);
        assert_int_equal(sqlite3_column_int64(st, 1), TRACE_FORMAT_VERSION);
        assert_string_equal((const char *)sqlite3_column_text(st, 2), "delete");
        assert_int_equal(sqlite3_column_int64(st, 3), TU_SAMPLES);
        assert_int_equal(sqlite3_column_int64(st, 4), TU_SAMPLES);
        sqlite3_finalize(st);
        sqlite3_close(db);
        /* One self-contained file: no journal or WAL left beside it. */
        char *journal = tu_path(f->dir, "ref.pyflame-journal");
        char *wal = tu_path(f->dir, "ref.pyflame-wal");
        assert_int_not_equal(access(journal, F_OK), 0);
        assert_int_not_equal(access(wal, F_OK), 0);
        free(journal);
        free(wal);
}

/* stack_counts holds, per (stack, state), the samples of the first n reference samples. */
static void check_stack_counts(const char *path, const struct tu_reference *ref, int n)
{
        uint64_t expect[5][TRACE_STATE_MASK + 1] = {{0}};
        for (int i = 0; i < n; i++)
                expect[tu_stack_index(i)][tu_state_of(i)]++;
        sqlite3 *db;
        sqlite3_stmt *st;
        assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        assert_int_equal(
            sqlite3_prepare_v2(db, "SELECT stack, state, samples FROM stack_counts", -1, &st, NULL),
            SQLITE_OK);
        int rows = 0, expect_rows = 0;
        while (sqlite3_step(st) == SQLITE_ROW) {
                int64_t stack = sqlite3_column_int64(st, 0), state = sqlite3_column_int64(st, 1);
                int k = -1;
                for (int j = 0; j < 5; j++)
                        if (ref->stacks[j] == stack)
                                k = j;
                assert_true(k >= 0 && state >= 0 && state <= TRACE_STATE_MASK);
                assert_int_equal(sqlite3_column_int64(st, 2), expect[k][state]);
                rows++;
        }
        sqlite3_finalize(st);
        sqlite3_close(db);
        for (int k = 0; k < 5; k++)
                for (int j = 0; j <= (int)TRACE_STATE_MASK; j++)
                        expect_rows += expect[k][j] != 0;
        assert_int_equal(rows, expect_rows);
}

static void test_stack_counts(void **state)
{
        struct fixture *f = *state;
        check_stack_counts(f->path, &f->ref, TU_SAMPLES);
}

/* A recorder killed after a flush: everything up to the flush is there. */
static void test_not_finalized(void **state)
{
        char *dir = tu_mkdtemp();
        char *path = tu_path(dir, "killed.pyflame");
        struct tu_reference ref;
        tu_write_reference(path, &ref, false, 1500);
        struct trace_reader *r = NULL;
        int rc = trace_reader_open(path, &r);
        if (rc != 0)
                fail_msg("open: %s", trace_reader_errmsg(r));
        struct trace_summary s;
        assert_int_equal(trace_reader_summary(r, &s), 0);
        assert_false(s.finalized);
        assert_int_equal(s.samples, 1500);
        assert_int_equal(s.duration_ns, 1499 * TU_STEP_NS);
        assert_null(trace_reader_meta(r, TRACE_META_END_WALL_NS));
        assert_string_equal(trace_reader_meta(r, TRACE_META_SAMPLES), "1500");
        struct seen c = {.ref = &ref, .hits = calloc(TU_SAMPLES, 1)};
        assert_int_equal(trace_reader_foreach_sample(r, NULL, check_sample, &c), 0);
        assert_int_equal(c.bad, 0);
        assert_int_equal(c.n, 1500);
        for (int i = 0; i < TU_SAMPLES; i++)
                assert_int_equal(c.hits[i], i < 1500);
        free(c.hits);
        check_stack_counts(path, &ref, 1500);
        /* Process 200 never ended: unknown. */
        struct trace_process p;
        assert_int_equal(trace_reader_process_at(r, 1, &p), 0);
        assert_int_equal(p.exit_status, -1);
        trace_reader_close(r);
        free(path);
        tu_rmdir(dir);
}

/*
 * Native frames keep their module and offset through a write and a read;
 * frames differing only in them are distinct; a file whose frames table has
 * no module column (format 1) still reads, its frames without one.
 */
static void test_native_frames(void **state)
{
        (void)state;
        char *dir = tu_mkdtemp();
        char *path = tu_path(dir, "native.pyflame");
        struct trace_writer *w = NULL;
        assert_int_equal(trace_writer_create(path, 0, &w), 0);
        struct trace_frame_desc py = {"run", "Job.run", "job.py", 12, 10, TRACE_FRAME_PYTHON};
        struct trace_frame_desc c = {"hot_loop", NULL, "ext.c", 31, -1, TRACE_FRAME_NATIVE};
        uint32_t f_py, f_c1, f_c2, f_c1_again, stack;
        assert_int_equal(trace_writer_intern_frame(w, &py, &f_py), 0);
        assert_int_equal(trace_writer_intern_native_frame(w, &c, "/x/ext.so", 0x1130, &f_c1), 0);
        assert_int_equal(trace_writer_intern_native_frame(w, &c, "/x/ext.so", 0x1200, &f_c2), 0);
        assert_int_equal(trace_writer_intern_native_frame(w, &c, "/x/ext.so", 0x1130, &f_c1_again),
                         0);
        assert_int_equal(f_c1, f_c1_again);
        assert_int_not_equal(f_c1, f_c2);
        /* A native frame needs a module and the native kind. */
        assert_int_equal(trace_writer_intern_native_frame(w, &c, NULL, 1, &f_c2), TRACE_ERR_ARG);
        assert_int_equal(trace_writer_intern_native_frame(w, &py, "/x/ext.so", 1, &f_c2),
                         TRACE_ERR_ARG);
        uint32_t frames[2] = {f_py, f_c1};
        assert_int_equal(trace_writer_intern_stack_frames(w, frames, 2, &stack), 0);
        struct trace_process_desc pd = {.pid = 7, .python_version = "3.12.1"};
        struct trace_thread_desc td = {.pid = 7, .tid = 7};
        uint32_t ref;
        assert_int_equal(trace_writer_add_process(w, &pd), 0);
        assert_int_equal(trace_writer_add_thread(w, &td, &ref), 0);
        assert_int_equal(trace_writer_add_sample(w, ref, 1000, stack, TRACE_STATE_ON_CPU), 0);
        assert_int_equal(trace_writer_count_error(w, 7, TRACE_ERROR_UNMATCHED, 3), 0);
        assert_int_equal(trace_writer_finalize(w), 0);
        trace_writer_free(w);

        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(path, &r), 0);
        struct trace_frame f;
        const char *module = NULL;
        uint64_t offset = 0;
        assert_int_equal(trace_reader_frame(r, f_c1, &f), 0);
        assert_int_equal(f.kind, TRACE_FRAME_NATIVE);
        assert_string_equal(f.function, "hot_loop");
        assert_int_equal(f.line, 31);
        assert_int_equal(trace_reader_frame_module(r, f_c1, &module, &offset), 0);
        assert_string_equal(module, "/x/ext.so");
        assert_int_equal(offset, 0x1130);
        assert_int_equal(trace_reader_frame_module(r, f_py, &module, &offset), 1);
        assert_int_equal(trace_reader_frame_module(r, 99, &module, &offset), TRACE_ERR_ARG);
        struct trace_summary s;
        assert_int_equal(trace_reader_summary(r, &s), 0);
        assert_int_equal(s.errors[TRACE_ERROR_UNMATCHED], 3);
        trace_reader_close(r);

        /* Views: native frames hidden, or one frame per module. */
        for (int view = TRACE_NATIVE_HIDE; view <= TRACE_NATIVE_BY_MODULE; view++) {
                assert_int_equal(trace_reader_open(path, &r), 0);
                assert_int_equal(trace_reader_set_native_view(r, (enum trace_native_view)view), 0);
                assert_int_equal(trace_reader_set_native_view(r, (enum trace_native_view)view), 0);
                assert_int_equal(trace_reader_set_native_view(r, TRACE_NATIVE_SHOW),
                                 TRACE_ERR_STATE);
                uint64_t *counts, total;
                assert_int_equal(trace_reader_count_by_stack(r, NULL, &counts, &total), 0);
                assert_int_equal(total, 1);
                uint32_t n = trace_reader_stack_count(r), hit = 0;
                for (uint32_t i = 0; i < n; i++)
                        if (counts[i])
                                hit = i;
                free(counts);
                uint32_t ids[4];
                int depth = trace_reader_stack_frames(r, hit, ids, 4);
                assert_int_equal(depth, view == TRACE_NATIVE_HIDE ? 1 : 2);
                assert_int_equal(ids[0], f_py);
                if (view == TRACE_NATIVE_BY_MODULE) {
                        assert_int_equal(trace_reader_frame(r, ids[1], &f), 0);
                        assert_string_equal(f.function, "ext.so");
                        assert_string_equal(f.file, "/x/ext.so");
                        assert_int_equal(f.kind, TRACE_FRAME_NATIVE);
                }
                trace_reader_close(r);
        }

        /* The same file as format 1 wrote it: no module columns, no native frame. */
        sqlite3 *db;
        assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db,
                                      "DROP VIEW frame_info; DELETE FROM stack_counts;"
                                      "DELETE FROM sample_chunks; DELETE FROM stacks WHERE id > 0;"
                                      "DELETE FROM frames WHERE kind = 1;"
                                      "ALTER TABLE frames DROP COLUMN module_offset;"
                                      "ALTER TABLE frames DROP COLUMN module;"
                                      "PRAGMA user_version = 1;",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
        sqlite3_close(db);
        r = NULL;
        int rc = trace_reader_open(path, &r);
        if (rc != 0)
                fail_msg("open format 1: %s", trace_reader_errmsg(r));
        assert_int_equal(trace_reader_frame_count(r), 1);
        assert_int_equal(trace_reader_frame_module(r, 1, &module, &offset), 1);
        trace_reader_close(r);
        free(path);
        tu_rmdir(dir);
}

static int count_samples(const char *path, uint64_t *n)
{
        struct trace_reader *r = NULL;
        int rc = trace_reader_open(path, &r);
        if (rc == 0) {
                uint64_t *counts;
                rc = trace_reader_count_by_stack(r, NULL, &counts, n);
                if (rc == 0)
                        free(counts);
        }
        trace_reader_close(r);
        return rc;
}

/* Samples are buffered until a flush; add_sample flushes when the interval has passed. */
static void test_auto_flush(void **state)
{
        char *dir = tu_mkdtemp();
        char *path = tu_path(dir, "live.pyflame");
        struct trace_writer *w = NULL;
        assert_int_equal(trace_writer_create(path, 0, &w), 0);
        struct trace_process_desc p = {42, NULL, NULL, NULL};
        struct trace_thread_desc t = {42, 42, 0, NULL};
        uint32_t ref;
        assert_int_equal(trace_writer_add_process(w, &p), 0);
        assert_int_equal(trace_writer_add_thread(w, &t, &ref), 0);
        const char *start = NULL;
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(path, &r), 0);
        start = trace_reader_meta(r, TRACE_META_START_MONO_NS);
        int64_t base = strtoll(start, NULL, 10);
        trace_reader_close(r);

        /* Default interval (1 s): a few samples at the same instant stay buffered. */
        for (int i = 0; i < 10; i++)
                assert_int_equal(trace_writer_add_sample(w, ref, base + i, 0, 0), 0);
        uint64_t n = 99;
        assert_int_equal(count_samples(path, &n), 0);
        assert_int_equal(n, 0);
        /* Interval 0: the next sample flushes everything by itself. */
        trace_writer_set_flush_interval(w, 0);
        assert_int_equal(trace_writer_add_sample(w, ref, base + 10, 0, 0), 0);
        assert_int_equal(count_samples(path, &n), 0);
        assert_int_equal(n, 11);
        trace_writer_free(w);
        assert_int_equal(count_samples(path, &n), 0);
        assert_int_equal(n, 11);
        free(path);
        tu_rmdir(dir);
}

/*
 * A reader of a live trace works on the snapshot it opened: chunks committed
 * later, which may use stacks it never loaded, are not visited.
 */
static void test_live_snapshot(void **state)
{
        char *dir = tu_mkdtemp();
        char *path = tu_path(dir, "live.pyflame");
        struct trace_writer *w = NULL;
        assert_int_equal(trace_writer_create(path, 0, &w), 0);
        trace_writer_set_flush_interval(w, -1);
        struct trace_process_desc p = {42, NULL, NULL, NULL};
        struct trace_thread_desc t = {42, 42, 0, NULL};
        struct trace_frame_desc fd = {"f", NULL, "x.py", 1, 1, TRACE_FRAME_PYTHON};
        uint32_t ref, frame, s1, s2;
        assert_int_equal(trace_writer_add_process(w, &p), 0);
        assert_int_equal(trace_writer_add_thread(w, &t, &ref), 0);
        assert_int_equal(trace_writer_intern_frame(w, &fd, &frame), 0);
        assert_int_equal(trace_writer_intern_stack(w, 0, frame, &s1), 0);
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(path, &r), 0);
        int64_t base = strtoll(trace_reader_meta(r, TRACE_META_START_MONO_NS), NULL, 10);
        trace_reader_close(r);
        for (int i = 0; i < 100; i++)
                assert_int_equal(trace_writer_add_sample(w, ref, base + i, s1, 0), 0);
        assert_int_equal(trace_writer_flush(w), 0);

        r = NULL;
        assert_int_equal(trace_reader_open(path, &r), 0);
        /* The recorder goes on: a new, deeper stack and more samples. */
        assert_int_equal(trace_writer_intern_stack(w, s1, frame, &s2), 0);
        for (int i = 100; i < 250; i++)
                assert_int_equal(trace_writer_add_sample(w, ref, base + i, s2, 0), 0);
        assert_int_equal(trace_writer_flush(w), 0);
        uint64_t *counts, total;
        assert_int_equal(trace_reader_count_by_stack(r, NULL, &counts, &total), 0);
        assert_int_equal(total, 100);
        assert_int_equal(counts[s1], 100);
        assert_int_equal(trace_reader_stack_count(r), 2);
        free(counts);
        trace_reader_close(r);

        /* A new reader sees it all, although the writer never finished. */
        r = NULL;
        assert_int_equal(trace_reader_open(path, &r), 0);
        assert_int_equal(trace_reader_count_by_stack(r, NULL, &counts, &total), 0);
        assert_int_equal(total, 250);
        assert_int_equal(counts[s2], 150);
        free(counts);
        trace_reader_close(r);
        trace_writer_free(w);
        free(path);
        tu_rmdir(dir);
}

static void test_refuses_overwrite(void **state)
{
        char *dir = tu_mkdtemp();
        char *path = tu_path(dir, "exists.pyflame");
        tu_write_file(path, "precious", 8);
        struct trace_writer *w = NULL;
        assert_int_equal(trace_writer_create(path, 0, &w), TRACE_ERR_EXISTS);
        assert_non_null(w);
        assert_non_null(strstr(trace_writer_errmsg(w), "--force"));
        assert_non_null(strstr(trace_writer_errmsg(w), path));
        /* The handle is only good for its message. */
        assert_int_equal(trace_writer_flush(w), TRACE_ERR_STATE);
        trace_writer_free(w);
        assert_int_equal(tu_file_size(path), 8);

        /* A stale journal must not be rolled into the new file. */
        char *journal = tu_path(dir, "exists.pyflame-journal");
        tu_write_file(journal, "garbage journal", 15);
        w = NULL;
        assert_int_equal(trace_writer_create(path, TRACE_CREATE_FORCE, &w), 0);
        assert_int_equal(trace_writer_finalize(w), 0);
        trace_writer_free(w);
        uint64_t n = 99;
        assert_int_equal(count_samples(path, &n), 0);
        assert_int_equal(n, 0);
        assert_int_not_equal(access(journal, F_OK), 0);

        w = NULL;
        assert_int_equal(trace_writer_create(path, 0x80, &w), TRACE_ERR_ARG);
        trace_writer_free(w);
        char *nodir = tu_path(dir, "no/such/dir.pyflame");
        w = NULL;
        assert_int_equal(trace_writer_create(nodir, 0, &w), TRACE_ERR_IO);
        assert_non_null(strstr(trace_writer_errmsg(w), "cannot create"));
        trace_writer_free(w);
        free(nodir);
        free(journal);
        free(path);
        tu_rmdir(dir);
}

static void test_writer_refusals(void **state)
{
        char *dir = tu_mkdtemp();
        char *path = tu_path(dir, "args.pyflame");
        struct trace_writer *w = NULL;
        assert_int_equal(trace_writer_create(path, 0, &w), 0);
        struct trace_process_desc p = {42, NULL, NULL, NULL};
        struct trace_thread_desc t = {42, 42, 0, "main"}, orphan = {43, 1, 0, NULL};
        uint32_t ref, out = 777, frame;
        assert_int_equal(trace_writer_add_process(w, &p), 0);
        assert_int_equal(trace_writer_add_thread(w, &t, &ref), 0);
        assert_int_equal(trace_writer_add_thread(w, &orphan, &out), TRACE_ERR_ARG);
        assert_non_null(strstr(trace_writer_errmsg(w), "add the process first"));
        assert_int_equal(out, 777);

        struct trace_frame_desc nofile = {"f", NULL, NULL, 1, 1, TRACE_FRAME_PYTHON};
        assert_int_equal(trace_writer_intern_frame(w, &nofile, &out), TRACE_ERR_ARG);
        struct trace_frame_desc badkind = {"f", NULL, "x.py", 1, 1, (enum trace_frame_kind)9};
        assert_int_equal(trace_writer_intern_frame(w, &badkind, &out), TRACE_ERR_ARG);
        assert_int_equal(out, 777);
        struct trace_frame_desc ok = {"f", NULL, "x.py", 1, 1, TRACE_FRAME_PYTHON};
        assert_int_equal(trace_writer_intern_frame(w, &ok, &frame), 0);

        /* Sample times are monotonic clock times at or after the start. */
        int64_t now;
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(path, &r), 0);
        now = strtoll(trace_reader_meta(r, TRACE_META_START_MONO_NS), NULL, 10);
        trace_reader_close(r);

        assert_int_equal(trace_writer_add_sample(w, 0, now, 0, 0), TRACE_ERR_ARG);
        assert_int_equal(trace_writer_add_sample(w, ref + 1, now, 0, 0), TRACE_ERR_ARG);
        assert_int_equal(trace_writer_add_sample(w, ref, now, 1, 0), TRACE_ERR_ARG);
        assert_non_null(strstr(trace_writer_errmsg(w), "unknown stack"));
        assert_int_equal(trace_writer_add_sample(w, ref, now, 0, 0x8), TRACE_ERR_ARG);
        assert_int_equal(trace_writer_add_sample(w, ref, INT64_MIN, 0, 0), TRACE_ERR_ARG);
        assert_int_equal(trace_writer_add_sample(w, ref, INT64_MAX, 0, 0), TRACE_ERR_ARG);
        assert_int_equal(trace_writer_add_sample(w, ref, now + 100, 0, 0), 0);
        assert_int_equal(trace_writer_add_sample(w, ref, now + 99, 0, 0), TRACE_ERR_ARG);
        assert_non_null(strstr(trace_writer_errmsg(w), "back in time"));
        assert_int_equal(trace_writer_add_sample(w, ref, now + 100, 0, 0), 0);
        assert_int_equal(trace_writer_count_error(w, 42, TRACE_ERROR_KIND_COUNT, 1), TRACE_ERR_ARG);
        assert_int_equal(trace_writer_end_process(w, 41, 0, now), TRACE_ERR_ARG);
        assert_int_equal(trace_writer_set_thread_name(w, 5, "x"), TRACE_ERR_ARG);
        assert_int_equal(trace_writer_set_meta(w, "", "x"), TRACE_ERR_ARG);
        assert_int_equal(trace_writer_set_meta(w, "k", NULL), TRACE_ERR_ARG);
        assert_int_equal(trace_writer_intern_stack(w, 1, frame, &out), TRACE_ERR_ARG);
        assert_int_equal(trace_writer_intern_stack(w, 0, frame + 1, &out), TRACE_ERR_ARG);
        assert_int_equal(out, 777);

        /* The refusals did no harm: the trace finishes with its two samples. */
        assert_int_equal(trace_writer_finalize(w), 0);
        assert_int_equal(trace_writer_add_sample(w, ref, now + 200, 0, 0), TRACE_ERR_STATE);
        assert_int_equal(trace_writer_flush(w), TRACE_ERR_STATE);
        assert_int_equal(trace_writer_set_meta(w, "k", "v"), TRACE_ERR_STATE);
        assert_int_equal(trace_writer_finalize(w), TRACE_ERR_STATE);
        assert_non_null(strstr(trace_writer_errmsg(w), "finalized"));
        trace_writer_free(w);
        uint64_t n = 0;
        assert_int_equal(count_samples(path, &n), 0);
        assert_int_equal(n, 2);
        trace_writer_free(NULL);
        trace_reader_close(NULL);
        assert_string_equal(trace_status_str(TRACE_ERR_TOO_NEW), "trace format too new");
        assert_string_equal(trace_status_str(12345), "unknown status");
        free(path);
        tu_rmdir(dir);
}

struct task_count {
        uint64_t n[8]; /* samples per ref */
        uint32_t stack[8];
};

static int count_task_sample(void *ctx, const struct trace_sample *s)
{
        struct task_count *c = ctx;
        if (s->thread < 8) {
                c->n[s->thread]++;
                c->stack[s->thread] = s->stack;
        }
        return 0;
}

/*
 * asyncio task streams: written beside their thread, read only in the tasks
 * view, kept out of the thread counts, merged along; a version-1 trace (no
 * task columns) still opens, with no tasks.
 */
static void test_tasks(void **state)
{
        (void)state;
        char *dir = tu_mkdtemp();
        char *path = tu_path(dir, "tasks.pyflame");
        struct trace_writer *w = NULL;
        assert_int_equal(trace_writer_create(path, 0, &w), 0);
        struct trace_process_desc p = {42, NULL, NULL, NULL};
        struct trace_thread_desc t = {42, 42, 7, "MainThread"};
        uint32_t th, t1, t2, again, out = 777;
        assert_int_equal(trace_writer_add_process(w, &p), 0);
        assert_int_equal(trace_writer_add_thread(w, &t, &th), 0);
        struct trace_task_desc d1 = {th, 0x1000, "user-1"}, d2 = {th, 0x2000, "user-2"};
        struct trace_task_desc bad = {th + 5, 0x3000, "x"};
        assert_int_equal(trace_writer_add_task(w, &d1, &t1), 0);
        assert_int_equal(trace_writer_add_task(w, &d2, &t2), 0);
        assert_int_equal(trace_writer_add_task(w, &d1, &again), 0);
        assert_int_equal(again, t1);
        assert_int_equal(trace_writer_add_task(w, &bad, &out), TRACE_ERR_ARG);
        struct trace_task_desc of_task = {t1, 0x3000, "x"};
        assert_int_equal(trace_writer_add_task(w, &of_task, &out), TRACE_ERR_ARG);
        assert_int_equal(out, 777);
        /* A task's stack: its name (kind task) over its await frame. */
        struct trace_frame_desc run = {"run_forever", NULL, "loop.py", 10, 1, TRACE_FRAME_PYTHON};
        struct trace_frame_desc name = {"user-1", NULL, "<task>", -1, -1, TRACE_FRAME_TASK};
        struct trace_frame_desc wait = {"fetch", NULL, "app.py", 5, 3, TRACE_FRAME_PYTHON};
        uint32_t fr[3], thread_stack, task_stack;
        assert_int_equal(trace_writer_intern_frame(w, &run, &fr[0]), 0);
        assert_int_equal(trace_writer_intern_frame(w, &name, &fr[1]), 0);
        assert_int_equal(trace_writer_intern_frame(w, &wait, &fr[2]), 0);
        assert_int_equal(trace_writer_intern_stack_frames(w, fr, 1, &thread_stack), 0);
        assert_int_equal(trace_writer_intern_stack_frames(w, fr + 1, 2, &task_stack), 0);
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(path, &r), 0);
        int64_t now = strtoll(trace_reader_meta(r, TRACE_META_START_MONO_NS), NULL, 10);
        trace_reader_close(r);
        for (int i = 0; i < 10; i++) {
                int64_t at = now + 1000 * i;
                assert_int_equal(trace_writer_add_sample(w, th, at, thread_stack, 0), 0);
                assert_int_equal(trace_writer_add_sample(w, t1, at, task_stack, 0), 0);
                if (i < 4)
                        assert_int_equal(trace_writer_add_sample(w, t2, at, task_stack, 0), 0);
        }
        assert_int_equal(trace_writer_finalize(w), 0);
        trace_writer_free(w);

        assert_int_equal(trace_reader_open(path, &r), 0);
        struct trace_summary sum;
        assert_int_equal(trace_reader_summary(r, &sum), 0);
        assert_int_equal(sum.samples, 10); /* the thread's only */
        assert_string_equal(trace_reader_meta(r, TRACE_META_SAMPLES), "10");
        assert_string_equal(trace_reader_meta(r, TRACE_META_TASK_SAMPLES), "14");
        assert_int_equal(trace_reader_task_count(r), 2);
        uint32_t of = 0;
        uint64_t addr = 0;
        assert_int_equal(trace_reader_thread_task(r, th - 1, &of, &addr), 0);
        assert_int_equal(trace_reader_thread_task(r, t2 - 1, &of, &addr), 1);
        assert_int_equal(of, th);
        assert_int_equal(addr, 0x2000);
        assert_int_equal(trace_reader_thread_task(r, 99, NULL, NULL), TRACE_ERR_ARG);
        struct trace_frame f;
        assert_int_equal(trace_reader_frame(r, fr[1], &f), 0);
        assert_int_equal(f.kind, TRACE_FRAME_TASK);
        assert_string_equal(f.function, "user-1");

        struct task_count c = {{0}, {0}};
        assert_int_equal(trace_reader_foreach_sample(r, NULL, count_task_sample, &c), 0);
        assert_int_equal(c.n[th], 10);
        assert_int_equal(c.n[t1] + c.n[t2], 0);
        trace_reader_set_view(r, TRACE_VIEW_TASKS);
        memset(&c, 0, sizeof(c));
        assert_int_equal(trace_reader_foreach_sample(r, NULL, count_task_sample, &c), 0);
        assert_int_equal(c.n[th], 0);
        assert_int_equal(c.n[t1], 10);
        assert_int_equal(c.n[t2], 4);
        assert_int_equal(c.stack[t1], task_stack);
        uint64_t *counts, total;
        assert_int_equal(trace_reader_count_by_stack(r, NULL, &counts, &total), 0);
        assert_int_equal(total, 14);
        assert_int_equal(counts[task_stack], 14);
        free(counts);
        trace_reader_close(r);

        /* stack_counts, for plain SQL, holds the threads' samples only. */
        sqlite3 *db;
        sqlite3_stmt *st;
        assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
        assert_int_equal(
            sqlite3_prepare_v2(db, "SELECT sum(samples) FROM stack_counts", -1, &st, NULL),
            SQLITE_OK);
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int64(st, 0), 10);
        sqlite3_finalize(st);
        sqlite3_close(db);

        /* Merged, the tasks come along, still tasks of their (new) thread. */
        char *merged = tu_path(dir, "merged.pyflame");
        assert_int_equal(trace_writer_create(merged, 0, &w), 0);
        assert_int_equal(trace_reader_open(path, &r), 0);
        assert_int_equal(trace_writer_add_recording(w, r, "tasks.pyflame", 0), 0);
        trace_reader_close(r);
        assert_int_equal(trace_writer_finalize(w), 0);
        trace_writer_free(w);
        assert_int_equal(trace_reader_open(merged, &r), 0);
        assert_int_equal(trace_reader_task_count(r), 2);
        trace_reader_set_view(r, TRACE_VIEW_TASKS);
        assert_int_equal(trace_reader_count_by_stack(r, NULL, &counts, &total), 0);
        assert_int_equal(total, 14);
        free(counts);
        trace_reader_close(r);

        /* A version-1 trace has no task columns: it opens, with no tasks. */
        assert_int_equal(tu_sql(path, "DELETE FROM sample_chunks WHERE thread > 1;"
                                      "DELETE FROM threads WHERE ref > 1;"
                                      "ALTER TABLE threads DROP COLUMN task_of;"
                                      "ALTER TABLE threads DROP COLUMN task_addr;"
                                      "PRAGMA user_version = 1;"),
                         SQLITE_OK);
        assert_int_equal(trace_reader_open(path, &r), 0);
        assert_int_equal(trace_reader_task_count(r), 0);
        assert_int_equal(trace_reader_thread_count(r), 1);
        assert_int_equal(trace_reader_count_by_stack(r, NULL, &counts, &total), 0);
        assert_int_equal(total, 10);
        free(counts);
        trace_reader_close(r);
        free(merged);
        free(path);
        tu_rmdir(dir);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_summary_and_meta, setup_finalized, teardown),
            cmocka_unit_test_setup_teardown(test_processes_threads, setup_finalized, teardown),
            cmocka_unit_test_setup_teardown(test_frames_stacks, setup_finalized, teardown),
            cmocka_unit_test_setup_teardown(test_all_samples, setup_finalized, teardown),
            cmocka_unit_test_setup_teardown(test_filter_time, setup_finalized, teardown),
            cmocka_unit_test_setup_teardown(test_filter_pid_thread, setup_finalized, teardown),
            cmocka_unit_test_setup_teardown(test_filter_state, setup_finalized, teardown),
            cmocka_unit_test_setup_teardown(test_filter_combined, setup_finalized, teardown),
            cmocka_unit_test_setup_teardown(test_foreach_stops, setup_finalized, teardown),
            cmocka_unit_test_setup_teardown(test_file_stamp, setup_finalized, teardown),
            cmocka_unit_test_setup_teardown(test_stack_counts, setup_finalized, teardown),
            cmocka_unit_test(test_not_finalized),
            cmocka_unit_test(test_native_frames),
            cmocka_unit_test(test_auto_flush),
            cmocka_unit_test(test_live_snapshot),
            cmocka_unit_test(test_refuses_overwrite),
            cmocka_unit_test(test_writer_refusals),
            cmocka_unit_test(test_tasks),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
