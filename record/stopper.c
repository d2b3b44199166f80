/*
 * stopper.c - seize, stop and release the running threads of a target for
 * one sample. See stopper.h for the contract. The lessons of the original
 * pyflame apply: a failed read must never leave the target stopped, and a
 * signal sent to the target while we hold it must still reach it.
 *
 * Waiting for a thread to stop is event driven: ptrace stops of our tracees
 * raise SIGCHLD, which is blocked while we wait and taken with sigtimedwait,
 * so no time is lost polling and a thread that cannot stop (it may be in
 * uninterruptible sleep) costs at most STOP_WAIT_NS before it is let go.
 */
#include "stopper.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "procfs.h"
#include "proctree.h"

#define STOP_WAIT_NS 1000000000LL

/*
 * How many stoppers of this thread hold threads of a target stopped now
 * (stopper_holding()): a pass of --blocking holds every process it reads
 * until all are read.
 */
static _Thread_local unsigned holding;

bool stopper_holding(void)
{
        return holding > 0;
}

bool stopper_holds(const struct stopper *s)
{
        return s->holding;
}

static long long mono_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int by_tid(const void *a, const void *b)
{
        pid_t x = ((const struct stopper_thread *)a)->tid;
        pid_t y = ((const struct stopper_thread *)b)->tid;
        return (x > y) - (x < y);
}

/* Thread `tid` among the first `n` of s->threads, sorted by tid, or NULL. */
static struct stopper_thread *find(const struct stopper *s, size_t n, pid_t tid)
{
        struct stopper_thread key = {.tid = tid};
        if (!n)
                return NULL;
        return bsearch(&key, s->threads, n, sizeof(key), by_tid);
}

/*
 * Thread `tid`, added if new. The first `sorted` threads are those of the
 * last pass, sorted by tid; threads new in this pass are appended after
 * them (a listing names each tid once, so they need no search) and sorted
 * in by stopper_prepare(): a pass over n threads costs O(n log n).
 */
static struct stopper_thread *thread_get(struct stopper *s, size_t sorted, pid_t tid)
{
        struct stopper_thread *hit = find(s, sorted, tid);
        if (hit)
                return hit;
        if (s->n == s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 16;
                struct stopper_thread *p = realloc(s->threads, cap * sizeof(*p));
                if (!p)
                        return NULL;
                s->threads = p;
                s->cap = cap;
        }
        struct stopper_thread *t = &s->threads[s->n++];
        *t = (struct stopper_thread){.tid = tid, .stat_fd = -1, .state = -1};
        return t;
}

/*
 * A traced thread that dies stays a zombie until its tracer waits for it,
 * and what waits on it waits with it: its thread group's exit, and the
 * parent of a process whose leader it is (a wait() that never returns, as
 * a test runner's did for its child interpreters under --blocking -s).
 * Waiting for it as its tracer hands it on to them. Not the leader of a
 * process we started ourselves (`own_leader`): then we are its parent too,
 * and its exit status must reach the code that reaps it as such.
 */
static void reap_traced(pid_t tid, bool own_leader)
{
        if (!own_leader)
                waitpid(tid, NULL, __WALL | WNOHANG);
}

/*
 * Wait until `tid` reports its PTRACE_EVENT_STOP, with SIGCHLD blocked by
 * the caller. A signal-delivery-stop on the way is resumed with its signal,
 * so the signal is delivered. Events are peeked first (WNOWAIT), so that the
 * exit of our own child's leader (`own_leader`) is left to us as its parent;
 * any other exit is reaped, as its tracer, for whoever waits on it.
 * Returns 0 when stopped, -ESRCH when the thread exited, -ETIMEDOUT.
 */
static int wait_event_stop(pid_t tid, bool own_leader, long long deadline)
{
        sigset_t chld;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        for (;;) {
                siginfo_t si;
                memset(&si, 0, sizeof(si));
                if (waitid(P_PID, (id_t)tid, &si, WEXITED | WSTOPPED | WNOHANG | WNOWAIT | __WALL) <
                    0) {
                        if (errno == EINTR)
                                continue;
                        return -ESRCH;
                }
                if (si.si_pid == 0) {
                        long long left = deadline - mono_ns();
                        if (left <= 0)
                                return -ETIMEDOUT;
                        struct timespec ts = {left / 1000000000LL, left % 1000000000LL};
                        sigtimedwait(&chld, NULL, &ts);
                        continue;
                }
                bool exited = si.si_code == CLD_EXITED || si.si_code == CLD_KILLED ||
                              si.si_code == CLD_DUMPED;
                if (exited && own_leader)
                        return -ESRCH;
                int status;
                if (waitpid(tid, &status, __WALL | WNOHANG) <= 0 || exited)
                        continue; /* consumed a thread's exit: the loop reports it */
                if (WIFEXITED(status) || WIFSIGNALED(status))
                        return -ESRCH;
                if (!WIFSTOPPED(status))
                        continue;
                if (status >> 16 == PTRACE_EVENT_STOP)
                        return 0; /* our interrupt, or a group-stop: held either way */
                /* A signal-delivery-stop: pass the signal on and keep waiting. */
                if (ptrace(PTRACE_CONT, tid, NULL, (void *)(long)WSTOPSIG(status)) < 0 &&
                    errno == ESRCH)
                        return -ESRCH;
        }
}

/* Detach a seized thread; if it is still running, stop it first (detach needs that). */
static void release(pid_t tid, bool own_leader, bool stopped)
{
        if (ptrace(PTRACE_DETACH, tid, NULL, NULL) == 0 || errno != ESRCH)
                return;
        if (stopped) {
                /*
                 * Held, yet gone: killed while stopped (the program exited,
                 * or a thread exec'd and took the others with it). It may
                 * take a moment to become a zombie we can reap.
                 */
                for (int i = 0; !own_leader && i < 1000; i++) {
                        pid_t r = waitpid(tid, NULL, __WALL | WNOHANG);
                        if (r != 0)
                                break; /* reaped, or not ours to wait for */
                        struct timespec ts = {0, 1000000};
                        nanosleep(&ts, NULL);
                }
                return;
        }
        if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) < 0) {
                reap_traced(tid, own_leader); /* gone: hand it on, if it is ours to */
                return;
        }
        /* Bounded: a thread that never stops is released by the kernel when we exit. */
        if (wait_event_stop(tid, own_leader, mono_ns() + 10 * STOP_WAIT_NS) == 0)
                ptrace(PTRACE_DETACH, tid, NULL, NULL);
}

/* Whether tid is the leader of a process we started (spawn mode): see reap_traced(). */
static bool own_leader(const struct stopper *s, pid_t tid)
{
        return tid == s->pid && s->own_child;
}

static bool is_running(int state)
{
        return state == 'R' || state < 0; /* unknown: hold it, to be safe */
}

/* A thread's marks at the start of a pass, with its state just read. */
static void thread_fresh(struct stopper *s, struct stopper_thread *t, int state)
{
        t->seen = s->generation;
        t->held = 0;
        t->was_held = 0;
        t->in_syscall = -1;
        t->on_cpu = -1;
        t->state = state;
}

/*
 * The states of the threads of the last pass, when they are still all the
 * threads of the process: each read, and each saying that its process has
 * as many threads as the list (stat's field 20 is the thread group's count).
 * A thread that came is in the count, one that went fails its read, so no
 * change can hide from it but one made between two reads of this pass,
 * which a listing of /proc/PID/task could not see either. Listing that
 * directory costs more than the rest of the pass's reads (27-40 us against
 * 10-15 us for a stat on a VM, timed once by a loop of a pass's calls); it is left for when
 * the threads changed. Returns false when they did (or on the first pass).
 */
static bool same_threads(struct stopper *s)
{
        if (s->n == 0)
                return false;
        for (size_t i = 0; i < s->n; i++) {
                struct stopper_thread *t = &s->threads[i];
                int count = -1;
                int state = t->stat_fd >= 0 ? procfs_thread_stat(t->stat_fd, &count) : -1;
                if (state < 0 || count != (int)s->n)
                        return false;
                thread_fresh(s, t, state);
        }
        return true;
}

/* Every thread of the process from /proc/PID/task, with its state. */
static int list_threads(struct stopper *s, pid_t pid, char *err, size_t errlen)
{
        s->generation++; /* same_threads() may have marked some seen before it failed */
        size_t sorted = s->n;
        pid_t *tids = NULL;
        int n = procfs_list_tids(pid, &tids);
        if (n < 0) {
                snprintf(err, errlen, "process %d has exited", (int)pid);
                return n == -ENOENT ? -ESRCH : n;
        }
        /* States first: once a thread is stopped it reads as 't'. */
        for (int i = 0; i < n; i++) {
                struct stopper_thread *t = thread_get(s, sorted, tids[i]);
                if (!t) {
                        free(tids);
                        snprintf(err, errlen, "out of memory");
                        return -ENOMEM;
                }
                if (t->stat_fd < 0)
                        t->stat_fd = procfs_thread_open(pid, t->tid);
                thread_fresh(s, t, t->stat_fd >= 0 ? procfs_thread_state(t->stat_fd) : -1);
        }
        free(tids);
        /* Forget threads that exited. */
        size_t kept = 0;
        for (size_t i = 0; i < s->n; i++) {
                if (s->threads[i].seen != s->generation) {
                        if (s->threads[i].stat_fd >= 0)
                                close(s->threads[i].stat_fd);
                        continue;
                }
                s->threads[kept++] = s->threads[i];
        }
        bool added = s->n > sorted;
        s->n = kept;
        if (added)
                qsort(s->threads, s->n, sizeof(*s->threads), by_tid);
        return 0;
}

int stopper_prepare(struct stopper *s, pid_t pid, uint64_t draw, char *err, size_t errlen)
{
        if (s->holding)
                stopper_resume(s); /* never two holds of one stopper at once */
        if (s->pid != pid) {
                stopper_free(s);
                s->pid = pid;
                s->own_child = proctree_parent(pid) == getpid();
        }
        s->generation++;
        if (!same_threads(s)) {
                int rc = list_threads(s, pid, err, errlen);
                if (rc < 0)
                        return rc;
        }
        /*
         * Where stopper_request() begins, drawn anew each pass: threads are
         * asked one after the other, and none is always asked first (or,
         * a few microseconds later, last). Multiply-shift maps the caller's
         * uniform 64-bit draw onto 0..n-1 (bias below n / 2^64).
         */
        s->first = (size_t)(((unsigned __int128)draw * s->n) >> 64);
        return 0;
}

void stopper_set_on_cpu(struct stopper *s, pid_t tid, bool on_cpu)
{
        struct stopper_thread *t = find(s, s->n, tid);
        if (t)
                t->on_cpu = on_cpu;
}

int stopper_request(struct stopper *s, bool on_cpu, char *err, size_t errlen)
{
        sigset_t chld, old;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sigprocmask(SIG_BLOCK, &chld, &old);
        int rc = 0;
        for (size_t k = 0; k < s->n; k++) {
                struct stopper_thread *t = &s->threads[(s->first + k) % s->n];
                if (!is_running(t->state) || (t->on_cpu != 0) != on_cpu)
                        continue;
                if (ptrace(PTRACE_SEIZE, t->tid, NULL, NULL) < 0) {
                        /* Exited meanwhile, or exiting (EPERM once it has begun). */
                        if (errno == ESRCH || (errno == EPERM && s->stops > 0))
                                continue;
                        rc = -errno;
                        if (errno == EPERM)
                                snprintf(err, errlen,
                                         "cannot ptrace thread %d of process %d: permission "
                                         "denied (--blocking needs root or CAP_SYS_PTRACE; "
                                         "check kernel.yama.ptrace_scope; in Docker use "
                                         "--cap-add SYS_PTRACE; or drop --blocking)",
                                         (int)t->tid, (int)s->pid);
                        else
                                snprintf(err, errlen, "cannot ptrace thread %d: %s", (int)t->tid,
                                         strerror(errno));
                        break;
                }
                t->held = 1;
                if (ptrace(PTRACE_INTERRUPT, t->tid, NULL, NULL) < 0 && errno != ESRCH) {
                        rc = -errno;
                        snprintf(err, errlen, "cannot interrupt thread %d: %s", (int)t->tid,
                                 strerror(errno));
                        break;
                }
        }
        if (rc < 0) {
                for (size_t i = 0; i < s->n; i++)
                        if (s->threads[i].held)
                                release(s->threads[i].tid, own_leader(s, s->threads[i].tid), false);
                for (size_t i = 0; i < s->n; i++)
                        s->threads[i].held = 0;
                sigprocmask(SIG_SETMASK, &old, NULL);
                return rc;
        }
        sigprocmask(SIG_SETMASK, &old, NULL);
        return 0;
}

void stopper_wait(struct stopper *s)
{
        /* Stops reported before SIGCHLD was blocked are seen by waitid() first. */
        sigset_t chld, old;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sigprocmask(SIG_BLOCK, &chld, &old);
        long long deadline = mono_ns() + STOP_WAIT_NS;
        for (size_t i = 0; i < s->n; i++) {
                struct stopper_thread *t = &s->threads[i];
                if (!t->held)
                        continue;
                int w = wait_event_stop(t->tid, own_leader(s, t->tid), deadline);
                if (w == -ETIMEDOUT) {
                        s->timeouts++;
                        release(t->tid, own_leader(s, t->tid), false); /* cannot hold it: let go */
                }
                if (w < 0)
                        t->held = 0;
        }
        sigprocmask(SIG_SETMASK, &old, NULL);
        s->stops++;
        for (size_t i = 0; i < s->n && !s->holding; i++)
                s->holding = s->threads[i].held;
        if (s->holding)
                holding++;
}

int stopper_stop(struct stopper *s, pid_t pid, char *err, size_t errlen)
{
        int rc = stopper_prepare(s, pid, 0, err, errlen);
        if (rc == 0)
                rc = stopper_request(s, false, err, errlen);
        if (rc == 0)
                rc = stopper_request(s, true, err, errlen);
        if (rc == 0)
                stopper_wait(s);
        return rc;
}

const struct stopper_thread *stopper_thread(const struct stopper *s, pid_t tid)
{
        return find(s, s->n, tid);
}

int stopper_thread_state(const struct stopper *s, pid_t tid)
{
        const struct stopper_thread *t = stopper_thread(s, tid);
        return t ? t->state : -1;
}

void stopper_read_syscalls(struct stopper *s)
{
        for (size_t i = 0; i < s->n; i++) {
                struct stopper_thread *t = &s->threads[i];
                if (!t->held)
                        continue;
                int rc = procfs_thread_in_syscall(s->pid, t->tid);
                t->in_syscall = rc < 0 ? -1 : rc;
        }
}

void stopper_resume(struct stopper *s)
{
        for (size_t i = 0; i < s->n; i++) {
                if (s->threads[i].held)
                        release(s->threads[i].tid, own_leader(s, s->threads[i].tid), true);
                s->threads[i].was_held = s->threads[i].held;
                s->threads[i].held = 0;
        }
        if (s->holding)
                holding--;
        s->holding = false;
}

void stopper_free(struct stopper *s)
{
        if (!s)
                return;
        stopper_resume(s);
        for (size_t i = 0; i < s->n; i++)
                if (s->threads[i].stat_fd >= 0)
                        close(s->threads[i].stat_fd);
        free(s->threads);
        s->threads = NULL;
        s->n = s->cap = 0;
}

void stopper_release_stray(pid_t tid, int status)
{
        long sig = WIFSTOPPED(status) && status >> 16 == 0 ? WSTOPSIG(status) : 0;
        ptrace(PTRACE_DETACH, tid, NULL, (void *)sig);
}
