/*
 * bpfwalk.h - pyflame-record --bpf: Python stacks sampled inside the kernel
 * (bpfwalk.bpf.c), with no wake-up of the recorder per sample and no stop
 * of the target: load the program, tell it the recorded processes and their
 * threads, take its samples from a ring buffer.
 *
 * What it samples is on-CPU time: a CPU's timer finds the thread that runs
 * there, and a thread asleep is never found. Needs BPF timers, bpf_loop and
 * BTF (Linux 5.17+; timers pinned to their CPU from 6.7 on) and root or
 * CAP_BPF with CAP_PERFMON; bpfwalk_open() fails with a message otherwise.
 */
#ifndef PYFLAME_BPFWALK_H
#define PYFLAME_BPFWALK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpfwalk_shared.h"

struct bpfwalk;

struct bpfwalk_stats {
        uint64_t fires;      /* timer callbacks, all CPUs */
        uint64_t samples;    /* callbacks that found a thread of a recorded process */
        uint64_t late;       /* slots that passed without a callback */
        uint64_t lost;       /* events the ring buffer had no room for */
        uint64_t not_python; /* ...that found a thread with no Python thread state: not sampled */
        uint64_t wakeups;    /* times the program woke us for code objects new to us */
        uint64_t run_ns;     /* time spent in the callbacks, measured inside them */
        uint64_t sample_ns;  /* ...in those that found a thread: finding, walking, sending */
        unsigned cpus;       /* CPUs whose timer runs */
        unsigned cpus_possible;
        bool pinned; /* the timers are pinned to their CPUs */
};

/*
 * Load the program and start a timer on every CPU we may run on, sampling
 * `rate_hz` times a second per CPU on a schedule whose slots start at
 * CLOCK_MONOTONIC `start_ns`; with `native_bytes` (--native), each sample
 * is preceded by a native capture of its thread (struct bpfw_native: its
 * registers and that many bytes of its stack at most), and threads with no
 * Python are captured too. Returns 0 and sets *out, or a negative errno
 * with a one-line message saying what is missing (-ENOTSUP: built without
 * BPF; -EPERM: privileges).
 */
int bpfwalk_open(double rate_hz, int64_t start_ns, uint32_t native_bytes, struct bpfwalk **out,
                 char *err, size_t errlen);

/* Record process `pid` (our PID namespace) from now on, with layout `p`; or stop. */
int bpfwalk_set_proc(struct bpfwalk *b, pid_t pid, const struct bpfw_proc *p);
void bpfwalk_del_proc(struct bpfwalk *b, pid_t pid);

/* Thread `tid` (our PID namespace) runs the thread state at `tstate`; or no more. */
int bpfwalk_set_thread(struct bpfwalk *b, pid_t tid, uint64_t tstate, uint64_t thread_id);
void bpfwalk_del_thread(struct bpfwalk *b, pid_t tid);

/*
 * The code object at `code` (its f_code word without tag bits) has identity
 * `ident` and is decoded: the program need not wake us when it meets it
 * again; `lasting` (a function's code): it may take the identity from the
 * table without reading the object (we check the object once per batch).
 * ident 0: forget `code` (its object is not the one of the entry any
 * more). Returns 0 or a negative errno.
 */
int bpfwalk_known(struct bpfwalk *b, uint64_t code, uint64_t ident, bool lasting);

/*
 * Called for each event taken by bpfwalk_poll(); `len` bytes of it are
 * there (its header and `depth` frames). Return 0 to go on, a negative
 * errno to stop (bpfwalk_poll() returns it).
 */
typedef int (*bpfwalk_event_fn)(void *ctx, const struct bpfw_event *e, size_t len);

/*
 * Wait up to timeout_ms for the ring buffer to need emptying (a quarter
 * full, or an event with a code object not known to us: the program does
 * not wake us for each event). Returns 1 when it
 * does, 0 at the timeout, -EINTR on a signal.
 */
int bpfwalk_wait(struct bpfwalk *b, int timeout_ms);

/* Called for each native capture (--native), `nv->len` bytes of stack there. */
typedef int (*bpfwalk_native_fn)(void *ctx, const struct bpfw_native *nv);
/* Take every event waiting, without blocking. Returns how many, or fn's error. */
int bpfwalk_poll(struct bpfwalk *b, bpfwalk_event_fn fn, bpfwalk_native_fn native_fn, void *ctx);

void bpfwalk_get_stats(const struct bpfwalk *b, struct bpfwalk_stats *st);

/* Stop the timers and free everything. NULL is fine. */
void bpfwalk_close(struct bpfwalk *b);

#endif
