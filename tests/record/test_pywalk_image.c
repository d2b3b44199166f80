/*
 * test_pywalk_image.c - the real walker over synthetic target memory.
 *
 * For every layout (2.7, 3.6-3.12 from the tables, a Py_TRACE_REFS 3.7 debug
 * build, and 3.13, 3.13t, 3.14, 3.14t, 3.15 through a _Py_DebugOffsets
 * written by imgbuild.c) the same scenarios build an image with imgbuild and
 * sample it through memsrc: names (non-ASCII in every string kind), files,
 * qualified names, lines, entry/shim/incomplete frames that must be skipped,
 * generator frames, thread ids and GIL flags, several interpreters, frames
 * spread over several data-stack chunks, thread-local bytecode; the read
 * budget of a warm sample; and torn memory (cycles, bad types, dangling
 * pointers, crazy strings) that must give PYWALK_TORN, never bad frames.
 * Thread names through a threading module built the version's way (dict
 * layouts, instance dicts and values arrays), damaged and fuzzed too.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "imgbuild.h"
#include "imgvers.h"
#include "pylayout.h"
#include "pyflame-config.h"
#include "pywalk.h"

/* ---- versions (imgvers.c) ---- */

/* The image of v; its 3.13 layout has the task fields (the round trip compares them). */
static void make_image(const struct imgver *v, struct pyimg *p)
{
        assert_int_equal(imgver_image(v, IMGVER_TASKS_313, p), 0);
}

/* ---- collecting a sample ---- */

struct got_frame {
        char name[64], qual[64], file[128];
        int line, first;
        uint32_t id;
};

struct got_thread {
        uint64_t tstate, thread_id;
        int64_t tid, interp;
        unsigned gil;
        int status;
        uint32_t depth;
        struct got_frame f[160];
};

struct got {
        struct got_thread t[8];
        int n;
};

static int collect(void *ctx, const struct pywalk_thread *th)
{
        struct got *g = ctx;
        if (g->n == 8)
                return 1;
        struct got_thread *t = &g->t[g->n++];
        memset(t, 0, sizeof(*t));
        t->tstate = th->tstate_addr;
        t->thread_id = th->thread_id;
        t->tid = th->native_tid;
        t->interp = th->interp_id;
        t->gil = th->gil;
        t->status = th->status;
        t->depth = th->depth;
        for (uint32_t i = 0; i < th->depth && i < 160; i++) {
                const struct pywalk_code *c = th->frames[i].code;
                snprintf(t->f[i].name, sizeof(t->f[i].name), "%s", c->name);
                snprintf(t->f[i].qual, sizeof(t->f[i].qual), "%s", c->qualname ? c->qualname : "");
                snprintf(t->f[i].file, sizeof(t->f[i].file), "%s", c->file);
                t->f[i].line = th->frames[i].line;
                t->f[i].first = c->first_line;
                t->f[i].id = c->id;
        }
        return 0;
}

static struct pywalk *open_walk(struct pyimg *p)
{
        struct pywalk *w = NULL;
        char err[256] = "";
        int rc = pywalk_open(&p->target, &p->mem, &w, err, sizeof(err));
        if (rc != 0)
                print_message("pywalk_open: %d %s\n", rc, err);
        assert_int_equal(rc, 0);
        return w;
}

static void sample(struct pywalk *w, struct got *g)
{
        memset(g, 0, sizeof(*g));
        assert_int_equal(pywalk_sample(w, collect, g), 0);
}

/* A code object whose unit k is on line first + 1 + k. */
static uint64_t mkcode(struct pyimg *p, const char *name, const char *qual, const char *file,
                       int first, int nunits, int firsttraceable)
{
        int lines[64];
        for (int i = 0; i < nunits; i++)
                lines[i] = first + 1 + i;
        return pyimg_code(p, name, qual, file, first, lines, (size_t)nunits, firsttraceable);
}

static void expect_frame(const struct got_frame *f, const char *name, const char *qual,
                         const char *file, int line)
{
        assert_string_equal(f->name, name);
        if (qual)
                assert_string_equal(f->qual, qual);
        assert_string_equal(f->file, file);
        assert_int_equal(f->line, line);
}

static bool has_qualname(const struct imgver *v)
{
        return v->major == 3 && v->minor >= 11;
}

/* ---- scenarios ---- */

static void check_layout_roundtrip(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        struct pylayout got, want;
        char err[256] = "";
        int rc = pylayout_for_target(&p.target, &p.mem, &got, err, sizeof(err));
        if (rc)
                print_message("%s\n", err);
        assert_int_equal(rc, 0);
        imgver_debug_layout(v, IMGVER_TASKS_313, &want);
        want.co_read = got.co_read;
        assert_int_equal(got.fr_read, want.fr_read);
        memcpy(want.name, got.name, sizeof(want.name));
        want.from_debug_offsets = true;
        want.py2_unicode_width = got.py2_unicode_width;
        want.fr_state = -1; /* <=3.10 only */
        want.fr_state_kind = PYL_FRSTATE_NONE;
        assert_memory_equal(&got, &want, sizeof(got));
        pyimg_free(&p);
}

static void check_basic(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        bool py2 = v->major == 2;
        const char *file = "/app/main.py";
        /* 2.x: a unicode file name; 3.x: UCS-4 (emoji) in a compact str. */
        const char *ufile = "/app/ünï/🐍.py";
        uint64_t ufile_obj = pyimg_str(&p, ufile, py2 ? PYIMG_STR_UNICODE2 : PYIMG_STR_AUTO);
        uint64_t mod = mkcode(&p, "<module>", "<module>", file, 1, 20, 0);
        uint64_t outer = mkcode(&p, "outer", "Outer.outer", file, 10, 20, 0);
        uint64_t gen = mkcode(&p, "gen", "gen", file, 30, 20, 0);
        int lines[20];
        for (int i = 0; i < 20; i++)
                lines[i] = 41 + i;
        /* Latin-1 name, legacy (non-compact) qualname on 3.x, unicode file name. */
        uint64_t cafe =
            pyimg_code_objs(&p, pyimg_str(&p, "café", PYIMG_STR_AUTO),
                            pyimg_str(&p, "K.café", py2 ? PYIMG_STR_AUTO : PYIMG_STR_LEGACY),
                            ufile_obj, 40, lines, 20, 0);
        uint64_t kanji = mkcode(&p, "関数", "関数", file, 50, 20, 0);
        uint64_t leaf = mkcode(&p, "leaf", "Leaf.leaf", file, 60, 20, 3);
        uint64_t shim = mkcode(&p, "__init__", "__init__", "__init__", 0, 4, 0);
        uint64_t setup = mkcode(&p, "setup", "setup", file, 70, 20, 4);

        int t0 = pyimg_add_thread(&p, p.interps[0], -1);
        if (p.L.owner_skip_from != PYL_OWNER_NONE)
                pyimg_push(&p, t0, PYIMG_FRAME_ENTRY, 0, 0);
        pyimg_push(&p, t0, PYIMG_FRAME, mod, 3);   /* line 5 */
        pyimg_push(&p, t0, PYIMG_FRAME, outer, 1); /* line 12 */
        if (p.L.owner_skip_from != PYL_OWNER_NONE)
                pyimg_push(&p, t0, PYIMG_FRAME_ENTRY, 0, 0); /* C called back into Python */
        pyimg_push(&p, t0, PYIMG_FRAME_GEN, gen, 5);         /* line 36 */
        pyimg_push(&p, t0, PYIMG_FRAME, cafe, 2);            /* line 43 */
        pyimg_push(&p, t0, PYIMG_FRAME, kanji, 0);           /* line 51 */
        if (p.L.init_shim)
                pyimg_push(&p, t0, PYIMG_FRAME, shim, 0);
        pyimg_push(&p, t0, PYIMG_FRAME, leaf, 7); /* line 68 */
        if (p.L.co_firsttraceable >= 0)
                pyimg_push(&p, t0, PYIMG_FRAME, setup, 1); /* before its RESUME: incomplete */

        int t1 = pyimg_add_thread(&p, p.interps[0], 1001);
        uint64_t work = mkcode(&p, "work", "Pool.work", file, 80, 20, 0);
        /* <=3.10: f_lasti -1 (not started) reads as co_firstlineno. */
        bool heap = p.L.frames == PYL_FRAMES_OBJECT;
        pyimg_push(&p, t1, PYIMG_FRAME, mod, heap ? -1 : 0);
        pyimg_push(&p, t1, PYIMG_FRAME, work, 9); /* line 90 */
        int t2 = pyimg_add_thread(&p, p.interps[0], 1002);
        pyimg_gil(&p, p.interps[0], p.th[t1].tstate, -1);

        struct pywalk *w = open_walk(&p);
        struct got g;
        sample(w, &g);
        assert_int_equal(g.n, 3);
        /*
         * Newest thread first, as CPython links them, but a thread with no
         * frames after those with frames (it could be a new thread's state
         * with its creator's ids: check_tid_prealloc).
         */
        struct got_thread *a = &g.t[1], *b = &g.t[0], *c = &g.t[2];
        assert_int_equal(a->tstate, p.th[t0].tstate);
        assert_int_equal(b->tstate, p.th[t1].tstate);
        assert_int_equal(c->tstate, p.th[t2].tstate);
        for (int i = 0; i < 3; i++) {
                assert_int_equal(g.t[i].status, 0);
                assert_int_equal(g.t[i].interp, 0);
        }
        assert_int_equal(a->thread_id, p.th[t0].pthread);
        assert_int_equal(a->tid, PYIMG_PID);
        assert_int_equal(b->tid, 1001);
        assert_int_equal(c->tid, 1002);
        assert_int_equal(a->gil, 0);
        assert_int_equal(b->gil, PYWALK_GIL_HELD);
        assert_int_equal(c->gil, 0);

        bool q = has_qualname(v);
        assert_int_equal(a->depth, 6);
        expect_frame(&a->f[0], "leaf", q ? "Leaf.leaf" : "", file, 68);
        expect_frame(&a->f[1], "関数", q ? "関数" : "", file, 51);
        expect_frame(&a->f[2], "café", q ? "K.café" : "", ufile, 43);
        expect_frame(&a->f[3], "gen", NULL, file, 36);
        expect_frame(&a->f[4], "outer", q ? "Outer.outer" : "", file, 12);
        expect_frame(&a->f[5], "<module>", NULL, file, 5);
        assert_int_equal(a->f[0].first, 60);
        assert_int_equal(b->depth, 2);
        expect_frame(&b->f[0], "work", q ? "Pool.work" : "", file, 90);
        expect_frame(&b->f[1], "<module>", NULL, file, heap ? 1 : 2);
        assert_int_equal(c->depth, 0);
        /* Dense ids, one per code object (9 at most were decoded), stable across samples. */
        assert_int_equal(b->f[1].id, a->f[5].id);
        for (int i = 0; i < 6; i++) {
                assert_true(a->f[i].id >= 1 && a->f[i].id <= 9);
                for (int j = 0; j < i; j++)
                        assert_true(a->f[i].id != a->f[j].id);
        }
        uint32_t leaf_id = a->f[0].id;
        sample(w, &g);
        assert_int_equal(g.t[1].f[0].id, leaf_id);
        assert_int_equal(g.t[1].depth, 6);
        pywalk_close(w);
        pyimg_free(&p);
}

/* A depth-30 stack: a warm sample must cost at most 4 reads (prefetch makes it 1). */
static void check_read_budget(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        uint64_t codes[30];
        for (int i = 0; i < 30; i++) {
                char name[16];
                snprintf(name, sizeof(name), "f%d", i);
                codes[i] = mkcode(&p, name, name, "/app/deep.py", 100 * i, 20, 0);
        }
        int t = pyimg_add_thread(&p, p.interps[0], -1);
        if (p.L.owner_skip_from != PYL_OWNER_NONE)
                pyimg_push(&p, t, PYIMG_FRAME_ENTRY, 0, 0);
        for (int i = 0; i < 30; i++)
                pyimg_push(&p, t, PYIMG_FRAME, codes[i], i % 20);
        pyimg_gil(&p, p.interps[0], p.th[t].tstate, -1);
        struct pywalk *w = open_walk(&p);
        struct got g;
        uint64_t r0 = pywalk_reads(w);
        sample(w, &g);
        uint64_t cold = pywalk_reads(w) - r0;
        assert_int_equal(g.t[0].depth, 30);
        assert_int_equal(g.t[0].f[0].line, 2900 + 1 + 29 % 20);
        r0 = pywalk_reads(w);
        sample(w, &g);
        uint64_t warm = pywalk_reads(w) - r0;
        print_message("%-6s depth 30: %2llu reads cold, %llu warm\n", v->name,
                      (unsigned long long)cold, (unsigned long long)warm);
        assert_int_equal(g.t[0].depth, 30);
        assert_int_equal(g.t[0].gil, PYWALK_GIL_HELD);
        assert_true(warm <= 4);
        /* The stack changes shape (a new leaf): still correct, few reads. */
        uint64_t extra = mkcode(&p, "extra", "extra", "/app/deep.py", 5000, 20, 0);
        pyimg_push(&p, t, PYIMG_FRAME, extra, 3);
        sample(w, &g);
        assert_int_equal(g.t[0].depth, 31);
        assert_string_equal(g.t[0].f[0].name, "extra");
        assert_int_equal(g.t[0].f[0].line, 5004);
        pywalk_close(w);
        pyimg_free(&p);
}

/* Threads in two interpreters. */
static void check_two_interps(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        uint64_t code = mkcode(&p, "f", "f", "/a.py", 1, 10, 0);
        int t0 = pyimg_add_thread(&p, p.interps[0], -1);
        pyimg_push(&p, t0, PYIMG_FRAME, code, 1);
        uint64_t sub = pyimg_add_interp(&p, 7);
        int t1 = pyimg_add_thread(&p, sub, 555);
        pyimg_push(&p, t1, PYIMG_FRAME, code, 2);
        struct pywalk *w = open_walk(&p);
        struct got g;
        sample(w, &g);
        assert_int_equal(g.n, 2);
        assert_int_equal(g.t[0].interp, 0);
        /* 2.7 and 3.6 have no interpreter ids: the position in the list stands in. */
        assert_int_equal(g.t[1].interp, p.L.is_id >= 0 ? 7 : 1);
        assert_int_equal(g.t[1].f[0].line, 4);
        assert_int_equal(g.t[1].tid, 555);
        pywalk_close(w);
        pyimg_free(&p);
}

/* A callback that stops the walk at its first thread, with `rc`. */
struct stop_ctx {
        int rc, calls;
};

static int stop_at_first(void *ctx, const struct pywalk_thread *th)
{
        struct stop_ctx *c = ctx;
        (void)th;
        c->calls++;
        return c->rc;
}

/*
 * What the callback returns ends the walk: an error (a trace that cannot be
 * written, no memory) comes back from pywalk_sample() and no later thread is
 * walked; a positive value just stops. Errors used to be taken for "stop",
 * and the sample's remaining threads were dropped without a word.
 */
static void check_callback_errors(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        uint64_t code = mkcode(&p, "f", "f", "/a.py", 1, 10, 0);
        for (int i = 0; i < 3; i++)
                pyimg_push(&p, pyimg_add_thread(&p, p.interps[0], -1), PYIMG_FRAME, code, 1);
        struct pywalk *w = open_walk(&p);
        struct stop_ctx c = {-ENOMEM, 0};
        assert_int_equal(pywalk_sample(w, stop_at_first, &c), -ENOMEM);
        assert_int_equal(c.calls, 1);
        c = (struct stop_ctx){-EIO, 0};
        assert_int_equal(pywalk_sample(w, stop_at_first, &c), -EIO);
        assert_int_equal(c.calls, 1);
        c = (struct stop_ctx){1, 0};
        assert_int_equal(pywalk_sample(w, stop_at_first, &c), 0);
        assert_int_equal(c.calls, 1);
        c = (struct stop_ctx){0, 0};
        assert_int_equal(pywalk_sample(w, stop_at_first, &c), 0);
        assert_int_equal(c.calls, 3);
        pywalk_close(w);
        pyimg_free(&p);
}

/* Frames spread over four data-stack chunks (3.11+). */
static void check_chunks(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        p.chunk_bytes = 4096;
        uint64_t code = mkcode(&p, "rec", "rec", "/r.py", 1, 50, 0);
        int t = pyimg_add_thread(&p, p.interps[0], -1);
        for (int i = 0; i < 100; i++)
                pyimg_push(&p, t, PYIMG_FRAME, code, i % 50);
        struct pywalk *w = open_walk(&p);
        struct got g;
        sample(w, &g);
        assert_int_equal(g.t[0].status, 0);
        assert_int_equal(g.t[0].depth, 100);
        for (int i = 0; i < 100; i++)
                assert_int_equal(g.t[0].f[i].line, 2 + (99 - i) % 50);
        uint64_t r0 = pywalk_reads(w);
        sample(w, &g);
        assert_int_equal(g.t[0].depth, 100);
        assert_true(pywalk_reads(w) - r0 <= 4);
        pywalk_close(w);
        pyimg_free(&p);
}

/* Thread-local bytecode (3.14t): the instruction offset is from the thread's copy. */
static void check_tlbc(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        uint64_t code = mkcode(&p, "hot", "hot", "/t.py", 10, 20, 0);
        pyimg_code_tlbc(&p, code, 3, 2);
        int t = pyimg_add_thread(&p, p.interps[0], -1);
        pyimg_push(&p, t, PYIMG_FRAME, code, 1);
        pyimg_push_tlbc(&p, t, code, 5, 2);
        struct pywalk *w = open_walk(&p);
        struct got g;
        sample(w, &g);
        assert_int_equal(g.t[0].status, 0);
        assert_int_equal(g.t[0].depth, 2);
        assert_int_equal(g.t[0].f[0].line, 16);
        assert_int_equal(g.t[0].f[1].line, 12);
        pywalk_close(w);
        pyimg_free(&p);
}

/*
 * Before 3.11 the TID is found in struct pthread. 2.7 links a new thread's
 * state with its creator's thread id until the thread starts: a search made
 * then still finds the offset (it once found none, and every thread's state
 * stayed unknown), and once the thread has started its own id gives its TID.
 * Until then the new state, with no frames, is not reported: it was a
 * second sample of its creator at the same instant (of the two with no
 * frames here, the creator's, last in the list, is).
 */
static void check_tid_prealloc(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        int t0 = pyimg_add_thread(&p, p.interps[0], -1);
        int t1 = pyimg_add_thread(&p, p.interps[0], 5151);
        int t2 = pyimg_add_thread(&p, p.interps[0], 5252);
        /* t2 created by the main thread, not started yet: the main thread's id. */
        img_u64(p.img, p.th[t2].tstate + (uint64_t)p.L.ts_thread_id, p.th[t0].pthread);
        struct pywalk *w = open_walk(&p);
        struct got g;
        sample(w, &g);
        assert_int_equal(g.n, 2);
        assert_int_equal(g.t[0].tid, 5151);
        assert_int_equal(g.t[1].tid, PYIMG_PID);
        assert_int_equal(g.t[1].tstate, p.th[t0].tstate);
        /* The creator with frames: the new state is not reported either. */
        uint64_t code = mkcode(&p, "start", "Thread.start", "/t.py", 1, 4, 0);
        pyimg_push(&p, t0, PYIMG_FRAME, code, 1);
        sample(w, &g);
        assert_int_equal(g.n, 2);
        assert_int_equal(g.t[0].tstate, p.th[t0].tstate);
        assert_int_equal(g.t[0].depth, 1);
        assert_int_equal(g.t[1].tid, 5151);
        /* Started: its own id. */
        img_u64(p.img, p.th[t2].tstate + (uint64_t)p.L.ts_thread_id, p.th[t2].pthread);
        sample(w, &g);
        assert_int_equal(g.n, 3);
        assert_int_equal(g.t[0].tid, PYIMG_PID);
        assert_int_equal(g.t[1].tid, 5252);
        assert_int_equal(g.t[2].tid, 5151);
        (void)t1;
        pywalk_close(w);
        pyimg_free(&p);
}

/*
 * 3.11 sets a new thread's ids one after the other once it runs: a state was
 * seen with its own thread id and its creator's TID, and made a second
 * trace thread of the creator's TID. With no frames it is not reported.
 */
static void check_tid_twin(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        if (p.L.ts_native_tid < 0) {
                pyimg_free(&p);
                skip(); /* the TID comes from struct pthread: check_tid_prealloc */
        }
        uint64_t code = mkcode(&p, "start", "Thread.start", "/t.py", 1, 4, 0);
        int t0 = pyimg_add_thread(&p, p.interps[0], -1);
        pyimg_push(&p, t0, PYIMG_FRAME, code, 1);
        int t1 = pyimg_add_thread(&p, p.interps[0], PYIMG_PID); /* the creator's TID */
        int t2 = pyimg_add_thread(&p, p.interps[0], 7272);
        struct pywalk *w = open_walk(&p);
        struct got g;
        sample(w, &g);
        assert_int_equal(g.n, 2);
        assert_int_equal(g.t[0].tstate, p.th[t0].tstate);
        assert_int_equal(g.t[1].tstate, p.th[t2].tstate);
        /* Its own TID now: reported. */
        img_u64(p.img, p.th[t1].tstate + (uint64_t)p.L.ts_native_tid, 7171);
        sample(w, &g);
        assert_int_equal(g.n, 3);
        assert_int_equal(g.t[1].tstate, p.th[t2].tstate);
        assert_int_equal(g.t[2].tstate, p.th[t1].tstate);
        assert_int_equal(g.t[2].tid, 7171);
        pywalk_close(w);
        pyimg_free(&p);
}

/*
 * Two states with frames and the same thread id and TID in one walk: one
 * OS thread seen twice (before 3.11 a thread that has just ended, still
 * linked, reads its successor's TID from the struct pthread they share).
 * Only the first read is reported: never two samples of a thread at once.
 */
static void check_framed_twin(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        if (p.L.ts_native_tid >= 0) {
                pyimg_free(&p);
                skip(); /* 3.11+: each state carries its own TID */
        }
        uint64_t code = mkcode(&p, "job", "job", "/t.py", 1, 4, 0);
        int t0 = pyimg_add_thread(&p, p.interps[0], 7070);
        pyimg_push(&p, t0, PYIMG_FRAME, code, 1);
        int t1 = pyimg_add_thread(&p, p.interps[0], 7070);
        pyimg_push(&p, t1, PYIMG_FRAME, code, 2);
        int t2 = pyimg_add_thread(&p, p.interps[0], 7272);
        pyimg_push(&p, t2, PYIMG_FRAME, code, 3);
        /* The same pthread_t (before 3.11 the TID is read through it). */
        img_u64(p.img, p.th[t1].tstate + (uint64_t)p.L.ts_thread_id, p.th[t0].pthread);
        struct pywalk *w = open_walk(&p);
        struct got g;
        sample(w, &g);
        assert_int_equal(g.n, 2);
        assert_int_equal(g.t[0].tstate, p.th[t2].tstate);
        assert_int_equal(g.t[1].tstate, p.th[t1].tstate);
        /* Its own thread again: both reported. */
        img_u64(p.img, p.th[t1].tstate + (uint64_t)p.L.ts_thread_id, p.th[t1].pthread);
        sample(w, &g);
        assert_int_equal(g.n, 3);
        pywalk_close(w);
        pyimg_free(&p);
}

/*
 * A thread state freed while the list is read: the link to it was read
 * before, its memory after (check_list_restart). The first read of the
 * state at `freed` unlinks it: the link at `link` then points to `to`.
 */
static struct {
        int (*read)(struct memsrc *m, uint64_t addr, void *buf, size_t len);
        int (*readv)(struct memsrc *m, const struct memsrc_iov *iov, size_t n);
        struct pyimg *p;
        uint64_t freed, link, to;
        bool done;
} unlink_hook;

static void unlink_if_read(uint64_t addr, size_t len)
{
        if (!unlink_hook.done && addr <= unlink_hook.freed && unlink_hook.freed < addr + len) {
                unlink_hook.done = true;
                img_u64(unlink_hook.p->img, unlink_hook.link, unlink_hook.to);
        }
}

static int unlink_read(struct memsrc *m, uint64_t addr, void *buf, size_t len)
{
        int rc = unlink_hook.read(m, addr, buf, len);
        unlink_if_read(addr, len);
        return rc;
}

static int unlink_readv(struct memsrc *m, const struct memsrc_iov *iov, size_t n)
{
        int rc = 0;
        if (unlink_hook.readv) {
                rc = unlink_hook.readv(m, iov, n);
        } else {
                for (size_t i = 0; i < n && rc == 0; i++)
                        rc = unlink_hook.read(m, iov[i].addr, iov[i].buf, iov[i].len);
        }
        for (size_t i = 0; i < n; i++)
                unlink_if_read(iov[i].addr, iov[i].len);
        return rc;
}

/*
 * A thread that ends while the list is read: its state, reached through
 * a link read just before, is freed memory (another interpreter's pointer
 * where its own should be). The threads after it in the list, the oldest,
 * the main thread among them, were lost from that sample (3% of the main
 * thread's samples of a program starting a thread per job, on 3.9); the
 * list is read again from its head, and nothing is reported twice.
 */
static void check_list_restart(void **state)
{
        const struct imgver *v = *state;
        for (unsigned retries = 0; retries < 2; retries++) {
                struct pyimg p;
                make_image(v, &p);
                uint64_t code = mkcode(&p, "job", "job", "/j.py", 1, 4, 0);
                int t0 = pyimg_add_thread(&p, p.interps[0], -1);
                pyimg_push(&p, t0, PYIMG_FRAME, code, 1);
                int t1 = pyimg_add_thread(&p, p.interps[0], 6161);
                int t2 = pyimg_add_thread(&p, p.interps[0], 6262);
                pyimg_push(&p, t2, PYIMG_FRAME, code, 2);
                /* t1 has ended: its state freed, not yet unlinked when t2's link is read. */
                img_u64(p.img, p.th[t1].tstate + (uint64_t)p.L.ts_interp, 0x1234000);
                unlink_hook.read = p.mem.read;
                unlink_hook.readv = p.mem.readv;
                unlink_hook.p = &p;
                unlink_hook.freed = p.th[t1].tstate;
                unlink_hook.link = p.th[t2].tstate + (uint64_t)p.L.ts_next;
                unlink_hook.to = p.th[t0].tstate;
                unlink_hook.done = false;
                p.mem.read = unlink_read;
                p.mem.readv = unlink_readv;
                struct pywalk *w = open_walk(&p);
                pywalk_set_retries(w, retries);
                unlink_hook.done = false; /* (pywalk_open may have read the list) */
                img_u64(p.img, unlink_hook.link, p.th[t1].tstate);
                struct got g;
                sample(w, &g);
                assert_true(unlink_hook.done);
                if (retries == 0) {
                        /* Reported torn at once: the main thread is not reached. */
                        assert_int_equal(g.n, 2);
                        assert_int_equal(g.t[0].tstate, p.th[t2].tstate);
                        assert_int_equal(g.t[1].status, PYWALK_TORN);
                } else {
                        assert_int_equal(g.n, 2);
                        assert_int_equal(g.t[0].tstate, p.th[t2].tstate);
                        assert_int_equal(g.t[0].status, 0);
                        assert_int_equal(g.t[0].depth, 1);
                        assert_int_equal(g.t[1].tstate, p.th[t0].tstate);
                        assert_int_equal(g.t[1].status, 0);
                        assert_int_equal(g.t[1].depth, 1);
                }
                pywalk_close(w);
                pyimg_free(&p);
        }
}

/* Free-threaded without a GIL: "held" means attached. */
static void check_no_gil(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        int t0 = pyimg_add_thread(&p, p.interps[0], -1);
        int t1 = pyimg_add_thread(&p, p.interps[0], 77);
        pyimg_thread_state(&p, t0, 1);
        pyimg_thread_state(&p, t1, 0);
        pyimg_gil(&p, p.interps[0], 0, 0);
        struct pywalk *w = open_walk(&p);
        struct got g;
        sample(w, &g);
        assert_int_equal(g.t[1].gil, PYWALK_NO_GIL | PYWALK_GIL_HELD);
        assert_int_equal(g.t[0].gil, PYWALK_NO_GIL);
        /* The GIL re-enabled at run time (PYTHON_GIL=1): the holder counts. */
        pyimg_gil(&p, p.interps[0], p.th[t1].tstate, 1);
        sample(w, &g);
        assert_int_equal(g.t[0].gil, PYWALK_GIL_HELD);
        assert_int_equal(g.t[1].gil, 0);
        pywalk_close(w);
        pyimg_free(&p);
}

/* A code object freed and another built at the same address, noticed by the instruction offset. */
static void check_code_reuse(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        uint64_t code = mkcode(&p, "old", "old", "/o.py", 1, 4, 0);
        int t = pyimg_add_thread(&p, p.interps[0], -1);
        uint64_t f = pyimg_push(&p, t, PYIMG_FRAME, code, 2);
        /* The replacement, built elsewhere first: 40 code units, unit k on line 21 + k. */
        uint64_t fresh = mkcode(&p, "new", "new", "/n.py", 20, 40, 0);
        struct pywalk *w = open_walk(&p);
        struct got g;
        sample(w, &g);
        assert_string_equal(g.t[0].f[0].name, "old");
        uint32_t old_id = g.t[0].f[0].id;
        /* Copy its header over the old one; the frame now runs past the old bytecode's end. */
        memcpy(img_at(p.img, code, p.L.co_read), img_at(p.img, fresh, p.L.co_read), p.L.co_read);
        if (p.L.lasti == PYL_LASTI_POINTER)
                img_u64(p.img, f + (uint64_t)p.L.fr_lasti,
                        code + (uint64_t)p.L.co_code_adaptive + 2 * 30);
        else
                img_u32(p.img, f + (uint64_t)p.L.fr_lasti, p.L.lasti == PYL_LASTI_UNITS ? 30 : 60);
        sample(w, &g);
        assert_int_equal(g.t[0].status, 0);
        assert_string_equal(g.t[0].f[0].name, "new");
        assert_int_equal(g.t[0].f[0].line, 51);
        assert_true(g.t[0].f[0].id != old_id);
        pywalk_close(w);
        pyimg_free(&p);
}

/*
 * A program that keeps making code: here a code object at one address whose
 * identity (its name) changes between samples, 40,000 times, as happens
 * when one is freed and another built in its place. Each gets an entry and
 * an id, and the cache stays bounded (the walker forgets the superseded
 * ones); the newest is reported right throughout.
 */
/* Enough to pass the soft bound once (the walk costs a few us per sample). */
#define CODE_OBJECTS 17000

static void check_code_cache_bounded(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        uint64_t code = mkcode(&p, "f0", "f0", "/gen.py", 1, 4, 0);
        int t = pyimg_add_thread(&p, p.interps[0], -1);
        uint64_t f = pyimg_push(&p, t, PYIMG_FRAME, code, 2);
        struct pywalk *w = open_walk(&p);
        struct got g;
        size_t most = 0;
        uint32_t last_id = 0;
        /* Two names in turn: each change is a new identity at the same address. */
        const char *names[2] = {"odd", "even"};
        uint64_t strs[2] = {pyimg_str(&p, names[0], PYIMG_STR_AUTO),
                            pyimg_str(&p, names[1], PYIMG_STR_AUTO)};
        pyimg_sync(&p);
        for (int i = 1; i <= CODE_OBJECTS; i++) {
                const char *name = names[i % 2];
                img_u64(p.img, code + (uint64_t)p.L.co_name, strs[i % 2]);
                if (p.L.co_qualname >= 0)
                        img_u64(p.img, code + (uint64_t)p.L.co_qualname, strs[i % 2]);
                sample(w, &g);
                if (i % 1000 == 0) {
                        assert_int_equal(g.t[0].status, 0);
                        assert_string_equal(g.t[0].f[0].name, name);
                        assert_true(g.t[0].f[0].id > last_id);
                        last_id = g.t[0].f[0].id;
                }
                /* A sample without the frame: the next one checks the object again. */
                pyimg_set_top(&p, t, 0);
                sample(w, &g);
                pyimg_set_top(&p, t, f);
                if (pywalk_code_entries(w) > most)
                        most = pywalk_code_entries(w);
        }
        print_message("%-6s code-cache: at most %zu entries over %d code objects\n", v->name, most,
                      CODE_OBJECTS);
        /* Superseded entries go at the first trim, past CODE_CACHE_SOFT (16384). */
        assert_true(most <= 16384 + 1);
        pywalk_close(w);
        pyimg_free(&p);
}

/*
 * The case that escaped the instruction-pointer check: a big code object
 * (a module body run once) is freed and a smaller one is built at its
 * address; the frame's instruction fits both. Seen live on 3.6-3.8, where a
 * function was reported as site.py's <module>.
 */
static void check_code_reuse_smaller(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        uint64_t code = mkcode(&p, "<module>", "<module>", "/lib/site.py", 1, 60, 0);
        int t = pyimg_add_thread(&p, p.interps[0], -1);
        uint64_t f = pyimg_push(&p, t, PYIMG_FRAME, code, 5);
        uint64_t fresh = mkcode(&p, "work_a", "work_a", "/app/ratio.py", 14, 10, 0);
        struct pywalk *w = open_walk(&p);
        struct got g;
        sample(w, &g);
        assert_string_equal(g.t[0].f[0].name, "<module>");
        uint32_t old_id = g.t[0].f[0].id;
        size_t len =
            p.L.co_code_adaptive >= 0 ? (size_t)p.L.co_code_adaptive + 2 * 10 : p.L.co_read;
        memcpy(img_at(p.img, code, len), img_at(p.img, fresh, len), len);
        if (p.L.lasti == PYL_LASTI_POINTER)
                img_u64(p.img, f + (uint64_t)p.L.fr_lasti,
                        code + (uint64_t)p.L.co_code_adaptive + 2 * 3);
        else
                img_u32(p.img, f + (uint64_t)p.L.fr_lasti, p.L.lasti == PYL_LASTI_UNITS ? 3 : 6);
        for (int i = 0; i < 2; i++) {
                sample(w, &g);
                assert_int_equal(g.t[0].status, 0);
                assert_string_equal(g.t[0].f[0].name, "work_a");
                assert_string_equal(g.t[0].f[0].file, "/app/ratio.py");
                assert_int_equal(g.t[0].f[0].line, 18);
                assert_true(g.t[0].f[0].id != old_id);
        }
        pywalk_close(w);
        pyimg_free(&p);
}

/*
 * A function's code object leaves the stacks, is freed, and another is built
 * at its address before it is called again: compared when it comes back.
 */
static void check_code_reuse_return(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        uint64_t main_code = mkcode(&p, "main", "main", "/app/m.py", 1, 20, 0);
        uint64_t helper = mkcode(&p, "helper", "helper", "/app/h.py", 10, 20, 0);
        uint64_t other = mkcode(&p, "other", "Other.other", "/app/o.py", 40, 20, 0);
        int t = pyimg_add_thread(&p, p.interps[0], -1);
        uint64_t bottom = pyimg_push(&p, t, PYIMG_FRAME, main_code, 1);
        uint64_t top = pyimg_push(&p, t, PYIMG_FRAME, helper, 4);
        struct pywalk *w = open_walk(&p);
        struct got g;
        sample(w, &g);
        assert_int_equal(g.t[0].depth, 2);
        assert_string_equal(g.t[0].f[0].name, "helper");
        /* helper returns; its code object is freed and `other` built in its place. */
        pyimg_set_top(&p, t, bottom);
        sample(w, &g);
        assert_int_equal(g.t[0].depth, 1);
        size_t len =
            p.L.co_code_adaptive >= 0 ? (size_t)p.L.co_code_adaptive + 2 * 20 : p.L.co_read;
        memcpy(img_at(p.img, helper, len), img_at(p.img, other, len), len);
        pyimg_set_top(&p, t, top); /* a new call, same frame slot, same unit */
        sample(w, &g);
        assert_int_equal(g.t[0].status, 0);
        assert_int_equal(g.t[0].depth, 2);
        assert_string_equal(g.t[0].f[0].name, "other");
        assert_string_equal(g.t[0].f[0].file, "/app/o.py");
        assert_int_equal(g.t[0].f[0].line, 45);
        /* Still there next sample: no re-read needed, same answer. */
        sample(w, &g);
        assert_string_equal(g.t[0].f[0].name, "other");
        pywalk_close(w);
        pyimg_free(&p);
}

/* ---- torn memory ---- */

static int one_thread_status(struct pyimg *p, struct got *g)
{
        struct pywalk *w = open_walk(p);
        sample(w, g);
        pywalk_close(w);
        assert_true(g->n >= 1);
        if (g->t[0].status)
                assert_int_equal(g->t[0].depth, 0);
        return g->t[0].status;
}

static void check_torn_cycle(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        uint64_t code = mkcode(&p, "f", "f", "/c.py", 1, 10, 0);
        int t = pyimg_add_thread(&p, p.interps[0], -1);
        uint64_t bottom = pyimg_push(&p, t, PYIMG_FRAME, code, 1);
        pyimg_push(&p, t, PYIMG_FRAME, code, 2);
        uint64_t top = pyimg_push(&p, t, PYIMG_FRAME, code, 3);
        img_u64(p.img, bottom + (uint64_t)p.L.fr_back, top);
        struct got g;
        assert_int_equal(one_thread_status(&p, &g), PYWALK_TORN);
        pyimg_free(&p);
}

static void check_torn_type(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        uint64_t good = mkcode(&p, "good", "good", "/t.py", 1, 10, 0);
        uint64_t bad = mkcode(&p, "bad", "bad", "/t.py", 1, 10, 0);
        uint64_t bogus_type = img_alloc(p.img, 512);
        img_u64(p.img, bad + (uint64_t)p.L.ob_type, bogus_type);
        int t = pyimg_add_thread(&p, p.interps[0], -1);
        pyimg_push(&p, t, PYIMG_FRAME, good, 1);
        pyimg_push(&p, t, PYIMG_FRAME, bad, 1);
        struct got g;
        int st = one_thread_status(&p, &g);
        if (p.L.executable_any) {
                /* 3.13+: f_executable may be any object; such frames are not Python code. */
                assert_int_equal(st, 0);
                assert_int_equal(g.t[0].depth, 1);
                assert_string_equal(g.t[0].f[0].name, "good");
        } else {
                assert_int_equal(st, PYWALK_TORN);
        }
        pyimg_free(&p);
}

static void check_torn_strings(void **state)
{
        const struct imgver *v = *state;
        enum pyimg_strform forms[] = {PYIMG_STR_HUGE, PYIMG_STR_BAD_KIND};
        for (int k = 0; k < 2; k++) {
                if (v->major == 2 && forms[k] == PYIMG_STR_BAD_KIND)
                        continue;
                struct pyimg p;
                make_image(v, &p);
                uint64_t bad_name = pyimg_str(&p, "x", forms[k]);
                int lines[4] = {2, 3, 4, 5};
                uint64_t code = pyimg_code_objs(
                    &p, bad_name, bad_name, pyimg_str(&p, "/s.py", PYIMG_STR_AUTO), 1, lines, 4, 0);
                int t = pyimg_add_thread(&p, p.interps[0], -1);
                pyimg_push(&p, t, PYIMG_FRAME, code, 1);
                struct got g;
                assert_int_equal(one_thread_status(&p, &g), PYWALK_TORN);
                pyimg_free(&p);
        }
        /* A name whose type is not str at all. */
        struct pyimg p;
        make_image(v, &p);
        uint64_t not_str = pyimg_bytes(&p, "abc", 3);
        if (v->major == 2) /* 2.x names are str (bytes): use an object of another type */
                img_u64(p.img, not_str + (uint64_t)p.L.ob_type, p.code_type);
        int lines[4] = {2, 3, 4, 5};
        uint64_t code = pyimg_code_objs(&p, not_str, not_str,
                                        pyimg_str(&p, "/s.py", PYIMG_STR_AUTO), 1, lines, 4, 0);
        int t = pyimg_add_thread(&p, p.interps[0], -1);
        pyimg_push(&p, t, PYIMG_FRAME, code, 1);
        struct got g;
        assert_int_equal(one_thread_status(&p, &g), PYWALK_TORN);
        pyimg_free(&p);
}

/* A pointer out of the chunk that does not read; the chunk itself gone. */
static void check_torn_dangling(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        uint64_t code = mkcode(&p, "f", "f", "/d.py", 1, 10, 0);
        int t = pyimg_add_thread(&p, p.interps[0], -1);
        pyimg_push(&p, t, PYIMG_FRAME, code, 1);
        uint64_t top = pyimg_push(&p, t, PYIMG_FRAME, code, 2);
        img_u64(p.img, top + (uint64_t)p.L.fr_back, 0xdead0000ull);
        struct got g;
        assert_int_equal(one_thread_status(&p, &g), PYWALK_TORN);
        pyimg_free(&p);

        if (p.L.frames != PYL_FRAMES_INTERP)
                return;
        make_image(v, &p);
        code = mkcode(&p, "f", "f", "/d.py", 1, 10, 0);
        t = pyimg_add_thread(&p, p.interps[0], -1);
        pyimg_push(&p, t, PYIMG_FRAME, code, 1);
        pyimg_push(&p, t, PYIMG_FRAME, code, 2);
        struct pywalk *w = open_walk(&p);
        sample(w, &g);
        assert_int_equal(g.t[0].depth, 2);
        /* The chunk is freed under us (truncated): prefetch fails, frames do not read. */
        img_drop(p.img, p.th[t].chunk);
        pyimg_sync(&p);
        sample(w, &g);
        assert_int_equal(g.t[0].status, PYWALK_TORN);
        assert_int_equal(g.t[0].depth, 0);
        pywalk_close(w);
        pyimg_free(&p);
}

/* 3.15: a chain that does not end at the thread's base frame is incomplete. */
static void check_torn_base_frame(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        uint64_t code = mkcode(&p, "f", "f", "/b.py", 1, 10, 0);
        int t = pyimg_add_thread(&p, p.interps[0], -1);
        uint64_t first = pyimg_push(&p, t, PYIMG_FRAME, code, 1);
        pyimg_push(&p, t, PYIMG_FRAME, code, 2);
        struct got g;
        assert_int_equal(one_thread_status(&p, &g), 0);
        assert_int_equal(g.t[0].depth, 2);
        img_u64(p.img, first + (uint64_t)p.L.fr_back, 0);
        assert_int_equal(one_thread_status(&p, &g), PYWALK_TORN);
        pyimg_free(&p);
}

/* Thread lists that loop or point into another interpreter: bounded, torn. */
static void check_torn_threads(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        int t0 = pyimg_add_thread(&p, p.interps[0], -1);
        int t1 = pyimg_add_thread(&p, p.interps[0], 9);
        img_u64(p.img, p.th[t0].tstate + (uint64_t)p.L.ts_next, p.th[t1].tstate);
        struct pywalk *w = open_walk(&p);
        struct got g;
        sample(w, &g);
        assert_int_equal(g.n, 3);
        /* (Threads with no frames are reported after the others.) */
        assert_int_equal(g.t[0].status, PYWALK_TORN);
        assert_int_equal(g.t[1].status, 0);
        assert_int_equal(g.t[2].status, 0);
        /* The second thread now claims another interpreter. */
        img_u64(p.img, p.th[t0].tstate + (uint64_t)p.L.ts_next, 0);
        img_u64(p.img, p.th[t0].tstate + (uint64_t)p.L.ts_interp, 0x1234000);
        sample(w, &g);
        assert_int_equal(g.n, 2);
        assert_int_equal(g.t[0].status, PYWALK_TORN);
        assert_int_equal(g.t[1].status, 0);
        pywalk_close(w);
        pyimg_free(&p);
}

/*
 * Random damage to a valid image (bytes flipped in random regions, the way a
 * torn read of a running target looks): the walker must never crash or read
 * out of bounds (run under ASan), and whatever it reports as a frame must be
 * complete. Deterministic seeds.
 */
struct fuzz_count {
        unsigned threads, torn, frames;
};

static int check_frames_sane(void *ctx, const struct pywalk_thread *th)
{
        struct fuzz_count *n = ctx;
        n->threads++;
        n->torn += th->status != 0;
        n->frames += th->depth;
        assert_true(th->depth <= PYWALK_MAX_DEPTH);
        if (th->status)
                assert_int_equal(th->depth, 0);
        for (uint32_t i = 0; i < th->depth; i++) {
                const struct pywalk_code *c = th->frames[i].code;
                assert_non_null(c);
                assert_non_null(c->name);
                assert_non_null(c->file);
                assert_true(c->id >= 1);
                assert_true(strlen(c->name) <= 4 * 4096 && strlen(c->file) <= 4 * 4096);
        }
        return 0;
}

static void check_fuzz(void **state)
{
        const struct imgver *v = *state;
        uint64_t seed = 0x2545f4914f6cdd1dull ^ (uint64_t)v->minor << 8 ^ (uint64_t)v->ft;
        struct fuzz_count n = {0};
        int failed_samples = 0;
        for (int iter = 0; iter < 60; iter++) {
                struct pyimg p;
                make_image(v, &p);
                uint64_t a = mkcode(&p, "alpha", "A.alpha", "/f/ä.py", 10, 20, 2);
                uint64_t b = mkcode(&p, "beta", "B.beta", "/f/b.py", 20, 20, 0);
                int t0 = pyimg_add_thread(&p, p.interps[0], -1);
                int t1 = pyimg_add_thread(&p, p.interps[0], 31);
                if (p.L.owner_skip_from != PYL_OWNER_NONE)
                        pyimg_push(&p, t0, PYIMG_FRAME_ENTRY, 0, 0);
                for (int i = 0; i < 12; i++)
                        pyimg_push(&p, i % 3 ? t0 : t1, i % 4 ? PYIMG_FRAME : PYIMG_FRAME_GEN,
                                   i % 2 ? a : b, i);
                pyimg_gil(&p, p.interps[0], p.th[t0].tstate, -1);
                struct pywalk *w = NULL;
                char err[256];
                /* Open on the intact image (pywalk_open rejects broken heads anyway). */
                assert_int_equal(pywalk_open(&p.target, &p.mem, &w, err, sizeof(err)), 0);
                for (int round = 0; round < 6; round++) {
                        for (int k = 0; k < 3; k++) {
                                seed ^= seed << 13;
                                seed ^= seed >> 7;
                                seed ^= seed << 17;
                                struct img_region *r = &p.img->r[seed % p.img->n];
                                if (!r->len)
                                        continue;
                                size_t off = (size_t)(seed >> 20) % r->len;
                                uint8_t val = (uint8_t)(seed >> 40);
                                /* Sometimes a whole pointer to elsewhere in the image. */
                                if ((seed >> 50) % 4 == 0 && off + 8 <= r->len) {
                                        struct img_region *o = &p.img->r[(seed >> 8) % p.img->n];
                                        uint64_t ptr = o->addr + (seed >> 30) % (o->len + 1);
                                        memcpy(r->data + off, &ptr, 8);
                                } else {
                                        r->data[off] = val;
                                }
                        }
                        failed_samples += pywalk_sample(w, check_frames_sane, &n) != 0;
                }
                pywalk_close(w);
                pyimg_free(&p);
        }
        print_message("%-6s fuzz: 360 damaged samples, %d unreadable, %u threads (%u torn), "
                      "%u frames\n",
                      v->name, failed_samples, n.threads, n.torn, n.frames);
}

/* ---- thread names ---- */

struct got_names {
        int n;
        int64_t interp[16];
        uint64_t id[16];
        char name[16][64];
};

static void collect_name(void *ctx, int64_t interp, uint64_t id, const char *name)
{
        struct got_names *g = ctx;
        assert_true(strlen(name) <= 4 * 4096);
        if (g->n == 16)
                return;
        g->interp[g->n] = interp;
        g->id[g->n] = id;
        snprintf(g->name[g->n++], sizeof(g->name[0]), "%s", name);
}

static int names(struct pywalk *w, struct got_names *g)
{
        memset(g, 0, sizeof(*g));
        return pywalk_thread_names(w, collect_name, g);
}

/* The name reported for thread id `id` in interpreter `interp`, or NULL. */
static const char *name_of(const struct got_names *g, int64_t interp, uint64_t id)
{
        for (int i = 0; i < g->n; i++)
                if (g->id[i] == id && g->interp[i] == interp)
                        return g->name[i];
        return NULL;
}

/* What a test thread looks like to threading. */
struct named {
        uint64_t id;
        const char *name; /* NULL: no _name attribute */
        enum pyimg_attrs how;
        bool subclass;     /* a Thread subclass that sets an attribute before Thread.__init__ */
        bool str_key;      /* its _active key is a str, not an int */
        uint64_t name_obj; /* instead of a str made from `name` */
        uint64_t key_obj;  /* instead of an int made from `id` */
        uint64_t thread;   /* out: the Thread object */
};

#define NAMED(i, n, h)                                                                             \
        {                                                                                          \
                .id = (i), .name = (n), .how = (h)                                                 \
        }

static uint64_t str(struct pyimg *p, const char *s)
{
        return pyimg_str(p, s, PYIMG_STR_AUTO);
}

/* `n` other entries named prefix0, prefix1, ... with value `value`, and the pair (key, val) at
 * `at`. */
static uint64_t padded_dict(struct pyimg *p, const char *prefix, size_t n, uint64_t value,
                            const char *key, uint64_t val, size_t at)
{
        uint64_t *keys = calloc(n + 1, 8), *vals = calloc(n + 1, 8);
        for (size_t i = 0, k = 0; i <= n; i++) {
                char buf[32];
                if (i == at) {
                        keys[i] = str(p, key);
                        vals[i] = val;
                        continue;
                }
                snprintf(buf, sizeof(buf), "%s%zu", prefix, k++);
                keys[i] = str(p, buf);
                vals[i] = value;
        }
        uint64_t d = pyimg_dict(p, keys, vals, n + 1, true);
        free(keys);
        free(vals);
        return d;
}

/*
 * Give interp a sys.modules of `pad` + 1 modules, one of them threading,
 * whose _active maps each thread's id to a Thread object named as `t` says.
 */
static void add_threading(struct pyimg *p, uint64_t interp, struct named *t, size_t n, size_t pad)
{
        bool py2 = p->L.major == 2;
        const char *attr_names[] = {
            py2 ? "_Thread__target" : "_target",     py2 ? "_Thread__name" : "_name",
            py2 ? "_Thread__args" : "_args",         py2 ? "_Thread__kwargs" : "_kwargs",
            py2 ? "_Thread__daemonic" : "_daemonic", py2 ? "_Thread__ident" : "_ident"};
        uint64_t attrs[7];
        attrs[0] = str(p, "custom");
        for (size_t i = 0; i < 6; i++)
                attrs[i + 1] = str(p, attr_names[i]);
        uint64_t thread_cls = pyimg_class(p, attrs + 1, 6);
        uint64_t sub_cls = pyimg_class(p, attrs, 7); /* sets "custom" first: _name moves */
        uint64_t keys[16], objs[16];
        for (size_t i = 0; i < n; i++) {
                uint64_t vals[7] = {0};
                uint64_t *v = t[i].subclass ? vals + 1 : vals;
                v[0] = p->none_obj;
                if (t[i].name)
                        v[1] =
                            t[i].name_obj ? t[i].name_obj : pyimg_str(p, t[i].name, PYIMG_STR_AUTO);
                v[2] = p->none_obj;
                v[5] = pyimg_int(p, t[i].id);
                if (t[i].subclass)
                        vals[0] = p->none_obj;
                objs[i] = pyimg_instance(p, t[i].subclass ? sub_cls : thread_cls, vals, t[i].how);
                t[i].thread = objs[i];
                keys[i] = t[i].key_obj   ? t[i].key_obj
                          : t[i].str_key ? str(p, "not-an-int")
                                         : pyimg_int(p, t[i].id);
        }
        uint64_t active = pyimg_dict(p, keys, objs, n, false);
        uint64_t globals = padded_dict(p, "name", 40, p->none_obj, "_active", active, 23);
        uint64_t threading = pyimg_module(p, globals);
        uint64_t other = pyimg_module(p, pyimg_dict(p, NULL, NULL, 0, true));
        pyimg_set_modules(p, interp,
                          padded_dict(p, "mod", pad, other, "threading", threading, pad / 2));
        pyimg_sync(p);
}

/* Set the thread id threading knows thread t by (a pthread_t, 2 or 3 digits as an int). */
static void set_thread_id(struct pyimg *p, int t, uint64_t id)
{
        img_u64(p->img, p->th[t].tstate + (uint64_t)p->L.ts_thread_id, id);
}

static bool has_values(const struct imgver *v)
{
        return v->major == 3 && v->minor >= 11;
}

static void check_names(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        bool py2 = v->major == 2, values = has_values(v), inline13 = v->minor >= 13 && !py2;
        bool shared_keys = p.L.ht_cached_keys >= 0; /* 3.15: unknown, values give no name */
        enum pyimg_attrs split = py2 ? PYIMG_ATTRS_DICT : PYIMG_ATTRS_SPLIT;
        enum pyimg_attrs vals = values ? PYIMG_ATTRS_VALUES : split;
        struct named t[] = {
            NAMED(0x7f3eba9ceb80ull, "MainThread", PYIMG_ATTRS_DICT),
            NAMED(0x7f3eb9c6e6c0ull, "worker-A", vals),
            NAMED(0x7f3eb946d6c0ull, py2 ? "w\xc3\xb6rker" : "wörker-β", split),
            NAMED(0xf0000000000abcdeull, "worker-64bit", vals),
            {.id = 0x7f3eb8c6c6c0ull, .name = "sub-1", .how = vals, .subclass = true},
            {.id = 0x7f3eabfff6c0ull, .name = "sub-2", .how = vals, .subclass = true},
            NAMED(0x7f3eab7fe6c0ull, NULL, vals), /* no _name yet */
            {.id = 0x7f3eaaffd6c0ull, .name = "str-key", .how = split, .str_key = true},
            NAMED(0x7f3eaa7fc6c0ull, "stale", inline13 ? PYIMG_ATTRS_STALE : split),
        };
        size_t n = sizeof(t) / sizeof(t[0]);
        int th[16];
        for (size_t i = 0; i < n; i++) {
                th[i] = pyimg_add_thread(&p, p.interps[0], 2000 + (int64_t)i);
                set_thread_id(&p, th[i], t[i].id);
        }
        struct pywalk *w = open_walk(&p);
        struct got_names g;
        /* No modules dict yet (an interpreter still starting), then no threading module. */
        assert_int_equal(names(w, &g), 0);
        pyimg_set_modules(&p, p.interps[0],
                          padded_dict(&p, "mod", 20, p.none_obj, "os", p.none_obj, 3));
        assert_int_equal(names(w, &g), 0);

        /* 300 modules: 3.x indices 2 bytes wide (512 slots), 2.x 512 table slots. */
        add_threading(&p, p.interps[0], t, n, 300);
        uint64_t r0 = pywalk_reads(w);
        int got = names(w, &g);
        uint64_t cold = pywalk_reads(w) - r0;
        r0 = pywalk_reads(w);
        assert_int_equal(names(w, &g), got);
        uint64_t warm = pywalk_reads(w) - r0;
        print_message("%-6s names: %d of %zu threads, %llu reads, then %llu\n", v->name, got, n,
                      (unsigned long long)cold, (unsigned long long)warm);
        for (size_t i = 0; i < n; i++) {
                bool want = t[i].name && !t[i].str_key &&
                            !(t[i].how == PYIMG_ATTRS_VALUES && !shared_keys) &&
                            t[i].how != PYIMG_ATTRS_STALE;
                const char *name = name_of(&g, 0, t[i].id);
                if (want && (!name || strcmp(name, t[i].name) != 0))
                        print_message("thread %zu: got %s, want %s\n", i, name ? name : "none",
                                      t[i].name);
                assert_true(want ? name && strcmp(name, t[i].name) == 0 : name == NULL);
        }
        assert_true(warm < cold);
        /* The ids are the thread states' own: what samples report. */
        struct got s;
        sample(w, &s);
        assert_int_equal(s.n, 8); /* collect() keeps 8 */
        for (int i = 0; i < s.n; i++)
                assert_true(s.t[i].thread_id == t[n - 1 - (size_t)i].id);

        /* A second interpreter with a threading of its own: names carry its id. */
        uint64_t sub = pyimg_add_interp(&p, 7);
        int ts = pyimg_add_thread(&p, sub, 3000);
        struct named st = NAMED(0x7f3e00000700ull, "sub-interp", PYIMG_ATTRS_DICT);
        set_thread_id(&p, ts, st.id);
        add_threading(&p, sub, &st, 1, 5);
        assert_int_equal(names(w, &g), got + 1);
        assert_string_equal(name_of(&g, p.L.is_id >= 0 ? 7 : 1, st.id), "sub-interp");
        assert_null(name_of(&g, 0, st.id));

        /* threading moved in sys.modules (its remembered index now holds another module). */
        add_threading(&p, p.interps[0], t, n, 120);
        assert_int_equal(names(w, &g), got + 1);
        assert_non_null(name_of(&g, 0, t[0].id));
        assert_string_equal(name_of(&g, 0, t[0].id), "MainThread");
        pywalk_close(w);
        pyimg_free(&p);
}

/* Reading names never touches the samples' prefetch: a warm sample stays one read. */
static void check_names_budget(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        uint64_t code = mkcode(&p, "f", "f", "/app/f.py", 1, 20, 0);
        int t = pyimg_add_thread(&p, p.interps[0], -1);
        for (int i = 0; i < 10; i++)
                pyimg_push(&p, t, PYIMG_FRAME, code, i);
        struct named nt = NAMED(p.th[t].pthread, "only", PYIMG_ATTRS_DICT);
        add_threading(&p, p.interps[0], &nt, 1, 30);
        struct pywalk *w = open_walk(&p);
        struct got g;
        struct got_names gn;
        sample(w, &g);
        sample(w, &g);
        uint64_t r0 = pywalk_reads(w);
        sample(w, &g);
        uint64_t warm = pywalk_reads(w) - r0;
        assert_int_equal(names(w, &gn), 1);
        assert_string_equal(gn.name[0], "only");
        r0 = pywalk_reads(w);
        sample(w, &g);
        assert_int_equal(pywalk_reads(w) - r0, warm);
        assert_int_equal(g.t[0].depth, 10);
        assert_true(warm <= 1);
        pywalk_close(w);
        pyimg_free(&p);
}

/* Damaged dicts, ints, strings and classes: fewer names, never a crash or a wrong one. */
static void check_names_torn(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        const struct pylayout *L = &p.L;
        struct named t[] = {
            NAMED(0x7f0000001000ull, "one", PYIMG_ATTRS_DICT),
            NAMED(0x7f0000002000ull, "two", PYIMG_ATTRS_DICT),
        };
        for (int i = 0; i < 2; i++)
                set_thread_id(&p, pyimg_add_thread(&p, p.interps[0], 10 + i), t[i].id);
        add_threading(&p, p.interps[0], t, 2, 10);
        struct pywalk *w = open_walk(&p);
        struct got_names g;
        assert_int_equal(names(w, &g), 2);
        uint64_t modules = img_get_u64(p.img, p.interps[0] + (uint64_t)L->is_modules);
        uint64_t keys = img_get_u64(p.img, modules + (uint64_t)L->dict_keys);
        uint64_t type = img_get_u64(p.img, modules + (uint64_t)L->ob_type);
        /* sys.modules claims a huge table. */
        if (L->dicts == PYL_DICT_PY2) {
                uint64_t saved = img_get_u64(p.img, modules + (uint64_t)L->dict_mask);
                img_u64(p.img, modules + (uint64_t)L->dict_mask, (1ull << 40) - 1);
                assert_int_equal(names(w, &g), 0);
                img_u64(p.img, modules + (uint64_t)L->dict_mask, saved);
        } else {
                uint64_t saved = img_get_u64(p.img, keys + (uint64_t)L->dk_nentries);
                img_u64(p.img, keys + (uint64_t)L->dk_nentries, 1ull << 40);
                assert_int_equal(names(w, &g), 0);
                img_u64(p.img, keys + (uint64_t)L->dk_nentries, saved);
        }
        if (L->dicts == PYL_DICT_311) {
                /* Index bytes that do not fit the table's size. */
                uint8_t *b = img_at(p.img, keys + (uint64_t)L->dk_log2_index_bytes, 1);
                uint8_t keep = *b;
                *b = 30;
                assert_int_equal(names(w, &g), 0);
                *b = keep;
        }
        /* sys.modules is not a dict; then the keys object is gone. */
        img_u64(p.img, modules + (uint64_t)L->ob_type, p.str_type);
        assert_int_equal(names(w, &g), 0);
        img_u64(p.img, modules + (uint64_t)L->ob_type, type);
        assert_int_equal(names(w, &g), 2);
        img_u64(p.img, modules + (uint64_t)L->dict_keys, 0xdead0000ull);
        assert_int_equal(names(w, &g), 0);
        img_u64(p.img, modules + (uint64_t)L->dict_keys, keys);

        /* One thread each: a name of crazy length, a key that is a huge int, a class that is
         * gone, a name that is not a str; the last one is fine. */
        uint64_t huge = pyimg_int(&p, 5);
        if (L->ints == PYL_INT_TAG)
                img_u64(p.img, huge + (uint64_t)L->int_value, 100ull << 3);
        else if (L->ints == PYL_INT_SIZE)
                img_u64(p.img, huge + (uint64_t)L->ob_size, 100);
        else
                img_u64(p.img, huge + (uint64_t)L->ob_type, p.str_type);
        struct named t2[] = {
            {.id = 0x7f0000001000ull,
             .name = "x",
             .how = PYIMG_ATTRS_DICT,
             .name_obj = pyimg_str(&p, "x", PYIMG_STR_HUGE)},
            {.id = 0x7f0000002000ull, .name = "x", .how = PYIMG_ATTRS_DICT, .key_obj = huge},
            NAMED(0x7f0000003000ull, "gone", PYIMG_ATTRS_DICT),
            {.id = 0x7f0000004000ull,
             .name = "x",
             .how = PYIMG_ATTRS_DICT,
             .name_obj = pyimg_int(&p, 7)},
            NAMED(0x7f0000005000ull, "fine", PYIMG_ATTRS_DICT),
        };
        for (int i = 2; i < 5; i++)
                set_thread_id(&p, pyimg_add_thread(&p, p.interps[0], 10 + i), t2[i].id);
        add_threading(&p, p.interps[0], t2, 5, 10);
        img_u64(p.img, t2[2].thread + (uint64_t)L->ob_type, 0xdead0000ull);
        assert_int_equal(names(w, &g), 1);
        assert_string_equal(name_of(&g, 0, t2[4].id), "fine");
        /* The class's attribute offsets are absurd. */
        uint64_t cls = img_get_u64(p.img, t2[4].thread + (uint64_t)L->ob_type);
        if (L->attrs == PYL_ATTRS_DICTOFFSET) {
                img_u64(p.img, cls + (uint64_t)L->tp_dictoffset, 1ull << 40);
                assert_int_equal(names(w, &g), 0);
        }
        /* The interpreter list loops: each interpreter once. */
        img_u64(p.img, p.interps[0] + (uint64_t)L->is_next, p.interps[0]);
        names(w, &g);
        pywalk_close(w);
        pyimg_free(&p);
}

/* Random damage to an image with threading (as check_fuzz): never a crash, only sane names. */
static void check_names_fuzz(void **state)
{
        const struct imgver *v = *state;
        uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)v->minor << 8 ^ (uint64_t)v->ft;
        int named = 0, calls = 0;
        for (int iter = 0; iter < 40; iter++) {
                struct pyimg p;
                make_image(v, &p);
                bool values = has_values(v) && p.L.ht_cached_keys >= 0;
                enum pyimg_attrs split = v->major == 2 ? PYIMG_ATTRS_DICT : PYIMG_ATTRS_SPLIT;
                struct named t[] = {
                    NAMED(0x7f3eba9ceb80ull, "MainThread", PYIMG_ATTRS_DICT),
                    NAMED(0x7f3eb9c6e6c0ull, "worker-A", values ? PYIMG_ATTRS_VALUES : split),
                    {.id = 0x7f3eb8c6c6c0ull, .name = "sub-1", .how = split, .subclass = true},
                };
                for (int i = 0; i < 3; i++)
                        set_thread_id(&p, pyimg_add_thread(&p, p.interps[0], 10 + i), t[i].id);
                add_threading(&p, p.interps[0], t, 3, 40);
                struct pywalk *w = open_walk(&p);
                for (int round = 0; round < 8; round++) {
                        for (int k = 0; k < 2; k++) {
                                seed ^= seed << 13;
                                seed ^= seed >> 7;
                                seed ^= seed << 17;
                                struct img_region *r = &p.img->r[seed % p.img->n];
                                if (!r->len)
                                        continue;
                                size_t off = (size_t)(seed >> 20) % r->len;
                                if ((seed >> 50) % 4 == 0 && off + 8 <= r->len) {
                                        struct img_region *o = &p.img->r[(seed >> 8) % p.img->n];
                                        uint64_t ptr = o->addr + (seed >> 30) % (o->len + 1);
                                        memcpy(r->data + off, &ptr, 8);
                                } else {
                                        r->data[off] = (uint8_t)(seed >> 40);
                                }
                        }
                        struct got_names g;
                        int n = names(w, &g);
                        assert_true(n >= 0 && n <= 2 * PYWALK_MAX_THREADS);
                        named += n;
                        calls++;
                }
                pywalk_close(w);
                pyimg_free(&p);
        }
        print_message("%-6s names fuzz: %d damaged images read, %d names\n", v->name, calls, named);
}

/* ---- opening ---- */

static int try_open(struct pyimg *p, char *err, size_t errlen)
{
        struct pywalk *w = NULL;
        int rc = pywalk_open(&p->target, &p->mem, &w, err, errlen);
        pywalk_close(w);
        return rc;
}

static void check_open(void **state)
{
        const struct imgver *v = *state;
        char err[256];
        struct pyimg p;
        make_image(v, &p);
        /* No thread yet: the interpreter is still starting. */
        assert_int_equal(try_open(&p, err, sizeof(err)), PYFIND_NOT_READY);
        int t = pyimg_add_thread(&p, p.interps[0], -1);
        assert_int_equal(try_open(&p, err, sizeof(err)), 0);
        /* A thread state that does not point back: the layout is wrong for this build. */
        img_u64(p.img, p.th[t].tstate + (uint64_t)p.L.ts_interp, 0x1000);
        assert_int_equal(try_open(&p, err, sizeof(err)), PYFIND_UNSUPPORTED);
        img_u64(p.img, p.th[t].tstate + (uint64_t)p.L.ts_interp, p.interps[0]);
        /* No interpreter at all. */
        uint64_t head = p.runtime ? p.runtime + (uint64_t)p.L.rt_interp_head : p.interp_head_var;
        img_u64(p.img, head, 0);
        assert_int_equal(try_open(&p, err, sizeof(err)), PYFIND_NOT_READY);
        img_u64(p.img, head, p.interps[0]);
        if (v->minor >= 13 && v->major == 3) {
                uint8_t *d = img_at(p.img, p.runtime, 64);
                d[0] = 'X';
                assert_int_equal(try_open(&p, err, sizeof(err)), PYFIND_NOT_READY);
                d[0] = 'x';
                p.target.version_hex += 1u << 16;
                assert_int_equal(try_open(&p, err, sizeof(err)), PYFIND_UNSUPPORTED);
                p.target.version_hex -= 1u << 16;
                p.target.free_threaded = !p.target.free_threaded;
                assert_int_equal(try_open(&p, err, sizeof(err)), PYFIND_UNSUPPORTED);
                p.target.free_threaded = !p.target.free_threaded;
                uint64_t saved;
                memcpy(&saved, d + 24, 8); /* runtime_state.size */
                uint64_t huge = 1ull << 40;
                memcpy(d + 24, &huge, 8);
                assert_int_equal(try_open(&p, err, sizeof(err)), PYFIND_UNSUPPORTED);
                memcpy(d + 24, &saved, 8);
                assert_int_equal(try_open(&p, err, sizeof(err)), 0);
        }
        /* The process went away (nothing readable). */
        img_drop(p.img, p.interps[0]);
        pyimg_sync(&p);
        assert_true(try_open(&p, err, sizeof(err)) < 0);
        pyimg_free(&p);
}

static void check_unsupported(void **state)
{
        (void)state;
        struct pyfind_target t = {.version_hex = 0x030500f0, .version_exact = true};
        struct memsrc m;
        memsrc_init_image(&m, NULL, 0);
        struct pywalk *w = NULL;
        char err[256];
        assert_int_equal(pywalk_open(&t, &m, &w, err, sizeof(err)), PYFIND_UNSUPPORTED);
        t.version_hex = 0x031000f0;
        assert_int_equal(pywalk_open(&t, &m, &w, err, sizeof(err)), PYFIND_UNSUPPORTED);
        assert_null(pylayout_table(3, 13, 0, false));
        assert_non_null(pylayout_table(2, 7, 18, false));
        /* 3.7.0-3.7.3 moved gilstate.tstate_current. */
        assert_int_equal(pylayout_table(3, 7, 3, false)->rt_tstate_current, 1392);
        assert_int_equal(pylayout_table(3, 7, 16, false)->rt_tstate_current, 1480);
        /* Py_TRACE_REFS shifts object fields only. */
        const struct pylayout *d = pylayout_table(3, 6, 15, true);
        assert_int_equal(d->co_name, 104 + 16);
        assert_int_equal(d->ts_frame, 24);
}

/* The tables: every build sets every field; the supported versions are the builds'. */
static void check_tables(void **state)
{
        (void)state;
        char err[256] = "";
        if (pylayout_check_tables(err, sizeof(err)) != 0)
                fail_msg("%s", err);
        char list[128];
        pylayout_supported_list(list, sizeof(list));
        assert_string_equal(list, "2.7 and 3.6 to 3.15");
        /* What every command's --version says (meson.build) is the table's list. */
        assert_string_equal(list, PYFLAME_CPYTHON);
        assert_true(pylayout_supported(2, 7));
        assert_true(pylayout_supported(3, 6));
        assert_true(pylayout_supported(3, 15));
        assert_false(pylayout_supported(3, 5));
        assert_false(pylayout_supported(3, 16));
        assert_false(pylayout_supported(2, 6));
}

/* ---- registration ---- */

/*
 * <=3.10: a generator's frame loses its f_back when it yields or returns. A
 * chain read across that moment ends at the generator: it must be reported
 * torn, not as a stack whose root is the generator (seen live on 3.6-3.10).
 */
static void check_torn_yielded(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        uint64_t gen = mkcode(&p, "<genexpr>", "<genexpr>", "/app/hot.py", 10, 10, 0);
        int t = pyimg_add_thread(&p, p.interps[0], -1);
        uint64_t f = pyimg_push(&p, t, PYIMG_FRAME, gen, 2);
        struct got g;
        assert_int_equal(one_thread_status(&p, &g), 0); /* running: a real root */
        for (int value = 0; value < 2; value++) {
                /* suspended (3.6-3.9: f_executing 0; 3.10: SUSPENDED -1, RETURNED 1) */
                uint8_t suspended = p.L.fr_state_kind == PYL_FRSTATE_EXECUTING ? 0
                                    : value == 0                               ? 0xff
                                                                               : 1;
                img_u8(p.img, f + (uint64_t)p.L.fr_state, suspended);
                assert_int_equal(one_thread_status(&p, &g), PYWALK_TORN);
        }
        pyimg_free(&p);
}

/*
 * <=3.10: a frame that returned while the chain was read is freed (reference
 * count 0, stale f_code and f_back) or, on 3.6-3.10, no longer running; a
 * chain through it is torn wherever it is. The leaf alone may be seen not
 * running, in the moments the interpreter takes to push and pop it.
 */
static void check_torn_dead_frame(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        uint64_t code = mkcode(&p, "rec", "rec", "/app/rec.py", 3, 10, 0);
        int t = pyimg_add_thread(&p, p.interps[0], -1);
        uint64_t root = pyimg_push(&p, t, PYIMG_FRAME, code, 1);
        uint64_t mid = pyimg_push(&p, t, PYIMG_FRAME, code, 2);
        uint64_t leaf = pyimg_push(&p, t, PYIMG_FRAME, code, 3);
        struct got g;
        assert_int_equal(one_thread_status(&p, &g), 0);
        assert_int_equal(g.t[0].depth, 3);
        const uint64_t refcnt = (uint64_t)p.L.ob_type - 8;
        uint64_t frames[] = {leaf, mid, root};
        for (int i = 0; i < 3; i++) {
                img_u64(p.img, frames[i] + refcnt, 0);
                assert_int_equal(one_thread_status(&p, &g), PYWALK_TORN);
                img_u64(p.img, frames[i] + refcnt, 1);
        }
        if (p.L.fr_state >= 0) {
                uint8_t stopped = p.L.fr_state_kind == PYL_FRSTATE_EXECUTING ? 0 : 1; /* RETURNED */
                uint8_t running = p.L.fr_state_kind == PYL_FRSTATE_EXECUTING ? 1 : 0;
                img_u8(p.img, mid + (uint64_t)p.L.fr_state, stopped);
                assert_int_equal(one_thread_status(&p, &g), PYWALK_TORN);
                img_u8(p.img, mid + (uint64_t)p.L.fr_state, running);
                img_u8(p.img, root + (uint64_t)p.L.fr_state, stopped);
                assert_int_equal(one_thread_status(&p, &g), PYWALK_TORN);
                img_u8(p.img, root + (uint64_t)p.L.fr_state, running);
                img_u8(p.img, leaf + (uint64_t)p.L.fr_state, stopped);
                assert_int_equal(one_thread_status(&p, &g), 0);
                assert_int_equal(g.t[0].depth, 3);
        }
        pyimg_free(&p);
}

/* 3.11+: a generator's embedded frame with no `previous` (it yielded under us) is torn. */
static void check_torn_yielded_embedded(void **state)
{
        const struct imgver *v = *state;
        struct pyimg p;
        make_image(v, &p);
        uint64_t gen = mkcode(&p, "<genexpr>", "<genexpr>", "/app/hot.py", 10, 10, 0);
        int t = pyimg_add_thread(&p, p.interps[0], -1);
        uint64_t f = pyimg_push(&p, t, PYIMG_FRAME_GEN, gen, 2);
        pyimg_set_top(&p, t, f); /* the generator alone: its caller link cleared */
        img_u64(p.img, f + (uint64_t)p.L.fr_back, 0);
        struct got g;
        assert_int_equal(one_thread_status(&p, &g), PYWALK_TORN);
        pyimg_free(&p);
}

static bool heap_frames(const struct imgver *v)
{
        return v->major == 2 || v->minor <= 10;
}

static bool frame_state(const struct imgver *v)
{
        return v->major == 3 && v->minor >= 6 && v->minor <= 10;
}

static bool any(const struct imgver *v)
{
        (void)v;
        return true;
}

static bool debug_offsets(const struct imgver *v)
{
        return v->minor >= 13;
}

static bool pthread_tid(const struct imgver *v)
{
        return v->major == 2 || v->minor < 11;
}

static bool chunked(const struct imgver *v)
{
        return v->major == 3 && v->minor >= 11;
}

static bool free_threaded(const struct imgver *v)
{
        return v->ft;
}

static bool tlbc(const struct imgver *v)
{
        return v->ft && v->minor >= 14;
}

static bool base_frame(const struct imgver *v)
{
        return v->minor >= 15;
}

struct scenario {
        const char *name;
        CMUnitTestFunction fn;
        bool (*applies)(const struct imgver *v);
};

static const struct scenario scenarios[] = {
    {"layout", check_layout_roundtrip, debug_offsets},
    {"basic", check_basic, any},
    {"reads", check_read_budget, any},
    {"interps", check_two_interps, any},
    {"callback-errors", check_callback_errors, any},
    {"chunks", check_chunks, chunked},
    {"tlbc", check_tlbc, tlbc},
    {"nogil", check_no_gil, free_threaded},
    {"tid-prealloc", check_tid_prealloc, pthread_tid},
    {"list-restart", check_list_restart, any},
    {"tid-twin", check_tid_twin, any},
    {"framed-twin", check_framed_twin, any},
    {"code-reuse", check_code_reuse, any},
    {"code-reuse-smaller", check_code_reuse_smaller, any},
    {"code-reuse-return", check_code_reuse_return, any},
    {"code-cache-bounded", check_code_cache_bounded, any},
    {"torn-cycle", check_torn_cycle, any},
    {"torn-yielded", check_torn_yielded, frame_state},
    {"torn-dead-frame", check_torn_dead_frame, heap_frames},
    {"torn-yielded-embedded", check_torn_yielded_embedded, chunked},
    {"torn-type", check_torn_type, any},
    {"torn-str", check_torn_strings, any},
    {"torn-dangling", check_torn_dangling, any},
    {"torn-base", check_torn_base_frame, base_frame},
    {"torn-threads", check_torn_threads, any},
    {"open", check_open, any},
    {"fuzz", check_fuzz, any},
    {"names", check_names, any},
    {"names-reads", check_names_budget, any},
    {"names-torn", check_names_torn, any},
    {"names-fuzz", check_names_fuzz, any},
};

#define N_SCENARIOS (sizeof(scenarios) / sizeof(scenarios[0]))

int main(void)
{
        static struct CMUnitTest tests[IMGVER_COUNT * N_SCENARIOS + 2];
        static char names[IMGVER_COUNT * N_SCENARIOS][48];
        size_t n = 0;
        tests[n++] = (struct CMUnitTest)cmocka_unit_test(check_unsupported);
        tests[n++] = (struct CMUnitTest)cmocka_unit_test(check_tables);
        for (size_t s = 0; s < N_SCENARIOS; s++) {
                for (size_t v = 0; v < IMGVER_COUNT; v++) {
                        if (!scenarios[s].applies(&imgver_table[v]))
                                continue;
                        char *name = names[s * IMGVER_COUNT + v];
                        snprintf(name, 48, "%s %s", scenarios[s].name, imgver_table[v].name);
                        tests[n++] = (struct CMUnitTest){.name = name,
                                                         .test_func = scenarios[s].fn,
                                                         .initial_state = (void *)&imgver_table[v]};
                }
        }
        return _cmocka_run_group_tests("pywalk_image", tests, n, NULL, NULL);
}
