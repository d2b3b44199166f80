/*
 * test_cpustate.c - record/cpustate.c against /proc, on real threads.
 *
 * A target (a thread of this process, or the main thread of a forked child)
 * blocks reading a pipe, spins when told to, and blocks again when told to
 * stop. Each state is checked through cpustate_read() and through the
 * thread's /proc stat file in the same test:
 *   - opened on a thread that is off CPU and blocked, nothing can be in the
 *     ring yet: -1;
 *   - spinning: 1, both with the target alone on its CPU (the newest record
 *     is its switch in) and sharing this thread's CPU (whenever we run, the
 *     target's newest record is a switch out by preemption); and
 *     cpustate_on_cpu() tells the two apart: 1 seen alone, always 0 shared;
 *   - blocked again: 0 (both), as soon as /proc shows it off CPU;
 *   - exited: -1 (the ring must not keep saying "running" after the end).
 * When perf events are not allowed here (EACCES, EPERM, ENOSYS, ENOENT,
 * EOPNOTSUPP) the tests are skipped with a message.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
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

#include "cpustate.h"
#include "procfs.h"

/* How long a state change may take to show on a loaded machine; never reached when all is well. */
#define SETTLE_NS (5 * 1000000000LL)
/* How long a steady state is sampled for. */
#define STEADY_NS (50 * 1000000LL)
#define CYCLES    3

/* What the target shares with the test; in a MAP_SHARED page for the child process. */
struct shared {
        atomic_int stop_spinning;
        atomic_int spinning;
        atomic_int tid;
};

struct target {
        struct shared *sh;
        int cmd[2]; /* test -> target: 's' spin, 'q' quit */
        pid_t pid;  /* the process of the target (ours, or the child) */
        pid_t tid;
        pthread_t thread; /* when a thread of ours */
        int proc_fd;      /* its /proc stat file */
        bool is_child;
        bool running; /* started and not yet reaped */
};

/* The target of the current test, and its watcher, for the teardown after a failure. */
static struct target g_target;
static struct cpustate *g_watch;
static cpu_set_t g_affinity;

static int64_t now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void target_loop(struct shared *sh, int cmd_fd)
{
        atomic_store(&sh->tid, (int)gettid());
        for (;;) {
                char c;
                ssize_t r = read(cmd_fd, &c, 1);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r != 1 || c == 'q')
                        return;
                atomic_store(&sh->spinning, 1);
                while (!atomic_load_explicit(&sh->stop_spinning, memory_order_relaxed))
                        ;
                atomic_store(&sh->spinning, 0);
        }
}

static void *target_thread(void *arg)
{
        struct target *t = arg;
        target_loop(t->sh, t->cmd[0]);
        return NULL;
}

static int target_start(struct target *t, bool is_child)
{
        memset(t, 0, sizeof(*t));
        t->cmd[0] = t->cmd[1] = t->proc_fd = -1;
        t->is_child = is_child;
        t->sh =
            mmap(NULL, sizeof(*t->sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (t->sh == MAP_FAILED || pipe2(t->cmd, O_CLOEXEC) < 0)
                return -1;
        if (is_child) {
                t->pid = fork();
                if (t->pid < 0)
                        return -1;
                if (t->pid == 0) {
                        /* Never outlive a test that failed while we spin. */
                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                        if (getppid() == 1)
                                _exit(1);
                        close(t->cmd[1]);
                        target_loop(t->sh, t->cmd[0]);
                        _exit(0);
                }
                close(t->cmd[0]);
                t->cmd[0] = -1;
        } else {
                t->pid = getpid();
                if (pthread_create(&t->thread, NULL, target_thread, t) != 0)
                        return -1;
        }
        t->running = true;
        int64_t deadline = now_ns() + SETTLE_NS;
        while ((t->tid = atomic_load(&t->sh->tid)) == 0 && now_ns() < deadline)
                usleep(100);
        if (t->tid == 0)
                return -1;
        t->proc_fd = procfs_thread_open(t->pid, t->tid);
        return t->proc_fd < 0 ? -1 : 0;
}

static void target_command(const struct target *t, char c)
{
        if (c == 's') {
                atomic_store(&t->sh->stop_spinning, 0);
                atomic_store(&t->sh->spinning, 0);
        }
        assert_int_equal(write(t->cmd[1], &c, 1), 1);
}

/* Stop the target and wait for it to exit; returns the child's wait status, 0 for a thread. */
static int target_quit(struct target *t)
{
        int status = 0;
        if (!t->running)
                return 0;
        atomic_store(&t->sh->stop_spinning, 1);
        if (write(t->cmd[1], "q", 1) != 1 && t->is_child)
                kill(t->pid, SIGKILL);
        if (t->is_child)
                waitpid(t->pid, &status, 0);
        else
                pthread_join(t->thread, NULL);
        t->running = false;
        return status;
}

static void target_free(struct target *t)
{
        if (t->proc_fd >= 0)
                close(t->proc_fd);
        if (t->cmd[0] >= 0)
                close(t->cmd[0]);
        if (t->cmd[1] >= 0)
                close(t->cmd[1]);
        if (t->sh && t->sh != MAP_FAILED)
                munmap(t->sh, sizeof(*t->sh));
        memset(t, 0, sizeof(*t));
        t->cmd[0] = t->cmd[1] = t->proc_fd = -1;
}

/*
 * Whether the target is off CPU, asleep, for sure: /proc/PID/task/TID/syscall
 * waits for the thread to be switched out (wait_task_inactive) and prints
 * "running" unless it stayed off CPU, in the same state, meanwhile.
 */
static bool target_off_cpu(const struct target *t)
{
        char path[80], buf[64];
        snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", (int)t->pid, (int)t->tid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return false;
        buf[n] = 0;
        return strncmp(buf, "running", 7) != 0 && procfs_thread_state(t->proc_fd) == 'S';
}

static void wait_off_cpu(const struct target *t)
{
        int64_t deadline = now_ns() + SETTLE_NS;
        while (!target_off_cpu(t)) {
                assert_true(now_ns() < deadline);
                usleep(200);
        }
}

/* Poll cpustate_read() until it says `want`; fails after SETTLE_NS. */
static void wait_cpustate(const struct cpustate *c, int want)
{
        int64_t deadline = now_ns() + SETTLE_NS;
        int got;
        while ((got = cpustate_read(c)) != want) {
                if (now_ns() >= deadline)
                        fail_msg("cpustate_read() still says %d, expected %d", got, want);
                usleep(100);
        }
}

/* The errors that mean "perf events are not for us here": the recorder falls back to /proc. */
static bool unavailable(int e)
{
        return e == EACCES || e == EPERM || e == ENOSYS || e == ENOENT || e == EOPNOTSUPP;
}

static void skip_unavailable(int e)
{
        print_message("    perf events unavailable here (%s), skipped\n", strerror(e));
        skip();
}

static void pin(pid_t tid, int cpu)
{
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        assert_int_equal(sched_setaffinity(tid, sizeof(set), &set), 0);
}

/*
 * Spin for STEADY_NS while checking both sources agree that the target runs.
 * my_cpu >= 0: it shares our CPU, so it is never on one while we look.
 */
static void check_spinning(const struct target *t, const struct cpustate *c, int my_cpu)
{
        int64_t end = now_ns() + STEADY_NS;
        long reads = 0;
        while (now_ns() < end) {
                if (my_cpu >= 0)
                        assert_int_equal(sched_getcpu(), my_cpu);
                assert_int_equal(cpustate_read(c), 1);
                if (my_cpu >= 0)
                        assert_int_equal(cpustate_on_cpu(c), 0);
                assert_int_equal(procfs_thread_state(t->proc_fd), 'R');
                reads++;
        }
        assert_true(reads > 0);
}

/* Alone on a CPU, the target is seen on it (it may be preempted now and then). */
static void wait_on_cpu(const struct cpustate *c)
{
        int64_t deadline = now_ns() + SETTLE_NS;
        int got;
        while ((got = cpustate_on_cpu(c)) != 1) {
                if (now_ns() >= deadline)
                        fail_msg("cpustate_on_cpu() still says %d, expected 1", got);
                usleep(100);
        }
}

/* Check both sources agree that the target is blocked, for STEADY_NS. */
static void check_blocked(const struct target *t, const struct cpustate *c)
{
        /* Off CPU for sure: its switch out has been written, and nothing can follow it. */
        wait_off_cpu(t);
        int64_t end = now_ns() + STEADY_NS;
        while (now_ns() < end) {
                assert_int_equal(cpustate_read(c), 0);
                assert_int_equal(cpustate_on_cpu(c), 0);
                assert_int_equal(procfs_thread_state(t->proc_fd), 'S');
                usleep(1000);
        }
}

static void run_target(void)
{
        struct target *t = &g_target;
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

        /* Blocked since before the open: the ring is empty. */
        wait_off_cpu(t);
        g_watch = cpustate_open(t->tid);
        if (!g_watch && unavailable(errno))
                skip_unavailable(errno);
        if (!g_watch)
                fail_msg("cpustate_open(%d): %s", (int)t->tid, strerror(errno));
        const struct cpustate *c = g_watch;
        assert_int_equal(cpustate_read(c), CPUSTATE_NO_SWITCH);

        for (int cycle = 0; cycle < CYCLES; cycle++) {
                /* Alone on a CPU of its own (when there are two): its last switch is in. */
                if (ncpu >= 2) {
                        pin(0, 0);
                        pin(t->tid, 1);
                        target_command(t, 's');
                        wait_cpustate(c, 1);
                        wait_on_cpu(c);
                        check_spinning(t, c, -1);
                        atomic_store(&t->sh->stop_spinning, 1);
                        wait_cpustate(c, 0);
                        check_blocked(t, c);
                }
                /* Sharing our CPU: whenever we run, it was switched out by preemption. */
                pin(0, 0);
                pin(t->tid, 0);
                target_command(t, 's');
                while (!atomic_load(&t->sh->spinning))
                        sched_yield();
                wait_cpustate(c, 1);
                check_spinning(t, c, 0);
                atomic_store(&t->sh->stop_spinning, 1);
                wait_cpustate(c, 0);
                check_blocked(t, c);
                assert_int_equal(sched_setaffinity(t->tid, sizeof(g_affinity), &g_affinity), 0);
                assert_int_equal(sched_setaffinity(0, sizeof(g_affinity), &g_affinity), 0);
        }

        /* Once it has exited the ring must stop answering, not say "running" forever. */
        assert_int_equal(target_quit(t), 0);
        wait_cpustate(c, -1);
}

static int setup_target(bool is_child)
{
        if (sched_getaffinity(0, sizeof(g_affinity), &g_affinity) < 0)
                return -1;
        if (target_start(&g_target, is_child) < 0) {
                target_quit(&g_target);
                target_free(&g_target);
                return -1;
        }
        return 0;
}

static int setup_thread(void **state)
{
        (void)state;
        return setup_target(false);
}

static int setup_child(void **state)
{
        (void)state;
        return setup_target(true);
}

/* Also after a failure: the target may be spinning on our CPU. */
static int teardown_target(void **state)
{
        (void)state;
        sched_setaffinity(0, sizeof(g_affinity), &g_affinity);
        target_quit(&g_target);
        target_free(&g_target);
        cpustate_close(g_watch);
        g_watch = NULL;
        return 0;
}

static void test_thread(void **state)
{
        (void)state;
        run_target();
}

static void test_child_process(void **state)
{
        (void)state;
        run_target();
}

static void test_open_errors(void **state)
{
        (void)state;
        cpustate_close(NULL);
        errno = 0;
        assert_null(cpustate_open(0));
        assert_int_equal(errno, EINVAL);

        /* A pid that was just reaped is (almost surely) no thread now. */
        pid_t gone = fork();
        assert_true(gone >= 0);
        if (gone == 0)
                _exit(0);
        assert_int_equal(waitpid(gone, NULL, 0), gone);
        struct cpustate *probe = cpustate_open(gettid());
        if (!probe && unavailable(errno))
                skip_unavailable(errno);
        assert_non_null(probe);
        cpustate_close(probe);
        errno = 0;
        assert_null(cpustate_open(gone));
        assert_int_equal(errno, ESRCH);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_open_errors),
            cmocka_unit_test_setup_teardown(test_thread, setup_thread, teardown_target),
            cmocka_unit_test_setup_teardown(test_child_process, setup_child, teardown_target),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
