/*
 * test_native_merge.c - merging a native stack with the Python stack of the
 * same instant (native_merge, native.h), and the names that decide it.
 *
 * Stacks are written leaf first, as the unwinder and the walker give them.
 * Before 3.11 each Python frame is its own eval call (every frame `entry`);
 * from 3.11 one eval call runs a run of frames ending at an entry frame.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "native.h"

static const struct native_sym eval = {
    1, NATIVE_SYM_EVAL, "_PyEval_EvalFrameDefault", "ceval.c", 10, "/lib/libpython.so", 0x100};
static const struct native_sym call = {
    2, NATIVE_SYM_PLUMBING, "_PyObject_MakeTpCall", "call.c", 20, "/lib/libpython.so", 0x200};
static const struct native_sym spin = {3, 0, "nat_spin", "ext.c", 30, "/x/ext.so", 0x300};
static const struct native_sym cb = {4, 0, "nat_callback", "ext.c", 40, "/x/ext.so", 0x400};
static const struct native_sym main_ = {5, NATIVE_SYM_PLUMBING, "main", "python.c",
                                        1, "/bin/python",       0x500};

static const struct pywalk_code c_inner = {
    .id = 1, .name = "inner", .file = "t.py", .first_line = 1};
static const struct pywalk_code c_outer = {
    .id = 2, .name = "outer", .file = "t.py", .first_line = 5};
static const struct pywalk_code c_mod = {
    .id = 3, .name = "<module>", .file = "t.py", .first_line = 1};

/* Names of a merged stack, leaf first, joined by spaces. */
static void joined(const struct native_merged *m, int n, char *buf, size_t len)
{
        buf[0] = 0;
        for (int i = 0; i < n; i++) {
                const char *name = m[i].sym ? m[i].sym->function : m[i].py->code->name;
                strncat(buf, i ? " " : "", len - strlen(buf) - 1);
                strncat(buf, name, len - strlen(buf) - 1);
        }
}

/* Python -> C -> Python -> C, before 3.11: one eval frame per Python frame. */
static void test_merge_per_frame(void **state)
{
        (void)state;
        const struct native_sym *nat[] = {&spin, &call, &eval, &call, &cb,
                                          &call, &eval, &eval, &main_};
        const struct pywalk_frame py[] = {
            {&c_inner, 3, true}, {&c_outer, 6, true}, {&c_mod, 9, true}};
        struct native_merged out[16];
        char buf[256];
        int n = native_merge(nat, 9, py, 3, 0, out, 16);
        assert_int_equal(n, 5);
        joined(out, n, buf, sizeof(buf));
        assert_string_equal(buf, "nat_spin inner nat_callback outer <module>");
        /* Keeping the plumbing keeps it where it was. */
        n = native_merge(nat, 9, py, 3, NATIVE_MERGE_KEEP_PLUMBING, out, 16);
        joined(out, n, buf, sizeof(buf));
        assert_string_equal(buf, "nat_spin _PyObject_MakeTpCall inner _PyObject_MakeTpCall "
                                 "nat_callback _PyObject_MakeTpCall outer <module> main");
}

/* 3.11+: one eval call runs outer and <module>; the callback's call runs inner. */
static void test_merge_runs(void **state)
{
        (void)state;
        const struct native_sym *nat[] = {&spin, &eval, &cb, &eval, &main_};
        const struct pywalk_frame py[] = {
            {&c_inner, 3, true}, {&c_outer, 6, false}, {&c_mod, 9, true}};
        struct native_merged out[16];
        char buf[256];
        int n = native_merge(nat, 5, py, 3, 0, out, 16);
        assert_int_equal(n, 5);
        joined(out, n, buf, sizeof(buf));
        assert_string_equal(buf, "nat_spin inner nat_callback outer <module>");
}

/*
 * One eval frame more than runs of Python frames: the innermost eval call is
 * in its prologue or epilogue (entering or leaving a generator), its frame
 * not linked; it is kept as the native frame it is, the others merged.
 */
static void test_merge_unlinked(void **state)
{
        (void)state;
        struct native_merged out[16];
        char buf[256];
        /* Before 3.11: outer called a C function that is entering the eval loop. */
        const struct pywalk_frame py[] = {{&c_outer, 6, true}, {&c_mod, 9, true}};
        const struct native_sym *nat[] = {&spin, &eval, &call, &cb, &eval, &eval, &main_};
        int n = native_merge(nat, 7, py, 2, 0, out, 16);
        assert_int_equal(n, 5);
        joined(out, n, buf, sizeof(buf));
        assert_string_equal(buf, "nat_spin _PyEval_EvalFrameDefault nat_callback outer <module>");
        /* 3.11+: one run for outer and <module>. */
        const struct pywalk_frame run[] = {{&c_outer, 6, false}, {&c_mod, 9, true}};
        const struct native_sym *nat11[] = {&eval, &cb, &eval, &main_};
        n = native_merge(nat11, 4, run, 2, 0, out, 16);
        joined(out, n, buf, sizeof(buf));
        assert_string_equal(buf, "_PyEval_EvalFrameDefault nat_callback outer <module>");
        /* The first frame of a thread, before it is linked: no Python at all yet. */
        const struct native_sym *first[] = {&eval, &main_};
        n = native_merge(first, 2, NULL, 0, 0, out, 16);
        joined(out, n, buf, sizeof(buf));
        assert_string_equal(buf, "_PyEval_EvalFrameDefault");
        /* No room for it. */
        assert_int_equal(native_merge(first, 2, NULL, 0, 0, out, 0), -E2BIG);
}

/* Stacks that do not fit are refused, never merged. */
static void test_merge_unmatched(void **state)
{
        (void)state;
        struct native_merged out[16];
        const struct pywalk_frame py[] = {{&c_inner, 3, true}, {&c_outer, 6, true}};
        /* Fewer eval frames than Python calls: Python frames left over. */
        const struct native_sym *one[] = {&spin, &eval, &main_};
        assert_int_equal(native_merge(one, 3, py, 2, 0, out, 16), -EPIPE);
        /* Two eval frames more than Python ran (one is the innermost's window). */
        const struct native_sym *four[] = {&eval, &eval, &eval, &eval};
        assert_int_equal(native_merge(four, 4, py, 2, 0, out, 16), -EPIPE);
        /* A run of frames that does not end at an entry frame. */
        const struct pywalk_frame open_run[] = {{&c_inner, 3, false}, {&c_outer, 6, false}};
        const struct native_sym *e1[] = {&eval};
        assert_int_equal(native_merge(e1, 1, open_run, 2, 0, out, 16), -EPIPE);
        /* No room. */
        const struct native_sym *two[] = {&eval, &eval};
        assert_int_equal(native_merge(two, 2, py, 2, 0, out, 1), -E2BIG);
        /* No Python at all: the native stack alone (a thread that runs no Python). */
        const struct native_sym *c_only[] = {&spin, &cb, &main_};
        assert_int_equal(native_merge(c_only, 3, NULL, 0, 0, out, 16), 2);
}

static void test_names(void **state)
{
        (void)state;
        assert_true(native_is_eval("_PyEval_EvalFrameDefault"));
        assert_true(native_is_eval("_PyEval_EvalFrameDefault.cold"));
        assert_true(native_is_eval("PyEval_EvalFrameEx"));
        assert_false(native_is_eval("_PyEval_EvalFrameDefaultX"));
        assert_false(native_is_eval("_PyEval_EvalFrame"));
        assert_true(native_is_plumbing("_PyEval_EvalFrame"));
        assert_true(native_is_plumbing("_PyObject_VectorcallTstate"));
        assert_true(native_is_plumbing("method_vectorcall_VARARGS"));
        assert_true(native_is_plumbing("main"));
        assert_false(native_is_plumbing("list_sort_impl"));
        assert_false(native_is_plumbing("nat_spin"));
        assert_false(native_is_plumbing("mainloop"));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_merge_per_frame), cmocka_unit_test(test_merge_runs),
            cmocka_unit_test(test_merge_unlinked),  cmocka_unit_test(test_merge_unmatched),
            cmocka_unit_test(test_names),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
