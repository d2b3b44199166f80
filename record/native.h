/*
 * native.h - native (C) call stacks of a target's threads, unwound with
 * elfutils' libdw and named once per address.
 *
 * A sample of native stacks has two halves. While a thread is held by the
 * stopper (or asleep in a system call, when its user stack cannot change),
 * native_capture_*() take what the unwinder needs and nothing more: its
 * registers and one copy of its stack from the stack pointer up, read in a
 * single batched call. Once the threads are released, native_unwind() walks
 * that copy with the CFI of each module (.eh_frame or .debug_frame, frame
 * pointers where a module has none) and names every return address through a
 * cache, so an address is looked up in the symbol tables and DWARF once.
 *
 * Modules come from /proc/PID/maps and are opened through /proc/PID/root, so
 * a target in another mount namespace (a container) is read as it sees its
 * files. Separate debug files are found the standard way (.gnu_debuglink,
 * build-id under /usr/lib/debug on the recorder's side). C++ names are
 * demangled (libstdc++'s __cxa_demangle) when pyflame-record is built with it.
 *
 * Everything read from the target is untrusted: depths and copies are
 * bounded, and an unwind that fails part way returns the frames found up to
 * there with a negative status saying it did not reach the root.
 */
#ifndef PYFLAME_NATIVE_H
#define PYFLAME_NATIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pywalk.h"

#define NATIVE_MAX_DEPTH 512
/* Registers of a capture, x86-64 DWARF numbers 0-16: rax rdx rcx rbx rsi rdi rbp rsp r8-r15 rip. */
#define NATIVE_N_REGS 17

/* What a named address is to the merger (a bit set). */
#define NATIVE_SYM_EVAL     0x1u /* the interpreter's eval loop: Python frames run here */
#define NATIVE_SYM_PLUMBING 0x2u /* interpreter call machinery, hidden by default */

/*
 * A native frame, named. Owned by the struct native; valid until
 * native_close(). Ids are dense from 1 and never reused: use them as keys.
 */
struct native_sym {
        uint32_t id;
        unsigned flags;       /* NATIVE_SYM_* */
        const char *function; /* symbol name, or "module+0xOFFSET" when none covers it */
        const char *file;     /* source file from DWARF, else the module's path */
        int32_t line;         /* source line from DWARF, or -1 */
        const char *module;   /* path of the mapped file as the target names it, or "?" */
        uint64_t offset;      /* ELF address in module: the function's start, else the address */
};

struct native;

/*
 * Prepare to unwind the threads of `pid`: read its mappings and start a
 * libdw session over them. Returns 0, or -ENOMEM, -ESRCH, or -ENOTSUP (no
 * unwinder for this build or architecture), with a one-line message in err.
 */
int native_open(pid_t pid, struct native **out, char *err, size_t errlen);

void native_close(struct native *n);

/* Forget the captures of the last sample (call before capturing again). */
void native_begin(struct native *n);

/*
 * Capture thread `tid`, which the caller holds stopped under ptrace: its
 * registers and a copy of its stack. Returns 0, or a negative errno (the
 * thread then has no capture).
 */
int native_capture_held(struct native *n, pid_t tid);

/*
 * Capture thread `tid`, which is not held: when it sleeps in a system call,
 * /proc/PID/task/TID/syscall gives its stack and instruction pointers and
 * its stack cannot change while it sleeps; it is not interrupted. Returns 0,
 * -EAGAIN when the thread is running (or woke meanwhile), another -errno.
 */
int native_capture_sleeping(struct native *n, pid_t tid);

/*
 * Capture thread `tid` from registers the caller has (regs[7] the stack
 * pointer, regs[16] the PC; the others only when `full`), with a copy of its
 * stack from that pointer up read now: for a stack that cannot change
 * meanwhile, such as one made in the recorder's own memory by the tests and
 * the fuzzer (fuzz_native.c). Returns 0, or a negative errno (no capture).
 */
int native_capture_regs(struct native *n, pid_t tid, const uint64_t regs[NATIVE_N_REGS], bool full);

/* The thread ids captured in this sample, in capture order: i < native_capture_count(). */
/*
 * Thread `tid`'s capture from registers and a copy of its stack from SP
 * (regs[7]) up, both taken at one instant elsewhere (--bpf: in the
 * interrupt that sampled it), replacing any capture it had. Reads above
 * the copy go to the live process. Returns 0 or a negative errno.
 */
int native_capture_copy(struct native *n, pid_t tid, const uint64_t regs[NATIVE_N_REGS],
                        const void *stack, size_t len);

/* Forget thread `tid`'s capture, once unwound (its copy's space too, when last). */
void native_capture_drop(struct native *n, pid_t tid);

size_t native_capture_count(const struct native *n);
pid_t native_capture_tid(const struct native *n, size_t i);

/*
 * Unwind the capture of `tid` into out[0..cap), leaf first. Returns the
 * number of frames; -ENOENT when `tid` has no capture; -EPIPE when the
 * unwind stopped before the stack's root (frames up to there are in out and
 * their number in *depth). *depth is set in every case but -ENOENT.
 */
int native_unwind(struct native *n, pid_t tid, const struct native_sym **out, size_t cap,
                  size_t *depth);

struct native_stats {
        uint64_t captures;      /* threads captured */
        uint64_t capture_bytes; /* stack bytes copied */
        uint64_t unwinds;       /* native_unwind() calls */
        uint64_t frames;        /* frames unwound */
        uint64_t extra_reads;   /* reads outside the copied stack */
        uint64_t symbols;       /* distinct addresses named */
        uint64_t sym_resets;    /* native_trim() forgot the names */
        uint64_t refreshes;     /* mappings read again (a library was loaded) */
        uint64_t capture_ns;    /* wall time in native_capture_*() (the threads held) */
        uint64_t unwind_ns;     /* wall time in native_unwind() */
        uint64_t warm_unwinds;  /* native_unwind() calls that named no new address */
        uint64_t warm_unwind_ns;
        uint64_t cfi_rules;     /* PCs whose CFI rule was decoded (then cached) */
        uint64_t cfi_fallbacks; /* unwinds the cached rules left to libdw */
};
void native_get_stats(const struct native *n, struct native_stats *st);

/*
 * Forget every name when more than `max_names` addresses have been named
 * (a program that keeps loading code, or a JIT's, never stops adding new
 * ones), so that the cache stays bounded; they are named again as they are
 * met. Returns true when it forgot them: every native_sym given out before
 * is freed, and ids start again from 1, so a caller keyed by them must
 * forget its keys too. Between unwinds only.
 */
bool native_trim(struct native *n, size_t max_names);

/*
 * Name the plumbing frames with their source lines too (they are kept in
 * merged stacks: NATIVE_MERGE_KEEP_PLUMBING). By default they are named by
 * symbol only, so that a module's DWARF is not loaded for frames that are
 * dropped. Before the first unwind.
 */
void native_keep_plumbing(struct native *n);

/* One frame of a merged stack: a native frame (sym) or a Python one (py). */
struct native_merged {
        const struct native_sym *sym; /* NULL for a Python frame */
        const struct pywalk_frame *py;
};

#define NATIVE_MERGE_KEEP_PLUMBING 0x1u /* keep NATIVE_SYM_PLUMBING frames */

/*
 * Merge a native stack (nat[0..n_nat), leaf first) with the Python stack of
 * the same thread at the same instant (py[0..n_py), leaf first): each eval
 * loop frame of the native stack is replaced by the Python frames it was
 * running, from the next one up to the next frame marked `entry`
 * (pywalk.h), and plumbing is dropped unless `flags` keeps it. With one
 * eval frame more than runs of Python frames, the innermost is kept as a
 * native frame: the thread is in that call's prologue or epilogue, where
 * its Python frame is not linked (entering or leaving a generator, say,
 * which a loop over one does at every item). Writes the
 * merged stack, leaf first, into out[0..cap) and returns its depth; returns
 * -EPIPE when the two do not fit together (an eval frame with no Python
 * frames left, a run of Python frames that does not end at an entry frame,
 * Python frames left over), or -E2BIG when out is too small. Nothing is
 * guessed: a stack that does not match is not merged.
 */
int native_merge(const struct native_sym *const *nat, size_t n_nat, const struct pywalk_frame *py,
                 size_t n_py, unsigned flags, struct native_merged *out, size_t cap);

/*
 * Whether the function named `name` is interpreter call machinery that a
 * merged stack hides by default (exposed for the tests).
 */
bool native_is_plumbing(const char *name);

/* Whether `name` is the interpreter's eval loop (exposed for the tests). */
bool native_is_eval(const char *name);

#endif
