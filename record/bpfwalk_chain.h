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

#ifndef BPFW_INLINE
#define BPFW_INLINE static inline __attribute__((always_inline))
#endif

/* The 8 bytes at `off` of a frame window (off masked into it for the verifier). */
BPFW_INLINE __u64 bpfw_win64(const __u8 *win, __u32 off)
{
        __u64 v;
        __builtin_memcpy(&v, win + (off & (BPFW_FRAME_WINDOW - 1)), 8);
        return v;
}

BPFW_INLINE __u32 bpfw_win32(const __u8 *win, __u32 off)
{
        __u32 v;
        __builtin_memcpy(&v, win + (off & (BPFW_FRAME_WINDOW - 1)), 4);
        return v;
}

BPFW_INLINE __u8 bpfw_win8(const __u8 *win, __u32 off)
{
        return win[off & (BPFW_FRAME_WINDOW - 1)];
}

/*
 * Copy the frame chain of the thread state at `tstate` into e->frames (leaf
 * first) and set e->depth, e->status (BPFW_OK or BPFW_FAULT) and the
 * truncation flag. `win` is scratch of BPFW_FRAME_WINDOW + 8 bytes.
 */
BPFW_INLINE void bpfw_walk(const struct bpfw_layout *L, __u64 tstate, struct bpfw_event *e,
                           __u8 *win)
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
        __u32 span = L->fr_span;
        if (span > BPFW_FRAME_WINDOW)
                span = BPFW_FRAME_WINDOW;
        if (span < 8)
                span = 8;
        __u32 lo = L->fr_lo;
        __u32 i;
        for (i = 0; i < BPFW_MAX_DEPTH; i++) {
                if (!addr)
                        break;
                if (BPFW_READ(win, span, addr + lo) < 0) {
                        e->status = BPFW_FAULT;
                        break;
                }
                struct bpfw_frame *f = &e->frames[i];
                f->addr = addr;
                f->code = bpfw_win64(win, (__u32)L->fr_code - lo);
                f->pos = L->lasti_pointer
                             ? bpfw_win64(win, (__u32)L->fr_lasti - lo)
                             : (__u64)(__s64)(__s32)bpfw_win32(win, (__u32)L->fr_lasti - lo);
                f->owner = L->fr_owner >= 0 ? bpfw_win8(win, (__u32)L->fr_owner - lo) : 0;
                f->entry = L->fr_is_entry >= 0 ? bpfw_win8(win, (__u32)L->fr_is_entry - lo) : 0;
                f->pad[0] = f->pad[1] = 0;
                f->tlbc = L->fr_tlbc_index >= 0
                              ? (__s32)bpfw_win32(win, (__u32)L->fr_tlbc_index - lo)
                              : 0;
                addr = bpfw_win64(win, (__u32)L->fr_back - lo);
        }
        e->depth = i;
        if (addr && e->status == BPFW_OK)
                e->flags |= BPFW_F_TRUNCATED;
}

#endif
