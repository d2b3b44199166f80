/*
 * bpfwalk_shared.h - what the in-kernel sampler (bpfwalk.bpf.c) and the
 * recorder (bpfwalk.c, pywalk.c) share: the description of a process's
 * CPython layout handed to the BPF program as data, its per-thread entries,
 * and the events it sends back. Included by both sides: fixed-width kernel
 * types only.
 *
 * The BPF program knows no CPython version: the recorder fills struct
 * bpfw_layout from the same struct pylayout its own walker uses (the static
 * tables, or the target's _Py_DebugOffsets from 3.13 on), so each version
 * is described once.
 */
#ifndef PYFLAME_BPFWALK_SHARED_H
#define PYFLAME_BPFWALK_SHARED_H

#include <linux/bpf.h>
#include <linux/types.h>

#define BPFW_MAX_DEPTH    256 /* frames an event carries; deeper stacks are truncated */
#define BPFW_FRAME_WINDOW 128 /* bytes of a frame read at once (every field used) */
/* Bytes read at once below a frame where callers' frames lie below it (3.11+'s data stack). */
#define BPFW_BLOCK       1024
#define BPFW_POS_MASK    (2 * BPFW_BLOCK - 1)    /* positions in the walk's buffer */
#define BPFW_SCRATCH     (2 * BPFW_BLOCK + 8)    /* the walk's buffer, 8-aligned */
#define BPFW_CO_SCRATCH  (BPFW_FRAME_WINDOW + 8) /* its buffer for a code object */
#define BPFW_SEEN_CODES  4 /* code objects a walk remembers it has identified */
#define BPFW_MAX_PROCS   1024
#define BPFW_MAX_THREADS 65536
#define BPFW_MAX_CPUS    1024
/* Thread states of an interpreter searched for a thread the recorder has not told us of. */
#define BPFW_MAX_LIST 128

/* Where a version keeps what the walk reads. Offsets in bytes; -1: no such field. */
struct bpfw_layout {
        __s32 ts_frame;       /* PyThreadState: frame, cframe (3.11/3.12) or current_frame */
        __s32 cframe_current; /* _PyCFrame.current_frame when ts_frame is a cframe; else -1 */
        __s32 ts_thread_id;   /* PyThreadState.thread_id (pthread_t) */
        __s32 fr_back;        /* f_back / previous */
        __s32 fr_code;        /* f_code / f_executable */
        __s32 fr_lasti;       /* f_lasti (int) or prev_instr / instr_ptr (pointer) */
        __s32 fr_owner;       /* char owner (3.11+) */
        __s32 fr_is_entry;    /* bool is_entry (3.11) */
        __s32 fr_tlbc_index;  /* int32 tlbc_index (3.14t) */
        __u32 fr_lo, fr_span; /* [fr_lo, fr_lo + fr_span) of a frame covers every field above */
        __u32 fr_block;       /* bytes to read at once ending at a frame's window, 0: the window */
        __u64 fr_code_mask;   /* ~0, or ~3 where f_executable is a tagged _PyStackRef */
        /* PyCodeObject: what identifies a code object (struct bpfw_frame.ident) */
        __s32 co_firstlineno, co_filename, co_name, co_linetable, co_qualname;
        __u32 co_lo, co_span; /* [co_lo, co_lo + co_span) covers them */
        __u8 lasti_pointer;   /* fr_lasti is 8 bytes (a pointer), else a 4-byte int */
        __u8 owner_skip_from; /* frames with an owner from this on are not Python's (3.12+) */
        __u8 pad[2];
        __s32 ts_next; /* PyThreadState.next: the interpreter's list of thread states */
};

/* One recorded process (map key: its PID in the recorder's PID namespace). */
struct bpfw_proc {
        struct bpfw_layout L;
        __u64 gil_holder_addr; /* the word naming the GIL's holder (thread state), 0: unknown */
        __u64 gil_locked_addr; /* an int that is non-zero while the GIL is held, 0: none */
        /*
         * The word holding the first thread state of the main interpreter
         * (its threads' list), 0: unknown. Where a thread has no entry (the
         * recorder has not seen it yet) and does not hold the GIL, the list
         * is searched for the state whose thread_id is the thread's own.
         */
        __u64 threads_head_addr;
        __u32 flags; /* BPFW_P_* */
        __u32 pad;
};

#define BPFW_P_NO_GIL     0x1u /* free-threaded: no GIL to report */
#define BPFW_P_SUBINTERPS 0x2u /* more interpreters than the main one: its list is not all */

/* One thread of a recorded process (map key: its TID in the recorder's PID namespace). */
struct bpfw_thread {
        __u64 tstate;
        __u64 thread_id; /* tstate->thread_id when the entry was made: a check of the entry */
};

/* One frame as read: the recorder decodes code and line (pywalk_bpf_decode()). */
struct bpfw_frame {
        __u64 addr; /* the frame */
        __u64 code; /* f_code / f_executable, as stored (tag bits included) */
        __u64 pos;  /* f_lasti (sign-extended int) or the instruction pointer */
        __u8 owner, entry;
        __u8 fflags; /* BPFW_FR_* */
        __u8 pad;
        __s32 tlbc;
        /*
         * The code object's identity when sampled (bpfw_ident() of its first
         * line and its name, qualified name, file name and line table
         * pointers): the recorder reads the object later, when it may have
         * been freed and another built at its address (a module body ends
         * right after its import), and decodes only an object that still is
         * the one sampled. 0: not read (an entry frame, or not resident).
         */
        __u64 ident;
};

/* A code object's identity, as the program and the recorder compute it; never 0. */
static inline __attribute__((always_inline)) __u64
bpfw_ident(__u32 first_line, __u64 file, __u64 name, __u64 table, __u64 qualname)
{
        __u64 h = 0xcbf29ce484222325ull;
        h = (h ^ first_line) * 0x100000001b3ull;
        h = (h ^ file) * 0x100000001b3ull;
        h = (h ^ name) * 0x100000001b3ull;
        h = (h ^ table) * 0x100000001b3ull;
        h = (h ^ qualname) * 0x100000001b3ull;
        return h | 1;
}

/*
 * The code objects the recorder has decoded, as (address, identity): a
 * two-way set-associative table the recorder fills and the program reads
 * (map `known`). A walk that meets a code object not in it (one built
 * since: a module's body being imported, exec'd code) wakes the recorder
 * at once rather than at its next round, so that it reads the object while
 * it still exists: such objects are often freed milliseconds later.
 *
 * An entry marked `lasting` (a function's code, which lives as long as its
 * module) is trusted: the walk takes its identity from the table rather
 * than reading the object (a read per frame was most of the walk's time
 * on a stack of different functions), and marks the frame
 * (BPFW_FR_TABLE_IDENT); the recorder checks once per batch that the
 * object at that address is still the one of the entry, and counts the
 * frames of one that is not as code_gone (then forgets the entry, so the
 * walk reads that address again), never decoding them as another object.
 */
#define BPFW_KNOWN_SETS 32768 /* a power of two */
/* A CPU wakes the recorder for new code at most once in this long. */
#define BPFW_WAKE_GAP_NS 1000000

struct bpfw_known_set {
        __u64 code[2], ident[2]; /* [0]: the most recently put */
        __u8 lasting[2];
        __u8 pad[6];
};

static inline __attribute__((always_inline)) __u32 bpfw_known_index(__u64 code)
{
        return (__u32)(((code >> 4) * 0x9e3779b97f4a7c15ull) >> 40) & (BPFW_KNOWN_SETS - 1);
}

/* Whether `set` holds `code` with identity `ident`. */
static inline __attribute__((always_inline)) int bpfw_known_has(const struct bpfw_known_set *set,
                                                                __u64 code, __u64 ident)
{
        return (set->code[0] == code && set->ident[0] == ident) ||
               (set->code[1] == code && set->ident[1] == ident);
}

/* The identity of `code` when `set` holds it as lasting (trusted), else 0. */
static inline __attribute__((always_inline)) __u64
bpfw_known_lasting(const struct bpfw_known_set *set, __u64 code)
{
        if (set->code[0] == code && set->lasting[0])
                return set->ident[0];
        if (set->code[1] == code && set->lasting[1])
                return set->ident[1];
        return 0;
}

/*
 * Put `code` with `ident` into its set (the recorder's side): first, the
 * other entry kept second (the older one goes). Returns 1 when the set
 * changed (to be written to the map), 0 when it held that already.
 */
static inline int bpfw_known_put(struct bpfw_known_set *set, __u64 code, __u64 ident, int lasting)
{
        if (set->code[0] == code && set->ident[0] == ident && set->lasting[0] == !!lasting)
                return 0;
        if (set->code[0] != code) {
                set->code[1] = set->code[0];
                set->ident[1] = set->ident[0];
                set->lasting[1] = set->lasting[0];
        }
        set->code[0] = code;
        set->ident[0] = ident;
        set->lasting[0] = !!lasting;
        return 1;
}

/* Remove `code` from its set. Returns 1 when the set changed. */
static inline int bpfw_known_forget(struct bpfw_known_set *set, __u64 code)
{
        int changed = 0;
        for (int k = 0; k < 2; k++) {
                if (set->code[k] == code) {
                        set->code[k] = set->ident[k] = 0;
                        set->lasting[k] = 0;
                        changed = 1;
                }
        }
        return changed;
}

/* struct bpfw_frame.fflags */
#define BPFW_FR_TABLE_IDENT 0x1u /* ident from map `known` (a lasting entry), not read */

/* struct bpfw_event.status */
enum {
        BPFW_OK = 0,
        BPFW_NO_THREAD, /* a thread of a recorded process the recorder has not told us of */
        BPFW_FAULT,     /* a read failed in the interrupt (not resident: no page faults there) */
        BPFW_STALE,     /* the thread's entry no longer matches its thread state */
};

/* struct bpfw_event.flags */
#define BPFW_F_TRUNCATED 0x1u  /* deeper than BPFW_MAX_DEPTH: the innermost frames are kept */
#define BPFW_F_GIL_KNOWN 0x2u  /* whether it held the GIL is known... */
#define BPFW_F_GIL_HELD  0x4u  /* ...and it did */
#define BPFW_F_BY_GIL    0x8u  /* found as the GIL's holder, not through its entry */
#define BPFW_F_BY_LIST   0x10u /* found in its interpreter's list of thread states */
#define BPFW_F_NEW_CODE  0x20u /* a code object not in `known`: the recorder was woken */
#define BPFW_F_NATIVE    0x40u /* a native capture (struct bpfw_native), not a bpfw_event */
#define BPFW_F_NO_PYTHON 0x80u /* (a native capture) of a thread with no Python state */

/* One sample of one thread, leaf frame first. Sent with only its `depth` frames. */
struct bpfw_event {
        __u64 time_ns; /* CLOCK_MONOTONIC of the sample */
        __u64 tstate;
        __u64 thread_id; /* tstate->thread_id */
        __u32 pid, tid;  /* in the recorder's PID namespace */
        __u16 status, flags;
        __u32 depth;
        struct bpfw_frame frames[BPFW_MAX_DEPTH];
};

#define BPFW_EVENT_HEAD 40 /* bytes of struct bpfw_event before frames */

/*
 * --bpf --native: a thread's registers and the top of its stack, copied in
 * the interrupt, sent just before the thread's bpfw_event (from the same
 * CPU, so in that order in the ring) or alone for a thread with no Python
 * (BPFW_F_NO_PYTHON). Its first 40 bytes are laid out as a bpfw_event's,
 * `flags` (BPFW_F_NATIVE) telling the two apart.
 */
#define BPFW_NATIVE_MAX  (32u << 10) /* bytes of stack copied at most, from SP up */
#define BPFW_NATIVE_PAGE 4096u
/* Registers, x86-64 in DWARF order: rax rdx rcx rbx rsi rdi rbp rsp r8-r15 rip. */
#define BPFW_NATIVE_REGS 17

struct bpfw_native {
        __u64 time_ns;
        __u64 pad[2];
        __u32 pid, tid;
        __u16 status, flags; /* status: BPFW_OK, or BPFW_FAULT when no stack could be read */
        __u32 len;           /* bytes of stack[] copied (whole pages after the first) */
        __u64 regs[BPFW_NATIVE_REGS];
        /* (a page more than copied at most: the program's bound on each page's copy) */
        __u8 stack[BPFW_NATIVE_MAX + BPFW_NATIVE_PAGE];
};

#define BPFW_NATIVE_HEAD (40 + 8 * BPFW_NATIVE_REGS) /* bytes before stack[] */

/* Per CPU: the timer that samples it, its schedule and its counters. */
struct bpfw_cpu {
        struct bpf_timer timer;
        __u64 slot;      /* start of the current slot, CLOCK_MONOTONIC */
        __u64 fires;     /* timer callbacks */
        __u64 samples;   /* callbacks that found a recorded process's thread */
        __u64 late;      /* slots that passed with no callback */
        __u64 lost;      /* events the ring buffer had no room for */
        __u64 run_ns;    /* time spent in the callback, measured inside it */
        __u64 sample_ns; /* of which in callbacks that found a thread: finding, walking, sending */
        __u64 armed;     /* 1 + CPU number once its timer runs */
        __u64 pin_flags; /* flags the timer is started with */
        /*
         * Callbacks that found a thread of a recorded process with no Python
         * thread state (in no interpreter's list: a thread of a C library, or
         * a Python thread before its state is bound or after it is deleted,
         * or ending in the kernel): not Python's time, which the user-space
         * sampler never sees either.
         */
        __u64 not_python;
        __u64 wakeups; /* times the recorder was woken for code objects new to it */
        __u64 woke_ns; /* when last */
};

#endif
