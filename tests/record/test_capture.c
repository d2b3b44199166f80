/*
 * test_capture.c - in-context reads (record/capture.c): a thread of this
 * process counts without pause, storing each number n first in the last
 * word of a buffer, then in the first. At any instant the last word is the
 * first or one more. A copy made at one instant shows that; a copy made
 * while the writer runs reads the first word long before the last, by when
 * the writer has counted on (hundreds per microsecond). The capture must
 * always show one instant, and the same read made from outside, on another
 * CPU, must not (or the test proves nothing on this machine). Also: a thread
 * that is asleep is not captured (-EAGAIN), and requests larger than a
 * capture holds, or of unmapped memory, are refused.
 *
 * Needs BPF tracing programs (root) and two CPUs; skips otherwise.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "capture.h"
#include "cpustate.h"

#define WORDS 2048 /* 16 KiB: a copy takes longer than a pass */

static volatile uint64_t buf[WORDS];
static atomic_int stop, stop_sleeper;
static atomic_int writer_tid;

static void pin(int cpu)
{
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void *writer(void *arg)
{
        (void)arg;
        pin(0);
        atomic_store(&writer_tid, (int)syscall(SYS_gettid));
        for (uint64_t n = 1; !atomic_load_explicit(&stop, memory_order_relaxed); n++) {
                buf[WORDS - 1] = n;
                buf[0] = n;
        }
        return NULL;
}

/* Whether a copy of buf is the buffer at one instant: the last word is the first or one more. */
static bool one_instant(const uint64_t *copy)
{
        return copy[WORDS - 1] - copy[0] <= 1;
}

struct fixture {
        struct capture *c;
        pthread_t th;
        pid_t tid;
        int fd;
};

static int setup(void **state)
{
        static struct fixture f;
        char err[512];
        if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
                print_message("skipped: needs two CPUs\n");
                return -1;
        }
        if (capture_open(&f.c, err, sizeof(err)) < 0) {
                print_message("skipped: %s\n", err);
                return -1;
        }
        atomic_store(&stop, 0);
        /* Touch every page: an in-context read cannot fault one in. */
        memset((void *)buf, 0, sizeof(buf));
        pthread_create(&f.th, NULL, writer, NULL);
        while (!atomic_load(&writer_tid))
                sched_yield();
        f.tid = atomic_load(&writer_tid);
        f.fd = capture_trigger_open(f.tid);
        assert_true(f.fd >= 0);
        pin(1);
        *state = &f;
        return 0;
}

static int teardown(void **state)
{
        struct fixture *f = *state;
        atomic_store(&stop, 1);
        pthread_join(f->th, NULL);
        close(f->fd);
        capture_close(f->c);
        return 0;
}

static void test_one_instant(void **state)
{
        struct fixture *f = *state;
        static uint64_t copy[WORDS];
        int captured = 0, outside_torn = 0;
        /* Until 200 captures (the writer may be preempted now and then: no capture then). */
        for (time_t end = time(NULL) + 20; captured < 200 && time(NULL) < end;) {
                /* Two ranges, to check they are read back to back in order. */
                struct memsrc_iov iov[2] = {
                    {(uint64_t)(uintptr_t)buf, copy, sizeof(buf) / 2},
                    {(uint64_t)(uintptr_t)buf + sizeof(buf) / 2, (char *)copy + sizeof(buf) / 2,
                     sizeof(buf) / 2},
                };
                int64_t t = 0;
                int rc = capture_readv(f->c, f->tid, f->fd, iov, 2, &t, NULL);
                if (rc == -EAGAIN)
                        continue; /* the writer was preempted: nothing to show */
                assert_int_equal(rc, 0);
                assert_true(t > 0);
                assert_true(one_instant(copy));
                assert_true(copy[0] > 0);
                captured++;
                struct iovec local = {copy, sizeof(buf)}, remote = {(void *)buf, sizeof(buf)};
                assert_int_equal(process_vm_readv(getpid(), &local, 1, &remote, 1, 0),
                                 (ssize_t)sizeof(buf));
                outside_torn += !one_instant(copy);
        }
        print_message("%d captures at one instant; %d of as many reads from outside were not\n",
                      captured, outside_torn);
        assert_int_equal(captured, 200);
        /* Each outside read follows a capture: the writer was running on the other CPU. */
        assert_true(outside_torn > 0);
}

static void *sleeper(void *arg)
{
        atomic_int *tid = arg;
        atomic_store(tid, (int)syscall(SYS_gettid));
        while (!atomic_load(&stop_sleeper))
                usleep(1000);
        return NULL;
}

static void test_not_running(void **state)
{
        struct fixture *f = *state;
        atomic_int tid = 0;
        pthread_t th;
        pthread_create(&th, NULL, sleeper, &tid);
        while (!atomic_load(&tid))
                sched_yield();
        int fd = capture_trigger_open(atomic_load(&tid));
        assert_true(fd >= 0);
        uint64_t word;
        struct memsrc_iov iov = {(uint64_t)(uintptr_t)buf, &word, sizeof(word)};
        int idle = 0;
        for (int i = 0; i < 50; i++)
                idle += capture_readv(f->c, atomic_load(&tid), fd, &iov, 1, NULL, NULL) == -EAGAIN;
        assert_true(idle >= 45); /* asleep in usleep nearly all the time */
        close(fd);
        atomic_store(&stop_sleeper, 1);
        pthread_join(th, NULL);
}

static void test_limits(void **state)
{
        struct fixture *f = *state;
        static uint8_t big[128 << 10];
        struct memsrc_iov one = {(uint64_t)(uintptr_t)big, big, sizeof(big)};
        assert_int_equal(capture_readv(f->c, f->tid, f->fd, &one, 1, NULL, NULL), -E2BIG);
        static struct memsrc_iov many[257];
        for (size_t i = 0; i < 257; i++)
                many[i] = (struct memsrc_iov){(uint64_t)(uintptr_t)big, big, 8};
        assert_int_equal(capture_readv(f->c, f->tid, f->fd, many, 257, NULL, NULL), -E2BIG);
        /* An unmapped range is refused in the thread's context too. */
        uint64_t word;
        struct memsrc_iov bad = {8, &word, sizeof(word)};
        /* (Until the writer is caught running: it may be preempted for a while.) */
        int rc = -EAGAIN;
        for (time_t end = time(NULL) + 5; rc == -EAGAIN && time(NULL) < end;)
                rc = capture_readv(f->c, f->tid, f->fd, &bad, 1, NULL, NULL);
        assert_int_equal(rc, -EFAULT);
        /* With a bitmap, it is marked for the caller and the others are read. */
        uint64_t first = 0;
        struct memsrc_iov two[2] = {{(uint64_t)(uintptr_t)buf, &first, sizeof(first)}, bad};
        uint64_t failed[CAPTURE_FAILED_WORDS];
        rc = -EAGAIN;
        for (time_t end = time(NULL) + 5; rc == -EAGAIN && time(NULL) < end;)
                rc = capture_readv(f->c, f->tid, f->fd, two, 2, NULL, failed);
        assert_int_equal(rc, 0);
        assert_int_equal(failed[0], 2);
        assert_true(first > 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_one_instant),
            cmocka_unit_test(test_not_running),
            cmocka_unit_test(test_limits),
        };
        int rc = cmocka_run_group_tests(tests, setup, teardown);
        /* The group setup failing is a skip (no BPF here, or one CPU), as meson expects. */
        return rc && !stop && !writer_tid ? 77 : rc;
}
