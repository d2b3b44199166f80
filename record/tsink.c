/*
 * tsink.c - the trace writer behind a queue (see tsink.h).
 *
 * The ring is a power-of-two array indexed by two free-running counters:
 * `head`, advanced by the producer after it filled an entry (release), and
 * `tail`, advanced by whoever holds the lock after it applied entries
 * (release). The producer is one thread; consumers are serialized by the
 * lock, so neither side ever needs a compare-and-swap. When the ring is
 * full the producer takes the lock and applies it itself: nothing is lost,
 * the sampler is only late (and says so in the trace).
 */
#include "tsink.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pfutil.h"
#include "sources.h"
#include "stopper.h"

/* 64 Ki entries, 1.5 MiB: over half a second of samples at 100 kHz. */
#define RING_BITS 16
#define RING_SIZE (1u << RING_BITS)
#define RING_MASK (RING_SIZE - 1)
/*
 * The thread applies the ring this often: each wake-up costs ~12 us of CPU
 * on our VMs, so not more than 20 times a second (at 100 Hz, 5 ms cost more
 * than the samples themselves); 50 ms of samples fit the ring at 1 MHz.
 */
#define APPLY_NS 50000000
/* Time for reading source files per pass, so the lock is never held long. */
#define SOURCES_BUDGET_NS 5000000

enum { EV_SAMPLE, EV_ERROR, EV_ROTATE, EV_END };

struct event {
        int64_t t_ns; /* sample: time; error: count */
        uint32_t a;   /* sample, end: thread ref; error: pid */
        uint32_t b;   /* sample: stack id; error: kind */
        uint32_t c;   /* sample: state */
        uint32_t kind;
};

struct tsink {
        struct trace_writer *w;
        struct sources *src;
        struct event *ring;
        tsink_rotate_fn rotate;
        void *rotate_ctx;
        _Atomic uint64_t head, tail;
        pthread_mutex_t lock;
        pthread_cond_t wake;
        pthread_t thread;
        bool started;
        bool stop; /* under lock */
        int64_t flush_ns;
        int64_t apply_ns; /* APPLY_NS, or tsink_set_apply_period() */
        atomic_int failed;
        char errmsg[512];
        _Atomic uint64_t full_waits;
        struct job {
                tsink_job_fn fn;
                void *ctx;
        } * jobs;
        size_t n_jobs, cap_jobs;
};

/*
 * How many sink locks the calling thread holds: what the "under the lock"
 * contracts are asserted with (debug builds). Per thread, so reading it is
 * never a race.
 */
static _Thread_local unsigned locks_held;

bool tsink_held(const struct tsink *k)
{
        (void)k;
        return locks_held > 0;
}

struct tsink *tsink_new(struct trace_writer *w)
{
        struct tsink *k = calloc(1, sizeof(*k));
        if (!k)
                return NULL;
        k->ring = malloc(RING_SIZE * sizeof(*k->ring));
        if (!k->ring) {
                free(k);
                return NULL;
        }
        k->w = w;
        k->apply_ns = APPLY_NS;
        /*
         * The sampling thread runs at real-time priority and the committing
         * thread does not: while the former waits for the lock, the holder
         * runs at its priority, so that no busy target can hold it up.
         */
        pthread_mutexattr_t ma;
        pthread_mutexattr_init(&ma);
        pthread_mutexattr_setprotocol(&ma, PTHREAD_PRIO_INHERIT);
        pthread_mutex_init(&k->lock, &ma);
        pthread_mutexattr_destroy(&ma);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&k->wake, &ca);
        pthread_condattr_destroy(&ca);
        return k;
}

void tsink_set_apply_period(struct tsink *k, int64_t ns)
{
        k->apply_ns = ns > 0 ? ns : APPLY_NS;
}

struct trace_writer *tsink_writer(const struct tsink *k)
{
        return k->w;
}

int tsink_failed(const struct tsink *k)
{
        /* Acquire: pairs with the release in note_failure(), so errmsg is complete. */
        return atomic_load_explicit(&k->failed, memory_order_acquire);
}

const char *tsink_errmsg(const struct tsink *k)
{
        return k->errmsg;
}

uint64_t tsink_full_waits(const struct tsink *k)
{
        return atomic_load_explicit(&k->full_waits, memory_order_relaxed);
}

/* Under the lock: the first failure wins, its message is kept. */
static void note_failure(struct tsink *k, int rc)
{
        if (rc >= 0 || tsink_failed(k))
                return;
        snprintf(k->errmsg, sizeof(k->errmsg), "%s", trace_writer_errmsg(k->w));
        /* Release: errmsg is written once, before failed, and never again. */
        atomic_store_explicit(&k->failed, rc, memory_order_release);
}

/*
 * Under the lock: apply the queued events to the writer. A rotation is
 * done where `rotate_here` says (the committing thread; anyone when the
 * ring is full or the thread is not running): elsewhere, applying stops
 * at it and leaves it to the committing thread's next pass, so that a
 * sampling thread taking the lock to intern a stack does not write a
 * new file meanwhile. What it then does under the lock (interning, a
 * process or thread added or ended) is carried to the next file anyway.
 */
static void apply(struct tsink *k, bool rotate_here)
{
        assert(tsink_held(k));
        uint64_t tail = atomic_load_explicit(&k->tail, memory_order_relaxed);
        uint64_t head = atomic_load_explicit(&k->head, memory_order_acquire);
        assert(head - tail <= RING_SIZE); /* the producer never overtakes */
        for (; tail != head; tail++) {
                const struct event *e = &k->ring[tail & RING_MASK];
                int rc = 0;
                if (e->kind == EV_SAMPLE) {
                        rc = trace_writer_add_sample(k->w, e->a, e->t_ns, e->b, e->c);
                } else if (e->kind == EV_ERROR) {
                        rc = trace_writer_count_error(k->w, (int32_t)e->a, (int)e->b,
                                                      (uint64_t)e->t_ns);
                } else if (e->kind == EV_END) {
                        rc = trace_writer_end_thread(k->w, e->a);
                } else {
                        if (!rotate_here)
                                break;
                        if (k->rotate && !tsink_failed(k))
                                k->rotate(k->rotate_ctx, e->t_ns, e->a, e->b, e->c);
                }
                note_failure(k, rc);
        }
        atomic_store_explicit(&k->tail, tail, memory_order_release);
}

void tsink_lock(struct tsink *k)
{
        /* The lock may be held through a commit: never while a target is held (--blocking). */
        assert(!stopper_holding());
        assert(!tsink_held(k)); /* not recursive */
        pthread_mutex_lock(&k->lock);
        locks_held++;
        apply(k, !k->started);
}

bool tsink_trylock(struct tsink *k)
{
        assert(!tsink_held(k));
        if (pthread_mutex_trylock(&k->lock) != 0)
                return false;
        locks_held++;
        apply(k, !k->started);
        return true;
}

int tsink_add_job_locked(struct tsink *k, tsink_job_fn fn, void *ctx)
{
        assert(tsink_held(k));
        if (k->n_jobs == k->cap_jobs) {
                size_t cap = k->cap_jobs ? 2 * k->cap_jobs : 8;
                struct job *p = realloc(k->jobs, cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                k->jobs = p;
                k->cap_jobs = cap;
        }
        k->jobs[k->n_jobs++] = (struct job){fn, ctx};
        return 0;
}

void tsink_remove_job_locked(struct tsink *k, void *ctx)
{
        assert(tsink_held(k));
        for (size_t i = 0; i < k->n_jobs;)
                if (k->jobs[i].ctx == ctx)
                        k->jobs[i] = k->jobs[--k->n_jobs];
                else
                        i++;
}

void tsink_unlock(struct tsink *k)
{
        assert(tsink_held(k));
        locks_held--;
        pthread_mutex_unlock(&k->lock);
}

static void push(struct tsink *k, const struct event *e)
{
        uint64_t head = atomic_load_explicit(&k->head, memory_order_relaxed);
        if (head - atomic_load_explicit(&k->tail, memory_order_acquire) >= RING_SIZE) {
                atomic_fetch_add_explicit(&k->full_waits, 1, memory_order_relaxed);
                assert(!tsink_held(k));
                pthread_mutex_lock(&k->lock);
                locks_held++;
                apply(k, true); /* the whole ring, a rotation in it too */
                tsink_unlock(k);
                assert(head - atomic_load_explicit(&k->tail, memory_order_relaxed) == 0);
        }
        k->ring[head & RING_MASK] = *e;
        atomic_store_explicit(&k->head, head + 1, memory_order_release);
}

void tsink_sample(struct tsink *k, uint32_t thread_ref, int64_t t_ns, uint32_t stack_id,
                  unsigned state)
{
        assert(!stopper_holding()); /* a full ring is drained under the lock */
        struct event e = {t_ns, thread_ref, stack_id, state, EV_SAMPLE};
        push(k, &e);
}

void tsink_error(struct tsink *k, int32_t pid, int kind, uint64_t n)
{
        struct event e = {(int64_t)n, (uint32_t)pid, (uint32_t)kind, 0, EV_ERROR};
        push(k, &e);
}

void tsink_end_thread(struct tsink *k, uint32_t thread_ref)
{
        assert(!stopper_holding());
        struct event e = {0, thread_ref, 0, 0, EV_END};
        push(k, &e);
}

void tsink_set_rotate(struct tsink *k, tsink_rotate_fn fn, void *ctx)
{
        assert(!k->started);
        k->rotate = fn;
        k->rotate_ctx = ctx;
}

void tsink_rotate(struct tsink *k, int64_t cut_ns, uint32_t tag, uint32_t arg1, uint32_t arg2)
{
        assert(!stopper_holding());
        struct event e = {cut_ns, tag, arg1, arg2, EV_ROTATE};
        push(k, &e);
        if (k->started) {
                /* Wake the committing thread now rather than at its next pass. */
                pthread_cond_signal(&k->wake);
        }
}

static void *run(void *arg)
{
        struct tsink *k = arg;
        int64_t last_flush = pf_now_mono_ns();
        pthread_mutex_lock(&k->lock);
        locks_held++;
        while (!k->stop) {
                int64_t until = pf_now_mono_ns() + k->apply_ns;
                struct timespec ts = {until / 1000000000, until % 1000000000};
                pthread_cond_timedwait(&k->wake, &k->lock, &ts);
                apply(k, true);
                int64_t now = pf_now_mono_ns();
                for (size_t i = 0; i < k->n_jobs; i++)
                        k->jobs[i].fn(k->jobs[i].ctx, now);
                if (k->src)
                        sources_pump(k->src, SOURCES_BUDGET_NS);
                now = pf_now_mono_ns();
                if (now - last_flush >= k->flush_ns && !tsink_failed(k)) {
                        note_failure(k, trace_writer_flush(k->w));
                        last_flush = now;
                }
        }
        locks_held--;
        pthread_mutex_unlock(&k->lock);
        return NULL;
}

int tsink_start(struct tsink *k, struct sources *src, int64_t flush_ns)
{
        if (k->started)
                return 0;
        k->src = src;
        k->flush_ns = flush_ns;
        trace_writer_set_flush_interval(k->w, -1); /* only this thread commits */
        /* Signals are the sampling thread's business (SIGCHLD for --blocking, Ctrl-C). */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = pthread_create(&k->thread, NULL, run, k);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0)
                return -rc;
        k->started = true;
        return 0;
}

int tsink_stop(struct tsink *k)
{
        if (k->started) {
                pthread_mutex_lock(&k->lock);
                k->stop = true;
                pthread_cond_signal(&k->wake);
                pthread_mutex_unlock(&k->lock);
                pthread_join(k->thread, NULL);
                k->started = false;
                k->stop = false;
        }
        tsink_lock(k); /* applies what is queued */
        tsink_unlock(k);
        return tsink_failed(k);
}

void tsink_free(struct tsink *k)
{
        if (!k)
                return;
        tsink_stop(k);
        pthread_mutex_destroy(&k->lock);
        pthread_cond_destroy(&k->wake);
        free(k->jobs);
        free(k->ring);
        free(k);
}
