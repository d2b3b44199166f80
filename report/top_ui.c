/*
 * top_ui.c - the live view's screen (top.h): the model of top_model.c drawn
 * with ncurses, and a time cursor that replays, follows or goes live.
 *
 * The view owns a read-only libtrace reader of its own. A reader sees the
 * trace as of its open (libtrace reads only the chunks of that snapshot),
 * so following a trace that a recorder is still writing means opening it
 * anew at each refresh while it is not finished: the recorder commits about
 * once a second, in one transaction, so every open sees a consistent
 * state. The recorder's sampling thread never sees the view: a commit waits
 * at most for one short read of ours, and that wait is the committing
 * thread's, behind the sampler's lock-free ring (record/tsink.h).
 *
 * The cursor is the end of the window. Following, it sits at the end of
 * the data ("tail") until the user moves it; replaying, it starts at the end
 * (or --at) paused, and plays at a chosen speed when asked. Everything on
 * screen is redrawn from a new model at each refresh and each key, so a
 * resize is one more redraw.
 *
 * Without a terminal (plain mode) the same model prints as text snapshots,
 * one per interval while following, so that logs get it.
 */
#include "top.h"

#include <curses.h>
#include <term.h>
#include <errno.h>
#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pfutil.h"

/* The windows the w key cycles through; 0 is the whole recording. */
static const int64_t windows_ns[] = {1000000000LL, 10000000000LL, 60000000000LL, 0};
#define N_WINDOWS (sizeof(windows_ns) / sizeof(windows_ns[0]))

static const char *const key_names[TOP_KEY_COUNT] = {"function", "line", "file"};
static const char *const sort_names[TOP_SORT_COUNT] = {"own", "total", "own time", "total time",
                                                       "name"};

struct top_state {
        const struct top_ui_opts *o;
        struct trace_reader *r;
        char problem[512]; /* why there is no reader, when there is none */
        /* Selection. */
        int32_t *pids;
        size_t n_pids;
        uint32_t *threads;
        size_t n_threads;
        bool idle, gil;
        enum trace_native_view native;
        int pid_pick, thread_pick; /* keyboard: -1 all, else the i-th process / thread */
        /* Time. */
        int64_t cursor_ns;
        bool tail; /* cursor pinned to the end of the data */
        bool playing;
        double speed;
        size_t window;
        enum top_key key;
        enum top_sort sort;
        bool help;
        bool colour;
        char prompt[32]; /* the time being typed after j; prompting when prompt_on */
        bool prompt_on;
        char note[128]; /* one-off message in the footer */
        struct top_view view;
        bool have_view;
};

/* Print "<title>: <message>" on stderr; returns 2, the tools' failure status. */
__attribute__((format(printf, 2, 3))) static int fail(const struct top_state *s, const char *fmt,
                                                      ...)
{
        char msg[640];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        fprintf(stderr, "%s: %s\n", s->o->title, msg);
        return 2;
}

/* ---- the trace -------------------------------------------------------- */

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

/*
 * The --pid and --thread lists against the current reader. A thread that
 * is not there yet (following) matches nothing until it is: the filter
 * then holds ref 0, which no sample carries.
 */
static int resolve_selection(struct top_state *s)
{
        free(s->pids);
        free(s->threads);
        s->pids = NULL;
        s->threads = NULL;
        s->n_pids = s->n_threads = 0;
        const struct top_ui_opts *o = s->o;
        uint32_t nt = trace_reader_thread_count(s->r);
        if (o->pids) {
                s->pids = calloc(strlen(o->pids) + 1, sizeof(*s->pids));
                if (!s->pids)
                        return -1;
                for (const char *p = o->pids; *p;) {
                        char *end;
                        long v = strtol(p, &end, 10);
                        if (end != p)
                                s->pids[s->n_pids++] = (int32_t)v;
                        p = *end ? end + 1 : end;
                }
        }
        if (o->threads) {
                s->threads = calloc((size_t)nt + 1, sizeof(*s->threads));
                char *list = strdup(o->threads);
                if (!s->threads || !list) {
                        free(list);
                        return -1;
                }
                char *save = NULL;
                for (char *item = strtok_r(list, ",", &save); item;
                     item = strtok_r(NULL, ",", &save))
                        for (uint32_t i = 0; i < nt && s->n_threads < nt; i++) {
                                struct trace_thread t;
                                if (trace_reader_thread_at(s->r, i, &t) == 0 &&
                                    thread_matches(&t, item))
                                        s->threads[s->n_threads++] = t.ref;
                        }
                free(list);
                if (!s->n_threads)
                        s->threads[s->n_threads++] = 0;
        }
        return 0;
}

static bool following(const struct top_state *s)
{
        return s->o->follow || s->o->live;
}

/*
 * The keyboard's picks are places in the lists of processes and threads:
 * move them to where the same process and thread are in reader `r`'s
 * (reopening a rotating recording, the threads of a set are numbered from
 * its first file, which retention may have deleted); -1 (all) when gone.
 */
static void repick(struct top_state *s, const struct trace_reader *r)
{
        struct trace_thread was, t;
        uint32_t of;
        uint64_t was_addr = 0, addr;
        if (s->thread_pick >= 0 && s->r &&
            trace_reader_thread_at(s->r, (uint32_t)s->thread_pick, &was) == 0) {
                /* A task's stream (--async) is its thread's and its Task's. */
                int was_task =
                    trace_reader_thread_task(s->r, (uint32_t)s->thread_pick, &of, &was_addr) == 1;
                s->thread_pick = -1;
                for (uint32_t i = 0; i < trace_reader_thread_count(r); i++) {
                        addr = 0;
                        if (trace_reader_thread_at(r, i, &t) == 0 && t.pid == was.pid &&
                            t.tid == was.tid && t.python_thread_id == was.python_thread_id &&
                            (trace_reader_thread_task(r, i, &of, &addr) == 1) == was_task &&
                            addr == was_addr) {
                                s->thread_pick = (int)i;
                                break;
                        }
                }
        }
        struct trace_process pw, p;
        if (s->pid_pick >= 0 && s->r &&
            trace_reader_process_at(s->r, (uint32_t)s->pid_pick, &pw) == 0) {
                s->pid_pick = -1;
                for (uint32_t i = 0; i < trace_reader_process_count(r); i++)
                        if (trace_reader_process_at(r, i, &p) == 0 && p.pid == pw.pid) {
                                s->pid_pick = (int)i;
                                break;
                        }
        }
}

/* (Re)open the trace. Returns 0, or -1 with s->problem set (the old reader kept). */
static int open_trace(struct top_state *s)
{
        struct trace_reader *r = NULL;
        int rc;
        /* Following, retention may delete a file listed a moment ago: list them again, once. */
        for (int tries = following(s) ? 2 : 1; tries > 0; tries--) {
                /*
                 * A directory or a glob is expanded at each opening: following the
                 * files of a rotating recording, the view goes on into each new one.
                 */
                trace_reader_close(r); /* the failed attempt's, for its message */
                r = NULL;
                struct report_inputs in = {NULL, 0};
                if (s->o->list_files) {
                        if (s->o->list_files(s->o->ctx, &in.paths, &in.n) < 0) {
                                snprintf(s->problem, sizeof(s->problem), "out of memory");
                                return -1;
                        }
                } else if (report_inputs_expand((char *const *)&s->o->path, 1, &in, s->problem,
                                                sizeof(s->problem)) < 0) {
                        return -1;
                }
                rc = trace_reader_open_set((const char *const *)in.paths, in.n, &r);
                report_inputs_free(&in);
                if (rc == 0)
                        break;
        }
        if (rc < 0) {
                /* libtrace's message may name the path already. */
                const char *why =
                    r && *trace_reader_errmsg(r) ? trace_reader_errmsg(r) : trace_status_str(rc);
                size_t n = strlen(s->o->path);
                if (!strncmp(why, s->o->path, n) && !strncmp(why + n, ": ", 2))
                        why += n + 2;
                snprintf(s->problem, sizeof(s->problem), "%s: %s", s->o->path, why);
                trace_reader_close(r);
                return -1;
        }
        if (s->have_view) {
                top_view_free(&s->view); /* its strings point into the old reader */
                s->have_view = false;
        }
        /* The views are set once per reader, before anything is read. */
        rc = trace_reader_set_native_view(r, s->native);
        if (rc == 0 && s->o->async)
                trace_reader_set_view(r, TRACE_VIEW_TASKS);
        if (rc < 0) {
                snprintf(s->problem, sizeof(s->problem), "%s: %s", s->o->path,
                         *trace_reader_errmsg(r) ? trace_reader_errmsg(r) : trace_status_str(rc));
                trace_reader_close(r);
                return -1;
        }
        repick(s, r);
        trace_reader_close(s->r);
        s->r = r;
        s->problem[0] = 0;
        if (resolve_selection(s) < 0) {
                snprintf(s->problem, sizeof(s->problem), "out of memory");
                return -1;
        }
        return 0;
}

/* Build the model for the current cursor, window and filters into *v; a status. */
static int build(struct top_state *s, struct top_view *v)
{
        struct top_query q = {
            .window_ns = windows_ns[s->window],
            .key = s->key,
            .sort = s->sort,
        };
        struct trace_process p;
        struct trace_thread t;
        if (s->pid_pick >= 0 && trace_reader_process_at(s->r, (uint32_t)s->pid_pick, &p) == 0) {
                q.filter.pids = &p.pid;
                q.filter.n_pids = 1;
        } else if (s->n_pids) {
                q.filter.pids = s->pids;
                q.filter.n_pids = s->n_pids;
        }
        if (s->thread_pick >= 0 &&
            trace_reader_thread_at(s->r, (uint32_t)s->thread_pick, &t) == 0) {
                q.filter.threads = &t.ref;
                q.filter.n_threads = 1;
        } else if (s->n_threads) {
                q.filter.threads = s->threads;
                q.filter.n_threads = s->n_threads;
        }
        /* Tasks weigh wall time: every live task counts in every sample, running or not. */
        q.filter.state_require = s->idle || s->o->async ? 0 : TRACE_STATE_ON_CPU;
        if (s->gil)
                q.filter.state_require |= TRACE_STATE_HOLDS_GIL;
        /* The end first, for the tail and the bounds of the cursor. */
        int64_t end = top_end_ns(s->r);
        if (s->tail || s->cursor_ns > end)
                s->cursor_ns = end;
        if (s->cursor_ns < 0)
                s->cursor_ns = 0;
        q.cursor_ns = s->cursor_ns;
        return top_view_build(s->r, &q, v);
}

/* Rebuild the model for the current cursor, window and filters. */
static void rebuild(struct top_state *s)
{
        if (!s->r)
                return;
        struct top_view v;
        int rc = build(s, &v);
        /*
         * Following a rotating recording, retention may have deleted a file
         * since the files were listed: read the files there are now, once.
         */
        if (rc < 0 && following(s) && open_trace(s) == 0)
                rc = build(s, &v);
        if (rc < 0) {
                snprintf(s->problem, sizeof(s->problem), "%s: %s", s->o->path,
                         *trace_reader_errmsg(s->r) ? trace_reader_errmsg(s->r)
                                                    : trace_status_str(rc));
                return;
        }
        if (s->have_view)
                top_view_free(&s->view);
        s->view = v;
        s->have_view = true;
}

/* ---- text shared by the screen and the snapshots ----------------------- */

static void fmt_secs(char *buf, size_t len, int64_t ns)
{
        snprintf(buf, len, "%.1fs", (double)ns / 1e9);
}

static void fmt_share(char *buf, size_t len, uint64_t part, uint64_t whole)
{
        if (whole)
                snprintf(buf, len, "%.1f%%", 100.0 * (double)part / (double)whole);
        else
                snprintf(buf, len, "-");
}

static void window_name(char *buf, size_t len, int64_t window_ns)
{
        if (window_ns)
                snprintf(buf, len, "last %llds", (long long)(window_ns / 1000000000LL));
        else
                snprintf(buf, len, "all");
}

/* The header's lines (3) for the model `v`. */
static void header_lines(const struct top_state *s, char head[3][512])
{
        const struct top_header *h = &s->view.h;
        char from[32], to[32], end[32], win[32], cpu[16], gil[16], rate[48];
        fmt_secs(from, sizeof(from), h->from_ns);
        fmt_secs(to, sizeof(to), h->to_ns);
        fmt_secs(end, sizeof(end), h->end_ns);
        window_name(win, sizeof(win), windows_ns[s->window]);
        fmt_share(cpu, sizeof(cpu), h->on_cpu, h->seen);
        fmt_share(gil, sizeof(gil), h->holds_gil, h->seen);
        if (h->rate_hz > 0)
                snprintf(rate, sizeof(rate), "%.1f Hz of %g", h->achieved_hz, h->rate_hz);
        else
                snprintf(rate, sizeof(rate), "%.1f Hz", h->achieved_hz);
        const char *mode = h->finalized && (s->o->live || s->o->follow) ? "finished"
                           : s->o->live                                 ? "live"
                           : s->o->follow                               ? "following"
                                                                        : "replay";
        snprintf(head[0], 512, "%s [%s]  Python %s  %s", s->o->title, mode,
                 h->python_version ? h->python_version : "?", h->target);
        snprintf(head[1], 512, "Time %s of %s  window %s (%s to %s)  %s%s x%g  by %s, sorted by %s",
                 to, end, win, from, to, s->tail ? "at end, " : "",
                 s->playing ? "playing" : "paused", s->speed, key_names[s->key],
                 sort_names[s->sort]);
        snprintf(head[2], 512,
                 "Samples %llu  Threads %u  Rate %s  Errors %llu  On CPU %s  GIL %s  Filter: %s%s",
                 (unsigned long long)h->samples, h->threads, rate, (unsigned long long)h->errors,
                 cpu, gil, s->idle ? "idle" : "on-CPU", s->gil ? ", GIL" : "");
}

static const char *const column_titles[TOP_SORT_COUNT] = {"%Own", "%Total", "OwnTime", "TotalTime",
                                                          NULL};

static void table_title(const struct top_state *s, char *buf, size_t len)
{
        const char *name = s->key == TOP_BY_FUNCTION ? "Function (file:line)"
                           : s->key == TOP_BY_LINE   ? "Line (function)"
                                                     : "File";
        char c[TOP_SORT_COUNT][24];
        for (int i = 0; i < TOP_SORT_COUNT; i++)
                snprintf(c[i], sizeof(c[i]), "%s%s", s->sort == (enum top_sort)i ? "*" : "",
                         i == TOP_SORT_NAME ? name : column_titles[i]);
        snprintf(buf, len, "%8s %8s %10s %10s  %s", c[0], c[1], c[2], c[3], c[4]);
}

static void row_line(const struct top_state *s, const struct top_row *row, char *buf, size_t len)
{
        char label[400], own[16], total[16];
        snprintf(own, sizeof(own), "%.1f%%", 100.0 * row->own_share);
        snprintf(total, sizeof(total), "%.1f%%", 100.0 * row->total_share);
        snprintf(buf, len, "%8s %8s %9.2fs %9.2fs  %s", own, total, (double)row->own_ns / 1e9,
                 (double)row->total_ns / 1e9, top_row_label(row, s->key, label, sizeof(label)));
}

/* ---- plain snapshots (no terminal) ------------------------------------- */

static int print_snapshot(struct top_state *s)
{
        /* A trace that could not be read again: say so, and show what was read before. */
        if (s->problem[0] || !s->have_view)
                fprintf(stderr, "%s: %s\n", s->o->title,
                        s->problem[0] ? s->problem : "no data yet");
        if (!s->have_view)
                return 0;
        char head[3][512], buf[600];
        header_lines(s, head);
        for (int i = 0; i < 3; i++)
                printf("%s\n", head[i]);
        table_title(s, buf, sizeof(buf));
        printf("%s\n", buf);
        unsigned max = s->o->max_rows ? s->o->max_rows : 20;
        for (size_t i = 0; i < s->view.n && i < max; i++) {
                row_line(s, &s->view.rows[i], buf, sizeof(buf));
                printf("%s\n", buf);
        }
        printf("\n");
        return fflush(stdout) == 0 ? 0 : -1;
}

static void sleep_ns(int64_t ns)
{
        struct timespec ts = {ns / 1000000000, ns % 1000000000};
        nanosleep(&ts, NULL); /* a signal ends it early: the caller checks *stop */
}

static bool stopped(const struct top_state *s)
{
        return s->o->stop && atomic_load(s->o->stop);
}

static int run_plain(struct top_state *s)
{
        int64_t interval = s->o->interval_ns > 0 ? s->o->interval_ns : 1000000000LL;
        if (!following(s)) {
                rebuild(s);
                if (!s->have_view)
                        return fail(s, "%s", s->problem);
                return print_snapshot(s) < 0 ? fail(s, "writing the snapshot failed") : 0;
        }
        for (;;) {
                /* Wait first: the first snapshot shows an interval's worth. */
                for (int64_t waited = 0; waited < interval && !stopped(s); waited += 100000000LL)
                        sleep_ns(interval - waited < 100000000LL ? interval - waited : 100000000LL);
                if (open_trace(s) == 0)
                        rebuild(s);
                bool done = stopped(s) || (s->have_view && s->view.h.finalized && !s->o->live);
                if (print_snapshot(s) < 0)
                        return fail(s, "writing the snapshot failed");
                if (done)
                        return 0;
        }
}

/* ---- the screen -------------------------------------------------------- */

enum { PAIR_TITLE = 1, PAIR_HOT, PAIR_BAR };

static void put_line(int y, const char *text, attr_t attr)
{
        if (y < 0 || y >= LINES)
                return;
        move(y, 0);
        clrtoeol();
        attron(attr);
        addnstr(text, COLS);
        if (attr & A_REVERSE)
                for (int x = getcurx(stdscr); x > 0 && x < COLS; x++)
                        addch(' ');
        attroff(attr);
}

static const char footer_text[] =
    "q quit ? help space play <- -> 1s j jump +- speed e end w window k by 1-5 sort i idle "
    "g GIL n native t thread p pid";

static const char *const help_text[] = {
    "Keys",
    "  q            quit (a live recording is finished as by Ctrl-C)",
    "  ?            this help (any key closes it)",
    "  space        play or pause the replay",
    "  Left/Right   step the time cursor back or forward by one second (pauses)",
    "  j            jump to a time: type seconds (e.g. 12.5) or a duration (2m), Enter",
    "  + / -        play faster / slower (x2, /2)",
    "  e / End      back to the end of the data (following: stay there)",
    "  Home         to the start",
    "  w            window: last 1 s, 10 s, 60 s, whole recording",
    "  k            rows: functions, lines, files",
    "  1 2 3 4 5    sort by %Own, %Total, OwnTime, TotalTime, name",
    "  s            next sort column",
    "  i            also count samples of threads off CPU (--idle)",
    "  g            count only samples holding the GIL (--gil)",
    "  n            native frames: shown, hidden (--no-native), one per module",
    "  t / p        show one thread / one process at a time, cycling; back to all",
    "",
    "%Own: samples with the row at the top of the stack; %Total: anywhere on it.",
    "Times are samples times the sampling period. Shares are of the window's samples.",
};

static void draw(struct top_state *s)
{
        erase();
        attr_t title = s->colour ? COLOR_PAIR(PAIR_TITLE) | A_BOLD : A_BOLD;
        if (s->help) {
                for (size_t i = 0; i < sizeof(help_text) / sizeof(help_text[0]); i++)
                        put_line((int)i, help_text[i], i == 0 ? title : A_NORMAL);
                refresh();
                return;
        }
        int y = 0;
        if (!s->have_view) {
                put_line(y++, s->o->title, title);
                put_line(y++, s->problem[0] ? s->problem : "waiting for the first samples...",
                         A_NORMAL);
        } else {
                char head[3][512], buf[600];
                header_lines(s, head);
                put_line(y++, head[0], title);
                put_line(y++, head[1], A_NORMAL);
                put_line(y++, head[2], A_NORMAL);
                if (s->problem[0])
                        put_line(y++, s->problem, A_BOLD);
                y++;
                table_title(s, buf, sizeof(buf));
                put_line(y++, buf, A_REVERSE);
                for (size_t i = 0; i < s->view.n && y < LINES - 1; i++) {
                        const struct top_row *row = &s->view.rows[i];
                        row_line(s, row, buf, sizeof(buf));
                        attr_t a =
                            s->colour && row->own_share >= 0.2 ? COLOR_PAIR(PAIR_HOT) : A_NORMAL;
                        put_line(y++, buf, a);
                }
                if (!s->view.n)
                        put_line(y++, "  (no samples in this window)", A_NORMAL);
        }
        char foot[300];
        if (s->prompt_on)
                snprintf(foot, sizeof(foot), "jump to (seconds, Enter; Esc cancels): %s",
                         s->prompt);
        else if (s->note[0])
                snprintf(foot, sizeof(foot), "%s", s->note);
        else
                snprintf(foot, sizeof(foot), "%s", footer_text);
        put_line(LINES - 1, foot, s->colour ? COLOR_PAIR(PAIR_BAR) | A_REVERSE : (attr_t)A_REVERSE);
        refresh();
}

/* Step the cursor to `ns` (clamped by rebuild) and leave the tail. */
static void seek(struct top_state *s, int64_t ns)
{
        s->tail = false;
        s->cursor_ns = ns < 0 ? 0 : ns;
}

static void finish_prompt(struct top_state *s)
{
        int64_t ns;
        bool percent = false;
        char *end;
        double secs = strtod(s->prompt, &end);
        if (end != s->prompt && !*end && secs >= 0 && secs < 1e9)
                seek(s, (int64_t)(secs * 1e9));
        else if (pf_parse_duration(s->prompt, &ns, &percent) == 0 && !percent)
                seek(s, ns);
        else if (pf_parse_duration(s->prompt, &ns, &percent) == 0 && s->have_view)
                seek(s, (int64_t)((double)s->view.h.end_ns * (double)ns / 1e9));
        else
                snprintf(s->note, sizeof(s->note), "not a time: '%s' (e.g. 12.5, 2m, 50%%)",
                         s->prompt);
        s->playing = false;
        s->prompt_on = false;
}

/* Cycle a pick over -1 (all) and 0..n-1. */
static int cycle(int pick, uint32_t n)
{
        return pick + 1 >= (int)n ? -1 : pick + 1;
}

/* Handle one key. Returns true to quit. */
static bool on_key(struct top_state *s, int ch)
{
        s->note[0] = 0;
        if (s->help) {
                s->help = false;
                return false;
        }
        if (s->prompt_on) {
                size_t n = strlen(s->prompt);
                if (ch == '\n' || ch == '\r' || ch == KEY_ENTER)
                        finish_prompt(s);
                else if (ch == 27)
                        s->prompt_on = false;
                else if ((ch == KEY_BACKSPACE || ch == 127 || ch == 8) && n)
                        s->prompt[n - 1] = 0;
                else if (ch > 32 && ch < 127 && n + 1 < sizeof(s->prompt))
                        s->prompt[n] = (char)ch, s->prompt[n + 1] = 0;
                return false;
        }
        switch (ch) {
        case 'q':
        case 'Q':
                return true;
        case '?':
        case 'h':
                s->help = true;
                break;
        case ' ':
                if (s->tail) {
                        s->tail = false;
                        s->playing = false;
                } else {
                        s->playing = !s->playing;
                        /* Play again from the window's start when at the end of a replay. */
                        if (s->playing && s->have_view && s->cursor_ns >= s->view.h.end_ns &&
                            !following(s))
                                s->cursor_ns = windows_ns[s->window];
                }
                break;
        case KEY_LEFT:
        case ',':
                seek(s, s->cursor_ns - 1000000000LL);
                s->playing = false;
                break;
        case KEY_RIGHT:
        case '.':
                seek(s, s->cursor_ns + 1000000000LL);
                s->playing = false;
                break;
        case KEY_HOME:
                seek(s, 0);
                break;
        case KEY_END:
        case 'e':
                s->cursor_ns = INT64_MAX;
                s->tail = following(s);
                s->playing = false;
                break;
        case 'j':
                s->prompt_on = true;
                s->prompt[0] = 0;
                break;
        case '+':
        case '=':
                if (s->speed < 64)
                        s->speed *= 2;
                break;
        case '-':
        case '_':
                if (s->speed > 1.0 / 16)
                        s->speed /= 2;
                break;
        case 'w':
                s->window = (s->window + 1) % N_WINDOWS;
                break;
        case 'k':
                s->key = (enum top_key)((s->key + 1) % TOP_KEY_COUNT);
                break;
        case 's':
                s->sort = (enum top_sort)((s->sort + 1) % TOP_SORT_COUNT);
                break;
        case '1':
        case '2':
        case '3':
        case '4':
        case '5':
                s->sort = (enum top_sort)(ch - '1');
                break;
        case 'i':
                s->idle = !s->idle;
                break;
        case 'g':
                s->gil = !s->gil;
                break;
        case 'n':
                /* A reader's native view is set once: open the trace again with the next. */
                s->native = s->native == TRACE_NATIVE_SHOW   ? TRACE_NATIVE_HIDE
                            : s->native == TRACE_NATIVE_HIDE ? TRACE_NATIVE_BY_MODULE
                                                             : TRACE_NATIVE_SHOW;
                snprintf(s->note, sizeof(s->note), "native frames: %s",
                         s->native == TRACE_NATIVE_SHOW   ? "shown"
                         : s->native == TRACE_NATIVE_HIDE ? "hidden"
                                                          : "one per module");
                open_trace(s);
                break;
        case 't':
                if (s->r)
                        s->thread_pick = cycle(s->thread_pick, trace_reader_thread_count(s->r));
                if (s->thread_pick >= 0) {
                        struct trace_thread t;
                        if (trace_reader_thread_at(s->r, (uint32_t)s->thread_pick, &t) == 0)
                                snprintf(s->note, sizeof(s->note), "thread %lld (%s), pid %d",
                                         (long long)t.tid, t.name ? t.name : "no name", (int)t.pid);
                } else {
                        snprintf(s->note, sizeof(s->note), "all threads");
                }
                break;
        case 'p':
                if (s->r)
                        s->pid_pick = cycle(s->pid_pick, trace_reader_process_count(s->r));
                if (s->pid_pick >= 0) {
                        struct trace_process p;
                        if (trace_reader_process_at(s->r, (uint32_t)s->pid_pick, &p) == 0)
                                snprintf(s->note, sizeof(s->note), "process %d", (int)p.pid);
                } else {
                        snprintf(s->note, sizeof(s->note), "all processes");
                }
                break;
        default:
                break;
        }
        return false;
}

static int64_t mono_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int run_screen(struct top_state *s)
{
        /* Names are UTF-8: wide characters for the names, the C locale for numbers. */
        setlocale(LC_CTYPE, "");
        /*
         * Not initscr(): it exits the process on an unknown terminal, a
         * recording with it. Nor newterm() alone, which leaks its screen
         * then: setupterm() says first whether terminfo knows the terminal.
         */
        int known = 0;
        SCREEN *screen = NULL;
        if (setupterm(NULL, STDOUT_FILENO, &known) == OK) {
                del_curterm(cur_term);
                screen = newterm(NULL, stdout, stdin);
        }
        if (!screen) {
                const char *term = getenv("TERM");
                fprintf(stderr, "%s: terminal type '%s' unknown to ncurses; printing snapshots\n",
                        s->o->title, term ? term : "");
                return run_plain(s);
        }
        cbreak(); /* Ctrl-C still signals */
        noecho();
        keypad(stdscr, TRUE);
        curs_set(0);
        timeout(100);
        s->colour = has_colors() && !getenv("NO_COLOR");
        if (s->colour) {
                start_color();
                use_default_colors();
                init_pair(PAIR_TITLE, COLOR_CYAN, -1);
                init_pair(PAIR_HOT, COLOR_RED, -1);
                init_pair(PAIR_BAR, COLOR_BLUE, -1);
        }
        int64_t interval = s->o->interval_ns > 0 ? s->o->interval_ns : 1000000000LL;
        int64_t last_open = mono_ns(), last_tick = last_open;
        bool quit = false;
        rebuild(s);
        draw(s);
        while (!quit && !stopped(s)) {
                int ch = getch();
                bool redraw = false;
                if (ch == KEY_RESIZE) {
                        redraw = true;
                } else if (ch != ERR) {
                        quit = on_key(s, ch);
                        redraw = true;
                }
                int64_t now = mono_ns();
                if (s->playing && !s->tail) {
                        int64_t step = (int64_t)((double)(now - last_tick) * s->speed);
                        s->cursor_ns += step;
                        if (s->have_view && s->cursor_ns >= s->view.h.end_ns) {
                                s->tail = following(s);
                                s->playing = following(s);
                        }
                        redraw = true;
                }
                last_tick = now;
                bool unfinished = !s->r || (s->have_view && !s->view.h.finalized);
                if (following(s) && unfinished && now - last_open >= interval) {
                        last_open = now;
                        open_trace(s);
                        redraw = true;
                        if (s->o->repaint)
                                clearok(curscr, TRUE);
                }
                if (redraw && !quit) {
                        rebuild(s);
                        draw(s);
                }
        }
        endwin();
        delscreen(screen);
        if (quit && s->o->on_quit)
                s->o->on_quit(s->o->ctx);
        return 0;
}

int top_ui_run(const struct top_ui_opts *o)
{
        struct top_state s = {
            .o = o,
            .pid_pick = -1,
            .thread_pick = -1,
            .idle = o->idle,
            .gil = o->gil,
            .native = o->native,
            .speed = 1,
            .key = o->key,
            .sort = o->sort,
            .window = N_WINDOWS - 1,
        };
        for (size_t i = 0; i < N_WINDOWS; i++)
                if (windows_ns[i] == o->window_ns)
                        s.window = i;
        s.tail = following(&s) && o->at_ns < 0;
        s.cursor_ns = o->at_ns >= 0 ? o->at_ns : INT64_MAX;
        int rc = 0;
        if (open_trace(&s) < 0 && !following(&s))
                rc = fail(&s, "%s", s.problem);
        else if (o->plain)
                rc = run_plain(&s);
        else
                rc = run_screen(&s);
        if (s.have_view)
                top_view_free(&s.view);
        trace_reader_close(s.r);
        free(s.pids);
        free(s.threads);
        return rc;
}
