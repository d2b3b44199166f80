/*
 * tsink.h - the trace writer behind a queue, so that sampling never waits
 * for SQLite.
 *
 * The sampling thread must take a sample on every tick of its schedule,
 * and a commit (a second of samples, new frames, the source files read at
 * that moment) takes milliseconds: at 10 kHz and more, every commit made
 * on the sampling thread was a burst of missed deadlines. A sink owns the
 * writer and, once started, a thread that commits it. The sampling thread
 * hands over samples and error counts through a single-producer ring
 * without taking any lock; everything rarer (a stack, frame or thread
 * never seen, a thread's name, a process that starts or ends, the source
 * files to store) is done under the sink's lock, which first applies
 * whatever the ring holds so that the trace sees events in order.
 *
 * The producer side (tsink_sample, tsink_error) is for one thread only;
 * tsink_lock/unlock may be taken from any. A sink that was never started
 * works the same way, with the caller flushing.
 */
#ifndef PYFLAME_TSINK_H
#define PYFLAME_TSINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trace.h"

struct tsink;
struct sources;

/* A sink in front of `w` (which it does not own). NULL when out of memory. */
struct tsink *tsink_new(struct trace_writer *w);

/*
 * Start the committing thread: it applies queued samples every 50
 * milliseconds, reads queued source files of `src` (may be NULL) and
 * commits every `flush_ns`. Returns 0 or a negative errno.
 */
int tsink_start(struct tsink *k, struct sources *src, int64_t flush_ns);

/*
 * How often the thread applies the queue (default 50 ms; a full queue is
 * applied by the producer at once). Set before tsink_start. A producer that
 * wakes seldom itself (pyflame-record --bpf) saves the thread's wake-ups.
 */
void tsink_set_apply_period(struct tsink *k, int64_t ns);

/*
 * Stop the thread (if started) and apply what is queued. Afterwards the
 * writer is the caller's again. Returns 0, or the first trace status a
 * queued event or a commit failed with (message: tsink_errmsg).
 */
int tsink_stop(struct tsink *k);

void tsink_free(struct tsink *k); /* stops first; NULL is fine */

/*
 * Take the lock (applying the queue) before any direct use of the writer or
 * of the sources while the thread runs. Not recursive.
 */
void tsink_lock(struct tsink *k);
void tsink_unlock(struct tsink *k);

/* Does the calling thread hold the lock? For assertions of the contracts. */
bool tsink_held(const struct tsink *k);

struct trace_writer *tsink_writer(const struct tsink *k);

/*
 * Periodic work for the committing thread: `fn(ctx, now_ns)` is called under
 * the lock on each of its passes (every few milliseconds), e.g. reading the
 * target's thread names off the sampling thread. Both calls need the lock
 * held. add returns 0 or -ENOMEM.
 */
typedef void (*tsink_job_fn)(void *ctx, int64_t now_ns);
int tsink_add_job_locked(struct tsink *k, tsink_job_fn fn, void *ctx);
void tsink_remove_job_locked(struct tsink *k, void *ctx);

/* tsink_lock() unless the lock is busy (a commit): then false, and no lock. */
bool tsink_trylock(struct tsink *k);

/* Queue a sample (trace_writer_add_sample) / an error count (trace_writer_count_error). */
void tsink_sample(struct tsink *k, uint32_t thread_ref, int64_t t_ns, uint32_t stack_id,
                  unsigned state);
void tsink_error(struct tsink *k, int32_t pid, int kind, uint64_t n);
/*
 * Queue trace_writer_end_thread(): after every sample queued before it, so
 * the writer has them all when it forgets the stream. Not under the lock.
 */
void tsink_end_thread(struct tsink *k, uint32_t thread_ref);

/*
 * Rotation. `fn(ctx, cut_ns, tag, arg1, arg2)` is called under the lock, on the
 * committing thread once started, when the queue reaches a rotation
 * queued by tsink_rotate(): every sample queued before it has been
 * applied, none queued after. It is meant to call trace_writer_rotate().
 * Set before tsink_start.
 */
typedef void (*tsink_rotate_fn)(void *ctx, int64_t cut_ns, uint32_t tag, uint32_t arg1,
                                uint32_t arg2);
void tsink_set_rotate(struct tsink *k, tsink_rotate_fn fn, void *ctx);
/*
 * Queue a rotation at `cut_ns` after the samples queued so far (the
 * producer's call); tag and args are passed on to the function.
 */
void tsink_rotate(struct tsink *k, int64_t cut_ns, uint32_t tag, uint32_t arg1, uint32_t arg2);

/*
 * Nonzero (a negative trace status) once writing the trace failed; the
 * recording should end. Cheap: one atomic load.
 */
int tsink_failed(const struct tsink *k);
/* The message of the first failure; read it only once tsink_failed() said so. */
const char *tsink_errmsg(const struct tsink *k);

/* How often the producer found the ring full and applied it itself. */
uint64_t tsink_full_waits(const struct tsink *k);

#endif
