/*
 * writer.c - the trace writer: creates a trace file from the embedded schema
 * and fills it while pyflame-record samples.
 *
 * Nothing on the per-sample path touches SQLite. Strings, frames, stacks and
 * threads are interned in memory (idmap.h); add_sample encodes the sample
 * straight into its thread's chunk buffer (chunk.h) and bumps an in-memory
 * (stack, state) counter. trace_writer_flush() then writes everything
 * new since the last flush in one transaction: new strings, frames, stacks,
 * changed processes and threads, the chunks, changed stack counts, error
 * counts and meta. What a flush writes is marked committed only after COMMIT
 * succeeded, so a failed flush (disk full, a reader holding the lock too
 * long) loses nothing: the next flush writes it all again.
 *
 * add_sample flushes by itself once TRACE_WRITER_FLUSH_INTERVAL_NS of real
 * (CLOCK_MONOTONIC) time has passed. It looks at the clock when the sample
 * timestamps say a second has gone by, and at least every 4096 samples, so
 * the check costs nearly nothing per sample whatever the timestamps are.
 *
 * The database uses a rollback journal (a trace is one self-contained file)
 * and synchronous=OFF: a killed recorder loses at most its last second, and
 * only an operating-system crash can damage the file.
 *
 * Source texts (trace_writer_add_source) are compressed when they are
 * added, off any per-sample path, and held only until the flush that
 * commits them.
 *
 * A writer is not thread-safe; the recorder drives it from one thread.
 *
 * A writer that merges traces (merge.c, trace_writer_add_recording) also
 * keeps the recordings it was given and their meta, and at finalize takes
 * the trace's times and summary meta from them instead of from its clock.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <sqlite3.h>
#include <zlib.h>

#include "chunk.h"
#include "idmap.h"
#include "pfutil.h"
#include "pyflame-config.h"
#include "trace.h"
#include "trace_internal.h"

#define MAX_THREADS ((1u << 28) - 1)
/* Ids are uint32_t and the counts must fit too. */
#define MAX_IDS (UINT32_MAX - 1)
/* Check the clock at least this often (in samples) for automatic flushes. */
#define CLOCK_CHECK_SAMPLES 4096u

struct wstring {
        size_t off; /* into the arena */
        size_t len;
};

struct wframe {
        uint32_t function, qualname, file; /* string ids; qualname 0: none */
        int32_t line, first_line;
        int kind;
        uint32_t module; /* string id; 0: none (not a native frame) */
        uint64_t offset;
};

struct wstack {
        uint32_t parent, frame, depth;
};

struct wthread {
        int32_t pid;
        int64_t tid;
        uint64_t python_thread_id;
        char *name;
        uint32_t task_of;   /* an asyncio task's stream: the thread running its loop; 0: a thread */
        uint64_t task_addr; /* the Task object, for a task's stream */
        bool dirty;         /* its row must be (re)written */
        /*
         * Its ref in the file being written, 0 until its row is first written
         * there. The same as its ref in a rotation's first file (every stream
         * is written there, in order); after a rotation a file holds only the
         * streams that have samples in it (or were renamed), numbered densely
         * in the order they come (trace_join_segments() joins them by what
         * they are).
         */
        uint32_t file_ref;
        /*
         * Ended (trace_writer_end_thread): no longer found by its key, and
         * forgotten at the next commit, its slot free for another stream.
         */
        bool ended;
        bool free;
        /* A thread's: add_thread calls that returned it, less end_thread calls. */
        uint32_t users;
        /* The chunk being filled. */
        struct pf_buf buf;
        struct chunk_encoder enc;
        /* Over the whole recording (relative times). */
        int64_t first_ns, last_ns;
        uint64_t samples;
};

/* A full chunk waiting for the next flush. */
struct wchunk {
        uint32_t thread;
        struct chunk_encoder enc;
        struct pf_buf data;
};

struct wprocess {
        int32_t pid;
        char *cmdline, *python_version, *python_build;
        int exit_status;
        int64_t end_ns;
        bool ended;
        bool dirty;
        /*
         * Its row is in the file being written. After a rotation a file has
         * the processes alive at its start, and an ended one only when a
         * thread of it comes (late, with a name).
         */
        bool in_file;
        uint32_t recording; /* 0: not merged (NULL on disk) */
        int32_t source_pid; /* 0: not merged */
};

/* A source recording of a merged trace. */
struct wrecording {
        char *file, *host;
        int64_t start_wall_ns, duration_ns, offset_ns; /* start, duration -1: unknown */
        uint64_t samples;
        struct wmeta_pair {
                char *key, *value;
        } * meta;
        size_t n_meta, cap_meta;
        bool dirty;
};

/* A source file's text (trace_writer_add_source). */
struct wsource {
        uint32_t file; /* string id */
        uint64_t size; /* bytes of text */
        int64_t mtime_ns;
        int encoding;  /* SOURCE_PLAIN or SOURCE_ZLIB */
        uint8_t *data; /* what goes to disk; freed once committed */
        size_t stored;
};

/* sources.encoding, frozen on disk (schema/trace.sql). */
enum { SOURCE_PLAIN = 0, SOURCE_ZLIB = 1 };

struct werrors {
        int32_t pid;
        uint64_t n[TRACE_ERROR_KIND_COUNT];
        bool dirty;
};

struct wmeta {
        char *key;
        char *text; /* NULL for an integer value */
        int64_t num;
        bool dirty;
};

/*
 * Samples per (stack, state), for the stack_counts table: one cache line per
 * stack, indexed by state. Dense by stack id because stacks interned early
 * tend to be the hot ones, so the counters touched per sample stay few and
 * close together.
 */
struct stack_count {
        uint64_t n[TRACE_STATE_MASK + 1];
};

enum {
        ST_STRING,
        ST_FRAME,
        ST_STACK,
        ST_PROCESS,
        ST_THREAD,
        ST_CHUNK,
        ST_SCOUNT,
        ST_ERRORS,
        ST_META,
        ST_RECORDING,
        ST_RECORDING_META,
        ST_SOURCE,
        ST_COUNT
};

static const char *const statement_sql[ST_COUNT] = {
    [ST_STRING] = "INSERT INTO strings(id, value) VALUES (?1, ?2)",
    [ST_FRAME] = "INSERT INTO frames(id, function, qualname, file, line, first_line, kind, "
                 "module, module_offset) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    [ST_STACK] = "INSERT INTO stacks(id, parent, frame, depth) VALUES (?1, ?2, ?3, ?4)",
    [ST_PROCESS] = "INSERT OR REPLACE INTO processes(pid, cmdline, python_version, "
                   "python_build, exit_status, end_ns, recording, source_pid) "
                   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    [ST_THREAD] = "INSERT OR REPLACE INTO threads(ref, pid, tid, python_thread_id, name, "
                  "first_ns, last_ns, samples, task_of, task_addr) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    [ST_CHUNK] = "INSERT INTO sample_chunks(thread, first_ns, last_ns, count, data) "
                 "VALUES (?1, ?2, ?3, ?4, ?5)",
    [ST_SCOUNT] = "INSERT OR REPLACE INTO stack_counts(stack, state, samples) "
                  "VALUES (?1, ?2, ?3)",
    [ST_ERRORS] = "INSERT OR REPLACE INTO errors(pid, kind, count) VALUES (?1, ?2, ?3)",
    [ST_META] = "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
    [ST_RECORDING] = "INSERT OR REPLACE INTO recordings(id, file, host, start_wall_ns, "
                     "duration_ns, offset_ns, samples) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [ST_RECORDING_META] = "INSERT OR REPLACE INTO recording_meta(recording, key, value) "
                          "VALUES (?1, ?2, ?3)",
    [ST_SOURCE] = "INSERT OR IGNORE INTO sources(file, size, mtime_ns, encoding, data) "
                  "VALUES (?1, ?2, ?3, ?4, ?5)",
};

enum writer_state { W_OPEN, W_FINALIZED, W_FAILED };

struct trace_writer {
        enum writer_state state;
        sqlite3 *db;
        dev_t file_dev; /* the file create_file() made, which open_database() must open */
        ino_t file_ino;
        sqlite3_stmt *stmt[ST_COUNT];
        char errmsg[512];
        int64_t start_mono_ns;

        /* Strings: ids 1..n_strings, entry 0 unused. */
        struct pf_buf arena;
        struct wstring *strings;
        uint32_t n_strings, cap_strings, committed_strings;
        struct idmap string_index;

        /* Frames: ids 1..n_frames, entry 0 unused. */
        struct wframe *frames;
        uint32_t n_frames, cap_frames, committed_frames;
        struct idmap frame_index;

        /* Stacks: ids 0..n_stacks-1; stack 0 is in the schema already. */
        struct wstack *stacks;
        uint32_t n_stacks, cap_stacks, committed_stacks;
        struct idmap stack_index;
        /* Sample counts per stack and a bit per stack whose counts changed. */
        struct stack_count *stack_counts;
        uint64_t *stack_dirty;
        uint32_t cap_stack_counts;

        /* Threads: refs 1..n_threads, entry 0 unused. */
        struct wthread *threads;
        uint32_t n_threads, cap_threads;
        struct idmap thread_index;
        /* Refs given in the file being written (wthread.file_ref), and committed. */
        uint32_t n_file_threads, committed_file_threads;
        /* Slots of ended streams, forgotten, for the next streams. */
        uint32_t *free_refs;
        size_t n_free_refs, cap_free_refs;
        bool any_ended; /* some stream ended since the last commit */

        struct wchunk *sealed;
        size_t n_sealed, cap_sealed;
        uint32_t chunk_max;

        struct wprocess *processes;
        size_t n_processes, cap_processes;
        struct werrors *errors;
        size_t n_errors, cap_errors;
        uint64_t errors_total;
        struct wmeta *meta;
        size_t n_meta, cap_meta;

        /* Recordings of a merged trace: ids 1..n_recordings at index id - 1. */
        struct wrecording *recordings;
        size_t n_recordings, cap_recordings;

        /* Source texts: index i + 1 in source_index; data kept until committed. */
        struct wsource *sources;
        size_t n_sources, cap_sources, committed_sources;
        struct idmap source_index;

        uint64_t samples_total;
        uint64_t task_samples_total; /* samples of asyncio tasks' streams */

        /* Automatic flushing. */
        int64_t flush_interval_ns;
        int64_t last_flush_mono_ns;
        int64_t next_check_sample_ns;
        uint32_t samples_since_check;
};

static int fail(struct trace_writer *w, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct trace_writer *w, int status, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->errmsg, sizeof(w->errmsg), fmt, ap);
        va_end(ap);
        return status;
}

static int fail_nomem(struct trace_writer *w)
{
        return fail(w, TRACE_ERR_NOMEM, "out of memory");
}

/* Report a failed SQLite call, naming what we were doing. */
static int fail_sqlite(struct trace_writer *w, int rc, const char *doing)
{
        int status = trace_status_from_sqlite(rc);
        const char *detail = w->db ? sqlite3_errmsg(w->db) : sqlite3_errstr(rc);
        if ((rc & 0xff) == SQLITE_FULL)
                return fail(w, TRACE_ERR_IO, "%s: disk full (%s)", doing, detail);
        if ((rc & 0xff) == SQLITE_CANTOPEN)
                return fail(w, TRACE_ERR_IO,
                            "%s: its journal (the trace's name with -journal) cannot be opened: "
                            "the directory is not writable, or something is in its place (a "
                            "symbolic link is never followed)",
                            doing);
        if ((rc & 0xff) == SQLITE_BUSY)
                return fail(w, TRACE_ERR_IO,
                            "%s: the trace is locked by another process (a reader holding it "
                            "too long?); the data stays buffered for the next flush",
                            doing);
        if (status == TRACE_ERR_NOMEM)
                return fail_nomem(w);
        return fail(w, status == TRACE_ERR_NOT_SQLITE ? TRACE_ERR_IO : status, "%s: %s", doing,
                    detail);
}

/* Grow an array of `elem`-byte entries to hold at least `need` entries. */
static int grow_array(void **p, size_t *cap, size_t elem, size_t need)
{
        if (need <= *cap)
                return 0;
        size_t n = *cap ? *cap : 16;
        while (n < need) {
                if (n > SIZE_MAX / 2 / elem)
                        return -1;
                n *= 2;
        }
        void *q = realloc(*p, n * elem);
        if (!q)
                return -1;
        *p = q;
        *cap = n;
        return 0;
}

/* grow_array for uint32_t capacities (the id tables). */
static int grow_table(void **p, uint32_t *cap, size_t elem, size_t need)
{
        size_t c = *cap;
        if (need > MAX_IDS + 1u)
                return -1;
        if (grow_array(p, &c, elem, need) < 0)
                return -1;
        *cap = c > MAX_IDS + 1u ? MAX_IDS + 1u : (uint32_t)c;
        return 0;
}

static char *dup_or_null(const char *s)
{
        return s ? strdup(s) : NULL;
}

/* Replace *slot with a copy of s (NULL allowed). Returns 0 or -1 (slot unchanged). */
static int replace_string(char **slot, const char *s)
{
        char *copy = NULL;
        if (s && !(copy = strdup(s)))
                return -1;
        free(*slot);
        *slot = copy;
        return 0;
}

/* Time relative to the start, if within the range the format allows. */
static bool relative_time(const struct trace_writer *w, int64_t t_ns, int64_t *rel)
{
        return !__builtin_sub_overflow(t_ns, w->start_mono_ns, rel) && *rel > -CHUNK_TIME_LIMIT &&
               *rel < CHUNK_TIME_LIMIT;
}

static int check_open(struct trace_writer *w)
{
        if (!w)
                return TRACE_ERR_ARG;
        if (w->state == W_FINALIZED)
                return fail(w, TRACE_ERR_STATE, "the trace was already finalized");
        if (w->state == W_FAILED)
                return fail(w, TRACE_ERR_STATE, "the trace could not be created");
        return 0;
}

/* ------------------------------------------------------------------ */
/* Meta                                                                */
/* ------------------------------------------------------------------ */

static struct wmeta *meta_slot(struct trace_writer *w, const char *key)
{
        for (size_t i = 0; i < w->n_meta; i++)
                if (!strcmp(w->meta[i].key, key))
                        return &w->meta[i];
        if (grow_array((void **)&w->meta, &w->cap_meta, sizeof(*w->meta), w->n_meta + 1) < 0)
                return NULL;
        char *k = strdup(key);
        if (!k)
                return NULL;
        struct wmeta *m = &w->meta[w->n_meta++];
        memset(m, 0, sizeof(*m));
        m->key = k;
        return m;
}

static int set_meta(struct trace_writer *w, const char *key, const char *text, int64_t num)
{
        if (!key || !*key)
                return fail(w, TRACE_ERR_ARG, "meta key must be a non-empty string");
        char *copy = NULL;
        if (text && !(copy = strdup(text)))
                return fail_nomem(w);
        struct wmeta *m = meta_slot(w, key);
        if (!m) {
                free(copy);
                return fail_nomem(w);
        }
        free(m->text);
        m->text = copy;
        m->num = num;
        m->dirty = true;
        return 0;
}

TRACE_API int trace_writer_set_meta(struct trace_writer *w, const char *key, const char *value)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        if (!value)
                return fail(w, TRACE_ERR_ARG, "meta value of \"%s\" is NULL", key ? key : "");
        return set_meta(w, key, value, 0);
}

TRACE_API int trace_writer_set_meta_int(struct trace_writer *w, const char *key, int64_t value)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        return set_meta(w, key, NULL, value);
}

/* ------------------------------------------------------------------ */
/* Interning                                                           */
/* ------------------------------------------------------------------ */

struct string_key {
        const struct trace_writer *w;
        const char *s;
        size_t len;
};

static bool string_eq(const void *key, uint32_t id)
{
        const struct string_key *k = key;
        const struct wstring *e = &k->w->strings[id];
        return e->len == k->len && !memcmp(k->w->arena.data + e->off, k->s, k->len);
}

/* Intern a string and set *id (>= 1). */
static int intern_string(struct trace_writer *w, const char *s, uint32_t *id)
{
        struct string_key k = {w, s, strlen(s)};
        uint64_t h = pf_hash_bytes(s, k.len, 0);
        uint32_t found = idmap_find(&w->string_index, h, string_eq, &k);
        if (found) {
                *id = found;
                return 0;
        }
        uint32_t nid = w->n_strings + 1;
        if (nid > MAX_IDS)
                return fail(w, TRACE_ERR_ARG, "too many distinct strings");
        if (grow_table((void **)&w->strings, &w->cap_strings, sizeof(*w->strings),
                       (size_t)nid + 1) < 0)
                return fail_nomem(w);
        size_t off = w->arena.len;
        if (pf_buf_append(&w->arena, s, k.len) < 0)
                return fail_nomem(w);
        if (idmap_insert(&w->string_index, h, nid) < 0) {
                w->arena.len = off;
                return fail_nomem(w);
        }
        w->strings[nid] = (struct wstring){off, k.len};
        w->n_strings = nid;
        *id = nid;
        return 0;
}

struct frame_key {
        const struct trace_writer *w;
        struct wframe f;
};

static bool frame_eq(const void *key, uint32_t id)
{
        const struct frame_key *k = key;
        const struct wframe *a = &k->w->frames[id], *b = &k->f;
        return a->function == b->function && a->qualname == b->qualname && a->file == b->file &&
               a->line == b->line && a->first_line == b->first_line && a->kind == b->kind &&
               a->module == b->module && a->offset == b->offset;
}

static uint64_t frame_hash(const struct wframe *f)
{
        uint64_t h = pf_hash_u64(0x6672616d65ULL, f->function);
        h = pf_hash_u64(h, f->qualname);
        h = pf_hash_u64(h, f->file);
        h = pf_hash_u64(h, (uint64_t)(uint32_t)f->line << 32 | (uint32_t)f->first_line);
        h = pf_hash_u64(h, (uint64_t)f->module << 8 | (uint64_t)f->kind);
        return pf_hash_u64(h, f->offset);
}

static int intern_frame(struct trace_writer *w, const struct trace_frame_desc *f,
                        const char *module, uint64_t offset, uint32_t *frame_id);

TRACE_API int trace_writer_intern_frame(struct trace_writer *w, const struct trace_frame_desc *f,
                                        uint32_t *frame_id)
{
        return intern_frame(w, f, NULL, 0, frame_id);
}

TRACE_API int trace_writer_intern_native_frame(struct trace_writer *w,
                                               const struct trace_frame_desc *f, const char *module,
                                               uint64_t offset, uint32_t *frame_id)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        if (!module || !f || f->kind != TRACE_FRAME_NATIVE)
                return fail(w, TRACE_ERR_ARG, "a native frame needs kind native and a module");
        if (offset > (uint64_t)INT64_MAX)
                return fail(w, TRACE_ERR_ARG, "module offset out of range");
        return intern_frame(w, f, module, offset, frame_id);
}

static int intern_frame(struct trace_writer *w, const struct trace_frame_desc *f,
                        const char *module, uint64_t offset, uint32_t *frame_id)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        if (!f || !frame_id || !f->function || !f->file)
                return fail(w, TRACE_ERR_ARG, "a frame needs a function and a file name");
        if (f->kind != TRACE_FRAME_PYTHON && f->kind != TRACE_FRAME_NATIVE &&
            f->kind != TRACE_FRAME_SPECIAL && f->kind != TRACE_FRAME_TASK)
                return fail(w, TRACE_ERR_ARG, "unknown frame kind %d", (int)f->kind);
        struct frame_key k = {w,
                              {0, 0, 0, f->line < 0 ? -1 : f->line,
                               f->first_line < 0 ? -1 : f->first_line, (int)f->kind, 0, offset}};
        /* Strings interned here stay interned even if the frame fails: harmless. */
        if ((rc = intern_string(w, f->function, &k.f.function)) < 0 ||
            (f->qualname && (rc = intern_string(w, f->qualname, &k.f.qualname)) < 0) ||
            (rc = intern_string(w, f->file, &k.f.file)) < 0 ||
            (module && (rc = intern_string(w, module, &k.f.module)) < 0))
                return rc;
        uint64_t h = frame_hash(&k.f);
        uint32_t found = idmap_find(&w->frame_index, h, frame_eq, &k);
        if (found) {
                *frame_id = found;
                return 0;
        }
        uint32_t nid = w->n_frames + 1;
        if (nid > MAX_IDS)
                return fail(w, TRACE_ERR_ARG, "too many distinct frames");
        if (grow_table((void **)&w->frames, &w->cap_frames, sizeof(*w->frames), (size_t)nid + 1) <
            0)
                return fail_nomem(w);
        if (idmap_insert(&w->frame_index, h, nid) < 0)
                return fail_nomem(w);
        w->frames[nid] = k.f;
        w->n_frames = nid;
        *frame_id = nid;
        return 0;
}

/* Make room for the counters of stacks 0..n-1 (zeroed). Returns 0 or -1. */
static int grow_stack_counts(struct trace_writer *w, uint32_t n)
{
        if (n <= w->cap_stack_counts)
                return 0;
        uint32_t cap = w->cap_stack_counts ? w->cap_stack_counts : 64;
        while (cap < n)
                cap = cap > UINT32_MAX / 2 ? UINT32_MAX : cap * 2;
        size_t old_words = ((size_t)w->cap_stack_counts + 63) / 64, words = ((size_t)cap + 63) / 64;
        uint64_t *d = realloc(w->stack_dirty, words * sizeof(*d));
        if (!d)
                return -1;
        memset(d + old_words, 0, (words - old_words) * sizeof(*d));
        w->stack_dirty = d;
        struct stack_count *c = realloc(w->stack_counts, (size_t)cap * sizeof(*c));
        if (!c)
                return -1; /* the bitmap grew; cap_stack_counts still guards both */
        memset(c + w->cap_stack_counts, 0, (size_t)(cap - w->cap_stack_counts) * sizeof(*c));
        w->stack_counts = c;
        w->cap_stack_counts = cap;
        return 0;
}

struct stack_key {
        const struct trace_writer *w;
        uint32_t parent, frame;
};

static bool stack_eq(const void *key, uint32_t id)
{
        const struct stack_key *k = key;
        const struct wstack *s = &k->w->stacks[id];
        return s->parent == k->parent && s->frame == k->frame;
}

static int intern_stack(struct trace_writer *w, uint32_t parent, uint32_t frame, uint32_t *stack_id)
{
        if (parent >= w->n_stacks)
                return fail(w, TRACE_ERR_ARG, "unknown parent stack %u", parent);
        if (frame == 0 || frame > w->n_frames)
                return fail(w, TRACE_ERR_ARG, "unknown frame %u", frame);
        struct stack_key k = {w, parent, frame};
        uint64_t h = pf_hash_u64(pf_hash_u64(0x737461636bULL, parent), frame);
        uint32_t found = idmap_find(&w->stack_index, h, stack_eq, &k);
        if (found) {
                *stack_id = found;
                return 0;
        }
        uint32_t nid = w->n_stacks;
        if (nid > MAX_IDS)
                return fail(w, TRACE_ERR_ARG, "too many distinct stacks");
        if (grow_table((void **)&w->stacks, &w->cap_stacks, sizeof(*w->stacks), (size_t)nid + 1) <
                0 ||
            grow_stack_counts(w, nid + 1) < 0 || idmap_insert(&w->stack_index, h, nid) < 0)
                return fail_nomem(w);
        w->stacks[nid] = (struct wstack){parent, frame, w->stacks[parent].depth + 1};
        w->n_stacks = nid + 1;
        *stack_id = nid;
        return 0;
}

TRACE_API int trace_writer_intern_stack(struct trace_writer *w, uint32_t parent, uint32_t frame,
                                        uint32_t *stack_id)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        if (!stack_id)
                return fail(w, TRACE_ERR_ARG, "stack_id is NULL");
        return intern_stack(w, parent, frame, stack_id);
}

TRACE_API int trace_writer_intern_stack_frames(struct trace_writer *w, const uint32_t *frames,
                                               size_t depth, uint32_t *stack_id)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        if (!stack_id || (depth && !frames))
                return fail(w, TRACE_ERR_ARG, "NULL frames or stack_id");
        uint32_t s = TRACE_STACK_EMPTY;
        for (size_t i = 0; i < depth; i++)
                if ((rc = intern_stack(w, s, frames[i], &s)) < 0)
                        return rc;
        *stack_id = s;
        return 0;
}

/* ------------------------------------------------------------------ */
/* Processes, threads, errors                                          */
/* ------------------------------------------------------------------ */

static struct wprocess *find_process(struct trace_writer *w, int32_t pid)
{
        for (size_t i = 0; i < w->n_processes; i++)
                if (w->processes[i].pid == pid)
                        return &w->processes[i];
        return NULL;
}

TRACE_API int trace_writer_add_process(struct trace_writer *w, const struct trace_process_desc *p)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        if (!p || p->pid <= 0)
                return fail(w, TRACE_ERR_ARG, "a process needs a pid > 0");
        struct wprocess fresh = {.pid = p->pid, .exit_status = -1, .end_ns = -1};
        fresh.cmdline = dup_or_null(p->cmdline);
        fresh.python_version = dup_or_null(p->python_version);
        fresh.python_build = dup_or_null(p->python_build);
        if ((p->cmdline && !fresh.cmdline) || (p->python_version && !fresh.python_version) ||
            (p->python_build && !fresh.python_build)) {
                free(fresh.cmdline);
                free(fresh.python_version);
                free(fresh.python_build);
                return fail_nomem(w);
        }
        struct wprocess *e = find_process(w, p->pid);
        if (e) {
                free(e->cmdline);
                free(e->python_version);
                free(e->python_build);
                e->cmdline = fresh.cmdline;
                e->python_version = fresh.python_version;
                e->python_build = fresh.python_build;
                /* Alive again: its pid taken by a new process (a file holds one row per pid). */
                e->ended = false;
                e->exit_status = -1;
                e->end_ns = -1;
                e->dirty = true;
                return 0;
        }
        if (grow_array((void **)&w->processes, &w->cap_processes, sizeof(*w->processes),
                       w->n_processes + 1) < 0) {
                free(fresh.cmdline);
                free(fresh.python_version);
                free(fresh.python_build);
                return fail_nomem(w);
        }
        fresh.dirty = true;
        w->processes[w->n_processes++] = fresh;
        return 0;
}

TRACE_API int trace_writer_end_process(struct trace_writer *w, int32_t pid, int exit_status,
                                       int64_t t_ns)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        struct wprocess *e = find_process(w, pid);
        if (!e)
                return fail(w, TRACE_ERR_ARG, "process %d was not added", (int)pid);
        int64_t rel;
        if (!relative_time(w, t_ns, &rel))
                return fail(w, TRACE_ERR_ARG, "end time %lld is not a monotonic clock time",
                            (long long)t_ns);
        e->exit_status = exit_status < 0 ? -1 : exit_status;
        e->end_ns = rel;
        e->ended = true;
        e->dirty = true;
        return 0;
}

struct thread_key {
        const struct trace_writer *w;
        int32_t pid;
        int64_t tid;
        uint64_t python_thread_id;
        uint32_t task_of;
        uint64_t task_addr;
};

static bool thread_eq(const void *key, uint32_t ref)
{
        const struct thread_key *k = key;
        const struct wthread *t = &k->w->threads[ref];
        return t->pid == k->pid && t->tid == k->tid && t->python_thread_id == k->python_thread_id &&
               t->task_of == k->task_of && t->task_addr == k->task_addr;
}

static uint64_t thread_hash(int32_t pid, int64_t tid, uint64_t python_thread_id, uint32_t task_of,
                            uint64_t task_addr)
{
        uint64_t h = pf_hash_u64(
            pf_hash_u64(pf_hash_u64(0x746872ULL, (uint32_t)pid), (uint64_t)tid), python_thread_id);
        return task_of ? pf_hash_u64(pf_hash_u64(h, task_of), task_addr) : h;
}

/* The stream of thread `k` (a task's when k->task_of): found, or made with `name`. */
static int stream_add(struct trace_writer *w, const struct thread_key *k, const char *name_in,
                      uint32_t *thread_ref)
{
        uint64_t h = thread_hash(k->pid, k->tid, k->python_thread_id, k->task_of, k->task_addr);
        uint32_t found = idmap_find(&w->thread_index, h, thread_eq, k);
        if (found) {
                if (!k->task_of)
                        w->threads[found].users++;
                *thread_ref = found;
                return 0;
        }
        /* A slot an ended stream left, else a new one. */
        bool reuse = w->n_free_refs > 0;
        uint32_t ref = reuse ? w->free_refs[w->n_free_refs - 1] : w->n_threads + 1;
        if (ref > MAX_THREADS)
                return fail(w, TRACE_ERR_ARG, "too many threads");
        char *name = dup_or_null(name_in);
        if (name_in && !name)
                return fail_nomem(w);
        if ((!reuse && grow_table((void **)&w->threads, &w->cap_threads, sizeof(*w->threads),
                                  (size_t)ref + 1) < 0) ||
            idmap_insert(&w->thread_index, h, ref) < 0) {
                free(name);
                return fail_nomem(w);
        }
        if (reuse)
                w->n_free_refs--;
        struct wthread *th = &w->threads[ref];
        memset(th, 0, sizeof(*th));
        th->pid = k->pid;
        th->tid = k->tid;
        th->python_thread_id = k->python_thread_id;
        th->task_of = k->task_of;
        th->task_addr = k->task_addr;
        th->name = name;
        th->first_ns = th->last_ns = -1;
        th->dirty = true;
        th->users = k->task_of ? 0 : 1;
        if (!reuse)
                w->n_threads = ref;
        *thread_ref = ref;
        return 0;
}

/* Is `ref` a stream's (added, its slot not freed)? */
static bool stream_known(const struct trace_writer *w, uint32_t ref)
{
        return ref != 0 && ref <= w->n_threads && !w->threads[ref].free;
}

/* ... and may it still be used (not ended)? */
static bool stream_live(const struct trace_writer *w, uint32_t ref)
{
        return stream_known(w, ref) && !w->threads[ref].ended;
}

static void stream_unindex(struct trace_writer *w, uint32_t ref)
{
        struct wthread *t = &w->threads[ref];
        idmap_remove(&w->thread_index,
                     thread_hash(t->pid, t->tid, t->python_thread_id, t->task_of, t->task_addr),
                     ref);
        t->ended = true;
}

TRACE_API int trace_writer_end_thread(struct trace_writer *w, uint32_t thread_ref)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        if (!stream_known(w, thread_ref))
                return fail(w, TRACE_ERR_ARG, "unknown thread ref %u", thread_ref);
        struct wthread *t = &w->threads[thread_ref];
        /* Two callers may hold one thread (added twice with its key): the last ends it. */
        if (t->ended || (!t->task_of && t->users > 1 && t->users--))
                return 0;
        stream_unindex(w, thread_ref);
        if (!w->threads[thread_ref].task_of)
                for (uint32_t i = 1; i <= w->n_threads; i++)
                        if (w->threads[i].task_of == thread_ref && !w->threads[i].free &&
                            !w->threads[i].ended)
                                stream_unindex(w, i);
        w->any_ended = true;
        return 0;
}

/*
 * After a commit: the ended streams are written whole (rows, chunks), so
 * their slots are free. Cannot fail: a slot that does not fit the free
 * list stays, unused.
 */
static void forget_ended(struct trace_writer *w)
{
        if (!w->any_ended)
                return;
        w->any_ended = false;
        for (uint32_t i = 1; i <= w->n_threads; i++) {
                struct wthread *t = &w->threads[i];
                if (!t->ended || t->free)
                        continue;
                if (grow_array((void **)&w->free_refs, &w->cap_free_refs, sizeof(*w->free_refs),
                               w->n_free_refs + 1) < 0)
                        return;
                free(t->name);
                pf_buf_free(&t->buf);
                memset(t, 0, sizeof(*t));
                t->free = true;
                w->free_refs[w->n_free_refs++] = i;
        }
}

TRACE_API int trace_writer_add_thread(struct trace_writer *w, const struct trace_thread_desc *t,
                                      uint32_t *thread_ref)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        if (!t || !thread_ref)
                return fail(w, TRACE_ERR_ARG, "NULL thread description or thread_ref");
        if (!find_process(w, t->pid))
                return fail(w, TRACE_ERR_ARG,
                            "thread of pid %d: add the process first (trace_writer_add_process)",
                            (int)t->pid);
        struct thread_key k = {w, t->pid, t->tid < 0 ? -1 : t->tid, t->python_thread_id, 0, 0};
        return stream_add(w, &k, t->name, thread_ref);
}

TRACE_API int trace_writer_add_task(struct trace_writer *w, const struct trace_task_desc *t,
                                    uint32_t *task_ref)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        if (!t || !task_ref)
                return fail(w, TRACE_ERR_ARG, "NULL task description or task_ref");
        if (!stream_live(w, t->thread_ref) || w->threads[t->thread_ref].task_of)
                return fail(w, TRACE_ERR_ARG, "task of unknown thread ref %u", t->thread_ref);
        const struct wthread *th = &w->threads[t->thread_ref];
        struct thread_key k = {w,           th->pid, th->tid, th->python_thread_id, t->thread_ref,
                               t->task_addr};
        return stream_add(w, &k, t->name, task_ref);
}

TRACE_API int trace_writer_set_thread_name(struct trace_writer *w, uint32_t thread_ref,
                                           const char *name)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        if (!stream_known(w, thread_ref))
                return fail(w, TRACE_ERR_ARG, "unknown thread ref %u", thread_ref);
        struct wthread *th = &w->threads[thread_ref];
        if (th->ended)
                return 0; /* a name read late: the stream is written already */
        /* The same name again writes nothing (nor puts the thread in a rotated file). */
        if (th->name && name ? !strcmp(th->name, name) : th->name == name)
                return 0;
        if (replace_string(&th->name, name) < 0)
                return fail_nomem(w);
        th->dirty = true;
        return 0;
}

TRACE_API int trace_writer_count_error(struct trace_writer *w, int32_t pid,
                                       enum trace_error_kind kind, uint64_t n)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        if ((unsigned)kind >= TRACE_ERROR_KIND_COUNT)
                return fail(w, TRACE_ERR_ARG, "unknown error kind %d", (int)kind);
        if (n > (uint64_t)INT64_MAX - w->errors_total)
                return fail(w, TRACE_ERR_ARG, "error count overflows");
        struct werrors *e = NULL;
        for (size_t i = 0; i < w->n_errors; i++)
                if (w->errors[i].pid == pid)
                        e = &w->errors[i];
        if (!e) {
                if (grow_array((void **)&w->errors, &w->cap_errors, sizeof(*w->errors),
                               w->n_errors + 1) < 0)
                        return fail_nomem(w);
                e = &w->errors[w->n_errors++];
                memset(e, 0, sizeof(*e));
                e->pid = pid;
        }
        e->n[kind] += n;
        e->dirty = true;
        w->errors_total += n;
        return 0;
}

/* ------------------------------------------------------------------ */
/* Sources                                                             */
/* ------------------------------------------------------------------ */

struct source_key {
        const struct trace_writer *w;
        uint32_t file;
};

static bool source_eq(const void *key, uint32_t id)
{
        const struct source_key *k = key;
        return k->w->sources[id - 1].file == k->file;
}

/*
 * Compress `data` when that saves space; the text is otherwise kept as it
 * is. Sets *out (malloc'ed), *stored and *encoding. Returns 0 or -1 (no memory).
 */
static int encode_source(const void *data, size_t len, uint8_t **out, size_t *stored, int *encoding)
{
        uLongf bound = compressBound((uLong)len);
        uint8_t *z = malloc(bound ? bound : 1);
        if (!z)
                return -1;
        uLongf zlen = bound;
        if (compress2(z, &zlen, data, (uLong)len, Z_DEFAULT_COMPRESSION) == Z_OK && zlen < len) {
                uint8_t *shrunk = realloc(z, zlen);
                *out = shrunk ? shrunk : z;
                *stored = zlen;
                *encoding = SOURCE_ZLIB;
                return 0;
        }
        free(z);
        uint8_t *copy = malloc(len ? len : 1);
        if (!copy)
                return -1;
        memcpy(copy, data, len);
        *out = copy;
        *stored = len;
        *encoding = SOURCE_PLAIN;
        return 0;
}

TRACE_API int trace_writer_add_source(struct trace_writer *w, const char *file, const void *data,
                                      size_t len, int64_t mtime_ns)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        if (!file || !*file || (len && !data))
                return fail(w, TRACE_ERR_ARG, "a source needs a file name and its text");
        if (len > TRACE_SOURCE_MAX_BYTES)
                return fail(w, TRACE_ERR_ARG,
                            "source of %s: %zu bytes, more than the %u a trace "
                            "holds for one file",
                            file, len, TRACE_SOURCE_MAX_BYTES);
        if (len && memchr(data, '\0', len))
                return fail(w, TRACE_ERR_ARG, "source of %s: not text (it holds a NUL byte)", file);
        struct source_key k = {w, 0};
        if ((rc = intern_string(w, file, &k.file)) < 0)
                return rc;
        uint64_t h = pf_hash_u64(0x736f75726365ULL, k.file);
        if (idmap_find(&w->source_index, h, source_eq, &k))
                return 1;
        if (w->n_sources >= MAX_IDS)
                return fail(w, TRACE_ERR_ARG, "too many sources");
        struct wsource src = {
            .file = k.file, .size = len, .mtime_ns = mtime_ns < 0 ? -1 : mtime_ns};
        if (grow_array((void **)&w->sources, &w->cap_sources, sizeof(*w->sources),
                       w->n_sources + 1) < 0 ||
            encode_source(data, len, &src.data, &src.stored, &src.encoding) < 0)
                return fail_nomem(w);
        if (idmap_insert(&w->source_index, h, (uint32_t)w->n_sources + 1) < 0) {
                free(src.data);
                return fail_nomem(w);
        }
        w->sources[w->n_sources++] = src;
        return 0;
}

/* ------------------------------------------------------------------ */
/* Samples                                                             */
/* ------------------------------------------------------------------ */

/* Move a thread's current chunk to the sealed list. */
static int seal_chunk(struct trace_writer *w, uint32_t ref)
{
        struct wthread *th = &w->threads[ref];
        if (grow_array((void **)&w->sealed, &w->cap_sealed, sizeof(*w->sealed), w->n_sealed + 1) <
            0)
                return fail_nomem(w);
        w->sealed[w->n_sealed++] = (struct wchunk){ref, th->enc, th->buf};
        memset(&th->buf, 0, sizeof(th->buf));
        memset(&th->enc, 0, sizeof(th->enc));
        return 0;
}

static void maybe_flush_soon(struct trace_writer *w, int64_t t_ns, int *rc)
{
        /* Look at the clock when the samples say time has passed, or every so often. */
        if (++w->samples_since_check < CLOCK_CHECK_SAMPLES && t_ns < w->next_check_sample_ns)
                return;
        w->samples_since_check = 0;
        if (w->flush_interval_ns < 0)
                return;
        w->next_check_sample_ns = t_ns + w->flush_interval_ns;
        if (pf_now_mono_ns() - w->last_flush_mono_ns < w->flush_interval_ns)
                return;
        *rc = trace_writer_flush(w);
}

TRACE_API int trace_writer_add_sample(struct trace_writer *w, uint32_t thread_ref, int64_t t_ns,
                                      uint32_t stack_id, unsigned state)
{
        if (!w || w->state != W_OPEN)
                return check_open(w);
        if (!stream_live(w, thread_ref))
                return fail(w, TRACE_ERR_ARG, "unknown or ended thread ref %u", thread_ref);
        if (stack_id >= w->n_stacks)
                return fail(w, TRACE_ERR_ARG, "unknown stack %u", stack_id);
        if (state & ~TRACE_STATE_MASK)
                return fail(w, TRACE_ERR_ARG, "unknown state flags 0x%x", state);
        int64_t rel;
        if (!relative_time(w, t_ns, &rel))
                return fail(w, TRACE_ERR_ARG, "sample time %lld is not a monotonic clock time",
                            (long long)t_ns);
        struct wthread *th = &w->threads[thread_ref];
        if (th->samples && rel < th->last_ns)
                return fail(w, TRACE_ERR_ARG,
                            "samples of thread %u go back in time (%lld ns after %lld ns)",
                            thread_ref, (long long)rel, (long long)th->last_ns);
        if (th->enc.count >= w->chunk_max) {
                int rc = seal_chunk(w, thread_ref);
                if (rc < 0)
                        return rc;
        }
        if (th->buf.cap - th->buf.len < CHUNK_RECORD_MAX &&
            pf_buf_reserve(&th->buf, CHUNK_RECORD_MAX) < 0)
                return fail_nomem(w);
        chunk_encode(&th->enc, &th->buf, rel, stack_id, state);
        if (th->task_of) {
                /* Task samples stay out of stack_counts and meta samples (schema/trace.sql). */
                w->task_samples_total++;
        } else {
                w->stack_counts[stack_id].n[state]++;
                w->stack_dirty[stack_id / 64] |= (uint64_t)1 << (stack_id % 64);
        }
        if (!th->samples)
                th->first_ns = rel;
        th->last_ns = rel;
        th->samples++;
        th->dirty = true;
        if (!th->task_of)
                w->samples_total++;

        int rc = 0;
        maybe_flush_soon(w, t_ns, &rc);
        return rc;
}

/* ------------------------------------------------------------------ */
/* Flush                                                               */
/* ------------------------------------------------------------------ */

static int bind_text_or_null(sqlite3_stmt *st, int i, const char *s)
{
        return s ? sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

static int bind_int_or_null(sqlite3_stmt *st, int i, int64_t v, bool known)
{
        return known ? sqlite3_bind_int64(st, i, v) : sqlite3_bind_null(st, i);
}

/* Step a bound statement to completion and reset it. Returns a SQLite code. */
static int run(sqlite3_stmt *st)
{
        int rc = sqlite3_step(st);
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int write_chunk(struct trace_writer *w, uint32_t thread, const struct chunk_encoder *e,
                       const struct pf_buf *data)
{
        sqlite3_stmt *st = w->stmt[ST_CHUNK];
        sqlite3_bind_int64(st, 1, w->threads[thread].file_ref);
        sqlite3_bind_int64(st, 2, e->first_ns);
        sqlite3_bind_int64(st, 3, e->last_ns);
        sqlite3_bind_int64(st, 4, e->count);
        sqlite3_bind_blob64(st, 5, data->data, data->len, SQLITE_STATIC);
        return run(st);
}

/* A canonical decimal integer ("-12", not "012" or "+1"): stored as INTEGER. */
static bool canonical_int(const char *s, int64_t *v)
{
        char buf[32];
        char *end;
        if (!s || !*s || strlen(s) >= sizeof(buf))
                return false;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (errno || *end)
                return false;
        snprintf(buf, sizeof(buf), "%lld", x);
        if (strcmp(buf, s))
                return false;
        *v = x;
        return true;
}

static int write_recording(struct trace_writer *w, uint32_t id, const struct wrecording *rec)
{
        sqlite3_stmt *st = w->stmt[ST_RECORDING];
        sqlite3_bind_int64(st, 1, id);
        bind_text_or_null(st, 2, rec->file);
        bind_text_or_null(st, 3, rec->host);
        bind_int_or_null(st, 4, rec->start_wall_ns, rec->start_wall_ns != -1);
        bind_int_or_null(st, 5, rec->duration_ns, rec->duration_ns >= 0);
        sqlite3_bind_int64(st, 6, rec->offset_ns);
        sqlite3_bind_int64(st, 7, (int64_t)rec->samples);
        int rc = run(st);
        st = w->stmt[ST_RECORDING_META];
        for (size_t k = 0; rc == SQLITE_OK && k < rec->n_meta; k++) {
                int64_t v;
                sqlite3_bind_int64(st, 1, id);
                sqlite3_bind_text(st, 2, rec->meta[k].key, -1, SQLITE_STATIC);
                if (canonical_int(rec->meta[k].value, &v))
                        sqlite3_bind_int64(st, 3, v);
                else
                        bind_text_or_null(st, 3, rec->meta[k].value);
                rc = run(st);
        }
        return rc;
}

/* Write everything not yet committed. Inside a transaction; returns a SQLite code. */
static int write_pending(struct trace_writer *w)
{
        int rc = SQLITE_OK;
        sqlite3_stmt *st;

        st = w->stmt[ST_STRING];
        for (uint32_t i = w->committed_strings + 1; rc == SQLITE_OK && i <= w->n_strings; i++) {
                sqlite3_bind_int64(st, 1, i);
                sqlite3_bind_text64(st, 2, (const char *)w->arena.data + w->strings[i].off,
                                    w->strings[i].len, SQLITE_STATIC, SQLITE_UTF8);
                rc = run(st);
        }
        st = w->stmt[ST_SOURCE];
        for (size_t i = w->committed_sources; rc == SQLITE_OK && i < w->n_sources; i++) {
                const struct wsource *src = &w->sources[i];
                sqlite3_bind_int64(st, 1, src->file);
                sqlite3_bind_int64(st, 2, (int64_t)src->size);
                bind_int_or_null(st, 3, src->mtime_ns, src->mtime_ns >= 0);
                sqlite3_bind_int64(st, 4, src->encoding);
                sqlite3_bind_blob64(st, 5, src->data, src->stored, SQLITE_STATIC);
                rc = run(st);
        }
        st = w->stmt[ST_FRAME];
        for (uint32_t i = w->committed_frames + 1; rc == SQLITE_OK && i <= w->n_frames; i++) {
                const struct wframe *f = &w->frames[i];
                sqlite3_bind_int64(st, 1, i);
                sqlite3_bind_int64(st, 2, f->function);
                bind_int_or_null(st, 3, f->qualname, f->qualname != 0);
                sqlite3_bind_int64(st, 4, f->file);
                bind_int_or_null(st, 5, f->line, f->line >= 0);
                bind_int_or_null(st, 6, f->first_line, f->first_line >= 0);
                sqlite3_bind_int64(st, 7, f->kind);
                bind_int_or_null(st, 8, f->module, f->module != 0);
                bind_int_or_null(st, 9, (int64_t)f->offset, f->module != 0);
                rc = run(st);
        }
        st = w->stmt[ST_STACK];
        for (uint32_t i = w->committed_stacks; rc == SQLITE_OK && i < w->n_stacks; i++) {
                sqlite3_bind_int64(st, 1, i);
                sqlite3_bind_int64(st, 2, w->stacks[i].parent);
                sqlite3_bind_int64(st, 3, w->stacks[i].frame);
                sqlite3_bind_int64(st, 4, w->stacks[i].depth);
                rc = run(st);
        }
        /*
         * Refs in this file for the streams written to it the first time, in
         * order; a task's thread is given one (and its row written) when the
         * task comes, if it has none yet (with slots reused, its writer ref
         * may be higher than the task's).
         */
        for (uint32_t i = 1; i <= w->n_threads; i++) {
                struct wthread *t = &w->threads[i];
                if (!t->dirty || t->file_ref)
                        continue;
                struct wthread *of = t->task_of ? &w->threads[t->task_of] : NULL;
                if (of && !of->file_ref) {
                        of->file_ref = ++w->n_file_threads;
                        of->dirty = true;
                }
                t->file_ref = ++w->n_file_threads;
                /* Its process is in the file too (a rotated file has only the live ones). */
                struct wprocess *p = find_process(w, t->pid);
                if (p && !p->in_file)
                        p->dirty = true;
        }
        st = w->stmt[ST_PROCESS];
        for (size_t i = 0; rc == SQLITE_OK && i < w->n_processes; i++) {
                const struct wprocess *p = &w->processes[i];
                if (!p->dirty)
                        continue;
                sqlite3_bind_int64(st, 1, p->pid);
                bind_text_or_null(st, 2, p->cmdline);
                bind_text_or_null(st, 3, p->python_version);
                bind_text_or_null(st, 4, p->python_build);
                bind_int_or_null(st, 5, p->exit_status, p->ended && p->exit_status >= 0);
                bind_int_or_null(st, 6, p->end_ns, p->ended);
                bind_int_or_null(st, 7, p->recording, p->recording != 0);
                bind_int_or_null(st, 8, p->source_pid, p->source_pid != 0);
                rc = run(st);
        }
        for (size_t i = 0; rc == SQLITE_OK && i < w->n_recordings; i++)
                if (w->recordings[i].dirty)
                        rc = write_recording(w, (uint32_t)i + 1, &w->recordings[i]);
        st = w->stmt[ST_THREAD];
        for (uint32_t i = 1; rc == SQLITE_OK && i <= w->n_threads; i++) {
                const struct wthread *t = &w->threads[i];
                if (!t->dirty)
                        continue;
                sqlite3_bind_int64(st, 1, t->file_ref);
                sqlite3_bind_int64(st, 2, t->pid);
                bind_int_or_null(st, 3, t->tid, t->tid >= 0);
                bind_int_or_null(st, 4, (int64_t)t->python_thread_id, t->python_thread_id != 0);
                bind_text_or_null(st, 5, t->name);
                bind_int_or_null(st, 6, t->first_ns, t->samples > 0);
                bind_int_or_null(st, 7, t->last_ns, t->samples > 0);
                sqlite3_bind_int64(st, 8, (int64_t)t->samples);
                bind_int_or_null(st, 9, t->task_of ? w->threads[t->task_of].file_ref : 0,
                                 t->task_of != 0);
                bind_int_or_null(st, 10, (int64_t)t->task_addr, t->task_of != 0);
                rc = run(st);
        }
        for (size_t i = 0; rc == SQLITE_OK && i < w->n_sealed; i++)
                rc = write_chunk(w, w->sealed[i].thread, &w->sealed[i].enc, &w->sealed[i].data);
        for (uint32_t i = 1; rc == SQLITE_OK && i <= w->n_threads; i++)
                if (w->threads[i].enc.count)
                        rc = write_chunk(w, i, &w->threads[i].enc, &w->threads[i].buf);
        /* Ascending stack ids: the B-tree is walked in order. */
        st = w->stmt[ST_SCOUNT];
        for (uint32_t word = 0; rc == SQLITE_OK && word < (w->n_stacks + 63) / 64; word++) {
                for (uint64_t bits = w->stack_dirty[word]; rc == SQLITE_OK && bits;
                     bits &= bits - 1) {
                        uint32_t stack = word * 64 + (uint32_t)__builtin_ctzll(bits);
                        for (unsigned state = 0; rc == SQLITE_OK && state <= TRACE_STATE_MASK;
                             state++) {
                                uint64_t n = w->stack_counts[stack].n[state];
                                if (!n)
                                        continue;
                                sqlite3_bind_int64(st, 1, stack);
                                sqlite3_bind_int64(st, 2, state);
                                sqlite3_bind_int64(st, 3, (int64_t)n);
                                rc = run(st);
                        }
                }
        }
        st = w->stmt[ST_ERRORS];
        for (size_t i = 0; rc == SQLITE_OK && i < w->n_errors; i++) {
                const struct werrors *e = &w->errors[i];
                for (int k = 0; rc == SQLITE_OK && e->dirty && k < TRACE_ERROR_KIND_COUNT; k++) {
                        if (!e->n[k])
                                continue;
                        sqlite3_bind_int64(st, 1, e->pid);
                        sqlite3_bind_int64(st, 2, k);
                        sqlite3_bind_int64(st, 3, (int64_t)e->n[k]);
                        rc = run(st);
                }
        }
        st = w->stmt[ST_META];
        for (size_t i = 0; rc == SQLITE_OK && i < w->n_meta; i++) {
                const struct wmeta *m = &w->meta[i];
                if (!m->dirty)
                        continue;
                sqlite3_bind_text(st, 1, m->key, -1, SQLITE_STATIC);
                if (m->text)
                        sqlite3_bind_text(st, 2, m->text, -1, SQLITE_STATIC);
                else
                        sqlite3_bind_int64(st, 2, m->num);
                rc = run(st);
        }
        return rc;
}

/* After COMMIT: everything written is now on disk. Cannot fail. */
static void mark_committed(struct trace_writer *w)
{
        w->committed_strings = w->n_strings;
        w->committed_frames = w->n_frames;
        w->committed_stacks = w->n_stacks;
        for (size_t i = w->committed_sources; i < w->n_sources; i++) {
                free(w->sources[i].data);
                w->sources[i].data = NULL;
        }
        w->committed_sources = w->n_sources;
        for (size_t i = 0; i < w->n_processes; i++) {
                struct wprocess *p = &w->processes[i];
                p->in_file |= p->dirty;
                p->dirty = false;
        }
        w->committed_file_threads = w->n_file_threads;
        for (uint32_t i = 1; i <= w->n_threads; i++) {
                struct wthread *t = &w->threads[i];
                t->dirty = false;
                /*
                 * Keep the buffer's memory for the next chunk, unless the
                 * thread had no sample since the last flush: one gone (a
                 * program making a thread per request makes thousands).
                 */
                if (t->enc.count)
                        t->buf.len = 0;
                else
                        pf_buf_free(&t->buf);
                memset(&t->enc, 0, sizeof(t->enc));
        }
        for (size_t i = 0; i < w->n_sealed; i++)
                pf_buf_free(&w->sealed[i].data);
        w->n_sealed = 0;
        memset(w->stack_dirty, 0, ((size_t)w->cap_stack_counts + 63) / 64 * sizeof(uint64_t));
        for (size_t i = 0; i < w->n_errors; i++)
                w->errors[i].dirty = false;
        for (size_t i = 0; i < w->n_meta; i++)
                w->meta[i].dirty = false;
        for (size_t i = 0; i < w->n_recordings; i++)
                w->recordings[i].dirty = false;
        forget_ended(w);
}

/*
 * Copy every stored source text of the database `from` into w's (a rotation:
 * the texts were freed once committed, the previous file holds them).
 * Inside w's transaction; returns a SQLite code.
 */
static int copy_sources(struct trace_writer *w, sqlite3 *from)
{
        sqlite3_stmt *q;
        int rc = sqlite3_prepare_v2(
            from, "SELECT file, size, mtime_ns, encoding, data FROM sources", -1, &q, NULL);
        if (rc != SQLITE_OK)
                return rc;
        sqlite3_stmt *st = w->stmt[ST_SOURCE];
        while (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
                for (int i = 0; i < 5; i++)
                        sqlite3_bind_value(st, i + 1, sqlite3_column_value(q, i));
                rc = run(st);
        }
        sqlite3_finalize(q);
        return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* trace_writer_flush(), copying the sources of `sources_from` first when not NULL. */
static int flush(struct trace_writer *w, sqlite3 *sources_from)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        w->last_flush_mono_ns = pf_now_mono_ns();
        if ((rc = set_meta(w, TRACE_META_SAMPLES, NULL, (int64_t)w->samples_total)) < 0 ||
            (rc = set_meta(w, TRACE_META_ERRORS, NULL, (int64_t)w->errors_total)) < 0)
                return rc;
        if (w->task_samples_total &&
            (rc = set_meta(w, TRACE_META_TASK_SAMPLES, NULL, (int64_t)w->task_samples_total)) < 0)
                return rc;
        int src = sqlite3_exec(w->db, "BEGIN", NULL, NULL, NULL);
        if (src != SQLITE_OK)
                return fail_sqlite(w, src, "cannot start writing the trace");
        src = sources_from ? copy_sources(w, sources_from) : SQLITE_OK;
        if (src == SQLITE_OK)
                src = write_pending(w);
        if (src == SQLITE_OK)
                src = sqlite3_exec(w->db, "COMMIT", NULL, NULL, NULL);
        if (src != SQLITE_OK) {
                rc = fail_sqlite(w, src, "cannot write the trace");
                sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
                /* The refs given in the file by this write are not in it. */
                for (uint32_t i = 1; i <= w->n_threads; i++)
                        if (w->threads[i].file_ref > w->committed_file_threads)
                                w->threads[i].file_ref = 0;
                w->n_file_threads = w->committed_file_threads;
                return rc;
        }
        mark_committed(w);
        return 0;
}

TRACE_API int trace_writer_flush(struct trace_writer *w)
{
        return flush(w, NULL);
}

/* ------------------------------------------------------------------ */
/* Create, finalize, free                                              */
/* ------------------------------------------------------------------ */

TRACE_API const char *trace_writer_errmsg(const struct trace_writer *w)
{
        return w ? w->errmsg : "no writer";
}

TRACE_API void trace_writer_set_flush_interval(struct trace_writer *w, int64_t interval_ns)
{
        w->flush_interval_ns = interval_ns;
        w->next_check_sample_ns = INT64_MIN;
}

void trace_writer_set_chunk_max(struct trace_writer *w, uint32_t samples)
{
        w->chunk_max = samples ? samples : 1;
}

/* ------------------------------------------------------------------ */
/* Merging (the hooks merge.c uses)                                    */
/* ------------------------------------------------------------------ */

int trace_writer_fail(struct trace_writer *w, int status, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->errmsg, sizeof(w->errmsg), fmt, ap);
        va_end(ap);
        return status;
}

int64_t trace_writer_origin_ns(const struct trace_writer *w)
{
        return w->start_mono_ns;
}

bool trace_writer_has_process(const struct trace_writer *w, int32_t pid)
{
        for (size_t i = 0; i < w->n_processes; i++)
                if (w->processes[i].pid == pid)
                        return true;
        return false;
}

int trace_writer_set_process_origin(struct trace_writer *w, int32_t pid, uint32_t recording,
                                    int32_t source_pid)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        struct wprocess *p = find_process(w, pid);
        if (!p)
                return fail(w, TRACE_ERR_ARG, "process %d was not added", (int)pid);
        if (recording == 0 || recording > w->n_recordings || source_pid <= 0)
                return fail(w, TRACE_ERR_ARG, "unknown recording %u or bad pid %d", recording,
                            (int)source_pid);
        p->recording = recording;
        p->source_pid = source_pid;
        p->dirty = true;
        return 0;
}

int trace_writer_new_recording(struct trace_writer *w, const struct trace_recording *desc,
                               uint32_t *id)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        if (w->n_recordings >= MAX_IDS)
                return fail(w, TRACE_ERR_ARG, "too many recordings");
        if (grow_array((void **)&w->recordings, &w->cap_recordings, sizeof(*w->recordings),
                       w->n_recordings + 1) < 0)
                return fail_nomem(w);
        struct wrecording rec = {.start_wall_ns = desc->start_wall_ns,
                                 .duration_ns = desc->duration_ns,
                                 .offset_ns = desc->offset_ns,
                                 .samples = desc->samples,
                                 .dirty = true};
        rec.file = dup_or_null(desc->file);
        rec.host = dup_or_null(desc->host);
        if ((desc->file && !rec.file) || (desc->host && !rec.host)) {
                free(rec.file);
                free(rec.host);
                return fail_nomem(w);
        }
        w->recordings[w->n_recordings++] = rec;
        *id = (uint32_t)w->n_recordings;
        return 0;
}

int trace_writer_add_recording_meta(struct trace_writer *w, uint32_t id, const char *key,
                                    const char *value)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        if (id == 0 || id > w->n_recordings || !key)
                return fail(w, TRACE_ERR_ARG, "unknown recording %u or no key", id);
        struct wrecording *rec = &w->recordings[id - 1];
        if (grow_array((void **)&rec->meta, &rec->cap_meta, sizeof(*rec->meta), rec->n_meta + 1) <
            0)
                return fail_nomem(w);
        char *k = strdup(key), *v = dup_or_null(value);
        if (!k || (value && !v)) {
                free(k);
                free(v);
                return fail_nomem(w);
        }
        rec->meta[rec->n_meta++] = (struct wmeta_pair){k, v};
        rec->dirty = true;
        return 0;
}

/* Recording `rec`'s meta value for `key`, or NULL. */
static const char *recording_meta(const struct wrecording *rec, const char *key)
{
        for (size_t k = 0; k < rec->n_meta; k++)
                if (!strcmp(rec->meta[k].key, key))
                        return rec->meta[k].value;
        return NULL;
}

/*
 * The distinct values of `key` over the recordings, in order, joined by
 * ", " into a malloc'ed string; NULL when no recording has the key (or out
 * of memory: *nomem). *distinct is the number of distinct values.
 */
static char *joined_meta(const struct trace_writer *w, const char *key, size_t *distinct,
                         bool *nomem)
{
        struct pf_buf b = {0};
        *distinct = 0;
        for (size_t i = 0; i < w->n_recordings; i++) {
                const char *v = recording_meta(&w->recordings[i], key);
                bool seen = !v;
                for (size_t j = 0; j < i && !seen; j++) {
                        const char *u = recording_meta(&w->recordings[j], key);
                        seen = u && !strcmp(u, v);
                }
                if (seen)
                        continue;
                if ((*distinct && pf_buf_append(&b, ", ", 2) < 0) ||
                    pf_buf_append(&b, v, strlen(v)) < 0) {
                        *nomem = true;
                        break;
                }
                ++*distinct;
        }
        if (*nomem || !*distinct || pf_buf_append(&b, "", 1) < 0) {
                *nomem |= *distinct > 0;
                pf_buf_free(&b);
                return NULL;
        }
        return (char *)b.data;
}

/*
 * A merged trace's times and summary meta, from its recordings: start at
 * the earliest wall-clock start, end at the latest end on its time line.
 * Sets *end_mono and *end_wall for finalize.
 */
static int merged_meta(struct trace_writer *w, int64_t *end_mono, int64_t *end_wall)
{
        static const char *const joined_keys[] = {
            TRACE_META_HOST,           TRACE_META_KERNEL,       TRACE_META_MODE,
            TRACE_META_PYTHON_VERSION, TRACE_META_PYTHON_BUILD, TRACE_META_CMDLINE,
        };
        int rc;
        bool nomem = false;
        for (size_t i = 0; i < sizeof(joined_keys) / sizeof(joined_keys[0]); i++) {
                size_t n;
                char *v = joined_meta(w, joined_keys[i], &n, &nomem);
                if (nomem)
                        return fail_nomem(w);
                rc = v ? set_meta(w, joined_keys[i], v, 0) : 0;
                free(v);
                if (rc < 0)
                        return rc;
        }
        size_t n_rates;
        char *rate = joined_meta(w, TRACE_META_RATE_HZ, &n_rates, &nomem);
        if (nomem)
                return fail_nomem(w);
        bool every = true;
        for (size_t i = 0; i < w->n_recordings; i++)
                every &= recording_meta(&w->recordings[i], TRACE_META_RATE_HZ) != NULL;
        rc = rate && n_rates == 1 && every ? set_meta(w, TRACE_META_RATE_HZ, rate, 0) : 0;
        free(rate);
        if (rc < 0)
                return rc;

        struct pf_buf pids = {0};
        for (size_t i = 0; i < w->n_processes && !nomem; i++) {
                char num[16];
                snprintf(num, sizeof(num), "%s%d", i ? " " : "", (int)w->processes[i].pid);
                nomem = pf_buf_append(&pids, num, strlen(num)) < 0;
        }
        if (nomem || pf_buf_append(&pids, "", 1) < 0) {
                pf_buf_free(&pids);
                return fail_nomem(w);
        }
        rc = set_meta(w, TRACE_META_PIDS, (const char *)pids.data, 0);
        pf_buf_free(&pids);
        if (rc < 0)
                return rc;

        int64_t start_wall = INT64_MAX, duration = 0;
        for (size_t i = 0; i < w->n_recordings; i++) {
                const struct wrecording *rec = &w->recordings[i];
                if (rec->start_wall_ns != -1 && rec->start_wall_ns - rec->offset_ns < start_wall)
                        start_wall = rec->start_wall_ns - rec->offset_ns;
                if (rec->duration_ns >= 0 && rec->offset_ns + rec->duration_ns > duration)
                        duration = rec->offset_ns + rec->duration_ns;
        }
        for (uint32_t i = 1; i <= w->n_threads; i++)
                if (w->threads[i].samples && w->threads[i].last_ns > duration)
                        duration = w->threads[i].last_ns;
        if (start_wall == INT64_MAX)
                start_wall = *end_wall - duration;
        *end_mono = w->start_mono_ns + duration;
        *end_wall = start_wall + duration;
        return set_meta(w, TRACE_META_START_WALL_NS, NULL, start_wall);
}

/* Create the file itself, refusing to replace one unless forced. */
static int create_file(struct trace_writer *w, const char *path, unsigned flags)
{
        char journal[4096];
        if (snprintf(journal, sizeof(journal), "%s-journal", path) >= (int)sizeof(journal))
                return fail(w, TRACE_ERR_ARG, "path too long: %s", path);
        if ((flags & TRACE_CREATE_FORCE) && unlink(path) < 0 && errno != ENOENT)
                return fail(w, TRACE_ERR_IO, "cannot replace %s: %s", path, strerror(errno));
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST)
                return fail(w, TRACE_ERR_EXISTS, "%s already exists; use --force to overwrite it",
                            path);
        if (fd < 0)
                return fail(w, TRACE_ERR_IO, "cannot create %s: %s", path, strerror(errno));
        struct stat st;
        if (fstat(fd, &st) == 0) {
                w->file_dev = st.st_dev;
                w->file_ino = st.st_ino;
        }
        close(fd);
        /*
         * A journal left by an earlier trace of the same name would be
         * "rolled back" into the new file by SQLite: remove it.
         */
        if (unlink(journal) < 0 && errno != ENOENT) {
                int err = errno;
                unlink(path);
                return fail(w, TRACE_ERR_IO, "cannot remove the stale journal %s: %s", journal,
                            strerror(err));
        }
        return 0;
}

/* Check that the embedded schema stamped the file as this library expects. */
static int check_stamp(struct trace_writer *w)
{
        sqlite3_stmt *st;
        int64_t app = -1, version = -1;
        if (sqlite3_prepare_v2(w->db, "PRAGMA application_id", -1, &st, NULL) == SQLITE_OK) {
                if (sqlite3_step(st) == SQLITE_ROW)
                        app = sqlite3_column_int64(st, 0);
                sqlite3_finalize(st);
        }
        if (sqlite3_prepare_v2(w->db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK) {
                if (sqlite3_step(st) == SQLITE_ROW)
                        version = sqlite3_column_int64(st, 0);
                sqlite3_finalize(st);
        }
        if (app != (int64_t)TRACE_APPLICATION_ID || version != TRACE_FORMAT_VERSION)
                return fail(w, TRACE_ERR_STATE,
                            "internal error: the embedded schema stamps application_id %lld "
                            "and user_version %lld, expected %lld and %d",
                            (long long)app, (long long)version, (long long)TRACE_APPLICATION_ID,
                            TRACE_FORMAT_VERSION);
        return 0;
}

static int initial_meta(struct trace_writer *w)
{
        struct utsname u;
        char kernel[4 * sizeof(u.release) + 4];
        int rc;
        if (uname(&u) < 0)
                memset(&u, 0, sizeof(u));
        snprintf(kernel, sizeof(kernel), "%s %s %s %s", u.sysname, u.release, u.version, u.machine);
        if ((rc = set_meta(w, TRACE_META_FORMAT_VERSION, NULL, TRACE_FORMAT_VERSION)) < 0 ||
            (rc = set_meta(w, TRACE_META_TOOL_VERSION, pf_version(), 0)) < 0 ||
            (rc = set_meta(w, TRACE_META_HOST, u.nodename, 0)) < 0 ||
            (rc = set_meta(w, TRACE_META_KERNEL, kernel, 0)) < 0 ||
            (rc = set_meta(w, TRACE_META_START_WALL_NS, NULL, pf_now_wall_ns())) < 0 ||
            (rc = set_meta(w, TRACE_META_START_MONO_NS, NULL, w->start_mono_ns)) < 0)
                return rc;
        return 0;
}

char *trace_sqlite_uri(const char *path, const char *query)
{
        static const char hex[] = "0123456789ABCDEF";
        size_t n = strlen(path), q = query ? strlen(query) + 1 : 0;
        char *uri = malloc(7 + 3 * n + q + 1);
        if (!uri)
                return NULL;
        /* "file:" + "//" (an empty authority) before an absolute path, so that "//x" is a path. */
        char *o = uri + sprintf(uri, "file:%s", path[0] == '/' ? "//" : "");
        for (const unsigned char *c = (const unsigned char *)path; *c; c++) {
                if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                    (*c >= '0' && *c <= '9') || strchr("/._-~", *c)) {
                        *o++ = (char)*c;
                } else {
                        *o++ = '%';
                        *o++ = hex[*c >> 4];
                        *o++ = hex[*c & 15];
                }
        }
        if (query)
                o += sprintf(o, "?%s", query);
        *o = '\0';
        return uri;
}

/*
 * Open the file create_file() made, and only that. The recorder often runs
 * as root and may write where another user can change what a path names:
 * the file was created with O_EXCL (never through a symbolic link), SQLite
 * opens it and its journal without following one (SQLITE_OPEN_NOFOLLOW; the
 * journal always), and a file swapped in between is refused.
 */
static int open_database(struct trace_writer *w, const char *path)
{
        /*
         * Opened as a URI (the path encoded: a name is never read as one),
         * so that a join can ATTACH the files it reads read-only.
         */
        char *uri = trace_sqlite_uri(path, NULL);
        if (!uri)
                return fail_nomem(w);
        int src = sqlite3_open_v2(
            uri, &w->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_URI, NULL);
        free(uri);
        if (src != SQLITE_OK)
                return fail_sqlite(w, src, "cannot open the new trace");
        struct stat st;
        if (lstat(path, &st) < 0 || st.st_dev != w->file_dev || st.st_ino != w->file_ino)
                return fail(w, TRACE_ERR_IO,
                            "%s was replaced after it was created (by another user of its "
                            "directory?): not writing into it",
                            path);
        /* Wait for readers of a live trace rather than failing a flush at once. */
        sqlite3_busy_timeout(w->db, 2000);
        src = sqlite3_exec(w->db,
                           "PRAGMA journal_mode = DELETE; PRAGMA synchronous = OFF;"
                           "PRAGMA cache_size = -16384;",
                           NULL, NULL, NULL);
        if (src != SQLITE_OK)
                return fail_sqlite(w, src, "cannot configure the new trace");
        char *err = NULL;
        src = sqlite3_exec(w->db, trace_schema_sql, NULL, NULL, &err);
        if (src != SQLITE_OK && (src & 0xff) == SQLITE_CANTOPEN) {
                sqlite3_free(err);
                return fail_sqlite(w, src, "cannot create the trace tables");
        }
        if (src != SQLITE_OK) {
                int rc =
                    fail(w,
                         trace_status_from_sqlite(src) == TRACE_ERR_NOMEM ? TRACE_ERR_NOMEM
                                                                          : TRACE_ERR_IO,
                         "cannot create the trace tables: %s", err ? err : sqlite3_errstr(src));
                sqlite3_free(err);
                return rc;
        }
        int rc = check_stamp(w);
        if (rc < 0)
                return rc;
        for (int i = 0; i < ST_COUNT; i++) {
                src = sqlite3_prepare_v3(w->db, statement_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                         &w->stmt[i], NULL);
                if (src != SQLITE_OK)
                        return fail_sqlite(w, src, "cannot prepare the trace writer");
        }
        return 0;
}

static void close_database(struct trace_writer *w)
{
        for (int i = 0; i < ST_COUNT; i++) {
                sqlite3_finalize(w->stmt[i]);
                w->stmt[i] = NULL;
        }
        sqlite3_close(w->db);
        w->db = NULL;
}

TRACE_API int trace_writer_create(const char *path, unsigned flags, struct trace_writer **out)
{
        if (!out)
                return TRACE_ERR_ARG;
        struct trace_writer *w = calloc(1, sizeof(*w));
        if (!w)
                return TRACE_ERR_NOMEM;
        w->state = W_FAILED;
        w->start_mono_ns = pf_now_mono_ns();
        w->last_flush_mono_ns = w->start_mono_ns;
        w->flush_interval_ns = TRACE_WRITER_FLUSH_INTERVAL_NS;
        w->next_check_sample_ns = w->start_mono_ns + TRACE_WRITER_FLUSH_INTERVAL_NS;
        w->chunk_max = TRACE_WRITER_CHUNK_MAX;
        int rc;
        if (!path || !*path) {
                rc = fail(w, TRACE_ERR_ARG, "no output path given");
                goto out;
        }
        if (flags & ~TRACE_CREATE_FORCE) {
                rc = fail(w, TRACE_ERR_ARG, "unknown flags 0x%x", flags);
                goto out;
        }
        if ((rc = create_file(w, path, flags)) < 0)
                goto out;
        /* Stack 0, the empty stack, exists from the start (the schema inserts it). */
        /* A non-NULL arena even before the first string: "" is a string too. */
        if (grow_table((void **)&w->stacks, &w->cap_stacks, sizeof(*w->stacks), 1) < 0 ||
            grow_stack_counts(w, 1) < 0 || pf_buf_reserve(&w->arena, 4096) < 0) {
                rc = fail_nomem(w);
                goto fail_file;
        }
        w->stacks[0] = (struct wstack){0, 0, 0};
        w->n_stacks = w->committed_stacks = 1;
        if ((rc = open_database(w, path)) < 0 || (rc = initial_meta(w)) < 0)
                goto fail_file;
        w->state = W_OPEN;
        if ((rc = trace_writer_flush(w)) < 0) {
                w->state = W_FAILED;
                goto fail_file;
        }
        goto out;
fail_file:
        close_database(w);
        unlink(path);
out:
        *out = w;
        return rc;
}

TRACE_API int trace_writer_finalize(struct trace_writer *w)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        int64_t end_mono = pf_now_mono_ns(), end_wall = pf_now_wall_ns();
        if (w->n_recordings && (rc = merged_meta(w, &end_mono, &end_wall)) < 0)
                return rc;
        if ((rc = set_meta(w, TRACE_META_END_WALL_NS, NULL, end_wall)) < 0 ||
            (rc = set_meta(w, TRACE_META_END_MONO_NS, NULL, end_mono)) < 0 ||
            (rc = set_meta(w, TRACE_META_DURATION_NS, NULL, end_mono - w->start_mono_ns)) < 0)
                return rc;
        if ((rc = trace_writer_flush(w)) < 0)
                return rc;
        for (int i = 0; i < ST_COUNT; i++) {
                sqlite3_finalize(w->stmt[i]);
                w->stmt[i] = NULL;
        }
        int src = sqlite3_close(w->db);
        if (src != SQLITE_OK)
                return fail_sqlite(w, src, "cannot close the trace");
        w->db = NULL;
        w->state = W_FINALIZED;
        return 0;
}

struct sqlite3 *trace_writer_db(struct trace_writer *w)
{
        return w->state == W_OPEN ? w->db : NULL;
}

int trace_writer_close_written(struct trace_writer *w)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        for (int i = 0; i < ST_COUNT; i++) {
                sqlite3_finalize(w->stmt[i]);
                w->stmt[i] = NULL;
        }
        int src = sqlite3_close(w->db);
        if (src != SQLITE_OK)
                return fail_sqlite(w, src, "cannot close the trace");
        w->db = NULL;
        w->state = W_FINALIZED;
        return 0;
}

/* Forget a meta key (a rotation's new file has no end yet). */
static void drop_meta(struct trace_writer *w, const char *key)
{
        for (size_t i = 0; i < w->n_meta; i++) {
                if (strcmp(w->meta[i].key, key))
                        continue;
                free(w->meta[i].key);
                free(w->meta[i].text);
                w->meta[i] = w->meta[--w->n_meta];
                return;
        }
}

/* Does a stream (thread or task) of process `pid` remain, ended or not? */
static bool process_has_stream(const struct trace_writer *w, int32_t pid)
{
        for (uint32_t i = 1; i <= w->n_threads; i++)
                if (!w->threads[i].free && w->threads[i].pid == pid)
                        return true;
        return false;
}

/*
 * After a rotation: what the new file must hold is everything interned so
 * far (so that every id stays valid) and, counted afresh, the samples,
 * errors, stack counts and thread spans from the cut on; of the threads
 * (and tasks' streams), those with samples from the cut on; of the
 * processes, those alive.
 */
static void restart_counts(struct trace_writer *w, int64_t shift_ns)
{
        w->committed_strings = 0;
        w->committed_frames = 0;
        w->committed_stacks = 1; /* stack 0 is in the schema */
        /*
         * The processes alive go on in the new file; the ended ones stay in
         * theirs, and are forgotten once no stream of theirs is left (a
         * recorder following a service for months sees processes without
         * end: it keeps the live ones).
         */
        size_t kept = 0;
        for (size_t i = 0; i < w->n_processes; i++) {
                struct wprocess *p = &w->processes[i];
                if (p->ended && !process_has_stream(w, p->pid)) {
                        free(p->cmdline);
                        free(p->python_version);
                        free(p->python_build);
                        continue;
                }
                if (p->ended)
                        p->end_ns -= shift_ns; /* before the new start: negative */
                p->in_file = false;
                p->dirty = !p->ended;
                w->processes[kept++] = *p;
        }
        w->n_processes = kept;
        /* A stream is in the new file once it has samples there (or a new name). */
        for (uint32_t i = 1; i <= w->n_threads; i++) {
                struct wthread *t = &w->threads[i];
                t->first_ns = t->last_ns = -1;
                t->samples = 0;
                t->dirty = false;
                t->file_ref = 0;
        }
        w->n_file_threads = w->committed_file_threads = 0;
        memset(w->stack_counts, 0, (size_t)w->cap_stack_counts * sizeof(*w->stack_counts));
        for (size_t i = 0; i < w->n_errors; i++) {
                memset(w->errors[i].n, 0, sizeof(w->errors[i].n));
                w->errors[i].dirty = false;
        }
        w->errors_total = 0;
        w->samples_total = 0;
        w->task_samples_total = 0;
        for (size_t i = 0; i < w->n_meta; i++)
                w->meta[i].dirty = true;
}

TRACE_API int trace_writer_rotate(struct trace_writer *w, const char *path, unsigned flags,
                                  int64_t cut_mono_ns)
{
        int rc = check_open(w);
        if (rc < 0)
                return rc;
        if (w->n_recordings)
                return fail(w, TRACE_ERR_STATE, "a merged trace cannot be rotated");
        if (!path || !*path)
                return fail(w, TRACE_ERR_ARG, "no path for the next trace");
        if (flags & ~TRACE_CREATE_FORCE)
                return fail(w, TRACE_ERR_ARG, "unknown flags 0x%x", flags);
        int64_t now_mono = pf_now_mono_ns(), now_wall = pf_now_wall_ns();
        if (cut_mono_ns < w->start_mono_ns || cut_mono_ns > now_mono)
                return fail(w, TRACE_ERR_ARG,
                            "the cut (%lld) is not between the trace's start and now",
                            (long long)cut_mono_ns);
        /* Everything before the cut goes to the current file. */
        if ((rc = trace_writer_flush(w)) < 0)
                return rc;
        /*
         * The next file is made before the current one is closed: if it
         * cannot be, the writer goes on in the current file, unharmed.
         */
        struct trace_writer next;
        memset(&next, 0, sizeof(next));
        if ((rc = create_file(&next, path, flags)) < 0 || (rc = open_database(&next, path)) < 0) {
                if (next.db) {
                        close_database(&next);
                        unlink(path);
                }
                return fail(w, rc, "%s", next.errmsg);
        }
        int64_t duration = cut_mono_ns - w->start_mono_ns;
        if ((rc = set_meta(w, TRACE_META_END_WALL_NS, NULL, now_wall - (now_mono - cut_mono_ns))) <
                0 ||
            (rc = set_meta(w, TRACE_META_END_MONO_NS, NULL, cut_mono_ns)) < 0 ||
            (rc = set_meta(w, TRACE_META_DURATION_NS, NULL, duration)) < 0 ||
            (rc = trace_writer_flush(w)) < 0) {
                drop_meta(w, TRACE_META_END_WALL_NS);
                drop_meta(w, TRACE_META_END_MONO_NS);
                drop_meta(w, TRACE_META_DURATION_NS);
                close_database(&next);
                unlink(path);
                return rc;
        }
        /* The current file is finished; from here on the writer writes the next. */
        sqlite3 *prev = w->db;
        for (int i = 0; i < ST_COUNT; i++) {
                sqlite3_finalize(w->stmt[i]);
                w->stmt[i] = next.stmt[i];
        }
        w->db = next.db;
        w->file_dev = next.file_dev;
        w->file_ino = next.file_ino;
        drop_meta(w, TRACE_META_END_WALL_NS);
        drop_meta(w, TRACE_META_END_MONO_NS);
        drop_meta(w, TRACE_META_DURATION_NS);
        restart_counts(w, duration);
        w->start_mono_ns = cut_mono_ns;
        struct wmeta *seg = meta_slot(w, TRACE_META_SEGMENT);
        if (!seg) {
                rc = fail_nomem(w);
                w->state = W_FAILED;
                sqlite3_close(prev);
                return rc;
        }
        if (seg->text) {
                free(seg->text);
                seg->text = NULL;
                seg->num = 0;
        }
        seg->num = (seg->num > 0 ? seg->num : 1) + 1;
        seg->dirty = true;
        if ((rc = set_meta(w, TRACE_META_START_WALL_NS, NULL,
                           now_wall - (now_mono - cut_mono_ns))) < 0 ||
            (rc = set_meta(w, TRACE_META_START_MONO_NS, NULL, cut_mono_ns)) < 0 ||
            (rc = flush(w, prev)) < 0) {
                /* What was not written stays pending, but the sources are in prev only. */
                w->state = W_FAILED;
        }
        sqlite3_close(prev);
        return rc;
}

TRACE_API void trace_writer_free(struct trace_writer *w)
{
        if (!w)
                return;
        close_database(w);
        pf_buf_free(&w->arena);
        free(w->strings);
        idmap_free(&w->string_index);
        free(w->frames);
        idmap_free(&w->frame_index);
        free(w->stacks);
        idmap_free(&w->stack_index);
        for (uint32_t i = 1; i <= w->n_threads; i++) {
                free(w->threads[i].name);
                pf_buf_free(&w->threads[i].buf);
        }
        free(w->threads);
        free(w->free_refs);
        idmap_free(&w->thread_index);
        for (size_t i = 0; i < w->n_sealed; i++)
                pf_buf_free(&w->sealed[i].data);
        free(w->sealed);
        free(w->stack_counts);
        free(w->stack_dirty);
        for (size_t i = 0; i < w->n_processes; i++) {
                free(w->processes[i].cmdline);
                free(w->processes[i].python_version);
                free(w->processes[i].python_build);
        }
        free(w->processes);
        free(w->errors);
        for (size_t i = 0; i < w->n_sources; i++)
                free(w->sources[i].data);
        free(w->sources);
        idmap_free(&w->source_index);
        for (size_t i = 0; i < w->n_recordings; i++) {
                struct wrecording *rec = &w->recordings[i];
                free(rec->file);
                free(rec->host);
                for (size_t k = 0; k < rec->n_meta; k++) {
                        free(rec->meta[k].key);
                        free(rec->meta[k].value);
                }
                free(rec->meta);
        }
        free(w->recordings);
        for (size_t i = 0; i < w->n_meta; i++) {
                free(w->meta[i].key);
                free(w->meta[i].text);
        }
        free(w->meta);
        free(w);
}
