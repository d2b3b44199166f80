/*
 * test_stopper.c - record/stopper.c (--blocking's holds) on a real process.
 *
 * A forked child runs SPINNERS threads that spin, each counting in a shared
 * page, and a pool of threads blocked reading a pipe (a byte written ends
 * one of them; the child's main thread adds BATCH more on command). Checked:
 *   - a stop holds every spinning thread (each shows 't' in /proc and its
 *     count does not move while held) and leaves the sleeping ones alone;
 *     after stopper_resume() every spinner counts again;
 *   - with over a hundred threads, and after threads were added and others
 *     ended between two passes (fewer of them, then as many as were added,
 *     so that the thread count is the same), the stopper has exactly the
 *     threads /proc lists, sorted by tid, and finds each one (stopper_thread,
 *     stopper_thread_state, stopper_set_on_cpu);
 *   - where a pass begins asking (`first`) follows the draw the recorder
 *     hands to each pass (schedule_random(), as record.c's pass() does):
 *     over PASSES passes it takes most of the possible values, not a few;
 *     the lowest and highest draws give the first and the last thread, and
 *     stopper_stop() (one hold, --dump's) begins with the first.
 * Needs ptrace of our own child (allowed by Yama's default scope 1); skipped
 * with a message when ptrace is refused here.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "procfs.h"
#include "schedule.h"
#include "stopper.h"

#define SPINNERS 4
#define SLEEPERS 120 /* at the start */
#define BATCH    50  /* added on command */
#define ENDED    30  /* ended between the two passes */
#define PASSES   300
/* How long a change may take to show on a loaded machine; never reached when all is well. */
#define SETTLE_NS (10 * 1000000000LL)

struct shared {
        atomic_int tids[SPINNERS];
        atomic_long counts[SPINNERS];
        atomic_int added; /* batches of sleepers the child has started */
        atomic_int ready; /* the child has started its first threads */
};

static struct {
        struct shared *sh;
        pid_t pid;
        int base; /* the child's threads once ready (a sanitizer may add its own) */
        /*
         * The test's stopper: a failed check inside a hold leaves the child's
         * threads seized, and the teardown must let them go before it kills
         * the child (a traced thread that dies waits for its tracer, us).
         */
        struct stopper stop;
        int cmd[2];   /* 'a': start BATCH more sleepers */
        int sleep[2]; /* each byte written ends one sleeper */
} g = {.cmd = {-1, -1}, .sleep = {-1, -1}};

static int64_t now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *spinner(void *arg)
{
        int i = (int)(intptr_t)arg;
        atomic_store(&g.sh->tids[i], (int)gettid());
        for (;;)
                atomic_fetch_add_explicit(&g.sh->counts[i], 1, memory_order_relaxed);
        return NULL;
}

static void *sleeper(void *arg)
{
        (void)arg;
        char c;
        while (read(g.sleep[0], &c, 1) < 0 && errno == EINTR)
                ;
        return NULL;
}

static void start_sleepers(int n)
{
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        for (int i = 0; i < n; i++) {
                pthread_t t;
                if (pthread_create(&t, &attr, sleeper, NULL) != 0)
                        _exit(2);
        }
        pthread_attr_destroy(&attr);
}

static void child_main(void)
{
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed test */
        if (getppid() == 1)
                _exit(1);
        start_sleepers(SLEEPERS);
        for (int i = 0; i < SPINNERS; i++) {
                pthread_t t;
                if (pthread_create(&t, NULL, spinner, (void *)(intptr_t)i) != 0)
                        _exit(2);
        }
        atomic_store(&g.sh->ready, 1);
        for (;;) {
                char c;
                ssize_t r = read(g.cmd[0], &c, 1);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r != 1)
                        _exit(0);
                start_sleepers(BATCH);
                atomic_fetch_add(&g.sh->added, 1);
        }
}

static int tid_count(void)
{
        pid_t *tids = NULL;
        int n = procfs_list_tids(g.pid, &tids);
        free(tids);
        return n;
}

/* Wait until the child has `n` threads; false if it never does. */
static bool settle(int n)
{
        int64_t deadline = now_ns() + SETTLE_NS;
        while (tid_count() != n)
                if (now_ns() > deadline)
                        return false;
                else
                        usleep(1000);
        return true;
}

/* Wait until no thread but the spinners runs (new threads have gone to sleep). */
static void settle_asleep(void)
{
        int64_t deadline = now_ns() + SETTLE_NS;
        for (;;) {
                pid_t *tids = NULL;
                int n = procfs_list_tids(g.pid, &tids), running = 0;
                for (int i = 0; i < n; i++) {
                        int fd = procfs_thread_open(g.pid, tids[i]);
                        running += fd >= 0 && procfs_thread_state(fd) == 'R';
                        if (fd >= 0)
                                close(fd);
                }
                free(tids);
                if (running <= SPINNERS || now_ns() > deadline)
                        return;
                usleep(1000);
        }
}

static int setup(void **state)
{
        (void)state;
        g.sh = mmap(NULL, sizeof(*g.sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (g.sh == MAP_FAILED || pipe2(g.cmd, O_CLOEXEC) < 0 || pipe2(g.sleep, O_CLOEXEC) < 0)
                return -1;
        g.pid = fork();
        if (g.pid < 0)
                return -1;
        if (g.pid == 0)
                child_main();
        int64_t deadline = now_ns() + SETTLE_NS;
        while (!atomic_load(&g.sh->ready) && now_ns() < deadline)
                usleep(1000);
        for (int i = 0; i < SPINNERS; i++)
                while (atomic_load(&g.sh->tids[i]) == 0 && now_ns() < deadline)
                        usleep(1000);
        g.base = tid_count();
        settle_asleep();
        if (!atomic_load(&g.sh->ready) || g.base < 1 + SLEEPERS + SPINNERS) {
                print_message("the child did not start its threads (%d)\n", g.base);
                return -1;
        }
        return 0;
}

static int teardown(void **state)
{
        (void)state;
        stopper_free(&g.stop);
        memset(&g.stop, 0, sizeof(g.stop));
        if (g.pid > 0) {
                kill(g.pid, SIGKILL);
                waitpid(g.pid, NULL, 0);
                g.pid = 0;
        }
        for (int i = 0; i < 2; i++) {
                close(g.cmd[i]);
                close(g.sleep[i]);
                g.cmd[i] = g.sleep[i] = -1;
        }
        if (g.sh && g.sh != MAP_FAILED)
                memset(g.sh, 0, sizeof(*g.sh));
        return 0;
}

/* The stopper has exactly the threads /proc lists, in tid order, and finds each. */
static void check_threads(struct stopper *s)
{
        pid_t *tids = NULL;
        int n = procfs_list_tids(g.pid, &tids);
        assert_true(n > 0);
        assert_int_equal(s->n, (size_t)n);
        for (size_t i = 1; i < s->n; i++)
                assert_true(s->threads[i - 1].tid < s->threads[i].tid);
        for (int i = 0; i < n; i++) {
                const struct stopper_thread *t = stopper_thread(s, tids[i]);
                assert_non_null(t);
                assert_int_equal(t->tid, tids[i]);
                assert_true(stopper_thread_state(s, tids[i]) > 0);
        }
        free(tids);
        assert_null(stopper_thread(s, 0));
        assert_int_equal(stopper_thread_state(s, 0), -1);
}

static bool is_spinner(pid_t tid)
{
        for (int i = 0; i < SPINNERS; i++)
                if (atomic_load(&g.sh->tids[i]) == tid)
                        return true;
        return false;
}

/* Hold, check what is held and that it stays still, let go, check it runs again. */
static void hold_once(struct stopper *s)
{
        char err[256] = "";
        int rc = stopper_stop(s, g.pid, err, sizeof(err));
        if (rc == -EPERM) {
                print_message("ptrace refused here (%s): skipped\n", err);
                skip();
        }
        assert_int_equal(rc, 0);
        assert_true(stopper_holds(s));
        size_t asleep = 0;
        for (size_t i = 0; i < s->n; i++) {
                const struct stopper_thread *t = &s->threads[i];
                if (is_spinner(t->tid)) {
                        assert_int_equal(t->state, 'R');
                        assert_int_equal(t->held, 1);
                        int fd = procfs_thread_open(g.pid, t->tid);
                        assert_true(fd >= 0);
                        assert_int_equal(procfs_thread_state(fd), 't');
                        close(fd);
                } else {
                        /* Asleep: left alone (one just started may still run). */
                        if (t->state == 'S') {
                                assert_int_equal(t->held, 0);
                                asleep++;
                        }
                }
        }
        assert_true(asleep >= s->n - SPINNERS - 5);
        long before[SPINNERS];
        for (int i = 0; i < SPINNERS; i++)
                before[i] = atomic_load(&g.sh->counts[i]);
        usleep(20000);
        for (int i = 0; i < SPINNERS; i++)
                assert_int_equal(atomic_load(&g.sh->counts[i]), before[i]);
        stopper_resume(s);
        assert_false(stopper_holds(s));
        for (int i = 0; i < SPINNERS; i++) {
                int64_t deadline = now_ns() + SETTLE_NS;
                while (atomic_load(&g.sh->counts[i]) == before[i] && now_ns() < deadline)
                        usleep(100);
                assert_true(atomic_load(&g.sh->counts[i]) > before[i]);
        }
}

static void test_hold_and_lookup(void **state)
{
        (void)state;
        struct stopper *s = &g.stop;
        hold_once(s);
        check_threads(s);
        /* stopper_set_on_cpu() reaches the thread it names, and only it. */
        pid_t last = s->threads[s->n - 1].tid;
        stopper_set_on_cpu(s, last, true);
        assert_int_equal(stopper_thread(s, last)->on_cpu, 1);
        assert_int_equal(s->threads[0].on_cpu, -1);

        /* Threads come and go between passes: BATCH new ones, ENDED fewer. */
        assert_int_equal(write(g.cmd[1], "a", 1), 1);
        int64_t deadline = now_ns() + SETTLE_NS;
        while (atomic_load(&g.sh->added) < 1 && now_ns() < deadline)
                usleep(1000);
        char bytes[ENDED];
        memset(bytes, 'x', sizeof(bytes));
        assert_int_equal(write(g.sleep[1], bytes, sizeof(bytes)), (ssize_t)sizeof(bytes));
        assert_true(settle(g.base + BATCH - ENDED));
        settle_asleep(); /* slow to start under a sanitizer */
        hold_once(s);
        check_threads(s);

        /*
         * As many come as go: the count is the same and the threads are not
         * (a pass with the same count reads the known threads' states and
         * lists /proc/PID/task only when one is gone or the count moved).
         */
        assert_int_equal(write(g.cmd[1], "a", 1), 1);
        deadline = now_ns() + SETTLE_NS;
        while (atomic_load(&g.sh->added) < 2 && now_ns() < deadline)
                usleep(1000);
        char more[BATCH];
        memset(more, 'x', sizeof(more));
        assert_int_equal(write(g.sleep[1], more, sizeof(more)), (ssize_t)sizeof(more));
        assert_true(settle(g.base + BATCH - ENDED));
        settle_asleep();
        hold_once(s);
        check_threads(s);
        /* And nothing changed: the same threads, found without a listing. */
        hold_once(s);
        check_threads(s);
        stopper_free(s);
}

static void test_first_drawn(void **state)
{
        (void)state;
        struct stopper *s = &g.stop;
        char err[256] = "";
        static int seen[1024];
        memset(seen, 0, sizeof(seen));
        size_t n = 0;
        struct schedule sch;
        schedule_init(&sch, 0, 1000000, 20261205);
        for (int p = 0; p < PASSES + 3; p++) {
                /* As a pass of the recorder does (record.c's pass()). */
                uint64_t draw = p == PASSES       ? 0
                                : p == PASSES + 1 ? UINT64_MAX
                                                  : schedule_random(&sch, UINT64_MAX);
                int rc = p == PASSES + 2 ? stopper_stop(s, g.pid, err, sizeof(err))
                                         : stopper_prepare(s, g.pid, draw, err, sizeof(err));
                if (rc == -EPERM) {
                        print_message("ptrace refused here (%s): skipped\n", err);
                        skip();
                }
                assert_int_equal(rc, 0);
                if (p < PASSES + 2) {
                        assert_int_equal(stopper_request(s, false, err, sizeof(err)), 0);
                        assert_int_equal(stopper_request(s, true, err, sizeof(err)), 0);
                        stopper_wait(s);
                }
                assert_true(s->n > 0 && s->n < 1024);
                assert_true(s->first < s->n);
                if (p < PASSES) {
                        n = s->n;
                        seen[s->first]++;
                } else {
                        assert_int_equal(s->first, p == PASSES + 1 ? s->n - 1 : 0);
                }
                stopper_resume(s);
        }
        int distinct = 0;
        for (size_t i = 0; i < n; i++)
                distinct += seen[i] > 0;
        /*
         * 300 draws from n = 125 values: 114 distinct expected, fewer than
         * 80 with a chance below 1e-12. A fixed start (the order of the
         * array, as before) fails, and so does one drawn from a few values.
         */
        assert_true(n >= 1 + SLEEPERS + SPINNERS && n < 140);
        assert_true(distinct >= 80);
        int most = 0;
        for (size_t i = 0; i < n; i++)
                most = seen[i] > most ? seen[i] : most;
        assert_true(most <= 12); /* expected about 2.4 per value; 12 has a chance < 1e-6 */
        stopper_free(s);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_hold_and_lookup, setup, teardown),
            cmocka_unit_test_setup_teardown(test_first_drawn, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
