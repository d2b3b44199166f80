/*
 * sampler.c - one sampled process: walker output to trace samples.
 *
 * The hot path of the recorder is here. For each thread the walker reports,
 * the sampler finds the thread's trace reference, decides its state (on CPU
 * from /proc, GIL from the walker) and turns the stack into a trace stack id.
 * Stacks repeat, so a cache keyed by the whole walked stack (code id and
 * line of every frame) gives the id with one hash and one compare; only a
 * stack never seen before goes through the trace writer's interning.
 */
#include "sampler.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pfutil.h"
#include "bpfwalk.h"
#include "capture.h"
#include "cpustate.h"
#include "native.h"
#include "procfs.h"
#include "pyfind.h"
#include "pywalk.h"
#include "sources.h"
#include "stopper.h"
#include "tsink.h"

/*
 * Thread names come from threading's objects, which cost a few reads per
 * thread: they are read once a second, and soon after a thread appears
 * (threading registers it a moment after its thread state exists).
 */
#define NAMES_PERIOD_NS     1000000000
#define NAMES_NEW_THREAD_NS 50000000
/* A thread still unnamed this long after it appeared is looked up this often. */
#define NAMES_RETRY_FOR_NS 5000000000LL
#define NAMES_RETRY_NS     200000000

/*
 * Fresh reads of a thread whose read was torn, or that needed more than a
 * batch read at one instant, before it counts as torn: each costs one
 * batched read (a few microseconds). See pywalk_set_retries().
 */
#define SAMPLE_RETRIES 8
#define DUMP_RETRIES   1000 /* --dump: a few milliseconds at most */

/* A Python thread we have seen, keyed by (tstate address, thread id). */
struct sthread {
        uint64_t tstate, thread_id;
        int64_t interp_id;
        char *name;          /* threading's name for it, NULL until known */
        uint32_t ref;        /* trace thread ref, 0 when not yet registered */
        pid_t host_tid;      /* OS tid in our namespace, -1 unknown */
        int64_t ns_tid;      /* OS tid as the target reported it */
        int stat_fd;         /* /proc/PID/task/TID/stat, -1 when not open */
        struct cpustate *cs; /* its context switches (cpustate.h), NULL: /proc only */
        int trigger_fd;      /* capture_trigger_open() when cs is NULL, else -1 */
        int seed;            /* /proc's state read just after cs was opened */
        int running;         /* last state read: 1 on CPU, 0 not, -1 unknown */
        int before_stop;     /* --blocking: thread_running() before the stop, -1 unknown */
        uint64_t let_go;     /* --blocking: cs's head when let go from a stop, 0 none */
        uint64_t seen_tick;
        int64_t born_ns; /* first seen */
};

/* A thread's stack in this tick (--async joins running tasks to it). */
struct tick_stack {
        uint64_t thread_id;
        uint32_t ref;
        unsigned state;
        size_t off; /* into tick_frames */
        uint32_t depth;
};

/* A task's stream in the trace. */
struct task_ref {
        uint64_t addr;
        uint32_t name_id; /* the pywalk code id of its name: a new name, a new task */
        uint32_t thread_ref;
        uint32_t ref; /* 0: empty slot */
};

/*
 * A native frame as the stack caches see it: a code object whose id has
 * NATIVE_CODE_BIT set (walker ids stay far below it) and its symbol.
 */
#define NATIVE_CODE_BIT 0x80000000u
struct ncode {
        struct pywalk_code pub; /* first: frames point here */
        const struct native_sym *sym;
};

/* A thread with no Python (--native): its native stack only. */
struct nthread {
        pid_t tid;
        uint32_t ref; /* trace thread ref, 0 when not yet registered */
        uint64_t seen_tick;
};

/* One entry of the whole-stack cache. */
struct stack_entry {
        uint64_t hash;
        uint32_t depth;
        uint32_t stack_id;
        size_t key_off; /* into stack_keys: depth pairs (code id, line) */
};

struct sampler {
        pid_t pid;
        bool blocking;
        bool no_switch_events; /* cpustate_open() is refused here: /proc only */
        bool same_pidns;       /* the target's thread ids are ours (procfs_same_pidns) */
        /* --bpf: the in-kernel sampler (bpfwalk.h) takes the samples; NULL: we do. */
        struct bpfwalk *bpf;
        uint64_t bpf_code_mask; /* of a frame's code word: the program's key of code objects */
        bool bpf_refresh;       /* an event named a thread it did not know */
        uint64_t bpf_pushed;    /* refreshes that told the BPF program of the process */
        /*
         * --bpf: the frame chains of this batch already decoded, by a hash
         * of what the program copied (code, position, owner per frame), and
         * their trace stacks: a chain seen again in the batch is not decoded
         * again (its code objects were checked by the first). Direct-mapped;
         * the copies to compare against in memo_raw.
         */
        struct bpf_memo {
                uint64_t hash, batch;
                size_t off;
                uint32_t depth, stack;
        } * memo;
        struct pf_buf memo_raw;
        uint64_t batch;
        struct pyfind_target target;
        char version[32];
        char build[64];
        struct memsrc mem;
        struct pywalk *walk;
        struct tsink *k;         /* NULL until sampler_set_sink() */
        struct trace_writer *w;  /* the sink's; used only under its lock */
        struct sources *sources; /* NULL: source files are not stored */
        int sources_handle;
        struct stopper stop;
        /* In-context reads of the thread running Python (capture.h); NULL: none. */
        struct capture *capture;
        pid_t capture_tid; /* this sample's: the thread holding the GIL */
        int capture_fd;

        /*
         * Appended to, removed from and rebound only under the sink's lock
         * (once there is a sink): names_job reads it from the sink's thread.
         */
        struct sthread *threads;
        size_t n_threads, cap_threads;
        _Atomic int64_t names_due_ns; /* next reading of the thread names */
        int names_rc;                 /* a trace status from naming threads (under the lock) */
        /* A second walker, for names_job (NULL: names are read in sampler_tick_finish). */
        struct memsrc names_mem;
        struct pywalk *names_walk;

        /* (code id << 32 | line) -> trace frame id, open addressing */
        uint64_t *frame_keys;
        uint32_t *frame_vals;
        size_t frame_cap, frame_n;

        struct stack_entry *stacks; /* open addressing, stack_cap slots */
        size_t stack_cap, stack_n;
        struct pf_buf stack_keys; /* uint32 pairs */

        uint32_t *stack_build; /* scratch: frame ids */
        uint64_t tick;
        int64_t tick_ns;
        struct sampler_stats st;
        char *err; /* message buffer of the current call */
        size_t errlen;
        /* A trace write that failed during a walk (-EIO, -ENOMEM), with its message. */
        int write_rc;
        char write_msg[256];
        /*
         * --blocking: what the walk saw while the target's threads were held,
         * turned into samples once they are released (on_thread()).
         */
        struct pywalk_thread *held;
        size_t n_held, cap_held;
        struct pf_buf held_frames;
        /*
         * --blocking: the samples of the last pass, and from when to when it
         * held threads (hold_until 0: it held none), for sampler_hold_over().
         */
        struct last_sample {
                uint32_t ref, stack;
                unsigned state; /* as held: see over_state() */
                bool task;      /* an asyncio task's sample (--async) */
        } * last;
        size_t n_last, cap_last;
        int64_t hold_from, hold_until;
        int64_t horizon;   /* sampler_set_horizon() */
        int64_t took_at;   /* the instant sampler_hold_over() last wrote */
        int64_t hold_last; /* the latest instant a sample of the hold was written at */
        int walk_rc;       /* sampler_tick_read()'s walk, for sampler_tick_finish() */

        /* --async: asyncio tasks (pytasks.c) sampled beside the threads. */
        bool async;
        struct tick_stack *tick_stacks; /* this tick's thread stacks, for running tasks */
        size_t n_tick_stacks, cap_tick_stacks;
        struct pf_buf tick_frames;
        struct task_ref *task_refs; /* open addressing: (task, name) -> trace ref */
        size_t task_ref_cap, task_ref_n;
        /* Refs of streams gone, for tsink_end_thread() at the end of the tick. */
        uint32_t *ending;
        size_t n_ending, cap_ending;
        struct pywalk_frame *task_build; /* scratch: one task's stack, leaf first */
        size_t task_build_cap;

        /* --native: native stacks merged in (native.h); NULL: Python only. */
        struct native *native;
        unsigned native_flags;                /* NATIVE_MERGE_* */
        const struct native_sym **nat_frames; /* scratch: one unwind */
        struct native_merged *merged;         /* scratch: one merge */
        struct pywalk_frame *merged_frames;   /* scratch: the merge as walker frames */
        bool debug_unmatched;                 /* PYFLAME_DEBUG_UNMATCHED: print_unmatched() */
        struct ncode *ncodes;                 /* by native_sym id */
        size_t cap_ncodes;
        struct nthread *nthreads;
        size_t n_nthreads, cap_nthreads;
};

pid_t sampler_pid(const struct sampler *s)
{
        return s->pid;
}

const char *sampler_version(const struct sampler *s)
{
        return s->version;
}

const char *sampler_build(const struct sampler *s)
{
        return s->build;
}

void sampler_get_stats(const struct sampler *s, struct sampler_stats *st)
{
        *st = s->st;
        st->reads = s->walk ? pywalk_reads(s->walk) : 0;
        if (s->native) {
                struct native_stats ns;
                native_get_stats(s->native, &ns);
                st->native_captures = ns.captures;
                st->native_capture_ns = ns.capture_ns;
                st->native_unwinds = ns.unwinds;
                st->native_unwind_ns = ns.unwind_ns;
                st->native_warm_unwinds = ns.warm_unwinds;
                st->native_warm_unwind_ns = ns.warm_unwind_ns;
                st->native_frames = ns.frames;
                st->native_symbols = ns.symbols;
                st->native_cfi_rules = ns.cfi_rules;
                st->native_cfi_fallbacks = ns.cfi_fallbacks;
                st->native_capture_bytes = ns.capture_bytes;
                st->native_sym_resets = ns.sym_resets;
        }
}

static void build_string(const struct pyfind_target *t, char *buf, size_t len)
{
        snprintf(buf, len, "%s%s%s", t->shared ? "shared" : "static",
                 t->free_threaded ? ",free-threaded" : "", t->debug_build ? ",debug" : "");
}

int sampler_open(pid_t pid, bool blocking, struct sampler **out, char *err, size_t errlen)
{
        struct sampler *s = calloc(1, sizeof(*s));
        if (!s) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        s->pid = pid;
        s->blocking = blocking;
        s->same_pidns = procfs_same_pidns(pid);
        int rc = pyfind_target(pid, &s->target, err, errlen);
        if (rc < 0)
                goto fail;
        pyfind_version_str(&s->target, s->version, sizeof(s->version));
        build_string(&s->target, s->build, sizeof(s->build));
        memsrc_init_process(&s->mem, pid);
        rc = pywalk_open(&s->target, &s->mem, &s->walk, err, errlen);
        if (rc < 0)
                goto fail;
        pywalk_set_retries(s->walk, SAMPLE_RETRIES);
        s->stack_build = malloc(PYWALK_MAX_DEPTH * sizeof(uint32_t));
        if (!s->stack_build) {
                snprintf(err, errlen, "out of memory");
                rc = -ENOMEM;
                goto fail;
        }
        *out = s;
        return 0;
fail:
        sampler_close(s);
        return rc;
}

static void names_job(void *ctx, int64_t now_ns);

int sampler_set_sink(struct sampler *s, struct tsink *k, char *err, size_t errlen)
{
        struct trace_writer *w = tsink_writer(k);
        char cmdline[4096];
        if (procfs_cmdline(s->pid, cmdline, sizeof(cmdline)) < 0)
                cmdline[0] = 0;
        struct trace_process_desc pd = {
            .pid = s->pid,
            .cmdline = cmdline[0] ? cmdline : NULL,
            .python_version = s->version,
            .python_build = s->build,
        };
        /* Thread names are read off the sampling thread, with a walker of their own. */
        char ignored[256];
        memsrc_init_process(&s->names_mem, s->pid);
        if (pywalk_open(&s->target, &s->names_mem, &s->names_walk, ignored, sizeof(ignored)) < 0)
                s->names_walk = NULL;
        tsink_lock(k);
        int rc = trace_writer_add_process(w, &pd);
        if (rc < 0) {
                snprintf(err, errlen, "%s", trace_writer_errmsg(w));
                rc = rc == TRACE_ERR_NOMEM ? -ENOMEM : -EIO;
        } else if (s->names_walk && tsink_add_job_locked(k, names_job, s) < 0) {
                snprintf(err, errlen, "out of memory");
                rc = -ENOMEM;
        }
        tsink_unlock(k);
        if (rc < 0) {
                if (s->names_walk)
                        pywalk_close(s->names_walk);
                s->names_walk = NULL;
                return rc;
        }
        s->k = k;
        s->w = w;
        return 0;
}

void sampler_no_switch_events(struct sampler *s)
{
        s->no_switch_events = true;
}

void sampler_set_capture(struct sampler *s, struct capture *c)
{
        s->capture = s->blocking ? NULL : c;
}

void sampler_set_sources(struct sampler *s, struct sources *src, int handle)
{
        s->sources = src;
        s->sources_handle = handle;
}

#define MERGED_MAX (PYWALK_MAX_DEPTH + NATIVE_MAX_DEPTH)

int sampler_set_native(struct sampler *s, unsigned flags, char *err, size_t errlen)
{
        int rc = native_open(s->pid, &s->native, err, errlen);
        if (rc < 0)
                return rc;
        s->native_flags = flags;
        const char *dbg = getenv("PYFLAME_DEBUG_UNMATCHED");
        s->debug_unmatched = dbg && *dbg && strcmp(dbg, "0") != 0;
        if (flags & NATIVE_MERGE_KEEP_PLUMBING)
                native_keep_plumbing(s->native);
        s->nat_frames = malloc(NATIVE_MAX_DEPTH * sizeof(*s->nat_frames));
        s->merged = malloc(MERGED_MAX * sizeof(*s->merged));
        s->merged_frames = malloc(MERGED_MAX * sizeof(*s->merged_frames));
        if (!s->nat_frames || !s->merged || !s->merged_frames) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        return 0;
}

static void stream_gone(struct sampler *s, uint32_t ref);
static void ends_push(struct sampler *s);

void sampler_end_streams(struct sampler *s)
{
        for (size_t i = 0; i < s->n_threads; i++) {
                stream_gone(s, s->threads[i].ref);
                s->threads[i].ref = 0;
        }
        for (size_t i = 0; i < s->n_nthreads; i++) {
                stream_gone(s, s->nthreads[i].ref);
                s->nthreads[i].ref = 0;
        }
        ends_push(s);
}

void sampler_close(struct sampler *s)
{
        if (!s)
                return;
        if (s->k && s->names_walk) {
                tsink_lock(s->k);
                tsink_remove_job_locked(s->k, s);
                tsink_unlock(s->k);
        }
        if (s->names_walk)
                pywalk_close(s->names_walk);
        stopper_free(&s->stop);
        if (s->walk)
                pywalk_close(s->walk);
        for (size_t i = 0; i < s->n_threads; i++) {
                /*
                 * --bpf: the kernel's table of threads forgets this process's
                 * (it kept every thread of every process that came and went,
                 * up to its 65,536 entries, beyond which new threads went
                 * unsampled; and a reused tid found a dead thread's state).
                 */
                if (s->bpf && s->threads[i].host_tid > 0)
                        bpfwalk_del_thread(s->bpf, s->threads[i].host_tid);
                if (s->threads[i].stat_fd >= 0)
                        close(s->threads[i].stat_fd);
                if (s->threads[i].trigger_fd >= 0)
                        close(s->threads[i].trigger_fd);
                cpustate_close(s->threads[i].cs);
                free(s->threads[i].name);
        }
        free(s->threads);
        free(s->held);
        pf_buf_free(&s->held_frames);
        pf_buf_free(&s->memo_raw);
        free(s->memo);
        free(s->last);
        free(s->tick_stacks);
        pf_buf_free(&s->tick_frames);
        free(s->task_refs);
        free(s->ending);
        free(s->task_build);
        free(s->frame_keys);
        free(s->frame_vals);
        free(s->stacks);
        pf_buf_free(&s->stack_keys);
        free(s->stack_build);
        native_close(s->native);
        free(s->nat_frames);
        free(s->merged);
        free(s->merged_frames);
        free(s->ncodes);
        free(s->nthreads);
        free(s);
}

/* ---- threads ---------------------------------------------------------- */

static struct sthread *thread_append(struct sampler *s, const struct pywalk_thread *th);

static struct sthread *thread_lookup(struct sampler *s, const struct pywalk_thread *th)
{
        for (size_t i = 0; i < s->n_threads; i++) {
                struct sthread *t = &s->threads[i];
                if (t->tstate == th->tstate_addr && t->thread_id == th->thread_id)
                        return t;
        }
        if (s->k)
                tsink_lock(s->k);
        struct sthread *t = thread_append(s, th);
        if (s->k)
                tsink_unlock(s->k);
        if (!t)
                return NULL;
        int64_t soon = s->tick_ns + NAMES_NEW_THREAD_NS;
        if (atomic_load_explicit(&s->names_due_ns, memory_order_relaxed) > soon)
                atomic_store_explicit(&s->names_due_ns, soon, memory_order_relaxed);
        return t;
}

/* A new entry for `th`; NULL when out of memory. */
static struct sthread *thread_append(struct sampler *s, const struct pywalk_thread *th)
{
        if (s->n_threads == s->cap_threads) {
                size_t cap = s->cap_threads ? s->cap_threads * 2 : 8;
                struct sthread *p = realloc(s->threads, cap * sizeof(*p));
                if (!p)
                        return NULL;
                s->threads = p;
                s->cap_threads = cap;
        }
        struct sthread *t = &s->threads[s->n_threads++];
        memset(t, 0, sizeof(*t));
        t->tstate = th->tstate_addr;
        t->thread_id = th->thread_id;
        t->interp_id = th->interp_id;
        t->host_tid = -1;
        t->ns_tid = -2; /* forces a lookup */
        t->stat_fd = -1;
        t->trigger_fd = -1;
        t->cs = NULL;
        t->running = -1;
        t->before_stop = -1;
        t->born_ns = s->tick_ns;
        return t;
}

static void thread_rebind(struct sampler *s, struct sthread *t, int64_t ns_tid);

/*
 * Stream `ref` is gone (its thread exited, or its state went to another OS
 * thread): the writer is told at the end of the tick (ends_push(), through
 * the sink's queue, after its samples), and may then give the ref to
 * another stream, so nothing here keeps it: the cache of task refs, whose
 * streams end with their thread, starts afresh (the writer finds the live
 * ones again by thread and address). Out of memory, the writer keeps the
 * stream: no harm.
 */
static void stream_gone(struct sampler *s, uint32_t ref)
{
        if (!ref)
                return;
        if (s->task_ref_n) {
                memset(s->task_refs, 0, s->task_ref_cap * sizeof(*s->task_refs));
                s->task_ref_n = 0;
        }
        if (s->n_ending == s->cap_ending) {
                size_t cap = s->cap_ending ? 2 * s->cap_ending : 16;
                uint32_t *p = realloc(s->ending, cap * sizeof(*p));
                if (!p)
                        return;
                s->ending = p;
                s->cap_ending = cap;
        }
        s->ending[s->n_ending++] = ref;
}

/* Queue the ends stream_gone() noted; not under the sink's lock, no target held. */
static void ends_push(struct sampler *s)
{
        for (size_t i = 0; s->k && i < s->n_ending; i++)
                tsink_end_thread(s->k, s->ending[i]);
        s->n_ending = 0;
}

/* Map the walker's tid (target namespace) to ours and open its stat file. */
static void thread_bind_tid(struct sampler *s, struct sthread *t, int64_t ns_tid)
{
        if (t->ns_tid == ns_tid)
                return;
        if (s->k)
                tsink_lock(s->k);
        thread_rebind(s, t, ns_tid);
        if (s->k)
                tsink_unlock(s->k);
}

static void thread_rebind(struct sampler *s, struct sthread *t, int64_t ns_tid)
{
        /*
         * The OS thread changed under a known thread state: 3.11+ creates a
         * thread's state in the creating thread, with the creator's ids, and
         * rebinds it when the new thread starts. What follows belongs to
         * another OS thread, so it becomes another trace thread.
         */
        stream_gone(s, t->ref);
        t->ref = 0;
        t->ns_tid = ns_tid;
        if (t->stat_fd >= 0)
                close(t->stat_fd);
        t->stat_fd = -1;
        if (t->trigger_fd >= 0)
                close(t->trigger_fd);
        t->trigger_fd = -1;
        cpustate_close(t->cs);
        t->cs = NULL;
        t->before_stop = -1;
        t->let_go = 0;
        t->host_tid = -1;
        if (ns_tid <= 0)
                return;
        pid_t host = procfs_host_tid(s->pid, (pid_t)ns_tid);
        /*
         * Exited since it was read (a thread that ran a short job: a tenth of
         * a millisecond is enough): in our namespace its id is still its id.
         * Without it the sample went to a thread with no OS id, shared by
         * every such thread whose pthread id was the same (glibc reuses
         * them), and the thread's other samples to another.
         */
        if (host == -ENOENT && s->same_pidns)
                host = (pid_t)ns_tid;
        if (host <= 0)
                return;
        t->host_tid = host;
        t->stat_fd = procfs_thread_open(s->pid, host);
        if (s->no_switch_events || t->stat_fd < 0)
                return;
        /*
         * The state from the thread's context switches, with no system call
         * per sample. Opened before /proc is read for the seed, so a switch
         * in between is in the ring and wins over the seed.
         */
        t->cs = cpustate_open(host);
        if (!t->cs) {
                /* Not allowed or not supported here: no use trying other threads. */
                if (errno != ESRCH && errno != ENOMEM && errno != EMFILE && errno != ENFILE)
                        s->no_switch_events = true;
                return;
        }
        t->seed = procfs_thread_running(t->stat_fd);
}

/*
 * A trace call failed with `trc`: keep its message (under the sink's lock, as
 * the writer's message may change once it is released) and return the
 * recorder's error for it: -ENOMEM, or -EIO for anything else.
 */
static int write_failed(struct sampler *s, int trc)
{
        assert(!s->k || tsink_held(s->k));
        snprintf(s->write_msg, sizeof(s->write_msg), "%s",
                 trc == TRACE_ERR_NOMEM ? "out of memory" : trace_writer_errmsg(s->w));
        s->write_rc = trc == TRACE_ERR_NOMEM ? -ENOMEM : -EIO;
        return s->write_rc;
}

static int thread_register(struct sampler *s, struct sthread *t)
{
        if (t->ref || !s->k)
                return 0;
        /*
         * The name is read under the lock: names_job may set it meanwhile,
         * and would not rename a thread that is not registered yet.
         */
        tsink_lock(s->k);
        struct trace_thread_desc d = {
            .pid = s->pid,
            .tid = t->host_tid,
            .python_thread_id = t->thread_id,
            .name = t->name,
        };
        int rc = trace_writer_add_thread(s->w, &d, &t->ref);
        if (rc < 0)
                rc = write_failed(s, rc);
        tsink_unlock(s->k);
        return rc;
}

/* Drop threads not seen for a while (they exited); keeps fds bounded. */
static void threads_gc(struct sampler *s)
{
        size_t kept = 0;
        for (size_t i = 0; i < s->n_threads; i++) {
                struct sthread *t = &s->threads[i];
                if (s->tick - t->seen_tick > 100) {
                        if (s->bpf && t->host_tid > 0)
                                bpfwalk_del_thread(s->bpf, t->host_tid);
                        if (t->stat_fd >= 0)
                                close(t->stat_fd);
                        if (t->trigger_fd >= 0)
                                close(t->trigger_fd);
                        cpustate_close(t->cs);
                        free(t->name);
                        stream_gone(s, t->ref);
                        continue;
                }
                s->threads[kept++] = *t;
        }
        s->n_threads = kept;
        kept = 0;
        for (size_t i = 0; i < s->n_nthreads; i++)
                if (s->tick - s->nthreads[i].seen_tick <= 100)
                        s->nthreads[kept++] = s->nthreads[i];
                else
                        stream_gone(s, s->nthreads[i].ref);
        s->n_nthreads = kept;
}

static void on_name(void *ctx, int64_t interp_id, uint64_t thread_id, const char *name)
{
        struct sampler *s = ctx;
        for (size_t i = 0; i < s->n_threads; i++) {
                struct sthread *t = &s->threads[i];
                if (t->thread_id != thread_id || t->interp_id != interp_id ||
                    (t->name && strcmp(t->name, name) == 0))
                        continue;
                char *copy = strdup(name);
                if (!copy)
                        continue; /* unnamed a little longer */
                free(t->name);
                t->name = copy;
                /* Not yet registered: registration will carry the name. */
                assert(tsink_held(s->k));
                int rc = t->ref ? trace_writer_set_thread_name(s->w, t->ref, name) : 0;
                if (rc < 0)
                        s->names_rc = rc;
        }
}

/*
 * Read threading's names for the threads and give new or changed ones to the
 * trace; under the sink's lock.
 */
static int names_refresh(struct sampler *s, struct pywalk *walk, int64_t now_ns)
{
        atomic_store_explicit(&s->names_due_ns, now_ns + NAMES_PERIOD_NS, memory_order_relaxed);
        s->names_rc = 0;
        pywalk_thread_names(walk, on_name, s); /* a process gone shows in the next sample */
        return s->names_rc;
}

/* The sink's thread, under its lock: names, read with the second walker. */
static void names_job(void *ctx, int64_t now_ns)
{
        struct sampler *s = ctx;
        if (now_ns < atomic_load_explicit(&s->names_due_ns, memory_order_relaxed))
                return;
        names_refresh(s, s->names_walk, now_ns); /* a failed rename is not fatal */
        /*
         * A thread seen in the last few seconds and still unnamed (threading
         * had not registered it yet, or a read raced with the program): try
         * again soon rather than in a second.
         */
        for (size_t i = 0; i < s->n_threads; i++) {
                const struct sthread *t = &s->threads[i];
                if (!t->name && now_ns - t->born_ns < NAMES_RETRY_FOR_NS) {
                        int64_t soon = now_ns + NAMES_RETRY_NS;
                        if (atomic_load_explicit(&s->names_due_ns, memory_order_relaxed) > soon)
                                atomic_store_explicit(&s->names_due_ns, soon, memory_order_relaxed);
                        break;
                }
        }
}

/* ---- frames and stacks ------------------------------------------------ */

static int frame_id(struct sampler *s, const struct pywalk_frame *f, uint32_t *out)
{
        uint64_t key = (uint64_t)f->code->id << 32 | (uint32_t)f->line;
        if (s->frame_n * 2 >= s->frame_cap) {
                size_t cap = s->frame_cap ? s->frame_cap * 2 : 1024;
                uint64_t *k = calloc(cap, sizeof(*k));
                uint32_t *v = calloc(cap, sizeof(*v));
                if (!k || !v) {
                        free(k);
                        free(v);
                        return TRACE_ERR_NOMEM;
                }
                for (size_t i = 0; i < s->frame_cap; i++) {
                        if (!s->frame_vals[i])
                                continue;
                        size_t j = pf_hash_u64(0, s->frame_keys[i]) & (cap - 1);
                        while (v[j])
                                j = (j + 1) & (cap - 1);
                        k[j] = s->frame_keys[i];
                        v[j] = s->frame_vals[i];
                }
                free(s->frame_keys);
                free(s->frame_vals);
                s->frame_keys = k;
                s->frame_vals = v;
                s->frame_cap = cap;
        }
        size_t j = pf_hash_u64(0, key) & (s->frame_cap - 1);
        while (s->frame_vals[j]) {
                if (s->frame_keys[j] == key) {
                        *out = s->frame_vals[j];
                        return 0;
                }
                j = (j + 1) & (s->frame_cap - 1);
        }
        bool native = (f->code->id & NATIVE_CODE_BIT) != 0;
        struct trace_frame_desc d = {
            .function = f->code->group ? f->code->group : f->code->name,
            .qualname = f->code->qualname,
            .file = f->code->file,
            .line = f->line,
            .first_line = f->code->first_line,
            .kind = native          ? TRACE_FRAME_NATIVE
                    : f->code->task ? TRACE_FRAME_TASK
                                    : TRACE_FRAME_PYTHON,
        };
        uint32_t id;
        assert(!s->k || tsink_held(s->k));
        int rc;
        if (native) {
                const struct native_sym *sym = ((const struct ncode *)f->code)->sym;
                rc = trace_writer_intern_native_frame(s->w, &d, sym->module, sym->offset, &id);
        } else {
                rc = trace_writer_intern_frame(s->w, &d, &id);
        }
        if (rc < 0)
                return rc;
        s->frame_keys[j] = key;
        s->frame_vals[j] = id;
        s->frame_n++;
        /* A frame never seen: its file may be new too (read at flush time, not here). */
        if (s->sources && !native && !f->code->task)
                sources_note(s->sources, s->sources_handle, d.file);
        *out = id;
        return 0;
}

/*
 * The frame and stack caches are keyed by the walker's code ids, which a
 * program that keeps making code (and the walker forgetting old code) never
 * stops adding. They only spare the writer's interning, which dedupes by
 * content: past a bound, start them afresh. Between walks only.
 */
#define CACHE_MAX_ENTRIES (1u << 16)
#define CACHE_MAX_KEYS    (8u << 20) /* bytes of stack keys */
#define NATIVE_NAMES_MAX  (1u << 20) /* addresses native.c names before it forgets them */

static void caches_trim(struct sampler *s)
{
        /*
         * --native: the native frames' codes are keyed by native.c's name
         * ids, which start again from 1 when it forgets its names: the
         * frame and stack caches keyed by them go with them.
         */
        bool names_forgotten = s->native && native_trim(s->native, NATIVE_NAMES_MAX);
        if (names_forgotten && s->ncodes)
                memset(s->ncodes, 0, s->cap_ncodes * sizeof(*s->ncodes));
        if (!names_forgotten && s->frame_n <= CACHE_MAX_ENTRIES &&
            s->stack_n <= CACHE_MAX_ENTRIES && s->stack_keys.len <= CACHE_MAX_KEYS)
                return;
        free(s->frame_keys);
        free(s->frame_vals);
        free(s->stacks);
        s->frame_keys = NULL;
        s->frame_vals = NULL;
        s->stacks = NULL;
        s->frame_cap = s->frame_n = s->stack_cap = s->stack_n = 0;
        s->stack_keys.len = 0;
        s->st.cache_resets++;
}

/* Once per frame of every sample: one multiply per frame, mixed well at the end. */
static uint64_t stack_hash(const struct pywalk_thread *th)
{
        uint64_t h = th->depth;
        for (uint32_t i = 0; i < th->depth; i++) {
                h ^= (uint64_t)th->frames[i].code->id << 32 | (uint32_t)th->frames[i].line;
                h *= 0x9e3779b97f4a7c15ull;
                h ^= h >> 32;
        }
        return pf_hash_u64(0, h);
}

static bool stack_matches(const struct sampler *s, const struct stack_entry *e,
                          const struct pywalk_thread *th)
{
        if (e->depth != th->depth)
                return false;
        const uint32_t *k = (const uint32_t *)(s->stack_keys.data + e->key_off);
        for (uint32_t i = 0; i < th->depth; i++)
                if (k[2 * i] != th->frames[i].code->id ||
                    k[2 * i + 1] != (uint32_t)th->frames[i].line)
                        return false;
        return true;
}

static int stack_cache_grow(struct sampler *s)
{
        size_t cap = s->stack_cap ? s->stack_cap * 2 : 1024;
        struct stack_entry *t = calloc(cap, sizeof(*t));
        if (!t)
                return -ENOMEM;
        for (size_t i = 0; i < s->stack_cap; i++) {
                struct stack_entry *e = &s->stacks[i];
                if (!e->stack_id && !e->depth)
                        continue;
                size_t j = e->hash & (cap - 1);
                while (t[j].stack_id || t[j].depth)
                        j = (j + 1) & (cap - 1);
                t[j] = *e;
        }
        free(s->stacks);
        s->stacks = t;
        s->stack_cap = cap;
        return 0;
}

/* The trace stack id of a walked stack (leaf-first frames). */
static int stack_id(struct sampler *s, const struct pywalk_thread *th, uint32_t *out)
{
        if (th->depth == 0) {
                *out = TRACE_STACK_EMPTY;
                return 0;
        }
        if (s->stack_n * 2 >= s->stack_cap && stack_cache_grow(s) < 0)
                return -ENOMEM;
        uint64_t h = stack_hash(th);
        size_t j = h & (s->stack_cap - 1);
        while (s->stacks[j].stack_id || s->stacks[j].depth) {
                if (s->stacks[j].hash == h && stack_matches(s, &s->stacks[j], th)) {
                        *out = s->stacks[j].stack_id;
                        return 0;
                }
                j = (j + 1) & (s->stack_cap - 1);
        }
        /* New stack: intern frames root first through the writer's prefix tree. */
        uint32_t stack = TRACE_STACK_EMPTY;
        int rc = 0;
        tsink_lock(s->k);
        for (uint32_t i = th->depth; i-- > 0 && rc >= 0;) {
                uint32_t fid;
                rc = frame_id(s, &th->frames[i], &fid);
                if (rc >= 0)
                        rc = trace_writer_intern_stack(s->w, stack, fid, &stack);
        }
        if (rc < 0)
                rc = write_failed(s, rc);
        tsink_unlock(s->k);
        if (rc < 0)
                return rc;
        size_t off = s->stack_keys.len;
        if (pf_buf_reserve(&s->stack_keys, (size_t)th->depth * 8) < 0)
                return -ENOMEM;
        uint32_t *k = (uint32_t *)(s->stack_keys.data + off);
        for (uint32_t i = 0; i < th->depth; i++) {
                k[2 * i] = th->frames[i].code->id;
                k[2 * i + 1] = (uint32_t)th->frames[i].line;
        }
        s->stack_keys.len += (size_t)th->depth * 8;
        s->stacks[j] = (struct stack_entry){h, th->depth, stack, off};
        s->stack_n++;
        *out = stack;
        return 0;
}

/* ---- asyncio tasks (--async) ------------------------------------------- */

int sampler_set_async(struct sampler *s, char *err, size_t errlen)
{
        int rc = pywalk_set_tasks(s->walk, err, errlen);
        if (rc == 0)
                s->async = true;
        return rc;
}

/* Keep a sampled thread's stack for this tick: a running task's frames are in it. */
static int tick_stack_keep(struct sampler *s, const struct pywalk_thread *th, uint32_t ref,
                           unsigned state)
{
        if (s->n_tick_stacks == s->cap_tick_stacks) {
                size_t cap = s->cap_tick_stacks ? 2 * s->cap_tick_stacks : 16;
                struct tick_stack *p = realloc(s->tick_stacks, cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                s->tick_stacks = p;
                s->cap_tick_stacks = cap;
        }
        size_t off = s->tick_frames.len;
        if (th->depth &&
            pf_buf_append(&s->tick_frames, th->frames, th->depth * sizeof(*th->frames)) < 0)
                return -ENOMEM;
        s->tick_stacks[s->n_tick_stacks++] =
            (struct tick_stack){th->thread_id, ref, state, off, th->depth};
        return 0;
}

static const struct tick_stack *tick_stack_of(const struct sampler *s, uint64_t thread_id)
{
        for (size_t i = 0; thread_id && i < s->n_tick_stacks; i++)
                if (s->tick_stacks[i].thread_id == thread_id)
                        return &s->tick_stacks[i];
        return NULL;
}

#define TASK_REFS_MAX (1u << 16) /* task streams remembered before starting afresh */

static size_t task_ref_slot(uint64_t addr, uint32_t name_id, size_t cap)
{
        return pf_hash_u64(addr, name_id) & (cap - 1);
}

/* The trace ref of the stream of task `tk` run by thread `thread_ref`. */
static int task_ref_get(struct sampler *s, const struct pywalk_task *tk, uint32_t thread_ref,
                        uint32_t *out)
{
        if (s->task_ref_n >= TASK_REFS_MAX) {
                /* The writer finds the streams again by (thread, address). */
                memset(s->task_refs, 0, s->task_ref_cap * sizeof(*s->task_refs));
                s->task_ref_n = 0;
        }
        if (2 * (s->task_ref_n + 1) > s->task_ref_cap) {
                size_t cap = s->task_ref_cap ? 2 * s->task_ref_cap : 256;
                struct task_ref *v = calloc(cap, sizeof(*v));
                if (!v)
                        return -ENOMEM;
                for (size_t i = 0; i < s->task_ref_cap; i++) {
                        struct task_ref *e = &s->task_refs[i];
                        if (!e->ref)
                                continue;
                        size_t j = task_ref_slot(e->addr, e->name_id, cap);
                        while (v[j].ref)
                                j = (j + 1) & (cap - 1);
                        v[j] = *e;
                }
                free(s->task_refs);
                s->task_refs = v;
                s->task_ref_cap = cap;
        }
        size_t j = task_ref_slot(tk->addr, tk->name->id, s->task_ref_cap);
        for (; s->task_refs[j].ref; j = (j + 1) & (s->task_ref_cap - 1)) {
                struct task_ref *e = &s->task_refs[j];
                if (e->addr == tk->addr && e->name_id == tk->name->id &&
                    e->thread_ref == thread_ref) {
                        *out = e->ref;
                        return 0;
                }
        }
        uint32_t ref;
        tsink_lock(s->k);
        struct trace_task_desc d = {thread_ref, tk->addr, tk->name->name};
        int rc = trace_writer_add_task(s->w, &d, &ref);
        /* A task at the address of one gone: the same stream, under its new name. */
        if (rc == 0)
                rc = trace_writer_set_thread_name(s->w, ref, tk->name->name);
        if (rc < 0)
                rc = write_failed(s, rc);
        tsink_unlock(s->k);
        if (rc < 0)
                return rc;
        s->task_refs[j] = (struct task_ref){tk->addr, tk->name->id, thread_ref, ref};
        s->task_ref_n++;
        *out = ref;
        return 0;
}

static int task_build_push(struct sampler *s, size_t *d, const struct pywalk_frame *f, size_t n)
{
        if (*d + n > PYWALK_MAX_DEPTH)
                n = *d < PYWALK_MAX_DEPTH ? PYWALK_MAX_DEPTH - *d : 0;
        if (*d + n > s->task_build_cap) {
                size_t cap = s->task_build_cap ? s->task_build_cap : 256;
                while (cap < *d + n)
                        cap *= 2;
                struct pywalk_frame *p = realloc(s->task_build, cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                s->task_build = p;
                s->task_build_cap = cap;
        }
        memcpy(s->task_build + *d, f, n * sizeof(*f));
        *d += n;
        return 0;
}

/*
 * --blocking: keep a sample of this tick for the slots due while the
 * threads are held (sampler_hold_over()). 0 or -ENOMEM.
 */
static int keep_last(struct sampler *s, uint32_t ref, uint32_t stack, unsigned state, bool task)
{
        if (s->n_last == s->cap_last) {
                size_t cap = s->cap_last ? 2 * s->cap_last : 8;
                struct last_sample *p = realloc(s->last, cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                s->last = p;
                s->cap_last = cap;
        }
        s->last[s->n_last++] = (struct last_sample){ref, stack, state, task};
        return 0;
}

/*
 * One sample per live task of a sampled thread's loop: its stack is its own
 * frames (a running task's: its thread's, from its coroutine on) under its
 * name, under the stacks of the tasks that await it up to the root task.
 */
static int sample_tasks(struct sampler *s)
{
        const struct pywalk_task *v;
        size_t n;
        pywalk_tasks(s->walk, &v, &n);
        for (size_t i = 0; i < n; i++) {
                const struct tick_stack *ts = tick_stack_of(s, v[i].thread_id);
                if (!ts || !ts->ref)
                        continue; /* its loop is not running on a thread sampled now */
                size_t d = 0;
                unsigned state = 0;
                int rc = 0;
                uint32_t cur = (uint32_t)i + 1;
                for (unsigned steps = 0; cur && steps < PYWALK_MAX_DEPTH && rc == 0; steps++) {
                        const struct pywalk_task *tk = &v[cur - 1];
                        const struct tick_stack *own = tick_stack_of(s, tk->thread_id);
                        const struct pywalk_frame *tf =
                            own ? (const struct pywalk_frame *)(s->tick_frames.data + own->off)
                                : NULL;
                        int64_t k = -1;
                        for (uint32_t f = 0; tk->running && tk->root && own && f < own->depth; f++)
                                if (tf[f].code->id == tk->root->id)
                                        k = f;
                        if (k >= 0) {
                                rc = task_build_push(s, &d, tf, (size_t)k + 1);
                                if (cur == i + 1)
                                        state = own->state;
                        } else {
                                rc = task_build_push(s, &d, tk->frames, tk->depth);
                        }
                        struct pywalk_frame marker = {.code = tk->name, .line = -1};
                        if (rc == 0)
                                rc = task_build_push(s, &d, &marker, 1);
                        cur = tk->parent;
                }
                struct pywalk_thread fake = {.depth = (uint32_t)d, .frames = s->task_build};
                uint32_t stack = TRACE_STACK_EMPTY, ref = 0;
                if (rc == 0)
                        rc = stack_id(s, &fake, &stack);
                if (rc == 0)
                        rc = task_ref_get(s, &v[i], ts->ref, &ref);
                if (rc < 0)
                        return rc;
                tsink_sample(s->k, ref, s->tick_ns, stack, state);
                s->st.task_samples++;
                /* Held over like the threads' samples: every live task once a slot. */
                if (s->blocking && (rc = keep_last(s, ref, stack, state, true)) < 0)
                        return rc;
        }
        return 0;
}

/* ---- native stacks ---------------------------------------------------- */

/* Make ncodes hold ids up to max_id. */
static int ncodes_reserve(struct sampler *s, uint32_t max_id)
{
        if (max_id < s->cap_ncodes)
                return 0;
        size_t cap = s->cap_ncodes ? s->cap_ncodes : 1024;
        while (cap <= max_id)
                cap *= 2;
        struct ncode *p = realloc(s->ncodes, cap * sizeof(*p));
        if (!p)
                return -ENOMEM;
        memset(p + s->cap_ncodes, 0, (cap - s->cap_ncodes) * sizeof(*p));
        s->ncodes = p;
        s->cap_ncodes = cap;
        return 0;
}

static const struct pywalk_code *ncode_of(struct sampler *s, const struct native_sym *sym)
{
        struct ncode *c = &s->ncodes[sym->id];
        if (!c->sym) {
                c->sym = sym;
                c->pub = (struct pywalk_code){.id = NATIVE_CODE_BIT | sym->id,
                                              .name = sym->function,
                                              .file = sym->file,
                                              .first_line = -1};
        }
        return &c->pub;
}

/*
 * PYFLAME_DEBUG_UNMATCHED=1: a stack that did not merge, on stderr (both
 * halves, leaf first), to find out why.
 */
static void print_unmatched(const struct sampler *s, pid_t tid, size_t depth, int rc,
                            const struct pywalk_thread *th)
{
        fprintf(stderr, "unmatched: pid %d tid %d, unwind %d, native (leaf first):", (int)s->pid,
                (int)tid, rc);
        for (size_t i = 0; i < depth; i++)
                fprintf(stderr, " %s", s->nat_frames[i]->function);
        fprintf(stderr, "\n  python (leaf first):");
        for (uint32_t i = 0; th && i < th->depth; i++)
                fprintf(stderr, " %s%s", th->frames[i].code->name, th->frames[i].entry ? "*" : "");
        fprintf(stderr, "\n");
}

/*
 * The stack of `th` with its native stack merged in, into *out (frames in
 * s->merged_frames, valid until the next call). Returns 0; 1 when the
 * sample is dropped and counted instead (no native capture: a read error;
 * stacks that do not match: unmatched); -ENOMEM.
 */
static int native_stack(struct sampler *s, pid_t tid, const struct pywalk_thread *th,
                        struct pywalk_thread *out)
{
        size_t depth = 0;
        int rc = tid > 0 ? native_unwind(s->native, tid, s->nat_frames, NATIVE_MAX_DEPTH, &depth)
                         : -ENOENT;
        if (rc == -ENOENT) {
                s->st.read_errors++;
                if (s->k)
                        tsink_error(s->k, s->pid, TRACE_ERROR_READ, 1);
                return 1;
        }
        int n = native_merge(s->nat_frames, depth, th ? th->frames : NULL, th ? th->depth : 0,
                             s->native_flags, s->merged, MERGED_MAX);
        if (n < 0) {
                s->st.unmatched++;
                if (s->k)
                        tsink_error(s->k, s->pid, TRACE_ERROR_UNMATCHED, 1);
                if (s->debug_unmatched)
                        print_unmatched(s, tid, depth, rc, th);
                return 1;
        }
        /*
         * An unwind cut short before the stack's root (a register its CFI
         * needs not known, or NATIVE_MAX_DEPTH frames) that still merged: its
         * innermost frames are kept, and counted, as a --bpf stack deeper
         * than its bound is.
         */
        if (rc == -EPIPE && s->k)
                tsink_error(s->k, s->pid, TRACE_ERROR_TRUNCATED, 1);
        uint32_t max_id = 0;
        for (int i = 0; i < n; i++)
                if (s->merged[i].sym && s->merged[i].sym->id > max_id)
                        max_id = s->merged[i].sym->id;
        if (ncodes_reserve(s, max_id) < 0)
                return -ENOMEM;
        for (int i = 0; i < n; i++) {
                const struct native_sym *sym = s->merged[i].sym;
                s->merged_frames[i] =
                    sym ? (struct pywalk_frame){ncode_of(s, sym), sym->line, false}
                        : *s->merged[i].py;
        }
        if (th)
                *out = *th;
        else
                memset(out, 0, sizeof(*out));
        out->frames = s->merged_frames;
        out->depth = (uint32_t)n;
        s->st.native_samples++;
        return 0;
}

/*
 * While the threads are held: capture the native stack of every thread,
 * held or asleep (native.h). A thread that cannot be captured has no
 * native stack this sample (native_stack() counts it).
 */
static void native_capture_all(struct sampler *s)
{
        native_begin(s->native);
        for (size_t i = 0; i < s->stop.n; i++) {
                const struct stopper_thread *t = &s->stop.threads[i];
                if (t->held)
                        native_capture_held(s->native, t->tid);
                else if (t->state == 'S' || t->state == 'D')
                        native_capture_sleeping(s->native, t->tid);
        }
}

/* A thread of the process no Python thread ran on this sample: its native stack alone. */
static int native_only_thread(struct sampler *s, pid_t tid)
{
        for (size_t i = 0; i < s->n_threads; i++)
                if (s->threads[i].host_tid == tid && s->threads[i].seen_tick == s->tick)
                        return 0;
        struct nthread *t = NULL;
        for (size_t i = 0; i < s->n_nthreads && !t; i++)
                if (s->nthreads[i].tid == tid)
                        t = &s->nthreads[i];
        if (!t) {
                if (s->n_nthreads == s->cap_nthreads) {
                        size_t cap = s->cap_nthreads ? 2 * s->cap_nthreads : 8;
                        struct nthread *p = realloc(s->nthreads, cap * sizeof(*p));
                        if (!p)
                                return -ENOMEM;
                        s->nthreads = p;
                        s->cap_nthreads = cap;
                }
                t = &s->nthreads[s->n_nthreads++];
                *t = (struct nthread){.tid = tid};
        }
        t->seen_tick = s->tick;
        struct pywalk_thread merged;
        int rc = native_stack(s, tid, NULL, &merged);
        if (rc != 0)
                return rc < 0 ? rc : 0;
        if (!s->k)
                return 0;
        if (!t->ref) {
                char comm[64];
                if (procfs_thread_comm(s->pid, tid, comm, sizeof(comm)) < 0)
                        comm[0] = 0;
                tsink_lock(s->k);
                struct trace_thread_desc d = {.pid = s->pid,
                                              .tid = tid,
                                              .python_thread_id = 0,
                                              .name = comm[0] ? comm : NULL};
                rc = trace_writer_add_thread(s->w, &d, &t->ref);
                if (rc < 0)
                        rc = write_failed(s, rc);
                tsink_unlock(s->k);
                if (rc < 0)
                        return rc;
        }
        uint32_t stack = TRACE_STACK_EMPTY;
        if ((rc = stack_id(s, &merged, &stack)) < 0)
                return rc;
        int letter = stopper_thread_state(&s->stop, tid);
        unsigned state = letter == 'R' || letter < 0 ? TRACE_STATE_ON_CPU : 0;
        tsink_sample(s->k, t->ref, s->tick_ns, stack, state);
        s->st.samples++;
        return 0;
}

/* ---- sampling --------------------------------------------------------- */

/* Whether t is on CPU now, from its switch records, else from /proc; -1 unknown. */
static int thread_running(struct sampler *s, struct sthread *t)
{
        int running = t->cs ? cpustate_read(t->cs) : -1;
        if (running == CPUSTATE_NO_SWITCH)
                running = t->seed; /* not switched since the seed was read */
        if (running < 0 && t->stat_fd >= 0) {
                running = procfs_thread_running(t->stat_fd);
                s->st.proc_state_reads++;
        }
        return running;
}

/*
 * The state of thread t at an instant while it was held, for
 * sampler_hold_over(). `state` is its state before it was stopped; it may
 * have gone to sleep or woken before the stop reached it (a runnable thread
 * waits for a CPU first, milliseconds on a busy machine), and what it was
 * doing when stopped is what it did for the rest of the hold: on CPU if it
 * was stopped in its own code, not if in a system call. Threads not held
 * (asleep) keep their state.
 */
static unsigned over_state(const struct sampler *s, const struct sthread *t, unsigned state)
{
        const struct stopper_thread *st =
            t->host_tid > 0 ? stopper_thread(&s->stop, t->host_tid) : NULL;
        if (!st || st->in_syscall < 0)
                return state;
        return st->in_syscall ? state & ~(unsigned)TRACE_STATE_ON_CPU : state | TRACE_STATE_ON_CPU;
}

/*
 * One walked thread to a sample in the trace (or an error count). `stack`:
 * NULL, or the trace stack of its frames when already known (--bpf: the
 * same chain seen before in the batch), and then the one used.
 */
static int sample_thread_as(struct sampler *s, const struct pywalk_thread *th, uint32_t *stack_io,
                            bool known);

static int sample_thread(struct sampler *s, const struct pywalk_thread *th)
{
        return sample_thread_as(s, th, NULL, false);
}

static int sample_thread_as(struct sampler *s, const struct pywalk_thread *th, uint32_t *stack_io,
                            bool known)
{
        /*
         * A thread state still being set up (no thread id yet) is not a
         * thread yet; a list that could not be read is counted as torn.
         */
        if (th->status == 0 && th->thread_id == 0 && th->depth == 0)
                return 0;
        struct sthread *t = NULL;
        if (th->thread_id || th->status == 0) {
                if (!(t = thread_lookup(s, th)))
                        return -ENOMEM;
                t->seen_tick = s->tick;
                thread_bind_tid(s, t, th->native_tid);
        }
        s->st.retries += th->retries;
        if (th->status == 0 && th->retries)
                s->st.recovered++;
        if (th->atomic)
                s->st.captured++;
        if (th->status != 0) {
                if (th->status == PYWALK_TORN)
                        s->st.torn++;
                else
                        s->st.read_errors++;
                if (s->k)
                        tsink_error(s->k, s->pid,
                                    th->status == PYWALK_TORN          ? TRACE_ERROR_TORN
                                    : th->status == PYWALK_CODE_GONE   ? TRACE_ERROR_CODE_GONE
                                    : th->status == PYWALK_CODE_UNREAD ? TRACE_ERROR_NOT_RESIDENT
                                                                       : TRACE_ERROR_READ,
                                    1);
                return 0;
        }
        /*
         * In blocking mode the state is the one from before the threads were
         * stopped (states_before_stop()), or where there are no switch
         * records the /proc letter the stopper read then.
         */
        if (s->bpf) {
                t->running = 1; /* found on a CPU by its timer */
        } else if (s->blocking && t->before_stop >= 0) {
                t->running = t->before_stop;
        } else if (s->blocking) {
                int letter = t->host_tid > 0 ? stopper_thread_state(&s->stop, t->host_tid) : -1;
                t->running = letter < 0 ? -1 : letter == 'R';
        } else {
                t->running = thread_running(s, t);
        }
        unsigned state = 0;
        if (t->running != 0) /* unknown counts as running: never hide samples */
                state |= TRACE_STATE_ON_CPU;
        if (th->gil & PYWALK_GIL_HELD)
                state |= TRACE_STATE_HOLDS_GIL;
        if (th->gil & PYWALK_NO_GIL)
                state |= TRACE_STATE_NO_GIL;
        struct pywalk_thread merged;
        if (s->native) {
                int nrc = native_stack(s, t->host_tid, th, &merged);
                if (nrc != 0)
                        return nrc < 0 ? nrc : 0;
                th = &merged;
        }
        int rc = thread_register(s, t);
        uint32_t stack = known ? *stack_io : TRACE_STACK_EMPTY;
        if (rc == 0 && !known)
                rc = stack_id(s, th, &stack);
        if (rc < 0)
                return rc; /* ends the walk; sampler_tick_finish() reports it */
        if (stack_io)
                *stack_io = stack;
        tsink_sample(s->k, t->ref, s->tick_ns, stack, state);
        if (s->async && (rc = tick_stack_keep(s, th, t->ref, state)) < 0)
                return rc;
        s->st.samples++;
        return s->blocking ? keep_last(s, t->ref, stack, over_state(s, t, state), false) : 0;
}

/*
 * pywalk's callback. While the target's threads are held (--blocking) the
 * walk is only copied: making samples of it may wait for the sink's lock,
 * held through commits and source-file reads, and the target would wait
 * with us. sampler_tick_finish() makes them once the threads are released.
 */
static int on_thread(void *ctx, const struct pywalk_thread *th)
{
        struct sampler *s = ctx;
        if (!stopper_holding())
                return sample_thread(s, th);
        if (s->n_held == s->cap_held) {
                size_t cap = s->cap_held ? 2 * s->cap_held : 16;
                struct pywalk_thread *p = realloc(s->held, cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                s->held = p;
                s->cap_held = cap;
        }
        struct pywalk_thread *copy = &s->held[s->n_held];
        *copy = *th;
        /* The frames' offset for now; a pointer once the buffer stops growing. */
        copy->frames = (struct pywalk_frame *)(uintptr_t)s->held_frames.len;
        if (th->depth &&
            pf_buf_append(&s->held_frames, th->frames, th->depth * sizeof(*th->frames)) < 0)
                return -ENOMEM;
        s->n_held++;
        return 0;
}

/* pywalk's batch reader: the batch, read in the GIL holder's own context. */
static int capture_batch(void *ctx, const struct memsrc_iov *iov, size_t n)
{
        struct sampler *s = ctx;
        uint64_t failed[CAPTURE_FAILED_WORDS];
        int rc = capture_readv(s->capture, s->capture_tid, s->capture_fd, iov, n, NULL, failed);
        /* Ranges not resident there are not in use: read them from here. */
        for (size_t i = 0; rc == 0 && i < n; i++)
                if (failed[i / 64] >> (i % 64) & 1)
                        rc = memsrc_read(&s->mem, iov[i].addr, iov[i].buf, iov[i].len);
        if (rc == 0)
                s->st.captures++;
        else if (rc == -EAGAIN)
                s->st.capture_idle++;
        else
                s->st.capture_failed++;
        return rc;
}

/*
 * Choose the thread whose context this sample's batch is read in: the one
 * holding the GIL, the only one whose Python stack can change meanwhile.
 */
static void capture_choose(struct sampler *s)
{
        s->capture_tid = 0;
        uint64_t holder;
        if (pywalk_gil_holder(s->walk, &holder) < 0 || !holder)
                return;
        for (size_t i = 0; i < s->n_threads; i++) {
                struct sthread *t = &s->threads[i];
                if (t->tstate != holder || t->host_tid <= 0)
                        continue;
                int fd = t->cs ? cpustate_fd(t->cs) : t->trigger_fd;
                if (fd < 0)
                        fd = t->trigger_fd = capture_trigger_open(t->host_tid);
                if (fd >= 0) {
                        s->capture_tid = t->host_tid;
                        s->capture_fd = fd;
                }
                return;
        }
}

void sampler_set_horizon(struct sampler *s, int64_t t_ns)
{
        s->horizon = t_ns;
}

/*
 * --blocking: each thread's state from its switch records, as in the default
 * mode, read before the stop. A thread we let go from a stop has been
 * switched out into it, and until it gets a CPU again its newest record
 * says so: it is not asleep but waiting to go on, as after a preemption,
 * which is what a ring that has not moved since we let it go tells. (Taken
 * as asleep, a thread busy 38% of the time came out 3 points less busy at
 * 1 kHz; /proc's letter instead says 'R' for a thread woken from a sleep
 * and waiting for a CPU, still inside the call that slept, and on a busy
 * machine one busy 42% of the time came out 6-7 points busier.)
 */
static void states_before_stop(struct sampler *s)
{
        for (size_t i = 0; i < s->n_threads; i++) {
                struct sthread *t = &s->threads[i];
                t->before_stop = -1;
                if (!t->cs)
                        continue;
                if (t->let_go && cpustate_head(t->cs) == t->let_go)
                        t->before_stop = 1;
                else
                        t->before_stop = thread_running(s, t);
        }
}

static void note_let_go(struct sampler *s)
{
        for (size_t i = 0; i < s->n_threads; i++) {
                struct sthread *t = &s->threads[i];
                const struct stopper_thread *st =
                    t->cs && t->host_tid > 0 ? stopper_thread(&s->stop, t->host_tid) : NULL;
                t->let_go = st && st->was_held ? cpustate_head(t->cs) : 0;
        }
}

bool sampler_held(const struct sampler *s, int64_t since_ns, int64_t t_ns)
{
        int64_t from = since_ns < s->hold_from ? since_ns : s->hold_from;
        return s->hold_until && from <= t_ns && t_ns <= s->hold_until;
}

bool sampler_took(const struct sampler *s, int64_t t_ns)
{
        return s->took_at == t_ns;
}

void sampler_hold_over(struct sampler *s, int64_t t_ns)
{
        s->took_at = t_ns;
        /*
         * An instant of the pass before this process's own hold began (other
         * processes were held then): the stacks were read at the hold, the
         * sample is the tick's own instant, as a late one would be.
         */
        if (t_ns < s->hold_from)
                t_ns = s->hold_from;
        /*
         * Never at the instant of another sample of the hold (the pass's
         * own, at hold_from, or one clamped before): a thread has one sample
         * per instant. A nanosecond later says the same.
         */
        if (t_ns <= s->hold_last)
                t_ns = s->hold_last + 1;
        s->hold_last = t_ns;
        for (size_t i = 0; i < s->n_last; i++) {
                tsink_sample(s->k, s->last[i].ref, t_ns, s->last[i].stack, s->last[i].state);
                if (s->last[i].task) {
                        s->st.task_samples++;
                } else {
                        s->st.samples++;
                        s->st.held_over++;
                }
        }
}

int sampler_tick_prepare(struct sampler *s, uint64_t draw, char *err, size_t errlen)
{
        s->tick++;
        s->st.ticks++;
        if (!s->blocking)
                return 0;
        states_before_stop(s);
        int rc = stopper_prepare(&s->stop, s->pid, draw, err, errlen);
        for (size_t i = 0; rc == 0 && i < s->n_threads; i++) {
                const struct sthread *t = &s->threads[i];
                if (t->cs && t->host_tid > 0 && cpustate_on_cpu(t->cs) == 0)
                        stopper_set_on_cpu(&s->stop, t->host_tid, false);
        }
        return rc;
}

int sampler_tick_stop(struct sampler *s, int64_t t_ns, bool on_cpu, char *err, size_t errlen)
{
        s->tick_ns = t_ns;
        if (!s->blocking)
                return 0;
        return stopper_request(&s->stop, on_cpu, err, errlen);
}

void sampler_tick_read(struct sampler *s)
{
        const int64_t t_ns = s->tick_ns;
        if (s->blocking) {
                stopper_wait(&s->stop);
                if (s->native)
                        native_capture_all(s);
        } else if (s->capture) {
                capture_choose(s);
                pywalk_set_batch_reader(s->walk, s->capture_tid ? capture_batch : NULL, s);
        }
        caches_trim(s);
        s->write_rc = 0;
        s->n_held = 0;
        s->held_frames.len = 0;
        s->n_last = 0;
        s->hold_from = t_ns;
        s->hold_last = t_ns;
        s->hold_until = 0;
        s->n_tick_stacks = 0;
        s->tick_frames.len = 0;
        s->walk_rc = pywalk_sample(s->walk, on_thread, s);
}

void sampler_release(struct sampler *s)
{
        if (!s->blocking)
                return;
        if (stopper_holds(&s->stop)) {
                s->hold_until = pf_now_mono_ns();
                if (s->hold_until >= s->horizon)
                        stopper_read_syscalls(&s->stop);
        }
        stopper_resume(&s->stop);
        note_let_go(s);
}

int sampler_tick_finish(struct sampler *s, char *err, size_t errlen)
{
        int rc = s->walk_rc;
        const int64_t t_ns = s->tick_ns;
        for (size_t i = 0; i < s->n_held && rc >= 0; i++) {
                struct pywalk_thread *th = &s->held[i];
                th->frames = (struct pywalk_frame *)(s->held_frames.data + (uintptr_t)th->frames);
                rc = sample_thread(s, th);
        }
        /* --native: the threads that ran no Python (after the Python ones claimed theirs). */
        for (size_t i = 0; s->native && rc >= 0 && i < native_capture_count(s->native); i++)
                rc = native_only_thread(s, native_capture_tid(s->native, i));
        if (rc >= 0 && s->async && s->k)
                rc = sample_tasks(s);
        if (s->write_rc < 0) {
                snprintf(err, errlen, "writing the trace: %s", s->write_msg);
                return s->write_rc;
        }
        if (rc == -ENOMEM) {
                snprintf(err, errlen, "out of memory");
                return rc;
        }
        if (rc == -ESRCH || (rc < 0 && kill(s->pid, 0) < 0 && errno == ESRCH)) {
                snprintf(err, errlen, "process %d has exited", (int)s->pid);
                return -ESRCH;
        }
        if (rc < 0) {
                /* The whole walk failed (e.g. a torn thread list): count it, go on. */
                s->st.read_errors++;
                if (s->k)
                        tsink_error(s->k, s->pid, TRACE_ERROR_READ, 1);
        }
        /* With a walker of their own, names are read by the sink's thread (names_job). */
        if (rc >= 0 && s->k && !s->names_walk &&
            t_ns >= atomic_load_explicit(&s->names_due_ns, memory_order_relaxed)) {
                tsink_lock(s->k);
                rc = names_refresh(s, s->walk, t_ns);
                if (rc < 0)
                        rc = write_failed(s, rc);
                tsink_unlock(s->k);
        }
        if (rc < 0 && s->write_rc < 0) {
                snprintf(err, errlen, "writing the trace: %s", s->write_msg);
                return s->write_rc;
        }
        if ((s->tick & 255) == 0 && (!s->k || tsink_trylock(s->k))) {
                threads_gc(s); /* not while the sink commits: next time */
                if (s->k)
                        tsink_unlock(s->k);
        }
        ends_push(s);
        return 0;
}

/* ---- --bpf: samples taken in the kernel (bpfwalk.h) -------------------- */

int sampler_set_bpf(struct sampler *s, struct bpfwalk *b)
{
        s->bpf = b;
        s->no_switch_events = true; /* every sample is of a thread on a CPU */
        return 0;
}

/* pywalk's callback in a refresh: know the thread, tell the BPF program. */
static int bpf_learn(void *ctx, const struct pywalk_thread *th)
{
        struct sampler *s = ctx;
        if (!th->thread_id)
                return 0;
        struct sthread *t = thread_lookup(s, th);
        if (!t)
                return -ENOMEM;
        t->seen_tick = s->tick;
        thread_bind_tid(s, t, th->native_tid);
        if (t->host_tid > 0)
                bpfwalk_set_thread(s->bpf, t->host_tid, th->tstate_addr, th->thread_id);
        return 0;
}

int sampler_bpf_refresh(struct sampler *s, int64_t now_ns, char *err, size_t errlen)
{
        s->tick++;
        s->tick_ns = now_ns;
        s->bpf_refresh = false;
        int rc = pywalk_sample(s->walk, bpf_learn, s);
        if (rc == -ESRCH || (rc < 0 && kill(s->pid, 0) < 0 && errno == ESRCH)) {
                snprintf(err, errlen, "process %d has exited", (int)s->pid);
                return -ESRCH;
        }
        if (rc == -ENOMEM) {
                snprintf(err, errlen, "out of memory");
                return rc;
        }
        struct bpfw_proc p;
        char msg[256];
        if (rc == 0 && pywalk_bpf_proc(s->walk, &p, msg, sizeof(msg)) == 0) {
                s->bpf_code_mask = p.L.fr_code_mask;
                if (bpfwalk_set_proc(s->bpf, s->pid, &p) == 0)
                        s->bpf_pushed++;
        } else if (!s->bpf_pushed && rc == 0) {
                snprintf(err, errlen, "%s", msg);
                return PYFIND_UNSUPPORTED;
        }
        if (s->k && !s->names_walk &&
            now_ns >= atomic_load_explicit(&s->names_due_ns, memory_order_relaxed)) {
                tsink_lock(s->k);
                int nrc = names_refresh(s, s->walk, now_ns);
                if (nrc < 0)
                        nrc = write_failed(s, nrc);
                tsink_unlock(s->k);
                if (nrc < 0) {
                        snprintf(err, errlen, "writing the trace: %s", s->write_msg);
                        return nrc;
                }
        }
        if ((s->tick & 15) == 0 && (!s->k || tsink_trylock(s->k))) {
                threads_gc(s);
                if (s->k)
                        tsink_unlock(s->k);
        }
        ends_push(s);
        return 0;
}

bool sampler_bpf_wants_refresh(const struct sampler *s)
{
        return s->bpf_refresh || !s->bpf_pushed;
}

void sampler_bpf_begin(struct sampler *s)
{
        s->write_rc = 0;
        s->batch++;
        s->memo_raw.len = 0;
        pywalk_bpf_begin(s->walk);
        caches_trim(s);
        /*
         * --native: a capture waits for its thread's sample, which may come
         * in the next batch (not yet in the ring when this one was taken);
         * one whose sample was lost is replaced by the thread's next. Only
         * past a bound are they all forgotten.
         */
        if (s->native && native_capture_count(s->native) > 256)
                native_begin(s->native);
}

#define MEMO_SLOTS 1024
#define MEMO_FRAME 32 /* bytes of a struct bpfw_frame from `code` on: what decoding reads */

static uint64_t memo_hash(const struct bpfw_event *e)
{
        uint64_t h = 0x9e3779b97f4a7c15ull ^ e->depth;
        for (uint32_t i = 0; i < e->depth; i++) {
                const struct bpfw_frame *f = &e->frames[i];
                uint64_t tail;
                memcpy(&tail, &f->owner, 8);
                h = (h ^ f->code) * 0x100000001b3ull;
                h = (h ^ f->pos) * 0x100000001b3ull;
                h = (h ^ tail) * 0x100000001b3ull;
                h = (h ^ f->ident) * 0x100000001b3ull;
        }
        return h ^ h >> 29;
}

/* The memo slot holding this event's chain, NULL when none does. */
static struct bpf_memo *memo_find(struct sampler *s, const struct bpfw_event *e, uint64_t h)
{
        struct bpf_memo *m = &s->memo[h % MEMO_SLOTS];
        if (m->batch != s->batch || m->hash != h || m->depth != e->depth)
                return NULL;
        const uint8_t *raw = (const uint8_t *)s->memo_raw.data + m->off;
        for (uint32_t i = 0; i < e->depth; i++)
                if (memcmp(raw + (size_t)i * MEMO_FRAME, &e->frames[i].code, MEMO_FRAME) != 0)
                        return NULL;
        return m;
}

static void memo_keep(struct sampler *s, const struct bpfw_event *e, uint64_t h, uint32_t stack)
{
        size_t off = s->memo_raw.len;
        if (pf_buf_reserve(&s->memo_raw, (size_t)e->depth * MEMO_FRAME) < 0)
                return; /* not kept: decoded again next time */
        for (uint32_t i = 0; i < e->depth; i++)
                pf_buf_append(&s->memo_raw, &e->frames[i].code, MEMO_FRAME);
        s->memo[h % MEMO_SLOTS] = (struct bpf_memo){
            .hash = h, .batch = s->batch, .off = off, .depth = e->depth, .stack = stack};
}

int sampler_bpf_event(struct sampler *s, const struct bpfw_event *e)
{
        if (e->status != BPFW_OK) {
                enum trace_error_kind kind =
                    e->status == BPFW_FAULT ? TRACE_ERROR_NOT_RESIDENT : TRACE_ERROR_INVALID;
                if (e->status != BPFW_FAULT) {
                        s->bpf_refresh = true;
                        s->st.read_errors++;
                } else {
                        s->st.read_errors++;
                }
                if (s->k)
                        tsink_error(s->k, s->pid, kind, 1);
                return 0;
        }
        /*
         * A chain cut at the bound is checked for loops each time: not
         * remembered; nor one whose stack has native frames merged in.
         */
        bool memo = !(e->flags & BPFW_F_TRUNCATED) && e->depth > 0 && !s->native;
        if (memo && !s->memo && !(s->memo = calloc(MEMO_SLOTS, sizeof(*s->memo))))
                memo = false;
        uint64_t h = memo ? memo_hash(e) : 0;
        const struct bpf_memo *m = memo ? memo_find(s, e, h) : NULL;
        struct pywalk_thread th;
        int rc = 0;
        if (m) {
                th = (struct pywalk_thread){.tstate_addr = e->tstate,
                                            .thread_id = e->thread_id,
                                            .interp_id = 0,
                                            .gil = PYWALK_GIL_UNKNOWN,
                                            .atomic = true,
                                            .depth = m->depth};
                if (e->flags & BPFW_F_GIL_KNOWN)
                        th.gil = e->flags & BPFW_F_GIL_HELD ? PYWALK_GIL_HELD : 0;
        } else if ((rc = pywalk_bpf_decode(s->walk, e, &th)) < 0) {
                if (rc == -ENOMEM)
                        return rc;
                /*
                 * Its memory is gone (the process has exited since): a code
                 * object the cache did not know cannot be read any more.
                 */
                s->st.read_errors++;
                if (s->k)
                        tsink_error(s->k, s->pid, TRACE_ERROR_CODE_GONE, 1);
                return 0;
        }
        /* The OS thread is the one the timer found: bind it as the refresh did. */
        th.native_tid = -1;
        for (size_t i = 0; i < s->n_threads; i++)
                if (s->threads[i].tstate == th.tstate_addr &&
                    s->threads[i].thread_id == th.thread_id) {
                        th.native_tid = s->threads[i].ns_tid;
                        break;
                }
        if (th.native_tid < 0) {
                s->bpf_refresh = true; /* a thread new to us (found as the GIL's holder) */
                if (s->same_pidns)
                        th.native_tid = (int64_t)e->tid;
        }
        s->tick_ns = (int64_t)e->time_ns;
        if (th.status == 0 && (e->flags & BPFW_F_TRUNCATED) && s->k)
                tsink_error(s->k, s->pid, TRACE_ERROR_TRUNCATED, 1);
        uint32_t stack = m ? m->stack : TRACE_STACK_EMPTY;
        uint64_t samples = s->st.samples;
        if (!m && th.status == 0 && (e->flags & BPFW_F_NEW_CODE)) {
                /*
                 * Every code object of the chain is decoded and cached now:
                 * the program need not wake us for them again, nor read
                 * those that live long (functions' code: we check them).
                 * (Without the flag, the walk found all of them in its
                 * table already: nothing to tell.)
                 */
                for (uint32_t i = 0; i < e->depth; i++) {
                        const struct bpfw_frame *f = &e->frames[i];
                        uint64_t code = f->code & s->bpf_code_mask;
                        if (f->ident)
                                bpfwalk_known(s->bpf, code, f->ident,
                                              pywalk_bpf_code_lasting(s->walk, code, f->ident));
                }
        } else if (!m && th.status == PYWALK_CODE_GONE) {
                /* An entry the program trusted may be stale: it reads those objects again. */
                for (uint32_t i = 0; i < e->depth; i++)
                        if (e->frames[i].fflags & BPFW_FR_TABLE_IDENT)
                                bpfwalk_known(s->bpf, e->frames[i].code & s->bpf_code_mask, 0,
                                              false);
        }
        rc = sample_thread_as(s, &th, &stack, m != NULL);
        if (rc >= 0 && memo && !m && th.status == 0 && s->st.samples != samples)
                memo_keep(s, e, h, stack);
        if (s->native)
                native_capture_drop(s->native, (pid_t)e->tid);
        return rc < 0 ? rc : 0;
}

int sampler_bpf_native(struct sampler *s, const struct bpfw_native *nv)
{
        if (!s->native)
                return 0;
        pid_t tid = (pid_t)nv->tid;
        if (nv->status != BPFW_OK || native_capture_copy(s->native, tid, (const uint64_t *)nv->regs,
                                                         nv->stack, nv->len) < 0) {
                /* No capture: its sample is counted as a read error by native_stack(). */
                native_capture_drop(s->native, tid);
                if (!(nv->flags & BPFW_F_NO_PYTHON))
                        return 0;
                s->st.read_errors++;
                if (s->k)
                        tsink_error(s->k, s->pid, TRACE_ERROR_READ, 1);
                return 0;
        }
        if (!(nv->flags & BPFW_F_NO_PYTHON))
                return 0; /* its sample follows */
        s->tick_ns = (int64_t)nv->time_ns;
        int rc = native_only_thread(s, tid);
        native_capture_drop(s->native, tid);
        return rc < 0 ? rc : 0;
}

int sampler_bpf_end(struct sampler *s, char *err, size_t errlen)
{
        pywalk_bpf_end(s->walk);
        ends_push(s);
        if (s->write_rc < 0) {
                snprintf(err, errlen, "writing the trace: %s", s->write_msg);
                return s->write_rc;
        }
        return 0;
}

/* ---- dump ------------------------------------------------------------- */

struct dump_name {
        int64_t interp_id;
        uint64_t thread_id;
        char *name;
};

struct dump_ctx {
        struct sampler *s;
        FILE *out;
        struct dump_name *names; /* threading's names, read before the stacks */
        size_t n_names, cap_names;
};

static void dump_on_name(void *ctx, int64_t interp_id, uint64_t thread_id, const char *name)
{
        struct dump_ctx *d = ctx;
        if (d->n_names == d->cap_names) {
                size_t cap = d->cap_names ? 2 * d->cap_names : 16;
                struct dump_name *p = realloc(d->names, cap * sizeof(*p));
                if (!p)
                        return;
                d->names = p;
                d->cap_names = cap;
        }
        char *copy = strdup(name);
        if (copy)
                d->names[d->n_names++] = (struct dump_name){interp_id, thread_id, copy};
}

static const char *dump_name_of(const struct dump_ctx *d, const struct pywalk_thread *th)
{
        for (size_t i = 0; i < d->n_names; i++)
                if (d->names[i].thread_id == th->thread_id &&
                    d->names[i].interp_id == th->interp_id)
                        return d->names[i].name;
        return NULL;
}

/* A stack, leaf first: Python frames as py-spy dump prints them, native ones with their module. */
static void dump_frames(FILE *out, const struct pywalk_thread *th)
{
        for (uint32_t i = 0; i < th->depth; i++) {
                const struct pywalk_frame *f = &th->frames[i];
                const char *name = f->code->qualname ? f->code->qualname : f->code->name;
                if (f->code->id & NATIVE_CODE_BIT) {
                        const struct native_sym *sym = ((const struct ncode *)f->code)->sym;
                        const char *mod = strrchr(sym->module, '/');
                        mod = mod ? mod + 1 : sym->module;
                        if (f->line >= 0)
                                fprintf(out, "    %s (%s:%d) [%s]\n", name, f->code->file,
                                        (int)f->line, mod);
                        else
                                fprintf(out, "    %s [%s]\n", name, mod);
                } else if (f->line >= 0) {
                        fprintf(out, "    %s (%s:%d)\n", name, f->code->file, (int)f->line);
                } else {
                        fprintf(out, "    %s (%s)\n", name, f->code->file);
                }
        }
}

static int dump_thread(void *ctx, const struct pywalk_thread *th)
{
        struct dump_ctx *d = ctx;
        struct sampler *s = d->s;
        struct sthread *t = thread_lookup(s, th);
        if (!t)
                return -ENOMEM;
        thread_bind_tid(s, t, th->native_tid);
        int running = t->stat_fd >= 0 ? procfs_thread_running(t->stat_fd) : -1;
        const char *tname = dump_name_of(d, th);
        fprintf(d->out, "Thread %#llx", (unsigned long long)th->thread_id);
        if (tname)
                fprintf(d->out, " \"%s\"", tname);
        if (t->host_tid > 0)
                fprintf(d->out, " (tid %d)", (int)t->host_tid);
        fprintf(d->out, " %s%s\n",
                running == 1   ? "active"
                : running == 0 ? "idle"
                               : "",
                (th->gil & PYWALK_GIL_HELD) ? ", holding the GIL" : "");
        if (th->status != 0) {
                fprintf(d->out, "    <stack could not be read consistently>\n");
                return 0;
        }
        struct pywalk_thread merged;
        if (s->native) {
                int rc = native_stack(s, t->host_tid, th, &merged);
                if (rc < 0)
                        return rc;
                if (rc == 0)
                        th = &merged;
                else
                        fprintf(d->out, "    <native stack could not be merged: Python only>\n");
        }
        dump_frames(d->out, th);
        return 0;
}

/* --dump --native: the threads that run no Python, after the Python ones. */
static int dump_native_only(struct sampler *s, FILE *out)
{
        for (size_t i = 0; i < native_capture_count(s->native); i++) {
                pid_t tid = native_capture_tid(s->native, i);
                bool python = false;
                for (size_t j = 0; j < s->n_threads && !python; j++)
                        python = s->threads[j].host_tid == tid;
                if (python)
                        continue;
                char comm[64];
                if (procfs_thread_comm(s->pid, tid, comm, sizeof(comm)) < 0)
                        comm[0] = 0;
                int letter = stopper_thread_state(&s->stop, tid);
                fprintf(out, "Thread (tid %d) \"%s\" %s, no Python\n", (int)tid, comm,
                        letter == 'R' ? "active" : "idle");
                struct pywalk_thread merged;
                int rc = native_stack(s, tid, NULL, &merged);
                if (rc < 0)
                        return rc;
                if (rc == 0)
                        dump_frames(out, &merged);
                else
                        fprintf(out, "    <native stack could not be read>\n");
        }
        return 0;
}

#define DUMP_TREE_DEPTH 64 /* levels of the task tree printed */

/* Task i, its await chain, and under it the tasks it awaits (gather's, a TaskGroup's...). */
static void dump_task(FILE *out, const struct pywalk_task *v, size_t n, size_t i, char *prefix,
                      size_t plen, bool last, unsigned level)
{
        const struct pywalk_task *tk = &v[i];
        fprintf(out, "%s%s (T) %s%s", prefix, last ? "└──" : "├──", tk->name->name,
                tk->running ? " (running)" : "");
        if (tk->awaits)
                fprintf(out, " awaiting task %s", v[tk->awaits - 1].name->name);
        else if (tk->awaiting[0])
                fprintf(out, " awaiting %s", tk->awaiting);
        fputc('\n', out);
        /* Its await chain, outermost first, under it. */
        const char *bar = last ? "    " : "│   ";
        for (uint32_t k = tk->depth; k-- > 0;) {
                const struct pywalk_frame *f = &tk->frames[k];
                const char *name = f->code->qualname ? f->code->qualname : f->code->name;
                fprintf(out, "%s%s    %s (%s:%d)\n", prefix, bar, name, f->code->file,
                        (int)f->line);
        }
        if (level + 1 >= DUMP_TREE_DEPTH || plen + strlen(bar) + 1 > 4 * 3 * DUMP_TREE_DEPTH)
                return;
        size_t plen2 = plen + strlen(bar);
        strcpy(prefix + plen, bar);
        size_t lastkid = n;
        for (size_t j = 0; j < n; j++)
                if (v[j].parent == i + 1)
                        lastkid = j;
        for (size_t j = 0; j < n; j++)
                if (v[j].parent == i + 1)
                        dump_task(out, v, n, j, prefix, plen2, j == lastkid, level + 1);
        prefix[plen] = 0;
}

/* The task trees of each thread's loop, as python -m asyncio pstree prints them. */
static void dump_tasks(struct sampler *s, struct dump_ctx *d)
{
        const struct pywalk_task *v;
        size_t n;
        pywalk_tasks(s->walk, &v, &n);
        char prefix[4 * 3 * DUMP_TREE_DEPTH + 8] = "";
        for (size_t i = 0; i < n; i++) {
                bool first = v[i].thread_id != 0;
                for (size_t j = 0; j < i && first; j++)
                        first = v[j].thread_id != v[i].thread_id;
                if (!first)
                        continue;
                const char *tname = NULL;
                for (size_t k = 0; k < d->n_names; k++)
                        if (d->names[k].thread_id == v[i].thread_id)
                                tname = d->names[k].name;
                fprintf(d->out, "\nTasks of thread %#llx", (unsigned long long)v[i].thread_id);
                if (tname)
                        fprintf(d->out, " \"%s\"", tname);
                fprintf(d->out, ":\n");
                size_t last = n;
                for (size_t j = 0; j < n; j++)
                        if (!v[j].parent && v[j].thread_id == v[i].thread_id)
                                last = j;
                for (size_t j = 0; j < n; j++)
                        if (!v[j].parent && v[j].thread_id == v[i].thread_id)
                                dump_task(d->out, v, n, j, prefix, 0, j == last, 0);
        }
}

/* Know the threads and their OS thread ids before the dump's look. */
static int dump_learn_thread(void *ctx, const struct pywalk_thread *th)
{
        struct sampler *s = ctx;
        struct sthread *t = thread_lookup(s, th);
        if (!t)
                return -ENOMEM;
        thread_bind_tid(s, t, th->native_tid);
        return 0;
}

int sampler_dump(struct sampler *s, FILE *out, char *err, size_t errlen)
{
        char cmdline[4096];
        if (procfs_cmdline(s->pid, cmdline, sizeof(cmdline)) < 0)
                cmdline[0] = 0;
        fprintf(out, "Process %d: %s\nPython v%s (%s)\n\n", (int)s->pid, cmdline, s->version,
                s->target.elf_path);
        struct dump_ctx d = {s, out, NULL, 0, 0};
        pywalk_thread_names(s->walk, dump_on_name, &d); /* none is fine */
        /*
         * One look, so no hurry: a stack read torn is read again until it
         * is whole, and read in the running thread's context where we can.
         */
        pywalk_set_retries(s->walk, DUMP_RETRIES);
        if (!s->blocking && s->capture) {
                pywalk_sample(s->walk, dump_learn_thread, s); /* whose context to read in */
                capture_choose(s);
                pywalk_set_batch_reader(s->walk, s->capture_tid ? capture_batch : NULL, s);
        }
        if (s->blocking) {
                int rc = stopper_stop(&s->stop, s->pid, err, errlen);
                if (rc < 0) {
                        for (size_t i = 0; i < d.n_names; i++)
                                free(d.names[i].name);
                        free(d.names);
                        return rc;
                }
                if (s->native)
                        native_capture_all(s);
        }
        int rc = pywalk_sample(s->walk, dump_thread, &d);
        if (s->blocking)
                stopper_resume(&s->stop);
        if (rc >= 0 && s->async)
                dump_tasks(s, &d);
        if (rc >= 0 && s->native)
                rc = dump_native_only(s, out);
        for (size_t i = 0; i < d.n_names; i++)
                free(d.names[i].name);
        free(d.names);
        if (rc < 0) {
                snprintf(err, errlen, "cannot read process %d: %s", (int)s->pid, strerror(-rc));
                return rc;
        }
        return 0;
}
