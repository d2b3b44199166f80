/*
 * test_bpfwalk.c - the in-kernel sampler's frame walk, run in user space.
 *
 * bpfw_walk() (record/bpfwalk_chain.h) is the function the BPF program runs
 * in a timer interrupt; here it is compiled with BPFW_READ reading the
 * synthetic interpreter images of imgbuild, for every layout the walker
 * tests build (2.7, 3.6-3.12 from the tables, a Py_TRACE_REFS 3.7, and 3.13,
 * 3.13t, 3.14, 3.14t, 3.15 through a _Py_DebugOffsets written by imgbuild).
 * Its events, decoded by the walker (pywalk_bpf_begin/decode/end) with the
 * layout pywalk_bpf_proc() describes, must give the very frames
 * pywalk_sample() gives for the same thread: names, files, qualified names,
 * lines, entry flags and code ids; and every field it copies must be the
 * image's own (frame addresses, code, instruction position, owner). Also:
 * frames to skip (entry, shim, incomplete, being cleared, not code), stacks
 * deeper than BPFW_MAX_DEPTH (truncated to their innermost frames), memory
 * that does not read (BPFW_FAULT), and cycles in the chain (never frames
 * that are not the stack's).
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

#include "bpfwalk_shared.h"
#include "imgbuild.h"
#include "imgvers.h"
#include "memsrc.h"
#include "pylayout.h"
#include "pywalk.h"

/* ---- the walk, reading an image ---- */

static struct memsrc *bpfw_mem; /* the image bpfw_walk() reads */
static uint8_t bpfw_win[BPFW_SCRATCH] __attribute__((aligned(8)));
static uint8_t bpfw_cowin[BPFW_CO_SCRATCH];
static unsigned bpfw_reads;   /* reads of the last walk... */
static unsigned bpfw_failed;  /* ...of which failed (a block below a chunk's first frame) */
static uint32_t bpfw_longest; /* ...and the longest of them */

/*
 * The window is filled with a pattern before each frame is read into it: a
 * field the read did not cover (a span too short) shows as garbage, not as
 * the same field of the frame before.
 */
static int bpfw_test_read(void *dst, uint32_t len, uint64_t addr)
{
        bpfw_reads++;
        bpfw_longest = len > bpfw_longest ? len : bpfw_longest;
        if (dst == bpfw_win)
                memset(bpfw_win, 0xa5, sizeof(bpfw_win));
        int rc = memsrc_read(bpfw_mem, addr, dst, len);
        bpfw_failed += rc < 0;
        return rc;
}

/* The recorder's table of code objects it knows (map `known`); NULL: all known. */
static struct bpfw_known_set *bpfw_known;

static int bpfw_test_known(uint64_t code, uint64_t ident)
{
        return !bpfw_known || bpfw_known_has(&bpfw_known[bpfw_known_index(code)], code, ident);
}

static uint64_t bpfw_test_lasting(uint64_t code)
{
        return bpfw_known ? bpfw_known_lasting(&bpfw_known[bpfw_known_index(code)], code) : 0;
}

#define BPFW_READ(dst, len, addr)    bpfw_test_read((dst), (len), (addr))
#define BPFW_CODE_KNOWN(code, ident) bpfw_test_known((code), (ident))
#define BPFW_CODE_LASTING(code)      bpfw_test_lasting(code)
#include "bpfwalk_chain.h"

/* ---- code objects ---- */

/* A code object whose unit k is on line first + 1 + k. */
static uint64_t mkcode(struct pyimg *p, const char *name, const char *qual, const char *file,
                       int first, int nunits, int firsttraceable)
{
        int lines[64];
        assert_true(nunits <= 64);
        for (int i = 0; i < nunits; i++)
                lines[i] = first + 1 + i;
        return pyimg_code(p, name, qual, file, first, lines, (size_t)nunits, firsttraceable);
}

/* ---- what a thread's stack was found to be ---- */

#define REC_FRAMES  320 /* > BPFW_MAX_DEPTH: the deep stacks' whole walk */
#define REC_THREADS 8

struct rec_frame {
        char name[64], qual[64], file[128];
        int32_t line;
        bool entry;
        uint32_t id;
};

struct rec_thread {
        uint64_t tstate, thread_id;
        int status;
        unsigned gil;
        uint32_t depth;
        struct rec_frame f[REC_FRAMES];
};

struct rec {
        int n;
        struct rec_thread t[REC_THREADS];
};

static void rec_thread(struct rec_thread *r, const struct pywalk_thread *th)
{
        assert_true(th->depth <= REC_FRAMES);
        memset(r, 0, sizeof(*r));
        r->tstate = th->tstate_addr;
        r->thread_id = th->thread_id;
        r->status = th->status;
        r->gil = th->gil;
        r->depth = th->depth;
        for (uint32_t i = 0; i < th->depth; i++) {
                const struct pywalk_code *c = th->frames[i].code;
                assert_non_null(c);
                snprintf(r->f[i].name, sizeof(r->f[i].name), "%s", c->name);
                snprintf(r->f[i].qual, sizeof(r->f[i].qual), "%s", c->qualname ? c->qualname : "");
                snprintf(r->f[i].file, sizeof(r->f[i].file), "%s", c->file);
                r->f[i].line = th->frames[i].line;
                r->f[i].entry = th->frames[i].entry;
                r->f[i].id = c->id;
        }
}

static int collect(void *ctx, const struct pywalk_thread *th)
{
        struct rec *g = ctx;
        assert_true(g->n < REC_THREADS);
        rec_thread(&g->t[g->n++], th);
        return 0;
}

/* ---- a test's image, walker and buffers ---- */

struct fx {
        const struct imgver *v;
        struct pyimg p;
        struct pywalk *w;
        struct bpfw_proc proc;
        struct rec *sample;     /* the last pywalk_sample() */
        struct rec_thread *got; /* the last event decoded */
        struct bpfw_event *e;
        unsigned events, frames; /* decoded and found identical: the test's count */
};

/* cmocka setup: the test's state becomes a fixture for its version, image made. */
static int fx_setup(void **state)
{
        struct fx *f = calloc(1, sizeof(*f));
        if (!f)
                return -1;
        f->v = *state;
        assert_int_equal(imgver_image(f->v, IMGVER_TASKS_NONE, &f->p), 0);
        f->sample = calloc(1, sizeof(*f->sample));
        f->got = calloc(1, sizeof(*f->got));
        f->e = calloc(1, sizeof(*f->e));
        *state = f;
        return f->sample && f->got && f->e ? 0 : -1;
}

/* cmocka teardown: freed whether the test passed or not. */
static int fx_teardown(void **state)
{
        struct fx *f = *state;
        pywalk_close(f->w);
        pyimg_free(&f->p);
        free(f->sample);
        free(f->got);
        free(f->e);
        free(f);
        return 0;
}

static void fx_open(struct fx *f)
{
        char err[256] = "";
        int rc = pywalk_open(&f->p.target, &f->p.mem, &f->w, err, sizeof(err));
        if (rc != 0)
                print_message("pywalk_open: %d %s\n", rc, err);
        assert_int_equal(rc, 0);
}

static void fx_report(const struct fx *f, const char *what)
{
        print_message("%-6s %-10s %3u events, %4u frames identical to pywalk_sample\n", f->v->name,
                      what, f->events, f->frames);
}

/* Bytes of a field of the walker's layout the walk copies. */
struct field {
        const char *name;
        int32_t off;
        uint32_t size;
};

/*
 * What pywalk_bpf_proc() tells the program: 0 for every layout, the
 * image's own offsets (as the walker loaded them: _Py_DebugOffsets from
 * 3.13 on), one window over every field, and the word naming the GIL's
 * holder (read here: the thread state pyimg_gil() wrote).
 */
static void fx_proc(struct fx *f, uint64_t gil_holder)
{
        const struct pylayout *L = &f->p.L;
        struct bpfw_proc *P = &f->proc;
        const struct bpfw_layout *B = &P->L;
        char err[256] = "";
        memset(P, 0xee, sizeof(*P));
        int rc = pywalk_bpf_proc(f->w, P, err, sizeof(err));
        if (rc != 0)
                print_message("pywalk_bpf_proc: %d %s\n", rc, err);
        assert_int_equal(rc, 0);
        assert_int_equal(B->ts_frame, L->ts_frame);
        assert_int_equal(B->cframe_current, L->cframe_current);
        assert_int_equal(B->ts_thread_id, L->ts_thread_id);
        assert_int_equal(B->fr_back, L->fr_back);
        assert_int_equal(B->fr_code, L->fr_code);
        assert_int_equal(B->fr_lasti, L->fr_lasti);
        assert_int_equal(B->fr_owner, L->fr_owner);
        assert_int_equal(B->fr_is_entry, L->fr_is_entry);
        assert_int_equal(B->fr_tlbc_index, L->fr_tlbc_index);
        assert_int_equal(B->lasti_pointer, L->lasti == PYL_LASTI_POINTER);
        assert_true(B->fr_span >= 8 && B->fr_span <= BPFW_FRAME_WINDOW);
        assert_int_equal(B->fr_block, L->frames == PYL_FRAMES_INTERP ? BPFW_BLOCK : 0);
        const struct field fields[] = {
            {"fr_back", L->fr_back, 8},
            {"fr_code", L->fr_code, 8},
            {"fr_lasti", L->fr_lasti, L->lasti == PYL_LASTI_POINTER ? 8 : 4},
            {"fr_owner", L->fr_owner, 1},
            {"fr_is_entry", L->fr_is_entry, 1},
            {"fr_tlbc_index", L->fr_tlbc_index, 4},
        };
        for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
                if (fields[i].off < 0)
                        continue;
                if ((uint32_t)fields[i].off < B->fr_lo ||
                    (uint32_t)fields[i].off + fields[i].size > B->fr_lo + B->fr_span)
                        print_message("%s at %d outside [%u, +%u)\n", fields[i].name, fields[i].off,
                                      B->fr_lo, B->fr_span);
                assert_true((uint32_t)fields[i].off >= B->fr_lo);
                assert_true((uint32_t)fields[i].off + fields[i].size <= B->fr_lo + B->fr_span);
        }
        /* The main interpreter's list of thread states (the first interpreter made). */
        assert_int_equal(B->ts_next, L->ts_next);
        assert_int_equal(P->threads_head_addr, f->p.interps[0] + (uint64_t)L->is_threads_head);
        uint32_t subinterps = f->p.n_interps > 1 ? BPFW_P_SUBINTERPS : 0;
        if (f->p.target.free_threaded) {
                assert_int_equal(P->flags, BPFW_P_NO_GIL | subinterps);
                return;
        }
        assert_int_equal(P->flags, subinterps);
        assert_true(P->gil_holder_addr != 0);
        assert_int_equal(img_get_u64(f->p.img, P->gil_holder_addr), gil_holder);
        if (P->gil_locked_addr) {
                uint32_t locked;
                memcpy(&locked, img_at(f->p.img, P->gil_locked_addr, 4), 4);
                assert_int_equal(locked != 0, gil_holder != 0);
        }
}

/* pywalk_sample() into f->sample, then the program's description of the process. */
static void fx_sample(struct fx *f, uint64_t gil_holder)
{
        memset(f->sample, 0, sizeof(*f->sample));
        assert_int_equal(pywalk_sample(f->w, collect, f->sample), 0);
        fx_proc(f, gil_holder);
}

static const struct rec_thread *fx_sampled(struct fx *f, int t)
{
        for (int i = 0; i < f->sample->n; i++)
                if (f->sample->t[i].tstate == f->p.th[t].tstate)
                        return &f->sample->t[i];
        fail_msg("thread %d not in the sample", t);
        return NULL;
}

/* Run bpfw_walk() over thread state `tstate` into f->e, as the program does. */
static void fx_walk(struct fx *f, uint64_t tstate, uint64_t thread_id)
{
        struct bpfw_event *e = f->e;
        memset(e, 0x5a, sizeof(*e)); /* the program leaves frames past depth as they were */
        e->flags = 0;
        e->tstate = tstate;
        e->thread_id = thread_id;
        bpfw_mem = &f->p.mem;
        bpfw_reads = bpfw_failed = 0;
        bpfw_longest = 0;
        bpfw_walk(&f->proc.L, tstate, e, bpfw_win, bpfw_cowin);
        assert_true(e->depth <= BPFW_MAX_DEPTH);
        assert_true(bpfw_longest <= (f->proc.L.fr_block ? BPFW_BLOCK : BPFW_FRAME_WINDOW));
}

/*
 * The reads of a walk of `depth` frames: the thread state (and 3.11/3.12's
 * cframe), then one per frame at most (exactly one without blocks), not
 * counting blocks that did not read (each followed by its frame's window).
 */
static void expect_reads(const struct bpfw_layout *L, uint32_t depth)
{
        /* (and one of each frame's code object, for its identity) */
        unsigned most = 1 + (L->cframe_current >= 0) + 2 * depth;
        assert_true(bpfw_reads - bpfw_failed <= most);
        if (!L->fr_block)
                assert_true(bpfw_reads >= most - depth);
}

/* Decode f->e into f->got; returns th.status. */
static int fx_decode(struct fx *f)
{
        struct pywalk_thread th;
        memset(&th, 0xcc, sizeof(th));
        pywalk_bpf_begin(f->w);
        int rc = pywalk_bpf_decode(f->w, f->e, &th);
        assert_int_equal(rc, 0);
        assert_int_equal(th.tstate_addr, f->e->tstate);
        assert_int_equal(th.thread_id, f->e->thread_id);
        if (th.status != 0)
                assert_int_equal(th.depth, 0);
        rec_thread(f->got, &th);
        pywalk_bpf_end(f->w);
        return th.status;
}

/* Thread t's chain of frames as the image holds it (leaf first), at most max. */
static size_t image_chain(struct pyimg *p, int t, uint64_t *out, size_t max)
{
        uint64_t a = p->th[t].top;
        size_t n = 0;
        while (a && n < max) {
                out[n++] = a;
                a = img_get_u64(p->img, a + (uint64_t)p->L.fr_back);
        }
        return n;
}

/* The frames of f->e are the image's: every field as it is at that frame's address. */
static void expect_raw_frames(struct fx *f, int t)
{
        const struct pylayout *L = &f->p.L;
        const struct bpfw_event *e = f->e;
        uint64_t chain[BPFW_MAX_DEPTH];
        size_t n = image_chain(&f->p, t, chain, BPFW_MAX_DEPTH);
        assert_int_equal(e->depth, n);
        for (uint32_t i = 0; i < e->depth; i++) {
                const struct bpfw_frame *fr = &e->frames[i];
                uint64_t a = chain[i];
                assert_int_equal(fr->addr, a);
                assert_int_equal(fr->code, img_get_u64(f->p.img, a + (uint64_t)L->fr_code));
                uint64_t pos;
                if (L->lasti == PYL_LASTI_POINTER) {
                        pos = img_get_u64(f->p.img, a + (uint64_t)L->fr_lasti);
                } else {
                        int32_t lasti;
                        memcpy(&lasti, img_at(f->p.img, a + (uint64_t)L->fr_lasti, 4), 4);
                        pos = (uint64_t)(int64_t)lasti;
                }
                assert_int_equal(fr->pos, pos);
                assert_int_equal(fr->owner, L->fr_owner >= 0
                                                ? *img_at(f->p.img, a + (uint64_t)L->fr_owner, 1)
                                                : 0);
                assert_int_equal(fr->entry, L->fr_is_entry >= 0
                                                ? *img_at(f->p.img, a + (uint64_t)L->fr_is_entry, 1)
                                                : 0);
                int32_t tlbc = 0;
                if (L->fr_tlbc_index >= 0)
                        memcpy(&tlbc, img_at(f->p.img, a + (uint64_t)L->fr_tlbc_index, 4), 4);
                assert_int_equal(fr->tlbc, tlbc);
                assert_int_equal(fr->fflags | fr->pad, 0);
        }
}

static void print_frame(const char *who, uint32_t i, const struct rec_frame *r)
{
        print_message("  %s[%u] %s (%s) %s:%d entry %d id %u\n", who, i, r->name, r->qual, r->file,
                      r->line, r->entry, r->id);
}

/*
 * got's frames [0, n) are want's. `last_entry_open`: the last one's entry
 * flag may be false where want's is true (a truncated event that ends just
 * above an entry frame it did not copy).
 */
static void expect_same_frames(struct fx *f, const struct rec_thread *want,
                               const struct rec_thread *got, uint32_t n, bool last_entry_open)
{
        for (uint32_t i = 0; i < n; i++) {
                const struct rec_frame *a = &want->f[i], *b = &got->f[i];
                bool entry_ok = a->entry == b->entry ||
                                (last_entry_open && i + 1 == n && a->entry && !b->entry);
                if (strcmp(a->name, b->name) || strcmp(a->qual, b->qual) ||
                    strcmp(a->file, b->file) || a->line != b->line || !entry_ok || a->id != b->id) {
                        print_message("%s: frame %u differs\n", f->v->name, i);
                        print_frame("pywalk_sample", i, a);
                        print_frame("bpf decode   ", i, b);
                }
                assert_string_equal(b->name, a->name);
                assert_string_equal(b->qual, a->qual);
                assert_string_equal(b->file, a->file);
                assert_int_equal(b->line, a->line);
                assert_true(entry_ok);
                assert_int_equal(b->id, a->id);
                f->frames++;
        }
}

/*
 * The whole check for thread t of the last sample: its event has the
 * image's frames, read with one read of the thread state (two through a
 * 3.11/3.12 cframe) and one window per frame, not truncated; decoded, it
 * gives the frames pywalk_sample() gave.
 */
static void expect_bpf_same(struct fx *f, int t)
{
        const struct rec_thread *want = fx_sampled(f, t);
        assert_int_equal(want->status, 0);
        fx_walk(f, want->tstate, want->thread_id);
        assert_int_equal(f->e->status, BPFW_OK);
        assert_int_equal(f->e->flags, 0);
        expect_reads(&f->proc.L, f->e->depth);
        expect_raw_frames(f, t);
        assert_int_equal(fx_decode(f), 0);
        if (f->got->depth != want->depth)
                print_message("%s: %u frames decoded, pywalk_sample %u\n", f->v->name,
                              f->got->depth, want->depth);
        assert_int_equal(f->got->depth, want->depth);
        expect_same_frames(f, want, f->got, want->depth, false);
        f->events++;
}

/* ---- scenarios ---- */

/*
 * The layout handed to the program, with the GIL held and released; a
 * thread with no frames.
 */
static void check_proc(void **state)
{
        struct fx *f = *state;
        int t = pyimg_add_thread(&f->p, f->p.interps[0], -1);
        pyimg_gil(&f->p, f->p.interps[0], f->p.th[t].tstate, -1);
        fx_open(f);
        fx_sample(f, f->p.th[t].tstate);
        /* A thread with no frames: an event with none (3.15: its base frame alone). */
        expect_bpf_same(f, t);
        assert_int_equal(f->e->depth, f->p.L.ts_base_frame >= 0 ? 1 : 0);
        /* Released: the same word names no holder. */
        pyimg_gil(&f->p, f->p.interps[0], 0, -1);
        fx_sample(f, 0);
        const struct bpfw_layout *B = &f->proc.L;
        print_message("%-6s layout: ts_frame %d cframe %d back %d code %d lasti %d%s owner %d "
                      "entry %d tlbc %d: window [%u, +%u)\n",
                      f->v->name, B->ts_frame, B->cframe_current, B->fr_back, B->fr_code,
                      B->fr_lasti, B->lasti_pointer ? "p" : "", B->fr_owner, B->fr_is_entry,
                      B->fr_tlbc_index, B->fr_lo, B->fr_span);
}

/*
 * Plain stacks of several threads (names in every string kind, files,
 * qualified names, lines; a frame not started yet), one with no frames;
 * and the GIL flags of an event.
 */
static void check_plain(void **state)
{
        struct fx *f = *state;
        struct pyimg *p = &f->p;
        bool py2 = f->v->major == 2;
        const char *file = "/app/main.py";
        const char *ufile = "/app/ünï/🐍.py";
        uint64_t ufile_obj = pyimg_str(p, ufile, py2 ? PYIMG_STR_UNICODE2 : PYIMG_STR_AUTO);
        uint64_t mod = mkcode(p, "<module>", "<module>", file, 1, 20, 0);
        uint64_t outer = mkcode(p, "outer", "Outer.outer", "/app/outer.py", 10, 30, 0);
        int lines[20];
        for (int i = 0; i < 20; i++)
                lines[i] = 41 + 3 * i;
        uint64_t cafe =
            pyimg_code_objs(p, pyimg_str(p, "café", PYIMG_STR_AUTO),
                            pyimg_str(p, "K.café", py2 ? PYIMG_STR_AUTO : PYIMG_STR_LEGACY),
                            ufile_obj, 40, lines, 20, 0);
        uint64_t kanji = mkcode(p, "関数", "関数", "/app/日本.py", 500, 20, 0);
        uint64_t leaf = mkcode(p, "leaf", "Leaf.leaf", "/lib/leaf.py", 6000, 64, 0);
        uint64_t work = mkcode(p, "work", "Pool.work", "/lib/pool.py", 80, 20, 0);

        int t0 = pyimg_add_thread(p, p->interps[0], -1);
        pyimg_push(p, t0, PYIMG_FRAME, mod, 3);
        pyimg_push(p, t0, PYIMG_FRAME, outer, 17);
        pyimg_push(p, t0, PYIMG_FRAME, cafe, 2);
        pyimg_push(p, t0, PYIMG_FRAME, kanji, 0);
        pyimg_push(p, t0, PYIMG_FRAME, outer, 29);
        pyimg_push(p, t0, PYIMG_FRAME, leaf, 63);
        int t1 = pyimg_add_thread(p, p->interps[0], 1001);
        bool heap = p->L.frames == PYL_FRAMES_OBJECT;
        pyimg_push(p, t1, PYIMG_FRAME, mod, heap ? -1 : 0); /* <=3.10: not started, f_lasti -1 */
        pyimg_push(p, t1, PYIMG_FRAME, work, 9);
        int t2 = pyimg_add_thread(p, p->interps[0], 1002);
        pyimg_gil(p, p->interps[0], p->th[t1].tstate, -1);
        fx_open(f);
        fx_sample(f, p->th[t1].tstate);
        assert_int_equal(f->sample->n, 3);
        const struct rec_thread *a = fx_sampled(f, t0);
        assert_int_equal(a->depth, 6);
        assert_string_equal(a->f[0].name, "leaf");
        assert_int_equal(a->f[0].line, 6064);
        assert_int_equal(a->f[2].line, 501);
        assert_int_equal(a->f[3].line, 47);
        expect_bpf_same(f, t0);
        expect_bpf_same(f, t1);
        expect_bpf_same(f, t2);
        /* Twice: the second time from the code cache, same answer. */
        expect_bpf_same(f, t0);

        /* The GIL as the program found it. */
        fx_walk(f, p->th[t1].tstate, p->th[t1].pthread);
        f->e->flags = BPFW_F_GIL_KNOWN | BPFW_F_GIL_HELD;
        assert_int_equal(fx_decode(f), 0);
        assert_int_equal(f->got->gil, p->target.free_threaded ? PYWALK_NO_GIL | PYWALK_GIL_UNKNOWN
                                                              : PYWALK_GIL_HELD);
        f->e->flags = BPFW_F_GIL_KNOWN;
        assert_int_equal(fx_decode(f), 0);
        assert_int_equal(f->got->gil,
                         p->target.free_threaded ? PYWALK_NO_GIL | PYWALK_GIL_UNKNOWN : 0u);
        fx_report(f, "plain");
}

/*
 * Frames that are not shown: entry frames (3.12+) and the entry flags they
 * set, 3.11's is_entry, generator frames, the __init__ shim and frames
 * before their RESUME (3.13+ / 3.11+), a frame whose code is being cleared,
 * a frame whose f_executable is not code (3.13+), an entry frame as the
 * leaf; the same frames as the walker's own walk.
 */
static void check_skipped(void **state)
{
        struct fx *f = *state;
        struct pyimg *p = &f->p;
        const struct pylayout *L = &p->L;
        const char *file = "/app/skip.py";
        bool entries = L->owner_skip_from != PYL_OWNER_NONE;
        uint64_t mod = mkcode(p, "<module>", "<module>", file, 1, 20, 0);
        uint64_t outer = mkcode(p, "outer", "Outer.outer", file, 10, 20, 0);
        uint64_t gen = mkcode(p, "gen", "gen", "/app/gen.py", 30, 20, 0);
        uint64_t mid = mkcode(p, "mid", "M.mid", file, 50, 20, 0);
        uint64_t leaf = mkcode(p, "leaf", "Leaf.leaf", file, 60, 20, 3);
        uint64_t shim = mkcode(p, "__init__", "__init__", "__init__", 0, 4, 0);
        uint64_t setup = mkcode(p, "setup", "setup", file, 70, 20, 4);
        uint64_t gone = mkcode(p, "gone", "gone", file, 90, 20, 0);
        uint64_t not_code = mkcode(p, "nc", "nc", file, 100, 20, 0);
        img_u64(p->img, not_code + (uint64_t)L->ob_type, img_alloc(p->img, 512));

        int t0 = pyimg_add_thread(p, p->interps[0], -1);
        if (entries)
                pyimg_push(p, t0, PYIMG_FRAME_ENTRY, 0, 0);
        pyimg_push(p, t0, PYIMG_FRAME, mod, 3);
        uint64_t fouter = pyimg_push(p, t0, PYIMG_FRAME, outer, 1);
        if (L->fr_is_entry >= 0) /* 3.11: the C-level call's oldest frame says so itself */
                img_u8(p->img, fouter + (uint64_t)L->fr_is_entry, 1);
        if (entries)
                pyimg_push(p, t0, PYIMG_FRAME_ENTRY, 0, 0); /* C called back into Python */
        pyimg_push(p, t0, PYIMG_FRAME_GEN, gen, 5);
        uint64_t fgone = pyimg_push(p, t0, PYIMG_FRAME, gone, 2);
        img_u64(p->img, fgone + (uint64_t)L->fr_code, 0); /* being cleared */
        pyimg_push(p, t0, PYIMG_FRAME, mid, 0);
        if (L->executable_any) /* 3.13+: f_executable may be any object */
                pyimg_push(p, t0, PYIMG_FRAME, not_code, 0);
        if (L->init_shim)
                pyimg_push(p, t0, PYIMG_FRAME, shim, 0);
        pyimg_push(p, t0, PYIMG_FRAME, leaf, 7);
        if (L->co_firsttraceable >= 0)
                pyimg_push(p, t0, PYIMG_FRAME, setup, 1); /* before its RESUME: incomplete */

        /* A thread whose leaf is an entry frame: C about to call into Python. */
        int t1 = pyimg_add_thread(p, p->interps[0], 1001);
        if (entries)
                pyimg_push(p, t1, PYIMG_FRAME_ENTRY, 0, 0);
        pyimg_push(p, t1, PYIMG_FRAME, mod, 5);
        pyimg_push(p, t1, PYIMG_FRAME_GEN, gen, 9);
        if (entries)
                pyimg_push(p, t1, PYIMG_FRAME_ENTRY, 0, 0);
        pyimg_gil(p, p->interps[0], p->th[t0].tstate, -1);
        fx_open(f);
        fx_sample(f, p->th[t0].tstate);
        const struct rec_thread *a = fx_sampled(f, t0);
        assert_int_equal(a->status, 0);
        assert_int_equal(a->depth, 5);
        const char *want[] = {"leaf", "mid", "gen", "outer", "<module>"};
        for (int i = 0; i < 5; i++)
                assert_string_equal(a->f[i].name, want[i]);
        /* Entry flags where the version marks them (<=3.10: every frame). */
        for (int i = 0; i < 5; i++) {
                bool entry = L->frames == PYL_FRAMES_OBJECT ? true
                             : entries                      ? i == 2 || i == 4
                             : L->fr_is_entry >= 0          ? i == 3
                                                            : false;
                assert_int_equal(a->f[i].entry, entry);
        }
        expect_bpf_same(f, t0);
        expect_bpf_same(f, t1);
        assert_int_equal(fx_sampled(f, t1)->depth, 2);
        fx_report(f, "skipped");
}

/* Thread-local bytecode (3.14t): the copied index picks the copy the offset is from. */
static void check_tlbc(void **state)
{
        struct fx *f = *state;
        struct pyimg *p = &f->p;
        uint64_t code = mkcode(p, "hot", "hot", "/t.py", 10, 20, 0);
        uint64_t cold = mkcode(p, "cold", "cold", "/t.py", 40, 20, 0);
        pyimg_code_tlbc(p, code, 3, 2);
        pyimg_code_tlbc(p, cold, 2, 1);
        int t = pyimg_add_thread(p, p->interps[0], -1);
        pyimg_push(p, t, PYIMG_FRAME, code, 1);
        pyimg_push_tlbc(p, t, cold, 11, 1);
        pyimg_push_tlbc(p, t, code, 5, 2);
        fx_open(f);
        fx_sample(f, 0);
        const struct rec_thread *a = fx_sampled(f, t);
        assert_int_equal(a->depth, 3);
        assert_int_equal(a->f[0].line, 16);
        assert_int_equal(a->f[1].line, 52);
        assert_int_equal(a->f[2].line, 12);
        expect_bpf_same(f, t);
        fx_report(f, "tlbc");
}

/* 3.11+: frames spread over several data-stack chunks. */
static void check_chunks(void **state)
{
        struct fx *f = *state;
        struct pyimg *p = &f->p;
        p->chunk_bytes = 4096;
        uint64_t code = mkcode(p, "rec", "rec", "/r.py", 1, 50, 0);
        int t = pyimg_add_thread(p, p->interps[0], -1);
        for (int i = 0; i < 100; i++)
                pyimg_push(p, t, PYIMG_FRAME, code, i % 50);
        fx_open(f);
        fx_sample(f, 0);
        assert_int_equal(fx_sampled(f, t)->depth, 100);
        expect_bpf_same(f, t);
        fx_report(f, "chunks");
}

/*
 * Thread t, deeper than the event holds: its innermost BPFW_MAX_DEPTH frames
 * copied (the image's), flagged truncated, and decoded as the innermost
 * frames of the walker's own walk of the whole stack.
 */
static void expect_bpf_truncated(struct fx *f, int t)
{
        const struct pylayout *L = &f->p.L;
        const struct rec_thread *want = fx_sampled(f, t);
        assert_int_equal(want->status, 0);
        fx_walk(f, want->tstate, want->thread_id);
        assert_int_equal(f->e->status, BPFW_OK);
        assert_int_equal(f->e->flags, BPFW_F_TRUNCATED);
        assert_int_equal(f->e->depth, BPFW_MAX_DEPTH);
        expect_reads(&f->proc.L, BPFW_MAX_DEPTH);
        /* 3.11+: frames pushed one after the other are read many to a block. */
        if (f->proc.L.fr_block)
                assert_true(bpfw_reads - bpfw_failed < BPFW_MAX_DEPTH + BPFW_MAX_DEPTH / 2);
        expect_raw_frames(f, t);
        /* The frames the event holds: shown ones, and the one after (not copied). */
        uint32_t shown = 0;
        for (uint32_t i = 0; i < BPFW_MAX_DEPTH; i++)
                shown += L->fr_owner < 0 || f->e->frames[i].owner < L->owner_skip_from;
        uint64_t chain[BPFW_MAX_DEPTH + 1];
        assert_int_equal(image_chain(&f->p, t, chain, BPFW_MAX_DEPTH + 1), BPFW_MAX_DEPTH + 1);
        bool next_is_entry = L->fr_owner >= 0 &&
                             *img_at(f->p.img, chain[BPFW_MAX_DEPTH] + (uint64_t)L->fr_owner, 1) >=
                                 L->owner_skip_from;
        assert_int_equal(fx_decode(f), 0);
        assert_int_equal(f->got->depth, shown);
        assert_true(shown <= want->depth);
        /*
         * An entry frame just past the copy marks the last copied frame as
         * the oldest of its eval call: the event cannot know it.
         */
        expect_same_frames(f, want, f->got, shown, next_is_entry);
        if (next_is_entry && want->f[shown - 1].entry != f->got->f[shown - 1].entry)
                print_message("%-6s truncated just above an entry frame: the last frame's entry "
                              "flag is lost (walker %d, event %d)\n",
                              f->v->name, want->f[shown - 1].entry, f->got->f[shown - 1].entry);
        f->events++;
}

/*
 * Deep stacks: exactly BPFW_MAX_DEPTH frames in the chain (entry and base
 * frames counted) is whole; one more is truncated; 300 Python frames too.
 */
static void check_deep(void **state)
{
        struct fx *f = *state;
        struct pyimg *p = &f->p;
        const struct pylayout *L = &p->L;
        uint64_t codes[7];
        for (int i = 0; i < 7; i++) {
                char name[16], file[32];
                snprintf(name, sizeof(name), "rec%d", i);
                snprintf(file, sizeof(file), "/app/deep%d.py", i % 3);
                codes[i] = mkcode(p, name, name, file, 100 * i, 40, 0);
        }
        int t = pyimg_add_thread(p, p->interps[0], -1);
        uint32_t raw = L->ts_base_frame >= 0; /* frames in the chain */
        if (L->owner_skip_from != PYL_OWNER_NONE) {
                pyimg_push(p, t, PYIMG_FRAME_ENTRY, 0, 0);
                raw++;
        }
        int pushed = 0;
        while (raw < BPFW_MAX_DEPTH) {
                pyimg_push(p, t, PYIMG_FRAME, codes[pushed % 7], (pushed * 3) % 40);
                pushed++;
                raw++;
        }
        fx_open(f);
        fx_sample(f, 0);
        assert_int_equal(fx_sampled(f, t)->depth, pushed);
        expect_bpf_same(f, t);
        assert_int_equal(f->e->depth, BPFW_MAX_DEPTH);
        /* One frame more than an event holds. */
        pyimg_push(p, t, PYIMG_FRAME, codes[pushed % 7], (pushed * 3) % 40);
        pushed++;
        fx_sample(f, 0);
        assert_int_equal(fx_sampled(f, t)->depth, pushed);
        expect_bpf_truncated(f, t);
        /* 300 Python frames, the innermost 20 called back from C. */
        while (pushed < 300) {
                if (pushed == 280 && L->owner_skip_from != PYL_OWNER_NONE)
                        pyimg_push(p, t, PYIMG_FRAME_ENTRY, 0, 0);
                pyimg_push(p, t, PYIMG_FRAME, codes[pushed % 7], (pushed * 3) % 40);
                pushed++;
        }
        fx_sample(f, 0);
        assert_int_equal(fx_sampled(f, t)->depth, 300);
        expect_bpf_truncated(f, t);
        fx_report(f, "deep");
}

/* Memory that does not read: BPFW_FAULT, with the frames read until then. */
static void expect_fault(struct fx *f, uint64_t tstate, uint32_t depth)
{
        fx_walk(f, tstate, 0);
        assert_int_equal(f->e->status, BPFW_FAULT);
        assert_int_equal(f->e->flags & BPFW_F_TRUNCATED, 0);
        assert_int_equal(f->e->depth, depth);
        f->events++;
}

static void check_fault(void **state)
{
        struct fx *f = *state;
        struct pyimg *p = &f->p;
        const struct pylayout *L = &p->L;
        uint64_t code = mkcode(p, "f", "f", "/d.py", 1, 10, 0);
        int t = pyimg_add_thread(p, p->interps[0], -1);
        uint64_t bottom = pyimg_push(p, t, PYIMG_FRAME, code, 1);
        uint64_t mid = pyimg_push(p, t, PYIMG_FRAME, code, 2);
        uint64_t top = pyimg_push(p, t, PYIMG_FRAME, code, 3);
        int t1 = pyimg_add_thread(p, p->interps[0], 77);
        uint64_t other = pyimg_push(p, t1, PYIMG_FRAME, code, 4);
        fx_open(f);
        fx_sample(f, 0);
        expect_bpf_same(f, t);
        uint64_t tstate = p->th[t].tstate;
        /* A thread state that is not there. */
        expect_fault(f, 0xdead0000ull, 0);
        /* The leaf's caller, then the root's, dangling. */
        img_u64(p->img, top + (uint64_t)L->fr_back, 0xdead0000ull);
        expect_fault(f, tstate, 1);
        img_u64(p->img, top + (uint64_t)L->fr_back, mid);
        uint64_t root_back = img_get_u64(p->img, bottom + (uint64_t)L->fr_back);
        img_u64(p->img, bottom + (uint64_t)L->fr_back, 0xdead0000ull);
        expect_fault(f, tstate, 3);
        img_u64(p->img, bottom + (uint64_t)L->fr_back, root_back);
        /* The current frame (3.11/3.12: the cframe) dangling. */
        uint64_t cur = img_get_u64(p->img, tstate + (uint64_t)L->ts_frame);
        img_u64(p->img, tstate + (uint64_t)L->ts_frame, 0xdead0000ull);
        expect_fault(f, tstate, 0);
        img_u64(p->img, tstate + (uint64_t)L->ts_frame, cur);
        fx_sample(f, 0);
        expect_bpf_same(f, t);
        /* The frames' memory gone (3.11+: the chunk; before: the frame objects). */
        if (L->frames == PYL_FRAMES_INTERP) {
                img_drop(p->img, p->th[t].chunk);
                pyimg_sync(p);
                expect_fault(f, tstate, 0);
        } else {
                img_drop(p->img, mid);
                pyimg_sync(p);
                expect_fault(f, tstate, 1);
        }
        /* The other thread still reads, and the walker calls this one torn. */
        memset(f->sample, 0, sizeof(*f->sample));
        assert_int_equal(pywalk_sample(f->w, collect, f->sample), 0);
        assert_int_equal(fx_sampled(f, t)->status, PYWALK_TORN);
        fx_proc(f, 0);
        expect_bpf_same(f, t1);
        assert_int_equal(f->e->frames[0].addr, other);
        fx_report(f, "fault");
}

struct cycle_count {
        unsigned tries, torn, repeated;
};

/*
 * Thread t's stack (`truth`, n frames), its frame at `from` made to point
 * back to `to`: the walk can only copy BPFW_MAX_DEPTH frames and call them
 * truncated. Decoded, it must be torn, or the stack from its leaf with no
 * frame shown twice (a prefix of the truth).
 */
static void expect_cycle(struct fx *f, const struct rec_thread *truth, uint64_t from, uint64_t to,
                         const char *what, struct cycle_count *c)
{
        const struct pylayout *L = &f->p.L;
        uint32_t n = truth->depth;
        uint64_t back = img_get_u64(f->p.img, from + (uint64_t)L->fr_back);
        img_u64(f->p.img, from + (uint64_t)L->fr_back, to);
        fx_walk(f, truth->tstate, truth->thread_id);
        img_u64(f->p.img, from + (uint64_t)L->fr_back, back);
        assert_int_equal(f->e->status, BPFW_OK);
        assert_int_equal(f->e->flags, BPFW_F_TRUNCATED);
        assert_int_equal(f->e->depth, BPFW_MAX_DEPTH);
        int st = fx_decode(f);
        c->tries++;
        f->events++;
        if (st != 0) {
                assert_int_equal(st, PYWALK_TORN);
                c->torn++;
                return;
        }
        uint32_t depth = f->got->depth;
        expect_same_frames(f, truth, f->got, depth < n ? depth : n, false);
        if (depth > n) {
                print_message("%-6s %s: decoded as %u frames, %u of them repeats, not torn\n",
                              f->v->name, what, depth, depth - n);
                c->repeated++;
        }
}

/*
 * Cycles in the chain: a stack of n frames whose root points back to the
 * leaf, to frames in between, to itself; the leaf to itself.
 */
static void cycles(void **state, uint32_t n)
{
        struct fx *f = *state;
        struct pyimg *p = &f->p;
        uint64_t codes[5];
        for (int i = 0; i < 5; i++) {
                char name[16];
                snprintf(name, sizeof(name), "c%d", i);
                codes[i] = mkcode(p, name, name, "/app/cycle.py", 10 * i, 40, 0);
        }
        uint64_t fr[BPFW_MAX_DEPTH]; /* fr[i]: frame n - 1 - i from the leaf */
        assert_true(n <= BPFW_MAX_DEPTH);
        int t = pyimg_add_thread(p, p->interps[0], -1);
        for (uint32_t i = 0; i < n; i++)
                fr[i] = pyimg_push(p, t, PYIMG_FRAME, codes[i % 5], (int)(i % 40));
        fx_open(f);
        fx_sample(f, 0);
        const struct rec_thread *truth = fx_sampled(f, t);
        assert_int_equal(truth->depth, n);
        expect_bpf_same(f, t);
        struct cycle_count c = {0};
        const uint32_t to_leaf[] = {0, 1, 2, n / 4, n / 2, n - 3, n - 2, n - 1};
        char what[96];
        for (size_t j = 0; j < sizeof(to_leaf) / sizeof(to_leaf[0]); j++) {
                snprintf(what, sizeof(what), "%u-frame stack, root -> frame %u (a %u-frame cycle)",
                         n, to_leaf[j], n - to_leaf[j]);
                expect_cycle(f, truth, fr[0], fr[n - 1 - to_leaf[j]], what, &c);
        }
        expect_cycle(f, truth, fr[n - 1], fr[n - 1], "leaf -> leaf", &c);
        print_message("%-6s cycles through a %u-frame stack: %u of %u decoded torn, %u with "
                      "repeated frames\n",
                      f->v->name, n, c.torn, c.tries, c.repeated);
        assert_int_equal(c.repeated, 0);
        fx_report(f, n <= BPFW_MAX_DEPTH / 2 ? "cycle" : "cycle-long");
}

/* Stacks of up to half an event: every cycle shows within it. */
static void check_cycle(void **state)
{
        cycles(state, 40);
}

/*
 * Longer ones: the first repeated frame may lie past half the event, where
 * a check that follows the chain step by step (Brent's, as the walker's own
 * walk makes) has not caught up yet; the event holds every address at once.
 */
static void check_cycle_long(void **state)
{
        cycles(state, 200);
}

static bool any(const struct imgver *v)
{
        (void)v;
        return true;
}

static bool chunked(const struct imgver *v)
{
        return v->major == 3 && v->minor >= 11;
}

static bool tlbc(const struct imgver *v)
{
        return v->ft && v->minor >= 14;
}

/*
 * A code object freed after the sample and another built at its address
 * (a module body ends right after its import). The event carries the
 * identity of the object sampled: a cache entry made before that still
 * matches it decodes the event, with no read (and so the events of a
 * process that has exited); with no such entry, the object read now is
 * not the one sampled, and the decode says so (PYWALK_CODE_GONE) rather
 * than name the frame after the new object; the same for an object that is
 * no code any more, and for a frame whose code the program could not read
 * (PYWALK_CODE_UNREAD). A new sample of the new object decodes it.
 */
static void check_gone(void **state)
{
        struct fx *f = *state;
        struct pyimg *p = &f->p;
        const struct pylayout *L = &p->L;
        uint64_t mod = mkcode(p, "<module>", "<module>", "/app/mod.py", 1, 20, 0);
        uint64_t body = mkcode(p, "body", "body", "/app/imported.py", 1, 20, 0);
        uint64_t leaf = mkcode(p, "leaf", "leaf", "/app/leaf.py", 30, 20, 0);
        int t = pyimg_add_thread(p, p->interps[0], -1);
        pyimg_push(p, t, PYIMG_FRAME, mod, 3);
        pyimg_push(p, t, PYIMG_FRAME, body, 5);
        pyimg_push(p, t, PYIMG_FRAME, leaf, 7);
        fx_open(f);
        fx_sample(f, 0);
        expect_bpf_same(f, t); /* the code cache knows all three now */
        fx_walk(f, p->th[t].tstate, p->th[t].pthread);
        assert_int_equal(f->e->status, BPFW_OK);
        assert_true(f->e->depth >= 3); /* (3.15: and the thread's base frame) */
        for (uint32_t i = 0; i < 3; i++)
                assert_true(f->e->frames[i].ident != 0);
        struct bpfw_event *sampled = malloc(sizeof(*sampled));
        assert_non_null(sampled);
        memcpy(sampled, f->e, sizeof(*sampled));
        /* After the sample: the body's code is freed, another code object at its place. */
        uint64_t other = pyimg_str(p, "other", PYIMG_STR_AUTO);
        img_u64(p->img, body + (uint64_t)L->co_name, other);
        pyimg_sync(p);
        /* The cache's entry is the object sampled: the event decodes as it was. */
        assert_int_equal(fx_decode(f), 0);
        assert_string_equal(f->got->f[1].name, "body");
        /* A new sample finds the new object, and decodes it. */
        fx_walk(f, p->th[t].tstate, p->th[t].pthread);
        assert_int_equal(fx_decode(f), 0);
        assert_int_equal(f->got->depth, 3);
        assert_string_equal(f->got->f[1].name, "other");
        /*
         * The old event decoded after the new one (events are decoded up to
         * a batch late): the entry the new object superseded still decodes it.
         */
        memcpy(f->e, sampled, sizeof(*sampled));
        assert_int_equal(fx_decode(f), 0);
        assert_string_equal(f->got->f[1].name, "body");
        /* A walker that never saw the old object: the old event cannot be decoded. */
        pywalk_close(f->w);
        fx_open(f);
        memcpy(f->e, sampled, sizeof(*sampled));
        assert_int_equal(fx_decode(f), PYWALK_CODE_GONE);
        /* No code object at all there any more. */
        uint64_t type = img_get_u64(p->img, body + (uint64_t)L->ob_type);
        img_u64(p->img, body + (uint64_t)L->ob_type, p->str_type);
        pywalk_close(f->w);
        fx_open(f);
        memcpy(f->e, sampled, sizeof(*sampled));
        assert_int_equal(fx_decode(f), PYWALK_CODE_GONE);
        img_u64(p->img, body + (uint64_t)L->ob_type, type);
        /* A frame whose code object the program could not read. */
        fx_walk(f, p->th[t].tstate, p->th[t].pthread);
        assert_int_equal(fx_decode(f), 0);
        f->e->frames[1].ident = 0;
        assert_int_equal(fx_decode(f), PYWALK_CODE_UNREAD);
        free(sampled);
        fx_report(f, "gone");
}

/* Put every code object of f->e into the table, as the recorder does once it decoded them. */
static void fx_know(struct fx *f)
{
        for (uint32_t i = 0; i < f->e->depth; i++) {
                uint64_t code = f->e->frames[i].code & f->proc.L.fr_code_mask;
                uint64_t ident = f->e->frames[i].ident;
                if (ident)
                        bpfw_known_put(&bpfw_known[bpfw_known_index(code)], code, ident,
                                       pywalk_bpf_code_lasting(f->w, code, ident));
        }
}

/*
 * The table of code objects the recorder knows: a walk meeting one not in
 * it flags its event (the program wakes the recorder at once, to read the
 * object before it is freed); one whose objects are all there does not; an
 * object changed at a known address is new again. And the table's sets:
 * two entries each, the older one replaced.
 */
static void check_known(void **state)
{
        struct fx *f = *state;
        struct pyimg *p = &f->p;
        const struct pylayout *L = &p->L;
        uint64_t mod = mkcode(p, "<module>", "<module>", "/app/mod.py", 1, 20, 0);
        uint64_t body = mkcode(p, "<module>", "<module>", "/app/imported.py", 1, 20, 0);
        uint64_t fn[6];
        int t = pyimg_add_thread(p, p->interps[0], -1);
        pyimg_push(p, t, PYIMG_FRAME, mod, 3);
        pyimg_push(p, t, PYIMG_FRAME, body, 5);
        for (int i = 0; i < 6; i++) {
                char name[8];
                snprintf(name, sizeof(name), "f%d", i);
                fn[i] = mkcode(p, name, name, "/app/fns.py", 30 + 10 * i, 20, 0);
                pyimg_push(p, t, PYIMG_FRAME, fn[i], 7);
        }
        uint64_t leaf = fn[5];
        fx_open(f);
        fx_sample(f, 0);
        bpfw_known = calloc(BPFW_KNOWN_SETS, sizeof(*bpfw_known));
        assert_non_null(bpfw_known);
        fx_walk(f, p->th[t].tstate, p->th[t].pthread);
        assert_int_equal(f->e->status, BPFW_OK);
        assert_true(f->e->flags & BPFW_F_NEW_CODE);
        assert_int_equal(fx_decode(f), 0);
        fx_know(f);
        fx_walk(f, p->th[t].tstate, p->th[t].pthread);
        assert_false(f->e->flags & BPFW_F_NEW_CODE);
        /* The body's code freed, another at its address: new to the recorder. */
        uint64_t file = pyimg_str(p, "/app/other.py", PYIMG_STR_AUTO);
        img_u64(p->img, body + (uint64_t)L->co_filename, file);
        pyimg_sync(p);
        fx_walk(f, p->th[t].tstate, p->th[t].pthread);
        assert_true(f->e->flags & BPFW_F_NEW_CODE);
        assert_int_equal(fx_decode(f), 0);
        struct bpfw_known_set *all = bpfw_known;
        bpfw_known = NULL; /* every object read */
        fx_walk(f, p->th[t].tstate, p->th[t].pthread);
        unsigned reads_all = bpfw_reads;
        bpfw_known = all;
        fx_know(f);
        fx_walk(f, p->th[t].tstate, p->th[t].pthread);
        assert_false(f->e->flags & BPFW_F_NEW_CODE);
        /*
         * The functions' code is lasting: its identity is the table's, with
         * no read of the object (the module bodies' are read each time).
         */
        unsigned table = 0;
        for (uint32_t i = 0; i < f->e->depth; i++) {
                const struct bpfw_frame *fr = &f->e->frames[i];
                uint64_t code = fr->code & f->proc.L.fr_code_mask;
                bool lasting = false;
                for (int k = 0; k < 6; k++)
                        lasting |= code == fn[k];
                assert_int_equal(!!(fr->fflags & BPFW_FR_TABLE_IDENT), lasting);
                table += lasting;
        }
        assert_int_equal(table, 6);
        assert_int_equal(reads_all - bpfw_reads, 6);
        assert_int_equal(fx_decode(f), 0);
        assert_int_equal(f->got->depth, 8);
        assert_string_equal(f->got->f[0].name, "f5");
        /*
         * The function's code freed and another built at its address: the
         * table still vouches for the old one, and the recorder, checking
         * the object, decodes those frames as neither.
         */
        uint64_t other = pyimg_str(p, "other", PYIMG_STR_AUTO);
        img_u64(p->img, leaf + (uint64_t)L->co_name, other);
        pyimg_sync(p);
        fx_walk(f, p->th[t].tstate, p->th[t].pthread);
        assert_true(f->e->frames[0].fflags & BPFW_FR_TABLE_IDENT);
        assert_int_equal(fx_decode(f), PYWALK_CODE_GONE);
        /* Forgotten (as the recorder does then): read again, new, decoded as it is. */
        assert_int_equal(bpfw_known_forget(&bpfw_known[bpfw_known_index(leaf)], leaf), 1);
        fx_walk(f, p->th[t].tstate, p->th[t].pthread);
        assert_false(f->e->frames[0].fflags & BPFW_FR_TABLE_IDENT);
        assert_true(f->e->flags & BPFW_F_NEW_CODE);
        assert_int_equal(fx_decode(f), 0);
        assert_string_equal(f->got->f[0].name, "other");
        free(bpfw_known);
        bpfw_known = NULL;
        /* Three addresses of one set: the first put goes when the third comes. */
        uint64_t a = 0x7f0000001000ull, b = a + 16, c;
        while (bpfw_known_index(b) != bpfw_known_index(a))
                b += 16;
        for (c = b + 16; bpfw_known_index(c) != bpfw_known_index(a);)
                c += 16;
        struct bpfw_known_set set;
        memset(&set, 0, sizeof(set));
        assert_int_equal(bpfw_known_put(&set, a, 1, 0), 1);
        assert_int_equal(bpfw_known_put(&set, a, 1, 0), 0);
        assert_int_equal(bpfw_known_lasting(&set, a), 0);
        assert_int_equal(bpfw_known_put(&set, a, 1, 1), 1); /* now lasting */
        assert_int_equal(bpfw_known_lasting(&set, a), 1);
        assert_int_equal(bpfw_known_put(&set, b, 2, 0), 1);
        assert_true(bpfw_known_has(&set, a, 1) && bpfw_known_has(&set, b, 2));
        assert_int_equal(bpfw_known_lasting(&set, a), 1); /* kept with its entry */
        assert_false(bpfw_known_has(&set, a, 2));
        assert_int_equal(bpfw_known_put(&set, c, 3, 1), 1);
        assert_false(bpfw_known_has(&set, a, 1));
        assert_int_equal(bpfw_known_lasting(&set, a), 0);
        assert_true(bpfw_known_has(&set, b, 2) && bpfw_known_has(&set, c, 3));
        assert_int_equal(bpfw_known_put(&set, b, 4, 0), 1); /* b's object changed */
        assert_true(bpfw_known_has(&set, b, 4) && bpfw_known_has(&set, c, 3));
        assert_false(bpfw_known_has(&set, b, 2));
        assert_int_equal(bpfw_known_lasting(&set, c), 3);
        assert_int_equal(bpfw_known_forget(&set, c), 1);
        assert_int_equal(bpfw_known_forget(&set, c), 0);
        assert_false(bpfw_known_has(&set, c, 3));
        assert_int_equal(bpfw_known_lasting(&set, c), 0);
        assert_true(bpfw_known_has(&set, b, 4));
        print_message("%-6s known      new code flagged, known code not\n", f->v->name);
}

struct scenario {
        const char *name;
        CMUnitTestFunction fn;
        bool (*applies)(const struct imgver *v);
};

/* bpfw_find_thread() over the image: every thread by its id, and what it cannot know. */
static int fx_find(struct fx *f, uint64_t self, __u64 *tstate)
{
        bpfw_mem = &f->p.mem;
        *tstate = 0xdead;
        return bpfw_find_thread(&f->proc, self, tstate);
}

/*
 * A thread the recorder has not told the program of, not the GIL's
 * holder: its state is the one of the main interpreter's list whose
 * thread_id is its own; a thread in no list runs no Python (not sampled);
 * a list not read to its end (unreadable, too long, a cycle, no id, other
 * interpreters' lists unsearched) says nothing (an error of the sample).
 */
static void check_search(void **state)
{
        struct fx *f = *state;
        struct pyimg *p = &f->p;
        int n = 5;
        for (int t = 0; t < n; t++)
                pyimg_add_thread(p, p->interps[0], 1000 + t);
        pyimg_gil(p, p->interps[0], 0, -1);
        fx_open(f);
        fx_sample(f, 0);
        __u64 ts;
        for (int t = 0; t < n; t++) {
                assert_int_equal(fx_find(f, p->th[t].pthread, &ts), 1);
                assert_int_equal(ts, p->th[t].tstate);
        }
        assert_int_equal(fx_find(f, 0x7f0000001234ull, &ts), 0); /* no such thread */
        assert_int_equal(ts, 0);
        assert_int_equal(fx_find(f, 0, &ts), -1); /* no id (not x86-64) */
        /* The list as a cycle: the search stops at its bound. */
        uint64_t last = p->th[0].tstate, first = p->th[n - 1].tstate;
        img_u64(p->img, last + (uint64_t)p->L.ts_next, first);
        assert_int_equal(fx_find(f, p->th[0].pthread, &ts), 1);
        assert_int_equal(fx_find(f, 0x7f0000001234ull, &ts), -1);
        img_u64(p->img, last + (uint64_t)p->L.ts_next, 0);
        assert_int_equal(fx_find(f, 0x7f0000001234ull, &ts), 0);
        /* A state that does not read: the threads after it are not known. */
        img_drop(p->img, p->th[2].tstate);
        pyimg_sync(p);
        assert_int_equal(fx_find(f, p->th[3].pthread, &ts), 1);
        assert_int_equal(fx_find(f, p->th[1].pthread, &ts), -1);
        assert_int_equal(fx_find(f, 0x7f0000001234ull, &ts), -1);
        /*
         * Another interpreter: a thread in no list of main's may be its.
         * (Main is told by its id 0 from 3.7 on, else as the last of the
         * list, where CPython puts the first interpreter but the image
         * puts the newest: not tested there.)
         */
        if (p->L.is_id < 0) {
                print_message("%-6s search     %d threads found by their ids\n", f->v->name, n);
                return;
        }
        img_u64(p->img, p->interps[0] + (uint64_t)p->L.is_threads_head, p->th[4].tstate);
        pyimg_add_interp(p, 1);
        fx_sample(f, 0); /* (main is still interps[0]: fx_proc checks) */
        assert_true(f->proc.flags & BPFW_P_SUBINTERPS);
        assert_int_equal(fx_find(f, p->th[4].pthread, &ts), 1);
        assert_int_equal(ts, p->th[4].tstate);
        assert_int_equal(fx_find(f, 0x7f0000001234ull, &ts), -1);
        f->proc.threads_head_addr = 0;
        assert_int_equal(fx_find(f, p->th[4].pthread, &ts), -1);
        print_message("%-6s search     %d threads found by their ids\n", f->v->name, n);
}

static const struct scenario scenarios[] = {
    {"proc", check_proc, any},
    {"plain", check_plain, any},
    {"skipped", check_skipped, any},
    {"tlbc", check_tlbc, tlbc},
    {"chunks", check_chunks, chunked},
    {"deep", check_deep, any},
    {"fault", check_fault, any},
    {"cycle", check_cycle, any},
    {"cycle-long", check_cycle_long, any},
    {"gone", check_gone, any},
    {"search", check_search, any},
    {"known", check_known, any},
};

#define N_SCENARIOS (sizeof(scenarios) / sizeof(scenarios[0]))

int main(void)
{
        static struct CMUnitTest tests[IMGVER_COUNT * N_SCENARIOS];
        static char names[IMGVER_COUNT * N_SCENARIOS][48];
        size_t n = 0;
        for (size_t s = 0; s < N_SCENARIOS; s++) {
                for (size_t v = 0; v < IMGVER_COUNT; v++) {
                        if (!scenarios[s].applies(&imgver_table[v]))
                                continue;
                        char *name = names[s * IMGVER_COUNT + v];
                        snprintf(name, 48, "%s %s", scenarios[s].name, imgver_table[v].name);
                        tests[n++] = (struct CMUnitTest){.name = name,
                                                         .test_func = scenarios[s].fn,
                                                         .setup_func = fx_setup,
                                                         .teardown_func = fx_teardown,
                                                         .initial_state = (void *)&imgver_table[v]};
                }
        }
        return _cmocka_run_group_tests("bpfwalk", tests, n, NULL, NULL);
}
