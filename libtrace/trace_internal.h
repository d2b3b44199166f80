/*
 * trace_internal.h - what the parts of libtrace share with each other and
 * with the unit tests, but not with the tools: the file stamp, the embedded
 * schema, status mapping and the writer's test hooks. The unit tests link the
 * static build of libtrace and may call everything declared here; the shared
 * library does not export any of it.
 */
#ifndef PYFLAME_TRACE_INTERNAL_H
#define PYFLAME_TRACE_INTERNAL_H

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
void trace_writer_set_flush_interval(struct trace_writer *w, int64_t interval_ns);
void trace_writer_set_chunk_max(struct trace_writer *w, uint32_t samples);

#endif
