/*
 * pylayout.h - where CPython keeps what the walker reads, per version, as data.
 *
 * A struct pylayout holds every offset and every "kind" switch the walker
 * needs. For 2.7 and 3.6-3.12 it comes from a static table (one row per minor
 * version, numbers from offsetof on the installed headers). From 3.13 on it is
 * filled from the target's own _Py_DebugOffsets, read at _PyRuntime, on top
 * of a small per-version supplement for the facts the debug offsets do not
 * carry (owner values, _PyStackRef tag bits, string state layout, ...). The
 * walker is one code path over this struct: adding a version is a row here
 * and a test, not a new branch in the walker.
 *
 * Offsets are bytes from the start of the named struct; -1 means "this
 * version has no such field". Offsets into objects (PyObject-headed structs)
 * already include the object header of the build.
 */
#ifndef PYFLAME_PYLAYOUT_H
#define PYFLAME_PYLAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "linetable.h"
#include "memsrc.h"
#include "pyfind.h"

/* How a version chains its frames. */
enum pyl_frames {
        PYL_FRAMES_OBJECT = 1, /* <=3.10: heap PyFrameObject, tstate->frame, f_back */
        PYL_FRAMES_INTERP,     /* 3.11+: _PyInterpreterFrame in data-stack chunks, previous */
};

/* What the frame's instruction field holds. */
enum pyl_lasti {
        PYL_LASTI_BYTES = 1, /* int f_lasti, byte offset (<=3.9) */
        PYL_LASTI_UNITS,     /* int f_lasti, 2-byte code units (3.10) */
        PYL_LASTI_POINTER,   /* pointer into the bytecode: prev_instr (3.11/3.12), instr_ptr (3.13+)
                              */
};

/* How str objects are laid out. */
enum pyl_strings {
        PYL_STR_PY2 = 1,      /* PyStringObject (bytes) and the 2.x PyUnicodeObject */
        PYL_STR_PEP393,       /* 3.3+: state bitfield, kind at bits 2-4 */
        PYL_STR_PEP393_BYTE0, /* 3.14t+: interned is a whole byte, kind at bits 8-10 */
};

/* Where the thread holding the GIL is recorded. */
enum pyl_gil {
        PYL_GIL_SYMBOL = 1, /* *_PyThreadState_Current (2.7, 3.6) */
        PYL_GIL_RUNTIME,    /* _PyRuntime.gilstate.tstate_current (3.7-3.11) */
        PYL_GIL_INTERP,     /* *interp->ceval.gil: {enabled (FT)}, last_holder, locked (3.12+) */
};

/* How dicts are laid out (the thread names are found through dicts). */
enum pyl_dicts {
        PYL_DICT_PY2 = 1, /* 2.x: ma_mask + 1 slots of {hash, key, value} at ma_table */
        PYL_DICT_36,      /* 3.6-3.10: compact keys, Py_ssize_t dk_size, index width from it */
        PYL_DICT_311,     /* 3.11+: dk_log2_size, dk_log2_index_bytes, dk_kind (16-byte entries
                             for str-only and split keys) */
};

/* Where an instance of a class keeps its attributes. */
enum pyl_attrs {
        PYL_ATTRS_DICTOFFSET = 1, /* <=3.10: a dict at the type's tp_dictoffset */
        PYL_ATTRS_MANAGED_311,    /* 3.11 managed dict: values at -4 words, dict at -3 words */
        PYL_ATTRS_TAGGED_312,     /* 3.12: one word at -3 words: values - 1 (odd), or a dict */
        PYL_ATTRS_INLINE_313,     /* 3.13+: dict at -pre_dict; values inline after tp_basicsize */
};

/* How int objects are laid out. */
enum pyl_ints {
        PYL_INT_PY2 = 1, /* 2.x int: long at int_value; 2.x long as PYL_INT_SIZE */
        PYL_INT_SIZE,    /* ob_size is the signed number of 30-bit digits (<=3.11) */
        PYL_INT_TAG,     /* lv_tag at int_value: digits << 3 | sign (3.12+) */
};

/* Where a version keeps its registry of asyncio tasks (0: none we can read, --async refused). */
enum pyl_tasks {
        PYL_TASKS_ALL = 1,   /* 3.7-3.11: asyncio.tasks._all_tasks, a WeakSet of every task */
        PYL_TASKS_SCHEDULED, /* 3.12+: WeakSet _scheduled_tasks and set _eager_tasks */
        /*
         * 3.6: a WeakSet only _asyncio's static variable all_tasks holds
         * (found by its symbol), and the pure-Python Task's class attribute
         * _all_tasks
         */
        PYL_TASKS_STATIC,
        /*
         * 3.14+: a list of the pending tasks per thread state (and one in the
         * interpreter for threads gone), TaskObj's offsets published by
         * _asyncio in its .AsyncioDebug section (read at run time)
         */
        PYL_TASKS_LISTS,
};

/* Where a suspended coroutine keeps what it awaits (the top of its frame's value stack). */
enum pyl_await {
        PYL_AWAIT_STACKTOP = 1, /* 3.7-3.9: PyObject **f_stacktop; the object at f_stacktop[-1] */
        PYL_AWAIT_DEPTH,        /* 3.10: int f_stackdepth, PyObject **f_valuestack */
        PYL_AWAIT_LOCALSPLUS,   /* 3.11-3.13: int stacktop, an index into the embedded localsplus */
        PYL_AWAIT_STACKPOINTER, /* 3.14+: _PyStackRef *stackpointer; slots tagged (fr_code_mask) */
};

#define PYL_OWNER_NONE 127 /* owner_skip_from when no owner value marks entry frames */

#define PYL_FRSTATE_NONE      0 /* no such field */
#define PYL_FRSTATE_EXECUTING 1 /* char f_executing: 0 when not running */
#define PYL_FRSTATE_STATE     2 /* char f_state: running when EXECUTING (0) or UNWINDING (2) */

struct pylayout {
        char name[8]; /* "3.12", "3.13t" */
        uint8_t major, minor;
        bool free_threaded;
        bool from_debug_offsets; /* filled from the target's _Py_DebugOffsets */

        uint8_t frames;    /* enum pyl_frames */
        uint8_t lasti;     /* enum pyl_lasti */
        uint8_t linetable; /* enum lt_format */
        uint8_t strings;   /* enum pyl_strings */
        uint8_t gil;       /* enum pyl_gil */
        uint8_t dicts;     /* enum pyl_dicts */
        uint8_t attrs;     /* enum pyl_attrs */
        uint8_t ints;      /* enum pyl_ints */

        /* PyObject / PyVarObject / PyTypeObject */
        int32_t ob_type, ob_size, tp_flags;

        /* _PyRuntimeState (3.7+) */
        int32_t rt_interp_head, rt_tstate_current;

        /* PyInterpreterState */
        int32_t is_next, is_threads_head, is_id, is_ceval_gil;
        /* struct _gil_runtime_state, reached through is_ceval_gil */
        int32_t gil_enabled, gil_locked, gil_holder;

        /* PyThreadState */
        int32_t ts_next, ts_interp, ts_frame, ts_thread_id, ts_native_tid;
        int32_t ts_datastack_chunk, ts_datastack_top, ts_state, ts_base_frame;
        int32_t cframe_current; /* _PyCFrame.current_frame when ts_frame is a cframe (3.11/3.12) */

        /* PyFrameObject (<=3.10) or _PyInterpreterFrame (3.11+) */
        int32_t fr_back, fr_code, fr_lasti, fr_owner, fr_tlbc_index;
        /*
         * 3.11: the bool that marks the first frame of each C-level eval call
         * (later versions push an entry frame of their own instead, owner >=
         * owner_skip_from). Merging native stacks needs it.
         */
        int32_t fr_is_entry;
        /*
         * <=3.10: the frame's running state (f_executing 3.6-3.9, f_state
         * 3.10), -1 when absent. A chain that ends at a suspended generator
         * frame was read while that generator yielded (its f_back cleared):
         * a torn, truncated stack.
         */
        int32_t fr_state;
        uint8_t fr_state_kind;   /* PYL_FRSTATE_* */
        uint32_t fr_read;        /* bytes to read per frame: covers every field above */
        uint64_t fr_code_mask;   /* ~0, or ~3 where f_executable is a tagged _PyStackRef */
        uint8_t owner_generator; /* FRAME_OWNED_BY_GENERATOR, or PYL_OWNER_NONE */
        uint8_t owner_skip_from; /* entry/shim frames have owner >= this */
        bool executable_any;     /* f_executable may be a non-code object (3.13+) */
        bool init_shim;          /* _Py_InitCleanup "__init__" shim frames exist (3.13+) */

        /* PyCodeObject */
        int32_t co_filename, co_name, co_qualname, co_linetable, co_firstlineno;
        int32_t co_firsttraceable, co_code_adaptive, co_tlbc;
        int32_t co_code;  /* the bytecode's bytes object (<=3.10), for its length */
        uint32_t co_read; /* bytes to read per code object: covers every field above */

        /* str: PEP 393, or the 2.x PyUnicodeObject (length, str pointer) */
        int32_t str_length, str_state, str_ascii_size, str_compact_size, str_data;
        uint8_t py2_unicode_width; /* sizeof(Py_UNICODE) of a 2.x build */
        /* bytes (3.x) and the 2.x PyStringObject */
        int32_t bytes_size, bytes_sval;

        /* _PyStackChunk {previous, size, top, data[]} (3.11+) */
        int32_t chunk_previous, chunk_size, chunk_data;

        /*
         * Thread names: interp->modules (3.12+: imports.modules), the module's
         * md_dict, dicts, instance attributes, ints. A field at -1 here only
         * means no thread names on that version, never a failed open.
         */
        int32_t is_modules, md_dict;
        int32_t tp_basicsize, tp_dictoffset, ht_cached_keys;
        int32_t dict_keys, dict_values, dict_mask; /* 2.x: ma_table, -1, ma_mask */
        /* PyDictKeysObject (not an object): dk_size is dk_log2_size on 3.11+ */
        int32_t dk_size, dk_log2_index_bytes, dk_kind, dk_nentries, dk_indices;
        /* PyDictValues (3.11+; 3.6-3.10 ma_values is the array itself) */
        int32_t values_values, values_valid;
        /* bytes before an object: its managed dict pointer, 3.11's values pointer */
        int32_t pre_dict, pre_values;
        int32_t int_value, int_digits; /* 2.x ob_ival / 3.12+ lv_tag; the digits */

        /*
         * asyncio tasks (pyflame-record --async). The C layouts of _asyncio are
         * in no installed header: these numbers were found in live
         * interpreters (the objects of a known task) and are checked by
         * tests/e2e/test_async.py. tasks == 0: no readable registry.
         */
        uint8_t tasks;      /* enum pyl_tasks, or 0 */
        uint8_t await;      /* enum pyl_await */
        int8_t gen_created; /* 3.11+ gi_frame_state of a coroutine not started */
        int32_t tp_name, tp_base;
        int32_t set_mask, set_table;                /* PySetObject; setentry is {key, hash} */
        int32_t wr_object, meth_self, list_items;   /* weakref, bound method, list */
        int32_t fut_loop, fut_callback0, fut_state; /* FutureObj (fut_state: int, 0 pending) */
        int32_t task_fut_waiter, task_coro, task_name, task_size; /* TaskObj */
        int32_t gen_frame;       /* <=3.10: PyFrameObject *gi_frame */
        int32_t gen_iframe;      /* 3.11+: the embedded _PyInterpreterFrame */
        int32_t gen_frame_state; /* 3.11+: int8 gi_frame_state (0 executing, < 0 suspended) */
        int32_t fr_stacktop;     /* see enum pyl_await */
        int32_t fr_valuestack;   /* 3.10 f_valuestack; 3.11+ localsplus in the frame */
};

/*
 * The layout for the interpreter described by `t`, reading its
 * _Py_DebugOffsets through `m` on 3.13+. On success fills *out and returns 0.
 * Otherwise returns a negative enum pyfind_status with a one-line message:
 * PYFIND_UNSUPPORTED for a version without a table, or debug offsets that
 * fail validation (cookie, version, free-threading flag, sizes);
 * PYFIND_NOT_READY when they cannot be read yet; a read error's
 * PYFIND_NO_PROCESS / PYFIND_PERMISSION. *out is untouched on failure.
 */
int pylayout_for_target(const struct pyfind_target *t, struct memsrc *m, struct pylayout *out,
                        char *err, size_t errlen);

/*
 * The static table row for major.minor (2.7, 3.6-3.12) with `micro` for
 * patch-level differences, shifted for Py_TRACE_REFS object headers when
 * `trace_refs`. Returns NULL for versions described by debug offsets or
 * unsupported. The result is a pointer to internal static storage
 * overwritten by the next call (tests use it to build images).
 */
const struct pylayout *pylayout_table(int major, int minor, int micro, bool trace_refs);

/*
 * Fill *out from a raw _Py_DebugOffsets image `dbg` (len bytes) for
 * major.minor and the free-threading flag. Same returns as
 * pylayout_for_target(). Exposed for tests that build synthetic images.
 */
int pylayout_from_debug_offsets(const uint8_t *dbg, size_t len, uint32_t version_hex,
                                bool free_threaded, struct pylayout *out, char *err, size_t errlen);

/* Whether pyflame has a layout for Python major.minor (GIL builds; 3.13+ also free-threaded). */
bool pylayout_supported(int major, int minor);

/* The versions with a layout, for messages: "2.7 and 3.6 to 3.15". */
void pylayout_supported_list(char *buf, size_t len);

/*
 * Check the tables: every offset of every build set (a forgotten one is a
 * table bug), D cells only where _Py_DebugOffsets exist, every kind set.
 * Returns 0, or -1 with what is wrong in err. For the tests.
 */
int pylayout_check_tables(char *err, size_t errlen);

/* Bytes of _Py_DebugOffsets that pylayout_from_debug_offsets() may look at. */
#define PYLAYOUT_DEBUG_OFFSETS_MAX 1024

#endif
