/*
 * bench.c - how long pyflame-report takes on a big trace. A program, not a
 * test: it prints numbers and asserts nothing.
 *
 * Usage: report-bench PYFLAME-REPORT TRACE [SAMPLES]
 * Writes TRACE (unless it exists) through libtrace's writer: SAMPLES samples
 * (default 10 million) over 8 threads, 10 kHz, in 5,000 distinct leaf stacks
 * 30 frames deep drawn from 400 frames (some recursive), mixed thread
 * states. Then runs each view of pyflame-report on it once and prints the
 * wall time of each run, output discarded.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "trace.h"

#define N_THREADS 8
#define N_FRAMES  400
#define N_LEAVES  5000
#define DEPTH     30

/* A small deterministic generator (xorshift64*). */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint32_t rng(uint32_t n)
{
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        return (uint32_t)((rng_state * 0x2545f4914f6cdd1dULL) >> 33) % n;
}

static int64_t now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void write_trace(const char *path, uint64_t samples)
{
        struct trace_writer *w = NULL;
        tu_must(w, trace_writer_create(path, TRACE_CREATE_FORCE, &w), path);
        struct trace_process_desc p = {1000, "python bench.py", "3.12.1", "shared"};
        tu_must(w, trace_writer_add_process(w, &p), "process");
        uint32_t threads[N_THREADS];
        for (int i = 0; i < N_THREADS; i++) {
                struct trace_thread_desc t = {1000, 1000 + i, 0, NULL};
                tu_must(w, trace_writer_add_thread(w, &t, &threads[i]), "thread");
        }
        uint32_t frames[N_FRAMES];
        for (int i = 0; i < N_FRAMES; i++) {
                char fn[32], file[32];
                snprintf(fn, sizeof(fn), "func_%d", i / 4);
                snprintf(file, sizeof(file), "/src/module_%d.py", i / 40);
                struct trace_frame_desc d = {
                    fn, NULL, file, 10 + i, 1 + (i / 4) * 4, TRACE_FRAME_PYTHON};
                tu_must(w, trace_writer_intern_frame(w, &d, &frames[i]), "frame");
        }
        /* Leaves share prefixes: each starts from an earlier leaf's first frames. */
        static uint32_t chains[N_LEAVES][DEPTH];
        uint32_t leaves[N_LEAVES];
        for (int l = 0; l < N_LEAVES; l++) {
                int keep = l ? (int)rng(DEPTH) : 0;
                const uint32_t *from = chains[l ? rng((uint32_t)l) : 0];
                for (int d = 0; d < DEPTH; d++) {
                        if (d < keep)
                                chains[l][d] = from[d];
                        else if (d && rng(8) == 0)
                                chains[l][d] = chains[l][d - 1]; /* recursion */
                        else
                                chains[l][d] = frames[rng(N_FRAMES)];
                }
                tu_must(w, trace_writer_intern_stack_frames(w, chains[l], DEPTH, &leaves[l]),
                        "stack");
        }
        int64_t t0 = now_ns();
        uint64_t ticks = samples / N_THREADS;
        for (uint64_t tick = 0; tick < ticks; tick++)
                for (int i = 0; i < N_THREADS; i++) {
                        /* A skewed choice: a few stacks are hot, as in real profiles. */
                        uint32_t a = rng(N_LEAVES), b = rng(N_LEAVES);
                        uint32_t leaf = a < b ? a : b;
                        unsigned state = rng(4) ? TRACE_STATE_ON_CPU : 0;
                        if (state && rng(2))
                                state |= TRACE_STATE_HOLDS_GIL;
                        tu_must(w,
                                trace_writer_add_sample(w, threads[i], t0 + (int64_t)tick * 100000,
                                                        leaves[leaf], state),
                                "sample");
                }
        tu_must(w, trace_writer_finalize(w), "finalize");
        trace_writer_free(w);
}

static double run(const char *bin, const char *const *args)
{
        const char *argv[16] = {"pyflame-report"};
        size_t n = 1;
        for (; args[n - 1] && n < 15; n++)
                argv[n] = args[n - 1];
        argv[n] = NULL;
        int64_t t0 = now_ns();
        pid_t pid = fork();
        if (pid == 0) {
                int fd = open("/dev/null", O_WRONLY);
                dup2(fd, 1);
                execv(bin, (char *const *)argv);
                _exit(127);
        }
        int ws = 0;
        waitpid(pid, &ws, 0);
        double s = (double)(now_ns() - t0) / 1e9;
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
                fprintf(stderr, "report-bench: run failed (status 0x%x)\n", ws);
        return s;
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

int main(int argc, char **argv)
{
        if (argc < 3) {
                fprintf(stderr, "usage: report-bench PYFLAME-REPORT TRACE [SAMPLES]\n");
                return 2;
        }
        const char *bin = argv[1], *trace = argv[2];
        uint64_t samples = argc > 3 ? strtoull(argv[3], NULL, 10) : 10000000;
        struct stat st;
        if (stat(trace, &st) < 0) {
                int64_t t0 = now_ns();
                write_trace(trace, samples);
                printf("wrote %s: %llu samples in %.2f s\n", trace, (unsigned long long)samples,
                       (double)(now_ns() - t0) / 1e9);
        }
        printf("folded               %.3f s\n", run(bin, ARGS(trace)));
        printf("folded --idle        %.3f s\n", run(bin, ARGS("--idle", trace)));
        printf("folded --format json %.3f s\n", run(bin, ARGS("--format", "json", trace)));
        printf("--by-line --top 0    %.3f s\n", run(bin, ARGS("--by-line", "--top", "0", trace)));
        printf("--by-function        %.3f s\n", run(bin, ARGS("--by-function", trace)));
        printf("--from 10%% --to 90%%  %.3f s\n",
               run(bin, ARGS("--from", "10%", "--to", "90%", trace)));
        printf("--thread 1003        %.3f s\n", run(bin, ARGS("--thread", "1003", trace)));
        printf("info                 %.3f s\n", run(bin, ARGS("info", trace)));
        return 0;
}
