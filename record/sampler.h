/*
 * sampler.h - one sampled process: from the walker's view of its threads to
 * samples in the trace.
 *
 * A sampler owns what is needed to sample one CPython process: its memory
 * source, the walker, the per-thread bookkeeping (trace thread refs, OS
 * thread ids, the /proc file that tells whether a thread is on CPU) and the
 * caches that turn a walked stack into a trace stack id without touching the
 * trace's own tables on the hot path. pyflame-record drives one sampler per
 * recorded process and takes its samples on its schedule, in the steps of
 * sampler_tick_prepare().
 */
#ifndef PYFLAME_SAMPLER_H
#define PYFLAME_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "trace.h"

struct sampler;

struct sampler_stats {
        uint64_t ticks;            /* sampling passes over this process */
        uint64_t samples;          /* thread samples written */
        uint64_t torn;             /* thread samples dropped as inconsistent */
        uint64_t retries;          /* fresh reads of torn thread samples */
        uint64_t recovered;        /* thread samples read consistently after a torn read */
        uint64_t captured;         /* thread samples read whole in the GIL holder's context */
        uint64_t captures;         /* batches read in a thread's context (capture.h) */
        uint64_t capture_idle;     /* ... not, as the thread was not on a CPU */
        uint64_t capture_failed;   /* ... not, for another reason (too large, not resident) */
        uint64_t read_errors;      /* thread samples dropped for a failed read */
        uint64_t reads;            /* memory reads issued by the walker */
        uint64_t proc_state_reads; /* on-CPU states read from /proc, not from switches */
        uint64_t cache_resets;     /* frame and stack caches started afresh (bounded) */
        uint64_t held_over;        /* thread samples of instants during a hold (sampler_held) */
        uint64_t task_samples;     /* asyncio task samples written (--async) */
        uint64_t native_samples;   /* thread samples with a native stack merged in */
        uint64_t unmatched;        /* thread samples dropped: native and Python did not match */
        /* --native: native.h's counters (struct native_stats) */
        uint64_t native_captures, native_capture_ns, native_unwinds, native_unwind_ns;
        uint64_t native_warm_unwinds, native_warm_unwind_ns, native_frames, native_symbols;
        uint64_t native_cfi_rules, native_cfi_fallbacks, native_capture_bytes;
        uint64_t native_sym_resets;
};

/*
 * Find and validate the interpreter of `pid`. Returns 0 and sets *out; on
 * failure returns a negative enum pyfind_status and writes a one-line
 * message into err. `blocking` stops the threads for each sample. Nothing
 * is written anywhere until sampler_set_writer().
 */
int sampler_open(pid_t pid, bool blocking, struct sampler **out, char *err, size_t errlen);

/*
 * Read every thread's on-CPU state from /proc for each sample, instead of
 * from the kernel's context-switch records (cpustate.h). Before the first
 * sample.
 */
void sampler_no_switch_events(struct sampler *s);

/*
 * --async: sample the asyncio tasks of every sampled thread's running loop
 * beside the thread (pywalk_set_tasks()). Before the first sample. Returns
 * 0, or PYFIND_UNSUPPORTED with a message saying why (this version's task
 * layout is unknown): the sampler then samples threads only.
 */
int sampler_set_async(struct sampler *s, char *err, size_t errlen);

struct tsink;

/*
 * Register the process with the writer behind sink `k` (tsink.h) and queue
 * its samples there from now on. Returns 0, or -EIO or -ENOMEM
 * (message in err).
 */
int sampler_set_sink(struct sampler *s, struct tsink *k, char *err, size_t errlen);

struct capture;

/*
 * Read each sample's batch in the context of the thread holding the GIL
 * when it is running (capture.h), so that its stack cannot change under the
 * read. NULL stops it; ignored in blocking mode. `c` must outlive s.
 */
void sampler_set_capture(struct sampler *s, struct capture *c);

/*
 * Record native stacks merged with the Python ones (native.h): a blocking
 * sampler, or one whose samples come from --bpf (its native captures, in
 * the interrupt: sampler_bpf_native). `flags` are NATIVE_MERGE_* (native.h). Returns 0, or a
 * negative errno with the message in err (-ENOTSUP: built without libdw).
 */
int sampler_set_native(struct sampler *s, unsigned flags, char *err, size_t errlen);

struct sources;

/*
 * Note the file of every newly seen frame in `src` (sources.h; handle from
 * sources_watch() for this process), so that its text can be stored. NULL
 * stops it. Notes are made under the sink's lock.
 */
void sampler_set_sources(struct sampler *s, struct sources *src, int handle);

/*
 * One sample of every thread, in steps, so that a pass over several
 * processes holds them all together with --blocking: list the threads and
 * read their states (sampler_tick_prepare; `draw`, uniform over 64 bits and
 * drawn anew each pass, chooses where the stopper begins asking); ask the running threads to
 * stop, at monotonic time `t_ns`, those not on a CPU first (on_cpu false)
 * and the others after (true) (sampler_tick_stop; see stopper_prepare() for
 * why every process of the pass is prepared before any is asked, and in
 * this order); once every process of the pass was asked, wait for the
 * stops and read (sampler_tick_read); once all are read, let them go
 * (sampler_release); then write what was read (sampler_tick_finish). Asked,
 * held or let go one process after the other, the instants after one's
 * release were sampled only after the pass, each program right where it
 * resumed (the deadline of the function it was held in had passed, and it
 * had just moved on), and a third to a half of the slots were missed: two
 * processes busy 70/30 at 1 kHz came out 2.8-3.6 points low on a loaded
 * 2-CPU machine (bench/accuracy.py --cases twoproc --modes blocking --rates
 * 1000). Without --blocking only the instant, the read and the finish do
 * anything.
 *
 * sampler_tick_prepare() and sampler_tick_stop() return 0, or -ESRCH (the
 * process has gone), -EPERM (--blocking without ptrace permission) or
 * another -errno, with nothing held and the message in err; the other steps
 * follow only a 0.
 * sampler_tick_finish() returns 0, or -ESRCH when the process has gone (the
 * caller finishes it), -EIO when the trace could not be written, -ENOMEM;
 * message in err. A thread that cannot be read is counted in the trace,
 * not returned.
 */
int sampler_tick_prepare(struct sampler *s, uint64_t draw, char *err, size_t errlen);
int sampler_tick_stop(struct sampler *s, int64_t t_ns, bool on_cpu, char *err, size_t errlen);
void sampler_tick_read(struct sampler *s);
void sampler_release(struct sampler *s);
int sampler_tick_finish(struct sampler *s, char *err, size_t errlen);

/*
 * --blocking: whether the last sampler_tick_read() held threads of the process
 * until monotonic time `t_ns` or later, `t_ns` being no earlier than
 * `since_ns`, the start of the pass that tick was part of. A sample due
 * then is the one that tick took: sampler_hold_over() writes its thread
 * samples again at `t_ns`. A held thread runs no code of its own from its
 * stop to its release, so its stack at any instant in between is the one
 * read (and it was on its way there from the tick's start until the stop
 * reached it, tens of microseconds); the threads asleep then were read in
 * the same hold. Every process of a pass is asked to stop at its start
 * (sampler_tick_stop), so an instant from then on finds each one on its
 * way to the stop or stopped. Taken after the release instead, it would
 * find the program where it resumed, always at the same point of its code
 * (a deadline that passed during the hold ends the function held).
 */
bool sampler_held(const struct sampler *s, int64_t since_ns, int64_t t_ns);
/*
 * No later sample is due before monotonic time `t_ns` (the next slot's
 * start): a hold that ends before it stands for no other sample, and what
 * only such samples need is not read.
 */
void sampler_set_horizon(struct sampler *s, int64_t t_ns);
void sampler_hold_over(struct sampler *s, int64_t t_ns);
/* Whether sampler_hold_over() already wrote the sample due at `t_ns`. */
bool sampler_took(const struct sampler *s, int64_t t_ns);

/* Print every thread's current stack once, py-spy dump style. */
int sampler_dump(struct sampler *s, FILE *out, char *err, size_t errlen);

pid_t sampler_pid(const struct sampler *s);
const char *sampler_version(const struct sampler *s); /* e.g. "3.12.1" */
const char *sampler_build(const struct sampler *s);   /* e.g. "shared", "static,free-threaded" */
void sampler_get_stats(const struct sampler *s, struct sampler_stats *st);

/* Release everything; never leaves the target stopped or traced. NULL is fine. */
/*
 * The process is gone: tell the trace (through the sink's queue, after its
 * samples) that every stream of it ended, so that the writer forgets them.
 * Not under the sink's lock.
 */
void sampler_end_streams(struct sampler *s);
void sampler_close(struct sampler *s);

struct bpfwalk;
struct bpfw_event;
struct bpfw_native;

/*
 * --bpf: the in-kernel sampler `b` (bpfwalk.h) takes this process's samples;
 * the sampler tells it the process and its threads (sampler_bpf_refresh)
 * and turns its events into samples (sampler_bpf_event, between
 * sampler_bpf_begin and sampler_bpf_end). Before the first refresh.
 */
int sampler_set_bpf(struct sampler *s, struct bpfwalk *b);
/*
 * Walk the thread list at monotonic time `now_ns`: tell the BPF program
 * each thread's state and the process's layout, read thread names. About
 * ten times a second, and soon after sampler_bpf_wants_refresh() says an
 * event named a thread it did not know. Returns 0, -ESRCH when the process
 * has gone, PYFIND_UNSUPPORTED when the program cannot walk its layout,
 * -EIO/-ENOMEM; message in err.
 */
int sampler_bpf_refresh(struct sampler *s, int64_t now_ns, char *err, size_t errlen);
bool sampler_bpf_wants_refresh(const struct sampler *s);
void sampler_bpf_begin(struct sampler *s);
/* One event of this process: a sample, or an error counted. Returns 0 or -errno. */
int sampler_bpf_event(struct sampler *s, const struct bpfw_event *e);
/*
 * --bpf --native: a thread's native capture, kept for its sample (the next
 * event of that thread), or sampled at once for a thread with no Python.
 * Returns 0 or -errno.
 */
int sampler_bpf_native(struct sampler *s, const struct bpfw_native *nv);
int sampler_bpf_end(struct sampler *s, char *err, size_t errlen);

#endif
