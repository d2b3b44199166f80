/*
 * make_traces.c - synthetic traces for the golden tests of pyflame-diff,
 * pyflame-report --slices and pyflame-report merge, written through
 * libtrace's writer with fully known content.
 *
 * Usage: make_traces DIR              the named traces below, into DIR
 *        make_traces DIR pairs N      N pairs of traces of one program, for
 *                                     the false-alarm rate of the gate
 *
 * The program being "recorded" is a sticky Markov chain over leaf
 * functions: a call lasts a geometric number of samples, then the next
 * function is drawn by its weight. Long calls make consecutive samples
 * alike, as they are in real recordings. Randomness comes from a fixed
 * xorshift seed per trace, so every trace is the same on every run.
 *
 * As in tests/report/golden.c, this program defines clock_gettime(), which
 * the statically linked libtrace calls instead of libc's, so that start,
 * sample and end times are exactly those chosen here.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "trace.h"

#define MS 1000000LL

static uint64_t rng;

static double uniform(void)
{
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

static struct trace_writer *create(const char *dir, const char *name, const char *host)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        tu_fake_mono_ns = TU_MONO_START;
        struct trace_writer *w = NULL;
        tu_must(w, trace_writer_create(path, TRACE_CREATE_FORCE, &w), path);
        tu_must(w, trace_writer_set_meta(w, TRACE_META_HOST, host), "meta");
        tu_must(w, trace_writer_set_meta(w, TRACE_META_KERNEL, "Linux 6.1.0-test x86_64"), "meta");
        tu_must(w, trace_writer_set_meta(w, TRACE_META_TOOL_VERSION, "0.0.0-test"), "meta");
        tu_must(w, trace_writer_set_meta_int(w, TRACE_META_RATE_HZ, 200), "meta");
        tu_must(w, trace_writer_set_meta(w, TRACE_META_MODE, "nonblocking"), "meta");
        return w;
}

static void finish(struct trace_writer *w, int64_t end_ms)
{
        tu_fake_mono_ns = TU_MONO_START + end_ms * MS;
        tu_must(w, trace_writer_finalize(w), "finalize");
        trace_writer_free(w);
}

static uint32_t frame(struct trace_writer *w, const char *function, const char *file, int line,
                      int first_line)
{
        struct trace_frame_desc d = {function, NULL, file, line, first_line, TRACE_FRAME_PYTHON};
        uint32_t id = 0;
        tu_must(w, trace_writer_intern_frame(w, &d, &id), "frame");
        return id;
}

static uint32_t stack(struct trace_writer *w, size_t depth, const uint32_t *frames)
{
        uint32_t id = 0;
        tu_must(w, trace_writer_intern_stack_frames(w, frames, depth, &id), "stack");
        return id;
}

static uint32_t thread(struct trace_writer *w, int32_t pid, int64_t tid, const char *name)
{
        struct trace_thread_desc d = {pid, tid, (uint64_t)tid * 1000, name};
        uint32_t ref = 0;
        tu_must(w, trace_writer_add_thread(w, &d, &ref), "thread");
        return ref;
}

/* ---- the web-request program: app.db, slower.db, same.db, pairs ---- */

/*
 * main > handle > {parse, compute, render, query}; main and handle also
 * run themselves. A worker thread waits off CPU (loop > wait) or spins
 * (loop). Weights are shares of the main thread's samples; `slow` scales
 * compute's weight (2 = twice as long).
 */
enum { L_PARSE, L_COMPUTE, L_RENDER, L_QUERY, L_HANDLE, L_MAIN, L_COUNT };

static const double leaf_weight[L_COUNT] = {0.25, 0.30, 0.15, 0.20, 0.05, 0.05};
static const double leaf_run[L_COUNT] = {2, 3, 1, 4, 1, 1};

/*
 * `shift`: each leaf's weight is scaled by a factor drawn from [1 - shift,
 * 1 + shift], as runs of one program differ when the machine does.
 */
static void write_app(const char *dir, const char *name, uint64_t seed, double slow, int ticks,
                      int32_t pid, double shift)
{
        rng = seed;
        struct trace_writer *w = create(dir, name, "testhost");
        struct trace_process_desc p = {pid, "python app.py", "3.12.1", "shared"};
        tu_must(w, trace_writer_add_process(w, &p), "process");
        uint32_t t_main = thread(w, pid, pid, "MainThread");
        uint32_t t_worker = thread(w, pid, pid + 1, "worker");
        uint32_t f_main = frame(w, "main", "app.py", 12, 10);
        uint32_t f_handle = frame(w, "handle", "app.py", 22, 20);
        uint32_t f_leaf[4] = {
            frame(w, "parse", "app.py", 31, 30), frame(w, "compute", "app.py", 41, 40),
            frame(w, "render", "app.py", 51, 50), frame(w, "query", "db.py", 8, 5)};
        uint32_t f_loop = frame(w, "loop", "worker.py", 4, 3);
        uint32_t f_wait = frame(w, "wait", "worker.py", 9, 8);
        uint32_t s_leaf[L_COUNT];
        for (int k = 0; k < 4; k++)
                s_leaf[k] = stack(w, 3, (uint32_t[]){f_main, f_handle, f_leaf[k]});
        s_leaf[L_HANDLE] = stack(w, 2, (uint32_t[]){f_main, f_handle});
        s_leaf[L_MAIN] = stack(w, 1, (uint32_t[]){f_main});
        uint32_t s_loop = stack(w, 1, (uint32_t[]){f_loop});
        uint32_t s_wait = stack(w, 2, (uint32_t[]){f_loop, f_wait});

        double weight[L_COUNT], sum = 0;
        for (int k = 0; k < L_COUNT; k++)
                sum += weight[k] = leaf_weight[k] * (k == L_COMPUTE ? slow : 1.0) *
                                   (shift > 0 ? 1.0 + shift * (2 * uniform() - 1) : 1.0);
        int cur = -1;
        bool waiting = true;
        for (int tick = 0; tick < ticks; tick++) {
                int64_t t = TU_MONO_START + (int64_t)tick * 5 * MS;
                if (cur < 0 || uniform() < 1.0 / leaf_run[cur]) {
                        double u = uniform() * sum, c = 0;
                        for (cur = 0; cur < L_COUNT - 1; cur++)
                                if (u < (c += weight[cur]))
                                        break;
                }
                tu_must(w,
                        trace_writer_add_sample(w, t_main, t, s_leaf[cur],
                                                TRACE_STATE_ON_CPU | TRACE_STATE_HOLDS_GIL),
                        "sample");
                if (uniform() < 0.1)
                        waiting = !waiting;
                tu_must(w,
                        trace_writer_add_sample(w, t_worker, t, waiting ? s_wait : s_loop,
                                                waiting ? 0 : TRACE_STATE_ON_CPU),
                        "sample");
        }
        tu_fake_mono_ns = TU_MONO_START + (int64_t)ticks * 5 * MS;
        tu_must(w, trace_writer_end_process(w, pid, 0, tu_fake_mono_ns), "end");
        finish(w, (int64_t)ticks * 5);
}

/* ---- phases.db: load, then crunch ---- */

/*
 * 2000 ticks of 5 ms (10 s). Up to 4 s: load (80%) and helper (20%); from
 * 4 s on: crunch (80%) and helper (20%). One thread, always on CPU except
 * a sleep between 6 s and 7 s (no samples on CPU then).
 */
static void write_phases(const char *dir)
{
        rng = 7;
        struct trace_writer *w = create(dir, "phases.db", "testhost");
        struct trace_process_desc p = {300, "python job.py", "3.12.1", "shared"};
        tu_must(w, trace_writer_add_process(w, &p), "process");
        uint32_t t = thread(w, 300, 300, "MainThread");
        uint32_t f_run = frame(w, "run", "job.py", 50, 48);
        uint32_t f_load = frame(w, "load", "job.py", 12, 10);
        uint32_t f_crunch = frame(w, "crunch", "job.py", 31, 30);
        uint32_t f_helper = frame(w, "helper", "util.py", 3, 1);
        uint32_t f_sleep = frame(w, "sleep", "job.py", 40, 39);
        uint32_t s_load = stack(w, 2, (uint32_t[]){f_run, f_load});
        uint32_t s_crunch = stack(w, 2, (uint32_t[]){f_run, f_crunch});
        uint32_t s_helper = stack(w, 2, (uint32_t[]){f_run, f_helper});
        uint32_t s_sleep = stack(w, 2, (uint32_t[]){f_run, f_sleep});
        for (int tick = 0; tick < 2000; tick++) {
                int64_t ms = (int64_t)tick * 5;
                uint32_t s = uniform() < 0.8 ? (ms < 4000 ? s_load : s_crunch) : s_helper;
                unsigned st = TRACE_STATE_ON_CPU | TRACE_STATE_HOLDS_GIL;
                if (ms >= 6000 && ms < 7000) {
                        s = s_sleep;
                        st = 0;
                }
                tu_must(w, trace_writer_add_sample(w, t, TU_MONO_START + ms * MS, s, st), "sample");
        }
        finish(w, 10000);
}

/* small.db: 30 samples, too few to test anything. */
static void write_small(const char *dir)
{
        struct trace_writer *w = create(dir, "small.db", "testhost");
        struct trace_process_desc p = {400, "python tiny.py", "3.12.1", "shared"};
        tu_must(w, trace_writer_add_process(w, &p), "process");
        uint32_t t = thread(w, 400, 400, "MainThread");
        uint32_t f_a = frame(w, "tiny", "tiny.py", 2, 1);
        uint32_t f_b = frame(w, "compute", "app.py", 41, 40);
        uint32_t s_a = stack(w, 1, &f_a), s_b = stack(w, 1, &f_b);
        for (int i = 0; i < 30; i++)
                tu_must(w,
                        trace_writer_add_sample(w, t, TU_MONO_START + i * 10 * MS,
                                                i % 3 ? s_a : s_b, TRACE_STATE_ON_CPU),
                        "sample");
        finish(w, 300);
}

/* idle.db: samples, but none on CPU. */
static void write_idle(const char *dir)
{
        struct trace_writer *w = create(dir, "idle.db", "testhost");
        struct trace_process_desc p = {500, "python idle.py", "3.12.1", "shared"};
        tu_must(w, trace_writer_add_process(w, &p), "process");
        uint32_t t = thread(w, 500, 500, "MainThread");
        uint32_t f = frame(w, "wait", "idle.py", 2, 1);
        uint32_t s = stack(w, 1, &f);
        for (int i = 0; i < 50; i++)
                tu_must(w, trace_writer_add_sample(w, t, TU_MONO_START + i * 10 * MS, s, 0),
                        "sample");
        finish(w, 500);
}

/*
 * host-a.db and host-b.db: the same pid (600) on two hosts, recorded at
 * wall-clock times 2 s apart, for merging; host-b.db also has pid 601.
 */
static void write_hosts(const char *dir)
{
        for (int h = 0; h < 2; h++) {
                tu_fake_wall_offset = h * 2000 * MS;
                struct trace_writer *w =
                    create(dir, h ? "host-b.db" : "host-a.db", h ? "host-b" : "host-a");
                tu_must(w, trace_writer_set_meta(w, TRACE_META_PIDS, h ? "600 601" : "600"),
                        "meta");
                tu_must(
                    w, trace_writer_set_meta(w, TRACE_META_PYTHON_VERSION, h ? "3.11.4" : "3.12.1"),
                    "meta");
                struct trace_process_desc p = {600, h ? "python b.py" : "python a.py",
                                               h ? "3.11.4" : "3.12.1", "shared"};
                tu_must(w, trace_writer_add_process(w, &p), "process");
                uint32_t t = thread(w, 600, 600, "MainThread");
                uint32_t t2 = 0;
                if (h) {
                        struct trace_process_desc q = {601, "python b2.py", "3.11.4", "shared"};
                        tu_must(w, trace_writer_add_process(w, &q), "process");
                        t2 = thread(w, 601, 601, "MainThread");
                }
                uint32_t f = frame(w, h ? "serve_b" : "serve_a", h ? "b.py" : "a.py", 5, 1);
                uint32_t g = frame(w, "common", "lib.py", 9, 7);
                uint32_t s1 = stack(w, 1, &f), s2 = stack(w, 2, (uint32_t[]){f, g});
                for (int i = 0; i < 100; i++) {
                        int64_t ts = TU_MONO_START + i * 10 * MS;
                        tu_must(w, trace_writer_add_sample(w, t, ts, i % 4 ? s1 : s2, 1), "sample");
                        if (t2)
                                tu_must(w, trace_writer_add_sample(w, t2, ts, s2, 1), "sample");
                }
                tu_must(w, trace_writer_count_error(w, 600, TRACE_ERROR_TORN, 1 + (uint64_t)h),
                        "errors");
                tu_fake_mono_ns = TU_MONO_START + 1000 * MS;
                tu_must(w, trace_writer_end_process(w, 600, h, tu_fake_mono_ns), "end");
                finish(w, 1000);
        }
        tu_fake_wall_offset = 0;
}

int main(int argc, char **argv)
{
        if (argc != 2 && !(argc == 4 && !strcmp(argv[2], "pairs")))
                tu_die("usage: make_traces DIR [pairs N]");
        const char *dir = argv[1];
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                tu_die("%s: %s", dir, strerror(errno));
        if (argc == 4) {
                int n = atoi(argv[3]);
                for (int i = 0; i < n; i++) {
                        char a[64], b[64];
                        snprintf(a, sizeof(a), "pair%04d-a.db", i);
                        snprintf(b, sizeof(b), "pair%04d-b.db", i);
                        write_app(dir, a, 1000003ULL * (uint64_t)(2 * i + 1), 1.0, 1000, 100, 0);
                        write_app(dir, b, 1000003ULL * (uint64_t)(2 * i + 2), 1.0, 1000, 100, 0);
                }
                return 0;
        }
        write_app(dir, "app.db", 11, 1.0, 2000, 100, 0);
        write_app(dir, "same.db", 12, 1.0, 2000, 200, 0);
        write_app(dir, "slower.db", 13, 2.0, 2000, 300, 0);
        /*
         * Runs of one program whose shares differ by up to 40% from run to
         * run: run-a1..5 and run-b1..5, to be merged into two sides.
         */
        for (int i = 1; i <= 5; i++) {
                char a[32], b[32];
                snprintf(a, sizeof(a), "run-a%d.db", i);
                snprintf(b, sizeof(b), "run-b%d.db", i);
                write_app(dir, a, 100 + (uint64_t)i, 1.0, 3000, 700, 0.4);
                write_app(dir, b, 200 + (uint64_t)i, 1.0, 3000, 700, 0.4);
        }
        write_phases(dir);
        write_small(dir);
        write_idle(dir);
        write_hosts(dir);
        return 0;
}
