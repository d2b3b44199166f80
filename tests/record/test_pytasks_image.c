/*
 * test_pytasks_image.c - the asyncio task walk of 3.14+ (--async: the
 * per-thread lists of tasks, the offsets _asyncio publishes in its
 * .AsyncioDebug section) over synthetic images, for 3.14 and 3.14t (no such
 * interpreter is installed here; imgbuild.c lays out TaskObj as 3.14.0
 * compiles it).
 *
 * The image: tasks on two threads' lists and one on the interpreter's (a
 * thread gone), each suspended in a chain of coroutines; a task awaiting
 * another, gather's children and a task awaited by two others (a set, with
 * a deleted entry) joined to their parents through awaited_by; a running
 * task; a task named by CPython's counter. The walk must give each task its
 * name, chain (functions and lines, innermost first), thread, parent and
 * state; and when the lists or the section are damaged, fewer tasks or
 * none, never garbage. 3.15 (whose layouts are unverified) is refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "imgbuild.h"
#include "imgtasks.h"
#include "imgvers.h"
#include "pyfind.h"
#include "pywalk.h"

static int ignore_thread(void *ctx, const struct pywalk_thread *th)
{
        (void)ctx;
        (void)th;
        return 0;
}

/* Walk the image once with --async; the tasks in *v, their number returned. */
static size_t walk(struct pyimg *p, struct pywalk **w, const struct pywalk_task **v)
{
        char err[256] = "";
        int rc = pywalk_open(&p->target, &p->mem, w, err, sizeof(err));
        if (rc)
                print_message("pywalk_open: %s\n", err);
        assert_int_equal(rc, 0);
        rc = pywalk_set_tasks(*w, err, sizeof(err));
        if (rc)
                print_message("pywalk_set_tasks: %s\n", err);
        assert_int_equal(rc, 0);
        assert_int_equal(pywalk_sample(*w, ignore_thread, NULL), 0);
        size_t n;
        pywalk_tasks(*w, v, &n);
        return n;
}

static const struct pywalk_task *by_addr(const struct pywalk_task *v, size_t n, uint64_t addr)
{
        for (size_t i = 0; i < n; i++)
                if (v[i].addr == addr)
                        return &v[i];
        return NULL;
}

/* The chain, innermost first, as "name:line,...". */
static void chain_of(const struct pywalk_task *tk, char *out, size_t len)
{
        size_t off = 0;
        out[0] = 0;
        for (uint32_t i = 0; i < tk->depth && off < len; i++)
                off += (size_t)snprintf(out + off, len - off, "%s%s:%d", i ? "," : "",
                                        tk->frames[i].code->name, (int)tk->frames[i].line);
}

static void expect(const struct pywalk_task *v, size_t n, uint64_t addr, const char *name,
                   const char *chain, uint64_t thread_id, uint64_t parent)
{
        const struct pywalk_task *tk = by_addr(v, n, addr);
        assert_non_null(tk);
        char got[256];
        chain_of(tk, got, sizeof(got));
        if (strcmp(tk->name->name, name) != 0 || strcmp(got, chain) != 0 ||
            tk->thread_id != thread_id || (tk->parent ? v[tk->parent - 1].addr : 0) != parent)
                print_message("task %s: got %s [%s] thread %llx parent %llx\n", name,
                              tk->name->name, got, (unsigned long long)tk->thread_id,
                              (unsigned long long)(tk->parent ? v[tk->parent - 1].addr : 0));
        assert_string_equal(tk->name->name, name);
        assert_string_equal(got, chain);
        assert_int_equal(tk->thread_id, thread_id);
        assert_int_equal(tk->parent ? v[tk->parent - 1].addr : 0, parent);
}

static void check_lists(void **state)
{
        const struct imgver *ver = *state;
        struct imgtasks s;
        imgtasks_build(&s, ver);
        struct pywalk *w;
        const struct pywalk_task *v;
        size_t n = walk(&s.p, &w, &v);
        assert_int_equal(n, 14);
        uint64_t main_id = s.p.th[0].pthread, side_id = s.p.th[1].pthread;
        const char *deep = "leaf:23,middle:32,top:44";
        expect(v, n, s.t_top, "top-0", deep, main_id, 0);
        expect(v, n, s.t_awaited, "awaited", deep, main_id, s.t_awaiter);
        expect(v, n, s.t_awaiter, "awaiter", "awaiter:55", main_id, 0);
        expect(v, n, s.t_gatherer, "gatherer", "gathering:66", main_id, 0);
        for (int i = 0; i < 3; i++) {
                char name[16];
                snprintf(name, sizeof(name), "kid-%d", i);
                expect(v, n, s.t_kids[i], name, "leaf:23", main_id, s.t_gatherer);
        }
        /* Awaited by two: either is its parent (the first of the set). */
        const struct pywalk_task *sh = by_addr(v, n, s.t_shared);
        assert_non_null(sh);
        assert_true(sh->parent);
        assert_true(v[sh->parent - 1].addr == s.t_wa || v[sh->parent - 1].addr == s.t_wb);
        expect(v, n, s.t_running, "running", "runner:77", main_id, 0);
        expect(v, n, s.t_unnamed, "Task-17", "leaf:23", main_id, 0);
        expect(v, n, s.t_side, "side", "leaf:23", side_id, 0);
        expect(v, n, s.t_orphan, "orphan", "leaf:23", 0, 0);
        /* Running, what each awaits. */
        assert_true(by_addr(v, n, s.t_running)->running);
        assert_false(by_addr(v, n, s.t_top)->running);
        const struct pywalk_task *aw = by_addr(v, n, s.t_awaiter);
        assert_true(aw->awaits && v[aw->awaits - 1].addr == s.t_awaited);
        assert_string_equal(by_addr(v, n, s.t_gatherer)->awaiting, "_GatheringFuture");
        assert_string_equal(by_addr(v, n, s.t_top)->awaiting, "_asyncio.Future");
        assert_int_equal(by_addr(v, n, s.t_gatherer)->awaits, 0);
        /* A second sample finds the same. */
        assert_int_equal(pywalk_sample(w, ignore_thread, NULL), 0);
        pywalk_tasks(w, &v, &n);
        assert_int_equal(n, 14);
        pywalk_close(w);
        pyimg_free(&s.p);
}

/* Lists that change under the walk end where they go wrong; what came before is kept. */
static void check_damaged_lists(void **state)
{
        const struct imgver *ver = *state;
        struct imgtasks s;
        imgtasks_build(&s, ver);
        struct pyimg *p = &s.p;
        const struct pyimg_asyncio *a = &p->aio;
        /* The main thread's list: its third task's node points into nothing. */
        img_u64(p->img, s.t_awaiter + a->node, 0x10);
        /* The side thread's list: its node points at itself (a cycle off the head). */
        img_u64(p->img, s.t_side + a->node, s.t_side + a->node);
        /* The orphan's task is unreadable. */
        img_drop(p->img, s.t_orphan);
        pyimg_sync(p);
        struct pywalk *w;
        const struct pywalk_task *v;
        size_t n = walk(p, &w, &v);
        /* top-0, awaited, awaiter; side (once); the orphan's node is gone with it. */
        assert_int_equal(n, 4);
        assert_non_null(by_addr(v, n, s.t_top));
        assert_non_null(by_addr(v, n, s.t_awaiter));
        assert_non_null(by_addr(v, n, s.t_side));
        assert_null(by_addr(v, n, s.t_orphan));
        pywalk_close(w);
        pyimg_free(p);
}

/* A .AsyncioDebug that does not fit (an offset beyond the task's size): no tasks, no harm. */
static void check_bad_offsets(void **state)
{
        const struct imgver *ver = *state;
        struct imgtasks s;
        imgtasks_build(&s, ver);
        struct pyimg *p = &s.p;
        img_u64(p->img, p->aio.debug + 6 * 8, p->aio.task_size); /* task_node past the end */
        pyimg_sync(p);
        struct pywalk *w;
        const struct pywalk_task *v;
        assert_int_equal(walk(p, &w, &v), 0);
        pywalk_close(w);
        pyimg_free(p);
        /* No section at all (asyncio not imported): no tasks either. */
        imgtasks_build(&s, ver);
        s.p.target.asyncio_debug_addr = 0;
        s.p.target.pid = 0;
        assert_int_equal(walk(&s.p, &w, &v), 0);
        pywalk_close(w);
        pyimg_free(&s.p);
}

/* 3.15: its asyncio layouts are not verified: --async is refused with a message. */
static void check_refused(void **state)
{
        const struct imgver *ver = *state;
        struct pyimg p;
        assert_int_equal(imgver_image(ver, IMGVER_TASKS_313, &p), 0);
        pyimg_add_thread(&p, p.interps[0], 0);
        struct pywalk *w = NULL;
        char err[256] = "";
        int rc = pywalk_open(&p.target, &p.mem, &w, err, sizeof(err));
        if (rc)
                print_message("pywalk_open: %s\n", err);
        assert_int_equal(rc, 0);
        assert_int_equal(pywalk_set_tasks(w, err, sizeof(err)), PYFIND_UNSUPPORTED);
        assert_non_null(strstr(err, "cannot be read on Python 3.15"));
        pywalk_close(w);
        pyimg_free(&p);
}

int main(void)
{
        static struct CMUnitTest tests[4 * IMGVER_COUNT];
        static char names[4 * IMGVER_COUNT][48];
        size_t n = 0;
        for (size_t i = 0; i < IMGVER_COUNT; i++) {
                const struct imgver *v = &imgver_table[i];
                if (v->major != 3 || v->minor < 14)
                        continue;
                struct {
                        const char *what;
                        CMUnitTestFunction fn;
                } cases[] = {{"lists", check_lists},
                             {"damaged lists", check_damaged_lists},
                             {"bad offsets", check_bad_offsets}};
                if (v->minor >= 15) {
                        snprintf(names[n], 48, "refused %s", v->name);
                        tests[n] = (struct CMUnitTest){.name = names[n],
                                                       .test_func = check_refused,
                                                       .initial_state = (void *)v};
                        n++;
                        continue;
                }
                for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
                        snprintf(names[n], 48, "%s %s", cases[c].what, v->name);
                        tests[n] = (struct CMUnitTest){
                            .name = names[n], .test_func = cases[c].fn, .initial_state = (void *)v};
                        n++;
                }
        }
        return _cmocka_run_group_tests("pytasks_image", tests, n, NULL, NULL);
}
