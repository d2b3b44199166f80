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
    [TRACE_ERROR_TORN] = "torn",
    [TRACE_ERROR_READ] = "read",
    [TRACE_ERROR_LATE] = "late",
    [TRACE_ERROR_OTHER] = "other",
};

struct info {
        struct trace_summary sum;
        double achieved_hz; /* 0 when no thread has two samples */
};

/* Sample intervals and their span for one thread; false when it has fewer than two samples. */
static bool thread_span(const struct trace_thread *t, uint64_t *intervals, int64_t *span_ns)
{
        if (t->samples < 2 || t->first_ns < 0 || t->last_ns <= t->first_ns)
                return false;
        *intervals = t->samples - 1;
        *span_ns = t->last_ns - t->first_ns;
        return true;
}

static double thread_rate(const struct trace_thread *t)
{
        uint64_t n;
        int64_t span;
        return thread_span(t, &n, &span) ? (double)n * 1e9 / (double)span : 0.0;
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
                uint64_t k;
                int64_t s;
                if (thread_span(&t, &k, &s)) {
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

static int recordings_text(struct trace_reader *r, struct out *o)
{
        static const struct table_column columns[] = {
            {"ID", "id", TABLE_INT, 0},
            {"HOST", "host", TABLE_TEXT, 0},
            {"START_UTC", "start", TABLE_TEXT, 0},
            {"OFFSET_S", "offset_s", TABLE_SECONDS, 0},
            {"DURATION_S", "duration_s", TABLE_SECONDS, 0},
            {"SAMPLES", "samples", TABLE_COUNT, 0},
            {"FILE", "file", TABLE_TEXT, 0},
        };
        struct table t = {.cols = columns, .n_cols = 7, .indent = 2};
        uint32_t n = trace_reader_recording_count(r);
        for (uint32_t i = 0; i < n; i++) {
                struct trace_recording rec;
                int rc = trace_reader_recording_at(r, i, &rec);
                struct table_cell *c = rc < 0 ? NULL : table_add_row(&t);
                if (rc < 0) {
                        table_free(&t);
                        return rc;
                }
                if (!c)
                        break;
                char when[64];
                c[0].num = rec.id;
                c[1].text = rec.host;
                c[2].text = table_printf(&t, "%s", utc_time(rec.start_wall_ns, when, sizeof(when)));
                c[3].num = rec.offset_ns;
                c[4].num = rec.duration_ns;
                c[4].null = rec.duration_ns < 0;
                c[5].num = (int64_t)rec.samples;
                c[6].text = rec.file;
        }
        out_printf(o, "recordings: %u (merged; processes show where they came from)\n", n);
        table_write(&t, OUT_TEXT, o);
        table_free(&t);
        return 0;
}

static void put_seconds(struct out *o, int64_t ns)
{
        out_printf(o, "%.3f s", (double)ns / 1e9);
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
        out_printf(o, "\nsamples:    %llu\n", (unsigned long long)s->samples);
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
        for (int k = 0; k < TRACE_ERROR_KIND_COUNT && errors; k++)
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
        if (capture && captured && retries && recovered) {
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

        static const struct table_column process_columns[] = {
            {"PID", "pid", TABLE_INT, 0},          {"PYTHON", "python", TABLE_TEXT, 0},
            {"BUILD", "build", TABLE_TEXT, 0},     {"EXIT", "exit", TABLE_INT, 0},
            {"COMMAND", "command", TABLE_TEXT, 0},
        };
        static const struct table_column merged_columns[] = {
            {"PID", "pid", TABLE_INT, 0},
            {"REC", "recording", TABLE_INT, 0},
            {"SOURCE_PID", "source_pid", TABLE_INT, 0},
            {"PYTHON", "python", TABLE_TEXT, 0},
            {"BUILD", "build", TABLE_TEXT, 0},
            {"EXIT", "exit", TABLE_INT, 0},
            {"COMMAND", "command", TABLE_TEXT, 0},
        };
        bool merged = is_merged(r);
        struct table pt = {.cols = merged ? merged_columns : process_columns,
                           .n_cols = merged ? 7 : 5,
                           .indent = 2};
        uint32_t np = trace_reader_process_count(r);
        for (uint32_t i = 0; i < np; i++) {
                struct trace_process p;
                int rc = trace_reader_process_at(r, i, &p);
                struct table_cell *c = rc < 0 ? NULL : table_add_row(&pt);
                if (rc < 0) {
                        table_free(&pt);
                        return rc;
                }
                if (!c)
                        break;
                c[0].num = p.pid;
                if (merged) {
                        uint32_t rec = 0;
                        int32_t source_pid = 0;
                        trace_reader_process_origin(r, i, &rec, &source_pid);
                        c[1].num = rec;
                        c[2].num = source_pid;
                        c += 2;
                }
                c[1].text = p.python_version ? p.python_version : "?";
                c[2].text = p.python_build ? p.python_build : "?";
                c[3].num = p.exit_status;
                c[3].null = p.exit_status < 0;
                c[4].text = p.cmdline;
        }
        if (merged) {
                int rc = recordings_text(r, o);
                if (rc < 0) {
                        table_free(&pt);
                        return rc;
                }
        }
        out_printf(o, "processes:  %u\n", np);
        table_write(&pt, OUT_TEXT, o);
        table_free(&pt);

        static const struct table_column thread_columns[] = {
            {"PID", "pid", TABLE_INT, 0},
            {"TID", "tid", TABLE_INT, 0},
            {"PYTHON_ID", "python_thread_id", TABLE_COUNT, 0},
            {"SAMPLES", "samples", TABLE_COUNT, 0},
            {"RATE_HZ", "rate_hz", TABLE_DECIMAL, 0},
            {"FIRST_S", "first_s", TABLE_SECONDS, 0},
            {"LAST_S", "last_s", TABLE_SECONDS, 0},
            {"NAME", "name", TABLE_TEXT, 0},
        };
        struct table tt = {.cols = thread_columns, .n_cols = 8, .indent = 2};
        uint32_t nt = trace_reader_thread_count(r);
        for (uint32_t i = 0; i < nt; i++) {
                struct trace_thread t;
                int rc = trace_reader_thread_at(r, i, &t);
                struct table_cell *c = rc < 0 ? NULL : table_add_row(&tt);
                if (rc < 0) {
                        table_free(&tt);
                        return rc;
                }
                if (!c)
                        break;
                c[0].num = t.pid;
                c[1].num = t.tid;
                c[1].null = t.tid < 0;
                c[2].num = (int64_t)t.python_thread_id;
                c[2].null = t.python_thread_id == 0;
                c[3].num = (int64_t)t.samples;
                c[4].real = thread_rate(&t);
                c[4].null = c[4].real == 0;
                c[5].num = t.first_ns;
                c[5].null = t.first_ns < 0;
                c[6].num = t.last_ns;
                c[6].null = t.last_ns < 0;
                c[7].text = t.name;
        }
        out_printf(o, "threads:    %u\n", nt);
        table_write(&tt, OUT_TEXT, o);
        table_free(&tt);

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

static void json_int_or_null(struct out *o, int64_t v, bool null)
{
        if (null)
                out_puts(o, "null");
        else
                out_printf(o, "%lld", (long long)v);
}

static int info_json(struct trace_reader *r, const char *path, const struct info *in, struct out *o)
{
        const struct trace_summary *s = &in->sum;
        bool merged = is_merged(r);
        out_puts(o, "{");
        json_key(o, "trace", true);
        out_json_string(o, path);
        json_key(o, "finalized", false);
        out_puts(o, s->finalized ? "true" : "false");
        json_key(o, "duration_ns", false);
        out_printf(o, "%lld", (long long)s->duration_ns);
        json_key(o, "samples", false);
        out_printf(o, "%llu", (unsigned long long)s->samples);
        json_key(o, "rate_requested_hz", false);
        if (s->rate_hz > 0)
                out_printf(o, "%.3f", s->rate_hz);
        else
                out_puts(o, "null");
        json_key(o, "rate_achieved_hz", false);
        if (in->achieved_hz > 0)
                out_printf(o, "%.3f", in->achieved_hz);
        else
                out_puts(o, "null");
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

        json_key(o, "processes", false);
        out_puts(o, "[");
        uint32_t np = trace_reader_process_count(r);
        for (uint32_t i = 0; i < np; i++) {
                struct trace_process p;
                int rc = trace_reader_process_at(r, i, &p);
                if (rc < 0)
                        return rc;
                out_puts(o, i ? ",\n  {" : "\n  {");
                json_key(o, "pid", true);
                out_printf(o, "%d", (int)p.pid);
                json_key(o, "cmdline", false);
                out_json_string(o, p.cmdline);
                json_key(o, "python_version", false);
                out_json_string(o, p.python_version);
                json_key(o, "python_build", false);
                out_json_string(o, p.python_build);
                json_key(o, "exit_status", false);
                json_int_or_null(o, p.exit_status, p.exit_status < 0);
                json_key(o, "end_ns", false);
                json_int_or_null(o, p.end_ns, p.end_ns < 0);
                if (merged) {
                        uint32_t rec = 0;
                        int32_t source_pid = 0;
                        trace_reader_process_origin(r, i, &rec, &source_pid);
                        json_key(o, "recording", false);
                        out_printf(o, "%u", rec);
                        json_key(o, "source_pid", false);
                        out_printf(o, "%d", (int)source_pid);
                }
                out_puts(o, "}");
        }
        out_puts(o, np ? "\n]" : "]");
        if (merged) {
                json_key(o, "recordings", false);
                out_puts(o, "[");
                uint32_t nr = trace_reader_recording_count(r);
                for (uint32_t i = 0; i < nr; i++) {
                        struct trace_recording rec;
                        int rc = trace_reader_recording_at(r, i, &rec);
                        if (rc < 0)
                                return rc;
                        out_puts(o, i ? ",\n  {" : "\n  {");
                        json_key(o, "id", true);
                        out_printf(o, "%u", rec.id);
                        json_key(o, "file", false);
                        out_json_string(o, rec.file);
                        json_key(o, "host", false);
                        out_json_string(o, rec.host);
                        json_key(o, "start_wall_ns", false);
                        json_int_or_null(o, rec.start_wall_ns, rec.start_wall_ns == -1);
                        json_key(o, "duration_ns", false);
                        json_int_or_null(o, rec.duration_ns, rec.duration_ns < 0);
                        json_key(o, "offset_ns", false);
                        out_printf(o, "%lld", (long long)rec.offset_ns);
                        json_key(o, "samples", false);
                        out_printf(o, "%llu", (unsigned long long)rec.samples);
                        out_puts(o, "}");
                }
                out_puts(o, nr ? "\n]" : "]");
        }

        json_key(o, "threads", false);
        out_puts(o, "[");
        uint32_t nt = trace_reader_thread_count(r);
        for (uint32_t i = 0; i < nt; i++) {
                struct trace_thread t;
                int rc = trace_reader_thread_at(r, i, &t);
                if (rc < 0)
                        return rc;
                out_puts(o, i ? ",\n  {" : "\n  {");
                json_key(o, "pid", true);
                out_printf(o, "%d", (int)t.pid);
                json_key(o, "tid", false);
                json_int_or_null(o, t.tid, t.tid < 0);
                json_key(o, "python_thread_id", false);
                if (t.python_thread_id)
                        out_printf(o, "%llu", (unsigned long long)t.python_thread_id);
                else
                        out_puts(o, "null");
                json_key(o, "name", false);
                out_json_string(o, t.name);
                json_key(o, "samples", false);
                out_printf(o, "%llu", (unsigned long long)t.samples);
                json_key(o, "first_ns", false);
                json_int_or_null(o, t.first_ns, t.first_ns < 0);
                json_key(o, "last_ns", false);
                json_int_or_null(o, t.last_ns, t.last_ns < 0);
                json_key(o, "rate_hz", false);
                double rate = thread_rate(&t);
                if (rate > 0)
                        out_printf(o, "%.3f", rate);
                else
                        out_puts(o, "null");
                out_puts(o, "}");
        }
        out_puts(o, nt ? "\n]" : "]");

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
        printf("Usage: " REPORT_PROG " info [OPTIONS] TRACE\n"
               "Summarise a recording: whether it was finalized, duration, samples, the\n"
               "requested and achieved sampling rate, errors by kind, processes (Python\n"
               "version and build), threads (ids, names, samples) and meta values.\n"
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
        if (optind + 1 < argc)
                return report_usage("info", "one trace file at a time ('%s' is extra)",
                                    argv[optind + 1]);
        const char *path = argv[optind];
        struct trace_reader *r = NULL;
        int rc = report_check_output(output, path);
        if (rc == 0)
                rc = report_open(path, &r);
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
