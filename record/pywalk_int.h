/*
 * pywalk_int.h - what the walker's files share (pywalk.c: interpreters,
 * threads, frames, code objects; pynames.c: the names threading gave the
 * threads): the walker's state and its bounds on what a target can make it
 * do. Internal to record/: use pywalk.h.
 */
#ifndef PYFLAME_PYWALK_INT_H
#define PYFLAME_PYWALK_INT_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "linetable.h"
#include "pylayout.h"
#include "pysnap.h"
#include "pywalk.h"

/* Bounds on what the target can make us do. */
#define MAX_INTERPS      256
#define MAX_STEPS        (2 * PYWALK_MAX_DEPTH) /* frames visited per thread, skipped ones included */
#define MAX_NAME_CHARS   4096                   /* characters in a name or file name */
#define MAX_LINETABLE    (1u << 20)
#define MAX_CHUNK_BYTES  (8u << 20) /* a data-stack chunk (16 KiB unless a frame is huge) */
#define MAX_CHUNKS       64         /* older chunks followed per thread */
#define CHUNK_SLACK      1024       /* read past a chunk's top, for a stack that grows */
#define MAX_CODE_UNITS   (1u << 24)
#define MAX_TLBC         4096
#define FRAME_BUF        512 /* >= any fr_read */
#define CODE_BUF         1024
#define OBJ_PREFIX       256   /* first read of a str or bytes object */
#define CODE_CACHE_SOFT  16384 /* code entries above this: forget those not seen lately */
#define CODE_CACHE_IDLE  1000  /* samples an entry may go unseen before it may be forgotten */
#define PAGE             4096  /* <=3.10 heap frames are read by the page... */
#define FRAME_PAGES      128   /* ...and the pages that held one lately are kept in the batch */
#define FRAME_PAGE_AGE   64    /* samples a page stays there unused */
#define TID_SCAN_BYTES   2048  /* searched of a struct pthread for the TID */
#define TID_SCAN_CHUNK   256
#define TID_SEARCH_TRIES 16 /* searches at consecutive samples... */
#define TID_SEARCH_EVERY 64 /* ...then at every 64th */
#define TID_CANDIDATES   64

/* Type flags (Include/object.h; BYTES_SUBCLASS is STRING_SUBCLASS in 2.x). */
#define TPFLAGS_BYTES   (1ul << 27)
#define TPFLAGS_UNICODE (1ul << 28)

#define THREAD_ATTACHED 1 /* _Py_THREAD_ATTACHED, tstate->state (3.13+) */

/* Internal result of code_get(): the object is not a code object (3.13+ may skip it). */
#define NOT_CODE 1

static inline uint64_t rd64(const uint8_t *p)
{
        uint64_t v;
        memcpy(&v, p, sizeof(v));
        return v;
}

static inline int32_t rd32(const uint8_t *p)
{
        int32_t v;
        memcpy(&v, p, sizeof(v));
        return v;
}

/* Errors that end the whole sample, not just a thread. */
static inline bool fatal_read(int rc)
{
        return rc == -ESRCH || rc == -EPERM || rc == -ENOMEM;
}

struct code_entry {
        struct pywalk_code pub;
        uint64_t addr;
        uint64_t ptr[5];        /* name, qualname, file, table, co_code: its identity */
        int32_t firsttraceable; /* code units, -1 when unknown */
        uint64_t code_bytes;    /* length of the bytecode, 0 when unknown */
        struct lt_map lines;
        int64_t last_off;  /* the last offset looked up in lines (INT64_MIN: none)... */
        int32_t last_line; /* ...and its line: the frames below the leaf rarely move */
        bool shim;         /* the 3.13+ _Py_InitCleanup "__init__" shim */
        bool short_lived;  /* a module body or run-time compiled code: re-checked every sample */
        uint64_t *tlbc;
        uint32_t n_tlbc;
        uint64_t checked_sample; /* last sample that compared it with its object */
        uint64_t seen_sample;    /* last sample with one of its frames */
        uint64_t pending_sample; /* last sample it was queued for comparison in */
        /*
         * The entries this one superseded at its address, most recent first
         * (at most CODE_OLDER): --bpf decodes events up to a batch late, when
         * the object sampled may have been replaced already (one module's
         * body by the next's). Cut by code_cache_trim(), which frees them.
         */
        struct code_entry *older;
};

#define CODE_OLDER 8

struct type_flags {
        uint64_t type, flags;
};

/* Entry indices where the thread-name lookups found their keys last time. */
enum { HINT_THREADING, HINT_ACTIVE, HINT_MODULE, HINT_GLOBAL, N_HINTS };
#define NAME_TYPES 8 /* classes of threads whose name's index is remembered */

/* A thread state seen in a walk of its interpreter's list (walk_interp()). */
struct walked_thread {
        uint64_t tstate, thread_id;
        int64_t native_tid;
        bool frames;
};

struct pywalk {
        struct pylayout L;
        struct pyfind_target t;
        struct memsrc *m;
        struct pysnap snap; /* every read of a sample goes through it */

        struct code_entry **hash; /* open addressing by code address */
        size_t hash_cap, hash_n;
        struct code_entry **all; /* every entry made and not yet forgotten (code_cache_trim) */
        size_t n_all, cap_all;
        size_t trim_at; /* trim the code cache when it holds more entries than this */
        uint32_t next_id;
        struct type_flags types[32];
        size_t n_types;

        struct pywalk_frame *frames;
        unsigned retries;         /* fresh reads of a torn thread (pywalk_set_retries) */
        pywalk_batch_fn batch_fn; /* reads a batch at one instant (pywalk_set_batch_reader) */
        void *batch_ctx;
        uint64_t main_gil; /* 3.12+: the main interpreter's GIL, seen last sample */
        /* <=3.10: pages that held frames lately, each with the last sample that used it. */
        uint64_t frame_page[FRAME_PAGES], frame_page_seen[FRAME_PAGES];
        size_t n_frame_pages;
        struct code_entry **pending; /* entries to compare with their objects */
        size_t n_pending;
        uint64_t sample_no;

        int32_t tid_off; /* of the TID in glibc's struct pthread, -1 unknown */
        unsigned tid_tries;
        int64_t pids[2];
        uint64_t tid_candidates[TID_CANDIDATES];
        size_t n_tid_candidates;

        struct pytasks *tasks; /* pywalk_set_tasks(): the asyncio tasks walk, NULL when off */

        /*
         * walk_interp(): the threads of the interpreter being walked that
         * were reported or held back, and those with no frames, held back
         * until its end (a state being handed to a new thread).
         */
        struct walked_thread *walked;
        size_t n_walked, cap_walked;
        struct pywalk_thread *frameless;
        size_t n_frameless, cap_frameless;
        /* walk_interp(): (thread id, TID) of the states with frames reported (framed_twin). */
        uint64_t *twins;
        size_t n_twins, cap_twins;

        uint32_t hints[N_HINTS];
        uint64_t name_hint_type[NAME_TYPES]; /* a class of threads... */
        uint32_t name_hint[NAME_TYPES];      /* ...and where its instances keep their name */
        size_t next_name_hint;
};

/* tp_flags of the type at `type`, cached. Returns 0 or an error (PYWALK_TORN). */
int pywalk_type_flags(struct pywalk *w, uint64_t type, uint64_t *flags);

/*
 * Read the str (`want_str`) or bytes object at addr whose first `prelen`
 * bytes are already in `pre`: a malloc'd buffer in *out (NUL-terminated
 * UTF-8 for a str), its length in *outlen. Returns 0, PYWALK_TORN when the
 * object is not what it should be, or a read error.
 */
int pywalk_read_object(struct pywalk *w, uint64_t addr, bool want_str, const uint8_t *pre,
                       size_t prelen, char **out, size_t *outlen);

/* Bytes of an object's header to read first: all of it, or what names a str's length. */
size_t pywalk_object_head_len(const struct pylayout *L);
size_t pywalk_object_short_len(const struct pylayout *L);

/*
 * Objects reached by name, for the asyncio tasks walk (pytasks.c); read like
 * the thread names (pynames.c): straight from the target, not through the
 * sample's snapshot. Each returns 0 with the value, 1 when it is not there or
 * does not read, or a negative errno when the process is gone or unreadable.
 */
/* `name` in the globals of module `module` of the main interpreter. */
int pywalk_module_global(struct pywalk *w, const char *module, const char *name, uint64_t *value);
/* Attribute `attr` of the instance at obj, from its __dict__ or its values. */
int pywalk_object_attr(struct pywalk *w, uint64_t obj, const char *attr, uint64_t *value);
/*
 * The attributes names[0, n_names) of the instance at obj, read at once:
 * values[i] is 0 for an attribute the instance does not hold itself (a
 * class attribute, or none). What it learns (key names, classes) is kept in
 * `a`: pywalk_attrs_sample() once a sample, forgetting the key names now
 * and then.
 */
struct pywalk_attrs;
struct pywalk_attrs *pywalk_attrs_new(void);
void pywalk_attrs_free(struct pywalk_attrs *a);
void pywalk_attrs_sample(struct pywalk_attrs *a, bool forget_keys);
int pywalk_object_attrs(struct pywalk *w, uint64_t obj, const char *const *names, size_t n_names,
                        struct pywalk_attrs *a, uint64_t *values);
/* The str at addr as NUL-terminated UTF-8 (malloc'd, the caller frees it). */
int pywalk_str_read(struct pywalk *w, uint64_t addr, char **out);
/* The int at addr, when it is one in [0, 2^64). */
int pywalk_int_read(struct pywalk *w, uint64_t addr, uint64_t *out);

/*
 * The code and line of the frame whose first fr_read bytes are `fr` (a
 * generator's or coroutine's: it may be suspended). Returns 0, 1 when it is
 * no frame to show (being set up, a shim), or an error (PYWALK_TORN).
 */
int pywalk_frame_decode(struct pywalk *w, const uint8_t *fr, struct pywalk_frame *out);

/* The asyncio tasks walk of one sample, inside its snapshot (pytasks.c). */
int pytasks_walk(struct pywalk *w);
void pytasks_free(struct pytasks *t);

#endif
