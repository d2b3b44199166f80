/*
 * example_trace.c - writes the small, known trace that test_sql_examples.py
 * runs the queries of libtrace/EXAMPLES-SQL.md against, and prints what the
 * queries must find. It uses only the public API and links the shared
 * library, so it also checks that what the tools need is exported.
 *
 * The recording: process 1234 with threads 1 "MainThread" and 2 "worker",
 * sampled together at 100 Hz for 3 s (samples in the middle of each 10 ms
 * tick). MainThread spends 7 of every 10 samples in hot_loop (on CPU, with
 * the GIL) and 3 in parse (on CPU); worker waits (off CPU) for the first
 * 2 s, then runs hot_loop on CPU without the GIL.
 *
 * With a second file name, also writes there the trace merged with itself
 * (recordings "a.pyflame" at 0 and "b.pyflame" 10 s later), for the example
 * that asks where samples came from.
 *
 * Usage: example_trace FILE [MERGED]   (prints "key value" lines on stdout)
 */
#include <stdio.h>
#include <stdlib.h>

#include "trace.h"

#define TICKS   300
#define TICK_NS 10000000LL

static int fail(struct trace_writer *w, const char *what)
{
        fprintf(stderr, "example_trace: %s: %s\n", what, trace_writer_errmsg(w));
        trace_writer_free(w);
        return 1;
}

int main(int argc, char **argv)
{
        if (argc != 2 && argc != 3) {
                fprintf(stderr, "usage: example_trace FILE [MERGED]\n");
                return 2;
        }
        struct trace_writer *w = NULL;
        if (trace_writer_create(argv[1], TRACE_CREATE_FORCE, &w) < 0)
                return fail(w, "create");
        /* Sample times count from the start the writer stored at create. */
        struct trace_reader *r = NULL;
        if (trace_reader_open(argv[1], &r) < 0 || !trace_reader_meta(r, TRACE_META_START_MONO_NS)) {
                fprintf(stderr, "example_trace: reading the start: %s\n", trace_reader_errmsg(r));
                return 1;
        }
        int64_t base = strtoll(trace_reader_meta(r, TRACE_META_START_MONO_NS), NULL, 10);
        trace_reader_close(r);

        struct trace_process_desc p = {1234, "python3 server.py", "3.12.1", "shared"};
        struct trace_thread_desc t1 = {1234, 1234, 0x7f0000001000ULL, "MainThread"};
        struct trace_thread_desc t2 = {1234, 1240, 0x7f0000002000ULL, "worker"};
        uint32_t main_ref, worker_ref;
        if (trace_writer_set_meta(w, TRACE_META_RATE_HZ, "100") < 0 ||
            trace_writer_add_process(w, &p) < 0 || trace_writer_add_thread(w, &t1, &main_ref) < 0 ||
            trace_writer_add_thread(w, &t2, &worker_ref) < 0)
                return fail(w, "describe the recording");

        struct trace_frame_desc fd[] = {
            {"<module>", NULL, "server.py", 40, 1, TRACE_FRAME_PYTHON},
            {"serve", "Server.serve", "server.py", 22, 20, TRACE_FRAME_PYTHON},
            {"hot_loop", "hot_loop", "compute.py", 7, 5, TRACE_FRAME_PYTHON},
            {"parse", "Parser.parse", "json.py", 88, 80, TRACE_FRAME_PYTHON},
            {"run", "Thread.run", "threading.py", 975, 970, TRACE_FRAME_PYTHON},
            {"wait", "Condition.wait", "threading.py", 320, 300, TRACE_FRAME_PYTHON},
        };
        uint32_t f[6];
        for (int i = 0; i < 6; i++)
                if (trace_writer_intern_frame(w, &fd[i], &f[i]) < 0)
                        return fail(w, "intern_frame");
        uint32_t hot_path[] = {f[0], f[1], f[2]}, parse_path[] = {f[0], f[1], f[3]};
        uint32_t wait_path[] = {f[4], f[5]}, work_path[] = {f[4], f[2]};
        uint32_t s_hot, s_parse, s_wait, s_work;
        if (trace_writer_intern_stack_frames(w, hot_path, 3, &s_hot) < 0 ||
            trace_writer_intern_stack_frames(w, parse_path, 3, &s_parse) < 0 ||
            trace_writer_intern_stack_frames(w, wait_path, 2, &s_wait) < 0 ||
            trace_writer_intern_stack_frames(w, work_path, 2, &s_work) < 0)
                return fail(w, "intern_stack_frames");

        long long main_hot = 0, window_on_cpu = 0;
        for (int i = 0; i < TICKS; i++) {
                int64_t t = base + i * TICK_NS + TICK_NS / 2;
                bool hot = i % 10 < 7;
                bool late = i >= 200; /* from 2 s on */
                main_hot += hot;
                window_on_cpu += late ? 2 : 0; /* both threads are on CPU from 2 s */
                if (trace_writer_add_sample(w, main_ref, t, hot ? s_hot : s_parse,
                                            hot ? TRACE_STATE_ON_CPU | TRACE_STATE_HOLDS_GIL
                                                : TRACE_STATE_ON_CPU) < 0 ||
                    trace_writer_add_sample(w, worker_ref, t, late ? s_work : s_wait,
                                            late ? TRACE_STATE_ON_CPU : 0) < 0)
                        return fail(w, "add_sample");
        }
        if (trace_writer_count_error(w, 1234, TRACE_ERROR_TORN, 3) < 0)
                return fail(w, "count_error");
        if (trace_writer_finalize(w) < 0)
                return fail(w, "finalize");
        trace_writer_free(w);
        if (argc == 3) {
                if (trace_writer_create(argv[2], TRACE_CREATE_FORCE, &w) < 0)
                        return fail(w, "create the merged trace");
                if (trace_reader_open(argv[1], &r) < 0) {
                        fprintf(stderr, "example_trace: %s\n", trace_reader_errmsg(r));
                        return 1;
                }
                int rc = trace_writer_add_recording(w, r, "a.pyflame", 0);
                if (rc == 0)
                        rc = trace_writer_add_recording(w, r, "b.pyflame", 10 * 1000000000LL);
                trace_reader_close(r);
                if (rc < 0 || trace_writer_finalize(w) < 0)
                        return fail(w, "merge");
                trace_writer_free(w);
        }
        printf("samples %d\n", 2 * TICKS);
        printf("thread_samples %d\n", TICKS);
        printf("hot_loop_samples %lld\n", main_hot + (TICKS - 200));
        printf("window_on_cpu %lld\n", window_on_cpu);
        return 0;
}
