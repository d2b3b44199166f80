/*
 * options.c - the sample selection every view shares, from command-line
 * strings to a libtrace struct trace_filter.
 *
 * Selection happens in two steps because part of it needs the trace: the
 * strings are checked before the file is opened (so a typo in --from fails
 * fast), then resolved against the open trace: "10%" becomes a time from the
 * recording's duration, a thread given by OS tid, Python thread id or name
 * becomes the thread references samples carry, and a pid or thread that the
 * trace does not have is an error that says how to list what it has, rather
 * than an empty report.
 */
#include "report.h"

#include <getopt.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int select_opts_append(char **list, const char *arg)
{
        size_t old = *list ? strlen(*list) : 0;
        size_t add = strlen(arg);
        char *p = realloc(*list, old + 1 + add + 1);
        if (!p)
                return -1;
        if (old)
                p[old++] = ',';
        memcpy(p + old, arg, add + 1);
        *list = p;
        return 0;
}

void select_opts_free(struct select_opts *o)
{
        free(o->pids);
        free(o->threads);
        o->pids = o->threads = NULL;
}

/*
 * Visit the items of a comma-separated list, at most `max` bytes each; empty
 * items are skipped. fn returns 0 to go on; its first non-zero is returned.
 */
static int foreach_item(const char *list, int (*fn)(void *ctx, const char *item), void *ctx)
{
        char item[256];
        const char *p = list;
        while (p && *p) {
                const char *end = strchr(p, ',');
                size_t n = end ? (size_t)(end - p) : strlen(p);
                if (n >= sizeof(item))
                        n = sizeof(item) - 1;
                memcpy(item, p, n);
                item[n] = '\0';
                if (n) {
                        int rc = fn(ctx, item);
                        if (rc)
                                return rc;
                }
                p = end ? end + 1 : NULL;
        }
        return 0;
}

static int parse_pid(const char *s, int32_t *pid)
{
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || *end || v <= 0 || v > INT32_MAX)
                return -1;
        *pid = (int32_t)v;
        return 0;
}

static int check_pid(void *ctx, const char *item)
{
        int32_t pid;
        if (parse_pid(item, &pid) < 0)
                return report_usage(ctx, "--pid: '%s' is not a process id", item);
        return 0;
}

static int count_item(void *ctx, const char *item)
{
        (void)item;
        ++*(size_t *)ctx;
        return 0;
}

int select_opts_check(const struct select_opts *o, const char *cmd)
{
        int64_t ns;
        bool pct;
        if (o->from && pf_parse_duration(o->from, &ns, &pct) < 0)
                return report_usage(cmd, "--from: '%s' is not a time such as 1.5s, 200ms or 10%%",
                                    o->from);
        if (o->to && pf_parse_duration(o->to, &ns, &pct) < 0)
                return report_usage(cmd, "--to: '%s' is not a time such as 1.5s, 200ms or 10%%",
                                    o->to);
        bool rel;
        if (o->since && pf_parse_wall_time(o->since, &ns, &rel) < 0)
                return report_usage(cmd,
                                    "--since: '%s' is not a time such as 2026-12-01T22:00:00Z "
                                    "(UTC) or -1h (before the end)",
                                    o->since);
        if (o->until && pf_parse_wall_time(o->until, &ns, &rel) < 0)
                return report_usage(cmd,
                                    "--until: '%s' is not a time such as 2026-12-01T22:00:00Z "
                                    "(UTC) or -10m (before the end)",
                                    o->until);
        if (o->since && o->from)
                return report_usage(cmd, "--since and --from both say where to start; give one");
        if (o->until && o->to)
                return report_usage(cmd, "--until and --to both say where to stop; give one");
        if (o->pids && foreach_item(o->pids, check_pid, (void *)cmd))
                return REPORT_EXIT_FAIL;
        /* An allow-list with no item would select everything: refuse it. */
        size_t n = 0;
        if (o->pids && !foreach_item(o->pids, count_item, &n) && n == 0)
                return report_usage(cmd, "--pid needs at least one process id");
        n = 0;
        if (o->threads && !foreach_item(o->threads, count_item, &n) && n == 0)
                return report_usage(cmd, "--thread needs at least one thread id or name");
        return 0;
}

/*
 * A time option as nanoseconds from the start: a duration as given, or a
 * percentage (pf_parse_duration reports parts per 1e9) of the recording.
 */
static int64_t resolve_time(const char *s, int64_t duration_ns)
{
        int64_t ns = 0;
        bool pct = false;
        if (pf_parse_duration(s, &ns, &pct) < 0)
                return -1; /* checked by select_opts_check */
        if (!pct)
                return ns;
        return (int64_t)llround((double)duration_ns * ((double)ns / 1e9));
}

/* Human form of a time for messages: "1.500s". */
static void format_seconds(char *buf, size_t size, int64_t ns)
{
        snprintf(buf, size, "%.3fs", (double)ns / 1e9);
}

struct resolve_ctx {
        struct trace_reader *r;
        const char *path;
        struct select *out;
        size_t n_pids, n_threads;
};

static int resolve_pid(void *ctx, const char *item)
{
        struct resolve_ctx *rc = ctx;
        int32_t pid = 0;
        parse_pid(item, &pid);
        uint32_t n = trace_reader_process_count(rc->r);
        bool found = false;
        for (uint32_t i = 0; i < n && !found; i++) {
                struct trace_process p;
                if (trace_reader_process_at(rc->r, i, &p) == 0 && p.pid == pid)
                        found = true;
        }
        if (!found)
                return report_fail(rc->path,
                                   "no process with pid %d was recorded (see '" REPORT_PROG
                                   " info %s' for the processes)",
                                   (int)pid, rc->path);
        for (size_t i = 0; i < rc->n_pids; i++)
                if (rc->out->pids[i] == pid)
                        return 0;
        rc->out->pids[rc->n_pids++] = pid;
        return 0;
}

/* Does thread `t` answer to `item`: its name, or its OS or Python thread id? */
static bool thread_matches(const struct trace_thread *t, const char *item)
{
        if (t->name && !strcmp(t->name, item))
                return true;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(item, &end, 10);
        if (errno || end == item || *end || item[0] == '-')
                return false;
        return (t->tid >= 0 && (unsigned long long)t->tid == v) ||
               (t->python_thread_id != 0 && t->python_thread_id == v);
}

static int resolve_thread(void *ctx, const char *item)
{
        struct resolve_ctx *rc = ctx;
        uint32_t n = trace_reader_thread_count(rc->r);
        bool found = false;
        for (uint32_t i = 0; i < n; i++) {
                struct trace_thread t;
                if (trace_reader_thread_at(rc->r, i, &t) < 0 || !thread_matches(&t, item))
                        continue;
                found = true;
                bool dup = false;
                for (size_t j = 0; j < rc->n_threads && !dup; j++)
                        dup = rc->out->threads[j] == t.ref;
                if (!dup)
                        rc->out->threads[rc->n_threads++] = t.ref;
        }
        if (!found)
                return report_fail(rc->path,
                                   "no thread is named '%s' or has that OS or Python thread id "
                                   "(see '" REPORT_PROG " info %s' for the threads)",
                                   item, rc->path);
        return 0;
}

/* Items in a comma-separated list (an upper bound: empty items count too). */
static size_t count_items(const char *list)
{
        size_t n = 1;
        for (const char *p = list; *p; p++)
                n += *p == ',';
        return n;
}

int select_resolve(struct trace_reader *r, const char *path, const struct select_opts *o,
                   struct select *out)
{
        struct select s = {0};
        struct trace_filter *f = &s.filter;

        if (o->async && !trace_reader_task_count(r))
                return report_fail(path,
                                   "holds no asyncio tasks: record with pyflame-record --async "
                                   "(CPython 3.7-3.13) to see them");
        trace_reader_set_view(r, o->async ? TRACE_VIEW_TASKS : TRACE_VIEW_THREADS);
        const char *of = trace_reader_meta(r, "samples_of");
        if (o->idle && of && strcmp(of, "on-cpu") == 0)
                return report_fail(path,
                                   "--idle: this trace was recorded with pyflame-record --bpf, "
                                   "which samples threads on a CPU only; record without --bpf "
                                   "for wall-clock time (threads asleep or waiting)");

        if (o->from || o->to || o->since || o->until) {
                struct trace_summary sum;
                int st = trace_reader_summary(r, &sum);
                if (st < 0)
                        return report_read_failed(path, r, st);
                int64_t from = o->from ? resolve_time(o->from, sum.duration_ns) : 0;
                int64_t to = o->to ? resolve_time(o->to, sum.duration_ns) : 0;
                if ((o->since && select_wall_time(r, path, "--since", o->since, &from) != 0) ||
                    (o->until && select_wall_time(r, path, "--until", o->until, &to) != 0))
                        return REPORT_EXIT_FAIL;
                /* to == 0 means "to the end" to libtrace: an explicit 0 is an empty range. */
                if ((o->to || o->until) && to <= from) {
                        char a[32], b[32];
                        format_seconds(a, sizeof(a), from);
                        format_seconds(b, sizeof(b), to);
                        return report_fail(path,
                                           "the time range is empty: %s (%s) is not after %s "
                                           "(%s)",
                                           o->until ? "--until" : "--to", b,
                                           o->since ? "--since" : "--from", a);
                }
                f->from_ns = from;
                f->to_ns = to;
        }

        struct resolve_ctx rc = {.r = r, .path = path, .out = &s};
        if (o->pids) {
                s.pids = calloc(count_items(o->pids), sizeof(*s.pids));
                if (!s.pids)
                        return report_fail(path, "out of memory");
                if (foreach_item(o->pids, resolve_pid, &rc)) {
                        select_free(&s);
                        return REPORT_EXIT_FAIL;
                }
                f->pids = s.pids;
                f->n_pids = rc.n_pids;
        }
        if (o->threads) {
                s.threads = calloc((size_t)trace_reader_thread_count(r) + 1, sizeof(*s.threads));
                if (!s.threads) {
                        select_free(&s);
                        return report_fail(path, "out of memory");
                }
                if (foreach_item(o->threads, resolve_thread, &rc)) {
                        select_free(&s);
                        return REPORT_EXIT_FAIL;
                }
                f->threads = s.threads;
                f->n_threads = rc.n_threads;
        }
        f->state_require = o->idle ? 0 : TRACE_STATE_ON_CPU;
        if (o->gil)
                f->state_require |= TRACE_STATE_HOLDS_GIL;
        /* Tasks weigh wall time: every live task counts in every sample, running or not. */
        if (o->async)
                f->state_require = o->gil ? TRACE_STATE_HOLDS_GIL : 0;
        int vrc = trace_reader_set_native_view(r, o->native);
        if (vrc < 0) {
                select_free(&s);
                return report_read_failed(path, r, vrc);
        }
        *out = s;
        return 0;
}

int select_wall_time(struct trace_reader *r, const char *path, const char *what, const char *s,
                     int64_t *ns)
{
        int64_t t = 0;
        bool rel = false;
        if (pf_parse_wall_time(s, &t, &rel) < 0)
                return report_usage(NULL, "%s: '%s' is not a wall-clock time", what, s);
        int64_t at;
        if (rel) {
                /* Before the end: the recording's, or its last sample's if later. */
                struct trace_summary sum;
                int st = trace_reader_summary(r, &sum);
                if (st < 0)
                        return report_read_failed(path, r, st);
                struct trace_filter all = {0};
                at = select_end_ns(r, &all, &sum) + t;
        } else {
                const char *start = trace_reader_meta(r, TRACE_META_START_WALL_NS);
                char *end = NULL;
                long long w = start ? strtoll(start, &end, 10) : 0;
                if (!start || !*start || *end || w <= 0)
                        return report_fail(path,
                                           "%s %s: the trace does not say when it started by "
                                           "the wall clock (no meta start_wall_ns); select by "
                                           "offset with --from and --to",
                                           what, s);
                at = t - w;
        }
        *ns = at > 0 ? at : 0;
        return 0;
}

int64_t select_end_ns(const struct trace_reader *r, const struct trace_filter *f,
                      const struct trace_summary *sum)
{
        if (f->to_ns)
                return f->to_ns;
        /* Samples may run past the recorded end (a clock that stepped, a forged trace). */
        int64_t end = sum->duration_ns;
        uint32_t n = trace_reader_thread_count(r);
        for (uint32_t i = 0; i < n; i++) {
                struct trace_thread t;
                if (trace_reader_thread_at(r, i, &t) == 0 && t.samples && t.last_ns >= end)
                        end = t.last_ns + 1;
        }
        return end;
}

void select_free(struct select *s)
{
        free(s->pids);
        free(s->threads);
        s->pids = NULL;
        s->threads = NULL;
}

int select_opts_parse(struct select_opts *o, int c, const char *arg)
{
        switch (c) {
        case SELECT_OPT_FROM:
                o->from = arg;
                return 1;
        case SELECT_OPT_TO:
                o->to = arg;
                return 1;
        case SELECT_OPT_SINCE:
                o->since = arg;
                return 1;
        case SELECT_OPT_UNTIL:
                o->until = arg;
                return 1;
        case SELECT_OPT_PID:
        case SELECT_OPT_THREAD:
                if (select_opts_append(c == SELECT_OPT_PID ? &o->pids : &o->threads, arg) < 0)
                        return report_fail(NULL, "out of memory");
                return 1;
        case SELECT_OPT_IDLE:
                o->idle = true;
                return 1;
        case SELECT_OPT_GIL:
                o->gil = true;
                return 1;
        case SELECT_OPT_ASYNC:
                o->async = true;
                return 1;
        case SELECT_OPT_NO_NATIVE:
                o->native = TRACE_NATIVE_HIDE;
                return 1;
        case SELECT_OPT_NATIVE_MODULES:
                o->native = TRACE_NATIVE_BY_MODULE;
                return 1;
        default:
                return 0;
        }
}
