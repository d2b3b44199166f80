/*
 * fuzz_native.c - libFuzzer target: the native unwinder (record/native.c:
 * its cached CFI rules, libdw's unwind where those give up, the naming of
 * every address) walking a stack of another program, damaged. A target's
 * stack is its own to write: return addresses, saved registers and frame
 * pointers may be anything by the time a capture copies them.
 *
 * The stack is real: at startup, eight calls deep in this program,
 * getcontext() gives the registers and the stack is copied from the stack
 * pointer to the top of the [stack] mapping; an unwind of that capture
 * (native_capture_regs() on this very process) is the truth, and must show
 * the eight calls. Each input starts from a copy of that stack in the heap,
 * relocated (every word that pointed into the original stack points into
 * the copy), and applies operations:
 *  - a word (8-aligned or not) of the copy set to any value, a return
 *    address of the stack or any address in the code around it, an address
 *    in the copy, or a small integer;
 *  - a register set the same ways (the PC and the stack pointer included);
 *  - all registers known or only the PC and the stack pointer (a thread
 *    asleep in a system call);
 *  - an unwind: capture the copy (the stack pointer, unless an input moved
 *    it, at the copy) and unwind into an array of a length the input says.
 * Checked: an unwind returns its depth, or -EPIPE (cut short), never more
 * frames than asked or than NATIVE_MAX_DEPTH; every frame is named (a
 * function, a file and a module that are strings); an input that changed
 * nothing unwinds to exactly the truth's frames. A crash, a sanitizer report,
 * a leak or a hang is a finding. The unwinder's caches (names, CFI rules)
 * outlive inputs, as the recorder's do across samples.
 *
 * Build: CC=clang meson setup build-fuzz -Dfuzz=true
 * -Db_sanitize=address,undefined -Db_lundef=false; meson test -C build-fuzz
 * fuzz-native (fixed seed), or build-fuzz/tests/fuzz/fuzz_native -max_len=512
 * -max_total_time=3600 DIR.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

#include "fuzzin.h"
#include "native.h"
#include "ucregs.h"

const char fuzz_name[] = "fuzz_native";

#define DEEP      8
#define MAX_STACK (256u << 10)
#define MAX_TRUTH 64
#define MAX_CODE  256
#define MAX_OPS   48
#define FAKE_TID  1 /* the captures' thread: any id, the unwinder only keys on it */

static struct {
        struct native *n;
        uint64_t regs[NATIVE_N_REGS];
        uint8_t *stack; /* the copy made at startup, of the stack from regs[7] up */
        size_t len;
        uint64_t base;           /* where it was: regs[7] */
        uint64_t code[MAX_CODE]; /* words of the stack that point into code */
        size_t n_code;
        const char *truth[MAX_TRUTH]; /* its frames' function names */
        size_t n_truth;
} g;

/* Copy len bytes of this process at addr, as the kernel sees them (ASan's redzones are not read).
 */
static bool read_self(void *dst, uint64_t addr, size_t len)
{
        struct iovec local = {dst, len}, remote = {(void *)(uintptr_t)addr, len};
        return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)len;
}

/*
 * The end of the mapping holding addr (the stack's top), or 0; and the words
 * of the stack copy that point into executable mappings (return addresses,
 * mostly) into g.code.
 */
static uint64_t stack_end(uint64_t addr)
{
        FILE *f = fopen("/proc/self/maps", "re");
        CHECK(f, "/proc/self/maps: %s", strerror(errno));
        char line[512];
        uint64_t end = 0, exec[64][2];
        size_t n_exec = 0;
        while (fgets(line, sizeof(line), f)) {
                unsigned long long lo, hi;
                char perms[8];
                if (sscanf(line, "%llx-%llx %7s", &lo, &hi, perms) != 3)
                        continue;
                if (addr >= lo && addr < hi)
                        end = hi;
                if (perms[2] == 'x' && n_exec < 64) {
                        exec[n_exec][0] = lo;
                        exec[n_exec++][1] = hi;
                }
        }
        fclose(f);
        for (uint64_t a = addr; end && a + 8 <= end && a - addr < MAX_STACK; a += 8) {
                uint64_t v;
                if (!read_self(&v, a, 8))
                        break;
                for (size_t i = 0; i < n_exec && g.n_code < MAX_CODE; i++)
                        if (v >= exec[i][0] && v < exec[i][1])
                                g.code[g.n_code++] = v;
        }
        return end;
}

static void unwind_truth(void)
{
        const struct native_sym *out[MAX_TRUTH];
        size_t depth = 0;
        int rc = native_unwind(g.n, FAKE_TID, out, MAX_TRUTH, &depth);
        CHECK(rc >= 0, "the unwind of this program's own stack failed (%d, %zu frames)", rc, depth);
        int deep = 0;
        for (size_t i = 0; i < depth; i++) {
                g.truth[i] = out[i]->function;
                deep += strcmp(out[i]->function, "deep") == 0;
        }
        g.n_truth = depth;
        CHECK(deep == DEEP, "the truth shows %d of the %d calls of deep()", deep, DEEP);
}

/* Eight calls deep: the registers and the stack, and the truth's unwind. */
__attribute__((noinline)) static int deep(int k)
{
        if (k > 1) {
                int r = deep(k - 1);
                __asm__ volatile("" ::: "memory"); /* not a tail call: each call keeps its frame */
                return r + 1;
        }
        ucontext_t uc;
        CHECK(getcontext(&uc) == 0, "getcontext: %s", strerror(errno));
        uint64_t regs[NATIVE_N_REGS];
        ucregs(&uc, regs);
        memcpy(g.regs, regs, sizeof(regs));
        g.base = regs[7];
        uint64_t end = stack_end(g.base);
        CHECK(end > g.base, "no [stack] mapping holds the stack pointer %#llx",
              (unsigned long long)g.base);
        g.len = end - g.base < MAX_STACK ? (size_t)(end - g.base) : MAX_STACK;
        g.stack = malloc(g.len);
        CHECK(g.stack, "out of memory");
        /* The frames from here up stay as they are until deep() returns. */
        CHECK(read_self(g.stack, g.base, g.len), "cannot copy this program's own stack");
        native_begin(g.n);
        int rc = native_capture_regs(g.n, FAKE_TID, g.regs, true);
        CHECK(rc == 0, "native_capture_regs of this program's own stack: %d", rc);
        unwind_truth();
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        (void)argc, (void)argv;
        char err[512] = "";
        int rc = native_open(getpid(), &g.n, err, sizeof(err));
        CHECK(rc == 0, "native_open: %d %s", rc, err);
        CHECK(deep(DEEP) == DEEP - 1, "deep() returned wrong");
        CHECK(g.n_code > 0, "no word of the stack points into code");
        fprintf(stderr, "fuzz_native: %zu stack bytes, %zu frames:", g.len, g.n_truth);
        for (size_t i = 0; i < g.n_truth; i++)
                fprintf(stderr, " %s", g.truth[i]);
        fprintf(stderr, "\n");
        return 0;
}

/* ---- one input ---- */

/* A value for a word or a register, as the input says. */
static uint64_t value(struct in *in, uint64_t copy)
{
        uint8_t kind = get8(in);
        switch (kind % 5) {
        case 0:
                return get64(in);
        case 1: /* a return address of the stack, or code around it */
                return g.code[get8(in) % g.n_code] +
                       (uint64_t)(int64_t)(int16_t)get16(in) * (kind & 0x80 ? 1 : 0);
        case 2: /* an address in the copy */
                return copy + (get32(in) % (g.len + 64));
        case 3:
                return (uint64_t)(int64_t)(int16_t)get16(in);
        default: /* an aligned address in the copy, where a saved frame pointer points */
                return copy + (get32(in) % g.len & ~(uint64_t)7);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct in in = {data, size};
        uint8_t *copy = malloc(g.len + 8);
        CHECK(copy, "out of memory");
        memcpy(copy, g.stack, g.len);
        memset(copy + g.len, 0, 8);
        uint64_t at = (uint64_t)(uintptr_t)copy, delta = at - g.base;
        /* Relocated: what pointed into the original stack points into the copy. */
        for (size_t off = 0; off + 8 <= g.len; off += 8) {
                uint64_t v;
                memcpy(&v, copy + off, 8);
                if (v >= g.base && v < g.base + g.len) {
                        v += delta;
                        memcpy(copy + off, &v, 8);
                }
        }
        uint64_t regs[NATIVE_N_REGS];
        memcpy(regs, g.regs, sizeof(regs));
        for (int i = 0; i < NATIVE_N_REGS; i++)
                if (regs[i] >= g.base && regs[i] < g.base + g.len)
                        regs[i] += delta;
        bool full = true, changed = false;
        for (int ops = 0; in.n && ops < MAX_OPS; ops++) {
                uint8_t op = get8(&in);
                switch (op % 4) {
                case 0: { /* a word of the stack */
                        size_t off = get32(&in) % g.len;
                        if (op & 0x80)
                                off &= ~(size_t)7;
                        uint64_t v = value(&in, at);
                        memcpy(copy + off, &v, off + 8 <= g.len ? 8 : g.len - off);
                        changed = true;
                        break;
                }
                case 1: /* a register */
                        regs[get8(&in) % NATIVE_N_REGS] = value(&in, at);
                        changed = true;
                        break;
                case 2:
                        full = !(op & 0x80);
                        changed |= !full;
                        break;
                default: {
                        native_begin(g.n);
                        int rc = native_capture_regs(g.n, FAKE_TID, regs, full);
                        if (rc < 0) {
                                CHECK(regs[7] != at, "the copy could not be captured: %d", rc);
                                break;
                        }
                        size_t cap = 1 + get16(&in) % (NATIVE_MAX_DEPTH + 8);
                        const struct native_sym **out = malloc(cap * sizeof(*out));
                        CHECK(out, "out of memory");
                        size_t depth = 0;
                        rc = native_unwind(g.n, FAKE_TID, out, cap, &depth);
                        CHECK((rc >= 0 && (size_t)rc == depth) || rc == -EPIPE,
                              "native_unwind returned %d (%zu frames)", rc, depth);
                        CHECK(depth <= cap && depth <= NATIVE_MAX_DEPTH, "%zu frames into %zu",
                              depth, cap);
                        for (size_t i = 0; i < depth; i++)
                                CHECK(out[i] && out[i]->function && out[i]->file &&
                                          out[i]->module && strlen(out[i]->function) < 65536 &&
                                          strlen(out[i]->file) < 65536 &&
                                          strlen(out[i]->module) < 65536,
                                      "frame %zu is not named", i);
                        if (!changed && cap > g.n_truth) { /* room to see the root */
                                CHECK(rc >= 0 && depth == g.n_truth,
                                      "the copy unwinds to %zu frames (%d), the truth %zu", depth,
                                      rc, g.n_truth);
                                for (size_t i = 0; i < depth; i++)
                                        CHECK(!strcmp(out[i]->function, g.truth[i]),
                                              "frame %zu: %s, the truth %s", i, out[i]->function,
                                              g.truth[i]);
                        }
                        free(out);
                        break;
                }
                }
        }
        free(copy);
        return 0;
}
