/*
 * stopper.c - seize, stop and release every thread of a target for one
 * sample. See stopper.h for the contract. The lessons of the original
 * pyflame apply: a failed read must never leave the target stopped, and a
 * signal sent to the target while we hold it must still reach it.
 */
#include "stopper.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>

#include "procfs.h"

/* Give up waiting for a thread to stop after this long (it may be in D state). */
#define STOP_WAIT_NS 200000000LL
#define MAX_THREADS  65536

static long long mono_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int push_tid(struct stopper *s, pid_t tid)
{
        if (s->n == s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 16;
                pid_t *p = realloc(s->tids, cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                s->tids = p;
                s->cap = cap;
        }
        s->tids[s->n++] = tid;
        return 0;
}

/*
 * Wait until `tid` reports its PTRACE_EVENT_STOP. A signal-delivery-stop on
 * the way is resumed with its signal, so the signal is delivered. Returns 0
 * when stopped, -ESRCH when the thread exited, -ETIMEDOUT.
 */
static int wait_event_stop(pid_t tid)
{
        long long deadline = mono_ns() + STOP_WAIT_NS;
        for (;;) {
                int status;
                pid_t r = waitpid(tid, &status, __WALL | WNOHANG);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        return -ESRCH;
                }
                if (r == 0) {
                        if (mono_ns() > deadline)
                                return -ETIMEDOUT;
                        struct timespec ts = {0, 20000};
                        nanosleep(&ts, NULL);
                        continue;
                }
                if (WIFEXITED(status) || WIFSIGNALED(status))
                        return -ESRCH;
                if (!WIFSTOPPED(status))
                        continue;
                int event = status >> 16;
                int sig = WSTOPSIG(status);
                if (event == PTRACE_EVENT_STOP)
                        return 0; /* our interrupt, or a group-stop: held either way */
                /* A signal-delivery-stop: pass the signal on and keep waiting. */
                if (ptrace(PTRACE_CONT, tid, NULL, (void *)(long)sig) < 0 && errno == ESRCH)
                        return -ESRCH;
        }
}

/* Detach one seized thread, making sure it is stopped first (detach needs it). */
static void release(pid_t tid, bool stopped)
{
        if (ptrace(PTRACE_DETACH, tid, NULL, NULL) == 0)
                return;
        if (errno != ESRCH || stopped)
                return;
        /* Still running while seized: stop it so it can be detached. */
        if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) < 0)
                return;
        for (int tries = 0; tries < 50; tries++) {
                if (wait_event_stop(tid) != -ETIMEDOUT)
                        break;
        }
        ptrace(PTRACE_DETACH, tid, NULL, NULL);
}

int stopper_stop(struct stopper *s, pid_t pid, char *err, size_t errlen)
{
        s->pid = pid;
        s->n = 0;
        pid_t *tids = NULL;
        int n = procfs_list_tids(pid, &tids);
        if (n < 0) {
                snprintf(err, errlen, "cannot list threads of %d: %s", (int)pid, strerror(-n));
                return n == -ENOENT ? -ESRCH : n;
        }
        int rc = 0;
        for (int i = 0; i < n && i < MAX_THREADS; i++) {
                pid_t tid = tids[i];
                if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) < 0) {
                        if (errno == ESRCH)
                                continue; /* exited meanwhile */
                        rc = -errno;
                        if (errno == EPERM)
                                snprintf(err, errlen,
                                         "cannot ptrace thread %d: permission denied (--blocking "
                                         "needs root or CAP_SYS_PTRACE; check "
                                         "kernel.yama.ptrace_scope; in Docker use --cap-add "
                                         "SYS_PTRACE; or drop --blocking)",
                                         (int)tid);
                        else
                                snprintf(err, errlen, "cannot ptrace thread %d: %s", (int)tid,
                                         strerror(errno));
                        break;
                }
                if (push_tid(s, tid) < 0) {
                        ptrace(PTRACE_DETACH, tid, NULL, NULL);
                        rc = -ENOMEM;
                        snprintf(err, errlen, "out of memory");
                        break;
                }
                if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) < 0 && errno != ESRCH) {
                        rc = -errno;
                        snprintf(err, errlen, "cannot interrupt thread %d: %s", (int)tid,
                                 strerror(errno));
                        break;
                }
        }
        free(tids);
        if (rc < 0) {
                /* Interrupts may be pending: release() copes with running threads. */
                for (size_t i = 0; i < s->n; i++)
                        release(s->tids[i], false);
                s->n = 0;
                return rc;
        }
        size_t kept = 0;
        for (size_t i = 0; i < s->n; i++) {
                int w = wait_event_stop(s->tids[i]);
                if (w == 0)
                        s->tids[kept++] = s->tids[i];
                else if (w == -ETIMEDOUT)
                        release(s->tids[i], false); /* can't hold it: let it go now */
                /* -ESRCH: the thread is gone, nothing to release */
        }
        s->n = kept;
        s->stops++;
        if (kept == 0) {
                snprintf(err, errlen, "process %d has exited", (int)pid);
                return -ESRCH;
        }
        return 0;
}

void stopper_resume(struct stopper *s)
{
        for (size_t i = 0; i < s->n; i++)
                release(s->tids[i], true);
        s->n = 0;
}

void stopper_free(struct stopper *s)
{
        if (!s)
                return;
        stopper_resume(s);
        free(s->tids);
        s->tids = NULL;
        s->cap = 0;
}
