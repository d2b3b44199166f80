/*
 * cpustate.h - whether a target thread is on CPU, read without a system call.
 *
 * The sampler asks, for every thread and every sample, whether the thread is
 * running or runnable. /proc/PID/task/TID/stat answers with one pread (~3 us).
 * Here the kernel itself reports the thread's context switches into a small
 * ring shared with us (a perf_event software event with context_switch set),
 * and the answer is the newest record in that ring: a few memory loads.
 *
 * Where perf events are not allowed (perf_event_paranoid 3, seccomp in
 * containers, an exhausted perf_event_mlock_kb / RLIMIT_MEMLOCK, an old
 * kernel) cpustate_open() fails and the caller keeps using /proc; where the
 * ring says nothing yet (no switch since open, the thread has exited),
 * cpustate_read() returns -1 and the caller asks /proc for that one sample.
 *
 * Unlike the rest of the recorder these functions report errors through
 * errno: cpustate_open() returns a pointer.
 */
#ifndef PYFLAME_CPUSTATE_H
#define PYFLAME_CPUSTATE_H

#include <stdint.h>
#include <sys/types.h>

struct cpustate;

/*
 * Watch the context switches of host thread `tid` (of any process we may
 * ptrace-read). Returns a handle the caller frees with cpustate_close(), or
 * NULL with errno set: ESRCH no such thread; EACCES/EPERM not allowed
 * (perf_event_paranoid, seccomp, LSM, no ptrace access, or the locked-memory
 * limit on the ring); ENOSYS/ENOENT/EOPNOTSUPP the kernel lacks what this
 * relies on (perf events, context-switch records, backward rings, or the
 * preemption flag of Linux 4.17); ENOMEM; EMFILE. In every case the caller
 * keeps using /proc for that thread. Costs one file descriptor and two pages
 * of locked memory per thread.
 */
struct cpustate *cpustate_open(pid_t tid);

/*
 * The thread's state as of its last context switch: 1 when it is on CPU or
 * runnable (what /proc calls 'R': switched in, or switched out by
 * preemption), 0 when it is blocked or sleeping (switched out otherwise).
 * CPUSTATE_NO_SWITCH when no switch was seen since open (the state is what it
 * was then: read /proc once right after opening, and keep that). -1 when the
 * ring has no answer: the thread has exited, or the ring changed under every
 * one of a few attempts to read it; the caller then reads /proc. No system call; safe to call from
 * one thread at a time per handle.
 *
 * A thread woken up but still waiting on a run queue for a CPU reads 0 here
 * until it is switched in (/proc already says 'R'), usually microseconds.
 */
int cpustate_read(const struct cpustate *c);

/*
 * Like cpustate_read(), but 1 only when the thread is on a CPU (switched in
 * last), 0 when it is switched out for any reason, runnable included.
 */
int cpustate_on_cpu(const struct cpustate *c);

/*
 * Where the ring stands: it changes with every record written. A thread
 * whose ring still stands where it stood when it was let go out of a
 * ptrace stop has not run since (sampler.c, --blocking).
 */
uint64_t cpustate_head(const struct cpustate *c);

/* cpustate_read(): the ring is empty, the thread has not switched since open. */
#define CPUSTATE_NO_SWITCH (-2)

/*
 * The perf event's descriptor: reading it makes the kernel interrupt the
 * thread's CPU when the thread is on one (capture.h uses that).
 */
int cpustate_fd(const struct cpustate *c);

/* Stop watching and free the handle. NULL is fine. */
void cpustate_close(struct cpustate *c);

#endif
