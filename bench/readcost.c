/*
 * readcost.c - what one read of another process costs on this machine.
 *
 * Forks a child that spins for ~20 us and sleeps for ~50 us in turn, then
 * times, against it: process_vm_readv of 8 bytes and of 16 KiB (through
 * memsrc, as the walker does), one batched call of 16 ranges of 8 bytes
 * against 16 single calls, the pread of a thread's /proc stat file on an fd
 * kept open (procfs_thread_state), the open+read+close it replaces, and
 * cpustate_read (the context-switch ring that replaces the pread on the
 * sampler's hot path). Prints the best-of-rounds mean per call in
 * nanoseconds. Then what the context-switch records cost the watched
 * threads: two processes ping-pong over pipes, with and without a watcher
 * on each, alternately, medians of 7. A program, not a test: it prints
 * figures and asserts nothing about them.
 *
 * Usage: pyflame-readcost [iterations]   (default 100000)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpustate.h"
#include "memsrc.h"
#include "procfs.h"

#define ROUNDS 5

/* The child's copy of this buffer sits at the same address as ours. */
static char target_buf[16384];

static double now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

struct bench_ctx {
        struct memsrc mem;
        pid_t pid;
        int stat_fd;
        char path[64];
        struct cpustate *cs;
};

typedef int (*bench_fn)(struct bench_ctx *c);

static int read_8(struct bench_ctx *c)
{
        uint64_t v;
        return memsrc_read(&c->mem, (uintptr_t)target_buf, &v, sizeof(v));
}

static int read_16k(struct bench_ctx *c)
{
        static char buf[sizeof(target_buf)];
        return memsrc_read(&c->mem, (uintptr_t)target_buf, buf, sizeof(buf));
}

static int readv_16x8(struct bench_ctx *c)
{
        uint64_t v[16];
        struct memsrc_iov iov[16];
        for (int i = 0; i < 16; i++)
                iov[i] = (struct memsrc_iov){(uintptr_t)(target_buf + 1000 * i), &v[i], 8};
        return memsrc_readv(&c->mem, iov, 16);
}

static int read_16x8_single(struct bench_ctx *c)
{
        uint64_t v;
        for (int i = 0; i < 16; i++) {
                int rc = memsrc_read(&c->mem, (uintptr_t)(target_buf + 1000 * i), &v, 8);
                if (rc < 0)
                        return rc;
        }
        return 0;
}

static int stat_pread(struct bench_ctx *c)
{
        int s = procfs_thread_state(c->stat_fd);
        return s < 0 ? s : 0;
}

static int stat_open_read_close(struct bench_ctx *c)
{
        int fd = open(c->path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        char buf[512];
        ssize_t r = read(fd, buf, sizeof(buf));
        close(fd);
        return r > 0 ? 0 : -EIO;
}

static int switch_ring(struct bench_ctx *c)
{
        return cpustate_read(c->cs) == -1 ? -EIO : 0;
}

/* Two processes ping-pong `n` times over pipes; ns per round trip, watched or not. */
static double pingpong(long n, bool watched)
{
        int ab[2], ba[2];
        if (pipe(ab) < 0 || pipe(ba) < 0)
                return -errno;
        pid_t peer = fork();
        if (peer == 0) {
                char b;
                close(ab[1]);
                close(ba[0]);
                while (read(ab[0], &b, 1) == 1 && write(ba[1], &b, 1) == 1)
                        ;
                _exit(0);
        }
        close(ab[0]);
        close(ba[1]);
        struct cpustate *w1 = watched ? cpustate_open(peer) : NULL;
        struct cpustate *w2 = watched ? cpustate_open(getpid()) : NULL;
        double per = -ENOTSUP;
        if (peer > 0 && (!watched || (w1 && w2))) {
                char b = 'x';
                double t0 = now_ns();
                long i = 0;
                for (; i < n; i++)
                        if (write(ab[1], &b, 1) != 1 || read(ba[0], &b, 1) != 1)
                                break;
                per = i == n ? (now_ns() - t0) / (double)n : -EIO;
        }
        cpustate_close(w1);
        cpustate_close(w2);
        close(ab[1]); /* the peer reads end of file and exits */
        close(ba[0]);
        if (peer > 0)
                waitpid(peer, NULL, 0);
        return per;
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

static void switch_cost(long iters)
{
        enum { RUNS = 7 };
        double off[RUNS], on[RUNS];
        long n = iters / 5 + 1;
        for (int r = 0; r < RUNS; r++) {
                off[r] = pingpong(n, false);
                on[r] = pingpong(n, true);
                if (off[r] < 0 || on[r] < 0) {
                        printf("context-switch records: cannot watch here (%s)\n",
                               strerror((int)-(off[r] < 0 ? off[r] : on[r])));
                        return;
                }
        }
        qsort(off, RUNS, sizeof(double), cmp_double);
        qsort(on, RUNS, sizeof(double), cmp_double);
        printf("\npipe ping-pong between two processes, ns per round trip (median of %d):\n", RUNS);
        printf("%-52s %12.0f\n", "not watched", off[RUNS / 2]);
        printf("%-52s %12.0f\n", "both watched (context-switch records)", on[RUNS / 2]);
        /* Each round trip switches each process out and in once: four records. */
        printf("%-52s %12.0f\n", "added per context switch of a watched thread",
               (on[RUNS / 2] - off[RUNS / 2]) / 4);
}

/* Best-of-ROUNDS mean ns per call of fn; negative errno if a call fails. */
static double time_it(struct bench_ctx *c, bench_fn fn, long iters)
{
        double best = -1;
        for (int r = 0; r < ROUNDS; r++) {
                double t0 = now_ns();
                for (long i = 0; i < iters; i++) {
                        int rc = fn(c);
                        if (rc < 0)
                                return rc;
                }
                double per = (now_ns() - t0) / (double)iters;
                if (best < 0 || per < best)
                        best = per;
        }
        return best;
}

int main(int argc, char **argv)
{
        long iters = argc > 1 ? strtol(argv[1], NULL, 10) : 100000;
        if (iters <= 0) {
                fprintf(stderr, "usage: %s [iterations > 0]\n", argv[0]);
                return 2;
        }
        memset(target_buf, 0x5a, sizeof(target_buf));
        pid_t pid = fork();
        if (pid < 0) {
                perror("fork");
                return 1;
        }
        if (pid == 0) {
                /* Touch every page so that none is read for the first time during timing. */
                for (size_t i = 0; i < sizeof(target_buf); i += 4096)
                        target_buf[i] = 1;
                /* Switch out and in all the time, as a busy program does. */
                for (;;) {
                        double until = now_ns() + 20000;
                        while (now_ns() < until)
                                ;
                        usleep(50);
                }
        }
        struct bench_ctx c = {.pid = pid};
        memsrc_init_process(&c.mem, pid);
        snprintf(c.path, sizeof(c.path), "/proc/%d/task/%d/stat", (int)pid, (int)pid);
        c.stat_fd = procfs_thread_open(pid, pid);
        c.cs = cpustate_open(pid);
        usleep(10000);

        static const struct {
                const char *what;
                bench_fn fn;
                long divisor; /* iterations shrink for the costly ones */
        } cases[] = {
            {"process_vm_readv, 8 bytes", read_8, 1},
            {"process_vm_readv, 16 KiB", read_16k, 4},
            {"memsrc_readv, 16 ranges x 8 bytes (one call)", readv_16x8, 2},
            {"memsrc_read, 16 x 8 bytes (16 calls)", read_16x8_single, 8},
            {"pread of /proc/PID/task/TID/stat, fd kept open", stat_pread, 2},
            {"open+read+close of the same stat file", stat_open_read_close, 4},
            {"cpustate_read, the context-switch ring", switch_ring, 1},
        };
        int status = 0;
        printf("%-52s %12s\n", "operation", "ns per call");
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                if ((cases[i].fn == stat_pread && c.stat_fd < 0) ||
                    (cases[i].fn == switch_ring && !c.cs))
                        continue;
                double ns = time_it(&c, cases[i].fn, iters / cases[i].divisor + 1);
                if (ns < 0) {
                        printf("%-52s failed: %s\n", cases[i].what, strerror((int)-ns));
                        status = 1;
                        continue;
                }
                printf("%-52s %12.0f\n", cases[i].what, ns);
        }
        if (c.stat_fd >= 0)
                close(c.stat_fd);
        cpustate_close(c.cs);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        switch_cost(iters);
        return status;
}
