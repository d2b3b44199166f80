/*
 * pylayout.c - the per-version layout tables and the _Py_DebugOffsets loader
 * (see pylayout.h).
 *
 * `rows` below is offsets.csv turned sideways into C: one row per field of
 * struct pylayout, one column per interpreter build. Numbers for 2.7 and
 * 3.6-3.12 are offsetof() on the pyenv headers (checked again for this file);
 * a D cell is filled from the target's _Py_DebugOffsets, whose position in
 * that struct `dbg_rows` gives per minor version. The remaining 3.13+ cells
 * are the supplement: facts the debug offsets do not carry. Their sources:
 * 3.13/3.13t headers [H]; 3.14 CPython v3.14.0 as read by py-spy's bindings
 * [S]; 3.14t and 3.15 secondary sources [U] (CPython's Include/internal
 * headers at the v3.14.0 tag and on main).
 */
#include "pylayout.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Interpreter builds with a column in `rows`. */
enum col {
        C27,
        C36,
        C37,
        C38,
        C39,
        C310,
        C311,
        C312,
        C313,
        C313T,
        C314,
        C314T,
        C315,
        C315T,
        N_COLS
};

static const struct col_info {
        uint8_t major, minor;
        bool free_threaded;
        const char *name;
} cols[N_COLS] = {
    [C27] = {2, 7, false, "2.7"},    [C36] = {3, 6, false, "3.6"},
    [C37] = {3, 7, false, "3.7"},    [C38] = {3, 8, false, "3.8"},
    [C39] = {3, 9, false, "3.9"},    [C310] = {3, 10, false, "3.10"},
    [C311] = {3, 11, false, "3.11"}, [C312] = {3, 12, false, "3.12"},
    [C313] = {3, 13, false, "3.13"}, [C313T] = {3, 13, true, "3.13t"},
    [C314] = {3, 14, false, "3.14"}, [C314T] = {3, 14, true, "3.14t"},
    [C315] = {3, 15, false, "3.15"}, [C315T] = {3, 15, true, "3.15t"},
};

#define X  (-1)      /* no such field in this version */
#define D  (-100000) /* from _Py_DebugOffsets */
#define D8 (-100008) /* the previous row's value + 8: a field that follows it */

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

/* Field types in struct pylayout. */
enum ftype { T_I32, T_U8, T_U32, T_BOOL, T_MASK };

/* Row flags. */
#define OBJ 0x1 /* offset inside a PyObject-headed struct: shifts with Py_TRACE_REFS */

#define F(field, type) offsetof(struct pylayout, field), type

static const struct row {
        size_t off;
        enum ftype type;
        unsigned flags;
        int32_t v[N_COLS];
} rows[] = {
    /* kinds           2.7  3.6  3.7  3.8  3.9  3.10  3.11  3.12  3.13 3.13t 3.14 3.14t 3.15 3.15t
     */
    {F(frames, T_U8), 0, {FO, FO, FO, FO, FO, FO, FI, FI, FI, FI, FI, FI, FI, FI}},
    {F(lasti, T_U8), 0, {LB, LB, LB, LB, LB, LU, LP, LP, LP, LP, LP, LP, LP, LP}},
    {F(linetable, T_U8), 0, {U8, S8, S8, S8, S8, T10, T11, T11, T11, T11, T11, T11, T11, T11}},
    {F(strings, T_U8), 0, {P2, PEP, PEP, PEP, PEP, PEP, PEP, PEP, PEP, PEP, PEP, PB0, PEP, PB0}},
    {F(gil, T_U8), 0, {GS, GS, GR, GR, GR, GR, GR, GI, GI, GI, GI, GI, GI, GI}},
    /* PyObject, PyTypeObject */
    {F(ob_type, T_I32), OBJ, {8, 8, 8, 8, 8, 8, 8, 8, D, D, D, D, D, D}},
    {F(ob_size, T_I32), OBJ, {16, 16, 16, 16, 16, 16, 16, 16, 16, 32, 16, 32, 16, 32}},
    {F(tp_flags, T_I32), OBJ, {168, 168, 168, 168, 168, 168, 168, 168, D, D, D, D, 168, 184}},
    /* _PyRuntimeState */
    {F(rt_interp_head, T_I32), 0, {X, X, 24, 32, 32, 32, 40, 40, D, D, D, D, D, D}},
    {F(rt_tstate_current, T_I32), 0, {X, X, 1480, 1368, 568, 568, 576, X, X, X, X, X, X, X}},
    /* PyInterpreterState */
    {F(is_next, T_I32), 0, {0, 0, 0, 0, 0, 0, 0, 0, D, D, D, D, D, D}},
    {F(is_threads_head, T_I32), 0, {8, 8, 8, 8, 8, 8, 16, 72, D, D, D, D, D, D}},
    {F(is_id, T_I32), 0, {X, X, 16, 16, 24, 24, 48, 8, D, D, D, D, D, D}},
    {F(is_ceval_gil, T_I32), 0, {X, X, X, X, X, X, X, 384, D, D, D, D, D, D}},
    /* struct _gil_runtime_state */
    {F(gil_enabled, T_I32), 0, {X, X, X, X, X, X, X, X, X, D, X, D, X, D}},
    {F(gil_locked, T_I32), 0, {X, X, X, X, X, X, X, 16, D, D, D, D, D, D}},
    {F(gil_holder, T_I32), 0, {X, X, X, X, X, X, X, 8, D, D, D, D, D, D}},
    /* PyThreadState */
    {F(ts_next, T_I32), 0, {0, 8, 8, 8, 8, 8, 8, 8, D, D, D, D, D, D}},
    {F(ts_interp, T_I32), 0, {8, 16, 16, 16, 16, 16, 16, 16, D, D, D, D, D, D}},
    {F(ts_frame, T_I32), 0, {16, 24, 24, 24, 24, 24, 56, 56, D, D, D, D, D, D}},
    {F(ts_thread_id, T_I32), 0, {144, 152, 176, 176, 176, 176, 152, 136, D, D, D, D, D, D}},
    {F(ts_native_tid, T_I32), 0, {X, X, X, X, X, X, 160, 144, D, D, D, D, D, D}},
    {F(ts_datastack_chunk, T_I32), 0, {X, X, X, X, X, X, 296, 232, D, D, D, D, D, D}},
    /* datastack_top follows datastack_chunk [H 3.11-3.13, U 3.14+]; only a read-size hint */
    {F(ts_datastack_top, T_I32), 0, {X, X, X, X, X, X, 304, 240, D8, D8, D8, D8, D8, D8}},
    {F(ts_state, T_I32), 0, {X, X, X, X, X, X, X, X, 40, 40, 44, 44, 44, 44}},
    {F(ts_base_frame, T_I32), 0, {X, X, X, X, X, X, X, X, X, X, X, X, D, D}},
    {F(cframe_current, T_I32), 0, {X, X, X, X, X, X, 8, 0, X, X, X, X, X, X}},
    /* PyFrameObject (OBJ applies to <=3.10 only, the only Py_TRACE_REFS-shifted builds) */
    {F(fr_back, T_I32), OBJ, {24, 24, 24, 24, 24, 24, 48, 8, D, D, D, D, D, D}},
    {F(fr_code, T_I32), OBJ, {32, 32, 32, 32, 32, 32, 32, 0, D, D, D, D, D, D}},
    {F(fr_lasti, T_I32), OBJ, {120, 120, 104, 104, 104, 96, 56, 56, D, D, D, D, D, D}},
    {F(fr_state, T_I32), OBJ, {X, 132, 116, 116, 116, 108, X, X, X, X, X, X, X, X}},
    {F(fr_state_kind, T_U8), 0, {0, 1, 1, 1, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0}},
    {F(fr_owner, T_I32), 0, {X, X, X, X, X, X, 69, 70, D, D, D, D, D, D}},
    {F(fr_tlbc_index, T_I32), 0, {X, X, X, X, X, X, X, X, X, X, X, D, X, D}},
    {F(fr_code_mask, T_MASK), 0, {X, X, X, X, X, X, X, X, X, X, ~3, ~3, ~3, ~3}},
    {F(owner_generator, T_U8), 0, {127, 127, 127, 127, 127, 127, 1, 1, 1, 1, 1, 1, 1, 1}},
    {F(owner_skip_from, T_U8), 0, {127, 127, 127, 127, 127, 127, 127, 3, 3, 3, 3, 3, 3, 3}},
    {F(executable_any, T_BOOL), 0, {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}},
    {F(init_shim, T_BOOL), 0, {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}},
    /* PyCodeObject          2.7  3.6  3.7  3.8  3.9  3.10  3.11  3.12 */
    {F(co_filename, T_I32), OBJ, {80, 96, 96, 104, 104, 104, 112, 112, D, D, D, D, D, D}},
    {F(co_name, T_I32), OBJ, {88, 104, 104, 112, 112, 112, 120, 120, D, D, D, D, D, D}},
    {F(co_qualname, T_I32), OBJ, {X, X, X, X, X, X, 128, 128, D, D, D, D, D, D}},
    {F(co_linetable, T_I32), OBJ, {104, 112, 112, 120, 120, 120, 136, 136, D, D, D, D, D, D}},
    {F(co_firstlineno, T_I32), OBJ, {96, 36, 36, 40, 40, 40, 72, 68, D, D, D, D, D, D}},
    /* 3.15 [U]: position unknown, so frames being set up are not recognised there */
    {F(co_firsttraceable, T_I32), OBJ, {X, X, X, X, X, X, 168, 176, 184, 200, 192, 208, X, X}},
    {F(co_code_adaptive, T_I32), OBJ, {X, X, X, X, X, X, 184, 192, D, D, D, D, D, D}},
    {F(co_tlbc, T_I32), OBJ, {X, X, X, X, X, X, X, X, X, X, X, D, X, D}},
    {F(co_code, T_I32), OBJ, {32, 40, 40, 48, 48, 48, X, X, X, X, X, X, X, X}},
    /* str (2.7: PyUnicodeObject {length@16, str@24}) */
    {F(str_length, T_I32), OBJ, {16, 16, 16, 16, 16, 16, 16, 16, D, D, D, D, 16, 32}},
    {F(str_state, T_I32), OBJ, {X, 32, 32, 32, 32, 32, 32, 32, D, D, D, D, 32, 48}},
    {F(str_ascii_size, T_I32), OBJ, {X, 48, 48, 48, 48, 48, 48, 40, D, D, D, D, 40, 56}},
    {F(str_compact_size, T_I32), OBJ, {X, 72, 72, 72, 72, 72, 72, 56, 56, 72, 56, 72, 56, 72}},
    {F(str_data, T_I32), OBJ, {24, 72, 72, 72, 72, 72, 72, 56, 56, 72, 56, 72, 56, 72}},
    {F(py2_unicode_width, T_U8), 0, {4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
    /* bytes (2.7: PyStringObject) */
    {F(bytes_size, T_I32), OBJ, {16, 16, 16, 16, 16, 16, 16, 16, D, D, D, D, 16, 32}},
    {F(bytes_sval, T_I32), OBJ, {36, 32, 32, 32, 32, 32, 32, 32, D, D, D, D, 32, 48}},
    /* _PyStackChunk */
    {F(chunk_previous, T_I32), 0, {X, X, X, X, X, X, 0, 0, 0, 0, 0, 0, 0, 0}},
    {F(chunk_size, T_I32), 0, {X, X, X, X, X, X, 8, 8, 8, 8, 8, 8, 8, 8}},
    {F(chunk_data, T_I32), 0, {X, X, X, X, X, X, 24, 24, 24, 24, 24, 24, 24, 24}},
    /*
     * Thread names (see pywalk.c). 2.7-3.13 [H] (3.13t: the 3.13.0 headers
     * with Py_GIL_DISABLED); 3.14 [S]; 3.15 [U]. ht_cached_keys moves when
     * PyTypeObject grows: unknown for 3.15, whose instances then get names
     * only from a dict of their own.
     */
    {F(dicts, T_U8), 0, {DK2, D36, D36, D36, D36, D36, DK3, DK3, DK3, DK3, DK3, DK3, DK3, DK3}},
    {F(attrs, T_U8), 0, {AD, AD, AD, AD, AD, AD, AM, AT, AI, AI, AI, AI, AI, AI}},
    {F(ints, T_U8), 0, {I2, IS, IS, IS, IS, IS, IS, IT, IT, IT, IT, IT, IT, IT}},
    /*                        2.7  3.6  3.7  3.8  3.9  3.10 3.11 3.12 3.13 3.13t 3.14 3.14t 3.15 */
    {F(is_modules, T_I32), 0, {16, 16, 40, 56, 856, 856, 888, 944, D, D, D, D, D, D}},
    {F(md_dict, T_I32), OBJ, {16, 16, 16, 16, 16, 16, 16, 16, 16, 32, 16, 32, 16, 32}},
    {F(tp_basicsize, T_I32), OBJ, {32, 32, 32, 32, 32, 32, 32, 32, 32, 48, 32, 48, 32, 48}},
    {F(tp_dictoffset, T_I32),
     OBJ,
     {288, 288, 288, 288, 288, 288, 288, 288, 288, 304, 288, 304, 288, 304}},
    {F(ht_cached_keys, T_I32), OBJ, {X, X, X, X, X, X, 872, 880, 880, 896, 880, 896, X, X}},
    {F(dict_keys, T_I32), OBJ, {40, 32, 32, 32, 32, 32, 32, 32, D, D, D, D, 32, 48}},
    {F(dict_values, T_I32), OBJ, {X, 40, 40, 40, 40, 40, 40, 40, D, D, D, D, 40, 56}},
    {F(dict_mask, T_I32), OBJ, {32, X, X, X, X, X, X, X, X, X, X, X, X, X}},
    {F(dk_size, T_I32), 0, {X, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8}},
    {F(dk_log2_index_bytes, T_I32), 0, {X, X, X, X, X, X, 9, 9, 9, 9, 9, 9, 9, 9}},
    {F(dk_kind, T_I32), 0, {X, X, X, X, X, X, 10, 10, 10, 10, 10, 10, 10, 10}},
    {F(dk_nentries, T_I32), 0, {X, 32, 32, 32, 32, 32, 24, 24, 24, 24, 24, 24, 24, 24}},
    {F(dk_indices, T_I32), 0, {X, 40, 40, 40, 40, 40, 32, 32, 32, 32, 32, 32, 32, 32}},
    {F(values_values, T_I32), 0, {X, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 8, 8}},
    {F(values_valid, T_I32), 0, {X, X, X, X, X, X, X, X, 3, 3, 3, 3, 3, 3}},
    {F(pre_dict, T_I32), 0, {X, X, X, X, X, X, 24, 24, 24, 8, 24, 8, 24, 8}},
    {F(pre_values, T_I32), 0, {X, X, X, X, X, X, 32, X, X, X, X, X, X, X}},
    {F(int_value, T_I32), OBJ, {16, X, X, X, X, X, X, 16, D, D, D, D, 16, 32}},
    {F(int_digits, T_I32), OBJ, {24, 24, 24, 24, 24, 24, 24, 24, D, D, D, D, 24, 40}},
};

/*
 * Patch-level exceptions to `rows`: 3.7.0-3.7.3 kept gilstate.tstate_current
 * at 1392 (py-spy's bindings [U]; 3.7.16 measured 1480).
 */
static const struct patch {
        uint8_t minor, micro_max;
        size_t off;
        int32_t value;
} patches[] = {
    {7, 3, offsetof(struct pylayout, rt_tstate_current), 1392},
};

/* ---- _Py_DebugOffsets ----------------------------------------------------- */

/* Sub-structs of _Py_DebugOffsets, each starting with its `size` field. */
enum dgroup { G_RT, G_IS, G_TS, G_FR, G_CO, G_OB, G_TY, G_BY, G_UN, G_DI, G_LO, N_GROUPS };

/* Minor versions with debug offsets: column index into the position arrays. */
enum { V13, V14, V15, N_DBG_VERSIONS };

static const struct dbg_version {
        uint8_t minor;
        uint16_t min_len;            /* sizeof(_Py_DebugOffsets) */
        uint16_t size_pos[N_GROUPS]; /* position of each group's `size` */
        /* Plausible struct sizes (bytes) of each group: [min, max]. */
} dbg_versions[N_DBG_VERSIONS] = {
    /*                      RT  IS   TS   FR   CO   OB   TY   BY   UN   DI   LO */
    [V13] = {13, 584, {24, 48, 152, 224, 272, 352, 368, 512, 536, 448, 488}},
    [V14] = {14, 760, {24, 48, 176, 248, 312, 400, 416, 592, 616, 528, 568}},
    /* 3.15 [U]: groups after pyobject are not used (supplement instead) */
    [V15] = {15, 888, {24, 48, 176, 312, 376, 464, 0, 0, 0, 0, 0}},
};

/* Plausible sizes of the described structs, to reject garbage offsets. */
static const uint32_t group_max_size[N_GROUPS] = {
    [G_RT] = 1u << 20, [G_IS] = 1u << 20, [G_TS] = 1u << 16, [G_FR] = 512,
    [G_CO] = 1024,     [G_OB] = 64,       [G_TY] = 2048,     [G_BY] = 128,
    [G_UN] = 256,      [G_DI] = 128,      [G_LO] = 64,
};

/* Groups only the thread names need: when implausible, names are off, the walk still works. */
static const bool group_optional[N_GROUPS] = {[G_DI] = true, [G_LO] = true};

/* How a debug value becomes a layout value. */
enum dxform {
        DX_PLAIN,        /* offset as is */
        DX_GIL_RELATIVE, /* offset in interp of a _gil field: make it relative to the gil struct */
        DX_SMALL,        /* a size, or an offset inside a small struct: taken as is */
        DX_NONZERO,      /* 0 means "absent" (tlbc fields in GIL builds) */
        DX_NAMES,        /* offset as is, only thread names need it: implausible leaves it -1 */
};

#define DG(field) offsetof(struct pylayout, field)
static const struct dbg_row {
        size_t off;
        enum dgroup group;
        enum dxform xform;
        uint8_t width;                /* bytes of the field, for the bounds check */
        uint16_t pos[N_DBG_VERSIONS]; /* 0: not in that version */
} dbg_rows[] = {
    /*                                             3.13 3.14 3.15 */
    {DG(rt_interp_head), G_RT, DX_PLAIN, 8, {40, 40, 40}},
    {DG(is_id), G_IS, DX_PLAIN, 8, {56, 56, 56}},
    {DG(is_next), G_IS, DX_PLAIN, 8, {64, 64, 64}},
    {DG(is_threads_head), G_IS, DX_PLAIN, 8, {72, 72, 72}},
    {DG(is_ceval_gil), G_IS, DX_PLAIN, 8, {112, 120, 120}},
    {DG(gil_enabled), G_IS, DX_SMALL, 8, {128, 136, 136}},
    {DG(gil_locked), G_IS, DX_GIL_RELATIVE, 8, {136, 144, 144}},
    {DG(gil_holder), G_IS, DX_GIL_RELATIVE, 8, {144, 152, 152}},
    {DG(ts_next), G_TS, DX_PLAIN, 8, {168, 192, 192}},
    {DG(ts_interp), G_TS, DX_PLAIN, 8, {176, 200, 200}},
    {DG(ts_frame), G_TS, DX_PLAIN, 8, {184, 208, 208}},
    {DG(ts_base_frame), G_TS, DX_NONZERO, 8, {0, 0, 216}},
    {DG(ts_thread_id), G_TS, DX_PLAIN, 8, {192, 216, 240}},
    {DG(ts_native_tid), G_TS, DX_PLAIN, 8, {200, 224, 248}},
    {DG(ts_datastack_chunk), G_TS, DX_PLAIN, 8, {208, 232, 256}},
    {DG(fr_back), G_FR, DX_PLAIN, 8, {232, 256, 320}},
    {DG(fr_code), G_FR, DX_PLAIN, 8, {240, 264, 328}},
    {DG(fr_lasti), G_FR, DX_PLAIN, 8, {248, 272, 336}},
    {DG(fr_owner), G_FR, DX_PLAIN, 1, {264, 288, 352}},
    {DG(fr_tlbc_index), G_FR, DX_NONZERO, 4, {0, 304, 368}},
    {DG(co_filename), G_CO, DX_PLAIN, 8, {280, 320, 384}},
    {DG(co_name), G_CO, DX_PLAIN, 8, {288, 328, 392}},
    {DG(co_qualname), G_CO, DX_PLAIN, 8, {296, 336, 400}},
    {DG(co_linetable), G_CO, DX_PLAIN, 8, {304, 344, 408}},
    {DG(co_firstlineno), G_CO, DX_PLAIN, 4, {312, 352, 416}},
    {DG(co_code_adaptive), G_CO, DX_PLAIN, 1, {344, 384, 448}},
    {DG(co_tlbc), G_CO, DX_NONZERO, 8, {0, 392, 456}},
    {DG(ob_type), G_OB, DX_PLAIN, 8, {360, 408, 472}},
    {DG(tp_flags), G_TY, DX_PLAIN, 8, {392, 440, 0}},
    {DG(bytes_size), G_BY, DX_PLAIN, 8, {520, 600, 0}},
    {DG(bytes_sval), G_BY, DX_PLAIN, 1, {528, 608, 0}},
    {DG(str_state), G_UN, DX_PLAIN, 4, {544, 624, 0}},
    {DG(str_length), G_UN, DX_PLAIN, 8, {552, 632, 0}},
    {DG(str_ascii_size), G_UN, DX_SMALL, 8, {560, 640, 0}},
    {DG(is_modules), G_IS, DX_NAMES, 8, {88, 96, 96}},
    {DG(dict_keys), G_DI, DX_NAMES, 8, {456, 536, 0}},
    {DG(dict_values), G_DI, DX_NAMES, 8, {464, 544, 0}},
    {DG(int_value), G_LO, DX_NAMES, 8, {496, 576, 0}},
    {DG(int_digits), G_LO, DX_NAMES, 4, {504, 584, 0}},
};

/* Positions shared by every version: header, and the gil struct's offset in interp. */
#define DBG_VERSION_POS       8
#define DBG_FREE_THREADED_POS 16
static const uint16_t dbg_gil_rs_pos[N_DBG_VERSIONS] = {120, 128, 128};

/* ---- filling a layout ------------------------------------------------------ */

static void set_field(struct pylayout *L, size_t off, enum ftype type, int64_t v)
{
        char *p = (char *)L + off;
        switch (type) {
        case T_I32: {
                int32_t x = (int32_t)v;
                memcpy(p, &x, sizeof(x));
                break;
        }
        case T_U8:
                *(uint8_t *)p = (uint8_t)v;
                break;
        case T_U32: {
                uint32_t x = (uint32_t)v;
                memcpy(p, &x, sizeof(x));
                break;
        }
        case T_BOOL:
                *(bool *)p = v != 0;
                break;
        case T_MASK: {
                uint64_t x = (uint64_t)v; /* -1 -> all ones, ~3 -> tag bits cleared */
                memcpy(p, &x, sizeof(x));
                break;
        }
        }
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

/* Fill from column `c`; D cells are left at X for the debug loader to fill. */
static void fill_column(struct pylayout *L, enum col c, int obj_shift)
{
        memset(L, 0, sizeof(*L));
        snprintf(L->name, sizeof(L->name), "%s", cols[c].name);
        L->major = cols[c].major;
        L->minor = cols[c].minor;
        L->free_threaded = cols[c].free_threaded;
        for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
                int64_t v = rows[i].v[c];
                if (v == D || v == D8)
                        v = X;
                else if ((rows[i].flags & OBJ) && v >= 0)
                        v += obj_shift;
                set_field(L, rows[i].off, rows[i].type, v);
        }
}

static enum col column_for(int major, int minor, bool ft)
{
        for (int c = 0; c < N_COLS; c++)
                if (cols[c].major == major && cols[c].minor == minor && cols[c].free_threaded == ft)
                        return (enum col)c;
        return N_COLS;
}

const struct pylayout *pylayout_table(int major, int minor, int micro, bool trace_refs)
{
        static struct pylayout L;
        enum col c = column_for(major, minor, false);
        if (c == N_COLS || c >= C313)
                return NULL;
        fill_column(&L, c, trace_refs ? 16 : 0);
        for (size_t i = 0; i < sizeof(patches) / sizeof(patches[0]); i++)
                if (patches[i].minor == minor && major == 3 && micro <= patches[i].micro_max)
                        set_field(&L, patches[i].off, T_I32, patches[i].value);
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
        int v = -1;
        for (int i = 0; i < N_DBG_VERSIONS; i++)
                if (major == 3 && dbg_versions[i].minor == minor)
                        v = i;
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
        enum col c = column_for(3, minor, free_threaded);
        struct pylayout L;
        fill_column(&L, c, 0);
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
        uint64_t gil_rs = get_u64(dbg + dbg_gil_rs_pos[v]);
        for (size_t i = 0; i < sizeof(dbg_rows) / sizeof(dbg_rows[0]); i++) {
                const struct dbg_row *r = &dbg_rows[i];
                if (!r->pos[v])
                        continue;
                /* Only cells marked D take the debug value; the rest stay supplement data. */
                bool want = false;
                for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++)
                        if (rows[k].off == r->off && rows[k].v[c] == D)
                                want = true;
                if (!want)
                        continue;
                uint64_t val = get_u64(dbg + r->pos[v]);
                int64_t res = (int64_t)val;
                switch (r->xform) {
                case DX_PLAIN:
                case DX_NAMES:
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
                set_field(&L, r->off, T_I32, res);
                continue;
        bad:
                if (r->xform == DX_NAMES)
                        continue; /* left at -1 by fill_column(): no thread names */
                snprintf(err, errlen,
                         "_Py_DebugOffsets: implausible value %llu at byte %u (struct size %llu)",
                         (unsigned long long)val, r->pos[v], (unsigned long long)gsize[r->group]);
                return PYFIND_UNSUPPORTED;
        }
        /* gil_runtime_state_enabled is relative to the gil struct; 0 is valid in FT builds. */
        if (!free_threaded)
                L.gil_enabled = X;
        /* D8 cells: 8 bytes after the field of the row above, once that one is known. */
        for (size_t k = 1; k < sizeof(rows) / sizeof(rows[0]); k++) {
                int32_t prev = field_i32(&L, rows[k - 1].off);
                if (rows[k].v[c] == D8 && prev >= 0)
                        set_field(&L, rows[k].off, T_I32, (int64_t)prev + 8);
        }
        /* Every D cell must have been filled: a table bug otherwise. */
        for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
                if (rows[k].v[c] != D || rows[k].type != T_I32)
                        continue;
                bool optional = false;
                for (size_t i = 0; i < sizeof(dbg_rows) / sizeof(dbg_rows[0]); i++)
                        if (dbg_rows[i].off == rows[k].off &&
                            (dbg_rows[i].xform == DX_NONZERO || dbg_rows[i].xform == DX_NAMES ||
                             dbg_rows[i].off == offsetof(struct pylayout, gil_enabled)))
                                optional = true;
                if (!optional && field_i32(&L, rows[k].off) < 0) {
                        snprintf(err, errlen, "_Py_DebugOffsets: field at layout byte %zu unset",
                                 rows[k].off);
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
                snprintf(err, errlen, "Python %d.%d is not supported (supported: 2.7, 3.6-3.15)",
                         major, minor);
                return PYFIND_UNSUPPORTED;
        }
        *out = *L;
        return 0;
}
