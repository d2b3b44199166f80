/*
 * stopper.h - hold the running threads of a process still for the length of
 * one sample (--blocking), and always let them go again.
 *
 * Each sample, the stopper reads every thread's scheduler state, then seizes
 * (PTRACE_SEIZE) and stops (PTRACE_INTERRUPT) the threads that are running or
 * runnable. Threads asleep in the kernel are left alone: their Python stack
 * cannot change until they wake, and interrupting them would wake them (the
 * interrupted system call restarts), which would make idle threads look busy.
 * Threads are detached right after the sample, so between samples the target
 * is not traced at all: its signals are delivered as usual, and if the
 * recorder dies the kernel releases whatever it held. A signal that arrives
 * while a thread is held is passed on to it, never swallowed.
 */
#ifndef PYFLAME_STOPPER_H
#define PYFLAME_STOPPER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A thread of the target as seen at the last stopper_stop(). */
struct stopper_thread {
        pid_t tid;
        int stat_fd;    /* /proc/PID/task/TID/stat, kept open across samples */
        int state;      /* state letter read before stopping, or -1 */
        int held;       /* 1 while seized and stopped */
        int was_held;   /* held by the last stopper_stop(), still after stopper_resume() */
        int in_syscall; /* held and stopped in a system call: 1, 0, -1 not read */
        int on_cpu;     /* on a CPU now (stopper_set_on_cpu): 1, 0, -1 not known */
        unsigned seen;  /* generation, to drop threads that exited */
};

struct stopper {
        pid_t pid;
        struct stopper_thread *threads; /* sorted by tid between passes */
        size_t n, cap;
        size_t first; /* where this pass's requests begin */
        unsigned generation;
        unsigned long long stops;    /* samples taken with threads held */
        unsigned long long timeouts; /* threads that did not stop in time */
        bool own_child;              /* pid is our child (spawn mode): we reap its leader */
        bool holding;                /* stopper_holds() */
};

/*
 * Read every thread's state, then seize and stop those running. Returns 0
 * (possibly with no thread held, when all were asleep); -ESRCH when the
 * process is gone; -EPERM (message says how to get permission) or another
 * -errno, in which case nothing is left seized. Requests begin with the
 * first thread by tid (one hold, as --dump's, has no order to vary).
 */
int stopper_stop(struct stopper *s, pid_t pid, char *err, size_t errlen);
/*
 * stopper_stop() in steps, to stop several processes at once, all at one
 * instant: list the threads and read their states (stopper_prepare: nothing
 * is done to the target yet), then ask the running ones to stop
 * (stopper_request), those not on a CPU first (on_cpu false) and those on
 * one after (true; so are those not known either way), each group from a
 * thread chosen by `draw` (uniform over 64 bits, drawn anew each pass by
 * the caller from the recording's generator: none is always asked first), then
 * wait until they have (stopper_wait: a thread that does not stop within a
 * second is let go). Every process of the pass is prepared before any is
 * asked, and asked before any is waited for: a thread stopped frees its CPU,
 * and a runnable thread that gets it runs its own code until its own request
 * arrives, unless that request is already there (a thread asked to stop
 * while it waits for a CPU stops before it runs any). Asked process after
 * process, a program just let go out of the last hold ran tens of
 * microseconds after the other one stopped and the pass's instant: it left
 * the function whose deadline had passed during the hold, and with two
 * processes 70/30 at 1 kHz each came out 2-4 points low (run_e2e's
 * hold-over test, recorder built with ThreadSanitizer).
 * Same returns as stopper_stop(), with nothing left seized on failure
 * (threads the stopper asked before included). Each stopper_prepare() must
 * be followed by its stopper_request()s and stopper_wait() before anything
 * else is done with the stopper.
 */
int stopper_prepare(struct stopper *s, pid_t pid, uint64_t draw, char *err, size_t errlen);
/* Whether host thread `tid` is on a CPU now, for the order of stopper_request()s. */
void stopper_set_on_cpu(struct stopper *s, pid_t tid, bool on_cpu);
int stopper_request(struct stopper *s, bool on_cpu, char *err, size_t errlen);
void stopper_wait(struct stopper *s);

/* Host thread `tid` as the last stopper_stop() left it, or NULL if it has none. */
const struct stopper_thread *stopper_thread(const struct stopper *s, pid_t tid);

/* While holding: read whether each held thread stopped in a system call (in_syscall). */
void stopper_read_syscalls(struct stopper *s);

/* State letter of host thread `tid` read by the last stopper_stop(), or -1. */
int stopper_thread_state(const struct stopper *s, pid_t tid);

/* Detach every held thread (delivering any signal caught meanwhile). */
void stopper_resume(struct stopper *s);

/*
 * Whether the calling thread holds stopped threads of a target now (between
 * a stopper_stop() that stopped some and stopper_resume()). While it does it
 * must not wait for anything of ours that may be slow: the target waits with
 * it (tsink_lock() asserts this).
 */
bool stopper_holding(void);

/* Whether this stopper holds stopped threads now (from stopper_stop() to stopper_resume()). */
bool stopper_holds(const struct stopper *s);

/* Resume, close cached files, free. The struct may be reused after. */
void stopper_free(struct stopper *s);

/*
 * wait() reported a stop of `tid` (with `status`) that no hold waits for: a
 * held thread that exec'd took its process's pid and stopped under it after
 * its hold ended. Let it go, passing on the signal it was stopped for if any.
 */
void stopper_release_stray(pid_t tid, int status);

#endif
