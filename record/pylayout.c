/*
 * pylayout.c - the per-version layout tables and the _Py_DebugOffsets loader
 * (see pylayout.h).
 *
 * `builds` below holds one block per interpreter build: every field of
 * struct pylayout, by name (a field a block forgets stays U, which
 * pylayout_check_tables() and its test catch). Adding a CPython version is a
 * block there (and, from 3.13 on, a block in `dbg_versions`); the versions
 * pyflame reads, and the list its messages give, come from `builds`.
 *
 * Numbers for 2.7 and 3.6-3.12 are offsetof() on the pyenv headers (checked
 * again for this file). A D cell is filled from the target's
 * _Py_DebugOffsets, whose position in that struct `dbg_versions` gives per minor
 * version. The remaining 3.13+ cells are the supplement: facts the debug
 * offsets do not carry. Their sources: 3.13/3.13t headers [H]; 3.14 CPython
 * v3.14.0 as read by py-spy's bindings [S]; 3.14t and 3.15 secondary sources
 * [U] (CPython's Include/internal headers at the v3.14.0 tag and on main).
 * In particular: ts_datastack_top follows ts_datastack_chunk [H 3.11-3.13,
 * U 3.14+], only a read-size hint; co_firsttraceable's position in 3.15 is
 * unknown [U], so frames being set up are not recognised there; the thread
 * names' offsets are [H] for 2.7-3.13 (3.13t: the 3.13.0 headers with
 * Py_GIL_DISABLED), [S] for 3.14, [U] for 3.15, whose ht_cached_keys is
 * unknown (PyTypeObject grew): its instances get names only from a dict of
 * their own. Offsets in PyObject-headed structs (`obj` in offset_fields)
 * shift by 16 bytes in Py_TRACE_REFS builds, which exist up to 3.10 only.
 */
#include "pylayout.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define X  (-1)      /* no such field in this version */
#define D  (-100000) /* from _Py_DebugOffsets */
#define D8 (-100008) /* ts_datastack_top: 8 bytes after ts_datastack_chunk, once that is known */
#define U  (-100001) /* not set by the build's block: a table bug (pylayout_check_tables) */

/* Short names for the kind cells of `rows`. */
#define FO  PYL_FRAMES_OBJECT
#define FI  PYL_FRAMES_INTERP
#define LB  PYL_LASTI_BYTES
#define LU  PYL_LASTI_UNITS
#define LP  PYL_LASTI_POINTER
#define U8  LT_LNOTAB_U8
#define S8  LT_LNOTAB_S8
#define T10 LT_LINETABLE_310
#define T11 LT_LOCATIONS_311
#define P2  PYL_STR_PY2
#define PEP PYL_STR_PEP393
#define PB0 PYL_STR_PEP393_BYTE0
#define GS  PYL_GIL_SYMBOL
#define GR  PYL_GIL_RUNTIME
#define GI  PYL_GIL_INTERP
#define DK2 PYL_DICT_PY2
#define D36 PYL_DICT_36
#define DK3 PYL_DICT_311
#define AD  PYL_ATTRS_DICTOFFSET
#define AM  PYL_ATTRS_MANAGED_311
#define AT  PYL_ATTRS_TAGGED_312
#define AI  PYL_ATTRS_INLINE_313
#define I2  PYL_INT_PY2
#define IS  PYL_INT_SIZE
#define IT  PYL_INT_TAG

#define OFF(field) offsetof(struct pylayout, field)

/* Every offset field of struct pylayout (int32_t), in the order of the struct. */
static const struct offset_field {
        size_t off;
        bool obj; /* inside a PyObject-headed struct: shifts with Py_TRACE_REFS */
} offset_fields[] = {
    {OFF(ob_type), true},
    {OFF(ob_size), true},
    {OFF(tp_flags), true},
    {OFF(rt_interp_head), false},
    {OFF(rt_tstate_current), false},
    {OFF(is_next), false},
    {OFF(is_threads_head), false},
    {OFF(is_id), false},
    {OFF(is_ceval_gil), false},
    {OFF(gil_enabled), false},
    {OFF(gil_locked), false},
    {OFF(gil_holder), false},
    {OFF(ts_next), false},
    {OFF(ts_interp), false},
    {OFF(ts_frame), false},
    {OFF(ts_thread_id), false},
    {OFF(ts_native_tid), false},
    {OFF(ts_datastack_chunk), false},
    {OFF(ts_datastack_top), false},
    {OFF(ts_state), false},
    {OFF(ts_base_frame), false},
    {OFF(cframe_current), false},
    {OFF(fr_back), true},
    {OFF(fr_code), true},
    {OFF(fr_lasti), true},
    {OFF(fr_state), true},
    {OFF(fr_owner), false},
    {OFF(fr_tlbc_index), false},
    {OFF(fr_is_entry), false},
    {OFF(co_filename), true},
    {OFF(co_name), true},
    {OFF(co_qualname), true},
    {OFF(co_linetable), true},
    {OFF(co_firstlineno), true},
    {OFF(co_firsttraceable), true},
    {OFF(co_code_adaptive), true},
    {OFF(co_tlbc), true},
    {OFF(co_code), true},
    {OFF(str_length), true},
    {OFF(str_state), true},
    {OFF(str_ascii_size), true},
    {OFF(str_compact_size), true},
    {OFF(str_data), true},
    {OFF(bytes_size), true},
    {OFF(bytes_sval), true},
    {OFF(chunk_previous), false},
    {OFF(chunk_size), false},
    {OFF(chunk_data), false},
    {OFF(is_modules), false},
    {OFF(md_dict), true},
    {OFF(tp_basicsize), true},
    {OFF(tp_dictoffset), true},
    {OFF(ht_cached_keys), true},
    {OFF(dict_keys), true},
    {OFF(dict_values), true},
    {OFF(dict_mask), true},
    {OFF(dk_size), false},
    {OFF(dk_log2_index_bytes), false},
    {OFF(dk_kind), false},
    {OFF(dk_nentries), false},
    {OFF(dk_indices), false},
    {OFF(values_values), false},
    {OFF(values_valid), false},
    {OFF(pre_dict), false},
    {OFF(pre_values), false},
    {OFF(int_value), true},
    {OFF(int_digits), true},
    {OFF(tp_name), true},
    {OFF(tp_base), true},
    {OFF(set_mask), true},
    {OFF(set_table), true},
    {OFF(wr_object), true},
    {OFF(meth_self), true},
    {OFF(list_items), true},
    {OFF(fut_loop), true},
    {OFF(fut_callback0), true},
    {OFF(fut_state), true},
    {OFF(task_fut_waiter), true},
    {OFF(task_coro), true},
    {OFF(task_name), true},
    {OFF(task_size), true},
    {OFF(gen_frame), true},
    {OFF(gen_iframe), true},
    {OFF(gen_frame_state), true},
    {OFF(fr_stacktop), true},
    {OFF(fr_valuestack), true},
};

#define UNSET_OFFSETS                                                                              \
        .ob_type = U, .ob_size = U, .tp_flags = U, .rt_interp_head = U, .rt_tstate_current = U,    \
        .is_next = U, .is_threads_head = U, .is_id = U, .is_ceval_gil = U, .gil_enabled = U,       \
        .gil_locked = U, .gil_holder = U, .ts_next = U, .ts_interp = U, .ts_frame = U,             \
        .ts_thread_id = U, .ts_native_tid = U, .ts_datastack_chunk = U, .ts_datastack_top = U,     \
        .ts_state = U, .ts_base_frame = U, .cframe_current = U, .fr_back = U, .fr_code = U,        \
        .fr_lasti = U, .fr_state = U, .fr_owner = U, .fr_tlbc_index = U, .fr_is_entry = U,         \
        .co_filename = U, .co_name = U, .co_qualname = U, .co_linetable = U, .co_firstlineno = U,  \
        .co_firsttraceable = U, .co_code_adaptive = U, .co_tlbc = U, .co_code = U,                 \
        .str_length = U, .str_state = U, .str_ascii_size = U, .str_compact_size = U,               \
        .str_data = U, .bytes_size = U, .bytes_sval = U, .chunk_previous = U, .chunk_size = U,     \
        .chunk_data = U, .is_modules = U, .md_dict = U, .tp_basicsize = U, .tp_dictoffset = U,     \
        .ht_cached_keys = U, .dict_keys = U, .dict_values = U, .dict_mask = U, .dk_size = U,       \
        .dk_log2_index_bytes = U, .dk_kind = U, .dk_nentries = U, .dk_indices = U,                 \
        .values_values = U, .values_valid = U, .pre_dict = U, .pre_values = U, .int_value = U,     \
        .int_digits = U, .tp_name = U, .tp_base = U, .set_mask = U, .set_table = U,                \
        .wr_object = U, .meth_self = U, .list_items = U, .fut_loop = U, .fut_callback0 = U,        \
        .fut_state = U, .task_fut_waiter = U, .task_coro = U, .task_name = U, .task_size = U,      \
        .gen_frame = U, .gen_iframe = U, .gen_frame_state = U, .fr_stacktop = U,                   \
        .fr_valuestack = U

/* The asyncio cells of a build whose tasks pyflame cannot read (--async is refused). */
#define NO_TASKS                                                                                   \
        .tasks = 0, .await = 0, .gen_created = 0, .tp_name = X, .tp_base = X, .set_mask = X,       \
        .set_table = X, .wr_object = X, .meth_self = X, .list_items = X, .fut_loop = X,            \
        .fut_callback0 = X, .fut_state = X, .task_fut_waiter = X, .task_coro = X, .task_name = X,  \
        .task_size = X, .gen_frame = X, .gen_iframe = X, .gen_frame_state = X, .fr_stacktop = X,   \
        .fr_valuestack = X

/* Each block sets the offsets UNSET_OFFSETS left unset: overriding is the point. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverride-init"
// clang-format off
static const struct pylayout builds[] = {
    {UNSET_OFFSETS, .name = "2.7", .major = 2, .minor = 7, .free_threaded = false,
        /* kinds */
        .frames = FO, .lasti = LB, .linetable = U8, .strings = P2, .gil = GS, .dicts = DK2,
        .attrs = AD, .ints = I2,
        /* PyObject, PyTypeObject */
        .ob_type = 8, .ob_size = 16, .tp_flags = 168,
        /* _PyRuntimeState */
        .rt_interp_head = X, .rt_tstate_current = X,
        /* PyInterpreterState, its GIL */
        .is_next = 0, .is_threads_head = 8, .is_id = X, .is_ceval_gil = X, .gil_enabled = X,
        .gil_locked = X, .gil_holder = X,
        /* PyThreadState */
        .ts_next = 0, .ts_interp = 8, .ts_frame = 16, .ts_thread_id = 144, .ts_native_tid = X,
        .ts_datastack_chunk = X, .ts_datastack_top = X, .ts_state = X, .ts_base_frame = X,
        .cframe_current = X,
        /* frames */
        .fr_back = 24, .fr_code = 32, .fr_lasti = 120, .fr_state = X, .fr_state_kind = 0,
        .fr_owner = X, .fr_tlbc_index = X, .fr_is_entry = X, .fr_code_mask = X, .owner_generator = 127,
        .owner_skip_from = 127, .executable_any = 0, .init_shim = 0,
        /* PyCodeObject */
        .co_filename = 80, .co_name = 88, .co_qualname = X, .co_linetable = 104,
        .co_firstlineno = 96, .co_firsttraceable = X, .co_code_adaptive = X, .co_tlbc = X,
        .co_code = 32,
        /* str, bytes */
        .str_length = 16, .str_state = X, .str_ascii_size = X, .str_compact_size = X,
        .str_data = 24, .py2_unicode_width = 4, .bytes_size = 16, .bytes_sval = 36,
        /* _PyStackChunk */
        .chunk_previous = X, .chunk_size = X, .chunk_data = X,
        /* for thread names: modules, types, dicts, instances, ints */
        .is_modules = 16, .md_dict = 16, .tp_basicsize = 32, .tp_dictoffset = 288,
        .ht_cached_keys = X, .dict_keys = 40, .dict_values = X, .dict_mask = 32, .dk_size = X,
        .dk_log2_index_bytes = X, .dk_kind = X, .dk_nentries = X, .dk_indices = X,
        .values_values = X, .values_valid = X, .pre_dict = X, .pre_values = X, .int_value = 16,
        .int_digits = 24,
        NO_TASKS,
    },
    {UNSET_OFFSETS, .name = "3.6", .major = 3, .minor = 6, .free_threaded = false,
        /* kinds */
        .frames = FO, .lasti = LB, .linetable = S8, .strings = PEP, .gil = GS, .dicts = D36,
        .attrs = AD, .ints = IS,
        /* PyObject, PyTypeObject */
        .ob_type = 8, .ob_size = 16, .tp_flags = 168,
        /* _PyRuntimeState */
        .rt_interp_head = X, .rt_tstate_current = X,
        /* PyInterpreterState, its GIL */
        .is_next = 0, .is_threads_head = 8, .is_id = X, .is_ceval_gil = X, .gil_enabled = X,
        .gil_locked = X, .gil_holder = X,
        /* PyThreadState */
        .ts_next = 8, .ts_interp = 16, .ts_frame = 24, .ts_thread_id = 152, .ts_native_tid = X,
        .ts_datastack_chunk = X, .ts_datastack_top = X, .ts_state = X, .ts_base_frame = X,
        .cframe_current = X,
        /* frames */
        .fr_back = 24, .fr_code = 32, .fr_lasti = 120, .fr_state = 132, .fr_state_kind = 1,
        .fr_owner = X, .fr_tlbc_index = X, .fr_is_entry = X, .fr_code_mask = X, .owner_generator = 127,
        .owner_skip_from = 127, .executable_any = 0, .init_shim = 0,
        /* PyCodeObject */
        .co_filename = 96, .co_name = 104, .co_qualname = X, .co_linetable = 112,
        .co_firstlineno = 36, .co_firsttraceable = X, .co_code_adaptive = X, .co_tlbc = X,
        .co_code = 40,
        /* str, bytes */
        .str_length = 16, .str_state = 32, .str_ascii_size = 48, .str_compact_size = 72,
        .str_data = 72, .py2_unicode_width = 0, .bytes_size = 16, .bytes_sval = 32,
        /* _PyStackChunk */
        .chunk_previous = X, .chunk_size = X, .chunk_data = X,
        /* for thread names: modules, types, dicts, instances, ints */
        .is_modules = 16, .md_dict = 16, .tp_basicsize = 32, .tp_dictoffset = 288,
        .ht_cached_keys = X, .dict_keys = 32, .dict_values = 40, .dict_mask = X, .dk_size = 8,
        .dk_log2_index_bytes = X, .dk_kind = X, .dk_nentries = 32, .dk_indices = 40,
        .values_values = 0, .values_valid = X, .pre_dict = X, .pre_values = X, .int_value = X,
        .int_digits = 24,
        /* asyncio tasks (found in the live 3.6, see pylayout.h; no callback0, no name) */
        .tasks = PYL_TASKS_STATIC, .await = PYL_AWAIT_STACKTOP, .gen_created = 0,
        .tp_name = 24, .tp_base = 256, .set_mask = 32, .set_table = 40, .wr_object = 16,
        .meth_self = 24, .list_items = 24, .fut_loop = 16, .fut_callback0 = X,
        .fut_state = 56, .task_fut_waiter = 88, .task_coro = 96, .task_name = X,
        .task_size = 112, .gen_frame = 16, .gen_iframe = X, .gen_frame_state = X,
        .fr_stacktop = 72, .fr_valuestack = 64,
    },
    {UNSET_OFFSETS, .name = "3.7", .major = 3, .minor = 7, .free_threaded = false,
        /* kinds */
        .frames = FO, .lasti = LB, .linetable = S8, .strings = PEP, .gil = GR, .dicts = D36,
        .attrs = AD, .ints = IS,
        /* PyObject, PyTypeObject */
        .ob_type = 8, .ob_size = 16, .tp_flags = 168,
        /* _PyRuntimeState */
        .rt_interp_head = 24, .rt_tstate_current = 1480,
        /* PyInterpreterState, its GIL */
        .is_next = 0, .is_threads_head = 8, .is_id = 16, .is_ceval_gil = X, .gil_enabled = X,
        .gil_locked = X, .gil_holder = X,
        /* PyThreadState */
        .ts_next = 8, .ts_interp = 16, .ts_frame = 24, .ts_thread_id = 176, .ts_native_tid = X,
        .ts_datastack_chunk = X, .ts_datastack_top = X, .ts_state = X, .ts_base_frame = X,
        .cframe_current = X,
        /* frames */
        .fr_back = 24, .fr_code = 32, .fr_lasti = 104, .fr_state = 116, .fr_state_kind = 1,
        .fr_owner = X, .fr_tlbc_index = X, .fr_is_entry = X, .fr_code_mask = X, .owner_generator = 127,
        .owner_skip_from = 127, .executable_any = 0, .init_shim = 0,
        /* PyCodeObject */
        .co_filename = 96, .co_name = 104, .co_qualname = X, .co_linetable = 112,
        .co_firstlineno = 36, .co_firsttraceable = X, .co_code_adaptive = X, .co_tlbc = X,
        .co_code = 40,
        /* str, bytes */
        .str_length = 16, .str_state = 32, .str_ascii_size = 48, .str_compact_size = 72,
        .str_data = 72, .py2_unicode_width = 0, .bytes_size = 16, .bytes_sval = 32,
        /* _PyStackChunk */
        .chunk_previous = X, .chunk_size = X, .chunk_data = X,
        /* for thread names: modules, types, dicts, instances, ints */
        .is_modules = 40, .md_dict = 16, .tp_basicsize = 32, .tp_dictoffset = 288,
        .ht_cached_keys = X, .dict_keys = 32, .dict_values = 40, .dict_mask = X, .dk_size = 8,
        .dk_log2_index_bytes = X, .dk_kind = X, .dk_nentries = 32, .dk_indices = 40,
        .values_values = 0, .values_valid = X, .pre_dict = X, .pre_values = X, .int_value = X,
        .int_digits = 24,
        /* asyncio tasks (found in the live 3.7, see pylayout.h) */
        .tasks = PYL_TASKS_ALL, .await = PYL_AWAIT_STACKTOP, .gen_created = 0,
        .tp_name = 24, .tp_base = 256, .set_mask = 32, .set_table = 40, .wr_object = 16,
        .meth_self = 24, .list_items = 24, .fut_loop = 16, .fut_callback0 = 24,
        .fut_state = 72, .task_fut_waiter = 104, .task_coro = 112, .task_name = X,
        .task_size = 136, .gen_frame = 16, .gen_iframe = X, .gen_frame_state = X,
        .fr_stacktop = 72, .fr_valuestack = 64,
    },
    {UNSET_OFFSETS, .name = "3.8", .major = 3, .minor = 8, .free_threaded = false,
        /* kinds */
        .frames = FO, .lasti = LB, .linetable = S8, .strings = PEP, .gil = GR, .dicts = D36,
        .attrs = AD, .ints = IS,
        /* PyObject, PyTypeObject */
        .ob_type = 8, .ob_size = 16, .tp_flags = 168,
        /* _PyRuntimeState */
        .rt_interp_head = 32, .rt_tstate_current = 1368,
        /* PyInterpreterState, its GIL */
        .is_next = 0, .is_threads_head = 8, .is_id = 16, .is_ceval_gil = X, .gil_enabled = X,
        .gil_locked = X, .gil_holder = X,
        /* PyThreadState */
        .ts_next = 8, .ts_interp = 16, .ts_frame = 24, .ts_thread_id = 176, .ts_native_tid = X,
        .ts_datastack_chunk = X, .ts_datastack_top = X, .ts_state = X, .ts_base_frame = X,
        .cframe_current = X,
        /* frames */
        .fr_back = 24, .fr_code = 32, .fr_lasti = 104, .fr_state = 116, .fr_state_kind = 1,
        .fr_owner = X, .fr_tlbc_index = X, .fr_is_entry = X, .fr_code_mask = X, .owner_generator = 127,
        .owner_skip_from = 127, .executable_any = 0, .init_shim = 0,
        /* PyCodeObject */
        .co_filename = 104, .co_name = 112, .co_qualname = X, .co_linetable = 120,
        .co_firstlineno = 40, .co_firsttraceable = X, .co_code_adaptive = X, .co_tlbc = X,
        .co_code = 48,
        /* str, bytes */
        .str_length = 16, .str_state = 32, .str_ascii_size = 48, .str_compact_size = 72,
        .str_data = 72, .py2_unicode_width = 0, .bytes_size = 16, .bytes_sval = 32,
        /* _PyStackChunk */
        .chunk_previous = X, .chunk_size = X, .chunk_data = X,
        /* for thread names: modules, types, dicts, instances, ints */
        .is_modules = 56, .md_dict = 16, .tp_basicsize = 32, .tp_dictoffset = 288,
        .ht_cached_keys = X, .dict_keys = 32, .dict_values = 40, .dict_mask = X, .dk_size = 8,
        .dk_log2_index_bytes = X, .dk_kind = X, .dk_nentries = 32, .dk_indices = 40,
        .values_values = 0, .values_valid = X, .pre_dict = X, .pre_values = X, .int_value = X,
        .int_digits = 24,
        /* asyncio tasks (found in the live 3.8, see pylayout.h) */
        .tasks = PYL_TASKS_ALL, .await = PYL_AWAIT_STACKTOP, .gen_created = 0,
        .tp_name = 24, .tp_base = 256, .set_mask = 32, .set_table = 40, .wr_object = 16,
        .meth_self = 24, .list_items = 24, .fut_loop = 16, .fut_callback0 = 24,
        .fut_state = 72, .task_fut_waiter = 104, .task_coro = 112, .task_name = 120,
        .task_size = 144, .gen_frame = 16, .gen_iframe = X, .gen_frame_state = X,
        .fr_stacktop = 72, .fr_valuestack = 64,
    },
    {UNSET_OFFSETS, .name = "3.9", .major = 3, .minor = 9, .free_threaded = false,
        /* kinds */
        .frames = FO, .lasti = LB, .linetable = S8, .strings = PEP, .gil = GR, .dicts = D36,
        .attrs = AD, .ints = IS,
        /* PyObject, PyTypeObject */
        .ob_type = 8, .ob_size = 16, .tp_flags = 168,
        /* _PyRuntimeState */
        .rt_interp_head = 32, .rt_tstate_current = 568,
        /* PyInterpreterState, its GIL */
        .is_next = 0, .is_threads_head = 8, .is_id = 24, .is_ceval_gil = X, .gil_enabled = X,
        .gil_locked = X, .gil_holder = X,
        /* PyThreadState */
        .ts_next = 8, .ts_interp = 16, .ts_frame = 24, .ts_thread_id = 176, .ts_native_tid = X,
        .ts_datastack_chunk = X, .ts_datastack_top = X, .ts_state = X, .ts_base_frame = X,
        .cframe_current = X,
        /* frames */
        .fr_back = 24, .fr_code = 32, .fr_lasti = 104, .fr_state = 116, .fr_state_kind = 1,
        .fr_owner = X, .fr_tlbc_index = X, .fr_is_entry = X, .fr_code_mask = X, .owner_generator = 127,
        .owner_skip_from = 127, .executable_any = 0, .init_shim = 0,
        /* PyCodeObject */
        .co_filename = 104, .co_name = 112, .co_qualname = X, .co_linetable = 120,
        .co_firstlineno = 40, .co_firsttraceable = X, .co_code_adaptive = X, .co_tlbc = X,
        .co_code = 48,
        /* str, bytes */
        .str_length = 16, .str_state = 32, .str_ascii_size = 48, .str_compact_size = 72,
        .str_data = 72, .py2_unicode_width = 0, .bytes_size = 16, .bytes_sval = 32,
        /* _PyStackChunk */
        .chunk_previous = X, .chunk_size = X, .chunk_data = X,
        /* for thread names: modules, types, dicts, instances, ints */
        .is_modules = 856, .md_dict = 16, .tp_basicsize = 32, .tp_dictoffset = 288,
        .ht_cached_keys = X, .dict_keys = 32, .dict_values = 40, .dict_mask = X, .dk_size = 8,
        .dk_log2_index_bytes = X, .dk_kind = X, .dk_nentries = 32, .dk_indices = 40,
        .values_values = 0, .values_valid = X, .pre_dict = X, .pre_values = X, .int_value = X,
        .int_digits = 24,
        /* asyncio tasks (found in the live 3.9, see pylayout.h) */
        .tasks = PYL_TASKS_ALL, .await = PYL_AWAIT_STACKTOP, .gen_created = 0,
        .tp_name = 24, .tp_base = 256, .set_mask = 32, .set_table = 40, .wr_object = 16,
        .meth_self = 24, .list_items = 24, .fut_loop = 16, .fut_callback0 = 24,
        .fut_state = 80, .task_fut_waiter = 144, .task_coro = 152, .task_name = 160,
        .task_size = 184, .gen_frame = 16, .gen_iframe = X, .gen_frame_state = X,
        .fr_stacktop = 72, .fr_valuestack = 64,
    },
    {UNSET_OFFSETS, .name = "3.10", .major = 3, .minor = 10, .free_threaded = false,
        /* kinds */
        .frames = FO, .lasti = LU, .linetable = T10, .strings = PEP, .gil = GR, .dicts = D36,
        .attrs = AD, .ints = IS,
        /* PyObject, PyTypeObject */
        .ob_type = 8, .ob_size = 16, .tp_flags = 168,
        /* _PyRuntimeState */
        .rt_interp_head = 32, .rt_tstate_current = 568,
        /* PyInterpreterState, its GIL */
        .is_next = 0, .is_threads_head = 8, .is_id = 24, .is_ceval_gil = X, .gil_enabled = X,
        .gil_locked = X, .gil_holder = X,
        /* PyThreadState */
        .ts_next = 8, .ts_interp = 16, .ts_frame = 24, .ts_thread_id = 176, .ts_native_tid = X,
        .ts_datastack_chunk = X, .ts_datastack_top = X, .ts_state = X, .ts_base_frame = X,
        .cframe_current = X,
        /* frames */
        .fr_back = 24, .fr_code = 32, .fr_lasti = 96, .fr_state = 108, .fr_state_kind = 2,
        .fr_owner = X, .fr_tlbc_index = X, .fr_is_entry = X, .fr_code_mask = X, .owner_generator = 127,
        .owner_skip_from = 127, .executable_any = 0, .init_shim = 0,
        /* PyCodeObject */
        .co_filename = 104, .co_name = 112, .co_qualname = X, .co_linetable = 120,
        .co_firstlineno = 40, .co_firsttraceable = X, .co_code_adaptive = X, .co_tlbc = X,
        .co_code = 48,
        /* str, bytes */
        .str_length = 16, .str_state = 32, .str_ascii_size = 48, .str_compact_size = 72,
        .str_data = 72, .py2_unicode_width = 0, .bytes_size = 16, .bytes_sval = 32,
        /* _PyStackChunk */
        .chunk_previous = X, .chunk_size = X, .chunk_data = X,
        /* for thread names: modules, types, dicts, instances, ints */
        .is_modules = 856, .md_dict = 16, .tp_basicsize = 32, .tp_dictoffset = 288,
        .ht_cached_keys = X, .dict_keys = 32, .dict_values = 40, .dict_mask = X, .dk_size = 8,
        .dk_log2_index_bytes = X, .dk_kind = X, .dk_nentries = 32, .dk_indices = 40,
        .values_values = 0, .values_valid = X, .pre_dict = X, .pre_values = X, .int_value = X,
        .int_digits = 24,
        /* asyncio tasks (found in the live 3.10, see pylayout.h) */
        .tasks = PYL_TASKS_ALL, .await = PYL_AWAIT_DEPTH, .gen_created = 0,
        .tp_name = 24, .tp_base = 256, .set_mask = 32, .set_table = 40, .wr_object = 16,
        .meth_self = 24, .list_items = 24, .fut_loop = 16, .fut_callback0 = 24,
        .fut_state = 88, .task_fut_waiter = 152, .task_coro = 160, .task_name = 168,
        .task_size = 192, .gen_frame = 16, .gen_iframe = X, .gen_frame_state = X,
        .fr_stacktop = 80, .fr_valuestack = 64,
    },
    {UNSET_OFFSETS, .name = "3.11", .major = 3, .minor = 11, .free_threaded = false,
        /* kinds */
        .frames = FI, .lasti = LP, .linetable = T11, .strings = PEP, .gil = GR, .dicts = DK3,
        .attrs = AM, .ints = IS,
        /* PyObject, PyTypeObject */
        .ob_type = 8, .ob_size = 16, .tp_flags = 168,
        /* _PyRuntimeState */
        .rt_interp_head = 40, .rt_tstate_current = 576,
        /* PyInterpreterState, its GIL */
        .is_next = 0, .is_threads_head = 16, .is_id = 48, .is_ceval_gil = X, .gil_enabled = X,
        .gil_locked = X, .gil_holder = X,
        /* PyThreadState */
        .ts_next = 8, .ts_interp = 16, .ts_frame = 56, .ts_thread_id = 152, .ts_native_tid = 160,
        .ts_datastack_chunk = 296, .ts_datastack_top = 304, .ts_state = X, .ts_base_frame = X,
        .cframe_current = 8,
        /* frames */
        .fr_back = 48, .fr_code = 32, .fr_lasti = 56, .fr_state = X, .fr_state_kind = 0,
        .fr_owner = 69, .fr_tlbc_index = X, .fr_is_entry = 68, .fr_code_mask = X, .owner_generator = 1,
        .owner_skip_from = 127, .executable_any = 0, .init_shim = 0,
        /* PyCodeObject */
        .co_filename = 112, .co_name = 120, .co_qualname = 128, .co_linetable = 136,
        .co_firstlineno = 72, .co_firsttraceable = 168, .co_code_adaptive = 184, .co_tlbc = X,
        .co_code = X,
        /* str, bytes */
        .str_length = 16, .str_state = 32, .str_ascii_size = 48, .str_compact_size = 72,
        .str_data = 72, .py2_unicode_width = 0, .bytes_size = 16, .bytes_sval = 32,
        /* _PyStackChunk */
        .chunk_previous = 0, .chunk_size = 8, .chunk_data = 24,
        /* for thread names: modules, types, dicts, instances, ints */
        .is_modules = 888, .md_dict = 16, .tp_basicsize = 32, .tp_dictoffset = 288,
        .ht_cached_keys = 872, .dict_keys = 32, .dict_values = 40, .dict_mask = X, .dk_size = 8,
        .dk_log2_index_bytes = 9, .dk_kind = 10, .dk_nentries = 24, .dk_indices = 32,
        .values_values = 0, .values_valid = X, .pre_dict = 24, .pre_values = 32, .int_value = X,
        .int_digits = 24,
        /* asyncio tasks (found in the live 3.11, see pylayout.h) */
        .tasks = PYL_TASKS_ALL, .await = PYL_AWAIT_LOCALSPLUS, .gen_created = -2,
        .tp_name = 24, .tp_base = 256, .set_mask = 32, .set_table = 40, .wr_object = 16,
        .meth_self = 24, .list_items = 24, .fut_loop = 16, .fut_callback0 = 24,
        .fut_state = 88, .task_fut_waiter = 128, .task_coro = 136, .task_name = 144,
        .task_size = 176, .gen_frame = X, .gen_iframe = 80, .gen_frame_state = 75,
        .fr_stacktop = 64, .fr_valuestack = 72,
    },
    {UNSET_OFFSETS, .name = "3.12", .major = 3, .minor = 12, .free_threaded = false,
        /* kinds */
        .frames = FI, .lasti = LP, .linetable = T11, .strings = PEP, .gil = GI, .dicts = DK3,
        .attrs = AT, .ints = IT,
        /* PyObject, PyTypeObject */
        .ob_type = 8, .ob_size = 16, .tp_flags = 168,
        /* _PyRuntimeState */
        .rt_interp_head = 40, .rt_tstate_current = X,
        /* PyInterpreterState, its GIL */
        .is_next = 0, .is_threads_head = 72, .is_id = 8, .is_ceval_gil = 384, .gil_enabled = X,
        .gil_locked = 16, .gil_holder = 8,
        /* PyThreadState */
        .ts_next = 8, .ts_interp = 16, .ts_frame = 56, .ts_thread_id = 136, .ts_native_tid = 144,
        .ts_datastack_chunk = 232, .ts_datastack_top = 240, .ts_state = X, .ts_base_frame = X,
        .cframe_current = 0,
        /* frames */
        .fr_back = 8, .fr_code = 0, .fr_lasti = 56, .fr_state = X, .fr_state_kind = 0,
        .fr_owner = 70, .fr_tlbc_index = X, .fr_is_entry = X, .fr_code_mask = X, .owner_generator = 1,
        .owner_skip_from = 3, .executable_any = 0, .init_shim = 0,
        /* PyCodeObject */
        .co_filename = 112, .co_name = 120, .co_qualname = 128, .co_linetable = 136,
        .co_firstlineno = 68, .co_firsttraceable = 176, .co_code_adaptive = 192, .co_tlbc = X,
        .co_code = X,
        /* str, bytes */
        .str_length = 16, .str_state = 32, .str_ascii_size = 40, .str_compact_size = 56,
        .str_data = 56, .py2_unicode_width = 0, .bytes_size = 16, .bytes_sval = 32,
        /* _PyStackChunk */
        .chunk_previous = 0, .chunk_size = 8, .chunk_data = 24,
        /* for thread names: modules, types, dicts, instances, ints */
        .is_modules = 944, .md_dict = 16, .tp_basicsize = 32, .tp_dictoffset = 288,
        .ht_cached_keys = 880, .dict_keys = 32, .dict_values = 40, .dict_mask = X, .dk_size = 8,
        .dk_log2_index_bytes = 9, .dk_kind = 10, .dk_nentries = 24, .dk_indices = 32,
        .values_values = 0, .values_valid = X, .pre_dict = 24, .pre_values = X, .int_value = 16,
        .int_digits = 24,
        /* asyncio tasks (found in the live 3.12, see pylayout.h) */
        .tasks = PYL_TASKS_SCHEDULED, .await = PYL_AWAIT_LOCALSPLUS, .gen_created = -2,
        .tp_name = 24, .tp_base = 256, .set_mask = 32, .set_table = 40, .wr_object = 16,
        .meth_self = 24, .list_items = 24, .fut_loop = 16, .fut_callback0 = 24,
        .fut_state = 88, .task_fut_waiter = 128, .task_coro = 136, .task_name = 144,
        .task_size = 176, .gen_frame = X, .gen_iframe = 72, .gen_frame_state = 67,
        .fr_stacktop = 64, .fr_valuestack = 72,
    },
    {UNSET_OFFSETS, .name = "3.13", .major = 3, .minor = 13, .free_threaded = false,
        /* kinds */
        .frames = FI, .lasti = LP, .linetable = T11, .strings = PEP, .gil = GI, .dicts = DK3,
        .attrs = AI, .ints = IT,
        /* PyObject, PyTypeObject */
        .ob_type = D, .ob_size = 16, .tp_flags = D,
        /* _PyRuntimeState */
        .rt_interp_head = D, .rt_tstate_current = X,
        /* PyInterpreterState, its GIL */
        .is_next = D, .is_threads_head = D, .is_id = D, .is_ceval_gil = D, .gil_enabled = X,
        .gil_locked = D, .gil_holder = D,
        /* PyThreadState */
        .ts_next = D, .ts_interp = D, .ts_frame = D, .ts_thread_id = D, .ts_native_tid = D,
        .ts_datastack_chunk = D, .ts_datastack_top = D8, .ts_state = 40, .ts_base_frame = X,
        .cframe_current = X,
        /* frames */
        .fr_back = D, .fr_code = D, .fr_lasti = D, .fr_state = X, .fr_state_kind = 0, .fr_owner = D,
        .fr_tlbc_index = X, .fr_is_entry = X, .fr_code_mask = X, .owner_generator = 1, .owner_skip_from = 3,
        .executable_any = 1, .init_shim = 1,
        /* PyCodeObject */
        .co_filename = D, .co_name = D, .co_qualname = D, .co_linetable = D, .co_firstlineno = D,
        .co_firsttraceable = 184, .co_code_adaptive = D, .co_tlbc = X, .co_code = X,
        /* str, bytes */
        .str_length = D, .str_state = D, .str_ascii_size = D, .str_compact_size = 56,
        .str_data = 56, .py2_unicode_width = 0, .bytes_size = D, .bytes_sval = D,
        /* _PyStackChunk */
        .chunk_previous = 0, .chunk_size = 8, .chunk_data = 24,
        /* for thread names: modules, types, dicts, instances, ints */
        .is_modules = D, .md_dict = 16, .tp_basicsize = 32, .tp_dictoffset = 288,
        .ht_cached_keys = 880, .dict_keys = D, .dict_values = D, .dict_mask = X, .dk_size = 8,
        .dk_log2_index_bytes = 9, .dk_kind = 10, .dk_nentries = 24, .dk_indices = 32,
        .values_values = 8, .values_valid = 3, .pre_dict = 24, .pre_values = X, .int_value = D,
        .int_digits = D,
        /* asyncio tasks (found in the live 3.13, see pylayout.h) */
        .tasks = PYL_TASKS_SCHEDULED, .await = PYL_AWAIT_LOCALSPLUS, .gen_created = -3,
        .tp_name = 24, .tp_base = 256, .set_mask = 32, .set_table = 40, .wr_object = 16,
        .meth_self = 24, .list_items = 24, .fut_loop = 16, .fut_callback0 = 24,
        .fut_state = 96, .task_fut_waiter = 112, .task_coro = 120, .task_name = 128,
        .task_size = 144, .gen_frame = X, .gen_iframe = 72, .gen_frame_state = 67,
        .fr_stacktop = 64, .fr_valuestack = 72,
    },
    {UNSET_OFFSETS, .name = "3.13t", .major = 3, .minor = 13, .free_threaded = true,
        /* kinds */
        .frames = FI, .lasti = LP, .linetable = T11, .strings = PEP, .gil = GI, .dicts = DK3,
        .attrs = AI, .ints = IT,
        /* PyObject, PyTypeObject */
        .ob_type = D, .ob_size = 32, .tp_flags = D,
        /* _PyRuntimeState */
        .rt_interp_head = D, .rt_tstate_current = X,
        /* PyInterpreterState, its GIL */
        .is_next = D, .is_threads_head = D, .is_id = D, .is_ceval_gil = D, .gil_enabled = D,
        .gil_locked = D, .gil_holder = D,
        /* PyThreadState */
        .ts_next = D, .ts_interp = D, .ts_frame = D, .ts_thread_id = D, .ts_native_tid = D,
        .ts_datastack_chunk = D, .ts_datastack_top = D8, .ts_state = 40, .ts_base_frame = X,
        .cframe_current = X,
        /* frames */
        .fr_back = D, .fr_code = D, .fr_lasti = D, .fr_state = X, .fr_state_kind = 0, .fr_owner = D,
        .fr_tlbc_index = X, .fr_is_entry = X, .fr_code_mask = X, .owner_generator = 1, .owner_skip_from = 3,
        .executable_any = 1, .init_shim = 1,
        /* PyCodeObject */
        .co_filename = D, .co_name = D, .co_qualname = D, .co_linetable = D, .co_firstlineno = D,
        .co_firsttraceable = 200, .co_code_adaptive = D, .co_tlbc = X, .co_code = X,
        /* str, bytes */
        .str_length = D, .str_state = D, .str_ascii_size = D, .str_compact_size = 72,
        .str_data = 72, .py2_unicode_width = 0, .bytes_size = D, .bytes_sval = D,
        /* _PyStackChunk */
        .chunk_previous = 0, .chunk_size = 8, .chunk_data = 24,
        /* for thread names: modules, types, dicts, instances, ints */
        .is_modules = D, .md_dict = 32, .tp_basicsize = 48, .tp_dictoffset = 304,
        .ht_cached_keys = 896, .dict_keys = D, .dict_values = D, .dict_mask = X, .dk_size = 8,
        .dk_log2_index_bytes = 9, .dk_kind = 10, .dk_nentries = 24, .dk_indices = 32,
        .values_values = 8, .values_valid = 3, .pre_dict = 8, .pre_values = X, .int_value = D,
        .int_digits = D,
        NO_TASKS,
    },
    {UNSET_OFFSETS, .name = "3.14", .major = 3, .minor = 14, .free_threaded = false,
        /* kinds */
        .frames = FI, .lasti = LP, .linetable = T11, .strings = PEP, .gil = GI, .dicts = DK3,
        .attrs = AI, .ints = IT,
        /* PyObject, PyTypeObject */
        .ob_type = D, .ob_size = 16, .tp_flags = D,
        /* _PyRuntimeState */
        .rt_interp_head = D, .rt_tstate_current = X,
        /* PyInterpreterState, its GIL */
        .is_next = D, .is_threads_head = D, .is_id = D, .is_ceval_gil = D, .gil_enabled = X,
        .gil_locked = D, .gil_holder = D,
        /* PyThreadState */
        .ts_next = D, .ts_interp = D, .ts_frame = D, .ts_thread_id = D, .ts_native_tid = D,
        .ts_datastack_chunk = D, .ts_datastack_top = D8, .ts_state = 44, .ts_base_frame = X,
        .cframe_current = X,
        /* frames */
        .fr_back = D, .fr_code = D, .fr_lasti = D, .fr_state = X, .fr_state_kind = 0, .fr_owner = D,
        .fr_tlbc_index = X, .fr_is_entry = X, .fr_code_mask = ~3, .owner_generator = 1, .owner_skip_from = 3,
        .executable_any = 1, .init_shim = 1,
        /* PyCodeObject */
        .co_filename = D, .co_name = D, .co_qualname = D, .co_linetable = D, .co_firstlineno = D,
        .co_firsttraceable = 192, .co_code_adaptive = D, .co_tlbc = X, .co_code = X,
        /* str, bytes */
        .str_length = D, .str_state = D, .str_ascii_size = D, .str_compact_size = 56,
        .str_data = 56, .py2_unicode_width = 0, .bytes_size = D, .bytes_sval = D,
        /* _PyStackChunk */
        .chunk_previous = 0, .chunk_size = 8, .chunk_data = 24,
        /* for thread names: modules, types, dicts, instances, ints */
        .is_modules = D, .md_dict = 16, .tp_basicsize = 32, .tp_dictoffset = 288,
        .ht_cached_keys = 880, .dict_keys = D, .dict_values = D, .dict_mask = X, .dk_size = 8,
        .dk_log2_index_bytes = 9, .dk_kind = 10, .dk_nentries = 24, .dk_indices = 32,
        .values_values = 8, .values_valid = 3, .pre_dict = 24, .pre_values = X, .int_value = D,
        .int_digits = D,
        /* asyncio tasks: the per-thread lists (TaskObj's offsets from _asyncio at run time) */
        .tasks = PYL_TASKS_LISTS, .await = PYL_AWAIT_STACKPOINTER, .gen_created = -3,
        .tp_name = D, .tp_base = X, .set_mask = D, .set_table = D, .wr_object = X,
        .meth_self = X, .list_items = X, .fut_loop = X, .fut_callback0 = X, .fut_state = X,
        /* task_fut_waiter: not published; TaskObj of 3.14.0 compiled: 120 (GIL build) */
        .task_fut_waiter = 120, .task_coro = X, .task_name = X, .task_size = X, .gen_frame = X,
        .gen_iframe = D, .gen_frame_state = D, .fr_stacktop = D, .fr_valuestack = X,
    },
    {UNSET_OFFSETS, .name = "3.14t", .major = 3, .minor = 14, .free_threaded = true,
        /* kinds */
        .frames = FI, .lasti = LP, .linetable = T11, .strings = PB0, .gil = GI, .dicts = DK3,
        .attrs = AI, .ints = IT,
        /* PyObject, PyTypeObject */
        .ob_type = D, .ob_size = 32, .tp_flags = D,
        /* _PyRuntimeState */
        .rt_interp_head = D, .rt_tstate_current = X,
        /* PyInterpreterState, its GIL */
        .is_next = D, .is_threads_head = D, .is_id = D, .is_ceval_gil = D, .gil_enabled = D,
        .gil_locked = D, .gil_holder = D,
        /* PyThreadState */
        .ts_next = D, .ts_interp = D, .ts_frame = D, .ts_thread_id = D, .ts_native_tid = D,
        .ts_datastack_chunk = D, .ts_datastack_top = D8, .ts_state = 44, .ts_base_frame = X,
        .cframe_current = X,
        /* frames */
        .fr_back = D, .fr_code = D, .fr_lasti = D, .fr_state = X, .fr_state_kind = 0, .fr_owner = D,
        .fr_tlbc_index = D, .fr_is_entry = X, .fr_code_mask = ~3, .owner_generator = 1, .owner_skip_from = 3,
        .executable_any = 1, .init_shim = 1,
        /* PyCodeObject */
        .co_filename = D, .co_name = D, .co_qualname = D, .co_linetable = D, .co_firstlineno = D,
        .co_firsttraceable = 208, .co_code_adaptive = D, .co_tlbc = D, .co_code = X,
        /* str, bytes */
        .str_length = D, .str_state = D, .str_ascii_size = D, .str_compact_size = 72,
        .str_data = 72, .py2_unicode_width = 0, .bytes_size = D, .bytes_sval = D,
        /* _PyStackChunk */
        .chunk_previous = 0, .chunk_size = 8, .chunk_data = 24,
        /* for thread names: modules, types, dicts, instances, ints */
        .is_modules = D, .md_dict = 32, .tp_basicsize = 48, .tp_dictoffset = 304,
        .ht_cached_keys = 896, .dict_keys = D, .dict_values = D, .dict_mask = X, .dk_size = 8,
        .dk_log2_index_bytes = 9, .dk_kind = 10, .dk_nentries = 24, .dk_indices = 32,
        .values_values = 8, .values_valid = 3, .pre_dict = 8, .pre_values = X, .int_value = D,
        .int_digits = D,
        /* asyncio tasks: the per-thread lists (TaskObj's offsets from _asyncio at run time) */
        .tasks = PYL_TASKS_LISTS, .await = PYL_AWAIT_STACKPOINTER, .gen_created = -3,
        .tp_name = D, .tp_base = X, .set_mask = D, .set_table = D, .wr_object = X,
        .meth_self = X, .list_items = X, .fut_loop = X, .fut_callback0 = X, .fut_state = X,
        /* task_fut_waiter: not published; TaskObj of 3.14.0 compiled: 136 (free-threaded) */
        .task_fut_waiter = 136, .task_coro = X, .task_name = X, .task_size = X, .gen_frame = X,
        .gen_iframe = D, .gen_frame_state = D, .fr_stacktop = D, .fr_valuestack = X,
    },
    {UNSET_OFFSETS, .name = "3.15", .major = 3, .minor = 15, .free_threaded = false,
        /* kinds */
        .frames = FI, .lasti = LP, .linetable = T11, .strings = PEP, .gil = GI, .dicts = DK3,
        .attrs = AI, .ints = IT,
        /* PyObject, PyTypeObject */
        .ob_type = D, .ob_size = 16, .tp_flags = 168,
        /* _PyRuntimeState */
        .rt_interp_head = D, .rt_tstate_current = X,
        /* PyInterpreterState, its GIL */
        .is_next = D, .is_threads_head = D, .is_id = D, .is_ceval_gil = D, .gil_enabled = X,
        .gil_locked = D, .gil_holder = D,
        /* PyThreadState */
        .ts_next = D, .ts_interp = D, .ts_frame = D, .ts_thread_id = D, .ts_native_tid = D,
        .ts_datastack_chunk = D, .ts_datastack_top = D8, .ts_state = 44, .ts_base_frame = D,
        .cframe_current = X,
        /* frames */
        .fr_back = D, .fr_code = D, .fr_lasti = D, .fr_state = X, .fr_state_kind = 0, .fr_owner = D,
        .fr_tlbc_index = X, .fr_is_entry = X, .fr_code_mask = ~3, .owner_generator = 1, .owner_skip_from = 3,
        .executable_any = 1, .init_shim = 1,
        /* PyCodeObject */
        .co_filename = D, .co_name = D, .co_qualname = D, .co_linetable = D, .co_firstlineno = D,
        .co_firsttraceable = X, .co_code_adaptive = D, .co_tlbc = X, .co_code = X,
        /* str, bytes */
        .str_length = 16, .str_state = 32, .str_ascii_size = 40, .str_compact_size = 56,
        .str_data = 56, .py2_unicode_width = 0, .bytes_size = 16, .bytes_sval = 32,
        /* _PyStackChunk */
        .chunk_previous = 0, .chunk_size = 8, .chunk_data = 24,
        /* for thread names: modules, types, dicts, instances, ints */
        .is_modules = D, .md_dict = 16, .tp_basicsize = 32, .tp_dictoffset = 288,
        .ht_cached_keys = X, .dict_keys = 32, .dict_values = 40, .dict_mask = X, .dk_size = 8,
        .dk_log2_index_bytes = 9, .dk_kind = 10, .dk_nentries = 24, .dk_indices = 32,
        .values_values = 8, .values_valid = 3, .pre_dict = 24, .pre_values = X, .int_value = 16,
        .int_digits = 24,
        NO_TASKS,
    },
    {UNSET_OFFSETS, .name = "3.15t", .major = 3, .minor = 15, .free_threaded = true,
        /* kinds */
        .frames = FI, .lasti = LP, .linetable = T11, .strings = PB0, .gil = GI, .dicts = DK3,
        .attrs = AI, .ints = IT,
        /* PyObject, PyTypeObject */
        .ob_type = D, .ob_size = 32, .tp_flags = 184,
        /* _PyRuntimeState */
        .rt_interp_head = D, .rt_tstate_current = X,
        /* PyInterpreterState, its GIL */
        .is_next = D, .is_threads_head = D, .is_id = D, .is_ceval_gil = D, .gil_enabled = D,
        .gil_locked = D, .gil_holder = D,
        /* PyThreadState */
        .ts_next = D, .ts_interp = D, .ts_frame = D, .ts_thread_id = D, .ts_native_tid = D,
        .ts_datastack_chunk = D, .ts_datastack_top = D8, .ts_state = 44, .ts_base_frame = D,
        .cframe_current = X,
        /* frames */
        .fr_back = D, .fr_code = D, .fr_lasti = D, .fr_state = X, .fr_state_kind = 0, .fr_owner = D,
        .fr_tlbc_index = D, .fr_is_entry = X, .fr_code_mask = ~3, .owner_generator = 1, .owner_skip_from = 3,
        .executable_any = 1, .init_shim = 1,
        /* PyCodeObject */
        .co_filename = D, .co_name = D, .co_qualname = D, .co_linetable = D, .co_firstlineno = D,
        .co_firsttraceable = X, .co_code_adaptive = D, .co_tlbc = D, .co_code = X,
        /* str, bytes */
        .str_length = 32, .str_state = 48, .str_ascii_size = 56, .str_compact_size = 72,
        .str_data = 72, .py2_unicode_width = 0, .bytes_size = 32, .bytes_sval = 48,
        /* _PyStackChunk */
        .chunk_previous = 0, .chunk_size = 8, .chunk_data = 24,
        /* for thread names: modules, types, dicts, instances, ints */
        .is_modules = D, .md_dict = 32, .tp_basicsize = 48, .tp_dictoffset = 304,
        .ht_cached_keys = X, .dict_keys = 48, .dict_values = 56, .dict_mask = X, .dk_size = 8,
        .dk_log2_index_bytes = 9, .dk_kind = 10, .dk_nentries = 24, .dk_indices = 32,
        .values_values = 8, .values_valid = 3, .pre_dict = 8, .pre_values = X, .int_value = 32,
        .int_digits = 40,
        NO_TASKS,
    },
};
// clang-format on
#pragma GCC diagnostic pop

#define N_BUILDS        (sizeof(builds) / sizeof(builds[0]))
#define N_OFFSET_FIELDS (sizeof(offset_fields) / sizeof(offset_fields[0]))

/*
 * Patch-level exceptions to `rows`: 3.7.0-3.7.3 kept gilstate.tstate_current
 * at 1392 (py-spy's bindings [U]; 3.7.16 measured 1480).
 */
static const struct patch {
        uint8_t minor, micro_max;
        size_t off;
        int32_t value;
} patches[] = {
    {7, 3, OFF(rt_tstate_current), 1392},
};

/* ---- _Py_DebugOffsets ----------------------------------------------------- */

/* Sub-structs of _Py_DebugOffsets, each starting with its `size` field. */
enum dgroup {
        G_RT,
        G_IS,
        G_TS,
        G_FR,
        G_CO,
        G_OB,
        G_TY,
        G_BY,
        G_UN,
        G_DI,
        G_LO,
        G_SE,
        G_GE,
        N_GROUPS
};

/* Where _Py_DebugOffsets keeps the offset of each field it gives us (0: not there). */
struct dbg_positions {
        uint16_t rt_interp_head, is_id, is_next, is_threads_head, is_ceval_gil, gil_enabled,
            gil_locked, gil_holder, ts_next, ts_interp, ts_frame, ts_base_frame, ts_thread_id,
            ts_native_tid, ts_datastack_chunk, fr_back, fr_code, fr_lasti, fr_owner, fr_tlbc_index,
            co_filename, co_name, co_qualname, co_linetable, co_firstlineno, co_code_adaptive,
            co_tlbc, ob_type, tp_flags, bytes_size, bytes_sval, str_state, str_length,
            str_ascii_size, is_modules, dict_keys, dict_values, int_value, int_digits;
        /* asyncio tasks (3.14+) */
        uint16_t tp_name, set_mask, set_table, gen_iframe, gen_frame_state, fr_stackpointer;
};

static const struct dbg_version {
        uint8_t minor;
        uint16_t min_len;            /* sizeof(_Py_DebugOffsets) */
        uint16_t size_pos[N_GROUPS]; /* position of each group's `size` */
        uint16_t gil_rs_pos;         /* of the gil struct's offset in PyInterpreterState */
        struct dbg_positions at;
} dbg_versions[] = {
    {
        .minor = 13,
        .min_len = 584,
        /*           RT  IS  TS   FR   CO   OB   TY   BY   UN   DI   LO */
        .size_pos = {24, 48, 152, 224, 272, 352, 368, 512, 536, 448, 488},
        .gil_rs_pos = 120,
        .at =
            {
                .rt_interp_head = 40,
                .is_id = 56,
                .is_next = 64,
                .is_threads_head = 72,
                .is_ceval_gil = 112,
                .gil_enabled = 128,
                .gil_locked = 136,
                .gil_holder = 144,
                .ts_next = 168,
                .ts_interp = 176,
                .ts_frame = 184,
                .ts_base_frame = 0,
                .ts_thread_id = 192,
                .ts_native_tid = 200,
                .ts_datastack_chunk = 208,
                .fr_back = 232,
                .fr_code = 240,
                .fr_lasti = 248,
                .fr_owner = 264,
                .fr_tlbc_index = 0,
                .co_filename = 280,
                .co_name = 288,
                .co_qualname = 296,
                .co_linetable = 304,
                .co_firstlineno = 312,
                .co_code_adaptive = 344,
                .co_tlbc = 0,
                .ob_type = 360,
                .tp_flags = 392,
                .bytes_size = 520,
                .bytes_sval = 528,
                .str_state = 544,
                .str_length = 552,
                .str_ascii_size = 560,
                .is_modules = 88,
                .dict_keys = 456,
                .dict_values = 464,
                .int_value = 496,
                .int_digits = 504,
            },
    },
    {
        .minor = 14,
        .min_len = 760,
        /*           RT  IS  TS   FR   CO   OB   TY   BY   UN   DI   LO   SE   GE */
        .size_pos = {24, 48, 176, 248, 312, 400, 416, 592, 616, 528, 568, 496, 664},
        .gil_rs_pos = 128,
        .at =
            {
                .rt_interp_head = 40,
                .is_id = 56,
                .is_next = 64,
                .is_threads_head = 72,
                .is_ceval_gil = 120,
                .gil_enabled = 136,
                .gil_locked = 144,
                .gil_holder = 152,
                .ts_next = 192,
                .ts_interp = 200,
                .ts_frame = 208,
                .ts_base_frame = 0,
                .ts_thread_id = 216,
                .ts_native_tid = 224,
                .ts_datastack_chunk = 232,
                .fr_back = 256,
                .fr_code = 264,
                .fr_lasti = 272,
                .fr_owner = 288,
                .fr_tlbc_index = 304,
                .co_filename = 320,
                .co_name = 328,
                .co_qualname = 336,
                .co_linetable = 344,
                .co_firstlineno = 352,
                .co_code_adaptive = 384,
                .co_tlbc = 392,
                .ob_type = 408,
                .tp_flags = 440,
                .bytes_size = 600,
                .bytes_sval = 608,
                .str_state = 624,
                .str_length = 632,
                .str_ascii_size = 640,
                .is_modules = 96,
                .dict_keys = 536,
                .dict_values = 544,
                .int_value = 576,
                .int_digits = 584,
                .tp_name = 424,
                .set_mask = 520,
                .set_table = 512,
                .gen_iframe = 680,
                .gen_frame_state = 688,
                .fr_stackpointer = 296,
            },
    },
    {
        /* 3.15 [U]: groups after pyobject are not used (supplement instead) */
        .minor = 15,
        .min_len = 888,
        /*           RT  IS  TS   FR   CO   OB   TY   BY   UN   DI   LO */
        .size_pos = {24, 48, 176, 312, 376, 464, 0, 0, 0, 0, 0},
        .gil_rs_pos = 128,
        .at =
            {
                .rt_interp_head = 40,
                .is_id = 56,
                .is_next = 64,
                .is_threads_head = 72,
                .is_ceval_gil = 120,
                .gil_enabled = 136,
                .gil_locked = 144,
                .gil_holder = 152,
                .ts_next = 192,
                .ts_interp = 200,
                .ts_frame = 208,
                .ts_base_frame = 216,
                .ts_thread_id = 240,
                .ts_native_tid = 248,
                .ts_datastack_chunk = 256,
                .fr_back = 320,
                .fr_code = 328,
                .fr_lasti = 336,
                .fr_owner = 352,
                .fr_tlbc_index = 368,
                .co_filename = 384,
                .co_name = 392,
                .co_qualname = 400,
                .co_linetable = 408,
                .co_firstlineno = 416,
                .co_code_adaptive = 448,
                .co_tlbc = 456,
                .ob_type = 472,
                .tp_flags = 0,
                .bytes_size = 0,
                .bytes_sval = 0,
                .str_state = 0,
                .str_length = 0,
                .str_ascii_size = 0,
                .is_modules = 96,
                .dict_keys = 0,
                .dict_values = 0,
                .int_value = 0,
                .int_digits = 0,
            },
    },
};
#define N_DBG_VERSIONS (sizeof(dbg_versions) / sizeof(dbg_versions[0]))

/* Plausible sizes of the described structs, to reject garbage offsets. */
static const uint32_t group_max_size[N_GROUPS] = {
    [G_RT] = 1u << 20, [G_IS] = 1u << 20, [G_TS] = 1u << 16, [G_FR] = 512, [G_CO] = 1024,
    [G_OB] = 64,       [G_TY] = 2048,     [G_BY] = 128,      [G_UN] = 256, [G_DI] = 128,
    [G_LO] = 64,       [G_SE] = 256,      [G_GE] = 512,
};

/* Groups only the thread names need: when implausible, names are off, the walk still works. */
static const bool group_optional[N_GROUPS] = {
    [G_DI] = true, [G_LO] = true, [G_SE] = true, [G_GE] = true};

/* How a debug value becomes a layout value. */
enum dxform {
        DX_PLAIN,        /* offset as is */
        DX_GIL_RELATIVE, /* offset in interp of a _gil field: make it relative to the gil struct */
        DX_SMALL,        /* a size, or an offset inside a small struct: taken as is */
        DX_NONZERO,      /* 0 means "absent" (tlbc fields in GIL builds) */
        DX_NAMES,        /* offset as is, only thread names need it: implausible leaves it -1 */
        DX_TASKS,        /* offset as is, only --async needs it: implausible leaves it -1 */
};

/* What each position holds, and how its value is checked and used. */
#define POS(field) offsetof(struct dbg_positions, field)
static const struct dbg_field {
        size_t off; /* in struct pylayout */
        size_t pos; /* in struct dbg_positions */
        enum dgroup group;
        enum dxform xform;
        uint8_t width; /* bytes of the field, for the bounds check */
} dbg_fields[] = {
    {OFF(rt_interp_head), POS(rt_interp_head), G_RT, DX_PLAIN, 8},
    {OFF(is_id), POS(is_id), G_IS, DX_PLAIN, 8},
    {OFF(is_next), POS(is_next), G_IS, DX_PLAIN, 8},
    {OFF(is_threads_head), POS(is_threads_head), G_IS, DX_PLAIN, 8},
    {OFF(is_ceval_gil), POS(is_ceval_gil), G_IS, DX_PLAIN, 8},
    {OFF(gil_enabled), POS(gil_enabled), G_IS, DX_SMALL, 8},
    {OFF(gil_locked), POS(gil_locked), G_IS, DX_GIL_RELATIVE, 8},
    {OFF(gil_holder), POS(gil_holder), G_IS, DX_GIL_RELATIVE, 8},
    {OFF(ts_next), POS(ts_next), G_TS, DX_PLAIN, 8},
    {OFF(ts_interp), POS(ts_interp), G_TS, DX_PLAIN, 8},
    {OFF(ts_frame), POS(ts_frame), G_TS, DX_PLAIN, 8},
    {OFF(ts_base_frame), POS(ts_base_frame), G_TS, DX_NONZERO, 8},
    {OFF(ts_thread_id), POS(ts_thread_id), G_TS, DX_PLAIN, 8},
    {OFF(ts_native_tid), POS(ts_native_tid), G_TS, DX_PLAIN, 8},
    {OFF(ts_datastack_chunk), POS(ts_datastack_chunk), G_TS, DX_PLAIN, 8},
    {OFF(fr_back), POS(fr_back), G_FR, DX_PLAIN, 8},
    {OFF(fr_code), POS(fr_code), G_FR, DX_PLAIN, 8},
    {OFF(fr_lasti), POS(fr_lasti), G_FR, DX_PLAIN, 8},
    {OFF(fr_owner), POS(fr_owner), G_FR, DX_PLAIN, 1},
    {OFF(fr_tlbc_index), POS(fr_tlbc_index), G_FR, DX_NONZERO, 4},
    {OFF(co_filename), POS(co_filename), G_CO, DX_PLAIN, 8},
    {OFF(co_name), POS(co_name), G_CO, DX_PLAIN, 8},
    {OFF(co_qualname), POS(co_qualname), G_CO, DX_PLAIN, 8},
    {OFF(co_linetable), POS(co_linetable), G_CO, DX_PLAIN, 8},
    {OFF(co_firstlineno), POS(co_firstlineno), G_CO, DX_PLAIN, 4},
    {OFF(co_code_adaptive), POS(co_code_adaptive), G_CO, DX_PLAIN, 1},
    {OFF(co_tlbc), POS(co_tlbc), G_CO, DX_NONZERO, 8},
    {OFF(ob_type), POS(ob_type), G_OB, DX_PLAIN, 8},
    {OFF(tp_flags), POS(tp_flags), G_TY, DX_PLAIN, 8},
    {OFF(bytes_size), POS(bytes_size), G_BY, DX_PLAIN, 8},
    {OFF(bytes_sval), POS(bytes_sval), G_BY, DX_PLAIN, 1},
    {OFF(str_state), POS(str_state), G_UN, DX_PLAIN, 4},
    {OFF(str_length), POS(str_length), G_UN, DX_PLAIN, 8},
    {OFF(str_ascii_size), POS(str_ascii_size), G_UN, DX_SMALL, 8},
    {OFF(is_modules), POS(is_modules), G_IS, DX_NAMES, 8},
    {OFF(dict_keys), POS(dict_keys), G_DI, DX_NAMES, 8},
    {OFF(dict_values), POS(dict_values), G_DI, DX_NAMES, 8},
    {OFF(int_value), POS(int_value), G_LO, DX_NAMES, 8},
    {OFF(int_digits), POS(int_digits), G_LO, DX_NAMES, 4},
    {OFF(tp_name), POS(tp_name), G_TY, DX_TASKS, 8},
    {OFF(set_mask), POS(set_mask), G_SE, DX_TASKS, 8},
    {OFF(set_table), POS(set_table), G_SE, DX_TASKS, 8},
    {OFF(gen_iframe), POS(gen_iframe), G_GE, DX_TASKS, 8},
    {OFF(gen_frame_state), POS(gen_frame_state), G_GE, DX_TASKS, 1},
    {OFF(fr_stacktop), POS(fr_stackpointer), G_FR, DX_TASKS, 8},
};
#define N_DBG_FIELDS (sizeof(dbg_fields) / sizeof(dbg_fields[0]))

/* Positions shared by every version: header. */
#define DBG_VERSION_POS       8
#define DBG_FREE_THREADED_POS 16

/* Where field f's offset sits in version dv's _Py_DebugOffsets; 0: not there. */
static uint16_t dbg_pos(const struct dbg_version *dv, const struct dbg_field *f)
{
        uint16_t p;
        memcpy(&p, (const char *)&dv->at + f->pos, sizeof(p));
        return p;
}

/* ---- filling a layout ------------------------------------------------------ */

static void set_i32(struct pylayout *L, size_t off, int32_t v)
{
        memcpy((char *)L + off, &v, sizeof(v));
}

static int32_t field_i32(const struct pylayout *L, size_t off)
{
        int32_t v;
        memcpy(&v, (const char *)L + off, sizeof(v));
        return v;
}

static uint32_t span_end(int32_t off, uint32_t width, uint32_t cur)
{
        if (off < 0)
                return cur;
        uint32_t e = (uint32_t)off + width;
        return e > cur ? e : cur;
}

/* The read sizes derived from the offsets: one read per frame, one per code object. */
static void derive_read_sizes(struct pylayout *L)
{
        uint32_t f = 0;
        f = span_end(L->fr_back, 8, f);
        f = span_end(L->fr_code, 8, f);
        f = span_end(L->fr_lasti, L->lasti == PYL_LASTI_POINTER ? 8 : 4, f);
        f = span_end(L->fr_owner, 1, f);
        f = span_end(L->fr_state, 1, f);
        f = span_end(L->fr_tlbc_index, 4, f);
        f = span_end(L->fr_is_entry, 1, f);
        L->fr_read = (f + 7) & ~7u;
        uint32_t c = 0;
        c = span_end(L->ob_type, 8, c);
        c = span_end(L->ob_size, 8, c);
        c = span_end(L->co_filename, 8, c);
        c = span_end(L->co_name, 8, c);
        c = span_end(L->co_qualname, 8, c);
        c = span_end(L->co_linetable, 8, c);
        c = span_end(L->co_firstlineno, 4, c);
        c = span_end(L->co_firsttraceable, 4, c);
        c = span_end(L->co_tlbc, 8, c);
        c = span_end(L->co_code, 8, c);
        L->co_read = (c + 7) & ~7u;
}

/* The build's index in `builds`, or -1. */
static int build_for(int major, int minor, bool free_threaded)
{
        for (size_t b = 0; b < N_BUILDS; b++)
                if (builds[b].major == major && builds[b].minor == minor &&
                    builds[b].free_threaded == free_threaded)
                        return (int)b;
        return -1;
}

/* The index of a minor version in `dbg_versions`, or -1 when its layout is all in `builds`. */
static int dbg_version_for(int major, int minor)
{
        for (size_t i = 0; i < N_DBG_VERSIONS; i++)
                if (major == 3 && dbg_versions[i].minor == minor)
                        return (int)i;
        return -1;
}

/* Copy build b; D cells are left at X for the debug loader to fill. */
static void fill_build(struct pylayout *L, int b, int obj_shift)
{
        *L = builds[b];
        for (size_t i = 0; i < N_OFFSET_FIELDS; i++) {
                int32_t v = field_i32(L, offset_fields[i].off);
                assert(v != U);
                if (v == D || v == D8)
                        v = X;
                else if (offset_fields[i].obj && v >= 0)
                        v += obj_shift;
                set_i32(L, offset_fields[i].off, v);
        }
}

int pylayout_check_tables(char *err, size_t errlen)
{
        for (size_t b = 0; b < N_BUILDS; b++) {
                bool debug = dbg_version_for(builds[b].major, builds[b].minor) >= 0;
                if (build_for(builds[b].major, builds[b].minor, builds[b].free_threaded) !=
                    (int)b) {
                        snprintf(err, errlen, "build %s is in the table twice", builds[b].name);
                        return -1;
                }
                for (size_t i = 0; i < N_OFFSET_FIELDS; i++) {
                        int32_t v = field_i32(&builds[b], offset_fields[i].off);
                        bool marker = v == D || v == D8; /* U is below X too */
                        if ((v < X && !marker) || (marker && !debug)) {
                                snprintf(err, errlen,
                                         "build %s: the offset at layout byte %zu is %s",
                                         builds[b].name, offset_fields[i].off,
                                         v == U ? "not set" : "invalid here");
                                return -1;
                        }
                }
                if (!builds[b].frames || !builds[b].lasti || !builds[b].linetable ||
                    !builds[b].strings || !builds[b].gil || !builds[b].dicts || !builds[b].attrs ||
                    !builds[b].ints) {
                        snprintf(err, errlen, "build %s: a kind is not set", builds[b].name);
                        return -1;
                }
        }
        return 0;
}

bool pylayout_supported(int major, int minor)
{
        return build_for(major, minor, false) >= 0;
}

void pylayout_supported_list(char *buf, size_t len)
{
        /* The GIL builds in table order, runs of consecutive minors joined: "2.7 and 3.6 to 3.15".
         */
        const struct pylayout *gil[N_BUILDS];
        size_t n = 0;
        for (size_t b = 0; b < N_BUILDS; b++)
                if (!builds[b].free_threaded)
                        gil[n++] = &builds[b];
        size_t used = 0;
        buf[0] = 0;
        for (size_t i = 0; i < n;) {
                size_t e = i + 1;
                while (e < n && gil[e]->major == gil[i]->major &&
                       gil[e]->minor == gil[e - 1]->minor + 1)
                        e++;
                const char *sep = i == 0 ? "" : e == n ? " and " : ", ";
                int w = e - i == 1 ? snprintf(buf + used, len - used, "%s%s", sep, gil[i]->name)
                                   : snprintf(buf + used, len - used, "%s%s to %s", sep,
                                              gil[i]->name, gil[e - 1]->name);
                if (w < 0 || (size_t)w >= len - used)
                        return;
                used += (size_t)w;
                i = e;
        }
}

const struct pylayout *pylayout_table(int major, int minor, int micro, bool trace_refs)
{
        static struct pylayout L;
        int b = build_for(major, minor, false);
        if (b < 0 || dbg_version_for(major, minor) >= 0)
                return NULL;
        fill_build(&L, b, trace_refs ? 16 : 0);
        for (size_t i = 0; i < sizeof(patches) / sizeof(patches[0]); i++)
                if (patches[i].minor == minor && major == 3 && micro <= patches[i].micro_max)
                        set_i32(&L, patches[i].off, patches[i].value);
        derive_read_sizes(&L);
        return &L;
}

static uint64_t get_u64(const uint8_t *p)
{
        uint64_t v;
        memcpy(&v, p, sizeof(v));
        return v;
}

int pylayout_from_debug_offsets(const uint8_t *dbg, size_t len, uint32_t version_hex,
                                bool free_threaded, struct pylayout *out, char *err, size_t errlen)
{
        int major = (int)(version_hex >> 24), minor = (int)(version_hex >> 16 & 0xff);
        int v = dbg_version_for(major, minor);
        if (v < 0) {
                snprintf(err, errlen, "Python %d.%d: no _Py_DebugOffsets layout known", major,
                         minor);
                return PYFIND_UNSUPPORTED;
        }
        const struct dbg_version *dv = &dbg_versions[v];
        if (len < dv->min_len) {
                snprintf(err, errlen, "_Py_DebugOffsets: read %zu bytes, need %u", len,
                         dv->min_len);
                return PYFIND_UNSUPPORTED;
        }
        if (memcmp(dbg, "xdebugpy", 8) != 0) {
                snprintf(err, errlen,
                         "_PyRuntime does not start with the \"xdebugpy\" cookie: not a %d.%d "
                         "runtime, or not initialised yet",
                         major, minor);
                return PYFIND_NOT_READY;
        }
        uint64_t dver = get_u64(dbg + DBG_VERSION_POS);
        if ((dver >> 16 & 0xffff) != (version_hex >> 16 & 0xffff)) {
                snprintf(err, errlen,
                         "_Py_DebugOffsets says version %#llx, the binary says %#x: refusing a "
                         "layout for another version",
                         (unsigned long long)dver, version_hex);
                return PYFIND_UNSUPPORTED;
        }
        uint64_t dft = get_u64(dbg + DBG_FREE_THREADED_POS);
        if (dft > 1 || (dft == 1) != free_threaded) {
                snprintf(err, errlen,
                         "_Py_DebugOffsets says free_threaded=%llu but the build was identified "
                         "as %s",
                         (unsigned long long)dft, free_threaded ? "free-threaded" : "GIL");
                return PYFIND_UNSUPPORTED;
        }
        int b = build_for(3, minor, free_threaded);
        if (b < 0) {
                snprintf(err, errlen, "Python %d.%d%s: no layout known", major, minor,
                         free_threaded ? "t" : "");
                return PYFIND_UNSUPPORTED;
        }
        const struct pylayout *tmpl = &builds[b];
        struct pylayout L;
        fill_build(&L, b, 0);
        L.from_debug_offsets = true;

        uint64_t gsize[N_GROUPS] = {0};
        for (int g = 0; g < N_GROUPS; g++) {
                if (!dv->size_pos[g])
                        continue;
                gsize[g] = get_u64(dbg + dv->size_pos[g]);
                if (group_optional[g] && (gsize[g] < 16 || gsize[g] > group_max_size[g]))
                        gsize[g] = 0; /* its fields fail their bounds check: left at -1 */
                else if (gsize[g] < 16 || gsize[g] > group_max_size[g]) {
                        snprintf(err, errlen,
                                 "_Py_DebugOffsets: implausible struct size %llu (group %d): "
                                 "corrupt or not %d.%d",
                                 (unsigned long long)gsize[g], g, major, minor);
                        return PYFIND_UNSUPPORTED;
                }
        }
        uint64_t pyobj_size = gsize[G_OB];
        if (pyobj_size != (free_threaded ? 32u : 16u)) {
                snprintf(err, errlen, "_Py_DebugOffsets: PyObject is %llu bytes, expected %u",
                         (unsigned long long)pyobj_size, free_threaded ? 32u : 16u);
                return PYFIND_UNSUPPORTED;
        }
        uint64_t gil_rs = get_u64(dbg + dv->gil_rs_pos);
        for (size_t i = 0; i < N_DBG_FIELDS; i++) {
                const struct dbg_field *r = &dbg_fields[i];
                uint16_t pos = dbg_pos(dv, r);
                if (!pos)
                        continue;
                /* Only cells marked D take the debug value; the rest stay supplement data. */
                if (field_i32(tmpl, r->off) != D)
                        continue;
                uint64_t val = get_u64(dbg + pos);
                int64_t res = (int64_t)val;
                switch (r->xform) {
                case DX_PLAIN:
                case DX_NAMES:
                case DX_TASKS:
                        if (val + r->width > gsize[r->group])
                                goto bad;
                        break;
                case DX_NONZERO:
                        if (val == 0)
                                res = X;
                        else if (val + r->width > gsize[r->group] && r->group != G_TS)
                                goto bad; /* base_frame lives past sizeof(PyThreadState) */
                        else if (val > group_max_size[r->group])
                                goto bad;
                        break;
                case DX_SMALL:
                        if (val > 4096)
                                goto bad;
                        break;
                case DX_GIL_RELATIVE:
                        if (val < gil_rs || val + 8 > gsize[G_IS] || val - gil_rs > 256)
                                goto bad;
                        res = (int64_t)(val - gil_rs);
                        break;
                }
                set_i32(&L, r->off, (int32_t)res);
                continue;
        bad:
                if (r->xform == DX_NAMES || r->xform == DX_TASKS)
                        continue; /* left at -1 by fill_build(): no thread names, no tasks */
                snprintf(err, errlen,
                         "_Py_DebugOffsets: implausible value %llu at byte %u (struct size %llu)",
                         (unsigned long long)val, pos, (unsigned long long)gsize[r->group]);
                return PYFIND_UNSUPPORTED;
        }
        /* gil_runtime_state_enabled is relative to the gil struct; 0 is valid in FT builds. */
        if (!free_threaded)
                L.gil_enabled = X;
        if (tmpl->ts_datastack_top == D8 && L.ts_datastack_chunk >= 0)
                L.ts_datastack_top = L.ts_datastack_chunk + 8;
        /*
         * 3.14+ tasks: every field --async reads from here, or no tasks. tp_base
         * follows tp_name at a distance PyTypeObject fixes (the object header
         * before both shifts them alike).
         */
        if (L.tasks == PYL_TASKS_LISTS) {
                if (L.tp_name < 0 || L.set_mask < 0 || L.set_table < 0 || L.gen_iframe < 0 ||
                    L.gen_frame_state < 0 || L.fr_stacktop < 0)
                        L.tasks = 0;
                else
                        L.tp_base = L.tp_name + (256 - 24);
        }
        /* Every D cell must have been filled: a table bug otherwise. */
        for (size_t k = 0; k < N_OFFSET_FIELDS; k++) {
                size_t off = offset_fields[k].off;
                if (field_i32(tmpl, off) != D)
                        continue;
                bool optional = false;
                for (size_t i = 0; i < N_DBG_FIELDS; i++)
                        if (dbg_fields[i].off == off &&
                            (dbg_fields[i].xform == DX_NONZERO || dbg_fields[i].xform == DX_NAMES ||
                             dbg_fields[i].xform == DX_TASKS ||
                             dbg_fields[i].off == OFF(gil_enabled)))
                                optional = true;
                if (!optional && field_i32(&L, off) < 0) {
                        snprintf(err, errlen, "_Py_DebugOffsets: field at layout byte %zu unset",
                                 off);
                        return PYFIND_UNSUPPORTED;
                }
        }
        derive_read_sizes(&L);
        *out = L;
        return 0;
}

static int read_error_status(int rc)
{
        if (rc == -ESRCH)
                return PYFIND_NO_PROCESS;
        if (rc == -EPERM)
                return PYFIND_PERMISSION;
        return PYFIND_NOT_READY;
}

int pylayout_for_target(const struct pyfind_target *t, struct memsrc *m, struct pylayout *out,
                        char *err, size_t errlen)
{
        int major = (int)(t->version_hex >> 24), minor = (int)(t->version_hex >> 16 & 0xff);
        int micro = t->version_exact ? (int)(t->version_hex >> 8 & 0xff) : 99;
        if (major == 3 && minor >= 13) {
                if (!t->runtime_addr) {
                        snprintf(err, errlen,
                                 "Python %d.%d: _PyRuntime not found, cannot read "
                                 "_Py_DebugOffsets",
                                 major, minor);
                        return PYFIND_UNSUPPORTED;
                }
                uint8_t dbg[PYLAYOUT_DEBUG_OFFSETS_MAX];
                size_t len = sizeof(dbg);
                if (t->runtime_size && t->runtime_size < len)
                        len = (size_t)t->runtime_size;
                int rc = memsrc_read(m, t->runtime_addr, dbg, len);
                if (rc < 0) {
                        snprintf(err, errlen, "cannot read _Py_DebugOffsets at %#llx: %s",
                                 (unsigned long long)t->runtime_addr, strerror(-rc));
                        return read_error_status(rc);
                }
                return pylayout_from_debug_offsets(dbg, len, t->version_hex, t->free_threaded, out,
                                                   err, errlen);
        }
        if (t->free_threaded) {
                snprintf(err, errlen, "Python %d.%d: free-threaded builds exist from 3.13 on",
                         major, minor);
                return PYFIND_UNSUPPORTED;
        }
        /* Py_DEBUG implied Py_TRACE_REFS up to 3.7: 16 more bytes in every object header. */
        bool trace_refs = t->debug_build && (major == 2 || minor <= 7);
        const struct pylayout *L = pylayout_table(major, minor, micro, trace_refs);
        if (!L) {
                char list[128];
                pylayout_supported_list(list, sizeof(list));
                snprintf(err, errlen, "Python %d.%d is not supported (supported: %s)", major, minor,
                         list);
                return PYFIND_UNSUPPORTED;
        }
        *out = *L;
        return 0;
}
