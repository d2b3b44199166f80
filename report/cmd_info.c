/*
 * cmd_info.c - `pyflame-report info`: what a recording holds, before any
 * view of its samples. Duration and sample count, the rate asked for and
 * the rate achieved, sampling errors by kind, the processes (with their
 * Python version and build) and threads (with names, ids and sample
 * counts), whether the recorder finished properly, and the recording's meta
 * values, as text or JSON. For a merged trace (pyflame-report merge), also
 * the recordings it was merged from and where each process came from.
 *
 * The achieved rate is per thread: a sampler takes one sample of every
 * thread per tick, so a thread's rate is its sample intervals over the time
 * between its first and last sample, and the recording's rate is the sum of
 * intervals over the sum of those spans. It is comparable with the rate
 * requested of pyflame-record whatever the number of threads.
 */
#include "report.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const error_names[TRACE_ERROR_KIND_COUNT] = {
    [TRACE_ERROR_TORN] = "torn",           [TRACE_ERROR_READ] = "read",
    [TRACE_ERROR_LATE] = "late",           [TRACE_ERROR_OTHER] = "other",
    [TRACE_ERROR_UNMATCHED] = "unmatched", [TRACE_ERROR_NOT_RESIDENT] = "not_resident",
    [TRACE_ERROR_TRUNCATED] = "truncated", [TRACE_ERROR_INVALID] = "invalid",
    [TRACE_ERROR_CODE_GONE] = "code_gone",
};

struct info {
        struct trace_summary sum;
        double achieved_hz; /* 0 when no thread has two samples */
};

/* Sample intervals and their span for one thread; false when it has fewer than two samples. */
static bool thread_span(const struct trace_reader *r, const struct trace_thread *t,
                        uint64_t *intervals, int64_t *span_ns)
{
        if (t->samples < 2 || t->first_ns < 0 || t->last_ns <= t->first_ns)
                return false;
        uint64_t n = t->samples - 1;
        int64_t span = t->last_ns - t->first_ns;
        /* Time in a gap of a set (files missing) was not sampled: neither it nor the step over it
         * counts. */
        uint32_t n_gaps = trace_reader_gap_count(r);
        for (uint32_t i = 0; i < n_gaps; i++) {
                struct trace_gap g;
                if (trace_reader_gap_at(r, i, &g) < 0 || g.to_ns <= t->first_ns ||
                    g.from_ns >= t->last_ns)
                        continue;
                int64_t a = g.from_ns > t->first_ns ? g.from_ns : t->first_ns;
                int64_t b = g.to_ns < t->last_ns ? g.to_ns : t->last_ns;
                span -= b - a;
                n -= n > 1;
        }
        if (span <= 0)
                return false;
        *intervals = n;
        *span_ns = span;
        return true;
}

static double thread_rate(const struct trace_reader *r, const struct trace_thread *t)
{
        uint64_t n;
        int64_t span;
        return thread_span(r, t, &n, &span) ? (double)n * 1e9 / (double)span : 0.0;
}

/*
 * Gather the summary, and read every sample once: info must not vouch for a
 * trace whose samples cannot be read, nor for one holding another number of
 * samples than it claims. Returns 0 or a negative status; *found is the
 * number of samples read (TRACE_ERR_CORRUPT when it differs from the claim).
 */
static int info_gather(struct trace_reader *r, struct info *in, uint64_t *found)
{
        int rc = trace_reader_summary(r, &in->sum);
        if (rc < 0)
                return rc;
        uint64_t *counts = NULL;
        if ((rc = trace_reader_count_by_stack(r, NULL, &counts, found)) < 0)
                return rc;
        free(counts);
        if (*found != in->sum.samples)
                return TRACE_ERR_CORRUPT;
        uint64_t intervals = 0;
        double span = 0;
        uint32_t n = trace_reader_thread_count(r);
        for (uint32_t i = 0; i < n; i++) {
                struct trace_thread t;
                if ((rc = trace_reader_thread_at(r, i, &t)) < 0)
                        return rc;
                if (trace_reader_thread_task(r, i, NULL, NULL) == 1)
                        continue; /* an asyncio task's samples, not a thread's */
                uint64_t k;
                int64_t s;
                if (thread_span(r, &t, &k, &s)) {
                        intervals += k;
                        span += (double)s;
                }
        }
        in->achieved_hz = span > 0 ? (double)intervals * 1e9 / span : 0.0;
        return 0;
}

/* Was the trace merged from others? Then its first recording names the file it came from. */
static bool is_merged(const struct trace_reader *r)
{
        struct trace_recording rec;
        return trace_reader_recording_at(r, 0, &rec) == 0 && rec.file != NULL;
}

/* "2026-05-28 20:26:40.000" (UTC) for a wall-clock time, into buf. */
static const char *utc_time(int64_t ns, char *buf, size_t size)
{
        time_t sec = (time_t)(ns / 1000000000);
        struct tm tm;
        if (ns < 0 || !gmtime_r(&sec, &tm))
                return "-";
        size_t n = strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm);
        snprintf(buf + n, size - n, ".%03d", (int)(ns / 1000000 % 1000));
        return buf;
}

/*
 * The lists (processes, threads, recordings) are one table each, written as
 * text or JSON by table_write(): a column is in both, or in text only (a
 * composite or a unit for people: seconds, a start time, "?") or in JSON
 * only (the raw value: nanoseconds, a rate with three decimals). The text
 * columns and the JSON members keep their own order.
 */
struct info_column {
        struct table_column col;
        int field;        /* what its cells hold: an enum of the list's own */
        bool merged_only; /* only for a trace merged from others */
};

/* The columns of spec that apply to this trace, into cols and fields; returns how many. */
static size_t pick_columns(const struct info_column *spec, size_t n, bool merged,
                           struct table_column *cols, int *fields)
{
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
                if (merged || !spec[i].merged_only) {
                        cols[k] = spec[i].col;
                        fields[k++] = spec[i].field;
                }
        return k;
}

#define INFO_MAX_COLUMNS 16
#define N_OF(a)          (sizeof(a) / sizeof((a)[0]))
#define T                TABLE_TEXT_ONLY
#define J                TABLE_DATA_ONLY

enum { P_PID, P_REC, P_SOURCE_PID, P_CMDLINE, P_VERSION, P_BUILD, P_EXIT, P_END };
static const struct info_column process_spec[] = {
    {{"PID", "pid", TABLE_INT, 0}, P_PID, false},
    {{"REC", "recording", TABLE_INT, T}, P_REC, true},
    {{"SOURCE_PID", "source_pid", TABLE_INT, T}, P_SOURCE_PID, true},
    {{"COMMAND", "cmdline", TABLE_TEXT, J}, P_CMDLINE, false},
    {{"PYTHON", "python_version", TABLE_TEXT, J}, P_VERSION, false},
    {{"BUILD", "python_build", TABLE_TEXT, J}, P_BUILD, false},
    {{"PYTHON", "python_version", TABLE_TEXT, T}, -P_VERSION, false}, /* "?" when unknown */
    {{"BUILD", "python_build", TABLE_TEXT, T}, -P_BUILD, false},
    {{"EXIT", "exit_status", TABLE_INT, 0}, P_EXIT, false},
    {{"END", "end_ns", TABLE_INT, J}, P_END, false},
    {{"REC", "recording", TABLE_INT, J}, P_REC, true},
    {{"SOURCE_PID", "source_pid", TABLE_INT, J}, P_SOURCE_PID, true},
    {{"COMMAND", "cmdline", TABLE_TEXT, T}, P_CMDLINE, false},
};

static int processes_table(struct trace_reader *r, bool merged, struct table *t,
                           struct table_column *cols)
{
        int fields[INFO_MAX_COLUMNS];
        *t = (struct table){.cols = cols, .indent = 2};
        t->n_cols = pick_columns(process_spec, N_OF(process_spec), merged, cols, fields);
        uint32_t n = trace_reader_process_count(r);
        for (uint32_t i = 0; i < n; i++) {
                struct trace_process p;
                int rc = trace_reader_process_at(r, i, &p);
                if (rc < 0)
                        return rc;
                struct table_cell *c = table_add_row(t);
                if (!c)
                        break;
                uint32_t rec = 0;
                int32_t source_pid = 0;
                if (merged)
                        trace_reader_process_origin(r, i, &rec, &source_pid);
                for (size_t k = 0; k < t->n_cols; k++) {
                        switch (fields[k]) {
                        case P_PID:
                                c[k].num = p.pid;
                                break;
                        case P_REC:
                                c[k].num = rec;
                                break;
                        case P_SOURCE_PID:
                                c[k].num = source_pid;
                                break;
                        case P_CMDLINE:
                                c[k].text = p.cmdline;
                                c[k].null = !p.cmdline;
                                break;
                        case P_VERSION:
                                c[k].text = p.python_version;
                                c[k].null = !p.python_version;
                                break;
                        case P_BUILD:
                                c[k].text = p.python_build;
                                c[k].null = !p.python_build;
                                break;
                        case -P_VERSION:
                                c[k].text = p.python_version ? p.python_version : "?";
                                break;
                        case -P_BUILD:
                                c[k].text = p.python_build ? p.python_build : "?";
                                break;
                        case P_EXIT:
                                c[k].num = p.exit_status;
                                c[k].null = p.exit_status < 0;
                                break;
                        case P_END:
                                c[k].num = p.end_ns;
                                c[k].null = p.end_ns < 0;
                                break;
                        }
                }
        }
        return 0;
}

enum { H_PID, H_TID, H_PYTHON_ID, H_NAME, H_SAMPLES, H_RATE, H_FIRST, H_LAST };
static const struct info_column thread_spec[] = {
    {{"PID", "pid", TABLE_INT, 0}, H_PID, false},
    {{"TID", "tid", TABLE_INT, 0}, H_TID, false},
    {{"PYTHON_ID", "python_thread_id", TABLE_COUNT, 0}, H_PYTHON_ID, false},
    {{"NAME", "name", TABLE_TEXT, J}, H_NAME, false},
    {{"SAMPLES", "samples", TABLE_COUNT, 0}, H_SAMPLES, false},
    {{"RATE_HZ", "rate_hz", TABLE_DECIMAL, T}, H_RATE, false},
    {{"FIRST_S", "first_ns", TABLE_SECONDS, T}, H_FIRST, false},
    {{"LAST_S", "last_ns", TABLE_SECONDS, T}, H_LAST, false},
    {{"NAME", "name", TABLE_TEXT, T}, H_NAME, false},
    {{"FIRST_S", "first_ns", TABLE_INT, J}, H_FIRST, false},
    {{"LAST_S", "last_ns", TABLE_INT, J}, H_LAST, false},
    {{"RATE_HZ", "rate_hz", TABLE_DECIMAL3, J}, H_RATE, false},
};

static int threads_table(struct trace_reader *r, struct table *t, struct table_column *cols)
{
        int fields[INFO_MAX_COLUMNS];
        *t = (struct table){.cols = cols, .indent = 2};
        t->n_cols = pick_columns(thread_spec, N_OF(thread_spec), false, cols, fields);
        uint32_t n = trace_reader_thread_count(r);
        for (uint32_t i = 0; i < n; i++) {
                struct trace_thread th;
                int rc = trace_reader_thread_at(r, i, &th);
                if (rc < 0)
                        return rc;
                if (trace_reader_thread_task(r, i, NULL, NULL) == 1)
                        continue; /* tasks are counted apart (info_lists) */
                struct table_cell *c = table_add_row(t);
                if (!c)
                        break;
                for (size_t k = 0; k < t->n_cols; k++) {
                        switch (fields[k]) {
                        case H_PID:
                                c[k].num = th.pid;
                                break;
                        case H_TID:
                                c[k].num = th.tid;
                                c[k].null = th.tid < 0;
                                break;
                        case H_PYTHON_ID:
                                c[k].num = (int64_t)th.python_thread_id;
                                c[k].null = th.python_thread_id == 0;
                                break;
                        case H_NAME:
                                c[k].text = th.name;
                                c[k].null = !th.name;
                                break;
                        case H_SAMPLES:
                                c[k].num = (int64_t)th.samples;
                                break;
                        case H_RATE:
                                c[k].real = thread_rate(r, &th);
                                c[k].null = c[k].real == 0;
                                break;
                        case H_FIRST:
                                c[k].num = th.first_ns;
                                c[k].null = th.first_ns < 0;
                                break;
                        case H_LAST:
                                c[k].num = th.last_ns;
                                c[k].null = th.last_ns < 0;
                                break;
                        }
                }
        }
        return 0;
}

enum { R_ID, R_FILE, R_HOST, R_START, R_START_UTC, R_OFFSET, R_DURATION, R_SAMPLES };
static const struct info_column recording_spec[] = {
    {{"ID", "id", TABLE_INT, 0}, R_ID, false},
    {{"FILE", "file", TABLE_TEXT, J}, R_FILE, false},
    {{"HOST", "host", TABLE_TEXT, 0}, R_HOST, false},
    {{"START_UTC", "start", TABLE_TEXT, T}, R_START_UTC, false},
    {{"START", "start_wall_ns", TABLE_INT, J}, R_START, false},
    {{"OFFSET_S", "offset_s", TABLE_SECONDS, T}, R_OFFSET, false},
    {{"DURATION_S", "duration_s", TABLE_SECONDS, T}, R_DURATION, false},
    {{"DURATION", "duration_ns", TABLE_INT, J}, R_DURATION, false},
    {{"OFFSET", "offset_ns", TABLE_INT, J}, R_OFFSET, false},
    {{"SAMPLES", "samples", TABLE_COUNT, 0}, R_SAMPLES, false},
    {{"FILE", "file", TABLE_TEXT, T}, R_FILE, false},
};

static int recordings_table(struct trace_reader *r, struct table *t, struct table_column *cols)
{
        int fields[INFO_MAX_COLUMNS];
        *t = (struct table){.cols = cols, .indent = 2};
        t->n_cols = pick_columns(recording_spec, N_OF(recording_spec), true, cols, fields);
        uint32_t n = trace_reader_recording_count(r);
        for (uint32_t i = 0; i < n; i++) {
                struct trace_recording rec;
                int rc = trace_reader_recording_at(r, i, &rec);
                if (rc < 0)
                        return rc;
                struct table_cell *c = table_add_row(t);
                if (!c)
                        break;
                char when[64];
                for (size_t k = 0; k < t->n_cols; k++) {
                        switch (fields[k]) {
                        case R_ID:
                                c[k].num = rec.id;
                                break;
                        case R_FILE:
                                c[k].text = rec.file;
                                c[k].null = !rec.file;
                                break;
                        case R_HOST:
                                c[k].text = rec.host;
                                c[k].null = !rec.host;
                                break;
                        case R_START_UTC:
                                c[k].text = table_printf(
                                    t, "%s", utc_time(rec.start_wall_ns, when, sizeof(when)));
                                break;
                        case R_START:
                                c[k].num = rec.start_wall_ns;
                                c[k].null = rec.start_wall_ns == -1;
                                break;
                        case R_OFFSET:
                                c[k].num = rec.offset_ns;
                                break;
                        case R_DURATION:
                                c[k].num = rec.duration_ns;
                                c[k].null = rec.duration_ns < 0;
                                break;
                        case R_SAMPLES:
                                c[k].num = (int64_t)rec.samples;
                                break;
                        }
                }
        }
        return 0;
}

#undef T
#undef J

/* The processes, the recordings they came from (when merged) and the threads. */
static int info_lists(struct trace_reader *r, enum out_format f, struct out *o)
{
        struct table_column pcols[INFO_MAX_COLUMNS], tcols[INFO_MAX_COLUMNS],
            rcols[INFO_MAX_COLUMNS];
        struct table pt = {0}, tt = {0}, rt = {0};
        bool merged = is_merged(r);
        int rc = processes_table(r, merged, &pt, pcols);
        if (rc == 0 && merged)
                rc = recordings_table(r, &rt, rcols);
        if (rc == 0)
                rc = threads_table(r, &tt, tcols);
        if (rc == 0 && f == OUT_JSON) {
                out_puts(o, ", \"processes\": ");
                table_write(&pt, f, o);
                if (merged) {
                        out_puts(o, ", \"recordings\": ");
                        table_write(&rt, f, o);
                }
                out_puts(o, ", \"threads\": ");
                table_write(&tt, f, o);
                if (trace_reader_task_count(r)) /* (absent from traces without tasks) */
                        out_printf(o, ", \"tasks\": %u", trace_reader_task_count(r));
        } else if (rc == 0) {
                if (merged) {
                        out_printf(o,
                                   "recordings: %zu (merged; processes show where they came "
                                   "from)\n",
                                   rt.n_rows);
                        table_write(&rt, f, o);
                }
                out_printf(o, "processes:  %zu\n", pt.n_rows);
                table_write(&pt, f, o);
                out_printf(o, "threads:    %zu\n", tt.n_rows);
                table_write(&tt, f, o);
                if (trace_reader_task_count(r))
                        out_printf(o,
                                   "tasks:      %u asyncio tasks, %s task samples (see them with "
                                   "--async)\n",
                                   trace_reader_task_count(r),
                                   trace_reader_meta(r, TRACE_META_TASK_SAMPLES)
                                       ? trace_reader_meta(r, TRACE_META_TASK_SAMPLES)
                                       : "0");
        }
        table_free(&pt);
        table_free(&rt);
        table_free(&tt);
        return rc;
}

static void put_seconds(struct out *o, int64_t ns)
{
        out_printf(o, "%.3f s", (double)ns / 1e9);
}

/* The recording's wall-clock start (meta start_wall_ns), or -1 when unknown. */
static int64_t wall_start(const struct trace_reader *r)
{
        const char *v = trace_reader_meta(r, TRACE_META_START_WALL_NS);
        char *end = NULL;
        long long w = v ? strtoll(v, &end, 10) : -1;
        return v && *v && !*end && w > 0 ? w : -1;
}

/* A wall-clock time as ISO-8601 UTC, to the millisecond. */
static void put_wall(struct out *o, int64_t ns)
{
        time_t t = (time_t)(ns / 1000000000);
        struct tm tm;
        char buf[32];
        if (!gmtime_r(&t, &tm) || !strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm)) {
                out_puts(o, "?");
                return;
        }
        out_printf(o, "%s.%03dZ", buf, (int)(ns % 1000000000 / 1000000));
}

/*
 * The wall-clock span, and the gaps of a set read with files missing
 * (trace_reader_gap_at): the time no file covers, shown, never bridged.
 */
static void info_span_text(const struct trace_reader *r, const struct trace_summary *s,
                           struct out *o)
{
        int64_t w = wall_start(r);
        if (w > 0) {
                out_puts(o, "wall clock: ");
                put_wall(o, w);
                out_puts(o, " .. ");
                put_wall(o, w + s->duration_ns);
                out_puts(o, " (UTC)\n");
        }
        uint32_t n = trace_reader_gap_count(r);
        if (!n)
                return;
        out_printf(o, "gaps:       %u (files missing from the set; no sample there)\n", n);
        for (uint32_t i = 0; i < n; i++) {
                struct trace_gap g;
                if (trace_reader_gap_at(r, i, &g) < 0)
                        continue;
                out_printf(o, "  gap %u: %.3fs .. %.3fs (%.3fs), segment%s %lld", i + 1,
                           (double)g.from_ns / 1e9, (double)g.to_ns / 1e9,
                           (double)(g.to_ns - g.from_ns) / 1e9,
                           g.first_segment == g.last_segment ? "" : "s",
                           (long long)g.first_segment);
                if (g.last_segment != g.first_segment)
                        out_printf(o, "-%lld", (long long)g.last_segment);
                out_puts(o, " missing");
                if (w > 0) {
                        out_puts(o, ", ");
                        put_wall(o, w + g.from_ns);
                        out_puts(o, " .. ");
                        put_wall(o, w + g.to_ns);
                }
                out_puts(o, "\n");
        }
}

static int info_text(struct trace_reader *r, const char *path, const struct info *in, struct out *o)
{
        const struct trace_summary *s = &in->sum;
        out_printf(o, "trace:      %s\n", path);
        out_puts(o, s->finalized ? "recording:  finalized\n"
                                 : "recording:  NOT finalized (the recorder stopped early; "
                                   "samples up to its last flush are kept)\n");
        out_puts(o, "duration:   ");
        put_seconds(o, s->duration_ns);
        out_puts(o, "\n");
        info_span_text(r, s, o);
        out_printf(o, "samples:    %llu\n", (unsigned long long)s->samples);
        out_puts(o, "rate:       requested ");
        if (s->rate_hz > 0)
                out_printf(o, "%.1f Hz", s->rate_hz);
        else
                out_puts(o, "unknown");
        out_puts(o, ", achieved ");
        if (in->achieved_hz > 0) {
                out_printf(o, "%.1f Hz per thread", in->achieved_hz);
                if (s->rate_hz > 0)
                        out_printf(o, " (%.1f%%)", 100.0 * in->achieved_hz / s->rate_hz);
        } else {
                out_puts(o, "unknown (no thread has two samples)");
        }
        uint64_t errors = 0;
        for (int k = 0; k < TRACE_ERROR_KIND_COUNT; k++)
                errors += s->errors[k];
        out_printf(o, "\nerrors:     %llu", (unsigned long long)errors);
        /* The kinds of the in-kernel sampler (--bpf) only where it counted some. */
        for (int k = 0; k < TRACE_ERROR_KIND_COUNT && errors; k++)
                if (k < TRACE_ERROR_NOT_RESIDENT || s->errors[k])
                        out_printf(o, "%s%s %llu", k ? ", " : " (", error_names[k],
                                   (unsigned long long)s->errors[k]);
        out_printf(o, "%s\nstacks:     %u distinct\nframes:     %u distinct\n", errors ? ")" : "",
                   s->stacks, s->frames);
        /* What sampling cost the recorder, when it said (pyflame-record does). */
        const char *cpu = trace_reader_meta(r, "recorder_cpu_ns");
        const char *reads = trace_reader_meta(r, "memory_reads");
        const char *mode = trace_reader_meta(r, TRACE_META_MODE);
        if (cpu && s->samples) {
                out_printf(o, "recorder:   %.1f us CPU per sample", atof(cpu) / 1e3 / s->samples);
                if (reads)
                        out_printf(o, ", %.2f memory reads per sample", atof(reads) / s->samples);
                out_printf(o, "%s%s%s\n", mode ? " (" : "", mode ? mode : "", mode ? ")" : "");
        }
        /* How consistently the stacks were read (pyflame-record says since it can capture). */
        const char *capture = trace_reader_meta(r, "capture");
        const char *captured = trace_reader_meta(r, "captured_samples");
        const char *retries = trace_reader_meta(r, "torn_retries");
        const char *recovered = trace_reader_meta(r, "torn_recovered");
        const char *bpf_run = trace_reader_meta(r, "bpf_run_ns");
        if (bpf_run && s->samples) {
                /* --bpf: read in the kernel, in the thread's own context, every one. */
                out_printf(o,
                           "reads:      in the kernel, in each sampled thread's own context "
                           "(--bpf), %.1f us per sample there",
                           atof(bpf_run) / 1e3 / (double)s->samples);
                const char *lost = trace_reader_meta(r, "bpf_lost");
                if (lost && atoll(lost) > 0)
                        out_printf(o, "; %s samples lost (ring buffer full)", lost);
                out_puts(o, "\n");
        } else if (capture && captured && retries && recovered) {
                if (strcmp(capture, "on") == 0)
                        out_printf(o,
                                   "reads:      %s of %llu samples read in the running thread's "
                                   "own context",
                                   captured, (unsigned long long)s->samples);
                else
                        out_printf(o, "reads:      from outside (in-context reads %s)", capture);
                out_printf(o,
                           "; %s reads repeated (torn or incomplete), %s samples whole "
                           "after one\n",
                           retries, recovered);
        }
        int rc = info_lists(r, OUT_TEXT, o);
        if (rc < 0)
                return rc;
        const char *key, *value;
        for (size_t i = 0; trace_reader_meta_at(r, i, &key, &value); i++)
                out_printf(o, "%s  %s = %s\n", i ? "" : "meta:\n", key, value ? value : "");
        return 0;
}

static void json_key(struct out *o, const char *key, bool first)
{
        out_puts(o, first ? "" : ", ");
        out_json_string(o, key);
        out_puts(o, ": ");
}

/* A positive number with three decimals, else null. */
static void json_rate(struct out *o, double v)
{
        if (v > 0)
                out_printf(o, "%.3f", v);
        else
                out_puts(o, "null");
}

static int info_json(struct trace_reader *r, const char *path, const struct info *in, struct out *o)
{
        const struct trace_summary *s = &in->sum;
        out_puts(o, "{");
        json_key(o, "trace", true);
        out_json_string(o, path);
        json_key(o, "finalized", false);
        out_puts(o, s->finalized ? "true" : "false");
        json_key(o, "duration_ns", false);
        out_printf(o, "%lld", (long long)s->duration_ns);
        int64_t w = wall_start(r);
        json_key(o, "start_wall_ns", false);
        out_printf(o, w > 0 ? "%lld" : "null", (long long)w);
        json_key(o, "end_wall_ns", false);
        out_printf(o, w > 0 ? "%lld" : "null", (long long)(w + s->duration_ns));
        json_key(o, "gaps", false);
        out_puts(o, "[");
        uint32_t n_gaps = trace_reader_gap_count(r);
        for (uint32_t i = 0; i < n_gaps; i++) {
                struct trace_gap g;
                if (trace_reader_gap_at(r, i, &g) < 0)
                        continue;
                out_printf(o,
                           "%s{\"from_ns\": %lld, \"to_ns\": %lld, \"first_segment\": %lld, "
                           "\"last_segment\": %lld}",
                           i ? ", " : "", (long long)g.from_ns, (long long)g.to_ns,
                           (long long)g.first_segment, (long long)g.last_segment);
        }
        out_puts(o, "]");
        json_key(o, "samples", false);
        out_printf(o, "%llu", (unsigned long long)s->samples);
        json_key(o, "rate_requested_hz", false);
        json_rate(o, s->rate_hz);
        json_key(o, "rate_achieved_hz", false);
        json_rate(o, in->achieved_hz);
        json_key(o, "errors", false);
        for (int k = 0; k < TRACE_ERROR_KIND_COUNT; k++) {
                out_puts(o, k ? ", " : "{");
                out_json_string(o, error_names[k]);
                out_printf(o, ": %llu", (unsigned long long)s->errors[k]);
        }
        out_puts(o, "}");
        json_key(o, "stacks", false);
        out_printf(o, "%u", s->stacks);
        json_key(o, "frames", false);
        out_printf(o, "%u", s->frames);
        int rc = info_lists(r, OUT_JSON, o);
        if (rc < 0)
                return rc;
        json_key(o, "meta", false);
        out_puts(o, "{");
        const char *key, *value;
        for (size_t i = 0; trace_reader_meta_at(r, i, &key, &value); i++) {
                json_key(o, key, i == 0);
                out_json_string(o, value);
        }
        out_puts(o, "}}\n");
        return 0;
}

static void info_help(void)
{
        printf("Usage: " REPORT_PROG " info [OPTIONS] TRACE...\n"
               "Summarise a recording: whether it was finalized, duration, samples, the\n"
               "requested and achieved sampling rate, errors by kind, processes (Python\n"
               "version and build), threads (ids, names, samples) and meta values.\n"
               "Several files, a directory or a glob of one rotating recording are read as\n"
               "one, in time order; files missing between them are listed as gaps.\n"
               "\n"
               "      --format FORMAT    text or json\n"
               "  -o, --output FILE      write to FILE (replaced only once complete)\n"
               "  -h, --help             this help\n");
}

int cmd_info(int argc, char **argv)
{
        static const struct option long_options[] = {
            {"format", required_argument, NULL, 'f'},
            {"output", required_argument, NULL, 'o'},
            {"help", no_argument, NULL, 'h'},
            {NULL, 0, NULL, 0},
        };
        enum out_format format = OUT_TEXT;
        const char *output = NULL;
        opterr = 0;
        optind = 1;
        for (;;) {
                int c = getopt_long(argc, argv, ":ho:", long_options, NULL);
                if (c == -1)
                        break;
                switch (c) {
                case 'f':
                        if (out_format_parse(optarg, &format) < 0 || format == OUT_CSV)
                                return report_usage("info", "--format: '%s' is not text or json",
                                                    optarg);
                        break;
                case 'o':
                        output = optarg;
                        break;
                case 'h':
                        info_help();
                        return REPORT_EXIT_OK;
                default:
                        return report_bad_option("info", c, argv);
                }
        }
        if (optind >= argc)
                return report_usage("info", "no trace file given");
        const char *path = argv[optind];
        struct trace_reader *r = NULL;
        int rc = report_open_inputs(argv + optind, (size_t)(argc - optind), output, &r);
        if (rc)
                return rc;
        struct out out = {0};
        struct info in = {0};
        uint64_t found = 0;
        int st = info_gather(r, &in, &found);
        if (st == 0)
                st = format == OUT_JSON ? info_json(r, path, &in, &out)
                                        : info_text(r, path, &in, &out);
        if (st == TRACE_ERR_CORRUPT && found != in.sum.samples)
                rc = report_fail(path, "damaged trace: it claims %llu samples but %llu can be read",
                                 (unsigned long long)in.sum.samples, (unsigned long long)found);
        else if (st < 0)
                rc = report_read_failed(path, r, st);
        else
                rc = out_commit(&out, output);
        out_free(&out);
        trace_reader_close(r);
        return rc;
}
