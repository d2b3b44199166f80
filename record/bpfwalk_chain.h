/*
 * bpfwalk_chain.h - the frame walk of the in-kernel sampler, as one function
 * compiled twice: into the BPF program (bpfwalk.bpf.c), where it runs in a
 * timer interrupt on the CPU of the thread it reads, and into the tests
 * (tests/record/test_bpfwalk.c), where it reads the synthetic interpreter
 * images of every layout the walker tests build, so that a layout mistake
 * is caught on any machine, kernel or not.
 *
 * The includer defines BPFW_READ(dst, len, addr): copy `len` bytes of the
 * target at `addr` to `dst`, 0 or a negative value. In the kernel that is
 * bpf_probe_read_user() of the interrupted thread's own memory: nothing of
 * that thread changes while it is read, and a page that is not resident
 * fails (no page faults in an interrupt). Bounded like everything the BPF
 * verifier accepts: at most BPFW_MAX_DEPTH frames, each read in one window
 * of at most BPFW_FRAME_WINDOW bytes. It only copies: which frames to show,
 * their code objects and lines are the recorder's (pywalk_bpf_decode()).
 */
#ifndef PYFLAME_BPFWALK_CHAIN_H
#define PYFLAME_BPFWALK_CHAIN_H

#include "bpfwalk_shared.h"

/*
 * BPFW_CODE_KNOWN(code, ident): nonzero when the recorder has told the walk
 * it knows that code object (struct bpfw_known_set); the walk flags events
 * with one it does not (BPFW_F_NEW_CODE). Known by default.
 */
#ifndef BPFW_CODE_KNOWN
#define BPFW_CODE_KNOWN(code, ident) 1
#endif
/*
 * BPFW_CODE_LASTING(code): the identity of a code object the recorder has
 * marked lasting (struct bpfw_known_set), taken without reading the
 * object; 0 when none. None by default.
 */
#ifndef BPFW_CODE_LASTING
#define BPFW_CODE_LASTING(code) 0
#endif

#ifndef BPFW_INLINE
#define BPFW_INLINE static inline __attribute__((always_inline))
#endif
/* How bpfw_step() is declared: a callback of its own where BPFW_LOOP (bpf_loop) calls it. */
#ifndef BPFW_STEP_ATTR
#define BPFW_STEP_ATTR BPFW_INLINE
#endif

/*
 * The 8, 4 or 1 bytes at `pos` of the walk's buffer (8-aligned), `pos`
 * masked into it for the verifier. A field at an aligned position (where
 * the frame is, and pointers always are) is one load; else it is copied
 * byte by byte.
 */
BPFW_INLINE __u64 bpfw_get64(const __u8 *buf, __u32 pos)
{
        pos &= BPFW_POS_MASK;
        if (!(pos & 7))
                return *(const __u64 *)(const void *)(buf + pos);
        __u64 v;
        __builtin_memcpy(&v, buf + pos, 8);
        return v;
}

BPFW_INLINE __u32 bpfw_get32(const __u8 *buf, __u32 pos)
{
        pos &= BPFW_POS_MASK;
        if (!(pos & 3))
                return *(const __u32 *)(const void *)(buf + pos);
        __u32 v;
        __builtin_memcpy(&v, buf + pos, 4);
        return v;
}

BPFW_INLINE __u8 bpfw_get8(const __u8 *buf, __u32 pos)
{
        return buf[pos & BPFW_POS_MASK];
}

/* The same in the code object's buffer (BPFW_CO_SCRATCH bytes), copied whatever the alignment. */
BPFW_INLINE __u64 bpfw_coget64(const __u8 *buf, __u32 pos)
{
        __u64 v;
        __builtin_memcpy(&v, buf + (pos & (BPFW_FRAME_WINDOW - 1)), 8);
        return v;
}

BPFW_INLINE __u32 bpfw_coget32(const __u8 *buf, __u32 pos)
{
        __u32 v;
        __builtin_memcpy(&v, buf + (pos & (BPFW_FRAME_WINDOW - 1)), 4);
        return v;
}

/* The walk's state, one frame to the next (a bpf_loop() callback's context in the kernel). */
struct bpfw_walk {
        const struct bpfw_layout *L;
        struct bpfw_event *e;
        __u8 *buf;
        __u8 *cobuf;            /* BPFW_CO_SCRATCH bytes: a code object's identity fields */
        __u64 addr;             /* the next frame, 0: the chain ended */
        __u64 have_lo, have_hi; /* what buf holds */
        __u32 span, lo, block;
        __u32 depth;
        /*
         * The code objects identified so far in this walk, most recent
         * first: one instant's, so an object met again (a recursion, a loop
         * of calls) is the same object, with no second read.
         */
        __u64 seen_code[BPFW_SEEN_CODES], seen_ident[BPFW_SEEN_CODES];
};

/* Frame i: copy it into the event. Returns 1 to stop (chain ended, read failed), 0 to go on. */
BPFW_STEP_ATTR int bpfw_step(__u32 i, void *ctx)
{
        struct bpfw_walk *c = ctx;
        struct bpfw_event *e = c->e;
        const struct bpfw_layout *L = c->L;
        if (!c->addr)
                return 1;
        /* (Bounded again here: the verifier knows nothing of what the context holds.) */
        __u32 span = c->span <= BPFW_FRAME_WINDOW ? c->span : BPFW_FRAME_WINDOW;
        __u32 block = c->block <= BPFW_BLOCK ? c->block : BPFW_BLOCK;
        __u64 w0 = c->addr + c->lo, w1 = w0 + span;
        if (w0 < c->have_lo || w1 > c->have_hi) {
                /* From an 8-aligned address: aligned fields stay aligned in buf. */
                __u64 from = w0 & ~7ull;
                if (block > span && w1 > block)
                        from = (w1 - block + 7) & ~7ull;
                /* At most BPFW_BLOCK: the mask and the bound are for the verifier. */
                __u32 len = (__u32)(w1 - from) & BPFW_POS_MASK;
                if (len > BPFW_BLOCK)
                        len = BPFW_BLOCK;
                if (BPFW_READ(c->buf, len, from) < 0) {
                        __u64 near = w0 & ~7ull;
                        len = (__u32)(w1 - near) & BPFW_POS_MASK;
                        if (len > BPFW_FRAME_WINDOW + 8)
                                len = BPFW_FRAME_WINDOW + 8;
                        if (near == from || BPFW_READ(c->buf, len, near) < 0) {
                                e->status = BPFW_FAULT;
                                return 1;
                        }
                        from = near;
                }
                c->have_lo = from;
                c->have_hi = from + len;
        }
        /* Where the frame's first field is in buf; fields follow at their offsets from it. */
        __u32 at = (__u32)(w0 - c->have_lo) - c->lo;
        const __u8 *buf = c->buf;
        /* i < BPFW_MAX_DEPTH (the loop's count); the mask is for the verifier. */
        struct bpfw_frame *f = &e->frames[i & (BPFW_MAX_DEPTH - 1)];
        f->addr = c->addr;
        f->code = bpfw_get64(buf, at + (__u32)L->fr_code);
        f->pos = L->lasti_pointer ? bpfw_get64(buf, at + (__u32)L->fr_lasti)
                                  : (__u64)(__s64)(__s32)bpfw_get32(buf, at + (__u32)L->fr_lasti);
        f->owner = L->fr_owner >= 0 ? bpfw_get8(buf, at + (__u32)L->fr_owner) : 0;
        f->entry = L->fr_is_entry >= 0 ? bpfw_get8(buf, at + (__u32)L->fr_is_entry) : 0;
        f->fflags = f->pad = 0;
        f->tlbc = L->fr_tlbc_index >= 0 ? (__s32)bpfw_get32(buf, at + (__u32)L->fr_tlbc_index) : 0;
        c->addr = bpfw_get64(buf, at + (__u32)L->fr_back);
        /* The code object's identity now, while the frame holds it alive. */
        __u64 code = f->code & L->fr_code_mask;
        f->ident = 0;
        for (__u32 k = 0; k < BPFW_SEEN_CODES; k++)
                if (code && c->seen_code[k] == code)
                        f->ident = c->seen_ident[k];
        if (code && !f->ident && f->owner < L->owner_skip_from) {
                /* A function's code the recorder vouches for: no read (it checks). */
                f->ident = BPFW_CODE_LASTING(code);
                if (f->ident)
                        f->fflags |= BPFW_FR_TABLE_IDENT;
        }
        __u32 cspan = L->co_span <= BPFW_FRAME_WINDOW ? L->co_span : BPFW_FRAME_WINDOW;
        /* (Entry frames carry no Python code; a code object that does not read: ident 0.) */
        if (code && !f->ident && f->owner < L->owner_skip_from &&
            BPFW_READ(c->cobuf, cspan, code + L->co_lo) >= 0) {
                __u32 clo = L->co_lo;
                const __u8 *cb = c->cobuf;
                f->ident = bpfw_ident(
                    bpfw_coget32(cb, (__u32)L->co_firstlineno - clo),
                    bpfw_coget64(cb, (__u32)L->co_filename - clo),
                    bpfw_coget64(cb, (__u32)L->co_name - clo),
                    bpfw_coget64(cb, (__u32)L->co_linetable - clo),
                    L->co_qualname >= 0 ? bpfw_coget64(cb, (__u32)L->co_qualname - clo) : 0);
                for (__u32 k = BPFW_SEEN_CODES - 1; k > 0; k--) {
                        c->seen_code[k] = c->seen_code[k - 1];
                        c->seen_ident[k] = c->seen_ident[k - 1];
                }
                c->seen_code[0] = code;
                c->seen_ident[0] = f->ident;
                if (!BPFW_CODE_KNOWN(code, f->ident))
                        e->flags |= BPFW_F_NEW_CODE;
        }
        c->depth = i + 1;
        return 0;
}

/*
 * Copy the frame chain of the thread state at `tstate` into e->frames (leaf
 * first) and set e->depth, e->status (BPFW_OK or BPFW_FAULT) and the
 * truncation flag. `buf` is scratch of BPFW_SCRATCH bytes, `cobuf` of
 * BPFW_CO_SCRATCH. Each frame's code object is read too, for its identity
 * (struct bpfw_frame.ident).
 *
 * A read costs about 40 ns in the kernel whatever its length up to a few
 * hundred bytes; a frame's fields take one. Where a frame's callers lie
 * just below it (3.11+: frames are pushed upwards on a data stack), up to
 * L->fr_block bytes ending at its window are read instead, and the frames
 * found inside cost no read of their own; when such a block does not read
 * (the memory below a stack chunk's first frame may not be mapped), the
 * window alone is. In the kernel the frames are visited by bpf_loop() (the
 * verifier checks one step, not 256), elsewhere by a plain loop.
 */
BPFW_INLINE void bpfw_walk(const struct bpfw_layout *L, __u64 tstate, struct bpfw_event *e,
                           __u8 *buf, __u8 *cobuf)
{
        __u64 addr = 0;
        e->depth = 0;
        e->status = BPFW_OK;
        if (BPFW_READ(&addr, 8, tstate + (__s64)L->ts_frame) < 0) {
                e->status = BPFW_FAULT;
                return;
        }
        if (L->cframe_current >= 0 && addr &&
            BPFW_READ(&addr, 8, addr + (__s64)L->cframe_current) < 0) {
                e->status = BPFW_FAULT;
                return;
        }
        struct bpfw_walk c = {
            .L = L, .e = e, .buf = buf, .cobuf = cobuf, .addr = addr, .have_lo = 1};
        c.span = L->fr_span;
        if (c.span > BPFW_FRAME_WINDOW)
                c.span = BPFW_FRAME_WINDOW;
        if (c.span < 8)
                c.span = 8;
        c.lo = L->fr_lo;
        c.block = L->fr_block > BPFW_BLOCK ? BPFW_BLOCK : L->fr_block;
#ifdef BPFW_LOOP
        BPFW_LOOP(BPFW_MAX_DEPTH, bpfw_step, &c);
#else
        for (__u32 i = 0; i < BPFW_MAX_DEPTH; i++)
                if (bpfw_step(i, &c))
                        break;
#endif
        e->depth = c.depth;
        if (c.addr && e->status == BPFW_OK)
                e->flags |= BPFW_F_TRUNCATED;
}

/* The search of an interpreter's thread states (a bpf_loop() callback's context in the kernel). */
struct bpfw_search {
        __u64 next;  /* the next thread state, 0: the list ended */
        __u64 self;  /* the thread's own id (pthread_self()) */
        __u64 found; /* the state whose thread_id is `self`, 0: none yet */
        __s32 off_next, off_id;
        __u32 done; /* the list was read to its end or to `found` */
};

/* One thread state of the list. Returns 1 to stop (found, ended, a read failed), 0 to go on. */
BPFW_STEP_ATTR int bpfw_search_step(__u32 i, void *ctx)
{
        struct bpfw_search *s = ctx;
        __u64 id = 0, next = 0;
        (void)i;
        if (!s->next) {
                s->done = 1;
                return 1;
        }
        if (BPFW_READ(&id, 8, s->next + (__s64)s->off_id) < 0 ||
            BPFW_READ(&next, 8, s->next + (__s64)s->off_next) < 0)
                return 1;
        if (id == s->self) {
                s->found = s->next;
                s->done = 1;
                return 1;
        }
        s->next = next;
        return 0;
}

/*
 * The thread state of the thread whose id (pthread_self()) is `self`, from
 * the main interpreter's list: a thread the recorder has not seen yet and
 * that does not hold the GIL. Returns 1 and sets *tstate; 0 when the whole
 * list was read and no state is the thread's (it runs no Python: a C
 * library's thread, or a Python thread before its state is bound to it or
 * after it is deleted); -1 when that is not known (a read failed, no list,
 * more than BPFW_MAX_LIST states, no id to compare, or subinterpreters,
 * whose lists are not searched). A list changed
 * by another CPU meanwhile can at worst miss a thread being created.
 */
BPFW_INLINE int bpfw_find_thread(const struct bpfw_proc *P, __u64 self, __u64 *tstate)
{
        struct bpfw_search s = {
            .self = self, .off_next = P->L.ts_next, .off_id = P->L.ts_thread_id};
        *tstate = 0;
        if (!self || !P->threads_head_addr || P->L.ts_next < 0 || P->L.ts_thread_id < 0 ||
            BPFW_READ(&s.next, 8, P->threads_head_addr) < 0)
                return -1;
#ifdef BPFW_LOOP
        BPFW_LOOP(BPFW_MAX_LIST, bpfw_search_step, &s);
#else
        for (__u32 i = 0; i < BPFW_MAX_LIST; i++)
                if (bpfw_search_step(i, &s))
                        break;
#endif
        if (!s.done)
                return -1;
        *tstate = s.found;
        /* (In none of the main interpreter's states: of another interpreter's, maybe.) */
        return s.found ? 1 : P->flags & BPFW_P_SUBINTERPS ? -1 : 0;
}

#endif
