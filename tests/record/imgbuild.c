/*
 * imgbuild.c - synthetic CPython memory images (see imgbuild.h).
 */
#include "imgbuild.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMG_BASE 0x10000000ull
#define IMG_GAP  0x10000ull

static void die(const char *what)
{
        fprintf(stderr, "imgbuild: %s\n", what);
        abort();
}

struct img *img_new(void)
{
        struct img *g = calloc(1, sizeof(*g));
        if (!g)
                die("out of memory");
        g->next = IMG_BASE;
        return g;
}

void img_free(struct img *g)
{
        if (!g)
                return;
        for (size_t i = 0; i < g->n; i++)
                free(g->r[i].data);
        free(g->r);
        free(g->mr);
        free(g);
}

uint64_t img_alloc(struct img *g, size_t len)
{
        if (g->n == g->cap) {
                g->cap = g->cap ? g->cap * 2 : 64;
                g->r = realloc(g->r, g->cap * sizeof(*g->r));
                if (!g->r)
                        die("out of memory");
        }
        uint64_t addr = g->next;
        g->next = (addr + len + IMG_GAP + 63) & ~63ull;
        struct img_region *r = &g->r[g->n++];
        r->addr = addr;
        r->len = len;
        r->data = calloc(1, len ? len : 1);
        r->dropped = false;
        if (!r->data)
                die("out of memory");
        return addr;
}

uint8_t *img_at(struct img *g, uint64_t addr, size_t len)
{
        for (size_t i = 0; i < g->n; i++) {
                struct img_region *r = &g->r[i];
                if (addr >= r->addr && addr + len <= r->addr + r->len)
                        return r->data + (addr - r->addr);
        }
        die("write outside the image");
        return NULL;
}

void img_u64(struct img *g, uint64_t addr, uint64_t v)
{
        memcpy(img_at(g, addr, 8), &v, 8);
}

void img_u32(struct img *g, uint64_t addr, uint32_t v)
{
        memcpy(img_at(g, addr, 4), &v, 4);
}

void img_u8(struct img *g, uint64_t addr, uint8_t v)
{
        *img_at(g, addr, 1) = v;
}

uint64_t img_get_u64(struct img *g, uint64_t addr)
{
        uint64_t v;
        memcpy(&v, img_at(g, addr, 8), 8);
        return v;
}

void img_drop(struct img *g, uint64_t addr)
{
        for (size_t i = 0; i < g->n; i++)
                if (g->r[i].addr == addr)
                        g->r[i].dropped = true;
}

void img_memsrc(struct img *g, struct memsrc *m)
{
        free(g->mr);
        g->mr = calloc(g->n ? g->n : 1, sizeof(*g->mr));
        size_t k = 0;
        for (size_t i = 0; i < g->n; i++)
                if (!g->r[i].dropped)
                        g->mr[k++] =
                            (struct memsrc_region){g->r[i].addr, g->r[i].data, g->r[i].len};
        memsrc_init_image(m, g->mr, k);
}

/* ---- _Py_DebugOffsets, transcribed from the reference doc (not from pylayout.c) ---- */

enum dv {
        DV_COOKIE, /* placeholder, written separately */
        DV_RT_SIZE,
        DV_RT_INTERP_HEAD,
        DV_IS_SIZE,
        DV_IS_ID,
        DV_IS_NEXT,
        DV_IS_THREADS_HEAD,
        DV_IS_CEVAL_GIL,
        DV_IS_GIL_RS,
        DV_IS_GIL_ENABLED,
        DV_IS_GIL_LOCKED,
        DV_IS_GIL_HOLDER,
        DV_TS_SIZE,
        DV_TS_NEXT,
        DV_TS_INTERP,
        DV_TS_CURRENT_FRAME,
        DV_TS_BASE_FRAME,
        DV_TS_THREAD_ID,
        DV_TS_NATIVE_TID,
        DV_TS_DATASTACK,
        DV_FR_SIZE,
        DV_FR_PREVIOUS,
        DV_FR_EXECUTABLE,
        DV_FR_INSTR_PTR,
        DV_FR_OWNER,
        DV_FR_TLBC_INDEX,
        DV_CO_SIZE,
        DV_CO_FILENAME,
        DV_CO_NAME,
        DV_CO_QUALNAME,
        DV_CO_LINETABLE,
        DV_CO_FIRSTLINENO,
        DV_CO_ADAPTIVE,
        DV_CO_TLBC,
        DV_OB_SIZE,
        DV_OB_TYPE,
        DV_TY_SIZE,
        DV_TY_FLAGS,
        DV_BY_SIZE,
        DV_BY_OB_SIZE,
        DV_BY_SVAL,
        DV_UN_SIZE,
        DV_UN_STATE,
        DV_UN_LENGTH,
        DV_UN_ASCII_SIZE,
        DV_IS_MODULES,
        DV_DI_SIZE,
        DV_DI_KEYS,
        DV_DI_VALUES,
        DV_LO_SIZE,
        DV_LO_TAG,
        DV_LO_DIGIT,
        DV_TY_NAME, /* 3.14+, for asyncio tasks */
        DV_SE_SIZE,
        DV_SE_MASK,
        DV_SE_TABLE,
        DV_GE_SIZE,
        DV_GE_IFRAME,
        DV_GE_STATE,
        DV_FR_STACKPOINTER,
        N_DV
};

/* Byte positions in _Py_DebugOffsets for 3.13, 3.14, 3.15 (0: absent). */
static const uint16_t dpos[3][N_DV] = {
    {
        [DV_RT_SIZE] = 24,        [DV_RT_INTERP_HEAD] = 40,  [DV_IS_SIZE] = 48,
        [DV_IS_ID] = 56,          [DV_IS_NEXT] = 64,         [DV_IS_THREADS_HEAD] = 72,
        [DV_IS_CEVAL_GIL] = 112,  [DV_IS_GIL_RS] = 120,      [DV_IS_GIL_ENABLED] = 128,
        [DV_IS_GIL_LOCKED] = 136, [DV_IS_GIL_HOLDER] = 144,  [DV_TS_SIZE] = 152,
        [DV_TS_NEXT] = 168,       [DV_TS_INTERP] = 176,      [DV_TS_CURRENT_FRAME] = 184,
        [DV_TS_THREAD_ID] = 192,  [DV_TS_NATIVE_TID] = 200,  [DV_TS_DATASTACK] = 208,
        [DV_FR_SIZE] = 224,       [DV_FR_PREVIOUS] = 232,    [DV_FR_EXECUTABLE] = 240,
        [DV_FR_INSTR_PTR] = 248,  [DV_FR_OWNER] = 264,       [DV_CO_SIZE] = 272,
        [DV_CO_FILENAME] = 280,   [DV_CO_NAME] = 288,        [DV_CO_QUALNAME] = 296,
        [DV_CO_LINETABLE] = 304,  [DV_CO_FIRSTLINENO] = 312, [DV_CO_ADAPTIVE] = 344,
        [DV_OB_SIZE] = 352,       [DV_OB_TYPE] = 360,        [DV_TY_SIZE] = 368,
        [DV_TY_FLAGS] = 392,      [DV_BY_SIZE] = 512,        [DV_BY_OB_SIZE] = 520,
        [DV_BY_SVAL] = 528,       [DV_UN_SIZE] = 536,        [DV_UN_STATE] = 544,
        [DV_UN_LENGTH] = 552,     [DV_UN_ASCII_SIZE] = 560,  [DV_IS_MODULES] = 88,
        [DV_DI_SIZE] = 448,       [DV_DI_KEYS] = 456,        [DV_DI_VALUES] = 464,
        [DV_LO_SIZE] = 488,       [DV_LO_TAG] = 496,         [DV_LO_DIGIT] = 504,
    },
    {
        [DV_RT_SIZE] = 24,           [DV_RT_INTERP_HEAD] = 40,
        [DV_IS_SIZE] = 48,           [DV_IS_ID] = 56,
        [DV_IS_NEXT] = 64,           [DV_IS_THREADS_HEAD] = 72,
        [DV_IS_CEVAL_GIL] = 120,     [DV_IS_GIL_RS] = 128,
        [DV_IS_GIL_ENABLED] = 136,   [DV_IS_GIL_LOCKED] = 144,
        [DV_IS_GIL_HOLDER] = 152,    [DV_TS_SIZE] = 176,
        [DV_TS_NEXT] = 192,          [DV_TS_INTERP] = 200,
        [DV_TS_CURRENT_FRAME] = 208, [DV_TS_THREAD_ID] = 216,
        [DV_TS_NATIVE_TID] = 224,    [DV_TS_DATASTACK] = 232,
        [DV_FR_SIZE] = 248,          [DV_FR_PREVIOUS] = 256,
        [DV_FR_EXECUTABLE] = 264,    [DV_FR_INSTR_PTR] = 272,
        [DV_FR_OWNER] = 288,         [DV_FR_TLBC_INDEX] = 304,
        [DV_CO_SIZE] = 312,          [DV_CO_FILENAME] = 320,
        [DV_CO_NAME] = 328,          [DV_CO_QUALNAME] = 336,
        [DV_CO_LINETABLE] = 344,     [DV_CO_FIRSTLINENO] = 352,
        [DV_CO_ADAPTIVE] = 384,      [DV_CO_TLBC] = 392,
        [DV_OB_SIZE] = 400,          [DV_OB_TYPE] = 408,
        [DV_TY_SIZE] = 416,          [DV_TY_FLAGS] = 440,
        [DV_BY_SIZE] = 592,          [DV_BY_OB_SIZE] = 600,
        [DV_BY_SVAL] = 608,          [DV_UN_SIZE] = 616,
        [DV_UN_STATE] = 624,         [DV_UN_LENGTH] = 632,
        [DV_UN_ASCII_SIZE] = 640,    [DV_IS_MODULES] = 96,
        [DV_DI_SIZE] = 528,          [DV_DI_KEYS] = 536,
        [DV_DI_VALUES] = 544,        [DV_LO_SIZE] = 568,
        [DV_LO_TAG] = 576,           [DV_LO_DIGIT] = 584,
        [DV_TY_NAME] = 424,          [DV_SE_SIZE] = 496,
        [DV_SE_MASK] = 520,          [DV_SE_TABLE] = 512,
        [DV_GE_SIZE] = 664,          [DV_GE_IFRAME] = 680,
        [DV_GE_STATE] = 688,         [DV_FR_STACKPOINTER] = 296,
    },
    {
        [DV_RT_SIZE] = 24,         [DV_RT_INTERP_HEAD] = 40, [DV_IS_SIZE] = 48,
        [DV_IS_ID] = 56,           [DV_IS_NEXT] = 64,        [DV_IS_THREADS_HEAD] = 72,
        [DV_IS_CEVAL_GIL] = 120,   [DV_IS_GIL_RS] = 128,     [DV_IS_GIL_ENABLED] = 136,
        [DV_IS_GIL_LOCKED] = 144,  [DV_IS_GIL_HOLDER] = 152, [DV_TS_SIZE] = 176,
        [DV_TS_NEXT] = 192,        [DV_TS_INTERP] = 200,     [DV_TS_CURRENT_FRAME] = 208,
        [DV_TS_BASE_FRAME] = 216,  [DV_TS_THREAD_ID] = 240,  [DV_TS_NATIVE_TID] = 248,
        [DV_TS_DATASTACK] = 256,   [DV_FR_SIZE] = 312,       [DV_FR_PREVIOUS] = 320,
        [DV_FR_EXECUTABLE] = 328,  [DV_FR_INSTR_PTR] = 336,  [DV_FR_OWNER] = 352,
        [DV_FR_TLBC_INDEX] = 368,  [DV_CO_SIZE] = 376,       [DV_CO_FILENAME] = 384,
        [DV_CO_NAME] = 392,        [DV_CO_QUALNAME] = 400,   [DV_CO_LINETABLE] = 408,
        [DV_CO_FIRSTLINENO] = 416, [DV_CO_ADAPTIVE] = 448,   [DV_CO_TLBC] = 456,
        [DV_OB_SIZE] = 464,        [DV_OB_TYPE] = 472,       [DV_IS_MODULES] = 96,
    },
};
static const uint16_t dsize[3] = {584, 760, 888};

/* ---- objects ------------------------------------------------------------------ */

static uint64_t new_type(struct pyimg *p, uint64_t flags)
{
        uint64_t t = img_alloc(p->img, 512);
        img_u64(p->img, t + (uint64_t)p->L.tp_flags, flags);
        return t;
}

static uint64_t new_object(struct pyimg *p, size_t len, uint64_t type)
{
        uint64_t o = img_alloc(p->img, len);
        img_u64(p->img, o + (uint64_t)p->L.ob_type - 8, 1); /* ob_refcnt: alive */
        img_u64(p->img, o + (uint64_t)p->L.ob_type, type);
        return o;
}

static size_t interp_size(const struct pylayout *L)
{
        int32_t offs[] = {L->is_next, L->is_threads_head, L->is_id, L->is_ceval_gil, L->is_modules};
        int32_t m = 0;
        for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++)
                if (offs[i] > m)
                        m = offs[i];
        return (size_t)m + 8 + 64 + 256; /* the gil struct sits in the last 256 bytes */
}

#define TSTATE_SIZE 1024
#define FRAME_SIZE  128

static void write_debug_offsets(struct pyimg *p, size_t rt_size)
{
        const struct pylayout *L = &p->L;
        int v = L->minor - 13;
        const uint16_t *pos = dpos[v];
        uint64_t gil_rs = interp_size(L) - 256;
        uint64_t val[N_DV] = {
            [DV_RT_SIZE] = rt_size,
            [DV_RT_INTERP_HEAD] = (uint64_t)L->rt_interp_head,
            [DV_IS_SIZE] = interp_size(L),
            [DV_IS_ID] = (uint64_t)L->is_id,
            [DV_IS_NEXT] = (uint64_t)L->is_next,
            [DV_IS_THREADS_HEAD] = (uint64_t)L->is_threads_head,
            [DV_IS_CEVAL_GIL] = (uint64_t)L->is_ceval_gil,
            [DV_IS_GIL_RS] = gil_rs,
            [DV_IS_GIL_ENABLED] = L->gil_enabled >= 0 ? (uint64_t)L->gil_enabled : 0,
            [DV_IS_GIL_LOCKED] = gil_rs + (uint64_t)L->gil_locked,
            [DV_IS_GIL_HOLDER] = gil_rs + (uint64_t)L->gil_holder,
            [DV_TS_SIZE] = TSTATE_SIZE / 2,
            [DV_TS_NEXT] = (uint64_t)L->ts_next,
            [DV_TS_INTERP] = (uint64_t)L->ts_interp,
            [DV_TS_CURRENT_FRAME] = (uint64_t)L->ts_frame,
            [DV_TS_BASE_FRAME] = L->ts_base_frame >= 0 ? (uint64_t)L->ts_base_frame : 0,
            [DV_TS_THREAD_ID] = (uint64_t)L->ts_thread_id,
            [DV_TS_NATIVE_TID] = (uint64_t)L->ts_native_tid,
            [DV_TS_DATASTACK] = (uint64_t)L->ts_datastack_chunk,
            [DV_FR_SIZE] = L->fr_read + 8,
            [DV_FR_PREVIOUS] = (uint64_t)L->fr_back,
            [DV_FR_EXECUTABLE] = (uint64_t)L->fr_code,
            [DV_FR_INSTR_PTR] = (uint64_t)L->fr_lasti,
            [DV_FR_OWNER] = (uint64_t)L->fr_owner,
            [DV_FR_TLBC_INDEX] = L->fr_tlbc_index >= 0 ? (uint64_t)L->fr_tlbc_index : 0,
            [DV_CO_SIZE] = (uint64_t)L->co_code_adaptive + 8,
            [DV_CO_FILENAME] = (uint64_t)L->co_filename,
            [DV_CO_NAME] = (uint64_t)L->co_name,
            [DV_CO_QUALNAME] = (uint64_t)L->co_qualname,
            [DV_CO_LINETABLE] = (uint64_t)L->co_linetable,
            [DV_CO_FIRSTLINENO] = (uint64_t)L->co_firstlineno,
            [DV_CO_ADAPTIVE] = (uint64_t)L->co_code_adaptive,
            [DV_CO_TLBC] = L->co_tlbc >= 0 ? (uint64_t)L->co_tlbc : 0,
            [DV_OB_SIZE] = L->free_threaded ? 32 : 16,
            [DV_OB_TYPE] = (uint64_t)L->ob_type,
            [DV_TY_SIZE] = 416,
            [DV_TY_FLAGS] = (uint64_t)L->tp_flags,
            [DV_BY_SIZE] = (uint64_t)L->bytes_sval + 8,
            [DV_BY_OB_SIZE] = (uint64_t)L->bytes_size,
            [DV_BY_SVAL] = (uint64_t)L->bytes_sval,
            [DV_UN_SIZE] = (uint64_t)L->str_compact_size + 8,
            [DV_UN_STATE] = (uint64_t)L->str_state,
            [DV_UN_LENGTH] = (uint64_t)L->str_length,
            [DV_UN_ASCII_SIZE] = (uint64_t)L->str_ascii_size,
            [DV_IS_MODULES] = (uint64_t)L->is_modules,
            [DV_DI_SIZE] = (uint64_t)L->dict_values + 8,
            [DV_DI_KEYS] = (uint64_t)L->dict_keys,
            [DV_DI_VALUES] = (uint64_t)L->dict_values,
            [DV_LO_SIZE] = (uint64_t)L->int_digits + 8,
            [DV_LO_TAG] = (uint64_t)L->int_value,
            [DV_LO_DIGIT] = (uint64_t)L->int_digits,
            [DV_TY_NAME] = L->tp_name >= 0 ? (uint64_t)L->tp_name : 0,
            [DV_SE_SIZE] = L->set_table >= 0 ? (uint64_t)L->set_table + 72 : 0,
            [DV_SE_MASK] = L->set_mask >= 0 ? (uint64_t)L->set_mask : 0,
            [DV_SE_TABLE] = L->set_table >= 0 ? (uint64_t)L->set_table : 0,
            [DV_GE_SIZE] = L->gen_iframe >= 0 ? (uint64_t)L->gen_iframe + FRAME_SIZE : 0,
            [DV_GE_IFRAME] = L->gen_iframe >= 0 ? (uint64_t)L->gen_iframe : 0,
            [DV_GE_STATE] = L->gen_frame_state >= 0 ? (uint64_t)L->gen_frame_state : 0,
            [DV_FR_STACKPOINTER] = L->fr_stacktop >= 0 ? (uint64_t)L->fr_stacktop : 0,
        };
        uint8_t *d = img_at(p->img, p->runtime, dsize[v]);
        memcpy(d, "xdebugpy", 8);
        uint64_t ver = p->version_hex, ft = L->free_threaded;
        memcpy(d + 8, &ver, 8);
        memcpy(d + 16, &ft, 8);
        for (int i = 0; i < N_DV; i++)
                if (pos[i])
                        memcpy(d + pos[i], &val[i], 8);
}

void pyimg_sync(struct pyimg *p)
{
        img_memsrc(p->img, &p->mem);
}

void pyimg_init(struct pyimg *p, const struct pylayout *L, uint32_t version_hex)
{
        memset(p, 0, sizeof(*p));
        p->img = img_new();
        p->L = *L;
        p->version_hex = version_hex;
        p->chunk_bytes = 16384;
        p->tid_off = 720;
        bool py2 = L->strings == PYL_STR_PY2;
        p->code_type = new_type(p, 0);
        p->str_type = new_type(p, py2 ? 1ul << 27 : 1ul << 28);
        p->bytes_type = py2 ? p->str_type : new_type(p, 1ul << 27);
        p->unicode2_type = new_type(p, 1ul << 28);
        p->none_obj = new_object(p, 64, new_type(p, 0));
        p->dict_type = new_type(p, 1ul << 29);
        p->int_type = new_type(p, py2 ? 1ul << 23 : 1ul << 24);
        p->long_type = py2 ? new_type(p, 1ul << 24) : p->int_type;
        p->module_type = new_type(p, 0);
        size_t rt_size = 4096;
        if (L->rt_interp_head >= 0) {
                p->runtime = img_alloc(p->img, rt_size);
        } else {
                p->interp_head_var = img_alloc(p->img, 8);
                p->tstate_current_var = img_alloc(p->img, 8);
        }
        if (L->minor >= 13 && L->major == 3)
                write_debug_offsets(p, rt_size);
        if (L->owner_skip_from != PYL_OWNER_NONE && L->minor == 12) {
                int one = 1;
                p->trampoline_code =
                    pyimg_code(p, "<interpreter trampoline>", "<interpreter trampoline>", "<shim>",
                               0, &one, 1, 0);
        }
        struct pyfind_target *t = &p->target;
        t->pid = PYIMG_PID;
        t->version_hex = version_hex;
        t->version_exact = true;
        t->free_threaded = L->free_threaded;
        t->runtime_addr = p->runtime;
        t->runtime_size = p->runtime ? rt_size : 0;
        t->interp_head_addr = p->interp_head_var;
        t->tstate_current_addr = p->tstate_current_var;
        t->code_type_addr = p->code_type;
        t->str_type_addr = p->str_type;
        pyimg_add_interp(p, 0);
        pyimg_sync(p);
}

void pyimg_free(struct pyimg *p)
{
        img_free(p->img);
        memset(p, 0, sizeof(*p));
}

uint64_t pyimg_add_interp(struct pyimg *p, int64_t id)
{
        const struct pylayout *L = &p->L;
        if (p->n_interps == 4)
                die("too many interpreters");
        size_t size = interp_size(L);
        uint64_t is = img_alloc(p->img, size);
        if (L->is_id >= 0)
                img_u64(p->img, is + (uint64_t)L->is_id, (uint64_t)id);
        if (L->is_ceval_gil >= 0)
                img_u64(p->img, is + (uint64_t)L->is_ceval_gil, is + size - 256);
        if (L->gil_enabled >= 0)
                img_u32(p->img, is + size - 256 + (uint64_t)L->gil_enabled, 1);
        if (p->n_interps == 0) {
                if (p->runtime)
                        img_u64(p->img, p->runtime + (uint64_t)L->rt_interp_head, is);
                else
                        img_u64(p->img, p->interp_head_var, is);
        } else {
                img_u64(p->img, p->interps[p->n_interps - 1] + (uint64_t)L->is_next, is);
        }
        p->interps[p->n_interps++] = is;
        pyimg_sync(p);
        return is;
}

static void set_top(struct pyimg *p, int t, uint64_t frame)
{
        const struct pylayout *L = &p->L;
        struct pyimg_thread *th = &p->th[t];
        th->top = frame;
        if (L->cframe_current >= 0)
                img_u64(p->img, th->cframe + (uint64_t)L->cframe_current, frame);
        else
                img_u64(p->img, th->tstate + (uint64_t)L->ts_frame, frame);
}

int pyimg_add_thread(struct pyimg *p, uint64_t interp, int64_t native_tid)
{
        const struct pylayout *L = &p->L;
        if (p->n_th == PYIMG_MAX_THREADS)
                die("too many threads");
        int t = (int)p->n_th++;
        struct pyimg_thread *th = &p->th[t];
        memset(th, 0, sizeof(*th));
        th->tstate = img_alloc(p->img, TSTATE_SIZE);
        th->pthread = img_alloc(p->img, 1024);
        /* The first thread is the main thread: its TID is the PID. */
        img_u32(p->img, th->pthread + (uint64_t)p->tid_off,
                (uint32_t)(t == 0 ? PYIMG_PID : native_tid));
        uint64_t ts = th->tstate;
        img_u64(p->img, ts + (uint64_t)L->ts_interp, interp);
        img_u64(p->img, ts + (uint64_t)L->ts_thread_id, th->pthread);
        if (L->ts_native_tid >= 0)
                img_u64(p->img, ts + (uint64_t)L->ts_native_tid,
                        (uint64_t)(t == 0 ? PYIMG_PID : native_tid));
        uint64_t head = img_get_u64(p->img, interp + (uint64_t)L->is_threads_head);
        img_u64(p->img, ts + (uint64_t)L->ts_next, head);
        img_u64(p->img, interp + (uint64_t)L->is_threads_head, ts);
        if (L->ts_datastack_chunk >= 0) {
                th->chunk = img_alloc(p->img, p->chunk_bytes);
                img_u64(p->img, th->chunk + (uint64_t)L->chunk_size, p->chunk_bytes);
                th->chunk_top = th->chunk + (uint64_t)L->chunk_data;
                th->chunk_end = th->chunk + p->chunk_bytes;
                img_u64(p->img, ts + (uint64_t)L->ts_datastack_chunk, th->chunk);
                if (L->ts_datastack_top >= 0)
                        img_u64(p->img, ts + (uint64_t)L->ts_datastack_top, th->chunk_top);
        }
        if (L->cframe_current >= 0) {
                th->cframe = img_alloc(p->img, 64);
                img_u64(p->img, ts + (uint64_t)L->ts_frame, th->cframe);
        }
        if (L->ts_base_frame >= 0) {
                uint64_t base = ts + (uint64_t)L->ts_base_frame;
                img_u8(p->img, base + (uint64_t)L->fr_owner, L->owner_skip_from);
                set_top(p, t, base);
        }
        pyimg_sync(p);
        return t;
}

/* ---- strings -------------------------------------------------------------------- */

/* Decode UTF-8 (trusted, test input) into code points; returns the count. */
static size_t utf8_decode(const char *s, uint32_t *out, size_t max)
{
        const uint8_t *u = (const uint8_t *)s;
        size_t n = 0;
        while (*u && n < max) {
                uint32_t c;
                if (*u < 0x80) {
                        c = *u++;
                } else if ((*u & 0xe0) == 0xc0) {
                        c = (uint32_t)(u[0] & 0x1f) << 6 | (u[1] & 0x3f);
                        u += 2;
                } else if ((*u & 0xf0) == 0xe0) {
                        c = (uint32_t)(u[0] & 0x0f) << 12 | (uint32_t)(u[1] & 0x3f) << 6 |
                            (u[2] & 0x3f);
                        u += 3;
                } else {
                        c = (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3f) << 12 |
                            (uint32_t)(u[2] & 0x3f) << 6 | (u[3] & 0x3f);
                        u += 4;
                }
                out[n++] = c;
        }
        return n;
}

static uint32_t state_bits(const struct pylayout *L, unsigned kind, bool compact, bool ascii)
{
        if (L->strings == PYL_STR_PEP393_BYTE0)
                return kind << 8 | (unsigned)compact << 11 | (unsigned)ascii << 12;
        uint32_t ready = L->minor <= 11 ? 1u << 7 : 0;
        return kind << 2 | (unsigned)compact << 5 | (unsigned)ascii << 6 | ready;
}

static void put_chars(uint8_t *dst, const uint32_t *cp, size_t n, unsigned kind)
{
        for (size_t i = 0; i < n; i++) {
                if (kind == 1) {
                        dst[i] = (uint8_t)cp[i];
                } else if (kind == 2) {
                        uint16_t u = (uint16_t)cp[i];
                        memcpy(dst + 2 * i, &u, 2);
                } else {
                        memcpy(dst + 4 * i, &cp[i], 4);
                }
        }
}

uint64_t pyimg_str(struct pyimg *p, const char *utf8, enum pyimg_strform form)
{
        const struct pylayout *L = &p->L;
        size_t blen = strlen(utf8);
        if (L->strings == PYL_STR_PY2 && form != PYIMG_STR_UNICODE2) {
                uint64_t o = new_object(p, (size_t)L->bytes_sval + blen + 1, p->str_type);
                img_u64(p->img, o + (uint64_t)L->bytes_size,
                        form == PYIMG_STR_HUGE ? 1ull << 40 : blen);
                memcpy(img_at(p->img, o + (uint64_t)L->bytes_sval, blen), utf8, blen);
                return o;
        }
        uint32_t *cp = calloc(blen + 1, sizeof(*cp));
        size_t n = utf8_decode(utf8, cp, blen + 1);
        uint32_t max = 0;
        for (size_t i = 0; i < n; i++)
                if (cp[i] > max)
                        max = cp[i];
        if (form == PYIMG_STR_UNICODE2) {
                uint64_t data = img_alloc(p->img, 4 * (n + 1));
                put_chars(img_at(p->img, data, 4 * (n + 1)), cp, n, 4);
                uint64_t o = new_object(p, 64, p->unicode2_type);
                img_u64(p->img, o + (uint64_t)L->str_length, n);
                img_u64(p->img, o + (uint64_t)L->str_data, data);
                free(cp);
                return o;
        }
        unsigned kind = max < 0x100 ? 1 : max < 0x10000 ? 2 : 4;
        bool ascii = max < 0x80;
        uint64_t o;
        if (form == PYIMG_STR_LEGACY) {
                o = new_object(p, (size_t)L->str_data + 8, p->str_type);
                uint64_t data = img_alloc(p->img, kind * (n + 1));
                put_chars(img_at(p->img, data, kind * (n + 1)), cp, n, kind);
                img_u64(p->img, o + (uint64_t)L->str_data, data);
                img_u32(p->img, o + (uint64_t)L->str_state, state_bits(L, kind, false, ascii));
        } else {
                size_t off = (size_t)(ascii ? L->str_ascii_size : L->str_compact_size);
                o = new_object(p, off + kind * (n + 1), p->str_type);
                put_chars(img_at(p->img, o + off, kind * (n + 1)), cp, n, kind);
                unsigned k = form == PYIMG_STR_BAD_KIND ? 3 : kind;
                img_u32(p->img, o + (uint64_t)L->str_state, state_bits(L, k, true, ascii));
        }
        img_u64(p->img, o + (uint64_t)L->str_length, form == PYIMG_STR_HUGE ? 1ull << 40 : n);
        free(cp);
        return o;
}

uint64_t pyimg_bytes(struct pyimg *p, const void *data, size_t len)
{
        const struct pylayout *L = &p->L;
        uint64_t o = new_object(p, (size_t)L->bytes_sval + len + 1, p->bytes_type);
        img_u64(p->img, o + (uint64_t)L->bytes_size, len);
        if (len)
                memcpy(img_at(p->img, o + (uint64_t)L->bytes_sval, len), data, len);
        return o;
}

/* ---- line tables ------------------------------------------------------------------ */

static size_t put_varint(uint8_t *o, uint32_t v)
{
        size_t n = 0;
        while (v >= 64) {
                o[n++] = (uint8_t)(0x40 | (v & 63));
                v >>= 6;
        }
        o[n++] = (uint8_t)v;
        return n;
}

/* Encode `lines` (one per 2-byte code unit) in the version's format into out; returns bytes. */
static size_t encode_lines(enum lt_format fmt, int first, const int *lines, size_t n, uint8_t *out)
{
        size_t o = 0;
        int prev = first;
        for (size_t i = 0; i < n; i++) {
                int line = lines[i];
                if (fmt == LT_LNOTAB_U8 || fmt == LT_LNOTAB_S8) {
                        int lo = fmt == LT_LNOTAB_U8 ? 0 : -127,
                            hi = fmt == LT_LNOTAB_U8 ? 255 : 127;
                        int d = (line < 0 ? prev : line) - prev;
                        uint8_t ad = i ? 2 : 0;
                        do {
                                int part = d < lo ? lo : d > hi ? hi : d;
                                out[o++] = ad;
                                out[o++] = (uint8_t)(int8_t)part;
                                d -= part;
                                ad = 0;
                        } while (d);
                        prev = line < 0 ? prev : line;
                } else if (fmt == LT_LINETABLE_310) {
                        if (line < 0) {
                                out[o++] = 2;
                                out[o++] = 0x80;
                                continue;
                        }
                        int d = line - prev;
                        while (d > 127 || d < -127) {
                                int part = d > 0 ? 127 : -127;
                                out[o++] = 0;
                                out[o++] = (uint8_t)(int8_t)part;
                                d -= part;
                        }
                        out[o++] = 2;
                        out[o++] = (uint8_t)(int8_t)d;
                        prev = line;
                } else {
                        if (line < 0) {
                                out[o++] = 0x80 | 15 << 3;
                                continue;
                        }
                        int d = line - prev;
                        out[o++] = 0x80 | 13 << 3;
                        o +=
                            put_varint(out + o, d < 0 ? (uint32_t)(-d) << 1 | 1 : (uint32_t)d << 1);
                        prev = line;
                }
        }
        return o;
}

uint64_t pyimg_code_objs(struct pyimg *p, uint64_t name, uint64_t qualname, uint64_t file,
                         int first_line, const int *lines, size_t nunits, int firsttraceable)
{
        const struct pylayout *L = &p->L;
        uint8_t *tab = calloc(nunits * 16 + 16, 1);
        size_t tlen = encode_lines((enum lt_format)L->linetable, first_line, lines, nunits, tab);
        uint64_t table = pyimg_bytes(p, tab, tlen);
        free(tab);
        size_t size = L->co_read + 64;
        if (L->co_code_adaptive >= 0)
                size = (size_t)L->co_code_adaptive + 2 * nunits + 8;
        uint64_t co = new_object(p, size, p->code_type);
        img_u64(p->img, co + (uint64_t)L->co_name, name);
        img_u64(p->img, co + (uint64_t)L->co_filename, file);
        if (L->co_qualname >= 0)
                img_u64(p->img, co + (uint64_t)L->co_qualname, qualname);
        img_u64(p->img, co + (uint64_t)L->co_linetable, table);
        img_u32(p->img, co + (uint64_t)L->co_firstlineno, (uint32_t)first_line);
        if (L->co_code_adaptive >= 0)
                img_u64(p->img, co + (uint64_t)L->ob_size, nunits);
        if (L->co_firsttraceable >= 0)
                img_u32(p->img, co + (uint64_t)L->co_firsttraceable, (uint32_t)firsttraceable);
        if (L->co_code >= 0) {
                uint8_t *zeros = calloc(2 * nunits + 1, 1);
                img_u64(p->img, co + (uint64_t)L->co_code, pyimg_bytes(p, zeros, 2 * nunits));
                free(zeros);
        }
        pyimg_sync(p);
        return co;
}

uint64_t pyimg_code(struct pyimg *p, const char *name, const char *qualname, const char *file,
                    int first_line, const int *lines, size_t nunits, int firsttraceable)
{
        return pyimg_code_objs(p, pyimg_str(p, name, PYIMG_STR_AUTO),
                               qualname ? pyimg_str(p, qualname, PYIMG_STR_AUTO) : 0,
                               pyimg_str(p, file, PYIMG_STR_AUTO), first_line, lines, nunits,
                               firsttraceable);
}

uint64_t pyimg_code_tlbc(struct pyimg *p, uint64_t code, int n, int idx)
{
        const struct pylayout *L = &p->L;
        uint64_t nunits = img_get_u64(p->img, code + (uint64_t)L->ob_size);
        uint64_t arr = img_alloc(p->img, 8 + 8 * (size_t)n);
        img_u64(p->img, arr, (uint64_t)n);
        uint64_t want = 0;
        for (int i = 0; i < n; i++) {
                uint64_t copy = i == 0 ? code + (uint64_t)L->co_code_adaptive
                                       : img_alloc(p->img, 2 * nunits + 8);
                img_u64(p->img, arr + 8 + 8 * (uint64_t)i, copy);
                if (i == idx)
                        want = copy;
        }
        img_u64(p->img, code + (uint64_t)L->co_tlbc, arr);
        pyimg_sync(p);
        return want;
}

/* ---- asyncio (3.14+) ------------------------------------------------------------------ */

/* A type named `name` (tp_name, a C string), based on `base` (0: none). */
static uint64_t named_type(struct pyimg *p, const char *name, uint64_t base)
{
        uint64_t t = new_type(p, 0);
        uint64_t s = img_alloc(p->img, 64); /* in a binary's .rodata: more text follows */
        memcpy(img_at(p->img, s, strlen(name) + 1), name, strlen(name) + 1);
        img_u64(p->img, t + (uint64_t)p->L.tp_name, s);
        img_u64(p->img, t + (uint64_t)p->L.tp_base, base);
        return t;
}

/* An empty circular list at head: next = prev = head. */
static void list_init(struct pyimg *p, uint64_t head)
{
        img_u64(p->img, head, head);
        img_u64(p->img, head + 8, head);
}

void pyimg_asyncio(struct pyimg *p)
{
        const struct pylayout *L = &p->L;
        struct pyimg_asyncio *a = &p->aio;
        bool ft = L->free_threaded;
        uint32_t h = ft ? 16 : 0;
        uint64_t future = named_type(p, "_asyncio.Future", 0);
        *a = (struct pyimg_asyncio){
            .task_type = named_type(p, "_asyncio.Task", future),
            .future_type = future,
            .gathering_type = named_type(p, "_GatheringFuture", future),
            .coro_type = named_type(p, "coroutine", 0),
            .set_type = named_type(p, "set", 0),
            /* TaskObj of 3.14.0 (FutureObj_HEAD, then the task's own fields) */
            .task_size = ft ? 192 : 168,
            .name = 136 + h,
            .awaited_by = 96 + h,
            .is_task = 108 + h,
            .is_set = 109 + h,
            .coro = 128 + h,
            .node = 152 + h,
            /* inside this builder's thread states and interpreters, clear of their fields */
            .ts_head = TSTATE_SIZE / 2 - 32,
            .ts_running_task = TSTATE_SIZE / 2 - 40,
            .interp_head = (uint32_t)interp_size(L) - 256 - 32,
        };
        a->dummy = new_object(p, 64, a->set_type);
        a->debug = img_alloc(p->img, 104);
        uint64_t d[13] = {a->task_size,
                          a->name,
                          a->awaited_by,
                          a->is_task,
                          a->is_set,
                          a->coro,
                          a->node,
                          interp_size(L),
                          a->interp_head,
                          TSTATE_SIZE / 2,
                          a->ts_running_task - 8,
                          a->ts_running_task,
                          a->ts_head};
        memcpy(img_at(p->img, a->debug, sizeof(d)), d, sizeof(d));
        for (size_t i = 0; i < p->n_interps; i++)
                list_init(p, p->interps[i] + a->interp_head);
        for (size_t i = 0; i < p->n_th; i++)
                list_init(p, p->th[i].tstate + a->ts_head);
        p->target.asyncio_debug_addr = a->debug;
        pyimg_sync(p);
}

uint64_t pyimg_coro(struct pyimg *p, uint64_t code, int unit, int state, uint64_t awaited)
{
        const struct pylayout *L = &p->L;
        uint64_t co = new_object(p, (size_t)L->gen_iframe + FRAME_SIZE, p->aio.coro_type);
        img_u8(p->img, co + (uint64_t)L->gen_frame_state, (uint8_t)(int8_t)state);
        uint64_t f = co + (uint64_t)L->gen_iframe;
        img_u64(p->img, f + (uint64_t)L->fr_code, code | 1); /* a tagged _PyStackRef */
        img_u64(p->img, f + (uint64_t)L->fr_lasti,
                code + (uint64_t)L->co_code_adaptive + 2 * (uint64_t)unit);
        img_u8(p->img, f + (uint64_t)L->fr_owner, L->owner_generator);
        /* The value stack: one slot, the awaited object (a refcounted reference: tag 1). */
        uint64_t slot = f + 96;
        img_u64(p->img, slot, awaited ? awaited | 1 : 0);
        img_u64(p->img, f + (uint64_t)L->fr_stacktop, awaited ? slot + 8 : slot);
        pyimg_sync(p);
        return co;
}

uint64_t pyimg_future(struct pyimg *p, bool gathering)
{
        uint64_t f = new_object(p, 256, gathering ? p->aio.gathering_type : p->aio.future_type);
        pyimg_sync(p);
        return f;
}

uint64_t pyimg_task(struct pyimg *p, int t, uint64_t name, uint64_t coro)
{
        struct pyimg_asyncio *a = &p->aio;
        uint64_t task = new_object(p, a->task_size, a->task_type);
        img_u64(p->img, task + a->name, name);
        img_u64(p->img, task + a->coro, coro);
        img_u8(p->img, task + a->is_task, 1);
        uint64_t head = t < 0 ? p->interps[0] + a->interp_head : p->th[t].tstate + a->ts_head;
        uint64_t node = task + a->node, prev = img_get_u64(p->img, head + 8);
        img_u64(p->img, node, head);
        img_u64(p->img, node + 8, prev);
        img_u64(p->img, prev, node);
        img_u64(p->img, head + 8, node);
        pyimg_sync(p);
        return task;
}

void pyimg_task_awaited_by(struct pyimg *p, uint64_t task, const uint64_t *by, size_t n)
{
        const struct pylayout *L = &p->L;
        struct pyimg_asyncio *a = &p->aio;
        if (n == 1) {
                img_u64(p->img, task + a->awaited_by, by[0]);
                return;
        }
        if (n > 7)
                die("a set of at most 7 awaiting tasks");
        /* 8 slots: a deleted entry (the dummy, hash -1) first, then the tasks. */
        uint64_t set = new_object(p, (size_t)L->set_table + 8, a->set_type);
        uint64_t table = img_alloc(p->img, 8 * 16);
        img_u64(p->img, table, a->dummy);
        img_u64(p->img, table + 8, UINT64_MAX);
        for (size_t i = 0; i < n; i++) {
                uint64_t e = table + 16 * (1 + i);
                img_u64(p->img, e, by[i]);
                img_u64(p->img, e + 8, by[i] >> 4);
        }
        img_u64(p->img, set + (uint64_t)L->set_mask, 7);
        img_u64(p->img, set + (uint64_t)L->set_table, table);
        img_u64(p->img, task + a->awaited_by, set);
        img_u8(p->img, task + a->is_set, 1);
        pyimg_sync(p);
}

void pyimg_task_waiter(struct pyimg *p, uint64_t task, uint64_t fut)
{
        img_u64(p->img, task + (uint64_t)p->L.task_fut_waiter, fut);
}

/* ---- frames ------------------------------------------------------------------------ */

static uint64_t frame_slot(struct pyimg *p, int t, enum pyimg_frame_kind kind)
{
        const struct pylayout *L = &p->L;
        struct pyimg_thread *th = &p->th[t];
        if (L->frames == PYL_FRAMES_OBJECT)
                return new_object(p, L->fr_read + 64, 0);
        if (kind == PYIMG_FRAME_ENTRY)
                return img_alloc(p->img, FRAME_SIZE); /* on the C stack */
        if (kind == PYIMG_FRAME_GEN)
                return img_alloc(p->img, 64 + FRAME_SIZE) + 64; /* inside the generator */
        if (th->chunk_top + FRAME_SIZE > th->chunk_end) {
                uint64_t c = img_alloc(p->img, p->chunk_bytes);
                img_u64(p->img, c + (uint64_t)L->chunk_previous, th->chunk);
                img_u64(p->img, c + (uint64_t)L->chunk_size, p->chunk_bytes);
                th->chunk = c;
                th->chunk_top = c + (uint64_t)L->chunk_data;
                th->chunk_end = c + p->chunk_bytes;
                img_u64(p->img, th->tstate + (uint64_t)L->ts_datastack_chunk, c);
        }
        uint64_t f = th->chunk_top;
        th->chunk_top += FRAME_SIZE;
        if (L->ts_datastack_top >= 0)
                img_u64(p->img, th->tstate + (uint64_t)L->ts_datastack_top, th->chunk_top);
        return f;
}

static uint64_t push(struct pyimg *p, int t, enum pyimg_frame_kind kind, uint64_t code, int unit,
                     int tlbc_index)
{
        const struct pylayout *L = &p->L;
        struct pyimg_thread *th = &p->th[t];
        uint64_t f = frame_slot(p, t, kind);
        img_u64(p->img, f + (uint64_t)L->fr_back, th->top);
        bool tagged = L->fr_code_mask != ~0ull;
        if (kind == PYIMG_FRAME_ENTRY) {
                code = L->minor == 12 ? p->trampoline_code : p->none_obj;
                img_u8(p->img, f + (uint64_t)L->fr_owner, L->owner_skip_from);
        } else if (L->fr_owner >= 0) {
                img_u8(p->img, f + (uint64_t)L->fr_owner,
                       kind == PYIMG_FRAME_GEN ? L->owner_generator : 0);
        }
        img_u64(p->img, f + (uint64_t)L->fr_code, code | (tagged && code ? 1 : 0));
        if (L->lasti == PYL_LASTI_POINTER) {
                uint64_t base = code + (uint64_t)L->co_code_adaptive;
                if (tlbc_index) {
                        uint64_t arr = img_get_u64(p->img, code + (uint64_t)L->co_tlbc);
                        base = img_get_u64(p->img, arr + 8 + 8 * (uint64_t)tlbc_index);
                        img_u32(p->img, f + (uint64_t)L->fr_tlbc_index, (uint32_t)tlbc_index);
                }
                int64_t u = unit < 0 ? (L->minor <= 12 ? -1 : 0) : unit;
                img_u64(p->img, f + (uint64_t)L->fr_lasti, base + (uint64_t)(2 * u));
        } else {
                int32_t lasti = unit < 0 ? -1 : L->lasti == PYL_LASTI_UNITS ? unit : 2 * unit;
                img_u32(p->img, f + (uint64_t)L->fr_lasti, (uint32_t)lasti);
                /* A frame on a thread's stack is running: f_executing 1, f_state EXECUTING 0. */
                if (L->fr_state >= 0)
                        img_u8(p->img, f + (uint64_t)L->fr_state,
                               L->fr_state_kind == PYL_FRSTATE_EXECUTING ? 1 : 0);
        }
        set_top(p, t, f);
        pyimg_sync(p);
        return f;
}

void pyimg_set_top(struct pyimg *p, int t, uint64_t frame)
{
        set_top(p, t, frame);
}

uint64_t pyimg_push(struct pyimg *p, int t, enum pyimg_frame_kind kind, uint64_t code, int unit)
{
        return push(p, t, kind, code, unit, 0);
}

uint64_t pyimg_push_tlbc(struct pyimg *p, int t, uint64_t code, int unit, int tlbc_index)
{
        return push(p, t, PYIMG_FRAME, code, unit, tlbc_index);
}

void pyimg_gil(struct pyimg *p, uint64_t interp, uint64_t holder, int enabled)
{
        const struct pylayout *L = &p->L;
        if (L->gil == PYL_GIL_SYMBOL) {
                img_u64(p->img, p->tstate_current_var, holder);
        } else if (L->gil == PYL_GIL_RUNTIME) {
                img_u64(p->img, p->runtime + (uint64_t)L->rt_tstate_current, holder);
        } else {
                uint64_t gil = img_get_u64(p->img, interp + (uint64_t)L->is_ceval_gil);
                img_u32(p->img, gil + (uint64_t)L->gil_locked, holder != 0);
                img_u64(p->img, gil + (uint64_t)L->gil_holder, holder);
                if (L->gil_enabled >= 0 && enabled >= 0)
                        img_u32(p->img, gil + (uint64_t)L->gil_enabled, (uint32_t)enabled);
        }
}

void pyimg_thread_state(struct pyimg *p, int t, int state)
{
        if (p->L.ts_state >= 0)
                img_u32(p->img, p->th[t].tstate + (uint64_t)p->L.ts_state, (uint32_t)state);
}

/* ---- dicts, ints, modules, classes and instances ------------------------------------ */

#define CLASS_SIZE 1024

static size_t dict_size(const struct pylayout *L)
{
        int32_t m = L->dict_keys > L->dict_values ? L->dict_keys : L->dict_values;
        return L->dicts == PYL_DICT_PY2 ? 248 + 16 : (size_t)m + 8;
}

/* Slots of a table for n entries: a power of two, at most 2/3 full. */
static size_t table_slots(size_t n)
{
        size_t size = 8;
        while (size * 2 / 3 < n)
                size *= 2;
        return size;
}

/*
 * A 3.x keys object holding keys[0, n) with values[0, n) (NULL: a split
 * table's keys). `general`: 24-byte entries with hashes, else 16-byte ones
 * (3.11+ str-only or split keys, kind in `kind`).
 */
static uint64_t keys_object(struct pyimg *p, const uint64_t *keys, const uint64_t *values, size_t n,
                            bool general, uint8_t kind)
{
        const struct pylayout *L = &p->L;
        size_t size = table_slots(n), log2 = 0;
        while ((1u << log2) < size)
                log2++;
        size_t width = size <= 0x80 ? 1 : size <= 0x8000 ? 2 : 4;
        size_t esize = general ? 24 : 16;
        uint64_t k = img_alloc(p->img, (size_t)L->dk_indices + size * width + n * esize + 8);
        img_u64(p->img, k, 1); /* dk_refcnt */
        if (L->dicts == PYL_DICT_36) {
                img_u64(p->img, k + (uint64_t)L->dk_size, size);
        } else {
                size_t log2_index = log2 + (width == 1 ? 0 : width == 2 ? 1 : 2);
                img_u8(p->img, k + (uint64_t)L->dk_size, (uint8_t)log2);
                img_u8(p->img, k + (uint64_t)L->dk_log2_index_bytes, (uint8_t)log2_index);
                img_u8(p->img, k + (uint64_t)L->dk_kind, kind);
        }
        img_u64(p->img, k + (uint64_t)L->dk_nentries, n);
        /* Indices: entry i at slot (5i + 1) mod size, the rest empty (-1). */
        uint64_t idx = k + (uint64_t)L->dk_indices;
        memset(img_at(p->img, idx, size * width), 0xff, size * width);
        for (size_t i = 0; i < n; i++) {
                int64_t v = (int64_t)i;
                memcpy(img_at(p->img, idx + ((5 * i + 1) % size) * width, width), &v, width);
        }
        uint64_t e = idx + size * width;
        for (size_t i = 0; i < n; i++, e += esize) {
                uint64_t at = e + (general ? 8 : 0);
                if (general)
                        img_u64(p->img, e, 0x9e3779b97f4a7c15ull * (i + 1)); /* a hash */
                img_u64(p->img, at, keys[i]);
                img_u64(p->img, at + 8, values ? values[i] : 0);
        }
        return k;
}

uint64_t pyimg_dict(struct pyimg *p, const uint64_t *keys, const uint64_t *values, size_t n,
                    bool str_keys)
{
        const struct pylayout *L = &p->L;
        uint64_t d = new_object(p, dict_size(L), p->dict_type);
        if (L->dicts == PYL_DICT_PY2) {
                /* One more slot than needed holds a deleted entry: a dummy key, no value. */
                size_t slots = table_slots(n + 1);
                uint64_t table = slots == 8 ? d + 56 : img_alloc(p->img, slots * 24);
                uint64_t dummy = pyimg_str(p, "<dummy key>", PYIMG_STR_AUTO);
                for (size_t i = 0; i <= n; i++) {
                        uint64_t e = table + ((7 * i + 3) % slots) * 24;
                        img_u64(p->img, e, 0x9e3779b97f4a7c15ull * (i + 1));
                        img_u64(p->img, e + 8, i < n ? keys[i] : dummy);
                        img_u64(p->img, e + 16, i < n ? values[i] : 0);
                }
                img_u64(p->img, d + (uint64_t)L->dict_mask, slots - 1);
                img_u64(p->img, d + (uint64_t)L->dict_keys, table);
        } else {
                bool general = L->dicts == PYL_DICT_36 || !str_keys;
                img_u64(p->img, d + (uint64_t)L->dict_keys,
                        keys_object(p, keys, values, n, general, general ? 0 : 1));
        }
        pyimg_sync(p);
        return d;
}

uint64_t pyimg_int(struct pyimg *p, uint64_t v)
{
        const struct pylayout *L = &p->L;
        if (L->ints == PYL_INT_PY2) {
                uint64_t o = new_object(p, (size_t)L->int_value + 8, p->int_type);
                img_u64(p->img, o + (uint64_t)L->int_value, v);
                return o;
        }
        uint32_t d[3];
        size_t n = 0;
        for (uint64_t x = v; x; x >>= 30)
                d[n++] = (uint32_t)(x & ((1u << 30) - 1));
        uint64_t o = new_object(p, (size_t)L->int_digits + 4 * (n ? n : 1), p->int_type);
        if (L->ints == PYL_INT_TAG)
                img_u64(p->img, o + (uint64_t)L->int_value, n ? (uint64_t)n << 3 : 1);
        else
                img_u64(p->img, o + (uint64_t)L->ob_size, n);
        for (size_t i = 0; i < n; i++)
                img_u32(p->img, o + (uint64_t)L->int_digits + 4 * i, d[i]);
        return o;
}

uint64_t pyimg_module(struct pyimg *p, uint64_t dict)
{
        uint64_t m = new_object(p, (size_t)p->L.md_dict + 64, p->module_type);
        img_u64(p->img, m + (uint64_t)p->L.md_dict, dict);
        return m;
}

void pyimg_set_modules(struct pyimg *p, uint64_t interp, uint64_t dict)
{
        img_u64(p->img, interp + (uint64_t)p->L.is_modules, dict);
}

uint64_t pyimg_class(struct pyimg *p, const uint64_t *attrs, size_t n)
{
        const struct pylayout *L = &p->L;
        uint64_t flags = 0;
        if (L->attrs != PYL_ATTRS_DICTOFFSET)
                flags |= 1ul << 4; /* MANAGED_DICT */
        if (L->attrs == PYL_ATTRS_INLINE_313)
                flags |= 1ul << 2; /* INLINE_VALUES */
        uint64_t cls = img_alloc(p->img, CLASS_SIZE);
        img_u64(p->img, cls + (uint64_t)L->tp_flags, flags);
        uint64_t head = (uint64_t)L->ob_type + 8; /* sizeof(PyObject) */
        if (L->attrs == PYL_ATTRS_DICTOFFSET) {
                img_u64(p->img, cls + (uint64_t)L->tp_basicsize, head + 16);
                img_u64(p->img, cls + (uint64_t)L->tp_dictoffset, head);
        } else {
                img_u64(p->img, cls + (uint64_t)L->tp_basicsize, head);
                img_u64(p->img, cls + (uint64_t)L->tp_dictoffset, (uint64_t)-1);
        }
        uint64_t keys = 0;
        if (L->dicts != PYL_DICT_PY2)
                keys = keys_object(p, attrs, NULL, n, L->dicts == PYL_DICT_36, 2);
        if (L->ht_cached_keys >= 0)
                img_u64(p->img, cls + (uint64_t)L->ht_cached_keys, keys);
        if (n > PYIMG_MAX_ATTRS || p->n_classes == PYIMG_MAX_CLASSES)
                die("too many classes or attributes");
        struct pyimg_class *c = &p->classes[p->n_classes++];
        c->cls = cls;
        c->keys = keys;
        memcpy(c->attrs, attrs, n * sizeof(*attrs));
        c->n = n;
        pyimg_sync(p);
        return cls;
}

/* A values array of n (3.13+: a PyDictValues with `valid`) at `at`, or a new one. */
static uint64_t values_array(struct pyimg *p, uint64_t at, const uint64_t *vals, size_t n,
                             bool valid)
{
        const struct pylayout *L = &p->L;
        if (!at)
                at = img_alloc(p->img, (size_t)L->values_values + 8 * n + 8);
        if (L->values_valid >= 0) {
                img_u8(p->img, at, (uint8_t)n); /* capacity */
                img_u8(p->img, at + (uint64_t)L->values_valid, valid);
        }
        for (size_t i = 0; i < n; i++)
                img_u64(p->img, at + (uint64_t)L->values_values + 8 * i, vals[i]);
        return at;
}

uint64_t pyimg_instance(struct pyimg *p, uint64_t cls, const uint64_t *vals, enum pyimg_attrs how)
{
        const struct pylayout *L = &p->L;
        const struct pyimg_class *c = p->classes;
        while (c < p->classes + p->n_classes && c->cls != cls)
                c++;
        if (c == p->classes + p->n_classes)
                die("unknown class");
        size_t n = c->n, head = (size_t)L->ob_type + 8;
        bool inline_values = L->attrs == PYL_ATTRS_INLINE_313;
        if (how != PYIMG_ATTRS_DICT && L->dicts == PYL_DICT_PY2)
                die("2.x instances have a dict of their own");
        if ((how == PYIMG_ATTRS_VALUES && L->attrs == PYL_ATTRS_DICTOFFSET) ||
            (how == PYIMG_ATTRS_STALE && !inline_values))
                die("no such attribute storage in this version");
        /* 32 bytes before the object: GC head, managed dict and weakref or values words. */
        size_t body = head + 16 + (inline_values ? (size_t)L->values_values + 8 * n + 8 : 0);
        uint64_t obj = img_alloc(p->img, 32 + body) + 32;
        img_u64(p->img, obj + (uint64_t)L->ob_type, cls);
        uint64_t dict = 0, values = 0;
        if (how == PYIMG_ATTRS_DICT) {
                uint64_t keys[PYIMG_MAX_ATTRS], set[PYIMG_MAX_ATTRS];
                size_t k = 0;
                for (size_t i = 0; i < n; i++) {
                        if (!vals[i])
                                continue;
                        keys[k] = c->attrs[i];
                        set[k++] = vals[i];
                }
                dict = pyimg_dict(p, keys, set, k, true);
        } else {
                values = values_array(p, inline_values ? obj + head : 0, vals, n,
                                      how != PYIMG_ATTRS_STALE);
        }
        if (how == PYIMG_ATTRS_SPLIT) {
                dict = new_object(p, dict_size(L), p->dict_type);
                img_u64(p->img, dict + (uint64_t)L->dict_keys, c->keys);
                img_u64(p->img, dict + (uint64_t)L->dict_values, values);
                values = 0;
        }
        switch (L->attrs) {
        case PYL_ATTRS_DICTOFFSET:
                img_u64(p->img, obj + head, dict);
                break;
        case PYL_ATTRS_MANAGED_311:
                img_u64(p->img, obj - (uint64_t)L->pre_dict, dict);
                img_u64(p->img, obj - (uint64_t)L->pre_values, values);
                break;
        case PYL_ATTRS_TAGGED_312:
                img_u64(p->img, obj - (uint64_t)L->pre_dict, dict ? dict : values - 1);
                break;
        case PYL_ATTRS_INLINE_313:
                img_u64(p->img, obj - (uint64_t)L->pre_dict, dict);
                break;
        }
        pyimg_sync(p);
        return obj;
}
