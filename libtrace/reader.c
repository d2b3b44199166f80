/*
 * reader.c - the trace reader used by the report tools.
 *
 * trace_reader_open() classifies the file before trusting it: missing,
 * not SQLite (by the 16-byte magic), not a trace (application_id, tables),
 * too new (user_version), or damaged (SQLite reports corruption, or our own
 * checks fail). It then loads every table except the samples into memory in
 * one read transaction, validating each reference: ids dense, frame strings
 * in range, stack parents below their child (so the tree has no cycles),
 * thread pids known. It also notes the highest sample chunk id of that
 * snapshot: the file may still be growing (a live recording), and later
 * chunks could name stacks we did not load.
 *
 * Merged traces (trace_writer_add_recording) add the recordings and
 * recording_meta tables and two columns of processes; files written before
 * those existed lack them, and are read as one recording described by
 * their meta.
 *
 * Source texts (the sources table, absent from older files) are indexed at
 * open, names and sizes only; a text is read and inflated when asked for,
 * into a buffer of the size the index promised, never more.
 *
 * Samples are never loaded wholesale. trace_reader_foreach_sample() steps
 * through the chunk rows of the snapshot in id order, lets SQL skip the
 * chunks outside the time window, skips chunks of unwanted threads without
 * reading their blobs, and decodes the rest with the bounded decoder of
 * chunk.h. Damage found there is TRACE_ERR_CORRUPT, never a crash.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>
#include <zlib.h>

#include "chunk.h"
#include "pfutil.h"
#include "trace.h"
#include "trace_internal.h"

/* Ids are uint32_t with dense ranges; refuse tables beyond that. */
#define MAX_ROWS (UINT32_MAX - 2u)

struct rframe {
        uint32_t function, qualname, file; /* string ids; qualname 0: none */
        int32_t line, first_line;
        enum trace_frame_kind kind;
        uint32_t module; /* string id; 0: none */
        uint64_t offset;
};

struct rthread {
        int32_t pid;
        int64_t tid;
        uint64_t python_thread_id;
        char *name;
        int64_t first_ns, last_ns;
        uint64_t samples;
        uint32_t task_of; /* an asyncio task's stream: the thread running its loop; 0: a thread */
        uint64_t task_addr;
};

struct rprocess {
        int32_t pid;
        char *cmdline, *python_version, *python_build;
        int exit_status;
        int64_t end_ns;
        uint32_t recording; /* 0: the trace's only recording */
        int32_t source_pid; /* 0: same as pid */
};

struct rrecording {
        char *file, *host;
        int64_t start_wall_ns, duration_ns, offset_ns;
        uint64_t samples;
        char **meta_keys, **meta_values;
        size_t n_meta, cap_meta;
};

struct rsource {
        uint32_t file; /* string id */
        uint64_t size, stored;
        int64_t mtime_ns;
        int encoding;
};

/* sources.encoding (schema/trace.sql); other codes are skipped as unknown. */
enum { SOURCE_PLAIN = 0, SOURCE_ZLIB = 1 };

/* A zlib stream of n bytes of text takes at most about this much (zlib's compressBound). */
#define ZLIB_BOUND(n) ((n) + ((n) >> 12) + ((n) >> 14) + ((n) >> 25) + 13)

struct rerror {
        int32_t pid;
        unsigned kind;
        uint64_t count;
};

struct trace_reader {
        sqlite3 *db;
        char *path;
        char errmsg[512];

        char **meta_keys, **meta_values;
        size_t n_meta;

        char *string_arena;
        const char **strings; /* ids 1..n_strings; entry 0 NULL */
        uint32_t n_strings;

        struct rframe *frames; /* ids 1..n_frames */
        uint32_t n_frames;

        uint32_t *stack_parent, *stack_frame, *stack_depth; /* ids 0..n_stacks-1 */
        uint32_t n_stacks;
        /*
         * trace_reader_set_native_view(): the file's stacks are ids below
         * n_file_stacks, and samples in stack s are reported in canon[s]
         * (NULL: in s), a stack of the view, appended after them when new.
         */
        uint32_t n_file_stacks;
        uint32_t *canon;
        bool native_view_set;
        enum trace_native_view native_view;

        struct rthread *threads; /* refs 1..n_threads */
        uint32_t n_threads;
        uint32_t n_tasks;     /* of them, asyncio tasks' streams */
        enum trace_view view; /* which streams samples are visited of */

        struct rprocess *processes;
        uint32_t n_processes;

        /* Rows of the recordings table: ids 1..n; none for a single recording. */
        struct rrecording *recordings;
        uint32_t n_recordings;

        struct rsource *sources;
        uint32_t n_sources;

        uint64_t errors[TRACE_ERROR_KIND_COUNT];
        struct rerror *error_rows;
        size_t n_error_rows;
        int64_t max_chunk_id;
        uint64_t n_samples;
        bool loaded;      /* open succeeded: the handle is more than a message */
        bool rolled_back; /* what is read is a copy, its hot journal rolled back */
        /* check_readable(): make that copy here and leave it (the set reads it), or NULL */
        const char *keep_copy;

        /*
         * A set (trace_reader_open_set): db is the join, whose chunks have
         * empty blobs; each blob is read from its file, one file open at a
         * time (seg_open, SIZE_MAX: none), as scans go through them in order.
         */
        struct trace_set_file *set_files;
        size_t n_set_files, seg_open;
        char *set_tmp; /* the directory of rolled-back copies of files of the set, if any */
        sqlite3 *seg_db;
        sqlite3_stmt *seg_st;
};

static int fail(struct trace_reader *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct trace_reader *r, int status, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->errmsg, sizeof(r->errmsg), fmt, ap);
        va_end(ap);
        return status;
}

static int fail_nomem(struct trace_reader *r)
{
        return fail(r, TRACE_ERR_NOMEM, "out of memory");
}

static int fail_sqlite(struct trace_reader *r, int rc, const char *doing)
{
        int status = trace_status_from_sqlite(rc);
        if (status == TRACE_ERR_NOMEM)
                return fail_nomem(r);
        if (status == TRACE_ERR_NOT_SQLITE)
                status = TRACE_ERR_CORRUPT; /* the magic was right: the header is damaged */
        if (status == TRACE_ERR_CORRUPT)
                return fail(r, status, "%s: damaged trace (%s) while %s", r->path,
                            sqlite3_errmsg(r->db), doing);
        return fail(r, status, "%s: cannot read the trace while %s: %s", r->path, doing,
                    sqlite3_errmsg(r->db));
}

static int corrupt(struct trace_reader *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int corrupt(struct trace_reader *r, const char *fmt, ...)
{
        char what[384];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        return fail(r, TRACE_ERR_CORRUPT, "%s: damaged trace: %s", r->path, what);
}

static uint32_t be32(const uint8_t *p)
{
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* ------------------------------------------------------------------ */
/* Classifying the file                                                */
/* ------------------------------------------------------------------ */

static const char sqlite_magic[16] = "SQLite format 3";

/*
 * Look at the file itself before SQLite does: SQLite treats a missing or
 * empty file as a new empty database, and its messages for the other cases
 * do not say what the user should do.
 */
static int check_file(struct trace_reader *r)
{
        const char *path = r->path;
        /* O_NONBLOCK: a FIFO given by mistake must not hang us. */
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) {
                if (errno == ENOENT)
                        return fail(r, TRACE_ERR_IO, "%s: no such file", path);
                return fail(r, TRACE_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        }
        struct stat st;
        uint8_t hdr[100];
        ssize_t n = -1;
        int rc = 0;
        if (fstat(fd, &st) < 0) {
                rc = fail(r, TRACE_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
                rc = fail(r, TRACE_ERR_IO, "%s: is a directory, not a trace file", path);
        } else if (!S_ISREG(st.st_mode)) {
                rc = fail(r, TRACE_ERR_IO, "%s: not a regular file, so not a trace file", path);
        } else if (st.st_size == 0) {
                rc = fail(r, TRACE_ERR_NOT_SQLITE,
                          "%s: empty file, not a pyflame trace (did the recorder fail to start?)",
                          path);
        } else {
                do
                        n = pread(fd, hdr, sizeof(hdr), 0);
                while (n < 0 && errno == EINTR);
                if (n < 0)
                        rc = fail(r, TRACE_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
        }
        close(fd);
        if (rc < 0)
                return rc;
        size_t got = (size_t)n;
        size_t cmp = got < sizeof(sqlite_magic) ? got : sizeof(sqlite_magic);
        if (memcmp(hdr, sqlite_magic, cmp) != 0)
                return fail(r, TRACE_ERR_NOT_SQLITE,
                            "%s: not a SQLite database, so not a pyflame trace", path);
        if (got < sizeof(hdr))
                return corrupt(r, "truncated to %zu bytes, inside the database header", got);
        uint32_t app = be32(hdr + 68), version = be32(hdr + 60);
        if (app != TRACE_APPLICATION_ID)
                return fail(r, TRACE_ERR_NOT_TRACE,
                            "%s: a SQLite database but not a pyflame trace (application_id "
                            "0x%08x, expected 0x%08x)",
                            path, app, TRACE_APPLICATION_ID);
        if (version > TRACE_FORMAT_VERSION)
                return fail(r, TRACE_ERR_TOO_NEW,
                            "%s: written by a newer pyflame (format %u, this reads up to %d); "
                            "upgrade pyflame to read it",
                            path, version, TRACE_FORMAT_VERSION);
        return 0;
}

/*
 * Compare the file size with the size its header promises. Only meaningful
 * under SQLite's shared lock: a writer updates the header before it appends
 * the pages. Read through SQLite's own file handle: opening the file again
 * and closing it would drop every POSIX lock this process holds on it,
 * SQLite's shared lock included, and a live recorder could then commit in
 * the middle of our reads (it did: one read of a live trace in a few hundred
 * came out "malformed"). Returns 0 or TRACE_ERR_CORRUPT.
 */
static int check_truncation(struct trace_reader *r)
{
        uint8_t hdr[100];
        sqlite3_file *f = NULL;
        sqlite3_int64 size = 0;
        if (sqlite3_file_control(r->db, "main", SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK || !f ||
            !f->pMethods || f->pMethods->xFileSize(f, &size) != SQLITE_OK ||
            f->pMethods->xRead(f, hdr, sizeof(hdr), 0) != SQLITE_OK)
                return 0; /* let SQLite's own errors speak */
        struct stat st = {.st_size = (off_t)size};
        /* Pages promised by the header (valid when bytes 24 and 92 agree). */
        uint32_t page_size = (uint32_t)hdr[16] << 8 | hdr[17];
        uint64_t pages = be32(hdr + 28);
        if (page_size == 1)
                page_size = 65536;
        if (!memcmp(hdr + 24, hdr + 92, 4) && pages && (uint64_t)st.st_size < pages * page_size)
                return corrupt(r,
                               "truncated: %lld bytes, its header says %llu (an incomplete "
                               "copy, or the disk filled up?)",
                               (long long)st.st_size, (unsigned long long)(pages * page_size));
        return 0;
}

/* Run a single-value integer query. Returns a SQLite code. */
static int query_int(sqlite3 *db, const char *sql, int64_t *v)
{
        sqlite3_stmt *st;
        int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
        if (rc != SQLITE_OK)
                return rc;
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
                *v = sqlite3_column_int64(st, 0);
                rc = SQLITE_OK;
        }
        sqlite3_finalize(st);
        return rc == SQLITE_DONE ? SQLITE_CORRUPT : rc;
}

static const char *const required_tables[] = {
    "meta", "strings", "frames", "stacks", "processes", "threads", "errors", "sample_chunks",
};

/* Inside the read transaction: the stamp again (authoritative now) and the tables. */
static int check_schema(struct trace_reader *r)
{
        int64_t app = 0, version = 0;
        int rc = query_int(r->db, "PRAGMA application_id", &app);
        if (rc == SQLITE_OK)
                rc = query_int(r->db, "PRAGMA user_version", &version);
        if (rc != SQLITE_OK)
                return fail_sqlite(r, rc, "reading the header");
        if ((uint32_t)app != TRACE_APPLICATION_ID)
                return fail(r, TRACE_ERR_NOT_TRACE, "%s: a SQLite database but not a pyflame trace",
                            r->path);
        if (version > TRACE_FORMAT_VERSION)
                return fail(r, TRACE_ERR_TOO_NEW,
                            "%s: written by a newer pyflame (format %lld, this reads up to %d); "
                            "upgrade pyflame to read it",
                            r->path, (long long)version, TRACE_FORMAT_VERSION);
        if (version < 1)
                return corrupt(r, "format version %lld", (long long)version);
        for (size_t i = 0; i < sizeof(required_tables) / sizeof(required_tables[0]); i++) {
                sqlite3_stmt *st;
                rc = sqlite3_prepare_v2(
                    r->db, "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1", -1,
                    &st, NULL);
                if (rc != SQLITE_OK)
                        return fail_sqlite(r, rc, "reading the schema");
                sqlite3_bind_text(st, 1, required_tables[i], -1, SQLITE_STATIC);
                rc = sqlite3_step(st);
                sqlite3_finalize(st);
                if (rc == SQLITE_DONE)
                        return fail(r, TRACE_ERR_NOT_TRACE,
                                    "%s: not a pyflame trace: it has no table \"%s\"", r->path,
                                    required_tables[i]);
                if (rc != SQLITE_ROW)
                        return fail_sqlite(r, rc, "reading the schema");
        }
        return 0;
}

/* ------------------------------------------------------------------ */
/* Loading                                                             */
/* ------------------------------------------------------------------ */

/* Does the schema have table `table` (with column `column`, when not NULL)? */
static int schema_has(struct trace_reader *r, const char *table, const char *column, bool *has)
{
        sqlite3_stmt *st;
        const char *sql = column ? "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2"
                                 : "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1";
        int rc = sqlite3_prepare_v2(r->db, sql, -1, &st, NULL);
        if (rc != SQLITE_OK)
                return fail_sqlite(r, rc, "reading the schema");
        sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
        if (column)
                sqlite3_bind_text(st, 2, column, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
        sqlite3_finalize(st);
        if (rc != SQLITE_ROW && rc != SQLITE_DONE)
                return fail_sqlite(r, rc, "reading the schema");
        *has = rc == SQLITE_ROW;
        return 0;
}

/* Prepare `sql` and count its rows with `count_sql`; sets *n. */
static int prepare(struct trace_reader *r, const char *sql, sqlite3_stmt **st, const char *what)
{
        int rc = sqlite3_prepare_v2(r->db, sql, -1, st, NULL);
        if (rc != SQLITE_OK) {
                /* The tables exist (checked), so a failing query means damage. */
                if (trace_status_from_sqlite(rc) == TRACE_ERR_NOMEM)
                        return fail_nomem(r);
                return corrupt(r, "cannot read %s: %s", what, sqlite3_errmsg(r->db));
        }
        return 0;
}

static int count_rows(struct trace_reader *r, const char *table, uint32_t *n)
{
        char sql[128];
        int64_t v = 0;
        snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s", table);
        int rc = query_int(r->db, sql, &v);
        if (rc != SQLITE_OK)
                return fail_sqlite(r, rc, "counting rows");
        if (v < 0 || v > MAX_ROWS)
                return corrupt(r, "table %s has %lld rows", table, (long long)v);
        *n = (uint32_t)v;
        return 0;
}

/* Finish a row loop: SQLITE_DONE is success; anything else an error. */
static int end_rows(struct trace_reader *r, sqlite3_stmt *st, int rc, const char *what)
{
        sqlite3_finalize(st);
        if (rc == SQLITE_DONE)
                return 0;
        return fail_sqlite(r, rc, what);
}

/* A column that must be an integer in [lo, hi]. */
static bool col_int(sqlite3_stmt *st, int i, int64_t lo, int64_t hi, int64_t *v)
{
        if (sqlite3_column_type(st, i) != SQLITE_INTEGER)
                return false;
        *v = sqlite3_column_int64(st, i);
        return *v >= lo && *v <= hi;
}

/* Same, but NULL is allowed and gives `unknown`. */
static bool col_int_or_null(sqlite3_stmt *st, int i, int64_t lo, int64_t hi, int64_t unknown,
                            int64_t *v)
{
        if (sqlite3_column_type(st, i) == SQLITE_NULL) {
                *v = unknown;
                return true;
        }
        return col_int(st, i, lo, hi, v);
}

/* Copy a text column (NULL stays NULL). Returns false when out of memory. */
/*
 * A text column, copied as UTF-8 (pfutil.h's rule: a byte that is not part
 * of a well-formed sequence, NUL included, becomes U+FFFD): every string the
 * reader hands out is UTF-8, whatever the trace holds (a command line or a
 * path in another encoding, or a crafted trace). False when out of memory.
 */
static bool col_strdup(sqlite3_stmt *st, int i, char **out)
{
        *out = NULL;
        if (sqlite3_column_type(st, i) == SQLITE_NULL)
                return true;
        const unsigned char *s = sqlite3_column_text(st, i);
        if (!s)
                return false;
        struct pf_buf b = {0};
        if (pf_buf_append_utf8(&b, (const char *)s, (size_t)sqlite3_column_bytes(st, i)) < 0 ||
            pf_buf_append(&b, "", 1) < 0) {
                pf_buf_free(&b);
                return false;
        }
        *out = (char *)b.data;
        return true;
}

static int load_meta(struct trace_reader *r)
{
        uint32_t n;
        sqlite3_stmt *st;
        int rc = count_rows(r, "meta", &n);
        if (rc < 0 || (rc = prepare(r, "SELECT key, value FROM meta", &st, "meta")) < 0)
                return rc;
        r->meta_keys = calloc(n ? n : 1, sizeof(char *));
        r->meta_values = calloc(n ? n : 1, sizeof(char *));
        if (!r->meta_keys || !r->meta_values) {
                sqlite3_finalize(st);
                return fail_nomem(r);
        }
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                if (r->n_meta >= n) {
                        sqlite3_finalize(st);
                        return corrupt(r, "meta has more rows than it counts");
                }
                char *k, *v;
                if (!col_strdup(st, 0, &k) || !col_strdup(st, 1, &v)) {
                        free(k);
                        sqlite3_finalize(st);
                        return fail_nomem(r);
                }
                r->meta_keys[r->n_meta] = k;
                r->meta_values[r->n_meta] = v;
                r->n_meta++;
                if (!k) {
                        sqlite3_finalize(st);
                        return corrupt(r, "a meta key is NULL");
                }
        }
        return end_rows(r, st, rc, "reading meta");
}

static int load_strings(struct trace_reader *r)
{
        uint32_t n;
        sqlite3_stmt *st;
        int rc = count_rows(r, "strings", &n);
        if (rc < 0 ||
            (rc = prepare(r, "SELECT id, value FROM strings ORDER BY id", &st, "strings")) < 0)
                return rc;
        size_t *offsets = calloc((size_t)n + 1, sizeof(size_t));
        struct pf_buf arena = {0};
        if (!offsets) {
                sqlite3_finalize(st);
                return fail_nomem(r);
        }
        uint32_t i = 0;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                int64_t id;
                const unsigned char *s = sqlite3_column_text(st, 1);
                int len = sqlite3_column_bytes(st, 1);
                if (i >= n || !col_int(st, 0, i + 1, i + 1, &id) ||
                    sqlite3_column_type(st, 1) != SQLITE_TEXT || !s) {
                        rc = i >= n || sqlite3_column_type(st, 1) != SQLITE_TEXT || s
                                 ? corrupt(r, "string ids are not 1, 2, 3...")
                                 : fail_nomem(r);
                        goto fail;
                }
                offsets[++i] = arena.len;
                /* As UTF-8, like every string the reader hands out (col_strdup). */
                if (pf_buf_append_utf8(&arena, (const char *)s, (size_t)len) < 0 ||
                    pf_buf_append(&arena, "", 1) < 0) {
                        rc = fail_nomem(r);
                        goto fail;
                }
        }
        if ((rc = end_rows(r, st, rc, "reading strings")) < 0) {
                st = NULL;
                goto fail;
        }
        st = NULL;
        if (i != n) {
                rc = corrupt(r, "string table changed while reading");
                goto fail;
        }
        r->strings = calloc((size_t)n + 1, sizeof(char *));
        if (!r->strings) {
                rc = fail_nomem(r);
                goto fail;
        }
        r->string_arena = (char *)arena.data;
        for (uint32_t k = 1; k <= n; k++)
                r->strings[k] = r->string_arena + offsets[k];
        r->n_strings = n;
        free(offsets);
        return 0;
fail:
        sqlite3_finalize(st);
        free(offsets);
        pf_buf_free(&arena);
        return rc;
}

static int load_frames(struct trace_reader *r)
{
        uint32_t n;
        sqlite3_stmt *st;
        bool native; /* module and module_offset: absent before format 2 */
        int rc = count_rows(r, "frames", &n);
        if (rc < 0 || (rc = schema_has(r, "frames", "module", &native)) < 0 ||
            (rc = prepare(r,
                          native ? "SELECT id, function, qualname, file, line, first_line, kind, "
                                   "module, module_offset FROM frames ORDER BY id"
                                 : "SELECT id, function, qualname, file, line, first_line, kind, "
                                   "NULL, NULL FROM frames ORDER BY id",
                          &st, "frames")) < 0)
                return rc;
        r->frames = calloc((size_t)n + 1, sizeof(*r->frames));
        if (!r->frames) {
                sqlite3_finalize(st);
                return fail_nomem(r);
        }
        uint32_t i = 0;
        int64_t ns = r->n_strings;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                int64_t id, fn, qn, file, line, first, kind, module, offset;
                if (i >= n || !col_int(st, 0, i + 1, i + 1, &id)) {
                        sqlite3_finalize(st);
                        return corrupt(r, "frame ids are not 1, 2, 3...");
                }
                if (!col_int(st, 1, 1, ns, &fn) || !col_int_or_null(st, 2, 1, ns, 0, &qn) ||
                    !col_int(st, 3, 1, ns, &file) ||
                    !col_int_or_null(st, 4, 0, INT32_MAX, -1, &line) ||
                    !col_int_or_null(st, 5, 0, INT32_MAX, -1, &first) ||
                    !col_int(st, 6, TRACE_FRAME_PYTHON, TRACE_FRAME_TASK, &kind) ||
                    !col_int_or_null(st, 7, 1, ns, 0, &module) ||
                    !col_int_or_null(st, 8, 0, INT64_MAX, 0, &offset) ||
                    (module && kind != TRACE_FRAME_NATIVE)) {
                        sqlite3_finalize(st);
                        return corrupt(r, "frame %u has a bad string id, line, kind or module",
                                       i + 1);
                }
                i++;
                r->frames[i] =
                    (struct rframe){(uint32_t)fn,     (uint32_t)qn,    (uint32_t)file,
                                    (int32_t)line,    (int32_t)first,  (enum trace_frame_kind)kind,
                                    (uint32_t)module, (uint64_t)offset};
        }
        if ((rc = end_rows(r, st, rc, "reading frames")) < 0)
                return rc;
        if (i != n)
                return corrupt(r, "frame table changed while reading");
        r->n_frames = n;
        return 0;
}

static int load_stacks(struct trace_reader *r)
{
        uint32_t n;
        sqlite3_stmt *st;
        int rc = count_rows(r, "stacks", &n);
        if (rc < 0)
                return rc;
        if (n == 0)
                return corrupt(r, "stack 0 (the empty stack) is missing");
        if ((rc = prepare(r, "SELECT id, parent, frame, depth FROM stacks ORDER BY id", &st,
                          "stacks")) < 0)
                return rc;
        r->stack_parent = calloc(n, sizeof(uint32_t));
        r->stack_frame = calloc(n, sizeof(uint32_t));
        r->stack_depth = calloc(n, sizeof(uint32_t));
        if (!r->stack_parent || !r->stack_frame || !r->stack_depth) {
                sqlite3_finalize(st);
                return fail_nomem(r);
        }
        uint32_t i = 0;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                int64_t id, parent, frame, depth;
                if (i >= n || !col_int(st, 0, i, i, &id)) {
                        sqlite3_finalize(st);
                        return corrupt(r, "stack ids are not 0, 1, 2...");
                }
                if (i == 0) {
                        if (sqlite3_column_type(st, 1) != SQLITE_NULL ||
                            sqlite3_column_type(st, 2) != SQLITE_NULL ||
                            !col_int(st, 3, 0, 0, &depth)) {
                                sqlite3_finalize(st);
                                return corrupt(r, "stack 0 is not the empty stack");
                        }
                        i++;
                        continue;
                }
                /* parent < id: the tree can have no cycle, and depths follow. */
                if (!col_int(st, 1, 0, (int64_t)i - 1, &parent) ||
                    !col_int(st, 2, 1, r->n_frames, &frame) ||
                    !col_int(st, 3, 1, UINT32_MAX, &depth) ||
                    (uint64_t)depth != (uint64_t)r->stack_depth[parent] + 1) {
                        sqlite3_finalize(st);
                        return corrupt(r, "stack %u has a bad parent, frame or depth", i);
                }
                r->stack_parent[i] = (uint32_t)parent;
                r->stack_frame[i] = (uint32_t)frame;
                r->stack_depth[i] = (uint32_t)depth;
                i++;
        }
        if ((rc = end_rows(r, st, rc, "reading stacks")) < 0)
                return rc;
        if (i != n)
                return corrupt(r, "stack table changed while reading");
        r->n_stacks = n;
        r->n_file_stacks = n;
        return 0;
}

static int load_processes(struct trace_reader *r)
{
        uint32_t n;
        sqlite3_stmt *st;
        bool origin = false;
        int rc = count_rows(r, "processes", &n);
        if (rc < 0 || (rc = schema_has(r, "processes", "source_pid", &origin)) < 0 ||
            (rc = prepare(r,
                          origin ? "SELECT pid, cmdline, python_version, python_build, "
                                   "exit_status, end_ns, recording, source_pid FROM processes "
                                   "ORDER BY pid"
                                 : "SELECT pid, cmdline, python_version, python_build, "
                                   "exit_status, end_ns, NULL, NULL FROM processes ORDER BY pid",
                          &st, "processes")) < 0)
                return rc;
        r->processes = calloc(n ? n : 1, sizeof(*r->processes));
        if (!r->processes) {
                sqlite3_finalize(st);
                return fail_nomem(r);
        }
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                int64_t pid, status, end, recording, source_pid;
                if (r->n_processes >= n) {
                        sqlite3_finalize(st);
                        return corrupt(r, "process table changed while reading");
                }
                if (!col_int(st, 0, 1, INT32_MAX, &pid) ||
                    !col_int_or_null(st, 4, 0, INT32_MAX, -1, &status) ||
                    !col_int_or_null(st, 5, -CHUNK_TIME_LIMIT, CHUNK_TIME_LIMIT, -1, &end) ||
                    !col_int_or_null(st, 6, 1, r->n_recordings, 0, &recording) ||
                    !col_int_or_null(st, 7, 1, INT32_MAX, 0, &source_pid)) {
                        sqlite3_finalize(st);
                        return corrupt(r, "a process row has a bad pid, status, end time or "
                                          "origin");
                }
                struct rprocess *p = &r->processes[r->n_processes++];
                p->pid = (int32_t)pid;
                p->exit_status = (int)status;
                p->end_ns = end;
                p->recording = (uint32_t)recording;
                p->source_pid = (int32_t)source_pid;
                if (!col_strdup(st, 1, &p->cmdline) || !col_strdup(st, 2, &p->python_version) ||
                    !col_strdup(st, 3, &p->python_build)) {
                        sqlite3_finalize(st);
                        return fail_nomem(r);
                }
        }
        return end_rows(r, st, rc, "reading processes");
}

static bool known_pid(const struct trace_reader *r, int64_t pid)
{
        for (uint32_t i = 0; i < r->n_processes; i++)
                if (r->processes[i].pid == pid)
                        return true;
        return false;
}

static int load_threads(struct trace_reader *r)
{
        uint32_t n;
        sqlite3_stmt *st;
        int rc = count_rows(r, "threads", &n);
        /* Version 1 has no task columns. */
        sqlite3_stmt *probe;
        bool tasks = sqlite3_prepare_v2(r->db, "SELECT task_of, task_addr FROM threads", -1, &probe,
                                        NULL) == SQLITE_OK;
        sqlite3_finalize(probe);
        if (rc < 0 ||
            (rc = prepare(r,
                          tasks ? "SELECT ref, pid, tid, python_thread_id, name, first_ns, "
                                  "last_ns, samples, task_of, task_addr FROM threads ORDER BY ref"
                                : "SELECT ref, pid, tid, python_thread_id, name, first_ns, "
                                  "last_ns, samples, NULL, NULL FROM threads ORDER BY ref",
                          &st, "threads")) < 0)
                return rc;
        r->threads = calloc((size_t)n + 1, sizeof(*r->threads));
        if (!r->threads) {
                sqlite3_finalize(st);
                return fail_nomem(r);
        }
        uint32_t i = 0;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                int64_t ref, pid, tid, pytid, first, last, samples, task_of, task_addr;
                if (i >= n || !col_int(st, 0, i + 1, i + 1, &ref)) {
                        sqlite3_finalize(st);
                        return corrupt(r, "thread refs are not 1, 2, 3...");
                }
                if (!col_int(st, 1, 1, INT32_MAX, &pid) || !known_pid(r, pid) ||
                    !col_int_or_null(st, 2, 0, INT64_MAX, -1, &tid) ||
                    !col_int_or_null(st, 3, INT64_MIN, INT64_MAX, 0, &pytid) ||
                    !col_int_or_null(st, 5, -CHUNK_TIME_LIMIT, CHUNK_TIME_LIMIT, -1, &first) ||
                    !col_int_or_null(st, 6, -CHUNK_TIME_LIMIT, CHUNK_TIME_LIMIT, -1, &last) ||
                    !col_int(st, 7, 0, INT64_MAX, &samples) ||
                    !col_int_or_null(st, 8, 1, i, 0, &task_of) ||
                    !col_int_or_null(st, 9, INT64_MIN, INT64_MAX, 0, &task_addr) ||
                    (task_of && r->threads[task_of].task_of)) {
                        sqlite3_finalize(st);
                        return corrupt(r, "thread %u has a bad pid, id, time, count or task",
                                       i + 1);
                }
                i++;
                struct rthread *t = &r->threads[i];
                *t = (struct rthread){(int32_t)pid,
                                      tid,
                                      (uint64_t)pytid,
                                      NULL,
                                      first,
                                      last,
                                      (uint64_t)samples,
                                      (uint32_t)task_of,
                                      (uint64_t)task_addr};
                r->n_tasks += task_of != 0;
                r->n_threads = i; /* so that close frees the names so far */
                if (!col_strdup(st, 4, &t->name)) {
                        sqlite3_finalize(st);
                        return fail_nomem(r);
                }
        }
        if ((rc = end_rows(r, st, rc, "reading threads")) < 0)
                return rc;
        if (i != n)
                return corrupt(r, "thread table changed while reading");
        return 0;
}

static int load_errors(struct trace_reader *r)
{
        sqlite3_stmt *st;
        uint32_t n;
        int rc = count_rows(r, "errors", &n);
        if (rc < 0 || (rc = prepare(r, "SELECT kind, count, pid FROM errors", &st, "errors")) < 0)
                return rc;
        r->error_rows = calloc(n ? n : 1, sizeof(*r->error_rows));
        if (!r->error_rows) {
                sqlite3_finalize(st);
                return fail_nomem(r);
        }
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                int64_t kind, count, pid;
                if (!col_int(st, 0, 0, INT64_MAX, &kind) || !col_int(st, 1, 0, INT64_MAX, &count) ||
                    !col_int(st, 2, 0, INT32_MAX, &pid)) {
                        sqlite3_finalize(st);
                        return corrupt(r, "an error count is not a non-negative integer");
                }
                if (r->n_error_rows >= n) {
                        sqlite3_finalize(st);
                        return corrupt(r, "error table changed while reading");
                }
                /* Kinds added by later versions count as "other". */
                if (kind >= TRACE_ERROR_KIND_COUNT)
                        kind = TRACE_ERROR_OTHER;
                uint64_t *e = &r->errors[kind];
                *e = (uint64_t)count > UINT64_MAX - *e ? UINT64_MAX : *e + (uint64_t)count;
                r->error_rows[r->n_error_rows++] =
                    (struct rerror){(int32_t)pid, (unsigned)kind, (uint64_t)count};
        }
        return end_rows(r, st, rc, "reading errors");
}

static int load_recordings(struct trace_reader *r)
{
        bool has = false;
        uint32_t n;
        sqlite3_stmt *st;
        int rc = schema_has(r, "recordings", NULL, &has);
        if (rc < 0 || !has)
                return rc;
        if ((rc = count_rows(r, "recordings", &n)) < 0 ||
            (rc = prepare(r,
                          "SELECT id, file, host, start_wall_ns, duration_ns, offset_ns, samples "
                          "FROM recordings ORDER BY id",
                          &st, "recordings")) < 0)
                return rc;
        r->recordings = calloc(n ? n : 1, sizeof(*r->recordings));
        if (!r->recordings) {
                sqlite3_finalize(st);
                return fail_nomem(r);
        }
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                uint32_t i = r->n_recordings;
                int64_t id, start, duration, offset, samples;
                if (i >= n || !col_int(st, 0, i + 1, i + 1, &id) ||
                    !col_int_or_null(st, 3, INT64_MIN, INT64_MAX, -1, &start) ||
                    !col_int_or_null(st, 4, 0, INT64_MAX, -1, &duration) ||
                    !col_int(st, 5, -CHUNK_TIME_LIMIT, CHUNK_TIME_LIMIT, &offset) ||
                    !col_int(st, 6, 0, INT64_MAX, &samples)) {
                        sqlite3_finalize(st);
                        return corrupt(r, "recording %u has a bad id, time or count", i + 1);
                }
                struct rrecording *rec = &r->recordings[i];
                r->n_recordings = i + 1; /* so that close frees what was read */
                rec->start_wall_ns = start;
                rec->duration_ns = duration;
                rec->offset_ns = offset;
                rec->samples = (uint64_t)samples;
                if (!col_strdup(st, 1, &rec->file) || !col_strdup(st, 2, &rec->host)) {
                        sqlite3_finalize(st);
                        return fail_nomem(r);
                }
        }
        if ((rc = end_rows(r, st, rc, "reading recordings")) < 0)
                return rc;
        if (r->n_recordings != n)
                return corrupt(r, "recording table changed while reading");
        if ((rc = schema_has(r, "recording_meta", NULL, &has)) < 0 || !has)
                return rc;
        if ((rc = prepare(r, "SELECT recording, key, value FROM recording_meta", &st,
                          "recording meta")) < 0)
                return rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                int64_t id;
                char *k = NULL, *v = NULL;
                if (!col_int(st, 0, 1, n, &id) || sqlite3_column_type(st, 1) != SQLITE_TEXT) {
                        sqlite3_finalize(st);
                        return corrupt(r, "recording meta names no recording, or no key");
                }
                struct rrecording *rec = &r->recordings[id - 1];
                if (rec->n_meta == rec->cap_meta) {
                        size_t cap = rec->cap_meta ? 2 * rec->cap_meta : 16;
                        char **keys = reallocarray(rec->meta_keys, cap, sizeof(*keys));
                        if (keys)
                                rec->meta_keys = keys;
                        char **values =
                            keys ? reallocarray(rec->meta_values, cap, sizeof(*values)) : NULL;
                        if (values)
                                rec->meta_values = values;
                        if (!keys || !values) {
                                sqlite3_finalize(st);
                                return fail_nomem(r);
                        }
                        rec->cap_meta = cap;
                }
                if (!col_strdup(st, 1, &k) || !col_strdup(st, 2, &v)) {
                        free(k);
                        sqlite3_finalize(st);
                        return fail_nomem(r);
                }
                rec->meta_keys[rec->n_meta] = k;
                rec->meta_values[rec->n_meta++] = v;
        }
        return end_rows(r, st, rc, "reading recording meta");
}

static int load_sources(struct trace_reader *r)
{
        bool has = false;
        uint32_t n;
        sqlite3_stmt *st;
        int rc = schema_has(r, "sources", NULL, &has);
        if (rc < 0 || !has)
                return rc;
        if ((rc = count_rows(r, "sources", &n)) < 0 ||
            (rc = prepare(r,
                          "SELECT file, size, mtime_ns, encoding, length(data) FROM sources "
                          "ORDER BY file",
                          &st, "sources")) < 0)
                return rc;
        r->sources = calloc(n ? n : 1, sizeof(*r->sources));
        if (!r->sources) {
                sqlite3_finalize(st);
                return fail_nomem(r);
        }
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                int64_t file, size, mtime, encoding, stored;
                if (r->n_sources >= n) {
                        sqlite3_finalize(st);
                        return corrupt(r, "source table changed while reading");
                }
                if (!col_int(st, 0, 1, r->n_strings, &file) ||
                    !col_int(st, 1, 0, TRACE_SOURCE_MAX_BYTES, &size) ||
                    !col_int_or_null(st, 2, 0, INT64_MAX, -1, &mtime) ||
                    !col_int(st, 3, 0, INT64_MAX, &encoding) ||
                    !col_int(st, 4, 0, ZLIB_BOUND(TRACE_SOURCE_MAX_BYTES), &stored) ||
                    (encoding == SOURCE_PLAIN && stored != size)) {
                        sqlite3_finalize(st);
                        return corrupt(r, "a source has a bad file, size, time or encoding");
                }
                /* Encodings added by later versions: this reader has no such source. */
                if (encoding != SOURCE_PLAIN && encoding != SOURCE_ZLIB)
                        continue;
                r->sources[r->n_sources++] = (struct rsource){
                    (uint32_t)file, (uint64_t)size, (uint64_t)stored, mtime, (int)encoding};
        }
        return end_rows(r, st, rc, "reading sources");
}

static int load_chunk_totals(struct trace_reader *r)
{
        sqlite3_stmt *st;
        /* Sum in C: a damaged count must not make SQLite's sum() overflow. */
        int rc = prepare(r, "SELECT id, count, thread FROM sample_chunks ORDER BY id", &st,
                         "sample chunks");
        if (rc < 0)
                return rc;
        uint64_t total = 0;
        int64_t max_id = 0;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                int64_t id, count;
                if (!col_int(st, 0, 1, INT64_MAX, &id) || !col_int(st, 1, 1, UINT32_MAX, &count)) {
                        sqlite3_finalize(st);
                        return corrupt(r, "sample chunk with a bad id or count");
                }
                /* Samples of threads: tasks' streams count apart (meta task_samples). */
                int64_t thread = sqlite3_column_int64(st, 2);
                if (thread < 1 || thread > r->n_threads || !r->threads[thread].task_of)
                        total += (uint64_t)count;
                max_id = id;
        }
        if ((rc = end_rows(r, st, rc, "reading sample chunks")) < 0)
                return rc;
        r->max_chunk_id = max_id;
        r->n_samples = total;
        return 0;
}

/*
 * A trace may come from anywhere (a CI artifact, a bug report, a stranger).
 * Open it as SQLite's notes on databases from untrusted sources say
 * (https://www.sqlite.org/security.html): defensive mode (no writes to the
 * schema, no PRAGMAs that can corrupt it), functions named in the schema not
 * trusted, no triggers and no views (the reader reads its own tables, by
 * name; something planted under those names is not a table), cell size
 * checks, no memory-mapped I/O, no attached databases, and bounded strings
 * and blobs (a sample chunk or a compressed source is far smaller).
 */
#define READ_MAX_BLOB (64 << 20)

static int open_untrusted(const char *path, int flags, sqlite3 **out)
{
        sqlite3 *db = NULL;
        int rc = sqlite3_open_v2(path, &db, flags, NULL);
        if (rc == SQLITE_OK) {
                sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
                sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
                sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, NULL);
                sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_VIEW, 0, NULL);
                sqlite3_limit(db, SQLITE_LIMIT_LENGTH, READ_MAX_BLOB);
                sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 0);
                rc = sqlite3_exec(db, "PRAGMA cell_size_check = ON; PRAGMA mmap_size = 0;", NULL,
                                  NULL, NULL);
        }
        if (rc == SQLITE_OK) {
                /* A live recorder holds the lock briefly once a second: wait for it. */
                sqlite3_busy_timeout(db, 5000);
                sqlite3_extended_result_codes(db, 1);
                *out = db;
        } else {
                sqlite3_close(db);
        }
        return rc;
}

/* Copy the file at `from` to a new file `to`. Returns 0 or -errno. */
static int copy_file(const char *from, const char *to)
{
        int in = open(from, O_RDONLY | O_CLOEXEC);
        if (in < 0)
                return -errno;
        int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (out < 0) {
                int e = errno;
                close(in);
                return -e;
        }
        char buf[65536];
        ssize_t n;
        int rc = 0;
        while (rc == 0 && (n = read(in, buf, sizeof(buf))) != 0) {
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 || write(out, buf, (size_t)n) != n)
                        rc = errno ? -errno : -EIO;
        }
        close(in);
        if (close(out) < 0 && rc == 0)
                rc = -errno;
        return rc;
}

/*
 * A recorder killed inside a commit leaves a "hot" journal next to the trace.
 * A read-only connection may not roll it back; a read-write one does so as
 * soon as it reads, which restores the last complete commit (what the
 * recorder's last flush left). That is done on a private copy of the two
 * files, which is then read: the trace a user points us at is never written
 * to (a journal is as untrusted as the trace, and may lie about what to
 * restore), and a trace in a read-only place reads all the same.
 *
 * rolled_back_copy() makes that copy at `copy` (its journal gone once
 * rolled back): 0, -errno when a file could not be copied, or the SQLite
 * code of the roll-back.
 */
static int rolled_back_copy(const char *path, const char *copy)
{
        char journal[PATH_MAX + 64], orig_journal[PATH_MAX + 64];
        if (snprintf(journal, sizeof(journal), "%s-journal", copy) >= (int)sizeof(journal) ||
            snprintf(orig_journal, sizeof(orig_journal), "%s-journal", path) >=
                (int)sizeof(orig_journal))
                return -ENAMETOOLONG;
        int e = copy_file(path, copy);
        if (e == 0)
                e = copy_file(orig_journal, journal);
        if (e) {
                unlink(journal);
                unlink(copy);
                return e;
        }
        sqlite3 *db = NULL;
        int64_t v;
        int rc = open_untrusted(copy, SQLITE_OPEN_READWRITE, &db);
        if (rc == SQLITE_OK)
                rc = query_int(db, "PRAGMA user_version", &v); /* rolls back */
        sqlite3_close(db);
        unlink(journal);
        if (rc != SQLITE_OK)
                unlink(copy);
        return rc;
}

static int roll_back_hot_journal(struct trace_reader *r)
{
        const char *tmp = getenv("TMPDIR");
        char dir[PATH_MAX], copy[PATH_MAX + 64];
        snprintf(dir, sizeof(dir), "%s/pyflame-rollback-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (r->keep_copy)
                snprintf(copy, sizeof(copy), "%s", r->keep_copy);
        else if (!mkdtemp(dir))
                return fail(r, TRACE_ERR_IO,
                            "%s: the recorder was stopped in the middle of writing, and a "
                            "private copy to roll its journal back in cannot be made in %s: %s "
                            "(set TMPDIR to a writable directory)",
                            r->path, tmp && *tmp ? tmp : "/tmp", strerror(errno));
        else
                snprintf(copy, sizeof(copy), "%s/trace.db", dir);
        /* Closed first: copying opens and closes the trace, which drops its locks. */
        sqlite3_close(r->db);
        r->db = NULL;
        int rc = rolled_back_copy(r->path, copy);
        if (rc == SQLITE_OK)
                rc = open_untrusted(copy, SQLITE_OPEN_READONLY, &r->db);
        /* Open files stay readable once unlinked. */
        if (!r->keep_copy) {
                unlink(copy);
                rmdir(dir);
        } else if (rc != SQLITE_OK) {
                unlink(copy);
        }
        if (rc < 0)
                return fail(r, TRACE_ERR_IO,
                            "%s: the recorder was stopped in the middle of writing, and its "
                            "trace and journal could not be copied to %s to roll it back: %s "
                            "(set TMPDIR to a writable directory with room for a copy)",
                            r->path, copy, strerror(-rc));
        if (rc != SQLITE_OK)
                return fail(r,
                            trace_status_from_sqlite(rc) == TRACE_ERR_NOMEM ? TRACE_ERR_NOMEM
                                                                            : TRACE_ERR_CORRUPT,
                            "%s: damaged trace (%s) while rolling back the journal of an "
                            "interrupted recording",
                            r->path, sqlite3_errstr(rc));
        r->rolled_back = true;
        return 0;
}

static int begin_read(struct trace_reader *r)
{
        int rc = sqlite3_exec(r->db, "BEGIN", NULL, NULL, NULL);
        int64_t v;
        if (rc == SQLITE_OK)
                rc = query_int(r->db, "PRAGMA schema_version", &v);
        if (rc == SQLITE_READONLY_ROLLBACK) {
                sqlite3_exec(r->db, "ROLLBACK", NULL, NULL, NULL);
                int status = roll_back_hot_journal(r);
                if (status < 0)
                        return status;
                rc = sqlite3_exec(r->db, "BEGIN", NULL, NULL, NULL);
                if (rc == SQLITE_OK)
                        rc = query_int(r->db, "PRAGMA schema_version", &v);
        }
        if (rc != SQLITE_OK) {
                int status = fail_sqlite(r, rc, "opening");
                /* Say "truncated" when that is what SQLite found damaged. */
                return status == TRACE_ERR_CORRUPT && check_truncation(r) < 0 ? TRACE_ERR_CORRUPT
                                                                              : status;
        }
        return check_truncation(r);
}

static int load(struct trace_reader *r)
{
        int rc = open_untrusted(r->path, SQLITE_OPEN_READONLY, &r->db);
        if (rc != SQLITE_OK)
                return fail_sqlite(r, rc, "opening");
        if ((rc = begin_read(r)) < 0)
                return rc;
        if ((rc = check_schema(r)) < 0 || (rc = load_meta(r)) < 0 || (rc = load_strings(r)) < 0 ||
            (rc = load_frames(r)) < 0 || (rc = load_stacks(r)) < 0 ||
            (rc = load_recordings(r)) < 0 || (rc = load_processes(r)) < 0 ||
            (rc = load_threads(r)) < 0 || (rc = load_errors(r)) < 0 || (rc = load_sources(r)) < 0 ||
            (rc = load_chunk_totals(r)) < 0) {
                sqlite3_exec(r->db, "ROLLBACK", NULL, NULL, NULL);
                return rc;
        }
        sqlite3_exec(r->db, "COMMIT", NULL, NULL, NULL);
        r->loaded = true;
        return 0;
}

TRACE_API int trace_reader_open(const char *path, struct trace_reader **out)
{
        if (!out)
                return TRACE_ERR_ARG;
        struct trace_reader *r = calloc(1, sizeof(*r));
        if (!r)
                return TRACE_ERR_NOMEM;
        int rc;
        if (!path || !*path)
                rc = fail(r, TRACE_ERR_ARG, "no trace file given");
        else if (!(r->path = strdup(path)))
                rc = fail_nomem(r);
        else if ((rc = check_file(r)) == 0)
                rc = load(r);
        *out = r;
        return rc;
}

/*
 * Is `path` a trace this reader reads, as one file of a set? Its header,
 * format version, tables and meta, not its dictionaries: of a set only the
 * last file's are read, from the join, where load() validates them, and
 * every sample chunk is validated where it is decoded. When it has a hot
 * journal (*hot), what was checked is a copy rolled back at `copy`, left
 * there for the caller to read. 0, or the status with the message on `r`.
 */
static int check_readable(struct trace_reader *r, const char *path, const char *copy, bool *hot)
{
        struct trace_reader *one = calloc(1, sizeof(*one));
        if (!one)
                return fail_nomem(r);
        one->keep_copy = copy;
        int rc = 0;
        if (!(one->path = strdup(path)))
                rc = fail_nomem(one);
        else if ((rc = check_file(one)) == 0) {
                int src = open_untrusted(path, SQLITE_OPEN_READONLY, &one->db);
                if (src != SQLITE_OK)
                        rc = fail_sqlite(one, src, "opening");
                else if ((rc = begin_read(one)) == 0) {
                        if ((rc = check_schema(one)) == 0)
                                rc = load_meta(one);
                        sqlite3_exec(one->db, "ROLLBACK", NULL, NULL, NULL);
                }
        }
        if (rc < 0)
                fail(r, rc, "%s", one->errmsg[0] ? one->errmsg : trace_status_str(rc));
        *hot = one->rolled_back;
        if (rc < 0 && *hot)
                unlink(copy);
        trace_reader_close(one);
        return rc < 0 ? rc : 0;
}

/* Remove the rolled-back copies of a set's files and their directory. */
static void set_tmp_remove(struct trace_reader *r)
{
        if (!r->set_tmp)
                return;
        for (size_t i = 0; i < r->n_set_files; i++)
                if (r->set_files[i].name)
                        unlink(r->set_files[i].path);
        rmdir(r->set_tmp);
        free(r->set_tmp);
        r->set_tmp = NULL;
}

TRACE_API int trace_reader_open_set(const char *const *paths, size_t n, struct trace_reader **out)
{
        if (!out)
                return TRACE_ERR_ARG;
        if (paths && n == 1)
                return trace_reader_open(paths[0], out);
        struct trace_reader *r = calloc(1, sizeof(*r));
        if (!r)
                return TRACE_ERR_NOMEM;
        *out = r;
        if (!paths || n == 0)
                return fail(r, TRACE_ERR_ARG, "no trace file given");
        const char *tmp = getenv("TMPDIR");
        char dir[PATH_MAX], joined[PATH_MAX + 16];
        snprintf(dir, sizeof(dir), "%s/pyflame-set-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir))
                return fail(r, TRACE_ERR_IO,
                            "the files are read as one through a temporary file, which cannot "
                            "be made in %s: %s (set TMPDIR to a writable directory with room "
                            "for a copy of them)",
                            tmp && *tmp ? tmp : "/tmp", strerror(errno));
        /*
         * A file with a hot journal (its recorder killed in the middle of a
         * commit) is read from a rolled-back copy, kept beside the join
         * until the reader is closed: the user's file is never written to.
         */
        char **copies = calloc(n, sizeof(*copies));
        int rc = copies ? 0 : fail_nomem(r);
        bool any_copy = false;
        for (size_t i = 0; i < n && rc == 0; i++) {
                bool hot = false;
                char copy[PATH_MAX + 48];
                snprintf(copy, sizeof(copy), "%s/rolled-back-%zu.db", dir, i);
                /* Checked on the copy it rolls back, which is then read: one copy per file. */
                if ((rc = check_readable(r, paths[i], copy, &hot)) < 0 || !hot)
                        continue;
                if (!(copies[i] = strdup(copy))) {
                        unlink(copy);
                        rc = fail_nomem(r);
                }
                any_copy |= copies[i] != NULL;
        }
        const char **read_from = rc == 0 ? malloc(n * sizeof(*read_from)) : NULL;
        if (rc == 0 && !read_from)
                rc = fail_nomem(r);
        for (size_t i = 0; rc == 0 && i < n; i++)
                read_from[i] = copies[i] ? copies[i] : paths[i];
        snprintf(joined, sizeof(joined), "%s/set.db", dir);
        struct trace_writer *w = NULL;
        if (rc == 0) {
                rc = trace_join_set(joined, read_from, paths, n, &w, &r->set_files);
                if (rc == 0) {
                        r->n_set_files = n;
                        r->seg_open = SIZE_MAX;
                } else {
                        fail(r, rc, "%s", w ? trace_writer_errmsg(w) : trace_status_str(rc));
                }
        }
        trace_writer_free(w);
        free(read_from);
        if (rc == 0) {
                if (!(r->path = strdup(joined)))
                        rc = fail_nomem(r);
                else if ((rc = check_file(r)) == 0)
                        rc = load(r);
        }
        /* An open file stays readable once unlinked: nothing else is left behind. */
        unlink(joined);
        if (rc == 0 && any_copy && !(r->set_tmp = strdup(dir)))
                rc = fail_nomem(r);
        if (rc < 0 || !any_copy) {
                for (size_t i = 0; copies && i < n; i++)
                        if (copies[i])
                                unlink(copies[i]);
                rmdir(dir);
        }
        for (size_t i = 0; copies && i < n; i++)
                free(copies[i]);
        free(copies);
        if (rc == 0) {
                /* Messages from now on name the files, not the copy. */
                char *name = strdup(paths[0]);
                if (!name)
                        return fail_nomem(r);
                free(r->path);
                r->path = name;
        }
        return rc;
}

/* Parse the i-th gap of meta gaps; false past the end or on a malformed entry. */
static bool gap_parse(const struct trace_reader *r, uint32_t i, struct trace_gap *out)
{
        const char *p = trace_reader_meta(r, "gaps");
        for (uint32_t k = 0; p && k < i; k++) {
                p = strchr(p, ';');
                if (p)
                        p++;
        }
        if (!p || !*p)
                return false;
        long long a, b, c, d;
        if (sscanf(p, "%lld,%lld,%lld,%lld", &a, &b, &c, &d) != 4 || b < a)
                return false;
        *out = (struct trace_gap){a, b, c, d};
        return true;
}

TRACE_API uint32_t trace_reader_gap_count(const struct trace_reader *r)
{
        struct trace_gap g;
        uint32_t n = 0;
        while (r && n < TRACE_GAPS_MAX && gap_parse(r, n, &g))
                n++;
        return n;
}

TRACE_API int trace_reader_gap_at(const struct trace_reader *r, uint32_t i, struct trace_gap *out)
{
        struct trace_gap g;
        if (!r || !out || i >= TRACE_GAPS_MAX || !gap_parse(r, i, &g))
                return TRACE_ERR_ARG;
        *out = g;
        return 0;
}

TRACE_API const char *trace_reader_errmsg(const struct trace_reader *r)
{
        return r ? r->errmsg : "no reader";
}

/* Close the file of a set that scans read blobs from, if one is open. */
static void set_file_close(struct trace_reader *r)
{
        sqlite3_finalize(r->seg_st);
        sqlite3_close(r->seg_db);
        r->seg_st = NULL;
        r->seg_db = NULL;
        r->seg_open = SIZE_MAX;
}

TRACE_API void trace_reader_close(struct trace_reader *r)
{
        if (!r)
                return;
        sqlite3_close(r->db);
        set_file_close(r);
        set_tmp_remove(r);
        for (size_t i = 0; i < r->n_set_files; i++) {
                free(r->set_files[i].path);
                free(r->set_files[i].name);
        }
        free(r->set_files);
        for (size_t i = 0; i < r->n_meta; i++) {
                free(r->meta_keys[i]);
                free(r->meta_values[i]);
        }
        free(r->meta_keys);
        free(r->meta_values);
        free(r->string_arena);
        free(r->strings);
        free(r->frames);
        free(r->stack_parent);
        free(r->stack_frame);
        free(r->canon);
        free(r->stack_depth);
        for (uint32_t i = 1; r->threads && i <= r->n_threads; i++)
                free(r->threads[i].name);
        free(r->threads);
        for (uint32_t i = 0; i < r->n_processes; i++) {
                free(r->processes[i].cmdline);
                free(r->processes[i].python_version);
                free(r->processes[i].python_build);
        }
        free(r->processes);
        for (uint32_t i = 0; i < r->n_recordings; i++) {
                struct rrecording *rec = &r->recordings[i];
                free(rec->file);
                free(rec->host);
                for (size_t k = 0; k < rec->n_meta; k++) {
                        free(rec->meta_keys[k]);
                        free(rec->meta_values[k]);
                }
                free(rec->meta_keys);
                free(rec->meta_values);
        }
        free(r->recordings);
        free(r->sources);
        free(r->error_rows);
        free(r->path);
        free(r);
}

/* ------------------------------------------------------------------ */
/* What was loaded                                                     */
/* ------------------------------------------------------------------ */

TRACE_API const char *trace_reader_meta(const struct trace_reader *r, const char *key)
{
        if (!r || !key)
                return NULL;
        for (size_t i = 0; i < r->n_meta; i++)
                if (!strcmp(r->meta_keys[i], key))
                        return r->meta_values[i];
        return NULL;
}

TRACE_API bool trace_reader_meta_at(const struct trace_reader *r, size_t i, const char **key,
                                    const char **value)
{
        if (!r || i >= r->n_meta)
                return false;
        if (key)
                *key = r->meta_keys[i];
        if (value)
                *value = r->meta_values[i];
        return true;
}

/* Parse an integer meta value; false when absent or not an integer. */
static bool meta_int(const struct trace_reader *r, const char *key, int64_t *v)
{
        const char *s = trace_reader_meta(r, key);
        if (!s || !*s)
                return false;
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (errno || *end)
                return false;
        *v = x;
        return true;
}

TRACE_API int trace_reader_summary(struct trace_reader *r, struct trace_summary *out)
{
        if (!r || !out)
                return TRACE_ERR_ARG;
        if (!r->loaded)
                return fail(r, TRACE_ERR_STATE, "the trace could not be opened");
        struct trace_summary s = {0};
        int64_t start, end;
        s.finalized = trace_reader_meta(r, TRACE_META_END_WALL_NS) != NULL;
        if (s.finalized && meta_int(r, TRACE_META_START_MONO_NS, &start) &&
            meta_int(r, TRACE_META_END_MONO_NS, &end) && end >= start) {
                s.duration_ns = end - start;
        } else {
                for (uint32_t i = 1; i <= r->n_threads; i++)
                        if (r->threads[i].samples && r->threads[i].last_ns > s.duration_ns)
                                s.duration_ns = r->threads[i].last_ns;
        }
        s.samples = r->n_samples;
        memcpy(s.errors, r->errors, sizeof(s.errors));
        s.threads = r->n_threads;
        s.processes = r->n_processes;
        s.stacks = r->n_stacks;
        s.frames = r->n_frames;
        const char *rate = trace_reader_meta(r, TRACE_META_RATE_HZ);
        if (rate) {
                char *end_p;
                double hz = strtod(rate, &end_p);
                if (end_p != rate && hz > 0 && hz < 1e12)
                        s.rate_hz = hz;
        }
        *out = s;
        return 0;
}

TRACE_API uint32_t trace_reader_frame_count(const struct trace_reader *r)
{
        return r ? r->n_frames : 0;
}

TRACE_API int trace_reader_frame(const struct trace_reader *r, uint32_t frame_id,
                                 struct trace_frame *out)
{
        if (!r || !out || frame_id == 0 || frame_id > r->n_frames)
                return TRACE_ERR_ARG;
        const struct rframe *f = &r->frames[frame_id];
        out->function = r->strings[f->function];
        out->qualname = f->qualname ? r->strings[f->qualname] : NULL;
        out->file = r->strings[f->file];
        out->line = f->line;
        out->first_line = f->first_line;
        out->kind = f->kind;
        return 0;
}

TRACE_API int trace_reader_frame_module(const struct trace_reader *r, uint32_t frame_id,
                                        const char **module, uint64_t *offset)
{
        if (!r || frame_id == 0 || frame_id > r->n_frames)
                return TRACE_ERR_ARG;
        const struct rframe *f = &r->frames[frame_id];
        if (!f->module)
                return 1;
        if (module)
                *module = r->strings[f->module];
        if (offset)
                *offset = f->offset;
        return 0;
}

TRACE_API uint32_t trace_reader_stack_count(const struct trace_reader *r)
{
        return r ? r->n_stacks : 0;
}

TRACE_API int trace_reader_stack_node(const struct trace_reader *r, uint32_t stack_id,
                                      uint32_t *parent, uint32_t *frame_id)
{
        if (!r || stack_id == TRACE_STACK_EMPTY || stack_id >= r->n_stacks)
                return TRACE_ERR_ARG;
        if (parent)
                *parent = r->stack_parent[stack_id];
        if (frame_id)
                *frame_id = r->stack_frame[stack_id];
        return 0;
}

TRACE_API uint32_t trace_reader_stack_depth(const struct trace_reader *r, uint32_t stack_id)
{
        if (!r || stack_id >= r->n_stacks)
                return 0;
        return r->stack_depth[stack_id];
}

TRACE_API int trace_reader_stack_frames(const struct trace_reader *r, uint32_t stack_id,
                                        uint32_t *frames, size_t cap)
{
        if (!r || stack_id >= r->n_stacks || (cap && !frames))
                return TRACE_ERR_ARG;
        uint32_t depth = r->stack_depth[stack_id];
        if (depth > INT32_MAX)
                return TRACE_ERR_ARG;
        /* Walk from the top (depth d) to the root, writing frames[d - 1] first. */
        uint32_t s = stack_id;
        for (uint32_t d = depth; d > 0; d--) {
                if (d - 1 < cap)
                        frames[d - 1] = r->stack_frame[s];
                s = r->stack_parent[s];
        }
        return (int)depth;
}

TRACE_API uint32_t trace_reader_thread_count(const struct trace_reader *r)
{
        return r ? r->n_threads : 0;
}

TRACE_API int trace_reader_thread_at(const struct trace_reader *r, uint32_t i,
                                     struct trace_thread *out)
{
        if (!r || !out || i >= r->n_threads)
                return TRACE_ERR_ARG;
        const struct rthread *t = &r->threads[i + 1];
        out->ref = i + 1;
        out->pid = t->pid;
        out->tid = t->tid;
        out->python_thread_id = t->python_thread_id;
        out->name = t->name;
        out->first_ns = t->samples ? t->first_ns : -1;
        out->last_ns = t->samples ? t->last_ns : -1;
        out->samples = t->samples;
        return 0;
}

TRACE_API void trace_reader_set_view(struct trace_reader *r, enum trace_view view)
{
        if (r)
                r->view = view == TRACE_VIEW_TASKS ? TRACE_VIEW_TASKS : TRACE_VIEW_THREADS;
}

TRACE_API int trace_reader_thread_task(const struct trace_reader *r, uint32_t i,
                                       uint32_t *thread_ref, uint64_t *task_addr)
{
        if (!r || i >= r->n_threads)
                return TRACE_ERR_ARG;
        const struct rthread *t = &r->threads[i + 1];
        if (!t->task_of)
                return 0;
        if (thread_ref)
                *thread_ref = t->task_of;
        if (task_addr)
                *task_addr = t->task_addr;
        return 1;
}

TRACE_API uint32_t trace_reader_task_count(const struct trace_reader *r)
{
        return r ? r->n_tasks : 0;
}

TRACE_API uint32_t trace_reader_process_count(const struct trace_reader *r)
{
        return r ? r->n_processes : 0;
}

TRACE_API int trace_reader_process_at(const struct trace_reader *r, uint32_t i,
                                      struct trace_process *out)
{
        if (!r || !out || i >= r->n_processes)
                return TRACE_ERR_ARG;
        const struct rprocess *p = &r->processes[i];
        out->pid = p->pid;
        out->cmdline = p->cmdline;
        out->python_version = p->python_version;
        out->python_build = p->python_build;
        out->exit_status = p->exit_status;
        out->end_ns = p->end_ns;
        return 0;
}

TRACE_API int trace_reader_process_origin(const struct trace_reader *r, uint32_t i,
                                          uint32_t *recording_id, int32_t *source_pid)
{
        if (!r || i >= r->n_processes)
                return TRACE_ERR_ARG;
        const struct rprocess *p = &r->processes[i];
        if (recording_id)
                *recording_id = p->recording ? p->recording : 1;
        if (source_pid)
                *source_pid = p->source_pid ? p->source_pid : p->pid;
        return 0;
}

TRACE_API uint32_t trace_reader_recording_count(const struct trace_reader *r)
{
        if (!r || !r->loaded)
                return 0;
        return r->n_recordings ? r->n_recordings : 1;
}

TRACE_API int trace_reader_recording_at(const struct trace_reader *r, uint32_t i,
                                        struct trace_recording *out)
{
        if (!r || !out || !r->loaded || i >= trace_reader_recording_count(r))
                return TRACE_ERR_ARG;
        if (r->n_recordings) {
                const struct rrecording *rec = &r->recordings[i];
                *out = (struct trace_recording){
                    i + 1,          rec->file,   rec->host, rec->start_wall_ns, rec->duration_ns,
                    rec->offset_ns, rec->samples};
                return 0;
        }
        /* A single recording: its meta describes it. */
        struct trace_recording one = {.id = 1, .start_wall_ns = -1, .duration_ns = -1};
        int64_t v;
        one.host = trace_reader_meta(r, TRACE_META_HOST);
        if (meta_int(r, TRACE_META_START_WALL_NS, &v))
                one.start_wall_ns = v;
        if (meta_int(r, TRACE_META_DURATION_NS, &v) && v >= 0)
                one.duration_ns = v;
        one.samples = r->n_samples;
        *out = one;
        return 0;
}

TRACE_API bool trace_reader_recording_meta_at(const struct trace_reader *r, uint32_t id, size_t i,
                                              const char **key, const char **value)
{
        if (!r || !r->loaded || id == 0 || id > trace_reader_recording_count(r))
                return false;
        if (!r->n_recordings)
                return trace_reader_meta_at(r, i, key, value);
        const struct rrecording *rec = &r->recordings[id - 1];
        if (i >= rec->n_meta)
                return false;
        if (key)
                *key = rec->meta_keys[i];
        if (value)
                *value = rec->meta_values[i];
        return true;
}

TRACE_API uint32_t trace_reader_source_count(const struct trace_reader *r)
{
        return r && r->loaded ? r->n_sources : 0;
}

TRACE_API int trace_reader_source_at(const struct trace_reader *r, uint32_t i,
                                     struct trace_source *out)
{
        if (!r || !out || !r->loaded || i >= r->n_sources)
                return TRACE_ERR_ARG;
        const struct rsource *src = &r->sources[i];
        *out = (struct trace_source){r->strings[src->file], src->size, src->mtime_ns, src->stored};
        return 0;
}

/* Inflate a zlib stream into exactly `size` bytes at `out`; false when it is anything else. */
static bool inflate_exact(const void *in, size_t in_len, uint8_t *out, size_t size)
{
        z_stream z = {0};
        if (inflateInit(&z) != Z_OK)
                return false;
        z.next_in = (Bytef *)(uintptr_t)in;
        z.avail_in = (uInt)in_len;
        z.next_out = out;
        z.avail_out = (uInt)size;
        int zr = inflate(&z, Z_FINISH);
        /* The whole input, one stream, exactly `size` bytes: nothing left on either side. */
        bool ok = zr == Z_STREAM_END && z.avail_in == 0 && z.avail_out == 0;
        inflateEnd(&z);
        return ok;
}

TRACE_API int trace_reader_source(struct trace_reader *r, const char *file, char **data,
                                  size_t *len)
{
        if (!r || !file || !data || !len)
                return TRACE_ERR_ARG;
        if (!r->loaded)
                return fail(r, TRACE_ERR_STATE, "the trace could not be opened");
        const struct rsource *src = NULL;
        for (uint32_t i = 0; i < r->n_sources && !src; i++)
                if (!strcmp(r->strings[r->sources[i].file], file))
                        src = &r->sources[i];
        if (!src)
                return 0;
        sqlite3_stmt *st;
        int rc = sqlite3_prepare_v2(r->db, "SELECT encoding, data FROM sources WHERE file = ?1", -1,
                                    &st, NULL);
        if (rc != SQLITE_OK)
                return fail_sqlite(r, rc, "reading a source");
        sqlite3_bind_int64(st, 1, src->file);
        rc = sqlite3_step(st);
        int status = 0;
        char *text = NULL;
        if (rc != SQLITE_ROW) {
                status = rc == SQLITE_DONE ? corrupt(r, "the source of %s vanished", file)
                                           : fail_sqlite(r, rc, "reading a source");
                goto out;
        }
        int type = sqlite3_column_type(st, 1);
        const void *blob = sqlite3_column_blob(st, 1);
        size_t blob_len = (size_t)sqlite3_column_bytes(st, 1);
        if (!blob && blob_len == 0 && sqlite3_errcode(r->db) == SQLITE_NOMEM) {
                status = fail_nomem(r);
                goto out;
        }
        /* The index said how big it is: a row that changed since is not trusted. */
        if (type != SQLITE_BLOB || blob_len != src->stored ||
            sqlite3_column_int64(st, 0) != src->encoding) {
                status = corrupt(r, "the source of %s is not what its index says", file);
                goto out;
        }
        if (!(text = malloc(src->size + 1))) {
                status = fail_nomem(r);
                goto out;
        }
        bool ok = true;
        if (src->encoding == SOURCE_ZLIB)
                ok = inflate_exact(blob, blob_len, (uint8_t *)text, src->size);
        else if (src->size)
                memcpy(text, blob, src->size);
        if (!ok || memchr(text, '\0', src->size)) {
                status = corrupt(r, "the source of %s %s", file,
                                 ok ? "is not text (a NUL byte)" : "does not inflate to its size");
                goto out;
        }
        text[src->size] = '\0';
        *data = text;
        *len = src->size;
        text = NULL;
        status = 1;
out:
        free(text);
        sqlite3_finalize(st);
        return status;
}

bool trace_reader_error_at(const struct trace_reader *r, size_t i, int32_t *pid, unsigned *kind,
                           uint64_t *count)
{
        if (!r || i >= r->n_error_rows)
                return false;
        *pid = r->error_rows[i].pid;
        *kind = r->error_rows[i].kind;
        *count = r->error_rows[i].count;
        return true;
}

/* ------------------------------------------------------------------ */
/* Samples                                                             */
/* ------------------------------------------------------------------ */

/* Where a scan delivers samples: a callback, or counts per stack. */
struct sink {
        trace_sample_fn fn;
        void *ctx;
        uint64_t *counts;
        uint64_t total;
};

/* Which threads a filter keeps: want[ref] for refs 1..n_threads. */
static int thread_mask(struct trace_reader *r, const struct trace_filter *f, bool **out)
{
        bool *want = calloc((size_t)r->n_threads + 1, sizeof(bool));
        if (!want)
                return fail_nomem(r);
        for (uint32_t ref = 1; ref <= r->n_threads; ref++) {
                bool keep = true;
                if (f && f->n_pids) {
                        keep = false;
                        for (size_t i = 0; i < f->n_pids; i++)
                                keep |= f->pids[i] == r->threads[ref].pid;
                }
                keep &= (r->view == TRACE_VIEW_TASKS) == (r->threads[ref].task_of != 0);
                if (keep && f && f->n_threads) {
                        keep = false;
                        for (size_t i = 0; i < f->n_threads; i++)
                                keep |= f->threads[i] == ref;
                }
                want[ref] = keep;
        }
        *out = want;
        return 0;
}

/*
 * The blob of chunk `id` of a set, read from the file that holds it (see
 * struct trace_set_file): scans go through the ids in order, so one file
 * is open at a time, in one read transaction, and closed by the scan's
 * end (the last file may be one a recorder still commits to). *blob stays
 * valid until the next call. 0, or a status with the message on `r`.
 */
static int set_chunk_blob(struct trace_reader *r, int64_t id, const void **blob, int *len)
{
        size_t k =
            r->seg_open == SIZE_MAX || id <= r->set_files[r->seg_open].base ? 0 : r->seg_open;
        while (k < r->n_set_files && id > r->set_files[k].last_id)
                k++;
        if (k == r->n_set_files || id <= r->set_files[k].base)
                return corrupt(r, "sample chunk %lld is in no file of the set", (long long)id);
        const char *path = r->set_files[k].path;
        const char *name = r->set_files[k].name ? r->set_files[k].name : path;
        if (k != r->seg_open) {
                set_file_close(r);
                int rc = open_untrusted(path, SQLITE_OPEN_READONLY, &r->seg_db);
                /*
                 * Each page is read once: a page cache of SQLite's default
                 * size would be memory taken and given back once a file.
                 */
                if (rc == SQLITE_OK)
                        rc = sqlite3_exec(r->seg_db, "PRAGMA cache_size = 16; BEGIN", NULL, NULL,
                                          NULL);
                if (rc == SQLITE_OK)
                        rc = sqlite3_prepare_v2(r->seg_db,
                                                "SELECT data FROM sample_chunks WHERE id = ?1", -1,
                                                &r->seg_st, NULL);
                if (rc != SQLITE_OK) {
                        int status =
                            fail(r, TRACE_ERR_IO,
                                 "%s: %s (its samples are read from it as the report "
                                 "goes: was it removed or replaced since?)",
                                 name, r->seg_db ? sqlite3_errmsg(r->seg_db) : sqlite3_errstr(rc));
                        set_file_close(r);
                        return status;
                }
                r->seg_open = k;
        }
        sqlite3_reset(r->seg_st);
        sqlite3_bind_int64(r->seg_st, 1, id - r->set_files[k].base);
        int rc = sqlite3_step(r->seg_st);
        if (rc == SQLITE_ROW) {
                *blob = sqlite3_column_blob(r->seg_st, 0);
                *len = sqlite3_column_bytes(r->seg_st, 0);
                if (!*blob && sqlite3_errcode(r->seg_db) == SQLITE_NOMEM)
                        return fail_nomem(r);
                return 0;
        }
        if (rc == SQLITE_DONE)
                return fail(r, TRACE_ERR_CORRUPT,
                            "%s: its sample chunk %lld is gone (the file was changed since it "
                            "was opened?)",
                            name, (long long)(id - r->set_files[k].base));
        return fail(r, (rc & 0xff) == SQLITE_NOMEM ? TRACE_ERR_NOMEM : TRACE_ERR_IO,
                    "%s: reading samples: %s", name, sqlite3_errmsg(r->seg_db));
}

static int scan(struct trace_reader *r, const struct trace_filter *f, struct sink *sink)
{
        if (!r->loaded)
                return fail(r, TRACE_ERR_STATE, "the trace could not be opened");
        if (f && ((f->n_pids && !f->pids) || (f->n_threads && !f->threads) ||
                  (f->to_ns && f->to_ns <= f->from_ns)))
                return fail(r, TRACE_ERR_ARG, "bad filter: NULL list or empty time window");
        int64_t from = f ? f->from_ns : INT64_MIN;
        int64_t to = f && f->to_ns ? f->to_ns : INT64_MAX; /* exclusive */
        unsigned require = f ? f->state_require : 0, exclude = f ? f->state_exclude : 0;
        bool *want = NULL;
        int rc = thread_mask(r, f, &want);
        if (rc < 0)
                return rc;
        sqlite3_stmt *st;
        /* Only chunks of the snapshot loaded at open: later ones may use newer stacks. */
        rc = sqlite3_prepare_v2(r->db,
                                "SELECT id, thread, first_ns, last_ns, count, data "
                                "FROM sample_chunks WHERE id <= ?1 AND last_ns >= ?2 "
                                "AND first_ns < ?3 ORDER BY id",
                                -1, &st, NULL);
        if (rc != SQLITE_OK) {
                free(want);
                return fail_sqlite(r, rc, "reading samples");
        }
        sqlite3_bind_int64(st, 1, r->max_chunk_id);
        sqlite3_bind_int64(st, 2, from);
        sqlite3_bind_int64(st, 3, to);
        int status = 0;
        while (status == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
                int64_t id = sqlite3_column_int64(st, 0), thread, first, last, count;
                if (!col_int(st, 1, 1, r->n_threads, &thread) ||
                    !col_int(st, 2, INT64_MIN, INT64_MAX, &first) ||
                    !col_int(st, 3, INT64_MIN, INT64_MAX, &last) ||
                    !col_int(st, 4, 1, UINT32_MAX, &count)) {
                        status = corrupt(r, "sample chunk %lld has a bad thread, time or count",
                                         (long long)id);
                        break;
                }
                if (!want[thread])
                        continue;
                /* The blob is fetched only now, for the chunks we decode. */
                const void *blob = NULL;
                int len = 0;
                if (r->set_files) {
                        if ((status = set_chunk_blob(r, id, &blob, &len)) < 0)
                                break;
                } else {
                        blob = sqlite3_column_blob(st, 5);
                        len = sqlite3_column_bytes(st, 5);
                        if (!blob && sqlite3_errcode(r->db) == SQLITE_NOMEM) {
                                status = fail_nomem(r);
                                break;
                        }
                }
                struct chunk_cursor c = {0};
                const char *why = NULL;
                int d = chunk_cursor_init(&c, blob, (size_t)len, first, last, count,
                                          r->n_file_stacks, &why);
                bool whole = first >= from && last < to && !require && !exclude;
                struct trace_sample s = {.thread = (uint32_t)thread};
                while (d == 0) {
                        d = chunk_cursor_next(&c, &why);
                        if (d != 1)
                                break; /* 0: end of a consistent chunk */
                        d = 0;
                        if (!whole && (c.t_ns < from || c.t_ns >= to ||
                                       (c.state & require) != require || (c.state & exclude)))
                                continue;
                        /* (Not into c.stack: the cursor repeats it for "same" records.) */
                        uint32_t stack = r->canon ? r->canon[c.stack] : c.stack;
                        if (sink->counts) {
                                sink->counts[stack]++;
                                sink->total++;
                                continue;
                        }
                        s.t_ns = c.t_ns;
                        s.stack = stack;
                        s.state = c.state;
                        int stop = sink->fn(sink->ctx, &s);
                        if (stop) {
                                status = stop;
                                break;
                        }
                }
                if (d < 0)
                        status = corrupt(r, "sample chunk %lld (thread %lld): %s", (long long)id,
                                         (long long)thread, why);
        }
        if (status == 0 && rc != SQLITE_DONE)
                status = fail_sqlite(r, rc, "reading samples");
        sqlite3_finalize(st);
        set_file_close(r);
        free(want);
        return status;
}

/* (parent, frame) -> stack of the view, open addressing. */
struct view_map {
        uint64_t *keys; /* parent << 32 | frame; frame 0 never used: 0 is empty */
        uint32_t *vals;
        size_t cap;
};

static uint32_t *view_slot(struct view_map *m, uint64_t key)
{
        size_t j = pf_hash_u64(0, key) & (m->cap - 1);
        while (m->keys[j] && m->keys[j] != key)
                j = (j + 1) & (m->cap - 1);
        m->keys[j] = key;
        return &m->vals[j];
}

static int grow_u32(uint32_t **p, size_t n)
{
        uint32_t *q = realloc(*p, n * sizeof(**p));
        if (!q)
                return -1;
        *p = q;
        return 0;
}

/* The frame standing for module string `module` in the view (appended once). */
static int module_frame(struct trace_reader *r, uint32_t module, uint32_t *by_module, uint32_t *out)
{
        if (by_module[module]) {
                *out = by_module[module];
                return 0;
        }
        const char *path = r->strings[module];
        const char *base = strrchr(path, '/');
        const char **strings = realloc(r->strings, ((size_t)r->n_strings + 2) * sizeof(*strings));
        if (!strings)
                return fail_nomem(r);
        r->strings = strings;
        r->strings[++r->n_strings] = base ? base + 1 : path;
        struct rframe *frames = realloc(r->frames, ((size_t)r->n_frames + 2) * sizeof(*frames));
        if (!frames)
                return fail_nomem(r);
        r->frames = frames;
        r->frames[++r->n_frames] =
            (struct rframe){r->n_strings, 0, module, -1, -1, TRACE_FRAME_NATIVE, module, 0};
        by_module[module] = r->n_frames;
        *out = r->n_frames;
        return 0;
}

TRACE_API int trace_reader_set_native_view(struct trace_reader *r, enum trace_native_view view)
{
        if (!r || (view != TRACE_NATIVE_SHOW && view != TRACE_NATIVE_HIDE &&
                   view != TRACE_NATIVE_BY_MODULE))
                return TRACE_ERR_ARG;
        if (r->native_view_set && r->native_view == view)
                return 0;
        if (!r->loaded || r->native_view_set)
                return fail(r, TRACE_ERR_STATE, "the native view is set once, after opening");
        r->native_view_set = true;
        r->native_view = view;
        bool any = false;
        for (uint32_t i = 1; i <= r->n_frames && !any; i++)
                any = r->frames[i].kind == TRACE_FRAME_NATIVE;
        if (view == TRACE_NATIVE_SHOW || !any)
                return 0;
        uint32_t n = r->n_file_stacks;
        struct view_map m = {0};
        for (m.cap = 16; m.cap < (size_t)n * 2; m.cap *= 2)
                ;
        m.keys = calloc(m.cap, sizeof(*m.keys));
        m.vals = calloc(m.cap, sizeof(*m.vals));
        uint32_t *canon = calloc(n, sizeof(*canon));
        uint32_t *by_module = calloc((size_t)r->n_strings + 1, sizeof(*by_module));
        int rc = 0;
        if (!m.keys || !m.vals || !canon || !by_module) {
                rc = fail_nomem(r);
                goto out;
        }
        /* Parents come before their children (checked at load): one pass. */
        uint32_t cap = n;
        for (uint32_t s = 1; s < n && rc == 0; s++) {
                uint32_t parent = canon[r->stack_parent[s]];
                uint32_t frame = r->stack_frame[s];
                const struct rframe *f = &r->frames[frame];
                if (f->kind == TRACE_FRAME_NATIVE) {
                        if (view == TRACE_NATIVE_HIDE || !f->module) {
                                canon[s] = parent;
                                continue;
                        }
                        if ((rc = module_frame(r, f->module, by_module, &frame)) < 0)
                                break;
                        /* A run of frames of one module is one frame. */
                        if (parent != TRACE_STACK_EMPTY && r->stack_frame[parent] == frame) {
                                canon[s] = parent;
                                continue;
                        }
                }
                uint32_t *slot = view_slot(&m, (uint64_t)parent << 32 | frame);
                if (*slot) {
                        canon[s] = *slot;
                        continue;
                }
                uint32_t id = s;
                if (parent != r->stack_parent[s] || frame != r->stack_frame[s]) {
                        if (r->n_stacks == UINT32_MAX - 1) {
                                rc = fail(r, TRACE_ERR_ARG, "too many stacks");
                                break;
                        }
                        if (r->n_stacks == cap) {
                                cap = cap * 2 + 16;
                                if (grow_u32(&r->stack_parent, cap) < 0 ||
                                    grow_u32(&r->stack_frame, cap) < 0 ||
                                    grow_u32(&r->stack_depth, cap) < 0) {
                                        rc = fail_nomem(r);
                                        break;
                                }
                        }
                        id = r->n_stacks++;
                        r->stack_parent[id] = parent;
                        r->stack_frame[id] = frame;
                        r->stack_depth[id] = r->stack_depth[parent] + 1;
                }
                *slot = id;
                canon[s] = id;
        }
out:
        free(m.keys);
        free(m.vals);
        free(by_module);
        if (rc < 0) {
                free(canon);
                return rc;
        }
        r->canon = canon;
        return 0;
}

TRACE_API int trace_reader_foreach_sample(struct trace_reader *r, const struct trace_filter *filter,
                                          trace_sample_fn fn, void *ctx)
{
        if (!r || !fn)
                return TRACE_ERR_ARG;
        struct sink sink = {.fn = fn, .ctx = ctx};
        return scan(r, filter, &sink);
}

TRACE_API int trace_reader_count_by_stack(struct trace_reader *r, const struct trace_filter *filter,
                                          uint64_t **counts, uint64_t *total)
{
        if (!r || !counts)
                return TRACE_ERR_ARG;
        struct sink sink = {.counts = calloc(r->n_stacks ? r->n_stacks : 1, sizeof(uint64_t))};
        if (!sink.counts)
                return fail_nomem(r);
        int rc = scan(r, filter, &sink);
        if (rc != 0) {
                free(sink.counts);
                return rc;
        }
        *counts = sink.counts;
        if (total)
                *total = sink.total;
        return 0;
}
