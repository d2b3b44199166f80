/*
 * stopper.h - stop every thread of a process for the length of one sample
 * (--blocking), and always let them go again.
 *
 * Threads are seized with PTRACE_SEIZE and stopped with PTRACE_INTERRUPT
 * only while a sample is taken, then detached, so between samples the target
 * is not traced at all: its signals are delivered as usual, and if the
 * recorder dies the kernel releases whatever it held. A signal that arrives
 * while a thread is held is passed on to it, never swallowed.
 */
#ifndef PYFLAME_STOPPER_H
#define PYFLAME_STOPPER_H

#include <stddef.h>
#include <sys/types.h>

struct stopper {
        pid_t pid;
        pid_t *tids;      /* threads currently seized */
        size_t n, cap;
        unsigned long long stops; /* statistics */
};

/*
 * Seize and stop every thread of `pid`. Returns 0 when all threads that
 * still exist are stopped; -ESRCH when the process is gone; -EPERM (message
 * says how to get permission) or another -errno, in which case nothing is
 * left seized.
 */
int stopper_stop(struct stopper *s, pid_t pid, char *err, size_t errlen);

/* Detach every seized thread (delivering any signal caught meanwhile). */
void stopper_resume(struct stopper *s);

void stopper_free(struct stopper *s);

#endif
