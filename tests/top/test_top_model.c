/*
 * test_top_model.c - unit tests of the live view's model (report/top.h) on
 * a two-phase trace whose every sample the test knows:
 *
 *   pid 100, thread "main" (tid 100), every 10 ms from 0 to 4 s:
 *       0-2 s  main:1 > alpha:11   on CPU, holding the GIL
 *       2-4 s  main:1 > beta:21    on CPU, holding the GIL
 *   pid 100, thread "worker" (tid 101), every 10 ms from 0 to 4 s:
 *              main:1 > beta:21    idle (off CPU, no GIL)
 *   pid 200, thread "other" (tid 200), every 20 ms from 0 to 4 s:
 *              no Python frame     on CPU
 *
 * alpha lives in a.py, beta in b.py, main in m.py; rate_hz 100. The
 * windows, filters, keys and sorts are checked against counts derived
 * from that description by hand.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "testutil.h"
#include "top.h"

extern int64_t tu_fake_mono_ns;

#define MS 1000000LL
#define S  1000000000LL

static char dir[64], path[128], live[128];

static uint32_t frame(struct trace_writer *w, const char *fn, const char *file, int line, int first)
{
        struct trace_frame_desc d = {fn, NULL, file, line, first, TRACE_FRAME_PYTHON};
        uint32_t id;
        tu_must(w, trace_writer_intern_frame(w, &d, &id), "frame");
        return id;
}

static uint32_t thread(struct trace_writer *w, int32_t pid, int64_t tid, const char *name)
{
        struct trace_thread_desc d = {pid, tid, (uint64_t)tid + 7000, name};
        uint32_t ref;
        tu_must(w, trace_writer_add_thread(w, &d, &ref), "thread");
        return ref;
}

static int setup(void **state)
{
        (void)state;
        snprintf(dir, sizeof(dir), "/tmp/test-top-XXXXXX");
        if (!mkdtemp(dir))
                tu_die("mkdtemp");
        snprintf(path, sizeof(path), "%s/two-phase.db", dir);
        snprintf(live, sizeof(live), "%s/live.db", dir);
        tu_fake_mono_ns = TU_MONO_START;
        struct trace_writer *w = NULL;
        tu_must(w, trace_writer_create(path, 0, &w), "create");
        tu_must(w, trace_writer_set_meta(w, TRACE_META_RATE_HZ, "100"), "rate");
        tu_must(w, trace_writer_set_meta(w, TRACE_META_CMDLINE, "python two_phase.py"), "cmd");
        tu_must(w, trace_writer_set_meta(w, TRACE_META_PYTHON_VERSION, "3.12.1"), "version");
        tu_must(w, trace_writer_set_meta(w, TRACE_META_PIDS, "100 200"), "pids");
        struct trace_process_desc p1 = {100, "python two_phase.py", "3.12.1", "shared"};
        struct trace_process_desc p2 = {200, "python other.py", "3.12.1", "shared"};
        tu_must(w, trace_writer_add_process(w, &p1), "process");
        tu_must(w, trace_writer_add_process(w, &p2), "process");
        uint32_t main_f = frame(w, "main", "m.py", 1, 1);
        uint32_t alpha = frame(w, "alpha", "a.py", 11, 10);
        uint32_t beta = frame(w, "beta", "b.py", 21, 20);
        uint32_t s_alpha, s_beta;
        tu_must(w, trace_writer_intern_stack_frames(w, (uint32_t[]){main_f, alpha}, 2, &s_alpha),
                "stack");
        tu_must(w, trace_writer_intern_stack_frames(w, (uint32_t[]){main_f, beta}, 2, &s_beta),
                "stack");
        uint32_t t_main = thread(w, 100, 100, "main");
        uint32_t t_worker = thread(w, 100, 101, "worker");
        uint32_t t_other = thread(w, 200, 200, "other");
        const unsigned busy = TRACE_STATE_ON_CPU | TRACE_STATE_HOLDS_GIL;
        for (int64_t t = 0; t < 4 * S; t += 10 * MS) {
                int64_t at = TU_MONO_START + t;
                tu_must(w,
                        trace_writer_add_sample(w, t_main, at, t < 2 * S ? s_alpha : s_beta, busy),
                        "sample");
                tu_must(w, trace_writer_add_sample(w, t_worker, at, s_beta, 0), "sample");
                if (t % (20 * MS) == 0)
                        tu_must(w,
                                trace_writer_add_sample(w, t_other, at, TRACE_STACK_EMPTY,
                                                        TRACE_STATE_ON_CPU),
                                "sample");
        }
        tu_fake_mono_ns = TU_MONO_START + 4 * S;
        tu_must(w, trace_writer_finalize(w), "finalize");
        trace_writer_free(w);
        return 0;
}

static int teardown(void **state)
{
        (void)state;
        unlink(path);
        unlink(live);
        rmdir(dir);
        return 0;
}

static struct trace_reader *open_trace(void)
{
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(path, &r), 0);
        return r;
}

/* The row whose function (or file, by file) is `name`, or NULL. */
static const struct top_row *row_named(const struct top_view *v, const char *name)
{
        for (size_t i = 0; i < v->n; i++)
                if (!strcmp(v->rows[i].f.function, name) || !strcmp(v->rows[i].f.file, name))
                        return &v->rows[i];
        return NULL;
}

static const struct top_query on_cpu_all = {
    .filter = {.state_require = TRACE_STATE_ON_CPU},
    .cursor_ns = INT64_MAX,
    .window_ns = 0,
};

static void test_whole_recording(void **state)
{
        (void)state;
        struct trace_reader *r = open_trace();
        struct top_view v;
        assert_int_equal(top_view_build(r, &on_cpu_all, &v), 0);
        /* On CPU: main's 400 and other's 200; worker's 400 idle samples are not counted. */
        assert_int_equal(v.h.samples, 600);
        assert_int_equal(v.h.seen, 1000);
        assert_int_equal(v.h.on_cpu, 600);
        assert_int_equal(v.h.holds_gil, 400);
        assert_int_equal(v.h.threads, 3);
        assert_int_equal(v.h.from_ns, 0);
        assert_int_equal(v.h.to_ns, 4 * S);
        assert_int_equal(v.h.end_ns, 4 * S);
        assert_true(v.h.finalized);
        assert_string_equal(v.h.target, "pid 100 200: python two_phase.py");
        assert_string_equal(v.h.python_version, "3.12.1");
        assert_int_equal(v.h.period_ns, 10 * MS);
        assert_int_equal(v.no_frame, 200);
        /* Sorted by own: alpha and beta tie at 200, then by name; main owns nothing. */
        assert_int_equal(v.n, 3);
        assert_string_equal(v.rows[0].f.function, "alpha");
        assert_string_equal(v.rows[1].f.function, "beta");
        assert_string_equal(v.rows[2].f.function, "main");
        assert_int_equal(v.rows[0].own, 200);
        assert_int_equal(v.rows[2].own, 0);
        assert_int_equal(v.rows[2].total, 400);
        assert_true(v.rows[0].own_share > 0.333 && v.rows[0].own_share < 0.334);
        assert_int_equal(v.rows[0].own_ns, 2 * S);
        assert_int_equal(v.rows[2].total_ns, 4 * S);
        /* Three threads over 4 s: 1000 samples is 83.3 per thread and second. */
        assert_true(v.h.achieved_hz > 83.3 && v.h.achieved_hz < 83.4);
        top_view_free(&v);
        trace_reader_close(r);
}

static void test_window_follows_cursor(void **state)
{
        (void)state;
        struct trace_reader *r = open_trace();
        struct top_query q = on_cpu_all;
        q.filter.pids = (int32_t[]){100};
        q.filter.n_pids = 1;
        q.window_ns = 1 * S;
        struct top_view v;
        /* Phase one: only alpha. */
        q.cursor_ns = 1500 * MS;
        assert_int_equal(top_view_build(r, &q, &v), 0);
        assert_int_equal(v.h.from_ns, 500 * MS);
        assert_int_equal(v.h.to_ns, 1500 * MS);
        assert_int_equal(v.h.samples, 100);
        assert_non_null(row_named(&v, "alpha"));
        assert_null(row_named(&v, "beta"));
        assert_true(v.rows[0].own_share == 1.0);
        top_view_free(&v);
        /* Phase two: only beta. */
        q.cursor_ns = 3500 * MS;
        assert_int_equal(top_view_build(r, &q, &v), 0);
        assert_string_equal(v.rows[0].f.function, "beta");
        assert_null(row_named(&v, "alpha"));
        assert_int_equal(v.rows[0].own, 100);
        top_view_free(&v);
        /* Across the change: half each. */
        q.cursor_ns = 2500 * MS;
        assert_int_equal(top_view_build(r, &q, &v), 0);
        assert_int_equal(row_named(&v, "alpha")->own, 50);
        assert_int_equal(row_named(&v, "beta")->own, 50);
        top_view_free(&v);
        /* A cursor past the end is the end. */
        q.cursor_ns = 99 * S;
        assert_int_equal(top_view_build(r, &q, &v), 0);
        assert_int_equal(v.h.to_ns, 4 * S);
        assert_int_equal(v.h.from_ns, 3 * S);
        top_view_free(&v);
        /* A cursor at 0 is an empty window. */
        q.cursor_ns = 0;
        assert_int_equal(top_view_build(r, &q, &v), 0);
        assert_int_equal(v.h.samples, 0);
        assert_int_equal(v.n, 0);
        top_view_free(&v);
        trace_reader_close(r);
}

static void test_filters(void **state)
{
        (void)state;
        struct trace_reader *r = open_trace();
        struct top_view v;
        /* --idle: the worker's samples count, and beta leads. */
        struct top_query q = on_cpu_all;
        q.filter.state_require = 0;
        assert_int_equal(top_view_build(r, &q, &v), 0);
        assert_int_equal(v.h.samples, 1000);
        assert_string_equal(v.rows[0].f.function, "beta");
        assert_int_equal(v.rows[0].own, 600);
        top_view_free(&v);
        /* --gil: only main's samples. */
        q.filter.state_require = TRACE_STATE_ON_CPU | TRACE_STATE_HOLDS_GIL;
        assert_int_equal(top_view_build(r, &q, &v), 0);
        assert_int_equal(v.h.samples, 400);
        assert_int_equal(v.no_frame, 0);
        assert_int_equal(v.h.seen, 1000); /* the header's shares stay of every state */
        top_view_free(&v);
        /* One thread: the worker, idle. */
        uint32_t worker = 2;
        q.filter.state_require = 0;
        q.filter.threads = &worker;
        q.filter.n_threads = 1;
        assert_int_equal(top_view_build(r, &q, &v), 0);
        assert_int_equal(v.h.threads, 1);
        assert_int_equal(v.h.samples, 400);
        assert_int_equal(v.h.on_cpu, 0);
        assert_int_equal(v.n, 2);
        assert_string_equal(v.rows[0].f.function, "beta");
        top_view_free(&v);
        trace_reader_close(r);
}

static void test_keys_and_sorts(void **state)
{
        (void)state;
        struct trace_reader *r = open_trace();
        struct top_view v;
        struct top_query q = on_cpu_all;
        q.key = TOP_BY_FILE;
        assert_int_equal(top_view_build(r, &q, &v), 0);
        assert_int_equal(v.n, 3);
        assert_int_equal(row_named(&v, "a.py")->own, 200);
        assert_int_equal(row_named(&v, "m.py")->total, 400);
        char buf[64];
        assert_string_equal(top_row_label(row_named(&v, "a.py"), TOP_BY_FILE, buf, sizeof(buf)),
                            "a.py");
        top_view_free(&v);

        q.key = TOP_BY_LINE;
        assert_int_equal(top_view_build(r, &q, &v), 0);
        assert_string_equal(top_row_label(&v.rows[0], TOP_BY_LINE, buf, sizeof(buf)),
                            "a.py:11 (alpha)");
        top_view_free(&v);

        q.key = TOP_BY_FUNCTION;
        q.sort = TOP_SORT_TOTAL;
        assert_int_equal(top_view_build(r, &q, &v), 0);
        assert_string_equal(v.rows[0].f.function, "main");
        assert_string_equal(top_row_label(&v.rows[0], TOP_BY_FUNCTION, buf, sizeof(buf)),
                            "main (m.py:1)");
        /* Name: alphabetical. */
        top_view_sort(&v, TOP_BY_FUNCTION, TOP_SORT_NAME);
        assert_string_equal(v.rows[0].f.function, "alpha");
        assert_string_equal(v.rows[2].f.function, "main");
        /* Own time: as own. */
        top_view_sort(&v, TOP_BY_FUNCTION, TOP_SORT_OWN_TIME);
        assert_string_equal(v.rows[2].f.function, "main");
        top_view_free(&v);

        q.sort = TOP_SORT_COUNT;
        assert_int_equal(top_view_build(r, &q, &v), TRACE_ERR_ARG);
        trace_reader_close(r);
}

/* A trace still being written: the view sees each commit once reopened. */
static void test_unfinished(void **state)
{
        (void)state;
        tu_fake_mono_ns = TU_MONO_START;
        struct trace_writer *w = NULL;
        tu_must(w, trace_writer_create(live, 0, &w), "create");
        uint32_t f = frame(w, "spin", "s.py", 3, 1), st;
        tu_must(w, trace_writer_intern_stack(w, TRACE_STACK_EMPTY, f, &st), "stack");
        struct trace_process_desc p = {100, "python spin.py", "3.12.1", "shared"};
        tu_must(w, trace_writer_add_process(w, &p), "process");
        uint32_t t = thread(w, 100, 100, "main");
        trace_writer_set_flush_interval(w, -1);
        for (int i = 0; i < 50; i++)
                tu_must(w, trace_writer_add_sample(w, t, TU_MONO_START + i * 10 * MS, st, 1), "s");
        tu_must(w, trace_writer_flush(w), "flush");
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(live, &r), 0);
        struct top_view v;
        assert_int_equal(top_view_build(r, &on_cpu_all, &v), 0);
        assert_false(v.h.finalized);
        assert_int_equal(v.h.samples, 50);
        assert_int_equal(v.h.end_ns, 490 * MS + 1);
        top_view_free(&v);
        trace_reader_close(r);
        for (int i = 50; i < 80; i++)
                tu_must(w, trace_writer_add_sample(w, t, TU_MONO_START + i * 10 * MS, st, 1), "s");
        tu_must(w, trace_writer_flush(w), "flush");
        assert_int_equal(trace_reader_open(live, &r), 0);
        assert_int_equal(top_view_build(r, &on_cpu_all, &v), 0);
        assert_int_equal(v.h.samples, 80);
        top_view_free(&v);
        trace_reader_close(r);
        trace_writer_free(w);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_whole_recording), cmocka_unit_test(test_window_follows_cursor),
            cmocka_unit_test(test_filters),         cmocka_unit_test(test_keys_and_sorts),
            cmocka_unit_test(test_unfinished),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
