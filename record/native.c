/*
 * native.c - capture, unwind and name the native stacks of a target's
 * threads (native.h has the contract).
 *
 * One libdw session (Dwfl) per target. Its modules are the files the target
 * maps, reported under /proc/PID/root/PATH so that libdw's standard
 * callbacks open them as the target sees them, and the vDSO as "[vdso: PID]"
 * (read from the target's memory). The session is attached with thread
 * callbacks of our own: a thread's initial registers are the ones captured
 * while it was held, and memory reads are served from the stack copy taken
 * then. A read outside the copy goes to the target (through a small line
 * cache) and grows the copy of the next samples, up to STACK_MAX bytes.
 *
 * Unwinding is our own for the frames it can do exactly as libdw would: the
 * CFI rule at each PC (the CFA as a register plus an offset, registers saved
 * at CFA+N) is decoded once with libdw and cached, so that a warm unwind is a
 * hash look-up and a read or two from the copy per frame. A frame the cache
 * does not cover (no CFI, a DWARF expression, a signal frame, a register not
 * known) hands the whole stack to libdw's dwfl_getthread_frames(). The copy
 * of a thread's stack reaches as far up as its last complete unwind read
 * (its outermost frame does not move), not a fixed size.
 *
 * Names are cached by address (the return address minus one, so that a call
 * at a function's end is named by its caller's line): each address is looked
 * up in the symbol tables and the line tables once. Entries are never freed
 * before native_close() and their ids never reused; addresses found in no
 * module make the maps be read again (at once when the address was in no
 * mapping at the last reading, else at most ten times a second) and those
 * entries are forgotten then.
 */
#include "native.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <time.h>
#include <unistd.h>

#include "procfs.h"

#ifdef PYFLAME_HAVE_LIBDW
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#endif

#ifdef PYFLAME_HAVE_CXA_DEMANGLE
/* libstdc++'s demangler (cxxabi.h), declared here so that no C++ compiler is needed. */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);
#endif

#define STACK_START    (16u << 10) /* bytes of stack copied from SP at first; grows on need */
#define STACK_MAX      (1u << 20)  /* bound of the copy, however deep the stack */
#define STACK_PAGE     4096u
#define TOP_SLACK      256u       /* bytes copied above the top a thread's last unwind read */
#define TOPS_MAX       4096u      /* threads whose stack top is remembered */
#define RULE_MAX       (1u << 16) /* PCs whose CFI rule is cached before the cache starts over */
#define FN_MAX         (1u << 14) /* functions whose inlined calls are kept before starting over */
#define CU_MAX         4096u      /* units whose functions are indexed, likewise */
#define SYSF_MAX       4096u      /* threads whose /proc syscall file is kept open */
#define SYSF_IDLE      256u       /* samples a kept file may go unread before it is closed */
#define DIE_DEPTH      64u        /* nesting of DWARF entries walked for them */
#define LINE_BYTES     64u
#define LINE_SLOTS     64u
#define REFRESH_NS     100000000LL   /* at most ten readings of the maps a second... */
#define REFRESH_NEW_NS 5000000LL     /* ...or 200 for addresses mapped since the last one */
#define SYM_NO_MODULE  0x100u        /* native_sym.flags, ours: the address was in no module */
#define N_DWARF_REGS   NATIVE_N_REGS /* x86-64: rax rdx rcx rbx rsi rdi rbp rsp r8-r15, then rip */

/* Interpreter functions that only pass a call on: hidden from merged stacks by default. */
static const char *const plumbing_prefixes[] = {
    "_PyEval_EvalFrame", /* the wrapper; _PyEval_EvalFrameDefault itself is an eval */
    "_PyEval_EvalCode",
    "_PyEval_Vector",
    "PyEval_EvalCode",
    "PyEval_CallObject",
    "PyEval_CallFunction",
    "_PyFunction_Vectorcall",
    "_PyFunction_FastCall",
    "function_code_fastcall",
    "fast_function",
    "function_call",
    "call_function",
    "do_call_core",
    "ext_do_call",
    "_PyObject_Vectorcall",
    "PyObject_Vectorcall",
    "_PyObject_FastCall",
    "_PyObject_Call",
    "PyObject_Call",
    "_PyObject_MakeTpCall",
    "object_vacall",
    "_PyVectorcall_Call",
    "PyVectorcall_Call",
    "method_vectorcall",
    "vectorcall_method",
    "cfunction_call",
    "cfunction_vectorcall",
    "PyCFunction_Call",
    "_PyCFunction_FastCall",
    "_PyMethodDef_RawFastCall",
    "_PyMethodDescr_Vectorcall",
    "method_call",
    "instancemethod_call",
    "slot_tp_call",
    "gen_send_ex",
    "gen_iternext",
    "builtin_exec",
    "exec_code_in_module",
    "run_mod",
    "run_eval_code_obj",
    "run_pyc_file",
    "pyrun_",
    "PyRun_",
    "_PyRun_",
    "pymain_",
    "Py_BytesMain",
    "Py_RunMain",
    "Py_Main",
    "t_bootstrap",
    "thread_run",
    "pythread_wrapper",
    "__libc_start_",
    "start_thread",
    "clone",
    "__clone",
};

bool native_is_eval(const char *name)
{
        static const char *const evals[] = {"_PyEval_EvalFrameDefault", "PyEval_EvalFrameEx"};
        for (size_t i = 0; i < sizeof(evals) / sizeof(evals[0]); i++) {
                size_t len = strlen(evals[i]);
                /* gcc splits cold paths into NAME.cold: still the same activation. */
                if (strncmp(name, evals[i], len) == 0 && (name[len] == 0 || name[len] == '.'))
                        return true;
        }
        return false;
}

bool native_is_plumbing(const char *name)
{
        if (strcmp(name, "main") == 0 || strcmp(name, "_start") == 0)
                return true;
        for (size_t i = 0; i < sizeof(plumbing_prefixes) / sizeof(plumbing_prefixes[0]); i++)
                if (strncmp(name, plumbing_prefixes[i], strlen(plumbing_prefixes[i])) == 0)
                        return true;
        return false;
}

int native_merge(const struct native_sym *const *nat, size_t n_nat, const struct pywalk_frame *py,
                 size_t n_py, unsigned flags, struct native_merged *out, size_t cap)
{
        /*
         * Only the innermost eval call can be in its prologue or epilogue,
         * where its Python frame is not linked yet (or no longer): with one
         * eval call more than runs of Python frames, it is that one, and it
         * is shown as the native frame it then is.
         */
        size_t n_eval = 0, n_runs = 0, p = 0, n = 0;
        for (size_t i = 0; i < n_nat; i++)
                n_eval += (nat[i]->flags & NATIVE_SYM_EVAL) != 0;
        for (size_t i = 0; i < n_py; i++)
                n_runs += py[i].entry;
        bool unlinked = n_eval == n_runs + 1;
        for (size_t i = 0; i < n_nat; i++) {
                const struct native_sym *s = nat[i];
                if ((s->flags & NATIVE_SYM_EVAL) && unlinked) {
                        unlinked = false;
                        if (n == cap)
                                return -E2BIG;
                        out[n++] = (struct native_merged){s, NULL};
                        continue;
                }
                if (s->flags & NATIVE_SYM_EVAL) {
                        if (p >= n_py)
                                return -EPIPE; /* more eval calls than Python ran */
                        do {
                                if (n == cap)
                                        return -E2BIG;
                                out[n++] = (struct native_merged){NULL, &py[p]};
                        } while (!py[p++].entry && p < n_py);
                        if (!py[p - 1].entry)
                                return -EPIPE;
                        continue;
                }
                if ((s->flags & NATIVE_SYM_PLUMBING) && !(flags & NATIVE_MERGE_KEEP_PLUMBING))
                        continue;
                if (n == cap)
                        return -E2BIG;
                out[n++] = (struct native_merged){s, NULL};
        }
        return p == n_py ? (int)n : -EPIPE;
}

#ifdef PYFLAME_HAVE_LIBDW

/* One thread's capture: registers in DWARF order and where its stack copy is. */
struct capture {
        pid_t tid;
        bool full; /* every register known; else only SP and PC */
        uint64_t regs[N_DWARF_REGS];
        uint64_t base;   /* target address of the copy's first byte (SP) */
        size_t off, len; /* the copy: n->stack + off, len bytes */
        size_t asked;    /* bytes asked for (len is less at the end of the mapping) */
};

/*
 * How to recover one register of the caller from a frame's CFA, the subset
 * of CFI rules that x86-64 code compiled from C uses (the CFA is a register
 * plus an offset, a register saved at CFA+N or equal to CFA+N, or not
 * touched). Everything else (DWARF expressions, a register copied from
 * another one) is RULE_OTHER: the register is then not known, and an
 * unwind that needs it is done again by libdw.
 */
enum reg_rule_kind { RULE_UNDEFINED, RULE_SAME, RULE_AT_CFA, RULE_IS_CFA, RULE_OTHER };

/* What the CFI says for one adjusted PC, as decoded once by cfi_rule_make(). */
struct cfi_rule {
        bool usable;     /* false: no CFI, a signal frame, or a CFA we do not compute */
        uint8_t cfa_reg; /* CFA = regs[cfa_reg] + cfa_off */
        uint8_t kind[N_DWARF_REGS];
        int64_t cfa_off;
        int64_t off[N_DWARF_REGS]; /* RULE_AT_CFA, RULE_IS_CFA: CFA + off */
};

/* A thread's /proc/PID/task/TID/syscall, kept open (syscall_regs()). */
struct sys_file {
        pid_t tid;
        int fd;
        uint64_t used; /* n->begins when last read */
};

struct stack_top {
        pid_t tid;
        uint64_t top; /* one past the highest stack byte an unwind of the thread read */
};

struct line {
        uint64_t addr; /* line-aligned address, or 0 when empty */
        uint8_t data[LINE_BYTES];
};

/* One outermost inlined call in a function: its code, and where the function makes it. */
struct inl_call {
        uint64_t lo, hi;  /* [lo, hi), DWARF addresses (the module's bias off) */
        const char *file; /* libdw's: valid while the module is reported */
        int line;
};

/*
 * A named function of the target: its symbol's range and name, looked up
 * once (libdwfl's lookup scans the whole symbol table: 150-250 us in
 * libpython, for every address), then its outermost inlined calls, sorted
 * by address, found the first time a line is asked of it.
 */
struct fn_info {
        uint64_t start, end; /* [start, end): its symbol's */
        const char *name;    /* libdwfl's: valid while the module is reported */
        uint64_t dbias;
        struct inl_call *calls;
        size_t n, cap;
        int8_t inl; /* -1 not looked for yet, 0 its DWARF subprogram not found, 1 found */
};

/* A function's code in its unit's index: [lo, hi) and its DWARF entry. */
struct sub_range {
        uint64_t lo, hi;
        Dwarf_Die die;
};

/* The functions of one compilation unit, by address (unit_subprogram()). */
struct cu_subs {
        Dwfl_Module *mod;
        Dwarf_Off cu;
        struct sub_range *r;
        size_t n, cap;
};

struct native {
        pid_t pid;
        Dwfl *dwfl;
        Dwfl_Callbacks callbacks;
        char root[48]; /* "/proc/PID/root": the prefix of module names */
        size_t root_len;
        /*
         * Where the target's root is, as its maps name files: its first
         * root_link_len bytes, 0 when they are named from its root (the
         * same files, or a container's own root after pivot_root); a
         * chroot's directory otherwise, which its maps paths begin with.
         */
        char root_link[PATH_MAX];
        size_t root_link_len;
        /* libdw's search path for separate debug files; NULL: its default */
        char *debuginfo_path;
        bool attached;
        bool keep_plumbing; /* lines for plumbing frames too (native_keep_plumbing) */

        struct capture *caps;
        size_t n_caps, cap_caps;
        uint8_t *stack; /* the copies, back to back */
        size_t stack_len, stack_cap;
        size_t want; /* bytes to copy from SP */
        struct iovec *riov;

        /* threads' syscall files kept open, by tid; n->begins counts samples */
        struct sys_file *sysf;
        size_t n_sysf, cap_sysf;
        uint64_t begins;
        /* per thread: the top of the stack its last complete unwind read (capture sizes) */
        struct stack_top *tops;
        size_t n_tops, cap_tops;

        const struct capture *cur; /* the capture being unwound */
        uint64_t cur_top;          /* highest address + 8 read in the copy by this unwind */
        bool cur_outside;          /* this unwind read outside the copy */
        struct line lines[LINE_SLOTS];
        bool unknown_pc;      /* an address in no module: the maps may have changed */
        uint64_t unknown_new; /* the first such address in no mapping of the last reading, or 0 */
        long long refreshed_ns;
        /* every mapping of the last reading of the maps, [lo, hi) pairs in address order */
        uint64_t *mapped;
        size_t n_mapped, cap_mapped;

        /* address -> symbol entry, open addressing; entries never move */
        uint64_t *keys;
        struct native_sym **vals;
        size_t sym_cap, sym_n;
        struct native_sym **all; /* by id - 1, for freeing */
        size_t n_all, cap_all;
        uint32_t next_id;

        /* functions named so far (fn_find()), by start; emptied on a refresh */
        struct fn_info *fns;
        size_t n_fns, cap_fns;
        /* units whose functions were indexed (unit_subprogram()); emptied on a refresh */
        struct cu_subs *cus;
        size_t n_cus, cap_cus;

        /* adjusted PC -> its CFI rule (cfi_rule()), open addressing; emptied on a refresh */
        uint64_t *rule_keys;
        struct cfi_rule *rules;
        size_t rule_cap, rule_n;

        /* native_unwind()'s frame callback state */
        const struct native_sym **out;
        size_t out_cap, out_n;
        uint64_t last_addr; /* the last frame's address (a return address minus one) */
        struct native_stats st;
};

static long long mono_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- modules ------------------------------------------------------------ */

struct report_ctx {
        struct native *n;
        char path[4096]; /* the group being collected, "" when none */
        uint64_t inode;
        uint64_t lo, hi;
        int rc;
};

static void report_flush(struct report_ctx *c)
{
        if (!c->path[0])
                return;
        char name[4096 + 64];
        const char *path = c->path;
        size_t skip = c->n->root_link_len;
        if (skip && strncmp(path, c->n->root_link, skip) == 0 && path[skip] == '/')
                path += skip;
        snprintf(name, sizeof(name), "%s%s", c->n->root, path);
        if (!dwfl_report_module(c->n->dwfl, name, c->lo, c->hi))
                c->rc = -ENOMEM;
        c->path[0] = 0;
}

/* Note [lo, hi) as mapped at this reading (merged with the one before when adjacent). */
static int note_mapped(struct native *n, uint64_t lo, uint64_t hi)
{
        if (n->n_mapped && n->mapped[2 * n->n_mapped - 1] == lo) {
                n->mapped[2 * n->n_mapped - 1] = hi;
                return 0;
        }
        if (n->n_mapped == n->cap_mapped) {
                size_t cap = n->cap_mapped ? 2 * n->cap_mapped : 256;
                uint64_t *p = realloc(n->mapped, 2 * cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                n->mapped = p;
                n->cap_mapped = cap;
        }
        n->mapped[2 * n->n_mapped] = lo;
        n->mapped[2 * n->n_mapped + 1] = hi;
        n->n_mapped++;
        return 0;
}

/* Whether addr was in a mapping at the last reading of the maps. */
static bool was_mapped(const struct native *n, uint64_t addr)
{
        size_t lo = 0, hi = n->n_mapped;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (addr < n->mapped[2 * mid])
                        hi = mid;
                else if (addr >= n->mapped[2 * mid + 1])
                        lo = mid + 1;
                else
                        return true;
        }
        return false;
}

static int report_mapping(void *ctx, const struct procfs_mapping *m)
{
        struct report_ctx *c = ctx;
        if (note_mapped(c->n, m->start, m->end) < 0)
                c->rc = -ENOMEM;
        if (strcmp(m->path, "[vdso]") == 0) {
                report_flush(c);
                char name[64];
                snprintf(name, sizeof(name), "[vdso: %d]", (int)c->n->pid);
                dwfl_report_module(c->n->dwfl, name, m->start, m->end);
                return 0;
        }
        if (m->path[0] != '/' || m->deleted || !m->inode) {
                report_flush(c);
                return 0;
        }
        /* A file's segments are mapped one after the other: one module. */
        if (c->path[0] && c->inode == m->inode && strcmp(c->path, m->path) == 0 &&
            m->start >= c->hi) {
                c->hi = m->end;
                return 0;
        }
        report_flush(c);
        if (m->offset > m->start || strlen(m->path) >= sizeof(c->path))
                return 0;
        snprintf(c->path, sizeof(c->path), "%s", m->path);
        c->inode = m->inode;
        c->lo = m->start - m->offset;
        c->hi = m->end;
        return 0;
}

/* Read the target's mappings and (re)report its modules. */
static int report_modules(struct native *n)
{
        struct report_ctx c = {.n = n};
        n->n_mapped = 0;
        dwfl_report_begin(n->dwfl);
        int rc = procfs_maps_foreach(n->pid, report_mapping, &c);
        report_flush(&c);
        dwfl_report_end(n->dwfl, NULL, NULL);
        n->refreshed_ns = mono_ns();
        return rc < 0 ? rc : c.rc;
}

/* ---- thread callbacks ------------------------------------------------------ */

static pid_t cb_next_thread(Dwfl *dwfl, void *arg, void **thread_argp)
{
        (void)dwfl;
        struct native *n = arg;
        if (*thread_argp || !n->cur)
                return 0;
        *thread_argp = (void *)n->cur;
        return n->cur->tid;
}

static bool cb_get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp)
{
        (void)dwfl;
        struct native *n = arg;
        if (!n->cur || n->cur->tid != tid)
                return false;
        *thread_argp = (void *)n->cur;
        return true;
}

/* A word of the target outside the stack copy, through the line cache. */
static bool read_live(struct native *n, uint64_t addr, uint64_t *out)
{
        uint64_t line = addr & ~(uint64_t)(LINE_BYTES - 1);
        if (addr - line > LINE_BYTES - 8)
                return false; /* straddles two lines: libdw reads aligned words */
        struct line *l = &n->lines[(line / LINE_BYTES) % LINE_SLOTS];
        if (l->addr != line || !line) {
                struct iovec local = {l->data, LINE_BYTES};
                struct iovec remote = {(void *)(uintptr_t)line, LINE_BYTES};
                n->st.extra_reads++;
                if (process_vm_readv(n->pid, &local, 1, &remote, 1, 0) != (ssize_t)LINE_BYTES) {
                        l->addr = 0;
                        return false;
                }
                l->addr = line;
        }
        memcpy(out, l->data + (addr - line), 8);
        return true;
}

/*
 * A word of the target for the unwind of n->cur: from its stack copy, else
 * live through the line cache. Notes how far up the stack the unwind read
 * (the next capture of the thread copies that much: capture_size()).
 */
static bool read_word(struct native *n, uint64_t addr, uint64_t *result)
{
        const struct capture *c = n->cur;
        if (c && addr >= c->base && addr - c->base < STACK_MAX && addr + 8 > n->cur_top)
                n->cur_top = addr + 8;
        if (c && addr >= c->base && addr - c->base + 8 <= c->len) {
                memcpy(result, n->stack + c->off + (addr - c->base), 8);
                return true;
        }
        n->cur_outside = true;
        /* Just above the copy: the stack goes on deeper than we copied. */
        if (c && addr >= c->base + c->len && addr < c->base + STACK_MAX && n->want < STACK_MAX &&
            c->len == c->asked && c->asked == n->want)
                n->want *= 2;
        return read_live(n, addr, result);
}

static bool cb_memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
        (void)dwfl;
        uint64_t v;
        if (!read_word(arg, addr, &v))
                return false;
        *result = v;
        return true;
}

static bool cb_set_initial_registers(Dwfl_Thread *thread, void *thread_arg)
{
        const struct capture *c = thread_arg;
        /*
         * RIP is a register too (DWARF 16), as elfutils' own x86-64 backend
         * sets it: a PLT entry's CFA is an expression of it (rsp + 8, + 8
         * more past the entry's push), and without it libdw ended the
         * unwind of a thread caught in a PLT stub at that stub.
         */
        if (c->full) {
                if (!dwfl_thread_state_registers(thread, 0, N_DWARF_REGS, c->regs))
                        return false;
        } else if (!dwfl_thread_state_registers(thread, 7, 1, &c->regs[7]) ||
                   !dwfl_thread_state_registers(thread, 16, 1, &c->regs[16])) {
                return false;
        }
        dwfl_thread_state_register_pc(thread, c->regs[16]);
        return true;
}

static const Dwfl_Thread_Callbacks thread_callbacks = {
    .next_thread = cb_next_thread,
    .get_thread = cb_get_thread,
    .memory_read = cb_memory_read,
    .set_initial_registers = cb_set_initial_registers,
};

/* ---- open / close ------------------------------------------------------------ */

/*
 * Whether `pid` sees the files we see: the same mount namespace and the
 * same root. When it does not (a container), its /usr/lib/debug is not ours.
 */
static bool same_files(pid_t pid)
{
        char path[64];
        struct stat a, b;
        snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)pid);
        if (stat(path, &a) < 0 || stat("/proc/self/ns/mnt", &b) < 0 || a.st_ino != b.st_ino ||
            a.st_dev != b.st_dev)
                return false;
        snprintf(path, sizeof(path), "/proc/%d/root", (int)pid);
        return stat(path, &a) == 0 && stat("/", &b) == 0 && a.st_ino == b.st_ino &&
               a.st_dev == b.st_dev;
}

int native_open(pid_t pid, struct native **out, char *err, size_t errlen)
{
        struct native *n = calloc(1, sizeof(*n));
        if (!n) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        n->pid = pid;
        n->want = STACK_START;
        n->next_id = 1;
        snprintf(n->root, sizeof(n->root), "/proc/%d/root", (int)pid);
        n->root_len = strlen(n->root);
        /* "/" (or unreadable) leaves root_link_len 0: nothing to take off. */
        ssize_t link = readlink(n->root, n->root_link, sizeof(n->root_link) - 1);
        if (link > 1 && n->root_link[0] == '/')
                n->root_link_len = (size_t)link;
        n->callbacks.find_elf = dwfl_linux_proc_find_elf;
        n->callbacks.find_debuginfo = dwfl_standard_find_debuginfo;
        /*
         * Separate debug files: beside the file (its debuglink, in .debug/),
         * then by build ID under the target's /usr/lib/debug (a container's
         * debug packages) before ours (libdw's default looks in ours only).
         * By debuglink under each of them followed by the library's
         * directory, libdw tries that directory and each of its tails, so
         * /proc/PID/root/usr/lib/debug/DIR is among them.
         */
        if (!same_files(pid)) {
                size_t len = 2 * sizeof(n->root) + 64;
                if ((n->debuginfo_path = malloc(len)) != NULL) {
                        snprintf(n->debuginfo_path, len, ":.debug:%s/usr/lib/debug:/usr/lib/debug",
                                 n->root);
                        n->callbacks.debuginfo_path = &n->debuginfo_path;
                }
        }
        n->riov = calloc(STACK_MAX / STACK_PAGE + 1, sizeof(*n->riov));
        n->dwfl = n->riov ? dwfl_begin(&n->callbacks) : NULL;
        if (!n->dwfl) {
                snprintf(err, errlen, "out of memory");
                native_close(n);
                return -ENOMEM;
        }
        int rc = report_modules(n);
        if (rc < 0) {
                snprintf(err, errlen, "cannot read the mappings of process %d: %s", (int)pid,
                         strerror(-rc));
                native_close(n);
                return rc == -ENOENT ? -ESRCH : rc;
        }
        if (!dwfl_attach_state(n->dwfl, NULL, pid, &thread_callbacks, n)) {
                snprintf(err, errlen,
                         "cannot unwind the native stacks of process %d: %s (only x86-64 is "
                         "supported)",
                         (int)pid, dwfl_errmsg(-1));
                native_close(n);
                return -ENOTSUP;
        }
        n->attached = true;
        *out = n;
        return 0;
}

/* Free every name entry (the tables that point to them are the caller's to clear). */
static void syms_free(struct native *n)
{
        for (size_t i = 0; i < n->n_all; i++) {
                struct native_sym *e = n->all[i];
                free((char *)e->function);
                free((char *)e->file);
                free((char *)e->module);
                free(e);
        }
        n->n_all = 0;
}

/* Forget every unit's index (its entries are the modules' own). */
static void cus_forget(struct native *n)
{
        for (size_t i = 0; i < n->n_cus; i++)
                free(n->cus[i].r);
        n->n_cus = 0;
}

/*
 * Forget every function's name and inlined calls, and the units' indexes
 * (names, file names and entries are the modules' own: a refresh of the
 * modules may free them).
 */
static void fns_forget(struct native *n)
{
        for (size_t i = 0; i < n->n_fns; i++)
                free(n->fns[i].calls);
        n->n_fns = 0;
        cus_forget(n);
}

/*
 * Close the kept syscall files not read for `idle` samples (all with 0):
 * those of threads that ended, mostly.
 */
static void sysf_close(struct native *n, uint64_t idle)
{
        size_t kept = 0;
        for (size_t i = 0; i < n->n_sysf; i++) {
                if (idle && n->sysf[i].used + idle > n->begins) {
                        n->sysf[kept++] = n->sysf[i];
                        continue;
                }
                close(n->sysf[i].fd);
        }
        n->n_sysf = kept;
}

void native_close(struct native *n)
{
        if (!n)
                return;
        if (n->dwfl)
                dwfl_end(n->dwfl);
        free(n->debuginfo_path);
        syms_free(n);
        free(n->all);
        free(n->keys);
        free(n->vals);
        fns_forget(n);
        free(n->fns);
        free(n->cus);
        free(n->rule_keys);
        free(n->rules);
        sysf_close(n, 0);
        free(n->sysf);
        free(n->tops);
        free(n->caps);
        free(n->stack);
        free(n->riov);
        free(n->mapped);
        free(n);
}

/* ---- capture -------------------------------------------------------------------- */

void native_begin(struct native *n)
{
        n->n_caps = 0;
        n->stack_len = 0;
        if (++n->begins % SYSF_IDLE == 0)
                sysf_close(n, SYSF_IDLE);
        for (size_t i = 0; i < LINE_SLOTS; i++)
                n->lines[i].addr = 0;
}

static struct capture *capture_new(struct native *n, pid_t tid)
{
        if (n->n_caps == n->cap_caps) {
                size_t cap = n->cap_caps ? 2 * n->cap_caps : 16;
                struct capture *p = realloc(n->caps, cap * sizeof(*p));
                if (!p)
                        return NULL;
                n->caps = p;
                n->cap_caps = cap;
        }
        struct capture *c = &n->caps[n->n_caps];
        memset(c, 0, sizeof(*c));
        c->tid = tid;
        return c;
}

/*
 * How much stack to copy for thread `tid` at `sp`: up to the top its last
 * complete unwind read (its outermost frame does not move while the thread
 * lives), and a little more; n->want bytes for a thread not unwound yet.
 */
static size_t capture_size(const struct native *n, pid_t tid, uint64_t sp)
{
        for (size_t i = 0; i < n->n_tops; i++) {
                if (n->tops[i].tid != tid)
                        continue;
                uint64_t top = n->tops[i].top;
                if (top > sp && top - sp <= STACK_MAX - TOP_SLACK)
                        return (size_t)(top - sp) + TOP_SLACK;
                break;
        }
        return n->want;
}

/* After an unwind of `c` that reached the root: remember how far up it read. */
static void note_top(struct native *n, const struct capture *c)
{
        if (!n->cur_top)
                return;
        struct stack_top *t = NULL;
        for (size_t i = 0; i < n->n_tops && !t; i++)
                if (n->tops[i].tid == c->tid)
                        t = &n->tops[i];
        if (!t) {
                if (n->n_tops == TOPS_MAX)
                        n->n_tops = 0; /* mostly threads gone by now: start over */
                if (n->n_tops == n->cap_tops) {
                        size_t cap = n->cap_tops ? 2 * n->cap_tops : 16;
                        struct stack_top *p = realloc(n->tops, cap * sizeof(*p));
                        if (!p)
                                return;
                        n->tops = p;
                        n->cap_tops = cap;
                }
                t = &n->tops[n->n_tops++];
                t->tid = c->tid;
                t->top = 0;
        }
        /* A top below this stack pointer or far above it was another thread's (tid reused). */
        bool same_stack = t->top > c->base && t->top - c->base <= STACK_MAX;
        if (!same_stack || n->cur_top > t->top)
                t->top = n->cur_top;
}

/* Room for `len` more bytes of stack copies. */
static int stack_reserve(struct native *n, size_t len)
{
        if (n->stack_len + len <= n->stack_cap)
                return 0;
        size_t cap = n->stack_cap ? n->stack_cap : STACK_MAX;
        while (cap < n->stack_len + len)
                cap *= 2;
        uint8_t *p = realloc(n->stack, cap);
        if (!p)
                return -ENOMEM;
        n->stack = p;
        n->stack_cap = cap;
        return 0;
}

/*
 * Copy the stack from sp up, `want` bytes at most, in one call: one remote
 * range per page, so that the copy stops at the end of the mapping (the
 * call transfers whole ranges up to the first it cannot read).
 */
static int copy_stack(struct native *n, struct capture *c, uint64_t sp)
{
        size_t want = capture_size(n, c->tid, sp);
        if (stack_reserve(n, want) < 0)
                return -ENOMEM;
        size_t nv = 0;
        uint64_t a = sp;
        uint64_t end = sp + want;
        while (a < end && nv < STACK_MAX / STACK_PAGE + 1) {
                uint64_t next = (a & ~(uint64_t)(STACK_PAGE - 1)) + STACK_PAGE;
                if (next > end)
                        next = end;
                n->riov[nv].iov_base = (void *)(uintptr_t)a;
                n->riov[nv].iov_len = (size_t)(next - a);
                nv++;
                a = next;
        }
        struct iovec local = {n->stack + n->stack_len, want};
        ssize_t got = process_vm_readv(n->pid, &local, 1, n->riov, nv, 0);
        if (got <= 0)
                return got < 0 ? -errno : -EFAULT;
        c->base = sp;
        c->off = n->stack_len;
        c->len = (size_t)got;
        c->asked = want;
        n->stack_len += (size_t)got;
        n->st.captures++;
        n->st.capture_bytes += (size_t)got;
        return 0;
}

/*
 * Thread `tid`'s capture from `regs` (all of them when `full`, else only SP
 * and PC) and a copy of its stack from SP up. Returns 0, or a negative
 * errno with nothing captured.
 */
static int capture_from(struct native *n, pid_t tid, const uint64_t regs[N_DWARF_REGS], bool full)
{
        struct capture *c = capture_new(n, tid);
        if (!c)
                return -ENOMEM;
        if (full) {
                memcpy(c->regs, regs, sizeof(c->regs));
        } else {
                c->regs[7] = regs[7];
                c->regs[16] = regs[16];
        }
        c->full = full;
        int rc = copy_stack(n, c, regs[7]);
        if (rc < 0)
                return rc;
        n->n_caps++;
        return 0;
}

static int capture_held(struct native *n, pid_t tid);

int native_capture_held(struct native *n, pid_t tid)
{
        long long t0 = mono_ns();
        int rc = capture_held(n, tid);
        n->st.capture_ns += (uint64_t)(mono_ns() - t0);
        return rc;
}

static int capture_held(struct native *n, pid_t tid)
{
        struct user_regs_struct r;
        if (ptrace(PTRACE_GETREGS, tid, NULL, &r) < 0)
                return -errno;
        const uint64_t regs[N_DWARF_REGS] = {r.rax, r.rdx, r.rcx, r.rbx, r.rsi, r.rdi,
                                             r.rbp, r.rsp, r.r8,  r.r9,  r.r10, r.r11,
                                             r.r12, r.r13, r.r14, r.r15, r.rip};
        return capture_from(n, tid, regs, true);
}

/*
 * Read thread tid's /proc/PID/task/TID/syscall into buf: through a file
 * kept open for it (one pread), opened the first time. A thread asleep is
 * read twice a sample (before and after its stack is copied), and opening
 * the file each time cost more than reading it: open, read and close of a
 * /proc file 13-18 us on a VM. Returns the length, or -ESRCH when the
 * thread is gone, another -errno.
 */
static ssize_t sysf_read(struct native *n, pid_t tid, char *buf, size_t cap)
{
        size_t lo = 0, hi = n->n_sysf;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (n->sysf[mid].tid < tid)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        bool kept = lo < n->n_sysf && n->sysf[lo].tid == tid;
        bool was_kept = kept;
        int fd = kept ? n->sysf[lo].fd : -1;
        if (!kept) {
                char path[64];
                snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", (int)n->pid, (int)tid);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        return errno == ENOENT ? -ESRCH : -errno;
                if (n->n_sysf < SYSF_MAX && n->n_sysf == n->cap_sysf) {
                        size_t c = n->cap_sysf ? 2 * n->cap_sysf : 16;
                        struct sys_file *p = realloc(n->sysf, c * sizeof(*p));
                        if (p) {
                                n->sysf = p;
                                n->cap_sysf = c;
                        }
                }
                if (n->n_sysf < n->cap_sysf) {
                        memmove(&n->sysf[lo + 1], &n->sysf[lo],
                                (n->n_sysf - lo) * sizeof(*n->sysf));
                        n->sysf[lo] = (struct sys_file){.tid = tid, .fd = fd};
                        n->n_sysf++;
                        kept = true;
                }
        }
        ssize_t len;
        do
                len = pread(fd, buf, cap, 0);
        while (len < 0 && errno == EINTR);
        int err = len < 0 ? errno : ESRCH;
        if (kept && len > 0) {
                n->sysf[lo].used = n->begins;
                return len;
        }
        close(fd);
        if (kept) {
                n->n_sysf--;
                memmove(&n->sysf[lo], &n->sysf[lo + 1], (n->n_sysf - lo) * sizeof(*n->sysf));
        }
        /* A file kept for a thread that ended: its id may be another's now. */
        if (len <= 0 && was_kept)
                return sysf_read(n, tid, buf, cap);
        return len > 0 ? len : -err;
}

/*
 * Parse /proc/PID/task/TID/syscall: "NR ARG1..ARG6 SP PC" for a thread in a
 * system call, "-1 SP PC" for one blocked in the kernel otherwise, "running"
 * for one on a CPU. Returns 0 with *sp and *pc, or -EAGAIN.
 */
static int syscall_regs(struct native *n, pid_t tid, uint64_t *nr, uint64_t *sp, uint64_t *pc)
{
        char buf[256];
        ssize_t len = sysf_read(n, tid, buf, sizeof(buf) - 1);
        if (len < 0)
                return (int)len;
        buf[len] = 0;
        unsigned long long v[9];
        int k = sscanf(buf, "%lld %llx %llx %llx %llx %llx %llx %llx %llx", (long long *)&v[0],
                       &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]);
        if (k == 9) {
                *nr = v[0];
                *sp = v[7];
                *pc = v[8];
                return 0;
        }
        if (k == 3 && (long long)v[0] == -1) {
                *nr = v[0];
                *sp = v[1];
                *pc = v[2];
                return 0;
        }
        return -EAGAIN;
}

static int capture_sleeping(struct native *n, pid_t tid);

int native_capture_sleeping(struct native *n, pid_t tid)
{
        long long t0 = mono_ns();
        int rc = capture_sleeping(n, tid);
        n->st.capture_ns += (uint64_t)(mono_ns() - t0);
        return rc;
}

static int capture_sleeping(struct native *n, pid_t tid)
{
        uint64_t nr, sp, pc;
        int rc = syscall_regs(n, tid, &nr, &sp, &pc);
        if (rc < 0)
                return rc;
        uint64_t regs[N_DWARF_REGS] = {0};
        regs[7] = sp;
        regs[16] = pc;
        if ((rc = capture_from(n, tid, regs, false)) < 0)
                return rc;
        /* Still asleep where it was: the copy is of a stack that did not move. */
        uint64_t nr2, sp2, pc2;
        if (syscall_regs(n, tid, &nr2, &sp2, &pc2) < 0 || nr2 != nr || sp2 != sp || pc2 != pc) {
                n->n_caps--;
                n->stack_len = n->caps[n->n_caps].off;
                return -EAGAIN;
        }
        return 0;
}

int native_capture_regs(struct native *n, pid_t tid, const uint64_t regs[NATIVE_N_REGS], bool full)
{
        long long t0 = mono_ns();
        int rc = capture_from(n, tid, regs, full);
        n->st.capture_ns += (uint64_t)(mono_ns() - t0);
        return rc;
}

int native_capture_copy(struct native *n, pid_t tid, const uint64_t regs[NATIVE_N_REGS],
                        const void *stack, size_t len)
{
        if (!len || len > STACK_MAX)
                return -EINVAL;
        native_capture_drop(n, tid);
        if (stack_reserve(n, len) < 0)
                return -ENOMEM;
        struct capture *c = capture_new(n, tid);
        if (!c)
                return -ENOMEM;
        memcpy(c->regs, regs, sizeof(c->regs));
        c->full = true;
        c->base = regs[7];
        c->off = n->stack_len;
        c->len = c->asked = len;
        memcpy(n->stack + n->stack_len, stack, len);
        n->stack_len += len;
        n->n_caps++;
        n->st.captures++;
        n->st.capture_bytes += len;
        return 0;
}

void native_capture_drop(struct native *n, pid_t tid)
{
        for (size_t i = 0; i < n->n_caps; i++) {
                if (n->caps[i].tid != tid)
                        continue;
                /* The copy goes with it when it is the last one (the usual case). */
                if (n->caps[i].off + n->caps[i].len == n->stack_len)
                        n->stack_len = n->caps[i].off;
                n->caps[i] = n->caps[--n->n_caps];
                break;
        }
        if (!n->n_caps)
                n->stack_len = 0;
}

static const struct capture *capture_find(const struct native *n, pid_t tid)
{
        for (size_t i = 0; i < n->n_caps; i++)
                if (n->caps[i].tid == tid)
                        return &n->caps[i];
        return NULL;
}

size_t native_capture_count(const struct native *n)
{
        return n->n_caps;
}

pid_t native_capture_tid(const struct native *n, size_t i)
{
        return i < n->n_caps ? n->caps[i].tid : -1;
}

/* ---- names ---------------------------------------------------------------------- */

static uint64_t hash_addr(uint64_t a)
{
        a ^= a >> 33;
        a *= 0xff51afd7ed558ccdULL;
        a ^= a >> 33;
        return a;
}

static int sym_table_grow(struct native *n)
{
        size_t cap = n->sym_cap ? 2 * n->sym_cap : 4096;
        uint64_t *k = calloc(cap, sizeof(*k));
        struct native_sym **v = calloc(cap, sizeof(*v));
        if (!k || !v) {
                free(k);
                free(v);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n->sym_cap; i++) {
                if (!n->vals[i])
                        continue;
                size_t j = hash_addr(n->keys[i]) & (cap - 1);
                while (v[j])
                        j = (j + 1) & (cap - 1);
                k[j] = n->keys[i];
                v[j] = n->vals[i];
        }
        free(n->keys);
        free(n->vals);
        n->keys = k;
        n->vals = v;
        n->sym_cap = cap;
        return 0;
}

/* Forget the entries of addresses in no module (kept for freeing): the maps changed. */
static void sym_forget_unknown(struct native *n)
{
        size_t cap = n->sym_cap;
        uint64_t *k = n->keys;
        struct native_sym **v = n->vals;
        n->keys = calloc(cap, sizeof(*k));
        n->vals = calloc(cap, sizeof(*v));
        n->sym_n = 0;
        if (!n->keys || !n->vals) {
                free(n->keys);
                free(n->vals);
                n->keys = NULL;
                n->vals = NULL;
                n->sym_cap = 0;
        }
        for (size_t i = 0; n->keys && i < cap; i++) {
                if (!v[i] || (v[i]->flags & SYM_NO_MODULE))
                        continue;
                size_t j = hash_addr(k[i]) & (cap - 1);
                while (n->vals[j])
                        j = (j + 1) & (cap - 1);
                n->keys[j] = k[i];
                n->vals[j] = v[i];
                n->sym_n++;
        }
        free(k);
        free(v);
}

/* The module's name as the target knows it: without our /proc/PID/root prefix. */
static const char *module_path(const struct native *n, const char *name)
{
        if (strncmp(name, n->root, n->root_len) == 0 && name[n->root_len] == '/')
                return name + n->root_len;
        if (strncmp(name, "[vdso", 5) == 0)
                return "[vdso]";
        return name;
}

static const char *basename_of(const char *path)
{
        const char *s = strrchr(path, '/');
        return s ? s + 1 : path;
}

/*
 * The start of the function holding `addr` by its CFI (an FDE covers one
 * function), for code no symbol names: a stripped library's static
 * functions. Returns 0 when there is no CFI for it.
 */
static uint64_t cfi_function_start(Dwfl_Module *mod, uint64_t addr)
{
        Dwarf_Addr cbias = 0;
        Dwarf_CFI *cfi = dwfl_module_eh_cfi(mod, &cbias);
        if (!cfi)
                cfi = dwfl_module_dwarf_cfi(mod, &cbias);
        Dwarf_Frame *frame = NULL;
        if (!cfi || dwarf_cfi_addrframe(cfi, addr - cbias, &frame) != 0)
                return 0;
        Dwarf_Addr start = 0, end = 0;
        uint64_t found = dwarf_frame_info(frame, &start, &end, NULL) >= 0 ? start + cbias : 0;
        free(frame);
        return found;
}

static int inl_add(struct fn_info *f, uint64_t lo, uint64_t hi, const char *file, int line)
{
        if (f->n == f->cap) {
                size_t cap = f->cap ? 2 * f->cap : 16;
                struct inl_call *p = realloc(f->calls, cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                f->calls = p;
                f->cap = cap;
        }
        f->calls[f->n++] = (struct inl_call){lo, hi, file, line};
        return 0;
}

/*
 * The outermost inlined calls under `die` (a function, or a block of it):
 * each inlined subroutine's address ranges with its call site, not looking
 * inside it (the calls it inlines in turn are its own) nor into a nested
 * function: the call sites of the outermost inlined calls of every address
 * of the function at once.
 */
static int inl_collect(Dwarf_Die *die, Dwarf_Files *files, size_t nfiles, struct fn_info *f,
                       unsigned depth)
{
        Dwarf_Die child;
        if (depth >= DIE_DEPTH || dwarf_child(die, &child) != 0)
                return 0;
        do {
                int tag = dwarf_tag(&child);
                if (tag == DW_TAG_subprogram)
                        continue;
                if (tag != DW_TAG_inlined_subroutine) {
                        if (inl_collect(&child, files, nfiles, f, depth + 1) < 0)
                                return -ENOMEM;
                        continue;
                }
                Dwarf_Attribute a;
                Dwarf_Word fileidx = 0, lineno = 0;
                if (dwarf_formudata(dwarf_attr(&child, DW_AT_call_file, &a), &fileidx) != 0 ||
                    dwarf_formudata(dwarf_attr(&child, DW_AT_call_line, &a), &lineno) != 0 ||
                    fileidx >= nfiles || lineno == 0 || lineno >= INT32_MAX)
                        continue;
                const char *file = dwarf_filesrc(files, fileidx, NULL, NULL);
                if (!file || !*file)
                        continue;
                Dwarf_Addr base, lo, hi;
                for (ptrdiff_t off = 0; (off = dwarf_ranges(&child, off, &base, &lo, &hi)) > 0;)
                        if (lo < hi && inl_add(f, lo, hi, file, (int)lineno) < 0)
                                return -ENOMEM;
        } while (dwarf_siblingof(&child, &child) == 0);
        return 0;
}

/*
 * How many of the n entries at base (each `size` bytes, sorted by the
 * uint64_t they begin with: a start address) begin at or below key: the
 * index of the first that begins after it.
 */
static size_t count_le(const void *base, size_t n, size_t size, uint64_t key)
{
        size_t lo = 0, hi = n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                uint64_t at;
                memcpy(&at, (const char *)base + mid * size, sizeof(at));
                if (at <= key)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

static int by_lo(const void *a, const void *b)
{
        /* struct inl_call and struct sub_range begin with their lo (count_le() too). */
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return (x > y) - (x < y);
}

/*
 * Every function's code among the children of `die` (a unit, a namespace,
 * a class) into c: each address range of each subprogram with its entry.
 */
static int index_subprograms(Dwarf_Die *die, struct cu_subs *c, unsigned depth)
{
        Dwarf_Die child;
        if (depth >= DIE_DEPTH || dwarf_child(die, &child) != 0)
                return 0;
        do {
                switch (dwarf_tag(&child)) {
                case DW_TAG_subprogram: {
                        Dwarf_Addr base, lo, hi;
                        for (ptrdiff_t off = 0;
                             (off = dwarf_ranges(&child, off, &base, &lo, &hi)) > 0;) {
                                if (lo >= hi)
                                        continue;
                                if (c->n == c->cap) {
                                        size_t cap = c->cap ? 2 * c->cap : 64;
                                        struct sub_range *p = realloc(c->r, cap * sizeof(*p));
                                        if (!p)
                                                return -ENOMEM;
                                        c->r = p;
                                        c->cap = cap;
                                }
                                c->r[c->n++] = (struct sub_range){lo, hi, child};
                        }
                        break;
                }
                case DW_TAG_namespace:
                case DW_TAG_class_type:
                case DW_TAG_structure_type:
                case DW_TAG_union_type:
                case DW_TAG_module:
                        if (index_subprograms(&child, c, depth + 1) < 0)
                                return -ENOMEM;
                        break;
                default:
                        break;
                }
        } while (dwarf_siblingof(&child, &child) == 0);
        return 0;
}

/*
 * The subprogram of unit `cu` (of module `mod`) whose code holds `pc`.
 * Walking a unit's entries costs 0.3-0.9 ms in libpython (every type and
 * declaration its headers bring is one), so each unit is walked once and
 * its functions' ranges kept, sorted, for the next function asked of it.
 */
static bool unit_subprogram(struct native *n, Dwfl_Module *mod, Dwarf_Die *cu, Dwarf_Addr pc,
                            Dwarf_Die *out)
{
        Dwarf_Off off = dwarf_dieoffset(cu);
        struct cu_subs *c = NULL;
        for (size_t i = 0; i < n->n_cus && !c; i++)
                if (n->cus[i].mod == mod && n->cus[i].cu == off)
                        c = &n->cus[i];
        if (!c) {
                if (n->n_cus >= CU_MAX)
                        cus_forget(n);
                if (n->n_cus == n->cap_cus) {
                        size_t cap = n->cap_cus ? 2 * n->cap_cus : 16;
                        struct cu_subs *p = realloc(n->cus, cap * sizeof(*p));
                        if (!p)
                                return false;
                        n->cus = p;
                        n->cap_cus = cap;
                }
                c = &n->cus[n->n_cus];
                *c = (struct cu_subs){.mod = mod, .cu = off};
                if (index_subprograms(cu, c, 0) < 0) {
                        free(c->r);
                        return false;
                }
                if (c->n > 1)
                        qsort(c->r, c->n, sizeof(*c->r), by_lo);
                n->n_cus++;
        }
        size_t lo = count_le(c->r, c->n, sizeof(*c->r), pc);
        if (lo == 0 || pc >= c->r[lo - 1].hi)
                return false;
        *out = c->r[lo - 1].die;
        return true;
}

/* The named function holding `addr`, or NULL. */
static struct fn_info *fn_find(struct native *n, uint64_t addr)
{
        size_t lo = count_le(n->fns, n->n_fns, sizeof(*n->fns), addr);
        return lo && addr < n->fns[lo - 1].end ? &n->fns[lo - 1] : NULL;
}

/*
 * The function `name` at [start, end), as libdwfl named an address in it:
 * every other address in that range is given the same name without asking
 * it again. A range that holds or overlaps one already known is not kept
 * (libdwfl names an address by the closest symbol that holds it, so a
 * symbol inside another's range, as hand-written assembly may have, keeps
 * its own name when it was seen first; one seen after the range that holds
 * it would take that range's name: not seen in the modules tested). NULL
 * when not kept.
 */
static struct fn_info *fn_add(struct native *n, uint64_t start, uint64_t end, const char *name)
{
        /* A known function starting at `start` too is at lo - 1, and overlaps. */
        size_t lo = count_le(n->fns, n->n_fns, sizeof(*n->fns), start);
        if ((lo < n->n_fns && n->fns[lo].start < end) || (lo > 0 && n->fns[lo - 1].end > start))
                return NULL;
        if (n->n_fns >= FN_MAX) {
                fns_forget(n);
                lo = 0;
        }
        if (n->n_fns == n->cap_fns) {
                size_t cap = n->cap_fns ? 2 * n->cap_fns : 64;
                struct fn_info *p = realloc(n->fns, cap * sizeof(*p));
                if (!p)
                        return NULL;
                n->fns = p;
                n->cap_fns = cap;
        }
        memmove(&n->fns[lo + 1], &n->fns[lo], (n->n_fns - lo) * sizeof(*n->fns));
        n->fns[lo] = (struct fn_info){.start = start, .end = end, .name = name, .inl = -1};
        n->n_fns++;
        return &n->fns[lo];
}

/*
 * The outermost inlined calls of function `f`, which holds `addr`, found
 * once (f->inl then 1; 0 when its subprogram is not found). The lines of a
 * function's addresses were found by dwarf_getscopes(), which walked the
 * whole unit for every address (1.4 ms for one of CPython's eval loop, and
 * a Python program's samples land on thousands of them) and, in code
 * inlined two levels deep, gave the innermost call's site (from an inlined
 * instance it goes on into its abstract definition's scopes). Returns
 * -ENOMEM or 0.
 */
static int fn_inlines(struct native *n, Dwfl_Module *mod, uint64_t addr, struct fn_info *f)
{
        if (f->inl >= 0)
                return 0;
        f->inl = 0;
        Dwarf_Die *cu = dwfl_module_addrdie(mod, addr, &f->dbias);
        Dwarf_Die fn;
        Dwarf_Files *files = NULL;
        size_t nfiles = 0;
        if (!cu || !unit_subprogram(n, mod, cu, addr - f->dbias, &fn) ||
            dwarf_getsrcfiles(cu, &files, &nfiles) != 0)
                return 0;
        if (inl_collect(&fn, files, nfiles, f, 0) < 0) {
                free(f->calls);
                f->calls = NULL;
                f->n = f->cap = 0;
                f->inl = -1;
                return -ENOMEM;
        }
        if (f->n > 1) /* none: f->calls is NULL, which qsort must not see */
                qsort(f->calls, f->n, sizeof(*f->calls), by_lo);
        f->inl = 1;
        return 0;
}

/* The call site of the outermost inlined call holding `addr` in f: 1, or 0 when none. */
static int inl_lookup(const struct fn_info *f, uint64_t addr, const char **file, int *line)
{
        uint64_t pc = addr - f->dbias;
        size_t lo = count_le(f->calls, f->n, sizeof(*f->calls), pc);
        if (lo == 0 || pc >= f->calls[lo - 1].hi)
                return 0;
        *file = f->calls[lo - 1].file;
        *line = f->calls[lo - 1].line;
        return 1;
}

/*
 * Where `addr`, inlined into the function that holds it, sits in that
 * function: the call site of the outermost inlined call (DWARF
 * DW_AT_call_file, DW_AT_call_line), so that a frame's line belongs to its
 * function, however deep the inlining. For a function whose symbol gave
 * it a range (fn, kept: its inlined calls are collected once); else for
 * this address alone (no symbol, or one of no size). Returns 1 with the
 * call site, 0 when addr is not in inlined code or there is no DWARF.
 */
static int call_site(struct native *n, Dwfl_Module *mod, uint64_t addr, struct fn_info *fn,
                     const char **file, int *line)
{
        if (fn) {
                if (fn_inlines(n, mod, addr, fn) == 0 && fn->inl == 1)
                        return inl_lookup(fn, addr, file, line);
                if (fn->inl == 0)
                        return 0;
        }
        struct fn_info f = {.inl = -1};
        int found =
            fn_inlines(n, mod, addr, &f) == 0 && f.inl == 1 && inl_lookup(&f, addr, file, line);
        free(f.calls);
        return found;
}

/*
 * Whether `path` is the interpreter: its executable or libpython. Code of
 * it that no symbol names (the static functions of a stripped python, as
 * Debian's) is its internals, hidden like its named call machinery; the
 * eval loop and its API are exported, so they keep their names.
 */
static bool interpreter_module(const char *path)
{
        const char *base = basename_of(path);
        return strncmp(base, "python", 6) == 0 || strncmp(base, "libpython", 9) == 0;
}

/*
 * A C++ symbol's name demangled (`ns::Klass::method(int)`), malloc'd; NULL
 * when `name` is not a mangled name or there is no demangler.
 */
static char *demangle(const char *name)
{
#ifdef PYFLAME_HAVE_CXA_DEMANGLE
        if (strncmp(name, "_Z", 2) != 0)
                return NULL;
        int status = 0;
        char *d = __cxa_demangle(name, NULL, NULL, &status);
        if (status != 0) {
                free(d);
                return NULL;
        }
        return d;
#else
        (void)name;
        return NULL;
#endif
}

/* Name `addr` (a return address minus one, or a leaf's PC) into a new entry. */
static struct native_sym *sym_make(struct native *n, uint64_t addr)
{
        struct native_sym *e = calloc(1, sizeof(*e));
        if (!e)
                return NULL;
        const char *function = NULL, *file = NULL;
        const char *module = "?";
        bool named = false;
        int line = -1;
        uint64_t offset = addr;
        char buf[4200];
        Dwfl_Module *mod = dwfl_addrmodule(n->dwfl, addr);
        if (mod) {
                const char *mname = dwfl_module_info(mod, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
                module = mname ? module_path(n, mname) : "?";
                Dwarf_Addr bias = 0;
                dwfl_module_getelf(mod, &bias);
                GElf_Off symoff = 0;
                struct fn_info *fn = fn_find(n, addr);
                const char *name = fn ? fn->name : NULL;
                if (fn) {
                        symoff = addr - fn->start;
                } else {
                        GElf_Sym sym;
                        name = dwfl_module_addrinfo(mod, addr, &symoff, &sym, NULL, NULL, NULL);
                        if (name && *name && sym.st_size > symoff)
                                fn = fn_add(n, addr - symoff, addr - symoff + sym.st_size, name);
                }
                if (name && *name) {
                        named = true;
                        function = name;
                        offset = addr - symoff - bias;
                } else {
                        /* Unnamed: one frame per function (its FDE), not per instruction. */
                        uint64_t start = cfi_function_start(mod, addr);
                        offset = (start ? start : addr) - bias;
                }
                if (named && native_is_eval(name))
                        e->flags |= NATIVE_SYM_EVAL;
                else if (named ? native_is_plumbing(name) : interpreter_module(module))
                        e->flags |= NATIVE_SYM_PLUMBING;
                /*
                 * Source lines cost the module's DWARF (loaded, perhaps
                 * decompressed, the first time): not for the frames a merged
                 * stack drops, the plumbing's unless kept. (The eval loop's
                 * are shown where their Python frame is not linked.)
                 */
                bool lines = !((e->flags & NATIVE_SYM_PLUMBING) && !n->keep_plumbing);
                if (lines && !call_site(n, mod, addr, fn, &file, &line)) {
                        Dwfl_Line *dl = dwfl_module_getsrc(mod, addr);
                        int lineno = 0;
                        const char *src =
                            dl ? dwfl_lineinfo(dl, NULL, &lineno, NULL, NULL, NULL) : NULL;
                        if (src && *src) {
                                file = src;
                                line = lineno > 0 ? lineno : -1;
                        }
                }
        } else {
                e->flags |= SYM_NO_MODULE;
        }
        if (!function) {
                snprintf(buf, sizeof(buf), "%s+0x%" PRIx64, basename_of(module), offset);
                function = buf;
        }
        char *demangled = named ? demangle(function) : NULL;
        e->function = demangled ? demangled : strdup(function);
        e->file = strdup(file ? file : module);
        e->module = strdup(module);
        if (!e->function || !e->file || !e->module) {
                free((char *)e->function);
                free((char *)e->file);
                free((char *)e->module);
                free(e);
                return NULL;
        }
        e->line = line;
        e->offset = offset;
        return e;
}

static const struct native_sym *symbolize(struct native *n, uint64_t addr)
{
        if ((n->sym_n + 1) * 2 > n->sym_cap && sym_table_grow(n) < 0)
                return NULL;
        size_t j = hash_addr(addr) & (n->sym_cap - 1);
        while (n->vals[j]) {
                if (n->keys[j] == addr)
                        return n->vals[j];
                j = (j + 1) & (n->sym_cap - 1);
        }
        if (n->n_all == n->cap_all) {
                size_t cap = n->cap_all ? 2 * n->cap_all : 1024;
                struct native_sym **p = realloc(n->all, cap * sizeof(*p));
                if (!p)
                        return NULL;
                n->all = p;
                n->cap_all = cap;
        }
        struct native_sym *e = sym_make(n, addr);
        if (!e)
                return NULL;
        e->id = n->next_id++;
        n->all[n->n_all++] = e;
        n->keys[j] = addr;
        n->vals[j] = e;
        n->sym_n++;
        n->st.symbols++;
        return e;
}

bool native_trim(struct native *n, size_t max_names)
{
        if (n->n_all <= max_names)
                return false;
        syms_free(n);
        n->next_id = 1;
        if (n->sym_cap) {
                memset(n->keys, 0, n->sym_cap * sizeof(*n->keys));
                memset(n->vals, 0, n->sym_cap * sizeof(*n->vals));
        }
        n->sym_n = 0;
        n->st.sym_resets++;
        return true;
}

/* ---- CFI rules, cached per PC ----------------------------------------------------- */

/* Decode what the CFI says at `pc` (already adjusted: a return address minus one). */
static void cfi_rule_make(struct native *n, uint64_t pc, struct cfi_rule *r)
{
        memset(r, 0, sizeof(*r));
        Dwfl_Module *mod = dwfl_addrmodule(n->dwfl, pc);
        if (!mod)
                return;
        /* As libdw's unwinder: .eh_frame first, then .debug_frame. */
        Dwarf_Addr bias = 0;
        Dwarf_Frame *f = NULL;
        Dwarf_CFI *cfi = dwfl_module_eh_cfi(mod, &bias);
        if (!cfi || dwarf_cfi_addrframe(cfi, pc - bias, &f) != 0) {
                f = NULL;
                cfi = dwfl_module_dwarf_cfi(mod, &bias);
                if (!cfi || dwarf_cfi_addrframe(cfi, pc - bias, &f) != 0)
                        return;
        }
        bool signal = false;
        Dwarf_Op *ops = NULL;
        size_t nops = 0;
        /* A signal frame's caller is an interrupted instruction, not a call: left to libdw. */
        if (dwarf_frame_info(f, NULL, NULL, &signal) != 16 || signal ||
            dwarf_frame_cfa(f, &ops, &nops) != 0 || nops != 1)
                goto out;
        if (ops[0].atom == DW_OP_bregx) {
                r->cfa_reg = ops[0].number < N_DWARF_REGS ? (uint8_t)ops[0].number : 0xff;
                r->cfa_off = (int64_t)ops[0].number2;
        } else if (ops[0].atom >= DW_OP_breg0 && ops[0].atom <= DW_OP_breg31) {
                r->cfa_reg = (uint8_t)(ops[0].atom - DW_OP_breg0);
                r->cfa_off = (int64_t)ops[0].number;
        } else {
                goto out;
        }
        if (r->cfa_reg >= N_DWARF_REGS)
                goto out;
        for (int reg = 0; reg < N_DWARF_REGS; reg++) {
                Dwarf_Op mem[3];
                r->kind[reg] = RULE_OTHER;
                if (dwarf_frame_register(f, reg, mem, &ops, &nops) != 0)
                        continue;
                if (nops == 0) {
                        if (ops == mem)
                                r->kind[reg] = RULE_UNDEFINED;
                        else if (!ops)
                                r->kind[reg] = RULE_SAME;
                        continue;
                }
                if (ops[0].atom != DW_OP_call_frame_cfa)
                        continue;
                size_t k = 1;
                int64_t off = 0;
                if (k < nops && ops[k].atom == DW_OP_plus_uconst)
                        off = (int64_t)ops[k++].number;
                enum reg_rule_kind kind = RULE_AT_CFA;
                if (k < nops && ops[k].atom == DW_OP_stack_value) {
                        kind = RULE_IS_CFA;
                        k++;
                }
                if (k == nops) {
                        r->kind[reg] = (uint8_t)kind;
                        r->off[reg] = off;
                }
        }
        r->usable = true;
out:
        free(f);
}

static int rule_table_grow(struct native *n)
{
        size_t cap = n->rule_cap ? 2 * n->rule_cap : 1024;
        uint64_t *k = calloc(cap, sizeof(*k));
        struct cfi_rule *v = calloc(cap, sizeof(*v));
        if (!k || !v) {
                free(k);
                free(v);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n->rule_cap; i++) {
                if (!n->rule_keys[i])
                        continue;
                size_t j = hash_addr(n->rule_keys[i]) & (cap - 1);
                while (k[j])
                        j = (j + 1) & (cap - 1);
                k[j] = n->rule_keys[i];
                v[j] = n->rules[i];
        }
        free(n->rule_keys);
        free(n->rules);
        n->rule_keys = k;
        n->rules = v;
        n->rule_cap = cap;
        return 0;
}

/* Forget every rule: the modules were reported again (they may have moved). */
static void rules_forget(struct native *n)
{
        if (n->rule_keys)
                memset(n->rule_keys, 0, n->rule_cap * sizeof(*n->rule_keys));
        n->rule_n = 0;
}

/*
 * The CFI rule at `pc` (adjusted), decoded the first time and cached.
 * Valid until the next call. NULL when out of memory.
 */
static const struct cfi_rule *cfi_rule(struct native *n, uint64_t pc)
{
        if (!pc)
                return NULL; /* 0 marks an empty slot */
        if (n->rule_n >= RULE_MAX)
                rules_forget(n);
        if ((n->rule_n + 1) * 2 > n->rule_cap && rule_table_grow(n) < 0)
                return NULL;
        size_t j = hash_addr(pc) & (n->rule_cap - 1);
        while (n->rule_keys[j]) {
                if (n->rule_keys[j] == pc)
                        return &n->rules[j];
                j = (j + 1) & (n->rule_cap - 1);
        }
        cfi_rule_make(n, pc, &n->rules[j]);
        n->rule_keys[j] = pc;
        n->rule_n++;
        n->st.cfi_rules++;
        return &n->rules[j];
}

/*
 * Unwind n->cur with the cached rules, naming each frame into n->out as
 * on_frame() does. Returns 0 when it reached the root (the caller's return
 * address is undefined or zero), 1 when n->out is full, or -EAGAIN when a
 * frame is one it leaves to libdw: no CFI (frame pointers then), a rule it
 * does not decode, a register it does not know, an address in no module.
 * It then gives up before it can differ from libdw, which starts again.
 */
static int unwind_cached(struct native *n)
{
        const struct capture *c = n->cur;
        uint64_t regs[N_DWARF_REGS], next[N_DWARF_REGS];
        uint32_t known = 0;
        if (c->full) {
                memcpy(regs, c->regs, sizeof(regs));
                known = (1u << N_DWARF_REGS) - 1;
        } else {
                memset(regs, 0, sizeof(regs));
                regs[7] = c->regs[7];
                regs[16] = c->regs[16];
                known = 1u << 7 | 1u << 16;
        }
        for (bool activation = true;; activation = false) {
                uint64_t pc = regs[16];
                if (pc == 0)
                        return -EAGAIN;
                /* A return address is past its call: look up the call itself. */
                uint64_t addr = activation ? pc : pc - 1;
                const struct native_sym *e = symbolize(n, addr);
                if (!e || (e->flags & SYM_NO_MODULE))
                        return -EAGAIN;
                n->out[n->out_n++] = e;
                if (n->out_n >= n->out_cap)
                        return 1;
                const struct cfi_rule *r = cfi_rule(n, addr);
                if (!r || !r->usable || !(known & 1u << r->cfa_reg))
                        return -EAGAIN;
                uint64_t cfa = regs[r->cfa_reg] + (uint64_t)r->cfa_off;
                uint32_t next_known = 0;
                for (int reg = 0; reg < N_DWARF_REGS; reg++) {
                        uint64_t at = cfa + (uint64_t)r->off[reg];
                        switch (r->kind[reg]) {
                        case RULE_SAME:
                                next[reg] = regs[reg];
                                next_known |= known & 1u << reg;
                                break;
                        case RULE_AT_CFA:
                                if (read_word(n, at, &next[reg]))
                                        next_known |= 1u << reg;
                                break;
                        case RULE_IS_CFA:
                                next[reg] = at;
                                next_known |= 1u << reg;
                                break;
                        default:
                                break;
                        }
                }
                if (r->kind[16] == RULE_UNDEFINED)
                        return 0; /* the outermost frame (_start, a thread's clone) */
                if (!(next_known & 1u << 16))
                        return -EAGAIN;
                if (next[16] == 0)
                        return 0;
                memcpy(regs, next, sizeof(regs));
                known = next_known;
        }
}

/* ---- unwinding ------------------------------------------------------------------- */

static int on_frame(Dwfl_Frame *state, void *arg)
{
        struct native *n = arg;
        Dwarf_Addr pc;
        bool activation;
        if (!dwfl_frame_pc(state, &pc, &activation))
                return DWARF_CB_ABORT;
        if (pc == 0)
                return DWARF_CB_ABORT;
        n->last_addr = activation ? pc : pc - 1;
        const struct native_sym *e = symbolize(n, n->last_addr);
        if (!e)
                return DWARF_CB_ABORT;
        if (e->flags & SYM_NO_MODULE) {
                n->unknown_pc = true;
                if (!n->unknown_new && !was_mapped(n, pc))
                        n->unknown_new = pc;
        }
        n->out[n->out_n++] = e;
        return n->out_n < n->out_cap ? DWARF_CB_OK : DWARF_CB_ABORT;
}

int native_unwind(struct native *n, pid_t tid, const struct native_sym **out, size_t cap,
                  size_t *depth)
{
        const struct capture *c = capture_find(n, tid);
        if (!c)
                return -ENOENT;
        long long t0 = mono_ns();
        uint64_t symbols = n->st.symbols;
        int rc = 0;
        for (int pass = 0; pass < 2; pass++) {
                n->unknown_pc = false;
                n->unknown_new = 0;
                n->cur = c;
                n->out = out;
                n->out_cap = cap < NATIVE_MAX_DEPTH ? cap : NATIVE_MAX_DEPTH;
                n->out_n = 0;
                n->cur_top = 0;
                n->cur_outside = false;
                n->st.unwinds++;
                rc = n->out_cap ? unwind_cached(n) : 0;
                if (rc == -EAGAIN) {
                        /* libdw does it all again, from the same capture. */
                        n->st.cfi_fallbacks++;
                        n->unknown_pc = false;
                        n->unknown_new = 0;
                        n->out_n = 0;
                        n->cur_top = 0;
                        n->cur_outside = false;
                        rc = dwfl_getthread_frames(n->dwfl, tid, on_frame, n);
                        /*
                         * libdw also ends, with no error, where it cannot
                         * find the caller: a register the CFI needs is not
                         * known (a thread asleep gives its SP and PC only,
                         * and code with frame pointers needs RBP). The
                         * stack reached its root only if the last frame's
                         * CFI says it has no caller; else it was cut short,
                         * never a whole stack (found by test_native_self).
                         */
                        if (rc == 0 && n->out_n > 0) {
                                const struct cfi_rule *r = cfi_rule(n, n->last_addr);
                                if (r && r->usable && r->kind[16] != RULE_UNDEFINED)
                                        rc = -1;
                        }
                }
                if (rc == 0)
                        note_top(n, c);
                n->cur = NULL;
                /*
                 * An address in no module: a library may have been loaded
                 * since the maps were read. Read them again and unwind again
                 * from the same capture: at once when the address was in no
                 * mapping at the last reading (else the samples of a library
                 * just loaded would be dropped), not too often when it was
                 * (code in anonymous memory, a JIT's, is never in a module).
                 */
                long long since = mono_ns() - n->refreshed_ns;
                if (!n->unknown_pc || since < (n->unknown_new ? REFRESH_NEW_NS : REFRESH_NS))
                        break;
                n->st.refreshes++;
                if (report_modules(n) < 0)
                        break;
                sym_forget_unknown(n);
                rules_forget(n);
                fns_forget(n);
        }
        *depth = n->out_n;
        n->st.frames += n->out_n;
        uint64_t dt = (uint64_t)(mono_ns() - t0);
        n->st.unwind_ns += dt;
        if (n->st.symbols == symbols) {
                n->st.warm_unwinds++;
                n->st.warm_unwind_ns += dt;
        }
        /* 0: reached the root (the CFI says there is no caller); else cut short. */
        return rc == 0 ? (int)n->out_n : -EPIPE;
}

void native_get_stats(const struct native *n, struct native_stats *st)
{
        *st = n->st;
}

void native_keep_plumbing(struct native *n)
{
        n->keep_plumbing = true;
}

#else /* !PYFLAME_HAVE_LIBDW */

struct native {
        int unused;
};

int native_open(pid_t pid, struct native **out, char *err, size_t errlen)
{
        (void)pid;
        (void)out;
        snprintf(err, errlen,
                 "this pyflame-record was built without libdw (elfutils): native stacks are "
                 "not available; rebuild with libdw-dev installed");
        return -ENOTSUP;
}

void native_close(struct native *n)
{
        (void)n;
}

void native_begin(struct native *n)
{
        (void)n;
}

int native_capture_held(struct native *n, pid_t tid)
{
        (void)n;
        (void)tid;
        return -ENOTSUP;
}

int native_capture_sleeping(struct native *n, pid_t tid)
{
        (void)n;
        (void)tid;
        return -ENOTSUP;
}

int native_capture_regs(struct native *n, pid_t tid, const uint64_t regs[NATIVE_N_REGS], bool full)
{
        (void)n;
        (void)tid;
        (void)regs;
        (void)full;
        return -ENOTSUP;
}

int native_capture_copy(struct native *n, pid_t tid, const uint64_t regs[NATIVE_N_REGS],
                        const void *stack, size_t len)
{
        (void)n, (void)tid, (void)regs, (void)stack, (void)len;
        return -ENOTSUP;
}

void native_capture_drop(struct native *n, pid_t tid)
{
        (void)n, (void)tid;
}

size_t native_capture_count(const struct native *n)
{
        (void)n;
        return 0;
}

pid_t native_capture_tid(const struct native *n, size_t i)
{
        (void)n;
        (void)i;
        return -1;
}

int native_unwind(struct native *n, pid_t tid, const struct native_sym **out, size_t cap,
                  size_t *depth)
{
        (void)n;
        (void)tid;
        (void)out;
        (void)cap;
        (void)depth;
        return -ENOENT;
}

void native_get_stats(const struct native *n, struct native_stats *st)
{
        (void)n;
        memset(st, 0, sizeof(*st));
}

void native_keep_plumbing(struct native *n)
{
        (void)n;
}

bool native_trim(struct native *n, size_t max_names)
{
        (void)n;
        (void)max_names;
        return false;
}

#endif
