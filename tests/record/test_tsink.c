/*
 * test_tsink.c - the trace writer behind its queue (record/tsink.c).
 *
 * One producer queues samples (and error counts) while the sink's thread
 * applies and commits them and the producer, now and then, interns a new
 * stack under the lock, as the sampler does. The trace must then hold
 * every sample, in order, with the right stacks, states and error counts:
 * through the committing thread, through a ring that fills up (no thread:
 * the producer applies it itself), and with a job run on the thread.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "trace.h"
#include "tsink.h"

#define N_SAMPLES 400000u
#define PID       4242
/* Longer than the ring (64 Ki), so that it fills when nothing applies it. */
#define STACK_EVERY 100000u

struct fixture {
        char path[64];
        struct trace_writer *w;
        struct tsink *k;
        uint32_t thread;
};

static int64_t mono_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void open_fixture(struct fixture *f)
{
        snprintf(f->path, sizeof(f->path), "/tmp/test_tsink_%d.db", (int)getpid());
        assert_int_equal(trace_writer_create(f->path, TRACE_CREATE_FORCE, &f->w), 0);
        f->k = tsink_new(f->w);
        assert_non_null(f->k);
        struct trace_process_desc pd = {.pid = PID, .cmdline = "test"};
        struct trace_thread_desc td = {.pid = PID, .tid = PID, .python_thread_id = 1};
        tsink_lock(f->k);
        assert_int_equal(trace_writer_add_process(f->w, &pd), 0);
        assert_int_equal(trace_writer_add_thread(f->w, &td, &f->thread), 0);
        tsink_unlock(f->k);
}

/* A stack of `depth` frames named f0..f<depth-1>, interned under the lock. */
static uint32_t new_stack(struct fixture *f, unsigned depth)
{
        uint32_t stack = TRACE_STACK_EMPTY;
        tsink_lock(f->k);
        for (unsigned i = 0; i < depth; i++) {
                char name[16];
                snprintf(name, sizeof(name), "f%u", i);
                struct trace_frame_desc d = {.function = name, .file = "t.py", .line = (int)i + 1};
                uint32_t fid;
                assert_int_equal(trace_writer_intern_frame(f->w, &d, &fid), 0);
                assert_int_equal(trace_writer_intern_stack(f->w, stack, fid, &stack), 0);
        }
        tsink_unlock(f->k);
        return stack;
}

/* Queue N_SAMPLES; a new stack every STACK_EVERY; sample i has state i % 4. */
static void produce(struct fixture *f, int64_t t0, uint32_t *stacks)
{
        uint32_t stack = 0;
        for (uint32_t i = 0; i < N_SAMPLES; i++) {
                if (i % STACK_EVERY == 0) {
                        stack = new_stack(f, 1 + i / STACK_EVERY);
                        stacks[i / STACK_EVERY] = stack;
                }
                tsink_sample(f->k, f->thread, t0 + (int64_t)i * 1000, stack, i % 4);
                if (i % 1000 == 0)
                        tsink_error(f->k, PID, TRACE_ERROR_TORN, 2);
        }
}

struct check {
        uint32_t next;
        const uint32_t *stacks;
        int64_t t0_rel;
        uint32_t bad;
};

static int on_sample(void *ctx, const struct trace_sample *s)
{
        struct check *c = ctx;
        uint32_t i = c->next++;
        if (i == 0)
                c->t0_rel = s->t_ns;
        if (s->t_ns - c->t0_rel != (int64_t)i * 1000 || s->stack != c->stacks[i / STACK_EVERY] ||
            s->state != i % 4)
                c->bad++;
        return 0;
}

static void finish_and_check(struct fixture *f, const uint32_t *stacks)
{
        assert_int_equal(tsink_stop(f->k), 0);
        assert_int_equal(tsink_failed(f->k), 0);
        assert_int_equal(trace_writer_finalize(f->w), 0);
        tsink_free(f->k);
        trace_writer_free(f->w);

        struct trace_reader *r;
        assert_int_equal(trace_reader_open(f->path, &r), 0);
        struct trace_summary sum;
        assert_int_equal(trace_reader_summary(r, &sum), 0);
        assert_int_equal(sum.samples, N_SAMPLES);
        assert_int_equal(sum.errors[TRACE_ERROR_TORN], 2 * (N_SAMPLES / 1000));
        struct check c = {0, stacks, 0, 0};
        assert_int_equal(trace_reader_foreach_sample(r, NULL, on_sample, &c), 0);
        assert_int_equal(c.next, N_SAMPLES);
        assert_int_equal(c.bad, 0);
        trace_reader_close(r);
        unlink(f->path);
}

static int jobs_run;
static void count_job(void *ctx, int64_t now_ns)
{
        (void)now_ns;
        (*(int *)ctx)++;
}

/* Through the committing thread, which also runs a job; commits happen mid-way. */
static void test_threaded(void **state)
{
        (void)state;
        struct fixture f;
        uint32_t stacks[N_SAMPLES / STACK_EVERY + 1];
        open_fixture(&f);
        jobs_run = 0;
        tsink_lock(f.k);
        assert_int_equal(tsink_add_job_locked(f.k, count_job, &jobs_run), 0);
        tsink_unlock(f.k);
        assert_int_equal(tsink_start(f.k, NULL, 20000000), 0);
        int64_t t0 = mono_ns();
        produce(&f, t0, stacks);
        /*
         * Let the thread run a few passes (one every 50 ms) and commit before
         * stopping: wait for two job runs, however long a loaded machine
         * takes (a fixed 160 ms failed under load), up to 30 s.
         */
        int seen = 0;
        for (int waited = 0; waited < 3000; waited++) {
                tsink_lock(f.k);
                seen = jobs_run;
                tsink_unlock(f.k);
                if (seen >= 2)
                        break;
                struct timespec ts = {0, 10000000};
                nanosleep(&ts, NULL);
        }
        tsink_lock(f.k);
        tsink_remove_job_locked(f.k, &jobs_run);
        tsink_unlock(f.k);
        assert_true(seen >= 2);
        finish_and_check(&f, stacks);
}

/* No thread: the ring fills (64 Ki entries) and the producer applies it itself. */
static void test_ring_full(void **state)
{
        (void)state;
        struct fixture f;
        uint32_t stacks[N_SAMPLES / STACK_EVERY + 1];
        open_fixture(&f);
        produce(&f, mono_ns(), stacks);
        assert_true(tsink_full_waits(f.k) > 0);
        finish_and_check(&f, stacks);
}

/* A failure on the committing side is reported, with the writer's message. */
static void test_failure(void **state)
{
        (void)state;
        struct fixture f;
        open_fixture(&f);
        tsink_sample(f.k, 999, mono_ns(), 0, 0); /* no such thread */
        assert_int_equal(tsink_failed(f.k), 0);  /* queued, not applied yet */
        assert_true(tsink_stop(f.k) < 0);
        assert_true(tsink_failed(f.k) < 0);
        assert_non_null(strstr(tsink_errmsg(f.k), "thread"));
        tsink_free(f.k);
        trace_writer_free(f.w);
        unlink(f.path);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_threaded),
            cmocka_unit_test(test_ring_full),
            cmocka_unit_test(test_failure),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
