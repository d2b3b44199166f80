/*
 * imgvers.c - the CPython versions the synthetic images are built for (see
 * imgvers.h).
 */
#include "imgvers.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

const struct imgver imgver_table[] = {
    {"2.7", 2, 7, false, false},   {"3.6", 3, 6, false, false},   {"3.7", 3, 7, false, false},
    {"3.7d", 3, 7, false, true},   {"3.8", 3, 8, false, false},   {"3.9", 3, 9, false, false},
    {"3.10", 3, 10, false, false}, {"3.11", 3, 11, false, false}, {"3.12", 3, 12, false, false},
    {"3.13", 3, 13, false, false}, {"3.13t", 3, 13, true, false}, {"3.14", 3, 14, false, false},
    {"3.14t", 3, 14, true, false}, {"3.15", 3, 15, false, false},
};

_Static_assert(sizeof(imgver_table) / sizeof(imgver_table[0]) == IMGVER_COUNT,
               "IMGVER_COUNT counts imgver_table");

/* PY_VERSION_HEX of v's x.y.2 final. */
static uint32_t imgver_hex(const struct imgver *v)
{
        return (uint32_t)v->major << 24 | (uint32_t)v->minor << 16 | 2u << 8 | 0xf0u;
}

/*
 * 3.13+ layouts written out from the reference doc (offsets.csv, section 6),
 * independently of pylayout.c: imgbuild serialises them into
 * _Py_DebugOffsets and the walker must read back exactly this.
 */
void imgver_debug_layout(const struct imgver *v, enum imgver_tasks tasks, struct pylayout *L)
{
        bool t = v->ft;
        int h = t ? 16 : 0; /* the free-threaded object header is 16 bytes longer */
        memset(L, 0, sizeof(*L));
        L->major = 3;
        L->minor = (uint8_t)v->minor;
        L->free_threaded = t;
        L->frames = PYL_FRAMES_INTERP;
        L->lasti = PYL_LASTI_POINTER;
        L->linetable = LT_LOCATIONS_311;
        L->strings = t && v->minor >= 14 ? PYL_STR_PEP393_BYTE0 : PYL_STR_PEP393;
        L->gil = PYL_GIL_INTERP;
        L->ob_type = 8 + h;
        L->ob_size = 16 + h;
        L->tp_flags = 168 + h;
        L->rt_interp_head = v->minor == 13 ? 632 : 808;
        L->rt_tstate_current = -1;
        L->is_next = v->minor == 13 ? 7264 : 7272;
        L->is_threads_head = 7344;
        L->is_id = v->minor == 13 ? 7272 : 7280;
        L->is_ceval_gil = 16;
        L->gil_enabled = t ? 0 : -1;
        L->gil_locked = 16 + (t ? 8 : 0);
        L->gil_holder = 8 + (t ? 8 : 0);
        L->ts_next = 8;
        L->ts_interp = 16;
        L->ts_frame = 72;
        L->ts_thread_id = 152;
        L->ts_native_tid = 160;
        L->ts_datastack_chunk = 232;
        L->ts_datastack_top = 240;
        L->ts_state = v->minor == 13 ? 40 : 44;
        L->ts_base_frame = v->minor >= 15 ? 400 : -1;
        L->cframe_current = -1;
        L->fr_back = 8;
        L->fr_code = 0;
        L->fr_lasti = 56;
        L->fr_owner = v->minor == 13 ? 70 : t ? 78 : 74;
        L->fr_tlbc_index = t && v->minor >= 14 ? 72 : -1;
        L->fr_is_entry = -1;
        L->fr_code_mask = v->minor >= 14 ? ~3ull : ~0ull;
        L->owner_generator = 1;
        L->owner_skip_from = 3;
        L->executable_any = true;
        L->init_shim = true;
        L->co_filename = 112 + h;
        L->co_name = 120 + h;
        L->co_qualname = 128 + h;
        L->co_linetable = 136 + h;
        L->co_firstlineno = 68 + h;
        if (v->minor == 13) {
                L->co_firsttraceable = 184 + h;
                L->co_code_adaptive = 200 + h;
        } else {
                L->co_firsttraceable = v->minor == 14 ? (t ? 208 : 192) : -1;
                L->co_code_adaptive = t ? 232 : 208;
        }
        L->co_tlbc = t && v->minor >= 14 ? 224 : -1;
        L->co_code = -1;
        L->str_length = 16 + h;
        L->str_state = 32 + h;
        L->str_ascii_size = 40 + h;
        L->str_compact_size = 56 + h;
        L->str_data = 56 + h;
        L->bytes_size = 16 + h;
        L->bytes_sval = 32 + h;
        L->chunk_previous = 0;
        L->chunk_size = 8;
        L->chunk_data = 24;
        /*
         * Thread names: 3.13t from the 3.13.0 headers with Py_GIL_DISABLED,
         * 3.14+ [S]/[U]; imports.modules of 3.14+ is any offset inside the
         * interpreter (the walker takes it from _Py_DebugOffsets).
         */
        L->dicts = PYL_DICT_311;
        L->attrs = PYL_ATTRS_INLINE_313;
        L->ints = PYL_INT_TAG;
        L->is_modules = v->minor == 13 ? (t ? 7664 : 7656) : 7648;
        L->md_dict = 16 + h;
        L->tp_basicsize = 32 + h;
        L->tp_dictoffset = 288 + h;
        L->ht_cached_keys = v->minor >= 15 ? -1 : 880 + h;
        L->dict_keys = 32 + h;
        L->dict_values = 40 + h;
        L->dict_mask = -1;
        L->dk_size = 8;
        L->dk_log2_index_bytes = 9;
        L->dk_kind = 10;
        L->dk_nentries = 24;
        L->dk_indices = 32;
        L->values_values = 8;
        L->values_valid = 3;
        L->pre_dict = t ? 8 : 24;
        L->pre_values = -1;
        L->int_value = 16 + h;
        L->int_digits = 24 + h;
        /*
         * asyncio tasks (IMGVER_TASKS_313): 3.13 (GIL build) as found in the
         * live 3.13.0 (pylayout.c), and 3.14's lists.
         */
        int32_t *task_fields[] = {
            &L->tp_name,         &L->tp_base,     &L->set_mask,        &L->set_table,
            &L->wr_object,       &L->meth_self,   &L->list_items,      &L->fut_loop,
            &L->fut_callback0,   &L->fut_state,   &L->task_fut_waiter, &L->task_coro,
            &L->task_name,       &L->task_size,   &L->gen_frame,       &L->gen_iframe,
            &L->gen_frame_state, &L->fr_stacktop, &L->fr_valuestack,
        };
        int32_t task_offsets_313[] = {24,  256, 32,  40,  16, 24, 24, 16, 24, 96,
                                      112, 120, 128, 144, -1, 72, 67, 64, 72};
        /*
         * 3.14 and 3.14t: the per-thread lists; TaskObj's own offsets come
         * from _asyncio at run time (pyimg_asyncio()), fut_waiter from
         * pylayout.c's table. PySetObject's mask and table, the
         * generator's embedded frame and state, the frame's stackpointer.
         */
        int32_t task_offsets_314[] = {
            24 + h,        256 + h, 32 + h, 40 + h, -1, -1,     -1,     -1, -1, -1,
            t ? 136 : 120, -1,      -1,     -1,     -1, 72 + h, 67 + h, 64, -1};
        bool has_313 = tasks == IMGVER_TASKS_313 && v->minor == 13 && !t;
        bool has_314 = tasks == IMGVER_TASKS_313 && v->minor == 14;
        for (size_t i = 0; i < sizeof(task_fields) / sizeof(task_fields[0]); i++)
                *task_fields[i] = has_313   ? task_offsets_313[i]
                                  : has_314 ? task_offsets_314[i]
                                            : -1;
        L->tasks = has_313 ? PYL_TASKS_SCHEDULED : has_314 ? PYL_TASKS_LISTS : 0;
        L->await = has_313 ? PYL_AWAIT_LOCALSPLUS : has_314 ? PYL_AWAIT_STACKPOINTER : 0;
        L->gen_created = has_313 || has_314 ? -3 : 0;
        /* Bytes per frame read, as the walker derives them (test_pywalk_image checks this). */
        int32_t end = L->fr_lasti + 8;
        if (L->fr_owner + 1 > end)
                end = L->fr_owner + 1;
        if (L->fr_tlbc_index + 4 > end)
                end = L->fr_tlbc_index + 4;
        L->fr_read = (uint32_t)(end + 7) & ~7u;
}

int imgver_image(const struct imgver *v, enum imgver_tasks tasks, struct pyimg *p)
{
        struct pylayout L;
        if (v->minor >= 13) {
                imgver_debug_layout(v, tasks, &L);
                /* co_read is derived; take the walker's own value for the builder's sizes. */
                L.co_read = (uint32_t)(L.co_tlbc >= 0 ? L.co_tlbc + 8 : L.co_firsttraceable + 4);
                if (L.co_firsttraceable < 0)
                        L.co_read = (uint32_t)L.co_linetable + 8;
                L.co_read = (L.co_read + 7) & ~7u;
        } else {
                const struct pylayout *T = pylayout_table(v->major, v->minor, 2, v->debug);
                if (!T)
                        return -1;
                L = *T;
        }
        pyimg_init(p, &L, imgver_hex(v));
        p->target.debug_build = v->debug;
        return 0;
}
