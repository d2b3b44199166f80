/*
 * test_native_self.c - the native unwinder (native.h) on a stack of this
 * very test: eight calls of deep() captured from the registers getcontext()
 * gives (native_capture_regs) and unwound with the CFI of the test's own
 * binary and of libc. Each of these frames allocates on its stack (alloca),
 * so its CFI finds the caller's frame through RBP, as in code built with
 * frame pointers. Checked: every one of the eight calls, in order, leaf first,
 * under them main, and the unwind reaching the stack's root; from the stack
 * and instruction pointers alone (a thread asleep in a system call), where
 * RBP is not known, the unwind says it was cut short (-EPIPE) and is never
 * taken for a whole stack (libdw ends there with no error); a stack pointer
 * at no mapping refused, with no capture left behind; the names forgotten
 * past a bound (native_trim) and named again, ids from 1; a frame whose
 * return address is in code inlined two levels deep given the line of the
 * outermost inlined call, in its own function. Skipped where the build has
 * no libdw.
 */
#include <alloca.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#include <cmocka.h>

#include "native.h"
#include "ucregs.h"

#define DEEP 8
#define TID  1 /* the capture's thread: any id */

static struct native *n;

struct result {
        int rc;
        size_t depth;
        char names[64][128]; /* copies: native_trim() frees the entries */
        char files[64][256];
        int lines[64];
        uint32_t ids[64];
        int call_line; /* test_inlined_line(): the line of the call made in outer_fn */
};

/*
 * The capture, in a frame whose CFA is RBP-based (it allocates on its stack
 * too) from its first instruction on; getcontext() returns twice, so this
 * is never inlined.
 */
static void capture_and_unwind(bool full, struct result *res)
{
        volatile char *pad = alloca((size_t)full * 16 + 16);
        pad[0] = 1;
        ucontext_t uc;
        assert_int_equal(getcontext(&uc), 0);
        uint64_t regs[NATIVE_N_REGS];
        ucregs(&uc, regs);
        native_begin(n);
        assert_int_equal(native_capture_regs(n, TID, regs, full), 0);
        const struct native_sym *out[64];
        res->rc = native_unwind(n, TID, out, 64, &res->depth);
        for (size_t i = 0; i < res->depth; i++) {
                snprintf(res->names[i], sizeof(res->names[i]), "%s", out[i]->function);
                snprintf(res->files[i], sizeof(res->files[i]), "%s", out[i]->file);
                res->lines[i] = out[i]->line;
                res->ids[i] = out[i]->id;
        }
}

/*
 * Not inlined, not cloned under another name, not a tail call: eight frames
 * named deep, each with a stack of variable size (its CFA is RBP-based).
 */
#if defined(__clang__)
__attribute__((noinline))
#else
__attribute__((noinline, noclone))
#endif
static int
deep(int k, bool full, struct result *res)
{
        if (k > 1) {
                int r = deep(k - 1, full, res);
                __asm__ volatile("" ::: "memory");
                return r + 1;
        }
        capture_and_unwind(full, res);
        return 0;
}

/*
 * Two levels of inlining under outer_fn: the capture is called from code of
 * inner(), inlined into mid(), inlined into outer_fn. Its caller's frame is
 * outer_fn's, and its line the one in outer_fn where mid() is called (the
 * outermost inlined call), not a line of mid() or inner().
 */
static inline __attribute__((always_inline)) void inner(struct result *res)
{
        capture_and_unwind(true, res);
        __asm__ volatile("" ::: "memory");
}

static inline __attribute__((always_inline)) void mid(struct result *res, int line)
{
        res->call_line = line;
        inner(res);
        __asm__ volatile("" ::: "memory");
}

#if defined(__clang__)
__attribute__((noinline))
#else
__attribute__((noinline, noclone))
#endif
static void
outer_fn(struct result *res)
{
        mid(res, __LINE__);
        __asm__ volatile("" ::: "memory");
}

static void check_deep(const struct result *res)
{
        print_message("%d, %zu frames:", res->rc, res->depth);
        for (size_t i = 0; i < res->depth; i++)
                print_message(" %s", res->names[i]);
        print_message("\n");
        assert_true(res->rc >= 0); /* reached the root */
        assert_true(res->depth > DEEP + 1);
        assert_string_equal(res->names[0], "capture_and_unwind");
        size_t i = 1;
        for (size_t k = 0; k < DEEP; k++)
                assert_string_equal(res->names[i + k], "deep");
        bool has_main = false;
        for (size_t k = i + DEEP; k < res->depth; k++)
                has_main |= strcmp(res->names[k], "main") == 0;
        assert_true(has_main);
}

static void test_full(void **state)
{
        (void)state;
        struct result res = {0};
        assert_int_equal(deep(DEEP, true, &res), DEEP - 1);
        check_deep(&res);
}

static void test_sp_pc_only(void **state)
{
        (void)state;
        struct result res = {0};
        assert_int_equal(deep(DEEP, false, &res), DEEP - 1);
        print_message("%d, %zu frames:", res.rc, res.depth);
        for (size_t i = 0; i < res.depth; i++)
                print_message(" %s", res.names[i]);
        print_message("\n");
        /* The leaf needs RBP to find its caller: cut short there, and said so. */
        assert_int_equal(res.rc, -EPIPE);
        assert_int_equal(res.depth, 1);
        assert_string_equal(res.names[0], "capture_and_unwind");
}

static void test_unmapped(void **state)
{
        (void)state;
        uint64_t regs[NATIVE_N_REGS] = {0};
        regs[7] = 4096; /* the first page is never mapped */
        regs[16] = (uint64_t)(uintptr_t)&deep;
        native_begin(n);
        assert_true(native_capture_regs(n, TID, regs, true) < 0);
        assert_int_equal(native_capture_count(n), 0);
        const struct native_sym *out[4];
        size_t depth = 0;
        assert_int_equal(native_unwind(n, TID, out, 4, &depth), -ENOENT);
}

static void test_trim(void **state)
{
        (void)state;
        struct result res[3] = {{0}};
        struct native_stats st;
        uint64_t named = 0, resets = 0;
        /* One call site, so that the three unwinds meet the same addresses. */
        for (volatile int k = 0; k < 3; k++) { /* volatile: not peeled */
                if (k == 1)                    /* within the bound: nothing forgotten */
                        assert_false(native_trim(n, (size_t)named));
                if (k == 2) { /* past it: forgotten (ASan sees any entry still used) */
                        assert_true(native_trim(n, 1));
                        native_get_stats(n, &st);
                        assert_int_equal(st.sym_resets, resets + 1);
                }
                deep(DEEP, true, &res[k]);
                check_deep(&res[k]);
                native_get_stats(n, &st);
                if (k == 0)
                        named = st.symbols, resets = st.sym_resets;
                if (k == 1) /* nothing named twice */
                        assert_int_equal(st.symbols, named);
        }
        /* Named again, the same names, ids from 1 (the leaf is named first). */
        assert_int_equal(res[2].depth, res[0].depth);
        for (size_t i = 0; i < res[2].depth; i++)
                assert_string_equal(res[2].names[i], res[0].names[i]);
        assert_int_equal(res[2].ids[0], 1);
        uint32_t distinct = 0;
        for (size_t i = 0; i < res[2].depth; i++)
                distinct = res[2].ids[i] > distinct ? res[2].ids[i] : distinct;
        native_get_stats(n, &st);
        assert_int_equal(st.symbols, named + distinct);
        assert_false(native_trim(n, 64)); /* one unwind's names, under a bound of 64 */
}

static void test_inlined_line(void **state)
{
        (void)state;
        struct result res = {0};
        outer_fn(&res);
        print_message("%d, %zu frames:", res.rc, res.depth);
        for (size_t i = 0; i < res.depth && i < 3; i++)
                print_message(" %s (%s:%d)", res.names[i], res.files[i], res.lines[i]);
        print_message("\n");
        assert_true(res.depth >= 2);
        assert_string_equal(res.names[0], "capture_and_unwind");
        assert_string_equal(res.names[1], "outer_fn");
        const char *base = strrchr(res.files[1], '/');
        base = base ? base + 1 : res.files[1];
        if (strcmp(base, "test_native_self.c") != 0) {
                print_message("no DWARF lines in this build (%s): line not checked\n",
                              res.files[1]);
                return;
        }
        assert_int_equal(res.lines[1], res.call_line);
}

static int setup(void **state)
{
        (void)state;
        char err[512] = "";
        int rc = native_open(getpid(), &n, err, sizeof(err));
        if (rc == -ENOTSUP) {
                print_message("%s: skipped\n", err);
                return 0;
        }
        return rc;
}

static int teardown(void **state)
{
        (void)state;
        native_close(n);
        return 0;
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_full),         cmocka_unit_test(test_sp_pc_only),
            cmocka_unit_test(test_unmapped),     cmocka_unit_test(test_trim),
            cmocka_unit_test(test_inlined_line),
        };
        int rc = setup(NULL);
        if (rc < 0)
                return 1;
        if (!n)
                return 77; /* no libdw in this build */
        rc = cmocka_run_group_tests(tests, NULL, teardown);
        return rc;
}
