/*
 * pywalk.h - walk the Python threads and frames of a target through a memsrc.
 *
 * One walker for every CPython version: struct layouts are data (a table per
 * minor version for 2.7-3.12, the target's own _Py_DebugOffsets from 3.13
 * on), chosen once at pywalk_open(). Everything read from the target is
 * untrusted: walks are bounded, cycles detected, object types and string
 * lengths checked. A sample that cannot be read consistently is reported as
 * torn, never as garbage frames.
 */
#ifndef PYFLAME_PYWALK_H
#define PYFLAME_PYWALK_H

#include <stdbool.h>
#include <stdint.h>

#include "memsrc.h"
#include "pyfind.h"

#define PYWALK_MAX_DEPTH   4096
#define PYWALK_MAX_THREADS 4096

/*
 * A code object as decoded once and cached by the walker (owned by it; valid
 * until the next pywalk_sample(): the cache is bounded, and entries not seen
 * for a while are forgotten). A code object freed and replaced by another at
 * the same address gets a new entry and a new id; ids are never reused, so
 * they can key a cache of the caller's.
 */
struct pywalk_code {
        uint32_t id;          /* unique per walker, dense from 1: use it as a cache key */
        const char *name;     /* co_name, UTF-8 */
        const char *qualname; /* co_qualname (3.11+), else NULL */
        const char *file;     /* co_filename, UTF-8 */
        int32_t first_line;   /* co_firstlineno */
        bool task;            /* not code: an asyncio task, `name` its name (pywalk_tasks()) */
        /*
         * A task's: the name its frame carries in a trace when not `name`:
         * "Task-N" for a name CPython made up ("Task-<counter>"), so that the
         * many tasks of one kind share their stacks; NULL otherwise.
         */
        const char *group;
};

struct pywalk_frame {
        const struct pywalk_code *code;
        int32_t line; /* current line, or -1 when unknown */
        /*
         * The oldest frame of one C-level call of the eval loop: frames from
         * the leaf (or the last entry frame) up to this one were run by one
         * native eval function activation. Every frame before 3.11.
         */
        bool entry;
};

/* GIL / interpreter state of one thread at sample time. */
#define PYWALK_GIL_HELD    0x1u /* holds the GIL (free-threaded: attached to the interpreter) */
#define PYWALK_GIL_UNKNOWN 0x2u /* could not tell */
#define PYWALK_NO_GIL      0x4u /* free-threaded build running without a GIL */

struct pywalk_thread {
        uint64_t tstate_addr;
        uint64_t thread_id; /* threading.get_ident() (pthread_t) */
        int64_t native_tid; /* kernel TID in the target's PID namespace, -1 when unknown */
        int64_t interp_id;
        unsigned gil;     /* PYWALK_GIL_* */
        int status;       /* 0, or a negative errno / PYWALK_TORN: frames not valid */
        unsigned retries; /* fresh reads after a torn one (pywalk_set_retries) */
        bool atomic;      /* read whole from one batch of the batch reader */
        uint32_t depth;   /* number of frames, leaf (innermost) first */
        struct pywalk_frame *frames;
};

#define PYWALK_TORN (-10000) /* inconsistent read (cycle, bad type, bound hit) */
/* --bpf: a code object of the stack was freed (or replaced) before it could be read. */
#define PYWALK_CODE_GONE (-10001)
/* --bpf: a code object of the stack could not be read in the kernel (not resident). */
#define PYWALK_CODE_UNREAD (-10002)

struct pywalk;

/*
 * Prepare to walk the interpreter `t` through `m` (which must outlive the
 * walker): choose the layout, read and validate _Py_DebugOffsets on 3.13+,
 * check structurally that the interpreter and thread list are what they claim
 * (tstate->interp == interp). Returns 0, or a negative enum pyfind_status with
 * a one-line message in err (PYFIND_NOT_READY while the interpreter is still
 * starting up; PYFIND_UNSUPPORTED for a layout we cannot validate).
 */
int pywalk_open(const struct pyfind_target *t, struct memsrc *m, struct pywalk **out, char *err,
                size_t errlen);

void pywalk_close(struct pywalk *w);

/*
 * Called once per Python thread by pywalk_sample(). `th` and its frames are
 * valid only during the call. Return 0 to go on, a positive value to stop
 * the walk there, or a negative errno to stop it and have pywalk_sample()
 * return that.
 */
typedef int (*pywalk_thread_fn)(void *ctx, const struct pywalk_thread *th);

/*
 * Sample every thread of every interpreter once: newest thread first (as
 * CPython links them), those with no frames after the others of their
 * interpreter. A thread state with no frames and the thread id or TID of
 * another state of its interpreter is not reported (before 3.12, a new
 * thread's state carries its creator's ids until the thread starts). Returns 0 (per-thread
 * failures are reported through th->status, not here), a negative errno
 * when the process is gone (-ESRCH) or unreadable, or the negative value a
 * call of fn returned (its threads after it are not walked).
 */
int pywalk_sample(struct pywalk *w, pywalk_thread_fn fn, void *ctx);

/*
 * Called once per named thread by pywalk_thread_names(): the thread whose
 * state has `thread_id` in interpreter `interp_id` (as in struct
 * pywalk_thread) is called `name` (UTF-8, valid only during the call).
 */
typedef void (*pywalk_name_fn)(void *ctx, int64_t interp_id, uint64_t thread_id, const char *name);

/*
 * Read the names threading gave the threads (threading.Thread.name, found
 * through threading._active in each interpreter's sys.modules) and report
 * each through fn. Costs a few dozen reads, more the first time: call it
 * about once a second and when a thread appears, never per sample (it does
 * not touch the samples' prefetch). Threads threading does not know (not
 * imported, started from C and never asked for current_thread(), not yet
 * registered) get no call; on 3.15 only threads whose attributes live in a
 * dict of their own are named. Returns the number of names reported, or a
 * negative errno when the process is gone (-ESRCH) or unreadable; anything
 * else that does not read or fit means no name, never an error.
 */
int pywalk_thread_names(struct pywalk *w, pywalk_name_fn fn, void *ctx);

/*
 * Read a thread whose stack was torn (it changed while it was read) again at
 * once, up to `retries` times, each time in one fresh batch of everything the
 * sample used; th->retries says how many it took. 0 (the default) reports a
 * torn read at once.
 */
void pywalk_set_retries(struct pywalk *w, unsigned retries);

/*
 * The thread state holding the GIL of the main interpreter, read now from the
 * target (one small read): *tstate is 0 when none does, when the build has
 * no GIL, or before the first sample on 3.12+. Returns 0, or a negative errno
 * when the process is gone or unreadable.
 */
int pywalk_gil_holder(struct pywalk *w, uint64_t *tstate);

/*
 * Reads a batch of ranges at one instant (capture.h): called with the batch
 * that starts each sample (and each retry's), the ranges the last sample
 * used. Returns 0 when every range was read at one instant; anything else
 * (nothing read) and the walker reads the batch itself.
 */
typedef int (*pywalk_batch_fn)(void *ctx, const struct memsrc_iov *iov, size_t n);

/*
 * Read the batches through fn (NULL: with the memory source, the default).
 * A thread whose walk then needed memory outside the batch (its stack changed
 * shape since the last sample) is read again, as a torn one is; th->atomic
 * says which threads were read whole from a batch of fn.
 */
void pywalk_set_batch_reader(struct pywalk *w, pywalk_batch_fn fn, void *ctx);

/*
 * asyncio tasks (pyflame-record --async). A live (pending) task of the
 * target: its await chain as frames, and who awaits it. Valid until the
 * next pywalk_sample().
 */
struct pywalk_task {
        uint64_t addr;      /* the Task object */
        uint64_t thread_id; /* threading.get_ident() of its loop's thread; 0 when not running */
        /* 1 + index of the task awaiting it (await, gather, TaskGroup); 0 none */
        uint32_t parent;
        uint32_t awaits; /* 1 + index of the task it awaits directly; 0 none */
        bool running;    /* its coroutine was executing: its frames are its thread's stack */
        /* a pseudo code (task = true) naming the task */
        const struct pywalk_code *name;
        /* its coroutine's code (to find it in the thread's stack) */
        const struct pywalk_code *root;
        uint32_t depth; /* frames of the await chain, innermost first */
        struct pywalk_frame *frames;
        char awaiting[32]; /* the type of the future it awaits ("Future", "_GatheringFuture"...) */
};

#define PYWALK_MAX_TASKS (1u << 17) /* tasks reported by one sample at most */

/*
 * Read the asyncio tasks in every pywalk_sample() from now on, right after
 * the threads (pytasks.c: batched reads, level by level).
 * Returns 0, or PYFIND_UNSUPPORTED with a message when this version's task
 * layout is unknown (the walker is unchanged then), -ENOMEM.
 */
int pywalk_set_tasks(struct pywalk *w, char *err, size_t errlen);

/*
 * The tasks the last pywalk_sample() found (none when asyncio is not
 * imported or no loop has tasks). Owned by the walker.
 */
void pywalk_tasks(const struct pywalk *w, const struct pywalk_task **tasks, size_t *n);

/* Code objects the walker holds decoded now (tests: the cache stays bounded). */
size_t pywalk_code_entries(const struct pywalk *w);

/* Number of memory reads issued so far (benchmarks). */
uint64_t pywalk_reads(const struct pywalk *w);

/*
 * pyflame-record --bpf (bpfwalk.h): the frames are copied by a BPF program
 * in the sampled thread's own context; the walker describes its layout to
 * that program and decodes what it copied, with the same code cache and
 * checks as its own walks.
 */
struct bpfw_proc;
struct bpfw_event;

/*
 * Describe this interpreter to the BPF program (bpfwalk_shared.h): where
 * the frame chain and the GIL's holder are. Call after a pywalk_sample()
 * (3.12+ finds the GIL then). Returns 0, or PYFIND_UNSUPPORTED with a
 * message for a layout the program cannot walk.
 */
int pywalk_bpf_proc(struct pywalk *w, struct bpfw_proc *out, char *err, size_t errlen);

/*
 * Decode events of the BPF program between pywalk_bpf_begin() and
 * pywalk_bpf_end() (one batch, like one sample: code objects are read
 * through its snapshot). An event with status BPFW_OK gives th (its frames
 * valid until the next call): th->status 0, or PYWALK_TORN when its frames
 * do not make a stack, or a negative errno that ends the batch (-ESRCH).
 */
void pywalk_bpf_begin(struct pywalk *w);
/*
 * Whether the code object at `code` with identity `ident` is cached and
 * lives long (a function's: not a module body's, not code compiled at run
 * time), so that the program may take its identity from its table
 * (bpfwalk_known()).
 */
bool pywalk_bpf_code_lasting(struct pywalk *w, uint64_t code, uint64_t ident);
int pywalk_bpf_decode(struct pywalk *w, const struct bpfw_event *e, struct pywalk_thread *th);
void pywalk_bpf_end(struct pywalk *w);

#endif
