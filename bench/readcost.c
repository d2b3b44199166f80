/*
 * readcost.c - what one read of another process costs on this machine.
 *
 * Forks a child that sleeps, then times, against it: process_vm_readv of
 * 8 bytes and of 16 KiB (through memsrc, as the walker does), one batched
 * call of 16 ranges of 8 bytes against 16 single calls, the pread of a
 * thread's /proc stat file on an fd kept open (procfs_thread_state, the
 * sampler's hot path), and the open+read+close it replaces. Prints the
 * best-of-rounds mean per call in nanoseconds. A program, not a test: it
 * prints figures and asserts nothing about them.
 *
 * Usage: pyflame-readcost [iterations]   (default 100000)
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
                pause();
                _exit(0);
        }
        struct bench_ctx c = {.pid = pid};
        memsrc_init_process(&c.mem, pid);
        snprintf(c.path, sizeof(c.path), "/proc/%d/task/%d/stat", (int)pid, (int)pid);
        c.stat_fd = procfs_thread_open(pid, pid);
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
        };
        int status = 0;
        printf("%-52s %12s\n", "operation", "ns per call");
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                if (cases[i].fn == stat_pread && c.stat_fd < 0)
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
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return status;
}
