/*
 * trace_internal.h - what the parts of libtrace share with each other and
 * with the unit tests, but not with the tools: the file stamp, the embedded
 * schema, status mapping and the writer's test hooks. The unit tests link the
 * static build of libtrace and may call everything declared here; the shared
 * library does not export any of it.
 */
#ifndef PYFLAME_TRACE_INTERNAL_H
#define PYFLAME_TRACE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "trace.h"

/* PRAGMA application_id of every trace: ASCII "PYFR". */
#define TRACE_APPLICATION_ID 0x50594652u

/* schema/trace.sql, embedded at build time by schema/embed.py. */
extern const char trace_schema_sql[];

/* Map a SQLite result code to the closest trace_status (never TRACE_OK). */
int trace_status_from_sqlite(int sqlite_rc);

/*
 * Writer defaults. A flush happens when this much CLOCK_MONOTONIC time has
 * passed since the previous one; a thread's samples are cut into a new chunk
 * after this many samples (bounding blob size and making time windows skip
 * whole chunks).
 */
#define TRACE_WRITER_FLUSH_INTERVAL_NS 1000000000LL
#define TRACE_WRITER_CHUNK_MAX         4096u

/*
 * Test hooks: change the automatic flush interval (0: flush at every sample;
 * negative: never automatically) and the chunk size (>= 1) of a writer.
 */
void trace_writer_set_chunk_max(struct trace_writer *w, uint32_t samples);

/*
 * What merging (merge.c) needs of the writer and the reader beyond the
 * public API. The writer's functions return 0 or a negative status with the
 * message on the writer, like the public ones.
 */

/* Set the writer's message and return `status`. */
int trace_writer_fail(struct trace_writer *w, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The writer's time origin: CLOCK_MONOTONIC at create (meta start_mono_ns). */
int64_t trace_writer_origin_ns(const struct trace_writer *w);
/* Has a process with this pid been added? */
bool trace_writer_has_process(const struct trace_writer *w, int32_t pid);
/* Record where process `pid` came from (processes.recording and source_pid). */
int trace_writer_set_process_origin(struct trace_writer *w, int32_t pid, uint32_t recording,
                                    int32_t source_pid);
/*
 * Add a row to recordings (desc->id is ignored; the new id, 1.., is set in
 * *id) and then its meta with trace_writer_add_recording_meta. Strings are
 * copied; a value that is a canonical decimal integer is stored as INTEGER.
 */
int trace_writer_new_recording(struct trace_writer *w, const struct trace_recording *desc,
                               uint32_t *id);
int trace_writer_add_recording_meta(struct trace_writer *w, uint32_t id, const char *key,
                                    const char *value);

/*
 * For joining segments (segments.c): the writer's database while it is
 * open (NULL otherwise), for SQL of the caller's own; and closing it after
 * such SQL, leaving the file as that SQL made it (no flush, no meta).
 */
struct sqlite3;
struct sqlite3 *trace_writer_db(struct trace_writer *w);
int trace_writer_close_written(struct trace_writer *w);

/*
 * The SQLite URI naming file `path` (any bytes; percent-encoded, so that
 * no name is read as a URI's query, fragment or authority), with `query`
 * ("mode=ro", say) when not NULL: for ATTACH and opens with
 * SQLITE_OPEN_URI. Malloc'd; NULL when out of memory.
 */
char *trace_sqlite_uri(const char *path, const char *query);

/*
 * Join the files of one rotation, given in any order, into a new trace at
 * `out` (replaced if it exists) for reading them as one (trace_reader_
 * open_set): trace_join_segments(), except that
 * - a missing file is a gap, kept in meta gaps ("FROM_NS,TO_NS,FIRST,LAST"
 *   per gap, ';' between: the gap's span on the joined time line and the
 *   segments missing), not an error;
 * - the last file may be one still being written;
 * - the samples stay where they are: each file's sample_chunks rows are
 *   copied with their times moved and an empty blob, under id base + the
 *   file's own id, and `files` lists the files in time order with their
 *   bases, for the reader to read each chunk's blob from its file;
 * - the table stack_counts (a summary for SQL users; the reader never
 *   reads it) is left empty.
 * Files of different sets, or not of a rotation, are refused with a
 * message saying to merge. names[i] (names NULL: paths[i]) is file i's
 * name in messages, where it is read from a copy. Returns as
 * trace_join_segments() does; on success *files (n_files entries, the
 * caller frees each path, each name and the array) is set, else left NULL.
 */
#define TRACE_GAPS_MAX 4096
struct trace_set_file {
        char *path;      /* where its chunks are read */
        char *name;      /* its name in messages, when not path (a rolled-back copy) */
        int64_t base;    /* a chunk's id in the join is base + its id in the file */
        int64_t last_id; /* the join's largest chunk id from this file (base: none) */
};
int trace_join_set(const char *out, const char *const *paths, const char *const *names, size_t n,
                   struct trace_writer **out_w, struct trace_set_file **files);

/* The i-th row of the errors table: pid (0: the recorder), kind (folded), count. */
bool trace_reader_error_at(const struct trace_reader *r, size_t i, int32_t *pid, unsigned *kind,
                           uint64_t *count);

#endif
