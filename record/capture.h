/*
 * capture.h - read ranges of a running thread's memory at one instant, in
 * that thread's own context.
 *
 * A thread that is running on another CPU changes its stack while we read
 * it: process_vm_readv takes one to two microseconds, a Python call and
 * return take a few tens of nanoseconds. The walker's validity checks catch
 * some of what that tears, but not all of it, and what they catch is exactly
 * the code whose stack changes fast, so samples of it would be lost or
 * misplaced. Here the ranges are copied by a small BPF program
 * (capture.bpf.c) while the thread itself is interrupted by an IPI that the
 * recorder makes the kernel send to its CPU: nothing of its own changes
 * meanwhile. The thread is not stopped, traced or signalled; the IPI and the
 * copy cost it a few microseconds, like a perf sampling interrupt.
 *
 * Needs BPF tracing programs (root, or CAP_BPF with CAP_PERFMON; Linux 5.7+)
 * and a perf event of the thread (cpustate.h opens one); where either is
 * missing, capture_open() fails with a message and the recorder reads as
 * before.
 */
#ifndef PYFLAME_CAPTURE_H
#define PYFLAME_CAPTURE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "memsrc.h"

struct capture;

/*
 * Load and attach the BPF program. Returns 0 and sets *out, or a negative
 * errno with a one-line message in err (not built with BPF support, not
 * permitted, kernel too old).
 */
int capture_open(struct capture **out, char *err, size_t errlen);

/*
 * Read the n ranges of iov (at most 256 ranges of at most 64 KiB, 1 MiB in
 * all) in the context of thread `tid` (as seen in our PID namespace), which
 * `trigger_fd` (a perf event of that thread: cpustate_fd(), or
 * capture_trigger_open()) makes the kernel interrupt. Returns 0 when every
 * range was copied at one instant, its CLOCK_MONOTONIC time in *time_ns
 * (may be NULL). A range that could not be read there (unmapped, or not
 * resident: a page the thread has not touched, or swapped out) is marked in
 * the bitmap `failed` (n bits) for the caller to read itself, since nothing
 * is using it; with `failed` NULL such a range makes the call return
 * -EFAULT. -EAGAIN: the thread was not on a CPU (nothing changes its memory
 * then: read it as usual). -E2BIG: more than a capture holds. On failure
 * the buffers hold nothing to rely on.
 */
int capture_readv(struct capture *c, pid_t tid, int trigger_fd, const struct memsrc_iov *iov,
                  size_t n, int64_t *time_ns, uint64_t *failed);

#define CAPTURE_FAILED_WORDS 4 /* uint64_t words of a `failed` bitmap that holds any n */

/*
 * A perf event of thread `tid` to trigger captures with, for a thread that
 * has no other (cpustate.h's serves otherwise): a dummy software event that
 * records nothing. Returns the descriptor, or a negative errno.
 */
int capture_trigger_open(pid_t tid);

/* Detach and free. NULL is fine. */
void capture_close(struct capture *c);

#endif
