/*
 * fixtures.c - the traces of fixtures.h, and what they should export.
 *
 * basic: two processes, three threads, 100 ticks of 10 ms, finalized at 1 s.
 *   pid 100 "python app.py"
 *     MainThread tid 100  ticks  0-39 main:12 > compute:21             on+gil
 *                                40-59 main:12 > fib:31 > fib:31 > fib:31 on+gil
 *                                60-64 main:12 > compute:21 (another frame
 *                                      that prints the same: first line 19) on
 *                                65-69 no sample (a gap of 50 ms)
 *                                70-79 main:12                          idle
 *     worker     tid 101  ticks  0-29 Worker.run:7 > compute:22
 *                                      even ticks on+gil, odd ticks on
 *                                30-39 no Python frame                  on
 *                                40-49 Worker.run:7 > odd<&"'>;\xff:3   idle
 *   pid 200 "python other.py"
 *     (unnamed)  tid 200  ticks  0-9  <unknown> (special)              on
 *                                10-19 nol (line unknown) > odd...:3    on+gil+nogil
 * deep: one thread, 40 samples of a 300-deep recursion of rec:1 topped by
 *   leaf:5 on even ticks and leaf:6 on odd ones, then 10 samples 299 deep.
 * empty: one process and thread, no sample.
 */
#include "fixtures.h"

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- building ---- */

static uint32_t frame(struct fx_trace *t, struct trace_writer *w, const char *function,
                      const char *qualname, const char *file, int line, int first_line,
                      enum trace_frame_kind kind, const char *label)
{
        struct trace_frame_desc d = {function, qualname, file, line, first_line, kind};
        uint32_t id = 0;
        tu_must(w, trace_writer_intern_frame(w, &d, &id), "intern frame");
        if (id >= FX_MAX_FRAMES)
                tu_die("too many frames");
        t->label[id] = label;
        t->first_line[id] = first_line;
        return id;
}

static uint32_t stack(struct fx_trace *t, struct trace_writer *w, const uint32_t *frames,
                      size_t depth)
{
        uint32_t id = 0;
        tu_must(w, trace_writer_intern_stack_frames(w, frames, depth, &id), "intern stack");
        if (id >= FX_MAX_STACKS)
                tu_die("too many stacks");
        if (!t->stack_frames[id] && depth) {
                t->stack_frames[id] = malloc(depth * sizeof(uint32_t));
                if (!t->stack_frames[id])
                        tu_die("out of memory");
                memcpy(t->stack_frames[id], frames, depth * sizeof(uint32_t));
                t->stack_depth[id] = (uint32_t)depth;
        }
        return id;
}

static int thread(struct fx_trace *t, struct trace_writer *w, int32_t pid, int64_t tid,
                  const char *name)
{
        struct trace_thread_desc d = {pid, tid, (uint64_t)tid + 1000, name};
        struct fx_thread *th = &t->threads[t->n_threads];
        tu_must(w, trace_writer_add_thread(w, &d, &th->ref), "add thread");
        th->pid = pid;
        th->tid = tid;
        th->name = name;
        return t->n_threads++;
}

static void sample(struct fx_trace *t, struct trace_writer *w, int th, int tick, uint32_t stack_id,
                   unsigned state)
{
        int64_t rel = tick * FX_PERIOD_NS;
        tu_must(
            w, trace_writer_add_sample(w, t->threads[th].ref, FX_MONO_START + rel, stack_id, state),
            "add sample");
        if (t->n_samples == t->cap_samples) {
                t->cap_samples = t->cap_samples ? t->cap_samples * 2 : 256;
                t->samples = realloc(t->samples, t->cap_samples * sizeof(*t->samples));
                if (!t->samples)
                        tu_die("out of memory");
        }
        t->samples[t->n_samples++] = (struct fx_sample){th, rel, state, stack_id};
}

static struct trace_writer *create(struct fx_trace *t, const char *name, const char *dir)
{
        tu_fake_mono_ns = FX_MONO_START;
        snprintf(t->path, sizeof(t->path), "%s/%s.pyflame", dir, name);
        struct trace_writer *w = NULL;
        tu_must(w, trace_writer_create(t->path, TRACE_CREATE_FORCE, &w), t->path);
        tu_must(w, trace_writer_set_meta_int(w, TRACE_META_RATE_HZ, 100), "meta");
        tu_must(w, trace_writer_set_meta(w, TRACE_META_MODE, "nonblocking"), "meta");
        tu_must(w, trace_writer_set_meta(w, TRACE_META_HOST, "testhost"), "meta");
        return w;
}

static void finish(struct fx_trace *t, struct trace_writer *w, int64_t end_ms)
{
        tu_fake_mono_ns = FX_MONO_START + end_ms * FX_MS;
        t->duration_ns = end_ms * FX_MS;
        tu_must(w, trace_writer_finalize(w), "finalize");
        trace_writer_free(w);
}

#define ON    TRACE_STATE_ON_CPU
#define GIL   TRACE_STATE_HOLDS_GIL
#define NOGIL TRACE_STATE_NO_GIL

static void build_basic(struct fx_trace *t, const char *dir)
{
        struct trace_writer *w = create(t, "basic", dir);
        tu_must(w, trace_writer_set_meta(w, TRACE_META_CMDLINE, "python app.py"), "meta");
        struct trace_process_desc p1 = {100, "python app.py", "3.12.1", "shared"};
        struct trace_process_desc p2 = {200, "python other.py", "3.11.4", "static"};
        tu_must(w, trace_writer_add_process(w, &p1), "process");
        tu_must(w, trace_writer_add_process(w, &p2), "process");
        int t_main = thread(t, w, 100, 100, "MainThread");
        int t_worker = thread(t, w, 100, 101, "worker");
        int t_other = thread(t, w, 200, 200, NULL);

        uint32_t main12 = frame(t, w, "main", NULL, "app/main.py", 12, 10, TRACE_FRAME_PYTHON,
                                "main (app/main.py:12)");
        uint32_t comp21 = frame(t, w, "compute", NULL, "app/work.py", 21, 20, TRACE_FRAME_PYTHON,
                                "compute (app/work.py:21)");
        uint32_t comp21b = frame(t, w, "compute", NULL, "app/work.py", 21, 19, TRACE_FRAME_PYTHON,
                                 "compute (app/work.py:21)");
        uint32_t comp22 = frame(t, w, "compute", NULL, "app/work.py", 22, 20, TRACE_FRAME_PYTHON,
                                "compute (app/work.py:22)");
        uint32_t fib31 = frame(t, w, "fib", NULL, "app/work.py", 31, 30, TRACE_FRAME_PYTHON,
                               "fib (app/work.py:31)");
        uint32_t run7 = frame(t, w, "run", "Worker.run", "app/work.py", 7, 5, TRACE_FRAME_PYTHON,
                              "Worker.run (app/work.py:7)");
        uint32_t weird = frame(t, w, "odd<&\"'>;\xff", NULL, "app/we ird.py", 3, 1,
                               TRACE_FRAME_PYTHON, "odd<&\"'>;\xef\xbf\xbd (app/we ird.py:3)");
        uint32_t nol =
            frame(t, w, "nol", NULL, "lib/x.py", -1, -1, TRACE_FRAME_PYTHON, "nol (lib/x.py)");
        uint32_t unknown =
            frame(t, w, "<unknown>", NULL, "", -1, -1, TRACE_FRAME_SPECIAL, "<unknown>");

        uint32_t s_comp = stack(t, w, (uint32_t[]){main12, comp21}, 2);
        uint32_t s_fib = stack(t, w, (uint32_t[]){main12, fib31, fib31, fib31}, 4);
        uint32_t s_comp_b = stack(t, w, (uint32_t[]){main12, comp21b}, 2);
        uint32_t s_main = stack(t, w, (uint32_t[]){main12}, 1);
        uint32_t s_worker = stack(t, w, (uint32_t[]){run7, comp22}, 2);
        uint32_t s_weird = stack(t, w, (uint32_t[]){run7, weird}, 2);
        uint32_t s_unknown = stack(t, w, (uint32_t[]){unknown}, 1);
        uint32_t s_nol = stack(t, w, (uint32_t[]){nol, weird}, 2);

        for (int tick = 0; tick < 100; tick++) {
                if (tick < 40)
                        sample(t, w, t_main, tick, s_comp, ON | GIL);
                else if (tick < 60)
                        sample(t, w, t_main, tick, s_fib, ON | GIL);
                else if (tick < 65)
                        sample(t, w, t_main, tick, s_comp_b, ON);
                else if (tick >= 70 && tick < 80)
                        sample(t, w, t_main, tick, s_main, 0);
                if (tick < 30)
                        sample(t, w, t_worker, tick, s_worker, tick % 2 ? ON : ON | GIL);
                else if (tick < 40)
                        sample(t, w, t_worker, tick, TRACE_STACK_EMPTY, ON);
                else if (tick < 50)
                        sample(t, w, t_worker, tick, s_weird, 0);
                if (tick < 10)
                        sample(t, w, t_other, tick, s_unknown, ON);
                else if (tick < 20)
                        sample(t, w, t_other, tick, s_nol, ON | GIL | NOGIL);
        }
        finish(t, w, 1000);
}

static void build_deep(struct fx_trace *t, const char *dir)
{
        enum { DEPTH = 300 };
        struct trace_writer *w = create(t, "deep", dir);
        struct trace_process_desc p = {300, "python deep.py", "3.13.0", "shared"};
        tu_must(w, trace_writer_add_process(w, &p), "process");
        int th = thread(t, w, 300, 300, "MainThread");
        uint32_t rec =
            frame(t, w, "rec", NULL, "deep.py", 1, 1, TRACE_FRAME_PYTHON, "rec (deep.py:1)");
        uint32_t leaf5 =
            frame(t, w, "leaf", NULL, "deep.py", 5, 4, TRACE_FRAME_PYTHON, "leaf (deep.py:5)");
        uint32_t leaf6 =
            frame(t, w, "leaf", NULL, "deep.py", 6, 4, TRACE_FRAME_PYTHON, "leaf (deep.py:6)");
        uint32_t frames[DEPTH];
        for (int i = 0; i < DEPTH; i++)
                frames[i] = rec;
        frames[DEPTH - 1] = leaf5;
        uint32_t s5 = stack(t, w, frames, DEPTH);
        frames[DEPTH - 1] = leaf6;
        uint32_t s6 = stack(t, w, frames, DEPTH);
        uint32_t s_short = stack(t, w, frames, DEPTH - 1);
        for (int tick = 0; tick < 40; tick++)
                sample(t, w, th, tick, tick % 2 ? s6 : s5, ON | GIL);
        for (int tick = 40; tick < 50; tick++)
                sample(t, w, th, tick, s_short, ON | GIL);
        finish(t, w, 500);
}

static void build_empty(struct fx_trace *t, const char *dir)
{
        struct trace_writer *w = create(t, "empty", dir);
        struct trace_process_desc p = {400, "python idle.py", "3.12.1", "shared"};
        tu_must(w, trace_writer_add_process(w, &p), "process");
        thread(t, w, 400, 400, "MainThread");
        finish(t, w, 100);
}

void fx_build(struct fx_trace *t, const char *name, const char *dir)
{
        memset(t, 0, sizeof(*t));
        t->name = name;
        if (strcmp(name, "basic") == 0)
                build_basic(t, dir);
        else if (strcmp(name, "deep") == 0)
                build_deep(t, dir);
        else if (strcmp(name, "empty") == 0)
                build_empty(t, dir);
        else
                tu_die("no fixture %s", name);
}

void fx_free(struct fx_trace *t)
{
        for (int i = 0; i < FX_MAX_STACKS; i++)
                free(t->stack_frames[i]);
        free(t->samples);
        memset(t, 0, sizeof(*t));
}

/* ---- expectations ---- */

bool fx_selected(const struct fx_trace *t, const struct fx_sample *s, const struct trace_filter *f)
{
        if (!f)
                return true;
        if (s->t_ns < f->from_ns || (f->to_ns && s->t_ns >= f->to_ns))
                return false;
        const struct fx_thread *th = &t->threads[s->thread];
        bool ok = f->n_pids == 0;
        for (size_t i = 0; i < f->n_pids; i++)
                ok = ok || f->pids[i] == th->pid;
        if (!ok)
                return false;
        ok = f->n_threads == 0;
        for (size_t i = 0; i < f->n_threads; i++)
                ok = ok || f->threads[i] == th->ref;
        return ok && (s->state & f->state_require) == f->state_require &&
               (s->state & f->state_exclude) == 0;
}

/* Append the root-first labels of `stack` joined by sep to buf. */
static void path_text(const struct fx_trace *t, uint32_t stack_id, char sep, char *buf, size_t len)
{
        size_t n = 0;
        buf[0] = '\0';
        if (stack_id == TRACE_STACK_EMPTY) {
                snprintf(buf, len, "<no Python frame>");
                return;
        }
        for (uint32_t i = 0; i < t->stack_depth[stack_id]; i++) {
                int k = snprintf(buf + n, len - n, "%s%s", i ? (char[]){sep, 0} : "",
                                 t->label[t->stack_frames[stack_id][i]]);
                if (k < 0 || (size_t)k >= len - n)
                        tu_die("path too long");
                n += (size_t)k;
        }
}

struct folded_line {
        char *text;
        uint64_t count;
};

static int folded_cmp(const void *a, const void *b)
{
        return strcmp(((const struct folded_line *)a)->text, ((const struct folded_line *)b)->text);
}

char *fx_folded(const struct fx_trace *t, const struct trace_filter *f)
{
        struct folded_line *lines = calloc(FX_MAX_STACKS + 1, sizeof(*lines));
        size_t n = 0;
        static char buf[65536];
        for (size_t i = 0; i < t->n_samples; i++) {
                const struct fx_sample *s = &t->samples[i];
                if (!fx_selected(t, s, f))
                        continue;
                path_text(t, s->stack, '\x1f', buf, sizeof(buf));
                size_t j = 0;
                while (j < n && strcmp(lines[j].text, buf) != 0)
                        j++;
                if (j == n)
                        lines[n++].text = strdup(buf);
                lines[j].count++;
        }
        qsort(lines, n, sizeof(*lines), folded_cmp);
        size_t cap = 1;
        for (size_t j = 0; j < n; j++)
                cap += strlen(lines[j].text) + 32;
        char *out = malloc(cap);
        size_t len = 0;
        out[0] = '\0';
        for (size_t j = 0; j < n; j++) {
                len += (size_t)snprintf(out + len, cap - len, "%s\t%llu\n", lines[j].text,
                                        (unsigned long long)lines[j].count);
                free(lines[j].text);
        }
        free(lines);
        return out;
}

static void json_str(FILE *out, const char *s)
{
        fputc('"', out);
        for (; *s; s++) {
                unsigned char c = (unsigned char)*s;
                if (c == '"' || c == '\\')
                        fprintf(out, "\\%c", c);
                else if (c < 0x20)
                        fprintf(out, "\\u%04x", c);
                else
                        fputc(c, out);
        }
        fputc('"', out);
}

void fx_write_expected(FILE *out, const struct fx_trace *t, const struct trace_filter *f)
{
        fprintf(out,
                "{\"fixture\":\"%s\",\"period_ns\":%lld,\"duration_ns\":%lld,"
                "\"start_wall_ns\":%lld,\n\"threads\":[",
                t->name, (long long)FX_PERIOD_NS, (long long)t->duration_ns,
                (long long)FX_WALL_START);
        for (int i = 0; i < t->n_threads; i++) {
                const struct fx_thread *th = &t->threads[i];
                fprintf(out, "%s{\"pid\":%d,\"tid\":%lld,\"name\":", i ? "," : "", (int)th->pid,
                        (long long)th->tid);
                if (th->name)
                        json_str(out, th->name);
                else
                        fputs("null", out);
                fputs("}", out);
        }
        fputs("],\n\"samples\":[", out);
        bool first = true;
        for (size_t i = 0; i < t->n_samples; i++) {
                const struct fx_sample *s = &t->samples[i];
                if (!fx_selected(t, s, f))
                        continue;
                fprintf(out, "%s\n{\"thread\":%d,\"t_ns\":%lld,\"state\":%u,\"stack\":[",
                        first ? "" : ",", s->thread, (long long)s->t_ns, s->state);
                first = false;
                if (s->stack == TRACE_STACK_EMPTY) {
                        json_str(out, "<no Python frame>");
                        fputs("],\"first_lines\":[-1", out);
                } else {
                        for (uint32_t d = 0; d < t->stack_depth[s->stack]; d++) {
                                if (d)
                                        fputc(',', out);
                                json_str(out, t->label[t->stack_frames[s->stack][d]]);
                        }
                        fputs("],\"first_lines\":[", out);
                        for (uint32_t d = 0; d < t->stack_depth[s->stack]; d++)
                                fprintf(out, "%s%d", d ? "," : "",
                                        t->first_line[t->stack_frames[s->stack][d]]);
                }
                fputs("]}", out);
        }
        fputs("]}\n", out);
        if (ferror(out))
                tu_die("cannot write the expectations");
}

/* ---- temporary directories ---- */

char *fx_mkdtemp(void)
{
        const char *base = getenv("TMPDIR");
        char tmpl[4096];
        snprintf(tmpl, sizeof(tmpl), "%s/pyflame-export-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpl))
                tu_die("mkdtemp %s: %s", tmpl, strerror(errno));
        return strdup(tmpl);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        return remove(path);
}

void fx_rmtree(const char *dir)
{
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
