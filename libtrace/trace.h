/*
 * trace.h - the public interface of libtrace, the one library that knows the
 * pyflame trace file format (a SQLite database, specified in schema/trace.sql).
 *
 * pyflame-record writes traces through a struct trace_writer; the report tools
 * read them through a struct trace_reader. Both handles are opaque. Every
 * function returns 0 (or a documented non-negative value) on success and a
 * negative enum trace_status on failure; the detail is kept on the handle and
 * read with trace_writer_errmsg() / trace_reader_errmsg(). The library never
 * prints, logs or exits. Output parameters are left untouched on failure.
 *
 * Times in this interface are nanoseconds. Sample timestamps handed to the
 * writer are CLOCK_MONOTONIC nanoseconds; the reader reports them relative to
 * the start of the recording.
 */
#ifndef PYFLAME_TRACE_H
#define PYFLAME_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TRACE_BUILDING_LIBRARY)
#define TRACE_API __attribute__((visibility("default")))
#else
#define TRACE_API
#endif

enum trace_status {
        TRACE_OK = 0,
        TRACE_ERR_NOMEM = -1,      /* out of memory */
        TRACE_ERR_IO = -2,         /* cannot open, read or write the file */
        TRACE_ERR_EXISTS = -3,     /* output exists and TRACE_CREATE_FORCE not given */
        TRACE_ERR_NOT_SQLITE = -4, /* the file is not a SQLite database */
        TRACE_ERR_NOT_TRACE = -5,  /* a SQLite database, but not a pyflame trace */
        TRACE_ERR_TOO_NEW = -6,    /* written by a newer pyflame: format version too high */
        TRACE_ERR_CORRUPT = -7,    /* a pyflame trace, but damaged or truncated */
        TRACE_ERR_ARG = -8,        /* invalid argument (unknown id, bad range...) */
        TRACE_ERR_STATE = -9,      /* call not valid now (e.g. writer already finalized) */
};

/* Human-readable name of a status code; static storage, never NULL. */
TRACE_API const char *trace_status_str(int status);

/*
 * Thread state flags carried by each sample (a bit set). The same values are
 * stored on disk and are frozen: never renumber them.
 */
#define TRACE_STATE_ON_CPU    0x1u /* OS thread was running (R) when sampled */
#define TRACE_STATE_HOLDS_GIL 0x2u /* thread held the GIL (or, free-threaded: was attached) */
#define TRACE_STATE_NO_GIL    0x4u /* interpreter has no GIL (free-threaded build, GIL disabled) */
#define TRACE_STATE_MASK      0x7u

/* Frame kinds (frozen on disk too). */
enum trace_frame_kind {
        TRACE_FRAME_PYTHON = 0,  /* a Python function frame */
        TRACE_FRAME_NATIVE = 1,  /* a native (C) frame (pyflame-record --native) */
        TRACE_FRAME_SPECIAL = 2, /* a pseudo frame made by pyflame, e.g. "<unknown>" */
        TRACE_FRAME_TASK = 3,    /* an asyncio task: function is its name, file "<task>" */
};

/* The id of the empty stack (a thread with no Python frame). */
#define TRACE_STACK_EMPTY 0u

/* Current format version written by this library (PRAGMA user_version). */
#define TRACE_FORMAT_VERSION 2

/*
 * Well-known meta keys (schema/trace.sql describes each). The writer sets
 * the first group itself; the recorder sets the second.
 */
#define TRACE_META_FORMAT_VERSION "format_version"
#define TRACE_META_TOOL_VERSION   "tool_version"
#define TRACE_META_HOST           "host"
#define TRACE_META_KERNEL         "kernel"
#define TRACE_META_START_WALL_NS  "start_wall_ns"
#define TRACE_META_START_MONO_NS  "start_mono_ns"
#define TRACE_META_END_WALL_NS    "end_wall_ns"
#define TRACE_META_END_MONO_NS    "end_mono_ns"
#define TRACE_META_DURATION_NS    "duration_ns"
#define TRACE_META_SAMPLES        "samples"
#define TRACE_META_ERRORS         "errors"
#define TRACE_META_RATE_HZ        "rate_hz"
#define TRACE_META_MODE           "mode" /* "nonblocking" or "blocking" */
#define TRACE_META_PIDS           "pids" /* space-separated */
#define TRACE_META_CMDLINE        "cmdline"
#define TRACE_META_PYTHON_VERSION "python_version"
#define TRACE_META_PYTHON_BUILD   "python_build"
#define TRACE_META_SOURCE_FILES   "source_files"   /* sources stored */
#define TRACE_META_SOURCE_BYTES   "source_bytes"   /* their text, bytes */
#define TRACE_META_SOURCE_SKIPPED "source_skipped" /* files of frames not stored */
#define TRACE_META_ASYNC          "async"          /* 1: recorded with asyncio tasks */
#define TRACE_META_TASK_SAMPLES   "task_samples"   /* samples of tasks' streams */
/*
 * Rotation (trace_writer_rotate): the set a file belongs to (set by the
 * recorder, kept by each rotation) and its 1-based place in it (kept by
 * the writer; absent before the first rotation means 1).
 */
#define TRACE_META_SEGMENT_SET "segment_set"
#define TRACE_META_SEGMENT     "segment"

/* ------------------------------------------------------------------ */
/* Writer                                                              */
/* ------------------------------------------------------------------ */

struct trace_writer;

#define TRACE_CREATE_FORCE 0x1u /* replace an existing file */

/*
 * Create a new trace file at `path`. On success *out is a writer and 0 is
 * returned. On failure a negative status is returned; if memory allowed,
 * *out is still set to a handle whose errmsg says what went wrong and which
 * must be released with trace_writer_free(). The start time (wall clock and
 * monotonic) is taken now and stored in meta.
 */
TRACE_API int trace_writer_create(const char *path, unsigned flags, struct trace_writer **out);

/* Message describing the last failure on `w`; "" when none. Owned by `w`. */
TRACE_API const char *trace_writer_errmsg(const struct trace_writer *w);

/*
 * Set a meta value (see schema/trace.sql for the well-known keys). Replaces an
 * earlier value of the same key. Strings are copied.
 */
TRACE_API int trace_writer_set_meta(struct trace_writer *w, const char *key, const char *value);
TRACE_API int trace_writer_set_meta_int(struct trace_writer *w, const char *key, int64_t value);

/* A frame as the recorder describes it. Strings need not outlive the call. */
struct trace_frame_desc {
        const char *function; /* code object name, e.g. "run" (required) */
        const char *qualname; /* e.g. "Worker.run"; NULL when the version has none */
        const char *file;     /* file name as the target knows it (required) */
        int32_t line;         /* current line, or -1 when unknown */
        int32_t first_line;   /* first line of the function, or -1 */
        enum trace_frame_kind kind;
};

/*
 * Intern a frame; identical descriptions give the same id. Ids are >= 1 and
 * dense. In-memory hash tables only: no database access.
 */
TRACE_API int trace_writer_intern_frame(struct trace_writer *w, const struct trace_frame_desc *f,
                                        uint32_t *frame_id);

/*
 * Intern a native frame: trace_writer_intern_frame() with the frame's
 * place in its binary, the module (path of the shared object or
 * executable, required) and the ELF address in it (`offset`: the
 * function's start when the function is known, else the instruction's).
 * f->kind must be TRACE_FRAME_NATIVE. Frames that differ only in module or
 * offset are distinct frames.
 */
TRACE_API int trace_writer_intern_native_frame(struct trace_writer *w,
                                               const struct trace_frame_desc *f, const char *module,
                                               uint64_t offset, uint32_t *frame_id);

/*
 * Intern the stack made of `parent` (TRACE_STACK_EMPTY for a root) with
 * `frame` on top (the callee). Identical (parent, frame) pairs give the same
 * id. Stacks therefore form a prefix tree rooted at TRACE_STACK_EMPTY.
 */
TRACE_API int trace_writer_intern_stack(struct trace_writer *w, uint32_t parent, uint32_t frame,
                                        uint32_t *stack_id);

/* Convenience: intern a whole stack given root-first frame ids. */
TRACE_API int trace_writer_intern_stack_frames(struct trace_writer *w, const uint32_t *frames,
                                               size_t depth, uint32_t *stack_id);

/* A process being recorded. */
struct trace_process_desc {
        int32_t pid;                /* pid as seen by the recorder (host namespace) */
        const char *cmdline;        /* space-separated command line, or NULL */
        const char *python_version; /* e.g. "3.12.1", or NULL */
        const char *python_build;   /* e.g. "shared", "static", "static,free-threaded" */
};

/* Register a process (once per pid; a second call updates it). */
TRACE_API int trace_writer_add_process(struct trace_writer *w, const struct trace_process_desc *p);

/* Mark a process as ended (exit status, or -1 when unknown) at monotonic time t_ns. */
TRACE_API int trace_writer_end_process(struct trace_writer *w, int32_t pid, int exit_status,
                                       int64_t t_ns);

/* A thread of a recorded process. */
struct trace_thread_desc {
        int32_t pid;               /* owning process (registered with add_process) */
        int64_t tid;               /* OS thread id in the recorder's namespace, or -1 */
        uint64_t python_thread_id; /* threading.get_ident() value, or 0 */
        const char *name;          /* thread name, or NULL */
};

/*
 * Register a thread and get its reference (>= 1) for add_sample. Calling again
 * with the same (pid, tid, python_thread_id) returns the same reference.
 */
TRACE_API int trace_writer_add_thread(struct trace_writer *w, const struct trace_thread_desc *t,
                                      uint32_t *thread_ref);

/*
 * An asyncio task, run by the event loop of thread `thread_ref`: its samples
 * make a stream of their own, added with trace_writer_add_sample() under the
 * returned reference like a thread's (schema/trace.sql: threads.task_of).
 * Each sample of a task counts it once, in its stack of awaits (joined under
 * the tasks that await it). Calling again with the same thread and address
 * returns the same reference. Task samples are not counted in meta samples
 * nor in stack_counts; meta task_samples counts them.
 */
struct trace_task_desc {
        uint32_t thread_ref; /* the thread running its loop (a thread's ref, not a task's) */
        uint64_t task_addr;  /* the Task object's address in the target */
        const char *name;    /* the task's name, or NULL */
};
TRACE_API int trace_writer_add_task(struct trace_writer *w, const struct trace_task_desc *t,
                                    uint32_t *task_ref);

/*
 * The thread (or task's stream) `thread_ref` is gone: the writer writes
 * what it holds of it at the next flush and then forgets it, so a recorder
 * that sees threads come and go for weeks keeps only the live ones. Ending
 * a thread ends its tasks' streams. The ref must not be used again (the
 * writer may give it to a stream added later); a thread added with the
 * same (pid, tid, python_thread_id) afterwards is a new stream. A thread
 * added n times (the same reference each time) ends at its n-th end.
 */
TRACE_API int trace_writer_end_thread(struct trace_writer *w, uint32_t thread_ref);

/* Set or change a thread's name (e.g. once threading has named it). */
TRACE_API int trace_writer_set_thread_name(struct trace_writer *w, uint32_t thread_ref,
                                           const char *name);

/*
 * Append one sample: thread `thread_ref` was in stack `stack_id` at monotonic
 * time `t_ns` with TRACE_STATE_* flags `state`. Samples of one thread must be
 * appended in non-decreasing time. Buffered in memory; committed by
 * trace_writer_flush(), which add_sample calls itself about once a second, so
 * a recorder that is killed loses at most the last second. A negative status
 * from that automatic flush is returned too; the sample is then kept in
 * memory and the next flush writes it.
 */
TRACE_API int trace_writer_add_sample(struct trace_writer *w, uint32_t thread_ref, int64_t t_ns,
                                      uint32_t stack_id, unsigned state);

/* Kinds of sampling errors counted in the trace. */
enum trace_error_kind {
        TRACE_ERROR_TORN = 0, /* stack changed under the reader; sample dropped */
        TRACE_ERROR_READ = 1, /* memory read failed */
        TRACE_ERROR_LATE = 2, /* the sampler missed its deadline (one per missed tick) */
        TRACE_ERROR_OTHER = 3,
        TRACE_ERROR_UNMATCHED = 4,    /* a native stack its Python stack could not be merged into */
        TRACE_ERROR_NOT_RESIDENT = 5, /* --bpf: a page the walk needed was not resident; dropped */
        TRACE_ERROR_TRUNCATED = 6,    /* cut short (--bpf: the walk's bound; --native: the unwind);
                                         innermost frames kept */
        TRACE_ERROR_INVALID = 7,      /* --bpf: a thread whose state did not validate; dropped */
        TRACE_ERROR_CODE_GONE = 8, /* --bpf: a code object freed before it could be read; dropped */
        TRACE_ERROR_KIND_COUNT
};

/* Count `n` errors of `kind` (for process `pid`, or 0 for the recorder). */
TRACE_API int trace_writer_count_error(struct trace_writer *w, int32_t pid,
                                       enum trace_error_kind kind, uint64_t n);

/* The largest source text a trace holds for one file (schema/trace.sql: sources). */
#define TRACE_SOURCE_MAX_BYTES (16u << 20)

/*
 * Store the text of source file `file` (named as frames name it) in the
 * trace: `len` bytes at `data` (copied; no NUL byte, at most
 * TRACE_SOURCE_MAX_BYTES), with the file's modification time `mtime_ns`
 * (wall clock, ns since the epoch; -1 when unknown). Compressed with zlib
 * now when that makes it smaller, written at the next flush. Returns 0 when
 * stored, 1 when the trace holds a source for `file` already (the first is
 * kept, nothing changes), or a negative status: TRACE_ERR_ARG for a missing
 * name, text too long or not text (a NUL byte), TRACE_ERR_NOMEM.
 */
TRACE_API int trace_writer_add_source(struct trace_writer *w, const char *file, const void *data,
                                      size_t len, int64_t mtime_ns);

/* Commit everything buffered so far (samples, new frames, stacks, threads, meta). */
TRACE_API int trace_writer_flush(struct trace_writer *w);

/*
 * How often add_sample commits by itself (default about once a second);
 * a negative interval never: the caller flushes, e.g. from another thread
 * that owns the writer while the samples arrive.
 */
TRACE_API void trace_writer_set_flush_interval(struct trace_writer *w, int64_t interval_ns);

/*
 * Write end time and counts, commit and close the database. The handle stays
 * valid for errmsg until trace_writer_free(). A trace that was never
 * finalized is still readable up to its last flush.
 */
TRACE_API int trace_writer_finalize(struct trace_writer *w);

/*
 * Rotation: finish the current file at monotonic time `cut_mono_ns` (its
 * end; between the trace's start and now) and go on writing into a new
 * file at `path` (flags as for trace_writer_create) that starts at the cut.
 * Call it between samples: those added before go to the current file,
 * those after to the new one, so nothing is lost or counted twice. The new
 * file is a complete trace on its own: it holds every string, frame, stack,
 * process, thread and stored source the writer knows (ids stay what they
 * were, so earlier ids stay valid) and the meta set so far, with its own
 * start, and counts samples, errors, stack counts and thread spans afresh.
 * Processes that ended before the cut keep their end, a negative time.
 * The current file is closed complete and finalized (end time, duration)
 * and can be read, copied or removed at once.
 *
 * Returns 0, or a negative status with the message on `w`. When the new
 * file cannot be made (TRACE_ERR_EXISTS, TRACE_ERR_IO) the writer goes on
 * writing the current file, as if not called; a failure after the switch
 * (writing the new file) leaves the writer failed.
 */
TRACE_API int trace_writer_rotate(struct trace_writer *w, const char *path, unsigned flags,
                                  int64_t cut_mono_ns);

/* Release the writer (finalizing is not implied: call finalize first). NULL is fine. */
TRACE_API void trace_writer_free(struct trace_writer *w);

struct trace_reader;

/*
 * Merging. Copy everything `src` holds (processes, threads, frames, stacks,
 * every sample, error counts) into `w` as one more recording, whose time 0
 * is placed at `offset_ns` on w's time line (0 aligns recordings at their
 * starts; differences of their meta start_wall_ns align them by wall
 * clock). `file` names the source in the recordings table (may be NULL).
 * The source's meta is kept whole in recording_meta. A source that is
 * itself merged brings its recordings along, their offsets shifted by
 * offset_ns. A pid that an earlier recording already used gets a new,
 * made-up pid above 4194304 (schema/trace.sql); its source pid is kept.
 *
 * Meant for a writer that only merges: trace_writer_finalize() then sets
 * the merged trace's times and summary meta from its recordings (start the
 * earliest, duration to the latest end, host and the like the distinct
 * values joined, rate_hz only when common).
 *
 * Returns 0, or a negative status with the message on `w` (a failure
 * reading `src` is reported there too, with the source's message); after a
 * failure the writer may hold part of the source: discard the output.
 */
TRACE_API int trace_writer_add_recording(struct trace_writer *w, struct trace_reader *src,
                                         const char *file, int64_t offset_ns);

/*
 * Join consecutive files of one rotation (trace_writer_rotate; the same
 * meta segment_set, segment numbers following each other, `paths` in that
 * order) into ONE trace at `out` (flags as for trace_writer_create), as
 * if they had been recorded as one: one time line from the first file's
 * start (the files share their ids and their monotonic clock; each lists
 * the threads it has samples of, matched across files by pid, tid and
 * Python thread id, a task's stream by its thread and Task address), the
 * samples and error counts of all, the threads and processes of all (a
 * later file's row of a pid the newer), the sources the last file knows.
 * Nothing is shifted or guessed: a gap between two files (one missing) is
 * refused.
 *
 * Returns 0, or a negative status; as for trace_writer_create, *out_w is
 * then set (when memory allowed) to a handle whose errmsg tells why, and
 * no file is left at `out`. On success *out_w is a finished writer too.
 * Either way the caller releases it with trace_writer_free().
 */
TRACE_API int trace_join_segments(const char *out, unsigned flags, const char *const *paths,
                                  size_t n, struct trace_writer **out_w);

/* ------------------------------------------------------------------ */
/* Reader                                                              */
/* ------------------------------------------------------------------ */

/*
 * Open a trace for reading. Checks that the file exists, is SQLite, is a
 * pyflame trace (application_id) and is not of a newer format version, and
 * loads strings, frames, stacks, threads and processes into memory with their
 * references validated. On failure returns a negative status and, if memory
 * allowed, sets *out to a handle whose errmsg names the problem (free it).
 */
TRACE_API int trace_reader_open(const char *path, struct trace_reader **out);

TRACE_API const char *trace_reader_errmsg(const struct trace_reader *r);
/*
 * Open several files of one rotating recording (pyflame-record --rotate,
 * --ring, SIGUSR2: the same meta segment_set), given in any order, as ONE
 * recording: the reader then reads what trace_join_segments() would have
 * written (one time line from the first file's start, the same ids), and
 * every function reads it as it reads a single file. With one path, this
 * is trace_reader_open(). A file missing between two others is a gap, not
 * an error (trace_reader_gap_at); the last file may be one the recorder is
 * still writing. Files of different recordings, or files that are not of
 * a rotation, are refused (TRACE_ERR_ARG, the message saying to merge).
 *
 * Cost: the samples are read from the files in place, one file open at a
 * time while a scan goes through it (a file removed after the open is an
 * error naming it when a scan reaches it). What is copied is small: the
 * last file's dictionaries and one row per sample chunk, into a temporary
 * file in $TMPDIR (else /tmp), removed at once; memory as for reading one
 * file (SQLite's page cache and the dictionaries). Returns as
 * trace_reader_open() does.
 */
TRACE_API int trace_reader_open_set(const char *const *paths, size_t n, struct trace_reader **out);

/*
 * Gaps in a recording read from a set with files missing: the i-th gap,
 * 0 <= i < gap_count, its span on the recording's time line (no sample
 * lies in it: the files that held it are missing) and the segment numbers
 * of the missing files. A trace that is not such a set has none.
 */
struct trace_gap {
        int64_t from_ns, to_ns;
        int64_t first_segment, last_segment;
};
TRACE_API uint32_t trace_reader_gap_count(const struct trace_reader *r);
TRACE_API int trace_reader_gap_at(const struct trace_reader *r, uint32_t i, struct trace_gap *out);

TRACE_API void trace_reader_close(struct trace_reader *r);

/* Meta value for `key`, or NULL when absent. Owned by the reader. */
TRACE_API const char *trace_reader_meta(const struct trace_reader *r, const char *key);

/* Iterate meta: returns false past the end. Pointers owned by the reader. */
TRACE_API bool trace_reader_meta_at(const struct trace_reader *r, size_t i, const char **key,
                                    const char **value);

/* Summary of a recording. */
struct trace_summary {
        int64_t duration_ns; /* end - start, or last sample time if not finalized */
        uint64_t samples;    /* samples stored */
        uint64_t errors[TRACE_ERROR_KIND_COUNT];
        uint32_t threads, processes, stacks, frames;
        double rate_hz; /* requested rate, 0 if unknown */
        bool finalized; /* false when the recorder stopped without finishing */
};
TRACE_API int trace_reader_summary(struct trace_reader *r, struct trace_summary *out);

/* A resolved frame. Strings are owned by the reader. */
struct trace_frame {
        const char *function;
        const char *qualname; /* NULL when none was recorded */
        const char *file;
        int32_t line;
        int32_t first_line;
        enum trace_frame_kind kind;
};

TRACE_API uint32_t trace_reader_frame_count(const struct trace_reader *r); /* ids 1..count */
TRACE_API int trace_reader_frame(const struct trace_reader *r, uint32_t frame_id,
                                 struct trace_frame *out);

/*
 * The module and offset of native frame `frame_id` (trace_writer_intern_
 * native_frame()). Returns 0 with both set (the string owned by the
 * reader), 1 when the frame has none (not native, or a trace written
 * before they were stored: both left untouched), or TRACE_ERR_ARG. A
 * function of its own, not fields of struct trace_frame, for the same
 * reason as trace_reader_process_origin().
 */
TRACE_API int trace_reader_frame_module(const struct trace_reader *r, uint32_t frame_id,
                                        const char **module, uint64_t *offset);

/* How native frames appear (trace_reader_set_native_view). */
enum trace_native_view {
        TRACE_NATIVE_SHOW = 0,      /* as recorded (the default) */
        TRACE_NATIVE_HIDE = 1,      /* not at all: Python frames only */
        TRACE_NATIVE_BY_MODULE = 2, /* one frame per run of frames of one module */
};

/*
 * Show the trace's native frames as `view` says, for everything read after
 * (samples, stacks, frames, counts): stacks that become the same stack are
 * one stack, reported under one id (new stacks and, by module, one new
 * native frame per module, named by the module's file name, are appended
 * to the ids). Once per reader, before reading samples (setting the
 * same view again does nothing). Returns 0, TRACE_ERR_STATE (another view
 * was set), TRACE_ERR_NOMEM.
 */
TRACE_API int trace_reader_set_native_view(struct trace_reader *r, enum trace_native_view view);

TRACE_API uint32_t trace_reader_stack_count(const struct trace_reader *r); /* ids 0..count-1 */
/* Parent stack and top frame of `stack_id` (not valid for TRACE_STACK_EMPTY). */
TRACE_API int trace_reader_stack_node(const struct trace_reader *r, uint32_t stack_id,
                                      uint32_t *parent, uint32_t *frame_id);
/* Depth of a stack (0 for TRACE_STACK_EMPTY). */
TRACE_API uint32_t trace_reader_stack_depth(const struct trace_reader *r, uint32_t stack_id);
/*
 * Frames of `stack_id`, root first, into `frames` (capacity `cap`). Returns the
 * depth (which may exceed cap: only cap frames are written), or a negative status.
 */
TRACE_API int trace_reader_stack_frames(const struct trace_reader *r, uint32_t stack_id,
                                        uint32_t *frames, size_t cap);

struct trace_thread {
        uint32_t ref; /* the value samples carry */
        int32_t pid;
        int64_t tid; /* OS thread id, -1 unknown */
        uint64_t python_thread_id;
        const char *name;          /* NULL when unknown */
        int64_t first_ns, last_ns; /* first/last sample, relative to start; -1 if none */
        uint64_t samples;
};
TRACE_API uint32_t trace_reader_thread_count(const struct trace_reader *r);
/* i-th thread, 0 <= i < thread_count. */
TRACE_API int trace_reader_thread_at(const struct trace_reader *r, uint32_t i,
                                     struct trace_thread *out);

struct trace_process {
        int32_t pid;
        const char *cmdline, *python_version, *python_build;
        int exit_status; /* -1 when unknown or still running at the end */
        int64_t end_ns;  /* -1 when unknown */
};
TRACE_API uint32_t trace_reader_process_count(const struct trace_reader *r);
TRACE_API int trace_reader_process_at(const struct trace_reader *r, uint32_t i,
                                      struct trace_process *out);

/*
 * Where the samples came from. A trace written by one recorder is one
 * recording (id 1, described by the trace's meta: file NULL, offset 0); a
 * merged trace has one per source. Always at least one.
 */
struct trace_recording {
        uint32_t id;           /* 1..count */
        const char *file;      /* the file it was merged from; NULL for the trace itself */
        const char *host;      /* NULL when unknown */
        int64_t start_wall_ns; /* wall clock at its start, ns since the epoch; -1 unknown */
        int64_t duration_ns;   /* -1 when unknown */
        int64_t offset_ns;     /* where its time 0 lies on this trace's time line */
        uint64_t samples;
};
TRACE_API uint32_t trace_reader_recording_count(const struct trace_reader *r);
/* i-th recording, 0 <= i < recording_count (its id is i + 1). Strings owned by the reader. */
TRACE_API int trace_reader_recording_at(const struct trace_reader *r, uint32_t i,
                                        struct trace_recording *out);
/*
 * The meta of recording `id` as its own file had it: the i-th key and value
 * (for a trace that is one recording, its meta). False past the end or for
 * an unknown id. Pointers owned by the reader.
 */
TRACE_API bool trace_reader_recording_meta_at(const struct trace_reader *r, uint32_t id, size_t i,
                                              const char **key, const char **value);
/*
 * The origin of the i-th process (as trace_reader_process_at): its recording
 * id and its pid on that recording's host (for a trace that is one
 * recording: 1 and its pid). Either pointer may be NULL. Returns 0 or
 * TRACE_ERR_ARG. A function of its own, not fields of struct trace_process,
 * so that programs built against the first version of this header still
 * link and run.
 */
TRACE_API int trace_reader_process_origin(const struct trace_reader *r, uint32_t i,
                                          uint32_t *recording_id, int32_t *source_pid);

/*
 * Source files stored in the trace (by pyflame-record, unless --no-source).
 * A trace written before sources existed holds none.
 */
struct trace_source {
        const char *file; /* as frames name it; owned by the reader */
        uint64_t size;    /* bytes of text */
        int64_t mtime_ns; /* modification time when read (wall clock); -1 unknown */
        uint64_t stored;  /* bytes it takes in the file (compressed) */
};
TRACE_API uint32_t trace_reader_source_count(const struct trace_reader *r);
/* i-th stored source, 0 <= i < source_count, in no particular order. */
TRACE_API int trace_reader_source_at(const struct trace_reader *r, uint32_t i,
                                     struct trace_source *out);
/*
 * The text the trace holds for `file`. Returns 1 and sets *data to a
 * malloc'ed copy that the caller frees (len bytes, plus a NUL after them)
 * and *len; 0 when the trace holds no source for `file` (outputs
 * untouched); or a negative status, outputs untouched: TRACE_ERR_CORRUPT
 * when the stored text is damaged (does not inflate to its size, holds a
 * NUL byte), TRACE_ERR_NOMEM, TRACE_ERR_IO. At most TRACE_SOURCE_MAX_BYTES
 * are ever allocated, whatever the file claims.
 */
TRACE_API int trace_reader_source(struct trace_reader *r, const char *file, char **data,
                                  size_t *len);

/*
 * Which samples to visit. Zero-initialise, then set what you need:
 * from_ns/to_ns are relative to the start (to_ns == 0 means "to the end");
 * pids/threads, when non-empty, are allow-lists; a sample is kept when
 * (state & state_require) == state_require and (state & state_exclude) == 0.
 */
struct trace_filter {
        int64_t from_ns, to_ns;
        const int32_t *pids;
        size_t n_pids;
        const uint32_t *threads; /* thread refs */
        size_t n_threads;
        unsigned state_require, state_exclude;
};

struct trace_sample {
        int64_t t_ns;    /* relative to the start of the recording */
        uint32_t thread; /* thread ref */
        uint32_t stack;
        unsigned state;
};

/*
 * Visit every sample that passes `filter` (NULL: all), in storage order
 * (time order within a thread). `fn` returns 0 to go on or non-zero to stop
 * (that value is then returned). Returns 0 at the end, or a negative status
 * if the file turns out damaged: then the caller must not present what it has
 * seen as a complete result.
 */
typedef int (*trace_sample_fn)(void *ctx, const struct trace_sample *s);
TRACE_API int trace_reader_foreach_sample(struct trace_reader *r, const struct trace_filter *filter,
                                          trace_sample_fn fn, void *ctx);

/*
 * Count samples per stack: on success *counts is a calloc'ed array of
 * trace_reader_stack_count(r) entries (caller frees), indexed by stack id,
 * and *total the number of samples counted.
 */
TRACE_API int trace_reader_count_by_stack(struct trace_reader *r, const struct trace_filter *filter,
                                          uint64_t **counts, uint64_t *total);

/*
 * asyncio tasks. The streams of a trace are its threads and, when it was
 * recorded with pyflame-record --async, one per asyncio task (listed among
 * the threads by trace_reader_thread_at(), with refs and names as threads
 * have). The view says which streams foreach_sample and count_by_stack
 * visit: TRACE_VIEW_THREADS (the default) the threads, TRACE_VIEW_TASKS the
 * tasks, each task sample counting the task once in its stack of awaits.
 */
enum trace_view {
        TRACE_VIEW_THREADS = 0,
        TRACE_VIEW_TASKS = 1,
};
TRACE_API void trace_reader_set_view(struct trace_reader *r, enum trace_view view);
/*
 * Whether the i-th stream (as trace_reader_thread_at) is an asyncio task's:
 * 1 with *thread_ref the ref of the thread running its loop and *task_addr
 * the Task's address (either pointer may be NULL), 0 for a thread, or
 * TRACE_ERR_ARG.
 */
TRACE_API int trace_reader_thread_task(const struct trace_reader *r, uint32_t i,
                                       uint32_t *thread_ref, uint64_t *task_addr);
/* Number of task streams in the trace (0: not recorded with --async). */
TRACE_API uint32_t trace_reader_task_count(const struct trace_reader *r);

#ifdef __cplusplus
}
#endif
#endif
