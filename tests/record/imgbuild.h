/*
 * imgbuild.h - synthetic CPython memory images for the walker's unit tests.
 *
 * An img is a fake address space: each allocation is its own region with a
 * gap after it, so a read past its end fails as it would at the end of a
 * mapping, and a region can be dropped to make a pointer dangle. A pyimg
 * lays out a CPython runtime in it from a struct pylayout: type objects,
 * strings (every PEP 393 form, 2.x str and unicode), code objects with line
 * tables in the version's own format, interpreters, thread states with their
 * data-stack chunks or heap frames, entry frames, generator frames, the GIL
 * state, dicts, ints, modules, classes and their instances (for the thread
 * names), and for 3.13+ a _Py_DebugOffsets written from the layout with this
 * file's own table of its positions (so the walker's loader is checked
 * against an independent transcription of the struct).
 *
 * Builders abort on misuse: they serve tests, not untrusted input.
 */
#ifndef PYFLAME_TEST_IMGBUILD_H
#define PYFLAME_TEST_IMGBUILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memsrc.h"
#include "pyfind.h"
#include "pylayout.h"

struct img_region {
        uint64_t addr;
        size_t len;
        uint8_t *data;
        bool dropped;
};

struct img {
        struct img_region *r;
        size_t n, cap;
        uint64_t next;
        struct memsrc_region *mr; /* for the memsrc, rebuilt by img_memsrc() */
};

struct img *img_new(void);
void img_free(struct img *g);
/* A zeroed region of len bytes, 64-aligned, followed by an unmapped gap. */
uint64_t img_alloc(struct img *g, size_t len);
/* Host pointer to [addr, addr+len), which must lie in one live region. */
uint8_t *img_at(struct img *g, uint64_t addr, size_t len);
void img_u64(struct img *g, uint64_t addr, uint64_t v);
void img_u32(struct img *g, uint64_t addr, uint32_t v);
void img_u8(struct img *g, uint64_t addr, uint8_t v);
uint64_t img_get_u64(struct img *g, uint64_t addr);
/* Make the region starting at addr unreadable. */
void img_drop(struct img *g, uint64_t addr);
/* (Re)initialise m over the live regions; call again after img_alloc()/img_drop(). */
void img_memsrc(struct img *g, struct memsrc *m);

/* ---- CPython images ---- */

enum pyimg_strform {
        PYIMG_STR_AUTO = 1, /* compact (ASCII or the narrowest kind); 2.x: PyStringObject */
        PYIMG_STR_LEGACY,   /* 3.x non-compact: characters behind a data pointer */
        PYIMG_STR_UNICODE2, /* 2.x unicode object (UCS-4) */
        PYIMG_STR_BAD_KIND, /* 3.x: kind 3 in the state bits */
        PYIMG_STR_HUGE,     /* length far beyond any name */
};

enum pyimg_frame_kind {
        PYIMG_FRAME = 1,   /* an ordinary Python frame (chunk or heap) */
        PYIMG_FRAME_GEN,   /* a running generator's frame (3.11+: embedded in the generator) */
        PYIMG_FRAME_ENTRY, /* 3.12+: the C-stack entry frame (owner CSTACK/INTERPRETER) */
};

#define PYIMG_MAX_THREADS 16
#define PYIMG_MAX_CLASSES 8
#define PYIMG_MAX_ATTRS   32

/* A class made by pyimg_class(): its attribute names (str objects) and shared keys. */
struct pyimg_class {
        uint64_t cls, keys;
        uint64_t attrs[PYIMG_MAX_ATTRS];
        size_t n;
};

struct pyimg_thread {
        uint64_t tstate, pthread;
        uint64_t chunk, chunk_top, chunk_end; /* 3.11+ */
        uint64_t cframe;                      /* 3.11/3.12 */
        uint64_t top;                         /* current frame */
};

/* asyncio's objects (3.14+): what pyimg_asyncio() wrote in _asyncio's .AsyncioDebug. */
struct pyimg_asyncio {
        uint64_t debug; /* the section: 13 u64 */
        uint64_t task_type, future_type, gathering_type, coro_type, set_type, dummy;
        uint32_t task_size, name, awaited_by, is_task, is_set, coro, node;
        uint32_t ts_head, ts_running_task, interp_head;
};

struct pyimg {
        struct img *img;
        struct pylayout L;
        uint32_t version_hex;
        size_t chunk_bytes; /* size of new data-stack chunks (default 16 KiB) */
        uint64_t runtime, interp_head_var, tstate_current_var;
        uint64_t code_type, str_type, bytes_type, unicode2_type, none_obj;
        uint64_t dict_type, int_type, long_type, module_type;
        uint64_t trampoline_code; /* 3.12: code of entry frames */
        uint64_t interps[4];
        size_t n_interps;
        struct pyimg_thread th[PYIMG_MAX_THREADS];
        size_t n_th;
        struct pyimg_class classes[PYIMG_MAX_CLASSES];
        size_t n_classes;
        int32_t tid_off; /* of the TID in the fake struct pthread (<=3.10) */
        struct pyimg_asyncio aio;
        struct pyfind_target target;
        struct memsrc mem;
};

/*
 * A runtime for `L` (a table row, or a hand-written 3.13+ layout) and
 * version_hex, with one interpreter. For 3.13+ writes _Py_DebugOffsets at the
 * runtime's start. Fills p->target as pyfind would and p->mem.
 */
void pyimg_init(struct pyimg *p, const struct pylayout *L, uint32_t version_hex);
void pyimg_free(struct pyimg *p);
/* Refresh p->mem after changes to the set of regions. */
void pyimg_sync(struct pyimg *p);

uint64_t pyimg_add_interp(struct pyimg *p, int64_t id);
/* A thread state at the head of interp's list; returns its index in p->th. */
int pyimg_add_thread(struct pyimg *p, uint64_t interp, int64_t native_tid);

uint64_t pyimg_str(struct pyimg *p, const char *utf8, enum pyimg_strform form);
uint64_t pyimg_bytes(struct pyimg *p, const void *data, size_t len);

/*
 * A code object of `nunits` code units whose instruction at unit i is on
 * line lines[i] (-1: no line), encoded in the version's line-table format.
 * qualname is ignored before 3.11. firsttraceable: code units (3.11+).
 */
uint64_t pyimg_code(struct pyimg *p, const char *name, const char *qualname, const char *file,
                    int first_line, const int *lines, size_t nunits, int firsttraceable);
/* Same, with name/qualname/file given as object addresses. */
uint64_t pyimg_code_objs(struct pyimg *p, uint64_t name, uint64_t qualname, uint64_t file,
                         int first_line, const int *lines, size_t nunits, int firsttraceable);
/*
 * asyncio (3.14+, as _asyncio keeps them): its types and its .AsyncioDebug
 * (TaskObj as 3.14.0 compiles it), empty task lists in the interpreters and
 * thread states there are; target.asyncio_debug_addr set.
 */
void pyimg_asyncio(struct pyimg *p);
/*
 * A coroutine running `code` at code unit `unit`, its gi_frame_state
 * `state` (-1 suspended in an await, 0 running...), awaiting `awaited` (0:
 * nothing on its stack), held tagged as a _PyStackRef.
 */
uint64_t pyimg_coro(struct pyimg *p, uint64_t code, int unit, int state, uint64_t awaited);
/* An object of one of asyncio's types: a Future, or a _GatheringFuture when `gathering`. */
uint64_t pyimg_future(struct pyimg *p, bool gathering);
/* A pending task named by `name` (a str or int object) at the tail of thread t's list (-1: the
 * interpreter's). */
uint64_t pyimg_task(struct pyimg *p, int t, uint64_t name, uint64_t coro);
/* Who awaits `task`: one task, or a set of n (with a deleted entry among them). */
void pyimg_task_awaited_by(struct pyimg *p, uint64_t task, const uint64_t *by, size_t n);
/* The future `task` waits on (its fut_waiter). */
void pyimg_task_waiter(struct pyimg *p, uint64_t task, uint64_t fut);

/* 3.14t: give `code` n thread-local bytecode copies; returns the address of copy `idx`. */
uint64_t pyimg_code_tlbc(struct pyimg *p, uint64_t code, int n, int idx);

/*
 * Push a frame executing `code` at code unit `unit` on thread t (it becomes
 * the current frame). unit < 0: not started (f_lasti -1, or prev_instr one
 * unit before the code on 3.11/3.12). Returns the frame's address.
 */
uint64_t pyimg_push(struct pyimg *p, int t, enum pyimg_frame_kind kind, uint64_t code, int unit);
/* Same, for a frame running thread-local bytecode copy tlbc_index (3.14t). */
uint64_t pyimg_push_tlbc(struct pyimg *p, int t, uint64_t code, int unit, int tlbc_index);

/* Make `frame` (an address pyimg_push() returned, or 0) thread t's current frame. */
void pyimg_set_top(struct pyimg *p, int t, uint64_t frame);

/* GIL holder (0: released) of interp; enabled < 0 for GIL builds, 0/1 for free-threaded. */
void pyimg_gil(struct pyimg *p, uint64_t interp, uint64_t holder_tstate, int enabled);
/* 3.13+ tstate->state (DETACHED 0, ATTACHED 1). */
void pyimg_thread_state(struct pyimg *p, int t, int state);

/* ---- objects on the way to thread names ---- */

/*
 * A dict of n (key, value) pairs laid out as the version does: 2.x a hash
 * table (with a deleted entry), 3.6+ compact keys (index width from the
 * size), 3.11+ str-only keys tables when every key is a str (`str_keys`).
 */
uint64_t pyimg_dict(struct pyimg *p, const uint64_t *keys, const uint64_t *values, size_t n,
                    bool str_keys);
/* An int (2.x: a PyIntObject) of value v. */
uint64_t pyimg_int(struct pyimg *p, uint64_t v);
/* A module whose globals are `dict`; make `dict` interp's modules dict (sys.modules). */
uint64_t pyimg_module(struct pyimg *p, uint64_t dict);
void pyimg_set_modules(struct pyimg *p, uint64_t interp, uint64_t dict);

/* How an instance keeps its attributes. */
enum pyimg_attrs {
        PYIMG_ATTRS_DICT = 1, /* a dict of its own */
        PYIMG_ATTRS_SPLIT, /* 3.x: a dict over the class's shared keys (3.13+: its values inline) */
        PYIMG_ATTRS_VALUES, /* 3.11+: no dict, a values array (3.11 before the object, 3.12
                               tagged, 3.13+ inline) */
        PYIMG_ATTRS_STALE,  /* 3.13+: inline values marked invalid, no dict */
};

/* A class whose instances share the keys attrs[0, n) (str objects), in that order. */
uint64_t pyimg_class(struct pyimg *p, const uint64_t *attrs, size_t n);
/* An instance of cls whose attribute i (of the class's keys) is vals[i] (0: unset). */
uint64_t pyimg_instance(struct pyimg *p, uint64_t cls, const uint64_t *vals, enum pyimg_attrs how);

/* Fake pid of image targets (the main thread's TID). */
#define PYIMG_PID 4242

#endif
