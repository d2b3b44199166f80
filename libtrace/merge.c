/*
 * merge.c - trace_writer_add_recording(): copy a whole trace into a writer
 * as one more recording of a merged trace (pyflame-report merge).
 *
 * The copy goes through the writer's ordinary interning, so frames, stacks
 * and strings shared by several sources are stored once, and the result is
 * an ordinary trace: frames and stacks are mapped id by id (a stack's
 * parent is always mapped before it, parent < id), threads get new
 * references, samples keep their thread, stack and state and have their
 * time shifted by the recording's offset. What is new is kept on the side:
 * a row in recordings with the source's meta in recording_meta, and each
 * process's recording and source pid. Pids stay the pids they were, except
 * one that an earlier recording already used, which gets a made-up pid
 * above Linux's PID_MAX_LIMIT so that it cannot collide with a real one.
 * Stored source texts come along; for a file that several recordings
 * stored, the first recording's text is kept.
 */
#include <stdlib.h>
#include <string.h>

#include "chunk.h"
#include "trace.h"
#include "trace_internal.h"

/* Made-up pids start above the largest pid Linux hands out (PID_MAX_LIMIT, 2^22). */
#define MERGE_PID_BASE 4194304

struct merge {
        struct trace_writer *w;
        struct trace_reader *src;
        const char *file;
        int64_t offset_ns;
        int64_t origin_ns;    /* the writer's time origin, for its monotonic-time API */
        uint32_t *frames;     /* source frame id -> writer frame id */
        uint32_t *stacks;     /* source stack id -> writer stack id */
        uint32_t *threads;    /* source thread ref -> writer thread ref */
        int32_t *pids;        /* source process index -> writer pid */
        uint32_t *recordings; /* source recording id - 1 -> writer recording id */
        uint32_t n_recordings;
};

/* A failure of the source, told on the writer with the source's message (which names it). */
static int source_failed(struct merge *m, int status)
{
        const char *msg = trace_reader_errmsg(m->src);
        if (msg && *msg)
                return trace_writer_fail(m->w, status, "%s", msg);
        return trace_writer_fail(m->w, status, "%s: %s", m->file ? m->file : "source trace",
                                 trace_status_str(status));
}

static int copy_recordings(struct merge *m)
{
        m->n_recordings = trace_reader_recording_count(m->src);
        m->recordings = calloc(m->n_recordings ? m->n_recordings : 1, sizeof(*m->recordings));
        if (!m->recordings)
                return trace_writer_fail(m->w, TRACE_ERR_NOMEM, "out of memory");
        for (uint32_t i = 0; i < m->n_recordings; i++) {
                struct trace_recording rec;
                int rc = trace_reader_recording_at(m->src, i, &rec);
                if (rc < 0)
                        return source_failed(m, rc);
                /* A single recording is named by the file it came from. */
                if (!rec.file)
                        rec.file = m->file;
                if (__builtin_add_overflow(rec.offset_ns, m->offset_ns, &rec.offset_ns) ||
                    rec.offset_ns <= -CHUNK_TIME_LIMIT || rec.offset_ns >= CHUNK_TIME_LIMIT)
                        return trace_writer_fail(m->w, TRACE_ERR_ARG,
                                                 "offset %lld ns puts %s out of range",
                                                 (long long)m->offset_ns, rec.file ? rec.file : "");
                if ((rc = trace_writer_new_recording(m->w, &rec, &m->recordings[i])) < 0)
                        return rc;
                const char *key, *value;
                for (size_t k = 0; trace_reader_recording_meta_at(m->src, i + 1, k, &key, &value);
                     k++)
                        if ((rc = trace_writer_add_recording_meta(m->w, m->recordings[i], key,
                                                                  value)) < 0)
                                return rc;
        }
        return 0;
}

/* The writer pid for a source process: its own, or a made-up one when taken. */
static int32_t fresh_pid(struct merge *m, int32_t pid)
{
        if (!trace_writer_has_process(m->w, pid))
                return pid;
        int32_t p = MERGE_PID_BASE;
        while (trace_writer_has_process(m->w, p))
                p++;
        return p;
}

static int copy_processes(struct merge *m)
{
        uint32_t n = trace_reader_process_count(m->src);
        m->pids = calloc(n ? n : 1, sizeof(*m->pids));
        if (!m->pids)
                return trace_writer_fail(m->w, TRACE_ERR_NOMEM, "out of memory");
        for (uint32_t i = 0; i < n; i++) {
                struct trace_process p;
                uint32_t recording;
                int32_t source_pid;
                int rc = trace_reader_process_at(m->src, i, &p);
                if (rc == 0)
                        rc = trace_reader_process_origin(m->src, i, &recording, &source_pid);
                if (rc < 0)
                        return source_failed(m, rc);
                if (recording == 0 || recording > m->n_recordings)
                        return source_failed(m, TRACE_ERR_CORRUPT);
                struct trace_process_desc d = {fresh_pid(m, p.pid), p.cmdline, p.python_version,
                                               p.python_build};
                m->pids[i] = d.pid;
                if ((rc = trace_writer_add_process(m->w, &d)) < 0 ||
                    (rc = trace_writer_set_process_origin(m->w, d.pid, m->recordings[recording - 1],
                                                          source_pid)) < 0)
                        return rc;
                if (p.end_ns >= 0 &&
                    (rc = trace_writer_end_process(m->w, d.pid, p.exit_status,
                                                   m->origin_ns + m->offset_ns + p.end_ns)) < 0)
                        return rc;
        }
        return 0;
}

/* The writer pid of source pid `pid` (0, the recorder, stays 0); -1 when unknown. */
static int32_t mapped_pid(const struct merge *m, int32_t pid)
{
        if (pid == 0)
                return 0;
        uint32_t n = trace_reader_process_count(m->src);
        for (uint32_t i = 0; i < n; i++) {
                struct trace_process p;
                if (trace_reader_process_at(m->src, i, &p) == 0 && p.pid == pid)
                        return m->pids[i];
        }
        return -1;
}

static int copy_threads(struct merge *m)
{
        uint32_t n = trace_reader_thread_count(m->src);
        m->threads = calloc((size_t)n + 1, sizeof(*m->threads));
        if (!m->threads)
                return trace_writer_fail(m->w, TRACE_ERR_NOMEM, "out of memory");
        for (uint32_t i = 0; i < n; i++) {
                struct trace_thread t;
                int rc = trace_reader_thread_at(m->src, i, &t);
                if (rc < 0)
                        return source_failed(m, rc);
                int32_t pid = mapped_pid(m, t.pid);
                if (pid <= 0)
                        return source_failed(m, TRACE_ERR_CORRUPT);
                /* A task's stream follows its thread (a smaller ref): it is mapped already. */
                uint32_t of;
                uint64_t addr;
                if (trace_reader_thread_task(m->src, i, &of, &addr) == 1) {
                        struct trace_task_desc d = {m->threads[of], addr, t.name};
                        rc = trace_writer_add_task(m->w, &d, &m->threads[t.ref]);
                } else {
                        struct trace_thread_desc d = {pid, t.tid, t.python_thread_id, t.name};
                        rc = trace_writer_add_thread(m->w, &d, &m->threads[t.ref]);
                }
                if (rc < 0)
                        return rc;
        }
        return 0;
}

static int copy_sources(struct merge *m)
{
        uint32_t n = trace_reader_source_count(m->src);
        for (uint32_t i = 0; i < n; i++) {
                struct trace_source s;
                char *data;
                size_t len;
                int rc = trace_reader_source_at(m->src, i, &s);
                if (rc == 0)
                        rc = trace_reader_source(m->src, s.file, &data, &len);
                if (rc < 0)
                        return source_failed(m, rc);
                if (rc == 0)
                        continue;
                rc = trace_writer_add_source(m->w, s.file, data, len, s.mtime_ns);
                free(data);
                if (rc < 0)
                        return rc;
        }
        return 0;
}

static int copy_frames_and_stacks(struct merge *m)
{
        uint32_t n_frames = trace_reader_frame_count(m->src);
        uint32_t n_stacks = trace_reader_stack_count(m->src);
        m->frames = calloc((size_t)n_frames + 1, sizeof(*m->frames));
        m->stacks = calloc(n_stacks ? n_stacks : 1, sizeof(*m->stacks));
        if (!m->frames || !m->stacks)
                return trace_writer_fail(m->w, TRACE_ERR_NOMEM, "out of memory");
        for (uint32_t id = 1; id <= n_frames; id++) {
                struct trace_frame f;
                int rc = trace_reader_frame(m->src, id, &f);
                if (rc < 0)
                        return source_failed(m, rc);
                struct trace_frame_desc d = {f.function, f.qualname,   f.file,
                                             f.line,     f.first_line, f.kind};
                const char *module;
                uint64_t offset;
                rc = trace_reader_frame_module(m->src, id, &module, &offset);
                if (rc < 0)
                        return source_failed(m, rc);
                rc = rc == 0 ? trace_writer_intern_native_frame(m->w, &d, module, offset,
                                                                &m->frames[id])
                             : trace_writer_intern_frame(m->w, &d, &m->frames[id]);
                if (rc < 0)
                        return rc;
        }
        /* The reader checked parent < id: parents are mapped first. */
        for (uint32_t id = 1; id < n_stacks; id++) {
                uint32_t parent, frame;
                int rc = trace_reader_stack_node(m->src, id, &parent, &frame);
                if (rc < 0)
                        return source_failed(m, rc);
                if ((rc = trace_writer_intern_stack(m->w, m->stacks[parent], m->frames[frame],
                                                    &m->stacks[id])) < 0)
                        return rc;
        }
        return 0;
}

struct sample_copy {
        struct merge *m;
        int write_status; /* a failure of the writer, whose message is already set */
};

static int copy_sample(void *ctx, const struct trace_sample *s)
{
        struct sample_copy *c = ctx;
        struct merge *m = c->m;
        int64_t t;
        if (__builtin_add_overflow(s->t_ns, m->origin_ns + m->offset_ns, &t))
                return c->write_status =
                           trace_writer_fail(m->w, TRACE_ERR_ARG, "a sample time overflows");
        int rc =
            trace_writer_add_sample(m->w, m->threads[s->thread], t, m->stacks[s->stack], s->state);
        if (rc < 0)
                c->write_status = rc;
        return rc;
}

static int copy_samples_and_errors(struct merge *m)
{
        struct sample_copy c = {m, 0};
        int rc = trace_reader_foreach_sample(m->src, NULL, copy_sample, &c);
        if (rc == 0 && trace_reader_task_count(m->src)) {
                trace_reader_set_view(m->src, TRACE_VIEW_TASKS);
                rc = trace_reader_foreach_sample(m->src, NULL, copy_sample, &c);
                trace_reader_set_view(m->src, TRACE_VIEW_THREADS);
        }
        if (rc < 0)
                return c.write_status < 0 ? c.write_status : source_failed(m, rc);
        int32_t pid;
        unsigned kind;
        uint64_t count;
        for (size_t i = 0; trace_reader_error_at(m->src, i, &pid, &kind, &count); i++) {
                int32_t to = mapped_pid(m, pid);
                /* Errors of a pid with no process row stay with the recorder. */
                if ((rc = trace_writer_count_error(m->w, to < 0 ? 0 : to,
                                                   (enum trace_error_kind)kind, count)) < 0)
                        return rc;
        }
        return 0;
}

TRACE_API int trace_writer_add_recording(struct trace_writer *w, struct trace_reader *src,
                                         const char *file, int64_t offset_ns)
{
        if (!w)
                return TRACE_ERR_ARG;
        if (!src)
                return trace_writer_fail(w, TRACE_ERR_ARG, "no source trace");
        if (offset_ns <= -CHUNK_TIME_LIMIT || offset_ns >= CHUNK_TIME_LIMIT)
                return trace_writer_fail(w, TRACE_ERR_ARG, "offset %lld ns out of range",
                                         (long long)offset_ns);
        struct trace_summary sum;
        struct merge m = {.w = w,
                          .src = src,
                          .file = file,
                          .offset_ns = offset_ns,
                          .origin_ns = trace_writer_origin_ns(w)};
        int rc = trace_reader_summary(src, &sum);
        if (rc < 0)
                return source_failed(&m, rc);
        if ((rc = copy_recordings(&m)) == 0 && (rc = copy_processes(&m)) == 0 &&
            (rc = copy_threads(&m)) == 0 && (rc = copy_frames_and_stacks(&m)) == 0 &&
            (rc = copy_samples_and_errors(&m)) == 0)
                rc = copy_sources(&m);
        free(m.frames);
        free(m.stacks);
        free(m.threads);
        free(m.pids);
        free(m.recordings);
        return rc;
}
