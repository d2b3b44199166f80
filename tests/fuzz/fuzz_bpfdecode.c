/*
 * fuzz_bpfdecode.c - libFuzzer target: the decoding of the in-kernel
 * sampler's events (pywalk_bpf_begin/decode/end, record/pywalk.c section
 * "--bpf: frames copied in the kernel"). An event is copied out of another
 * program's memory, so every field of it is untrusted: frame addresses, code
 * object pointers (tag bits included), instruction positions, owner and
 * entry bytes, thread-local bytecode indices, code identities, the depth and
 * the flags.
 *
 * At startup a synthetic interpreter image (tests/record/imgbuild.c) is
 * built for each of the 14 layouts the walker's tests know
 * (tests/record/imgvers.c: 2.7 to 3.15, 3.7 debug, 3.13t, 3.14t), with threads holding real stacks:
 * plain frames whose names and files come in every string kind, entry, generator, shim, not-started
 * and being-cleared frames, an f_executable that is no code, a 270-frame stack spread over
 * data-stack chunks (an event holds 256), thread-local bytecode (3.14t), a thread without frames.
 * What pywalk_sample() finds in each thread is kept as the truth; what the program's own walk
 * (record/bpfwalk_chain.h, compiled here) copies of each thread is the real event.
 *
 * An input is the layout (its first byte, low 6 bits) and a sequence of
 * operations on a walker opened for it:
 *  - an event to decode: a thread's chain as the program copied it at
 *    startup or copies it now (from patched memory), or nothing, then
 *    edited: depth real, small, near the bound or any 32-bit value; flags
 *    real or raw; the thread state real or not; frames past the chain zero,
 *    a pattern, another stack or the chain again (loops); single frames
 *    replaced by real frames of any thread, raw bytes, real code objects at
 *    positions in or near their code (any copy of thread-local bytecode)
 *    with their identity or not, nudged positions, other owners, entries,
 *    indices and identities, addresses of other objects. Each event is
 *    passed in a buffer of exactly its frames, as the ring buffer hands it
 *    over; some are decoded twice.
 *  - the end of a batch (pywalk_bpf_end, then begin), so that the code
 *    cache's identity checks between samples run;
 *  - a patch of the image (a code object's header, its strings, its line
 *    table, its thread-local bytecode array, frames, data-stack chunks; any
 *    bytes, the address of another object, a header field taken from
 *    another code object, or a whole header another's), or a region made
 *    unreadable: the code objects change under the cache, as a freed and
 *    rebuilt one does. Undone after the input;
 *  - reads that fail from some point on: the process gone (-ESRCH), no
 *    longer readable (-EPERM), out of memory (-ENOMEM), or nothing mapped;
 *  - a pywalk_sample() between batches, over the same (patched) memory
 *    (once, where the first byte allows it: see LLVMFuzzerTestOneInput()).
 *
 * Checked: decode returns 0, or a negative errno that ends the batch only
 * when reads were made to fail so; a thread is reported as the event names
 * it, its GIL flags as the event says; th.status is 0, PYWALK_TORN,
 * PYWALK_CODE_GONE or PYWALK_CODE_UNREAD; with status 0, no more frames
 * than the event carries (and PYWALK_MAX_DEPTH at most), each with a code
 * that has a name and a file (NUL-terminated: ASan reads them whole);
 * otherwise no frames. An event decoded again in its batch gives the same
 * frames (the sampler memoizes a batch's chains). In an input that changed
 * no memory, a thread's whole chain gives the frames pywalk_sample() gave,
 * and its innermost frames flagged truncated the innermost of them:
 * whatever came before in the batch must not change what the cache
 * answers. A crash, a sanitizer report, a leak or a hang is a finding.
 * Every input starts from a fresh walker over pristine images, so a finding
 * reproduces from its input alone.
 *
 * Build: CC=clang meson setup build-fuzz -Dfuzz=true
 * -Db_sanitize=address,undefined -Db_lundef=false; run with
 * tests/fuzz/run_bpfdecode.sh (the CI run, and --long).
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpfwalk_shared.h"
#include "fuzzin.h"
#include "imgbuild.h"
#include "imgvers.h"
#include "memsrc.h"
#include "pylayout.h"
#include "pywalk.h"

_Static_assert(offsetof(struct bpfw_event, frames) == BPFW_EVENT_HEAD,
               "an event's frames follow its head");

const char fuzz_name[] = "fuzz_bpfdecode";

/* ---- the images ---- */

#define MAX_THREADS 6
#define MAX_CODES   32
#define MAX_POOL    256
#define MAX_TARGETS 256

struct code {
        uint64_t addr;
        uint64_t ident; /* as the program computes it (struct bpfw_frame.ident) */
        int nunits;
        int n_tlbc;       /* 3.14t: thread-local bytecode copies, 0 none... */
        uint64_t copy[4]; /* ...and where they are (copy 0: co_code_adaptive) */
};

/* What pywalk_sample() found for a frame. */
struct want_frame {
        char *name, *qual, *file;
        int32_t line;
        bool entry;
};

struct thread {
        int t; /* in p.th */
        uint64_t tstate, thread_id;
        struct bpfw_event *ev; /* its chain as the program copies it (bpfw_walk()) */
        bool sampled;          /* pywalk_sample() reported it... */
        int status;            /* ...with this status */
        uint32_t depth;        /* ...and these frames */
        struct want_frame *want;
};

/*
 * The image read as memsrc_init_image() reads it, by binary search: its
 * regions are allocated at rising addresses with gaps between them, so a
 * read is whole inside one live region or fails. (The image memsrc scans
 * every region per read: a 270-frame heap stack makes that most of a run.)
 */
struct fastmem {
        struct memsrc m; /* first: the walker's reads come back as this */
        struct img *g;
        int fail; /* an error every read returns once reads_left is 0 (op_fail()) */
        unsigned reads_left;
};

static int fastmem_read(struct memsrc *m, uint64_t addr, void *buf, size_t len)
{
        struct fastmem *fm = (struct fastmem *)m;
        const struct img *g = fm->g;
        size_t lo = 0, hi = g->n;
        if (fm->fail && !fm->reads_left)
                return fm->fail;
        fm->reads_left -= fm->fail != 0;
        if (!len)
                return 0;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (g->r[mid].addr <= addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (!lo)
                return -EFAULT;
        const struct img_region *r = &g->r[lo - 1];
        if (r->dropped || addr - r->addr >= r->len || len > r->len - (addr - r->addr))
                return -EFAULT;
        memcpy(buf, r->data + (addr - r->addr), len);
        return 0;
}

/* The program's walk (record/bpfwalk_chain.h), reading an image. */
static struct memsrc *walk_mem;
static uint8_t walk_buf[BPFW_SCRATCH] __attribute__((aligned(8)));
static uint8_t walk_cobuf[BPFW_CO_SCRATCH] __attribute__((aligned(8)));

#define BPFW_READ(dst, len, addr) memsrc_read(walk_mem, (addr), (dst), (len))
#include "bpfwalk_chain.h"

struct layout {
        const struct imgver *v;
        struct pyimg p;
        struct fastmem mem;
        struct bpfw_proc proc; /* what pywalk_bpf_proc() tells the program */
        struct code codes[MAX_CODES];
        size_t n_codes;
        struct thread th[MAX_THREADS];
        size_t n_th;
        uint64_t pool[MAX_POOL]; /* addresses worth pointing at */
        size_t n_pool;
        uint64_t targets[MAX_TARGETS]; /* objects to patch or make unreadable */
        size_t n_targets;
};

static struct layout *layouts;
static bool verbose; /* FUZZ_VERBOSE: each decoded event's outcome on stderr */

static void pool_add(struct layout *l, uint64_t a)
{
        if (l->n_pool < MAX_POOL)
                l->pool[l->n_pool++] = a;
}

static void target_add(struct layout *l, uint64_t a)
{
        if (a && l->n_targets < MAX_TARGETS)
                l->targets[l->n_targets++] = a;
}

/* A code object whose unit k is on line first + 1 + k. */
static uint64_t mkcode(struct layout *l, const char *name, const char *qual, const char *file,
                       int first, int nunits, int firsttraceable)
{
        struct pyimg *p = &l->p;
        int lines[64];
        CHECK(nunits <= 64 && l->n_codes < MAX_CODES, "mkcode: too big");
        for (int i = 0; i < nunits; i++)
                lines[i] = first + 1 + i;
        uint64_t c = pyimg_code(p, name, qual, file, first, lines, (size_t)nunits, firsttraceable);
        l->codes[l->n_codes++] = (struct code){.addr = c, .nunits = nunits};
        return c;
}

/* A code object's identity, from the fields the program reads of it. */
static uint64_t code_ident(struct layout *l, uint64_t c)
{
        const struct pylayout *L = &l->p.L;
        struct img *g = l->p.img;
        uint32_t first;
        memcpy(&first, img_at(g, c + (uint64_t)L->co_firstlineno, 4), 4);
        return bpfw_ident(first, img_get_u64(g, c + (uint64_t)L->co_filename),
                          img_get_u64(g, c + (uint64_t)L->co_name),
                          img_get_u64(g, c + (uint64_t)L->co_linetable),
                          L->co_qualname >= 0 ? img_get_u64(g, c + (uint64_t)L->co_qualname) : 0);
}

/* The region holding addr (an object of the image): its start and length. */
static struct img_region *region_of(struct img *g, uint64_t addr)
{
        for (size_t i = 0; i < g->n; i++)
                if (addr >= g->r[i].addr && addr - g->r[i].addr < g->r[i].len)
                        return &g->r[i];
        return NULL;
}

/* Thread state `tstate`'s chain, as the program copies it now, into e. */
static void walk(struct layout *l, uint64_t tstate, uint64_t thread_id, struct bpfw_event *e)
{
        memset(e, 0, sizeof(*e));
        e->time_ns = 1;
        e->pid = e->tid = PYIMG_PID;
        e->tstate = tstate;
        e->thread_id = thread_id;
        walk_mem = &l->mem.m;
        bpfw_walk(&l->proc.L, tstate, e, walk_buf, walk_cobuf);
}

static char *dup_str(const char *s)
{
        char *d = strdup(s ? s : "");
        CHECK(d, "out of memory");
        return d;
}

/* pywalk_sample()'s callback at startup: the truth for each thread. */
static int keep_truth(void *ctx, const struct pywalk_thread *th)
{
        struct layout *l = ctx;
        for (size_t i = 0; i < l->n_th; i++) {
                struct thread *t = &l->th[i];
                if (t->tstate != th->tstate_addr)
                        continue;
                t->sampled = true;
                t->status = th->status;
                t->depth = th->depth;
                t->want = calloc(th->depth ? th->depth : 1, sizeof(*t->want));
                CHECK(t->want, "out of memory");
                for (uint32_t k = 0; k < th->depth; k++) {
                        const struct pywalk_code *c = th->frames[k].code;
                        t->want[k] = (struct want_frame){dup_str(c->name), dup_str(c->qualname),
                                                         dup_str(c->file), th->frames[k].line,
                                                         th->frames[k].entry};
                }
        }
        return 0;
}

/*
 * The image of one layout: the scenarios of test_bpfwalk.c (plain, skipped
 * frames, deep, tlbc) as threads of one interpreter, and a thread with no
 * frames; then its chains, the truth, and the addresses to use.
 */
static void build_layout(struct layout *l, const struct imgver *v)
{
        memset(l, 0, sizeof(*l));
        l->v = v;
        CHECK(imgver_image(v, IMGVER_TASKS_NONE, &l->p) == 0, "no layout table for %s", v->name);
        struct pyimg *p = &l->p;
        const struct pylayout *L = &p->L;
        p->chunk_bytes = 4096; /* the deep stack spreads over chunks (3.11+) */
        bool py2 = v->major == 2;
        bool entries = L->owner_skip_from != PYL_OWNER_NONE;
        bool heap = L->frames == PYL_FRAMES_OBJECT;

        uint64_t mod = mkcode(l, "<module>", "<module>", "/app/main.py", 1, 20, 0);
        uint64_t outer = mkcode(l, "outer", "Outer.outer", "/app/outer.py", 10, 30, 0);
        int lines[20];
        for (int i = 0; i < 20; i++)
                lines[i] = i % 7 == 3 ? -1 : 41 + 3 * i;
        uint64_t ufile = pyimg_str(p, "/app/ünï/🐍.py", py2 ? PYIMG_STR_UNICODE2 : PYIMG_STR_AUTO);
        uint64_t cafe =
            pyimg_code_objs(p, pyimg_str(p, "café", PYIMG_STR_AUTO),
                            pyimg_str(p, "K.café", py2 ? PYIMG_STR_AUTO : PYIMG_STR_LEGACY), ufile,
                            40, lines, 20, 0);
        l->codes[l->n_codes++] = (struct code){.addr = cafe, .nunits = 20};
        uint64_t kanji = mkcode(l, "関数", "関数", "/app/日本.py", 500, 20, 0);
        uint64_t leaf = mkcode(l, "leaf", "Leaf.leaf", "/lib/leaf.py", 6000, 64, 0);
        uint64_t work = mkcode(l, "work", NULL, "<string>", 80, 20, 0);
        uint64_t gen = mkcode(l, "gen", "gen", "/app/gen.py", 30, 20, 0);
        uint64_t mid = mkcode(l, "mid", "M.mid", "/app/skip.py", 50, 20, 0);
        uint64_t late = mkcode(l, "late", "late", "/app/skip.py", 60, 20, 3);
        uint64_t shim = mkcode(l, "__init__", "__init__", "__init__", 0, 4, 0);
        uint64_t setup = mkcode(l, "setup", "setup", "/app/skip.py", 70, 20, 4);
        uint64_t gone = mkcode(l, "gone", "gone", "/app/skip.py", 90, 20, 0);
        uint64_t not_code = mkcode(l, "nc", "nc", "/app/skip.py", 100, 20, 0);
        img_u64(p->img, not_code + (uint64_t)L->ob_type, img_alloc(p->img, 512));
        uint64_t deep[7];
        for (int i = 0; i < 7; i++) {
                char name[16], file[32];
                snprintf(name, sizeof(name), "rec%d", i);
                snprintf(file, sizeof(file), "/app/deep%d.py", i % 3);
                deep[i] = mkcode(l, name, name, file, 100 * i, 40, 0);
        }
        bool tlbc = L->co_tlbc >= 0;
        if (tlbc) {
                pyimg_code_tlbc(p, leaf, 3, 2);
                pyimg_code_tlbc(p, work, 2, 1);
                for (size_t i = 0; i < l->n_codes; i++) {
                        struct code *c = &l->codes[i];
                        if (c->addr != leaf && c->addr != work)
                                continue;
                        c->n_tlbc = c->addr == leaf ? 3 : 2;
                        uint64_t arr = img_get_u64(p->img, c->addr + (uint64_t)L->co_tlbc);
                        for (int k = 0; k < c->n_tlbc; k++)
                                c->copy[k] = img_get_u64(p->img, arr + 8 + 8 * (uint64_t)k);
                }
        }

        /* Plain frames; 3.14t: some run thread-local bytecode copies. */
        int t0 = pyimg_add_thread(p, p->interps[0], -1);
        pyimg_push(p, t0, PYIMG_FRAME, mod, 3);
        pyimg_push(p, t0, PYIMG_FRAME, outer, 17);
        pyimg_push(p, t0, PYIMG_FRAME, cafe, 2);
        pyimg_push(p, t0, PYIMG_FRAME, kanji, 0);
        if (tlbc)
                pyimg_push_tlbc(p, t0, work, 11, 1);
        pyimg_push(p, t0, PYIMG_FRAME, outer, 29);
        if (tlbc)
                pyimg_push_tlbc(p, t0, leaf, 63, 2);
        else
                pyimg_push(p, t0, PYIMG_FRAME, leaf, 63);

        /* Frames to skip (test_bpfwalk.c's check_skipped). */
        int t1 = pyimg_add_thread(p, p->interps[0], 1001);
        if (entries)
                pyimg_push(p, t1, PYIMG_FRAME_ENTRY, 0, 0);
        pyimg_push(p, t1, PYIMG_FRAME, mod, 3);
        uint64_t fouter = pyimg_push(p, t1, PYIMG_FRAME, outer, 1);
        if (L->fr_is_entry >= 0)
                img_u8(p->img, fouter + (uint64_t)L->fr_is_entry, 1);
        if (entries)
                pyimg_push(p, t1, PYIMG_FRAME_ENTRY, 0, 0);
        pyimg_push(p, t1, PYIMG_FRAME_GEN, gen, 5);
        uint64_t fgone = pyimg_push(p, t1, PYIMG_FRAME, gone, 2);
        img_u64(p->img, fgone + (uint64_t)L->fr_code, 0);
        pyimg_push(p, t1, PYIMG_FRAME, mid, 0);
        if (L->executable_any)
                pyimg_push(p, t1, PYIMG_FRAME, not_code, 0);
        if (L->init_shim)
                pyimg_push(p, t1, PYIMG_FRAME, shim, 0);
        pyimg_push(p, t1, PYIMG_FRAME, late, 7);
        if (L->co_firsttraceable >= 0)
                pyimg_push(p, t1, PYIMG_FRAME, setup, 1);

        /* 270 frames, the innermost 10 called back from C: more than an event holds. */
        int t2 = pyimg_add_thread(p, p->interps[0], 1002);
        if (entries)
                pyimg_push(p, t2, PYIMG_FRAME_ENTRY, 0, 0);
        for (int i = 0; i < 270; i++) {
                if (i == 260 && entries)
                        pyimg_push(p, t2, PYIMG_FRAME_ENTRY, 0, 0);
                pyimg_push(p, t2, PYIMG_FRAME, deep[i % 7], (i * 3) % 40);
        }

        /* A frame not started (<=3.10: f_lasti -1) and a generator leaf. */
        int t3 = pyimg_add_thread(p, p->interps[0], 1003);
        pyimg_push(p, t3, PYIMG_FRAME, mod, heap ? -1 : 0);
        pyimg_push(p, t3, PYIMG_FRAME, work, 9);
        pyimg_push(p, t3, PYIMG_FRAME_GEN, gen, 19);

        /* No frames at all (3.15: its base frame alone). */
        int t4 = pyimg_add_thread(p, p->interps[0], 1004);
        pyimg_gil(p, p->interps[0], p->th[t0].tstate, -1);

        int ts[] = {t0, t1, t2, t3, t4};
        for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
                struct thread *th = &l->th[l->n_th++];
                th->t = ts[i];
                th->tstate = p->th[ts[i]].tstate;
                th->thread_id = p->th[ts[i]].pthread;
        }
        for (size_t i = 0; i < l->n_codes; i++)
                l->codes[i].ident = code_ident(l, l->codes[i].addr);

        for (size_t i = 1; i < p->img->n; i++)
                CHECK(p->img->r[i].addr > p->img->r[i - 1].addr + p->img->r[i - 1].len,
                      "%s: image regions not rising", v->name);
        l->mem = (struct fastmem){.m = {.read = fastmem_read}, .g = p->img};

        /* The truth. */
        struct pywalk *w;
        char err[256] = "";
        int rc = pywalk_open(&p->target, &l->mem.m, &w, err, sizeof(err));
        CHECK(rc == 0, "%s: pywalk_open: %d %s", v->name, rc, err);
        rc = pywalk_sample(w, keep_truth, l);
        CHECK(rc == 0, "%s: pywalk_sample: %d", v->name, rc);
        rc = pywalk_bpf_proc(w, &l->proc, err, sizeof(err));
        CHECK(rc == 0, "%s: pywalk_bpf_proc: %d %s", v->name, rc, err);
        pywalk_close(w);
        for (size_t i = 0; i < l->n_th; i++) {
                struct thread *th = &l->th[i];
                th->ev = malloc(sizeof(*th->ev));
                CHECK(th->ev, "out of memory");
                walk(l, th->tstate, th->thread_id, th->ev);
                CHECK(th->ev->status == BPFW_OK, "%s: thread %d: the program's walk failed",
                      v->name, th->t);
        }
        for (size_t i = 0; i < l->n_th; i++)
                CHECK(!l->th[i].sampled || l->th[i].status == 0, "%s: thread %zu sampled torn",
                      v->name, i);

        /* What frames may point at, and what may change under the cache. */
        pool_add(l, 0);
        pool_add(l, 0xdead0000ull);
        pool_add(l, UINT64_MAX - 7);
        for (size_t i = 0; i < l->n_codes; i++) {
                uint64_t c = l->codes[i].addr;
                pool_add(l, c);
                target_add(l, c);
                const int32_t ptrs[] = {L->co_name,      L->co_qualname, L->co_filename,
                                        L->co_linetable, L->co_code,     L->co_tlbc};
                for (size_t k = 0; k < sizeof(ptrs) / sizeof(ptrs[0]); k++) {
                        if (ptrs[k] < 0)
                                continue;
                        uint64_t o = img_get_u64(p->img, c + (uint64_t)ptrs[k]);
                        target_add(l, o);
                        if (k < 3 && o)
                                pool_add(l, o);
                }
                struct img_region *r = region_of(p->img, c);
                pool_add(l, r->addr + r->len - 8); /* an object cut at the end of its mapping */
        }
        const uint64_t objs[] = {p->code_type, p->str_type,        p->bytes_type,
                                 p->none_obj,  p->trampoline_code, p->interps[0],
                                 p->runtime,   p->interp_head_var};
        for (size_t i = 0; i < sizeof(objs) / sizeof(objs[0]); i++)
                if (objs[i])
                        pool_add(l, objs[i]);
        for (size_t i = 0; i < l->n_th; i++) {
                struct thread *th = &l->th[i];
                const struct bpfw_event *e = th->ev;
                pool_add(l, th->tstate);
                for (uint32_t k = 0; k < e->depth; k++) {
                        if (k < 4 || k + 1 == e->depth)
                                pool_add(l, e->frames[k].addr);
                        if (k < 8)
                                target_add(l, e->frames[k].addr); /* its frame, or its chunk */
                }
                if (L->ts_datastack_chunk >= 0)
                        target_add(
                            l, img_get_u64(p->img, th->tstate + (uint64_t)L->ts_datastack_chunk));
        }
        CHECK(l->n_pool < MAX_POOL && l->n_targets < MAX_TARGETS, "%s: %zu addresses, %zu objects",
              v->name, l->n_pool, l->n_targets);
        for (size_t i = 0; i < l->n_targets; i++)
                CHECK(region_of(p->img, l->targets[i]), "%s: target outside the image", v->name);
}

/* ---- one input ---- */

/* What an input changed in its image, undone after it. */
#define MAX_PATCHES 32
#define MAX_DROPS   8
#define MAX_OPS     256
#define MAX_EDITS   48

struct patch {
        uint8_t *at;
        uint8_t *old;
        size_t len;
};

struct run {
        struct layout *l;
        struct pywalk *w;
        bool in_batch;
        bool may_sample, sampled;
        bool dirty; /* memory was changed: the truth may no longer hold */
        struct patch patches[MAX_PATCHES];
        size_t n_patches;
        struct img_region *drops[MAX_DROPS];
        size_t n_drops;
        struct bpfw_event *e; /* built here, then passed in a buffer of its own size */
};

/* An error that ends a batch: what reads fail with when the process is gone or ours no more. */
static bool fatal(int rc)
{
        return rc == -ESRCH || rc == -EPERM || rc == -ENOMEM;
}

static void batch_begin(struct run *r)
{
        if (!r->in_batch)
                pywalk_bpf_begin(r->w);
        r->in_batch = true;
}

static void batch_end(struct run *r)
{
        if (r->in_batch)
                pywalk_bpf_end(r->w);
        r->in_batch = false;
}

/*
 * A thread's frames: valid ones, at most `most`, when its status is 0; none
 * otherwise. Decoding reports PYWALK_TORN, PYWALK_CODE_GONE or
 * PYWALK_CODE_UNREAD (an error ends the batch instead); the walker's own
 * walk may report a negative errno too.
 */
static void check_frames(const struct run *r, const struct pywalk_thread *th, uint32_t most,
                         bool decoded)
{
        int st = th->status;
        CHECK(st == 0 || st == PYWALK_TORN ||
                  (decoded ? st == PYWALK_CODE_GONE || st == PYWALK_CODE_UNREAD
                           : st < 0 && st > -4096),
              "%s: th.status %d", r->l->v->name, st);
        if (th->status != 0) {
                CHECK(th->depth == 0 && !th->frames, "%s: torn with %u frames", r->l->v->name,
                      th->depth);
                return;
        }
        CHECK(th->depth <= most && th->depth <= PYWALK_MAX_DEPTH, "%s: %u frames of %u",
              r->l->v->name, th->depth, most);
        CHECK(!th->depth || th->frames, "%s: %u frames, none given", r->l->v->name, th->depth);
        for (uint32_t i = 0; i < th->depth; i++) {
                const struct pywalk_frame *f = &th->frames[i];
                const struct pywalk_code *c = f->code;
                CHECK(c && c->name && c->file, "%s: frame %u without code, name or file",
                      r->l->v->name, i);
                CHECK(c->id != 0 && !c->task, "%s: frame %u: code id %u task %d", r->l->v->name, i,
                      c->id, c->task);
                /* Read them whole: ASan sees a string that is not terminated. */
                volatile size_t n = strlen(c->name) + strlen(c->file);
                if (c->qualname)
                        n += strlen(c->qualname);
                (void)n;
                volatile bool entry = f->entry;
                (void)entry;
        }
}

/* pywalk_sample() over the same memory: the same contract for each thread. */
static int check_sampled(void *ctx, const struct pywalk_thread *th)
{
        check_frames(ctx, th, PYWALK_MAX_DEPTH, false);
        return 0;
}

/* A frame of the image's: thread i's k-th, as the program copied it. */
static struct bpfw_frame real_frame(const struct layout *l, size_t i, uint32_t k)
{
        const struct bpfw_event *e = l->th[i % l->n_th].ev;
        if (!e->depth)
                return (struct bpfw_frame){0};
        return e->frames[k % e->depth];
}

/* Where code unit `unit` of copy `copy` of code c is, as its frames hold it. */
static uint64_t code_pos(const struct layout *l, const struct code *c, int copy, int unit)
{
        const struct pylayout *L = &l->p.L;
        if (L->lasti != PYL_LASTI_POINTER)
                return (uint64_t)(int64_t)(unit < 0                      ? -1
                                           : L->lasti == PYL_LASTI_UNITS ? unit
                                                                         : 2 * unit);
        uint64_t base =
            copy > 0 && copy < c->n_tlbc ? c->copy[copy] : c->addr + (uint64_t)L->co_code_adaptive;
        return base + (uint64_t)(2 * (int64_t)unit);
}

/* Change frame f as the input says. */
static void edit_frame(struct run *r, struct in *in, struct bpfw_frame *f)
{
        const struct layout *l = r->l;
        const struct pylayout *L = &l->p.L;
        uint8_t k = get8(in);
        bool tagged = L->fr_code_mask != ~0ull;
        switch (k & 7) {
        case 0: { /* a real frame of any thread */
                size_t i = get8(in);
                *f = real_frame(l, i, get16(in));
                break;
        }
        case 1: /* raw bytes */
                f->addr = get64(in);
                f->code = get64(in);
                f->pos = get64(in);
                f->owner = get8(in);
                f->entry = get8(in);
                f->tlbc = (int32_t)get32(in);
                f->ident = get64(in);
                break;
        case 2: /* another frame's address, or any */
                f->addr = k & 8 ? get64(in) : l->pool[get8(in) % l->n_pool];
                break;
        case 3: { /* a real code object at a position in or near its code */
                const struct code *c = &l->codes[get8(in) % l->n_codes];
                uint8_t how = get8(in);
                int copy = c->n_tlbc ? how % (c->n_tlbc + 1) : 0;
                int unit = (int8_t)get8(in);
                unit = how & 0x10 ? unit : (unit & 0x7f) % (c->nunits + 2) - 1;
                f->code = c->addr | (tagged ? (uint64_t)(how >> 2 & 3) : 0);
                f->pos = code_pos(l, c, copy, unit);
                f->tlbc = L->fr_tlbc_index >= 0 ? copy : 0;
                /* Its identity; or the frame's before; or none read. */
                f->ident = how >> 5 == 6 ? f->ident : how >> 5 == 7 ? 0 : c->ident;
                break;
        }
        case 4: { /* the position nudged */
                int16_t d = (int16_t)get16(in);
                if (L->lasti == PYL_LASTI_POINTER)
                        f->pos += (uint64_t)(int64_t)d;
                else
                        f->pos = (uint64_t)(int64_t)(int32_t)((uint32_t)f->pos + (uint32_t)d);
                break;
        }
        case 5: /* owner and entry bytes */
                f->owner = get8(in);
                f->entry = get8(in);
                break;
        case 6: /* the thread-local bytecode index, or the code object's identity */
                if (k & 8) {
                        f->tlbc = k & 16 ? (int32_t)get32(in) : (int8_t)get8(in);
                        break;
                }
                switch (k >> 4 & 3) {
                case 0:
                        f->ident = 0;
                        break;
                case 1:
                        f->ident = l->codes[get8(in) % l->n_codes].ident;
                        break;
                case 2:
                        f->ident = get64(in);
                        break;
                case 3:
                        f->ident ^= 1ull << (get8(in) % 64);
                        break;
                }
                break;
        case 7: /* code: an object that is not this frame's (or not code), or any */
                f->code =
                    k & 8 ? get64(in) : l->pool[get8(in) % l->n_pool] | (uint64_t)(k >> 4 & 3);
                break;
        }
}

/* The depth the decoder must keep to: what the event carries. */
static uint32_t carried(uint32_t depth)
{
        return depth < BPFW_MAX_DEPTH ? depth : BPFW_MAX_DEPTH;
}

/*
 * Decode e again in the same batch: the same frames (code ids, lines, entry
 * flags) when it decoded, as the sampler's memo of a batch's chains
 * assumes; not decoded again when it did not. (Which error it is may
 * differ: a position that does not fit a cached code object rebuilds the
 * entry from the object now there, and the event's identity of the object
 * is compared with it only the second time: PYWALK_TORN, then
 * PYWALK_CODE_GONE.) `first`'s frames are the walker's, overwritten by the
 * second decode: kept here first.
 */
static void expect_same_again(struct run *r, const struct bpfw_event *e,
                              const struct pywalk_thread *first)
{
        struct frame_key {
                uint32_t id;
                int32_t line;
                bool entry;
        } *keep = calloc(first->depth ? first->depth : 1, sizeof(*keep));
        CHECK(keep, "out of memory");
        for (uint32_t i = 0; i < first->depth; i++)
                keep[i] = (struct frame_key){first->frames[i].code->id, first->frames[i].line,
                                             first->frames[i].entry};
        int status = first->status;
        uint32_t depth = first->depth;
        struct pywalk_thread again;
        int rc = pywalk_bpf_decode(r->w, e, &again);
        const char *name = r->l->v->name;
        CHECK(rc == 0, "%s: decoded again: %d", name, rc);
        CHECK(status ? again.status != 0 : again.status == 0 && again.depth == depth,
              "%s: decoded again: status %d, %u frames; first %d, %u frames", name, again.status,
              again.depth, status, depth);
        for (uint32_t i = 0; i < depth; i++) {
                const struct pywalk_frame *f = &again.frames[i];
                CHECK(f->code->id == keep[i].id && f->line == keep[i].line &&
                          f->entry == keep[i].entry,
                      "%s: decoded again: frame %u code %u line %d entry %d; first %u %d %d", name,
                      i, f->code->id, f->line, f->entry, keep[i].id, keep[i].line, keep[i].entry);
        }
        free(keep);
}

/* An event made from the input, decoded and checked. */
static void op_event(struct run *r, struct in *in)
{
        struct layout *l = r->l;
        struct bpfw_event *e = r->e;
        uint8_t base = get8(in), dm = get8(in);
        size_t ti = (base & 0x7f) % (l->n_th + 1);
        const struct thread *th = ti < l->n_th ? &l->th[ti] : NULL;
        /* A thread's chain as the program copied it at startup, or now (patched memory). */
        if (th && (base & 0x80))
                walk(l, th->tstate, th->thread_id, e);
        else if (th)
                *e = *th->ev;
        else
                memset(e, 0, sizeof(*e));
        e->status = BPFW_OK;
        uint32_t n = e->depth;                       /* the chain's frames... */
        bool whole = !(e->flags & BPFW_F_TRUNCATED); /* ...all of them */
        switch (dm & 3) {
        case 1:
                e->depth = get8(in);
                break;
        case 2:
                e->depth = get32(in); /* any value the field holds */
                break;
        case 3:
                e->depth = BPFW_MAX_DEPTH - 2 + get8(in) % 5;
                break;
        }
        static const uint16_t gil[] = {0, BPFW_F_GIL_KNOWN, BPFW_F_GIL_KNOWN | BPFW_F_GIL_HELD,
                                       BPFW_F_GIL_KNOWN | BPFW_F_GIL_HELD | BPFW_F_BY_GIL};
        e->flags |= gil[dm >> 6];
        if (dm & 4)
                e->flags = get16(in);
        if (dm & 8) {
                uint8_t s = get8(in);
                e->tstate = s & 1 ? get64(in) : l->pool[s % l->n_pool];
                e->thread_id = get64(in);
        }
        /* Frames past the chain: none, a pattern, the deep stack, the chain again. */
        uint32_t fill = dm >> 4 & 3;
        for (uint32_t i = n; i < BPFW_MAX_DEPTH; i++) {
                if (fill == 0)
                        memset(&e->frames[i], 0, sizeof(e->frames[i]));
                else if (fill == 1)
                        memset(&e->frames[i], 0x5a, sizeof(e->frames[i]));
                else if (fill == 2)
                        e->frames[i] = real_frame(l, 2, i - n);
                else
                        e->frames[i] = n ? e->frames[(i - n) % n] : e->frames[i];
        }
        uint8_t edit_byte = get8(in);
        uint32_t edits = (edit_byte & 0x7f) % MAX_EDITS;
        uint32_t held = carried(e->depth);
        for (uint32_t i = 0; i < edits; i++) {
                uint8_t at = get8(in);
                edit_frame(r, in, &e->frames[held ? at % held : at]);
        }
        /* Decoded a second time in the batch: the same (the sampler memoizes a batch's chains). */
        bool twice = edit_byte & 0x80;

        /* As the ring buffer hands it over: its frames and nothing after. */
        size_t size = BPFW_EVENT_HEAD + (size_t)held * sizeof(struct bpfw_frame);
        struct bpfw_event *copy = malloc(size);
        CHECK(copy, "out of memory");
        memcpy(copy, e, size);
        batch_begin(r);
        struct pywalk_thread out;
        memset(&out, 0xcc, sizeof(out));
        int rc = pywalk_bpf_decode(r->w, copy, &out);
        const char *name = l->v->name;
        CHECK(rc == 0 || (l->mem.fail && fatal(rc)), "%s: decode returned %d", name, rc);
        if (rc < 0) {
                free(copy);
                batch_end(r); /* the batch ends there */
                return;
        }
        CHECK(out.tstate_addr == e->tstate && out.thread_id == e->thread_id,
              "%s: thread %#llx/%#llx reported as %#llx/%#llx", name, (unsigned long long)e->tstate,
              (unsigned long long)e->thread_id, (unsigned long long)out.tstate_addr,
              (unsigned long long)out.thread_id);
        unsigned want_gil = PYWALK_GIL_UNKNOWN;
        if (l->p.target.free_threaded)
                want_gil = PYWALK_NO_GIL | PYWALK_GIL_UNKNOWN;
        else if (e->flags & BPFW_F_GIL_KNOWN)
                want_gil = e->flags & BPFW_F_GIL_HELD ? PYWALK_GIL_HELD : 0;
        CHECK(out.gil == want_gil, "%s: gil %#x, event flags %#x", name, out.gil, e->flags);
        check_frames(r, &out, held, true);
        for (uint32_t i = 0; verbose && i < held; i++)
                fprintf(stderr,
                        "  frame %u: addr %#llx code %#llx pos %#llx owner %u entry %u "
                        "tlbc %d ident %#llx\n",
                        i, (unsigned long long)e->frames[i].addr,
                        (unsigned long long)e->frames[i].code, (unsigned long long)e->frames[i].pos,
                        e->frames[i].owner, e->frames[i].entry, e->frames[i].tlbc,
                        (unsigned long long)e->frames[i].ident);
        if (verbose)
                fprintf(stderr, "%s: event of %#llx, %u frames, flags %#x: status %d, %u frames\n",
                        name, (unsigned long long)e->tstate, e->depth, e->flags, out.status,
                        out.depth);
        if (twice && !l->mem.fail)
                expect_same_again(r, copy, &out);
        free(copy);

        /*
         * The innermost frames of a thread's own chain, in an input that
         * changed no memory: the whole chain gives the frames
         * pywalk_sample() gave; a part flagged truncated, the innermost of
         * them (the last one's entry flag open: the entry frame that would
         * set it was not copied). A part not flagged may be torn.
         */
        if (!th || (dm & 8) || edits || r->dirty || !th->sampled || held > n)
                return;
        bool truncated = e->flags & BPFW_F_TRUNCATED;
        if (!truncated && (held != n || !whole))
                return;
        CHECK(out.status == 0,
              "%s: thread %d's own chain (%u of %u frames, flags %#x) decoded torn", name, th->t,
              held, n, e->flags);
        CHECK(truncated ? out.depth <= th->depth : out.depth == th->depth,
              "%s: thread %d: %u frames decoded, pywalk_sample %u", name, th->t, out.depth,
              th->depth);
        for (uint32_t i = 0; i < out.depth; i++) {
                const struct want_frame *a = &th->want[i];
                const struct pywalk_frame *b = &out.frames[i];
                bool entry_ok = a->entry == b->entry || (truncated && i + 1 == out.depth);
                CHECK(!strcmp(a->name, b->code->name) &&
                          !strcmp(a->qual, b->code->qualname ? b->code->qualname : "") &&
                          !strcmp(a->file, b->code->file) && a->line == b->line && entry_ok,
                      "%s: thread %d frame %u: %s (%s) %s:%d entry %d, pywalk_sample %s (%s) "
                      "%s:%d entry %d",
                      name, th->t, i, b->code->name, b->code->qualname ? b->code->qualname : "",
                      b->code->file, b->line, b->entry, a->name, a->qual, a->file, a->line,
                      a->entry);
        }
}

/* Write len bytes at `at` in the image, keeping what was there (undo()). */
static void patch(struct run *r, uint8_t *at, const void *src, size_t len)
{
        if (r->n_patches == MAX_PATCHES || !len)
                return;
        struct patch *pa = &r->patches[r->n_patches++];
        pa->old = malloc(len);
        CHECK(pa->old, "out of memory");
        memcpy(pa->old, at, len);
        pa->at = at;
        pa->len = len;
        memmove(at, src, len);
        r->dirty = true;
}

/*
 * Change an object of the image (undone after the input): any bytes of it;
 * an address at an aligned place in it; a field of a code object's header
 * made an address, another code object's same field, or a number; a code
 * object's header made another's, as when a code object is freed and
 * another built at its address. Values are little-endian, as the layouts.
 */
static void op_patch(struct run *r, struct in *in)
{
        struct layout *l = r->l;
        const struct pylayout *L = &l->p.L;
        uint8_t t = get8(in), mode = get8(in);
        struct img_region *g = region_of(l->p.img, l->targets[t % l->n_targets]);
        switch (mode >> 6) {
        case 0: { /* 1-8 bytes anywhere */
                size_t at = get16(in) % g->len, len = 1 + mode % 8;
                uint64_t v = get64(in);
                patch(r, g->data + at, &v, at + len > g->len ? g->len - at : len);
                return;
        }
        case 1: { /* an address */
                size_t at = (get16(in) % g->len) & ~(size_t)7;
                uint64_t v = l->pool[get8(in) % l->n_pool];
                patch(r, g->data + at, &v, at + 8 > g->len ? g->len - at : 8);
                return;
        }
        }
        const struct code *c = &l->codes[t % l->n_codes];
        const struct code *other = &l->codes[get8(in) % l->n_codes];
        g = region_of(l->p.img, c->addr);
        struct img_region *og = region_of(l->p.img, other->addr);
        if (mode >> 6 == 3) {
                size_t len = L->co_code_adaptive >= 0 ? (size_t)L->co_code_adaptive : L->co_read;
                len = len < g->len ? len : g->len;
                patch(r, g->data, og->data, len < og->len ? len : og->len);
                return;
        }
        const struct {
                int32_t off, size;
        } fields[] = {
            {L->ob_type, 8},        {L->ob_size, 8},           {L->co_name, 8},
            {L->co_qualname, 8},    {L->co_filename, 8},       {L->co_linetable, 8},
            {L->co_firstlineno, 4}, {L->co_firsttraceable, 4}, {L->co_code, 8},
            {L->co_tlbc, 8},
        };
        size_t f = mode % (sizeof(fields) / sizeof(fields[0]));
        size_t off = (size_t)fields[f].off, size = (size_t)fields[f].size;
        if (fields[f].off < 0 || off + size > g->len || off + size > og->len)
                return;
        uint64_t v;
        switch (mode >> 3 & 3) {
        case 0:
                v = l->pool[get8(in) % l->n_pool];
                break;
        case 1:
                memcpy(&v, og->data + off, 8);
                break;
        case 2:
                v = (uint64_t)(int64_t)(int16_t)get16(in);
                break;
        default:
                v = get64(in);
                break;
        }
        patch(r, g->data + off, &v, size);
}

/*
 * From the next `reads` reads on, every read fails as the process that
 * exited (-ESRCH), one we may no longer read (-EPERM), an allocation that
 * failed (-ENOMEM), or memory gone (-EFAULT). For the rest of the input.
 */
static void op_fail(struct run *r, struct in *in)
{
        static const int errors[] = {-ESRCH, -EPERM, -ENOMEM, -EFAULT};
        uint8_t reads = get8(in), e = get8(in);
        if (r->l->mem.fail)
                return;
        r->l->mem.fail = errors[e % 4];
        r->l->mem.reads_left = reads;
        r->dirty = true;
}

/* Make an object's region unreadable (until the input ends). */
static void op_drop(struct run *r, struct in *in)
{
        struct layout *l = r->l;
        uint8_t t = get8(in);
        if (!l->n_targets || r->n_drops == MAX_DROPS)
                return;
        struct img_region *g = region_of(l->p.img, l->targets[t % l->n_targets]);
        if (!g || g->dropped)
                return;
        g->dropped = true; /* fastmem_read() fails there now */
        r->drops[r->n_drops++] = g;
        r->dirty = true;
}

/*
 * The walker's own walk over the same memory, between batches: once per
 * input, and only in inputs that allow it (r->may_sample: a cold walk of a
 * 270-frame stack of heap frames costs as much as a hundred events).
 */
static void op_sample(struct run *r)
{
        if (r->sampled || !r->may_sample)
                return;
        r->sampled = true;
        batch_end(r);
        int rc = pywalk_sample(r->w, check_sampled, r);
        /* "a negative errno when the process is gone (-ESRCH) or unreadable" */
        CHECK(rc == 0 || (r->l->mem.fail && (fatal(rc) || rc == -EFAULT)),
              "%s: pywalk_sample returned %d", r->l->v->name, rc);
}

static void undo(struct run *r)
{
        while (r->n_patches) {
                struct patch *pa = &r->patches[--r->n_patches];
                memcpy(pa->at, pa->old, pa->len);
                free(pa->old);
        }
        r->l->mem.fail = 0;
        for (size_t i = 0; i < r->n_drops; i++)
                r->drops[i]->dropped = false;
        r->n_drops = 0;
}

static struct bpfw_event *scratch;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        (void)argc, (void)argv;
        verbose = getenv("FUZZ_VERBOSE") != NULL;
        layouts = calloc(IMGVER_COUNT, sizeof(*layouts));
        scratch = malloc(sizeof(*scratch));
        CHECK(layouts && scratch, "out of memory");
        for (size_t i = 0; i < IMGVER_COUNT; i++)
                build_layout(&layouts[i], &imgver_table[i]);
        /* Each layout's threads, decoded from their own chains: the truth holds. */
        for (uint8_t i = 0; i < IMGVER_COUNT; i++)
                LLVMFuzzerTestOneInput(&i, 1);
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct in in = {data, size};
        uint8_t first = get8(&in);
        struct run r = {.l = &layouts[(first & 0x3f) % IMGVER_COUNT], .e = scratch};
        /*
         * A sample where the top bit is set; heap frames (<=3.10) cost most
         * to walk cold: there, where the two top bits are.
         */
        r.may_sample = (first & 0x80) && (r.l->p.L.frames == PYL_FRAMES_INTERP || (first & 0x40));
        struct pyimg *p = &r.l->p;
        char err[256] = "";
        int rc = pywalk_open(&p->target, &r.l->mem.m, &r.w, err, sizeof(err));
        CHECK(rc == 0, "%s: pywalk_open: %d %s", r.l->v->name, rc, err);
        struct bpfw_proc proc;
        rc = pywalk_bpf_proc(r.w, &proc, err, sizeof(err));
        CHECK(rc == 0, "%s: pywalk_bpf_proc: %d %s", r.l->v->name, rc, err);
        if (!in.n) /* the layout alone: each thread's own chain, once */
                for (uint8_t t = 0; t < r.l->n_th; t++)
                        op_event(&r, &(struct in){&t, 1});
        /* Operations: 0-2 an event, 3 reads fail, 4 end of batch, 5 patch, 6 sample, 7 drop. */
        for (int ops = 0; in.n && ops < MAX_OPS; ops++) {
                uint8_t op = get8(&in);
                switch (op % 8) {
                case 3:
                        op_fail(&r, &in);
                        break;
                case 4:
                        batch_end(&r);
                        break;
                case 5:
                        op_patch(&r, &in);
                        break;
                case 6:
                        op_sample(&r);
                        break;
                case 7:
                        op_drop(&r, &in);
                        break;
                default:
                        op_event(&r, &in);
                        break;
                }
        }
        batch_end(&r);
        pywalk_close(r.w);
        undo(&r);
        return 0;
}
