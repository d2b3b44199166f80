/*
 * golden.c - golden-output tests of pyflame-report.
 *
 * Builds small traces through libtrace's writer API with fully known
 * content (processes, threads, stacks with recursion, states, times, meta),
 * runs the real pyflame-report binary on them for every view, format and
 * selection, and compares its standard output with the files in golden/.
 * Then feeds it bad input (a missing file, a file that is not SQLite, a
 * database that is not a trace, a trace of a newer format, traces truncated
 * or damaged at several points, usage errors) and checks that each gives
 * exit status 2, one line on stderr and nothing on stdout, and that -o
 * never leaves a file behind on failure.
 *
 * Usage: golden PYFLAME-REPORT GOLDEN-DIR WORK-DIR
 * With PYFLAME_UPDATE_GOLDEN=1 in the environment the golden files are
 * (re)written from the current output instead of compared: review every
 * changed golden by hand before committing it.
 *
 * Determinism: the writer stamps traces with CLOCK_MONOTONIC and
 * CLOCK_REALTIME through clock_gettime(). This program defines its own
 * clock_gettime(), which the statically linked libtrace calls instead of
 * libc's, so that a trace's start, sample times and end are exactly the
 * times the test chooses; host, kernel and tool version are set as meta.
 * Reports run with the work directory as their current directory, so paths
 * in messages and source files found by relative name are the same on
 * every machine.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "trace.h"

#define MS 1000000LL

static void write_file(const char *path, const void *data, size_t n)
{
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0)
                tu_die("cannot write %s: %s", path, strerror(errno));
}

/* Whole file in a malloc'ed, NUL-terminated buffer; NULL when it cannot be read. */
static char *read_file(const char *path, size_t *size)
{
        FILE *f = fopen(path, "rb");
        if (!f)
                return NULL;
        size_t cap = 4096, n = 0;
        char *buf = malloc(cap + 1);
        for (;;) {
                if (!buf)
                        tu_die("out of memory");
                n += fread(buf + n, 1, cap - n, f);
                if (n < cap)
                        break;
                cap *= 2;
                buf = realloc(buf, cap + 1);
        }
        fclose(f);
        buf[n] = '\0';
        *size = n;
        return buf;
}

/* ---- trace building ---- */

static uint32_t frame(struct trace_writer *w, const char *function, const char *qualname,
                      const char *file, int line, int first_line, enum trace_frame_kind kind)
{
        struct trace_frame_desc d = {function, qualname, file, line, first_line, kind};
        uint32_t id = 0;
        tu_must(w, trace_writer_intern_frame(w, &d, &id), "intern frame");
        return id;
}

static uint32_t stack(struct trace_writer *w, size_t depth, ...)
{
        uint32_t frames[32];
        va_list ap;
        va_start(ap, depth);
        for (size_t i = 0; i < depth; i++)
                frames[i] = va_arg(ap, uint32_t);
        va_end(ap);
        uint32_t id = 0;
        tu_must(w, trace_writer_intern_stack_frames(w, frames, depth, &id), "intern stack");
        return id;
}

static uint32_t thread(struct trace_writer *w, int32_t pid, int64_t tid, uint64_t pyid,
                       const char *name)
{
        struct trace_thread_desc d = {pid, tid, pyid, name};
        uint32_t ref = 0;
        tu_must(w, trace_writer_add_thread(w, &d, &ref), "add thread");
        return ref;
}

static struct trace_writer *create(const char *path)
{
        tu_fake_mono_ns = TU_MONO_START;
        struct trace_writer *w = NULL;
        int rc = trace_writer_create(path, TRACE_CREATE_FORCE, &w);
        tu_must(w, rc, path);
        tu_must(w, trace_writer_set_meta(w, TRACE_META_HOST, "testhost"), "meta");
        tu_must(w, trace_writer_set_meta(w, TRACE_META_KERNEL, "Linux 6.1.0-test x86_64"), "meta");
        tu_must(w, trace_writer_set_meta(w, TRACE_META_TOOL_VERSION, "0.0.0-test"), "meta");
        tu_must(w, trace_writer_set_meta_int(w, TRACE_META_RATE_HZ, 100), "meta");
        tu_must(w, trace_writer_set_meta(w, TRACE_META_MODE, "nonblocking"), "meta");
        return w;
}

static void finish(struct trace_writer *w, int64_t end_ms, bool finalize)
{
        tu_fake_mono_ns = TU_MONO_START + end_ms * MS;
        if (finalize)
                tu_must(w, trace_writer_finalize(w), "finalize");
        else
                tu_must(w, trace_writer_flush(w), "flush");
        trace_writer_free(w);
}

#define ON  TRACE_STATE_ON_CPU
#define GIL TRACE_STATE_HOLDS_GIL

/*
 * basic.db: two processes, five threads, 100 ticks 10 ms apart (0..990 ms),
 * one sample per thread per tick; finalized at 1 s.
 *
 *   pid 4242 "python app.py" 3.12.1 shared
 *     MainThread tid 4242  ticks  0-49 main:12 > compute:21          on+gil
 *                                50-69 main:14 > fib:31 > fib:31 > fib:31  on+gil
 *                                70-79 main:14 > fib:31                on
 *                                80-99 main:12                         idle
 *     worker     tid 4243  ticks  0-89 _bootstrap:1010 > Worker.run:7 > compute:22
 *                                      even ticks on+gil, odd ticks on
 *                                90-99 (no Python frame)               on
 *     sleeper    tid 4244  ticks  0-99 _bootstrap:1010 > sleep (native)  idle
 *   pid 5151 "python other.py" 3.11.4 static
 *     MainThread tid 5151  ticks  0-99 <module>:3 > odd;name:9          on+gil
 *                                      (app/fifo.py is a FIFO: no source)
 *     (unnamed)  tid 5152  ticks  0-9  <unknown> (special)              on
 *
 * Source files app/main.py and app/work.py exist in the work directory;
 * lib/threading.py does not.
 */
static void build_basic(const char *path)
{
        struct trace_writer *w = create(path);
        struct trace_process_desc p1 = {4242, "python app.py", "3.12.1", "shared"};
        struct trace_process_desc p2 = {5151, "python other.py", "3.11.4", "static"};
        tu_must(w, trace_writer_add_process(w, &p1), "process");
        tu_must(w, trace_writer_add_process(w, &p2), "process");
        uint32_t t_main = thread(w, 4242, 4242, 140000000000001ULL, "MainThread");
        uint32_t t_worker = thread(w, 4242, 4243, 140000000000002ULL, "worker");
        uint32_t t_sleeper = thread(w, 4242, 4244, 140000000000003ULL, "sleeper");
        uint32_t t_other = thread(w, 5151, 5151, 139000000000001ULL, "MainThread");
        uint32_t t_anon = thread(w, 5151, 5152, 0, NULL);

        uint32_t main12 = frame(w, "main", NULL, "app/main.py", 12, 10, TRACE_FRAME_PYTHON);
        uint32_t main14 = frame(w, "main", NULL, "app/main.py", 14, 10, TRACE_FRAME_PYTHON);
        uint32_t compute21 = frame(w, "compute", NULL, "app/work.py", 21, 20, TRACE_FRAME_PYTHON);
        uint32_t compute22 = frame(w, "compute", NULL, "app/work.py", 22, 20, TRACE_FRAME_PYTHON);
        uint32_t fib31 = frame(w, "fib", NULL, "app/work.py", 31, 30, TRACE_FRAME_PYTHON);
        uint32_t run7 = frame(w, "run", "Worker.run", "app/work.py", 7, 5, TRACE_FRAME_PYTHON);
        uint32_t boot = frame(w, "_bootstrap", "Thread._bootstrap", "lib/threading.py", 1010, 1000,
                              TRACE_FRAME_PYTHON);
        uint32_t sleep = frame(w, "sleep", NULL, "libpython3.12.so", -1, -1, TRACE_FRAME_NATIVE);
        uint32_t module3 = frame(w, "<module>", NULL, "app/fifo.py", 3, 1, TRACE_FRAME_PYTHON);
        uint32_t odd9 = frame(w, "odd;name", NULL, "app/fifo.py", 9, 8, TRACE_FRAME_PYTHON);
        uint32_t unknown = frame(w, "<unknown>", NULL, "", -1, -1, TRACE_FRAME_SPECIAL);

        uint32_t s_compute = stack(w, 2, main12, compute21);
        uint32_t s_fib3 = stack(w, 4, main14, fib31, fib31, fib31);
        uint32_t s_fib1 = stack(w, 2, main14, fib31);
        uint32_t s_main = stack(w, 1, main12);
        uint32_t s_worker = stack(w, 3, boot, run7, compute22);
        uint32_t s_sleep = stack(w, 2, boot, sleep);
        uint32_t s_other = stack(w, 2, module3, odd9);
        uint32_t s_unknown = stack(w, 1, unknown);

        for (int tick = 0; tick < 100; tick++) {
                int64_t t = TU_MONO_START + tick * 10 * MS;
                uint32_t s = tick < 50   ? s_compute
                             : tick < 70 ? s_fib3
                             : tick < 80 ? s_fib1
                                         : s_main;
                unsigned st = tick < 70 ? ON | GIL : tick < 80 ? ON : 0;
                tu_must(w, trace_writer_add_sample(w, t_main, t, s, st), "sample");
                s = tick < 90 ? s_worker : TRACE_STACK_EMPTY;
                st = tick < 90 && tick % 2 == 0 ? ON | GIL : ON;
                tu_must(w, trace_writer_add_sample(w, t_worker, t, s, st), "sample");
                tu_must(w, trace_writer_add_sample(w, t_sleeper, t, s_sleep, 0), "sample");
                tu_must(w, trace_writer_add_sample(w, t_other, t, s_other, ON | GIL), "sample");
                if (tick < 10)
                        tu_must(w, trace_writer_add_sample(w, t_anon, t, s_unknown, ON), "sample");
        }
        tu_must(w, trace_writer_count_error(w, 4242, TRACE_ERROR_TORN, 3), "error");
        tu_must(w, trace_writer_count_error(w, 0, TRACE_ERROR_LATE, 2), "error");
        tu_fake_mono_ns = TU_MONO_START + 1000 * MS;
        tu_must(w, trace_writer_end_process(w, 5151, 0, tu_fake_mono_ns), "end process");
        finish(w, 1000, true);
}

/*
 * sources.db: one thread, 100 ticks 10 ms apart, finalized at 1 s, with
 * source texts stored in the trace:
 *   /srv/app/handlers.py  stored only in the trace (a tab, a byte that is
 *                         not UTF-8, a CRLF line, a line too long to show)
 *   app/work.py           stored, and different from the local file: the
 *                         stored text wins
 *   /srv/app/short.py     stored, 3 lines, but sampled at line 7 too, and
 *                         modified after the recording started
 *   /srv/app/nosrc.py     no source anywhere
 *   <frozen importlib._bootstrap>  not a file: never the hottest
 *   /srv/other/short.py   a frame with no sample: "short.py" is ambiguous
 *
 *   ticks  0-44 handle:6                               self handlers.py:6
 *         45-69 handle:5 > compute (app/work.py:21)
 *         70-79 handle:7 > helper (short.py:2)
 *         80-84 handle:7 > helper (short.py:7)
 *         85-92 job (nosrc.py:3)
 *         93-99 _find_and_load (<frozen importlib._bootstrap>:1176)
 */
static void build_sources(const char *path)
{
        struct trace_writer *w = create(path);
        struct trace_process_desc p = {300, "python srv.py", "3.12.1", "shared"};
        tu_must(w, trace_writer_add_process(w, &p), "process");
        uint32_t t = thread(w, 300, 300, 7, "MainThread");
        const char *h = "/srv/app/handlers.py", *sh = "/srv/app/short.py";
        uint32_t handle5 = frame(w, "handle", NULL, h, 5, 3, TRACE_FRAME_PYTHON);
        uint32_t handle6 = frame(w, "handle", NULL, h, 6, 3, TRACE_FRAME_PYTHON);
        uint32_t handle7 = frame(w, "handle", NULL, h, 7, 3, TRACE_FRAME_PYTHON);
        uint32_t compute = frame(w, "compute", NULL, "app/work.py", 21, 20, TRACE_FRAME_PYTHON);
        uint32_t helper2 = frame(w, "helper", NULL, sh, 2, 1, TRACE_FRAME_PYTHON);
        uint32_t helper7 = frame(w, "helper", NULL, sh, 7, 1, TRACE_FRAME_PYTHON);
        uint32_t job = frame(w, "job", NULL, "/srv/app/nosrc.py", 3, 1, TRACE_FRAME_PYTHON);
        frame(w, "helper", NULL, "/srv/other/short.py", 1, 1, TRACE_FRAME_PYTHON);
        uint32_t frozen = frame(w, "_find_and_load", NULL, "<frozen importlib._bootstrap>", 1176,
                                1165, TRACE_FRAME_PYTHON);
        uint32_t stacks[] = {stack(w, 1, handle6),
                             stack(w, 2, handle5, compute),
                             stack(w, 2, handle7, helper2),
                             stack(w, 2, handle7, helper7),
                             stack(w, 1, job),
                             stack(w, 1, frozen)};
        for (int tick = 0; tick < 100; tick++) {
                int k = tick < 45   ? 0
                        : tick < 70 ? 1
                        : tick < 80 ? 2
                        : tick < 85 ? 3
                        : tick < 93 ? 4
                                    : 5;
                tu_must(w,
                        trace_writer_add_sample(w, t, TU_MONO_START + tick * 10 * MS, stacks[k],
                                                ON | GIL),
                        "sample");
        }
        static const char handlers[] =
            "\"\"\"Request handlers (stored in the trace only).\"\"\"\n"
            "\n"
            "def handle(req):\n"
            "    # caf\xe9: a Latin-1 byte\n"
            "    total = compute(req.size)\n"
            "\tfor part in req.parts:  # a tab\n"
            "    return helper(total)\r\n"
            "\n"
            "LONG = '"
            "0123456789012345678901234567890123456789012345678901234567890123456789"
            "0123456789012345678901234567890123456789012345678901234567890123456789"
            "0123456789012345678901234567890123456789012345678901234567890123456789"
            "0123456789012345678901234567890123456789'\n";
        static const char work[] = "# app/work.py as it was when recorded\n"
                                   "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
                                   "def compute(n):\n"
                                   "    return sum(i * i for i in range(n))  # stored\n";
        static const char short_py[] = "def helper(x):\n"
                                       "    return x + 1\n"
                                       "# three lines, then the file was cut";
        tu_must(w,
                trace_writer_add_source(w, h, handlers, sizeof(handlers) - 1,
                                        TU_WALL_START - 86400LL * 1000000000),
                "source");
        tu_must(w, trace_writer_add_source(w, "app/work.py", work, sizeof(work) - 1, -1), "source");
        tu_must(w,
                trace_writer_add_source(w, sh, short_py, sizeof(short_py) - 1,
                                        TU_WALL_START + 500 * MS),
                "source");
        finish(w, 1000, true);
}

/* unfinished.db: the recorder died after its last flush at 250 ms. */
static void build_unfinished(const char *path)
{
        struct trace_writer *w = create(path);
        struct trace_process_desc p = {77, "python job.py", "3.13.0", "shared,free-threaded"};
        tu_must(w, trace_writer_add_process(w, &p), "process");
        uint32_t t = thread(w, 77, 77, 5, "MainThread");
        uint32_t job = frame(w, "job", NULL, "job.py", 4, 3, TRACE_FRAME_PYTHON);
        uint32_t s = stack(w, 1, job);
        for (int i = 0; i <= 25; i++)
                tu_must(w,
                        trace_writer_add_sample(w, t, TU_MONO_START + i * 10 * MS, s,
                                                ON | TRACE_STATE_NO_GIL | GIL),
                        "sample");
        finish(w, 300, false);
}

/* empty.db: finalized with a process and a thread but no sample. */
static void build_empty(const char *path)
{
        struct trace_writer *w = create(path);
        struct trace_process_desc p = {9, NULL, NULL, NULL};
        tu_must(w, trace_writer_add_process(w, &p), "process");
        thread(w, 9, -1, 0, NULL);
        finish(w, 50, true);
}

/*
 * async.db: one thread running an event loop, 10 ticks 10 ms apart, with
 * asyncio tasks (pyflame-record --async): "main" awaiting a gather of
 * "kid-0" and "kid-1" (each waiting in fetch > sleep), and "cpu", running in
 * ticks 0-3 (its thread's stack: burn > spin) and waiting in burn's
 * sleep(0) after. The thread itself is in the loop (run_forever > select)
 * when cpu is not running.
 */
static void build_async(const char *path)
{
        struct trace_writer *w = create(path);
        tu_must(w, trace_writer_set_meta_int(w, TRACE_META_ASYNC, 1), "meta");
        struct trace_process_desc p = {77, "python srv.py", "3.12.1", "shared"};
        tu_must(w, trace_writer_add_process(w, &p), "process");
        uint32_t th = thread(w, 77, 77, 140000000000077ULL, "MainThread");
        uint32_t t_main, t_kid0, t_kid1, t_cpu;
        struct trace_task_desc d[4] = {{th, 0x1000, "main"},
                                       {th, 0x2000, "kid-0"},
                                       {th, 0x3000, "kid-1"},
                                       {th, 0x4000, "cpu"}};
        tu_must(w, trace_writer_add_task(w, &d[0], &t_main), "task");
        tu_must(w, trace_writer_add_task(w, &d[1], &t_kid0), "task");
        tu_must(w, trace_writer_add_task(w, &d[2], &t_kid1), "task");
        tu_must(w, trace_writer_add_task(w, &d[3], &t_cpu), "task");
        uint32_t run = frame(w, "run_forever", NULL, "asyncio/base.py", 600, 590, 0);
        uint32_t sel = frame(w, "select", NULL, "selectors.py", 468, 450, 0);
        uint32_t burn = frame(w, "burn", NULL, "srv.py", 20, 18, 0);
        uint32_t burn_wait = frame(w, "burn", NULL, "srv.py", 21, 18, 0);
        uint32_t spin = frame(w, "spin", NULL, "srv.py", 12, 10, 0);
        uint32_t main_wait = frame(w, "main", NULL, "srv.py", 31, 28, 0);
        uint32_t fetch = frame(w, "fetch", NULL, "srv.py", 6, 5, 0);
        uint32_t sleep = frame(w, "sleep", NULL, "asyncio/tasks.py", 665, 640, 0);
        uint32_t n_main = frame(w, "main", NULL, "<task>", -1, -1, TRACE_FRAME_TASK);
        uint32_t n_kid0 = frame(w, "kid-0", NULL, "<task>", -1, -1, TRACE_FRAME_TASK);
        uint32_t n_kid1 = frame(w, "kid-1", NULL, "<task>", -1, -1, TRACE_FRAME_TASK);
        uint32_t n_cpu = frame(w, "cpu", NULL, "<task>", -1, -1, TRACE_FRAME_TASK);
        uint32_t s_loop = stack(w, 2, run, sel), s_run = stack(w, 3, run, burn, spin);
        uint32_t s_main = stack(w, 3, n_main, main_wait, sleep);
        uint32_t s_kid0 = stack(w, 5, n_main, main_wait, n_kid0, fetch, sleep);
        uint32_t s_kid1 = stack(w, 5, n_main, main_wait, n_kid1, fetch, sleep);
        uint32_t s_cpu_run = stack(w, 3, n_cpu, burn, spin);
        uint32_t s_cpu_wait = stack(w, 3, n_cpu, burn_wait, sleep);
        for (int tick = 0; tick < 10; tick++) {
                int64_t t = TU_MONO_START + tick * 10 * MS;
                bool running = tick < 4;
                tu_must(w,
                        trace_writer_add_sample(w, th, t, running ? s_run : s_loop,
                                                running ? ON | GIL : 0),
                        "sample");
                tu_must(w, trace_writer_add_sample(w, t_main, t, s_main, 0), "sample");
                tu_must(w, trace_writer_add_sample(w, t_kid0, t, s_kid0, 0), "sample");
                tu_must(w, trace_writer_add_sample(w, t_kid1, t, s_kid1, 0), "sample");
                tu_must(w,
                        trace_writer_add_sample(w, t_cpu, t, running ? s_cpu_run : s_cpu_wait,
                                                running ? ON | GIL : 0),
                        "sample");
        }
        finish(w, 100, true);
}

/* big.db: many pages of samples, for truncation at several points. */
static void build_big(const char *path)
{
        struct trace_writer *w = create(path);
        struct trace_process_desc p = {1, "python big.py", "3.12.1", "shared"};
        tu_must(w, trace_writer_add_process(w, &p), "process");
        uint32_t threads[4];
        for (int i = 0; i < 4; i++)
                threads[i] = thread(w, 1, 100 + i, 0, NULL);
        uint32_t stacks[64];
        uint32_t parent = TRACE_STACK_EMPTY;
        for (int i = 0; i < 64; i++) {
                char name[32];
                snprintf(name, sizeof(name), "f%d", i);
                uint32_t f = frame(w, name, NULL, "big.py", i + 1, i + 1, TRACE_FRAME_PYTHON);
                tu_must(w, trace_writer_intern_stack(w, parent, f, &stacks[i]), "stack");
                parent = i % 8 == 7 ? TRACE_STACK_EMPTY : stacks[i];
        }
        for (int tick = 0; tick < 20000; tick++)
                for (int i = 0; i < 4; i++)
                        tu_must(w,
                                trace_writer_add_sample(w, threads[i], TU_MONO_START + tick * MS,
                                                        stacks[(tick * 7 + i * 13) % 64],
                                                        (unsigned)(tick + i) % 4),
                                "sample");
        finish(w, 20000, true);
}

/* ---- forged bad files ---- */

static void sql_file(const char *path, const char *sql)
{
        sqlite3 *db = NULL;
        char *err = NULL;
        if (sqlite3_open(path, &db) != SQLITE_OK || sqlite3_exec(db, sql, NULL, NULL, &err))
                tu_die("%s: %s", path, err ? err : sqlite3_errmsg(db));
        sqlite3_close(db);
}

static void copy_prefix(const char *from, const char *to, size_t n)
{
        size_t size;
        char *data = read_file(from, &size);
        if (!data)
                tu_die("cannot read %s", from);
        write_file(to, data, n < size ? n : size);
        free(data);
}

/* Copy `from` with `n` bytes at `at` overwritten by 0x5a. */
static void copy_damaged(const char *from, const char *to, size_t at, size_t n)
{
        size_t size;
        char *data = read_file(from, &size);
        if (!data || at + n > size)
                tu_die("cannot damage %s at %zu", from, at);
        memset(data + at, 0x5a, n);
        write_file(to, data, size);
        free(data);
}

static size_t file_size(const char *path)
{
        struct stat st;
        if (stat(path, &st) < 0)
                tu_die("%s: %s", path, strerror(errno));
        return (size_t)st.st_size;
}

/* ---- running pyflame-report ---- */

static const char *report_bin;
static const char *golden_dir;
static bool update;
static int failures, checks;

struct run {
        int status;
        char *out, *err;
        size_t out_len, err_len;
};

static void run_free(struct run *r)
{
        free(r->out);
        free(r->err);
}

/* Run pyflame-report with `args` (NULL-terminated) in the work directory. */
static struct run run_report(const char *const *args)
{
        const char *argv[32] = {"pyflame-report"};
        size_t n = 1;
        for (; args[n - 1] && n < 31; n++)
                argv[n] = args[n - 1];
        argv[n] = NULL;
        pid_t pid = fork();
        if (pid < 0)
                tu_die("fork: %s", strerror(errno));
        if (pid == 0) {
                int o = open("run.stdout", O_WRONLY | O_CREAT | O_TRUNC, 0644);
                int e = open("run.stderr", O_WRONLY | O_CREAT | O_TRUNC, 0644);
                int in = open("/dev/null", O_RDONLY);
                if (o < 0 || e < 0 || in < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 || dup2(in, 0) < 0)
                        _exit(126);
                execv(report_bin, (char *const *)argv);
                _exit(127);
        }
        int ws;
        while (waitpid(pid, &ws, 0) < 0)
                if (errno != EINTR)
                        tu_die("waitpid: %s", strerror(errno));
        struct run r = {0};
        r.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        r.out = read_file("run.stdout", &r.out_len);
        r.err = read_file("run.stderr", &r.err_len);
        if (!r.out || !r.err)
                tu_die("cannot read the output of pyflame-report");
        unlink("run.stdout");
        unlink("run.stderr");
        return r;
}

static void check(bool ok, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void check(bool ok, const char *name, const char *fmt, ...)
{
        checks++;
        if (ok) {
                printf("ok   %s\n", name);
                return;
        }
        failures++;
        printf("FAIL %s: ", name);
        va_list ap;
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        putchar('\n');
}

/* Compare `text` with golden/<name>.<ext>, or write it there when updating. */
static void compare_golden(const char *name, const char *ext, const char *text, size_t len)
{
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s.%s", golden_dir, name, ext);
        if (update) {
                write_file(path, text, len);
                return;
        }
        size_t want_len = 0;
        char *want = read_file(path, &want_len);
        bool same = want && want_len == len && !memcmp(want, text, len);
        if (!same) {
                char actual[PATH_MAX];
                snprintf(actual, sizeof(actual), "%s.%s.actual", name, ext);
                write_file(actual, text, len);
                char cwd[PATH_MAX];
                check(false, name, "output differs: diff -u %s %s/%s", path,
                      getcwd(cwd, sizeof(cwd)) ? cwd : ".", actual);
        }
        free(want);
}

static size_t count_lines(const char *s)
{
        size_t n = 0;
        for (; *s; s++)
                n += *s == '\n';
        return n;
}

/* A successful run whose stdout must match golden/<name>.out. */
static void golden(const char *name, const char *const *args)
{
        struct run r = run_report(args);
        int before = failures;
        if (r.status != 0)
                check(false, name, "exit %d, stderr: %s", r.status, r.err);
        else
                compare_golden(name, "out", r.out, r.out_len);
        if (failures == before)
                check(true, name, "%s", "");
        run_free(&r);
}

/*
 * A failing run: status 2, nothing on stdout, one line on stderr that starts
 * with `prefix`; with `name_golden` set, stderr must match golden/<name>.err.
 */
static void fails(const char *name, const char *prefix, bool with_golden, const char *const *args)
{
        struct run r = run_report(args);
        int before = failures;
        if (r.status != 2)
                check(false, name, "exit %d, want 2; stderr: %s", r.status, r.err);
        else if (r.out_len)
                check(false, name, "printed %zu bytes on stdout", r.out_len);
        else if (count_lines(r.err) != 1 || r.err[r.err_len - 1] != '\n')
                check(false, name, "stderr is not one line: %s", r.err);
        else if (strncmp(r.err, prefix, strlen(prefix)))
                check(false, name, "stderr does not start with '%s': %s", prefix, r.err);
        else if (with_golden)
                compare_golden(name, "err", r.err, r.err_len);
        if (failures == before)
                check(true, name, "%s", "");
        run_free(&r);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static bool dir_is_empty(const char *path)
{
        DIR *d = opendir(path);
        if (!d)
                return false;
        struct dirent *e;
        bool empty = true;
        while ((e = readdir(d)))
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                        empty = false;
        closedir(d);
        return empty;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)flag;
        (void)ftw;
        return remove(path);
}

/* ---- the cases ---- */

static void views_and_formats(void)
{
        golden("folded", ARGS("basic.db"));
        golden("folded-explicit", ARGS("report", "--folded", "basic.db"));
        golden("folded-idle", ARGS("--idle", "basic.db"));
        golden("folded-gil", ARGS("basic.db", "--gil"));
        golden("folded-idle-gil", ARGS("--idle", "--gil", "basic.db"));
        golden("folded-json", ARGS("--format", "json", "basic.db"));
        golden("by-line", ARGS("--by-line", "basic.db"));
        golden("by-line-top3", ARGS("--by-line", "--top", "3", "basic.db"));
        golden("by-line-idle-all", ARGS("--by-line", "--idle", "--top", "0", "basic.db"));
        golden("by-line-no-source", ARGS("--by-line", "--no-source", "basic.db"));
        golden("by-line-csv", ARGS("--by-line", "--format", "csv", "basic.db"));
        golden("by-line-json", ARGS("--by-line", "--format", "json", "--top", "4", "basic.db"));
        golden("by-function", ARGS("--by-function", "basic.db"));
        golden("by-function-idle", ARGS("--by-function", "--idle", "basic.db"));
        golden("by-function-csv", ARGS("--by-function", "--format", "csv", "basic.db"));
        golden("by-function-json", ARGS("--by-function", "--format", "json", "basic.db"));
        golden("info", ARGS("info", "basic.db"));
        /* asyncio tasks: wall time per task, idle included; the threads' view untouched. */
        golden("async-folded", ARGS("--async", "async.db"));
        golden("async-threads", ARGS("--idle", "async.db"));
        golden("async-by-function", ARGS("--async", "--by-function", "async.db"));
        golden("async-thread-name", ARGS("--async", "--thread", "kid-1", "async.db"));
        golden("async-info", ARGS("info", "async.db"));
        fails("async-none", "pyflame-report: basic.db: ", true, ARGS("--async", "basic.db"));
        golden("info-json", ARGS("info", "--format", "json", "basic.db"));
        golden("info-unfinished", ARGS("info", "unfinished.db"));
        golden("info-empty-json", ARGS("info", "--format=json", "empty.db"));
        golden("folded-unfinished", ARGS("unfinished.db"));
}

static void selections(void)
{
        golden("from-500ms", ARGS("--from", "500ms", "basic.db"));
        golden("to-0.25s", ARGS("--to", "0.25s", "basic.db"));
        golden("from-to-seconds", ARGS("--from", "0.495", "--to", "0.755s", "basic.db"));
        golden("from-to-percent",
               ARGS("--by-function", "--from", "25%", "--to", "75%", "basic.db"));
        golden("from-percent-idle", ARGS("--idle", "--from", "90%", "basic.db"));
        golden("pid", ARGS("--pid", "5151", "basic.db"));
        golden("pid-list", ARGS("--pid", "5151,4242", "--by-function", "basic.db"));
        golden("thread-name", ARGS("--thread", "worker", "basic.db"));
        golden("thread-name-shared", ARGS("--thread", "MainThread", "--by-function", "basic.db"));
        golden("thread-tid", ARGS("--thread", "4244", "--idle", "basic.db"));
        golden("thread-pyid", ARGS("--thread=140000000000001", "--idle", "basic.db"));
        golden("thread-list", ARGS("--thread", "worker", "--thread", "4242,5152", "--by-line",
                                   "--no-source", "basic.db"));
        golden("pid-and-thread", ARGS("--pid", "5151", "--thread", "MainThread", "basic.db"));
        golden("gil-by-line", ARGS("--gil", "--by-line", "--format", "csv", "basic.db"));
}

static void empty_selection(void)
{
        struct run r = run_report(ARGS("--from", "995ms", "basic.db"));
        check(r.status == 0 && r.out_len == 0 && count_lines(r.err) == 1 &&
                  strstr(r.err, "no sample matches"),
              "empty-selection", "exit %d, stdout %zu bytes, stderr: %s", r.status, r.out_len,
              r.err);
        run_free(&r);
        r = run_report(ARGS("empty.db"));
        check(r.status == 0 && r.out_len == 0, "empty-trace", "exit %d, stderr: %s", r.status,
              r.err);
        run_free(&r);
}

static void output_file(void)
{
        mkdir("out", 0755);
        struct run r = run_report(ARGS("-o", "out/folded.txt", "basic.db"));
        size_t n = 0;
        char *got = read_file("out/folded.txt", &n);
        struct run ref = run_report(ARGS("basic.db"));
        check(r.status == 0 && r.out_len == 0 && got && n == ref.out_len &&
                  !memcmp(got, ref.out, n),
              "output-file", "exit %d, stderr %s", r.status, r.err);
        free(got);
        run_free(&r);
        run_free(&ref);
        unlink("out/folded.txt");

        /* A failure leaves neither the file nor a temporary file behind. */
        fails("output-file-damaged", "pyflame-report: truncated-half.db: ", false,
              ARGS("-o", "out/bad.txt", "truncated-half.db"));
        check(dir_is_empty("out"), "output-file-damaged-nothing-left", "out/ is not empty");
        /* An existing file is kept as it was when the report fails. */
        write_file("out/keep.txt", "old\n", 4);
        fails("output-file-kept", "pyflame-report: ", false,
              ARGS("--from", "2s", "--to", "1s", "-o", "out/keep.txt", "basic.db"));
        got = read_file("out/keep.txt", &n);
        check(got && n == 4 && !memcmp(got, "old\n", 4), "output-file-kept-intact",
              "out/keep.txt changed");
        free(got);
        unlink("out/keep.txt");
        fails("output-file-is-trace", "pyflame-report: basic.db: ", true,
              ARGS("-o", "basic.db", "basic.db"));
        fails("output-file-is-trace-info", "pyflame-report: ./basic.db: ", true,
              ARGS("info", "-o", "./basic.db", "basic.db"));
        fails("output-file-no-dir", "pyflame-report: nodir/x.txt: ", true,
              ARGS("-o", "nodir/x.txt", "basic.db"));
}

static void bad_input(void)
{
        fails("missing", "pyflame-report: missing.db: ", true, ARGS("missing.db"));
        fails("missing-info", "pyflame-report: missing.db: ", true, ARGS("info", "missing.db"));
        fails("directory", "pyflame-report: out: ", true, ARGS("out"));
        fails("fifo", "pyflame-report: app/fifo.py: ", true, ARGS("app/fifo.py"));
        fails("not-sqlite", "pyflame-report: notsqlite.db: ", true, ARGS("notsqlite.db"));
        fails("not-sqlite-info", "pyflame-report: notsqlite.db: ", true,
              ARGS("info", "notsqlite.db"));
        fails("not-trace", "pyflame-report: plain.db: ", true, ARGS("--by-line", "plain.db"));
        fails("too-new", "pyflame-report: newer.db: ", true, ARGS("newer.db"));
        fails("too-new-info", "pyflame-report: newer.db: ", true, ARGS("info", "newer.db"));
        fails("empty-file", "pyflame-report: zero.db: ", true, ARGS("zero.db"));

        /* Truncated and damaged traces, through every view. */
        static const char *const damaged[] = {
            "truncated-100.db",       "truncated-4096.db",    "truncated-half.db",
            "truncated-last-page.db", "truncated-minus-1.db", "damaged-middle.db",
            "damaged-end.db",
        };
        for (size_t i = 0; i < sizeof(damaged) / sizeof(damaged[0]); i++) {
                char prefix[128], name[128];
                snprintf(prefix, sizeof(prefix), "pyflame-report: %s: ", damaged[i]);
                static const char *const views[][3] = {
                    {"--folded", NULL},   {"--by-line", NULL}, {"--by-function", NULL},
                    {"--format", "json"}, {"--idle", NULL},
                };
                for (size_t v = 0; v < sizeof(views) / sizeof(views[0]); v++) {
                        snprintf(name, sizeof(name), "%s %s", damaged[i], views[v][0]);
                        if (views[v][1])
                                fails(name, prefix, false,
                                      ARGS(views[v][0], views[v][1], damaged[i]));
                        else
                                fails(name, prefix, false, ARGS(views[v][0], damaged[i]));
                }
                snprintf(name, sizeof(name), "%s info", damaged[i]);
                fails(name, prefix, false, ARGS("info", damaged[i]));
        }
}

static void usage_errors(void)
{
        fails("usage-no-file", "pyflame-report: ", true, ARGS("--by-line"));
        fails("usage-no-args", "pyflame-report: ", true, ARGS(NULL));
        fails("usage-two-files", "pyflame-report: ", true, ARGS("basic.db", "empty.db"));
        fails("usage-unknown-option", "pyflame-report: ", true, ARGS("--bogus", "basic.db"));
        fails("usage-unknown-short", "pyflame-report: ", true, ARGS("-x", "basic.db"));
        fails("usage-missing-value", "pyflame-report: ", true, ARGS("basic.db", "--top"));
        fails("usage-bad-from", "pyflame-report: ", true, ARGS("--from", "soon", "basic.db"));
        fails("usage-bad-to-percent", "pyflame-report: ", true, ARGS("--to", "150%", "basic.db"));
        fails("usage-bad-top", "pyflame-report: ", true,
              ARGS("--by-line", "--top", "-3", "basic.db"));
        fails("usage-top-folded", "pyflame-report: ", true, ARGS("--top", "3", "basic.db"));
        fails("usage-csv-folded", "pyflame-report: ", true, ARGS("--format", "csv", "basic.db"));
        fails("usage-bad-format", "pyflame-report: ", true,
              ARGS("--by-line", "--format", "xml", "basic.db"));
        fails("usage-two-views", "pyflame-report: ", true,
              ARGS("--by-line", "--by-function", "basic.db"));
        fails("usage-bad-pid", "pyflame-report: ", true, ARGS("--pid", "12x", "basic.db"));
        fails("usage-empty-pid-list", "pyflame-report: ", true, ARGS("--pid", ",", "basic.db"));
        fails("usage-info-csv", "pyflame-report: ", true,
              ARGS("info", "--format", "csv", "basic.db"));
        fails("usage-info-option", "pyflame-report: ", true, ARGS("info", "--idle", "basic.db"));
        fails("unknown-pid", "pyflame-report: basic.db: ", true, ARGS("--pid", "999", "basic.db"));
        fails("unknown-thread", "pyflame-report: basic.db: ", true,
              ARGS("--thread", "nobody", "basic.db"));
        fails("empty-range", "pyflame-report: basic.db: ", true,
              ARGS("--from", "60%", "--to", "50%", "basic.db"));
        fails("empty-range-zero", "pyflame-report: basic.db: ", true,
              ARGS("--to", "0", "basic.db"));

        struct run r = run_report(ARGS("--help"));
        check(r.status == 0 && strstr(r.out, "--by-line") && strstr(r.out, "info"), "help",
              "exit %d", r.status);
        run_free(&r);
        r = run_report(ARGS("info", "--help"));
        check(r.status == 0 && strstr(r.out, "Usage: pyflame-report info"), "help-info", "exit %d",
              r.status);
        run_free(&r);
        r = run_report(ARGS("--version"));
        check(r.status == 0 && !strncmp(r.out, "pyflame-report ", 15), "version", "exit %d",
              r.status);
        run_free(&r);
}

/* The exporters are export.h's to test; here only their wiring into the command. */
static void export_formats(void)
{
        static const char *const formats[][2] = {
            {"svg", "<?xml"}, {"html", "<!DOCTYPE html>"}, {"speedscope", "{"},
            {"chrome", NULL}, {"pprof", "\x1f\x8b"},
        };
        for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++) {
                char name[64];
                snprintf(name, sizeof(name), "export-%s", formats[i][0]);
                struct run r =
                    run_report(ARGS("--format", formats[i][0], "--thread", "worker", "basic.db"));
                const char *magic = formats[i][1];
                check(r.status == 0 && r.out_len > 0 && r.err_len == 0 &&
                          (!magic || !strncmp(r.out, magic, strlen(magic))),
                      name, "exit %d, %zu bytes, stderr: %s", r.status, r.out_len, r.err);
                run_free(&r);
                snprintf(name, sizeof(name), "export-%s-damaged", formats[i][0]);
                fails(name, "pyflame-report: truncated-half.db: ", false,
                      ARGS("--format", formats[i][0], "-o", "out/x", "truncated-half.db"));
        }
        check(dir_is_empty("out"), "export-damaged-nothing-left", "out/ is not empty");
        struct run r = run_report(
            ARGS("--format", "svg", "--title", "T", "--icicle", "-o", "out/t.svg", "basic.db"));
        size_t n = 0;
        char *svg = read_file("out/t.svg", &n);
        check(r.status == 0 && svg && strstr(svg, "<svg"), "export-svg-file", "exit %d: %s",
              r.status, r.err);
        free(svg);
        run_free(&r);
        unlink("out/t.svg");
        fails("usage-export-by-line", "pyflame-report: ", true,
              ARGS("--format", "svg", "--by-line", "basic.db"));
        fails("usage-title-json", "pyflame-report: ", true,
              ARGS("--format", "json", "--title", "x", "basic.db"));
}

/* The annotate view, and source text taken from the trace before the local file. */
static void annotate_views(void)
{
        golden("annotate", ARGS("annotate", "sources.db"));
        golden("annotate-alias", ARGS("--source", "/srv/app/handlers.py", "sources.db"));
        golden("annotate-suffix-work", ARGS("annotate", "--source", "work.py", "sources.db"));
        golden("annotate-beyond", ARGS("annotate", "--source", "app/short.py", "sources.db"));
        golden("annotate-no-source", ARGS("annotate", "--source", "nosrc.py", "sources.db"));
        golden("annotate-frozen",
               ARGS("annotate", "--source", "<frozen importlib._bootstrap>", "sources.db"));
        golden("annotate-top0-json",
               ARGS("annotate", "--top", "0", "--format", "json", "sources.db"));
        golden("annotate-window", ARGS("annotate", "--top", "2", "--from", "40%", "sources.db"));
        golden("annotate-local", ARGS("annotate", "basic.db"));
        golden("annotate-local-thread",
               ARGS("annotate", "--thread", "worker", "--source", "app/work.py", "basic.db"));
        golden("annotate-idle-top2", ARGS("annotate", "--idle", "--top", "2", "basic.db"));
        golden("by-line-sources", ARGS("--by-line", "sources.db"));
        golden("by-line-sources-old", ARGS("--by-line", "sources-old.db"));
        golden("annotate-old", ARGS("annotate", "sources-old.db"));

        fails("annotate-damaged", "pyflame-report: sources-damaged.db: ", true,
              ARGS("annotate", "--source", "app/work.py", "sources-damaged.db"));
        fails("by-line-damaged-source", "pyflame-report: sources-damaged.db: ", true,
              ARGS("--by-line", "sources-damaged.db"));
        /* A damaged source that is not shown is not read. */
        golden("annotate-damaged-other",
               ARGS("annotate", "--source", "handlers.py", "sources-damaged.db"));
        fails("annotate-unknown-file", "pyflame-report: sources.db: ", true,
              ARGS("annotate", "--source", "nothere.py", "sources.db"));
        fails("annotate-ambiguous", "pyflame-report: sources.db: ", true,
              ARGS("annotate", "--source", "short.py", "sources.db"));
        fails("usage-annotate-csv", "pyflame-report: ", true,
              ARGS("annotate", "--format", "csv", "sources.db"));
        fails("usage-annotate-source-top", "pyflame-report: ", true,
              ARGS("annotate", "--source", "a.py", "--top", "2", "sources.db"));
        fails("usage-annotate-by-line", "pyflame-report: ", true,
              ARGS("--source", "a.py", "--by-line", "sources.db"));
        struct run r = run_report(ARGS("annotate", "--from", "995ms", "sources.db"));
        check(r.status == 0 && r.out_len == 0 && strstr(r.err, "no sample matches"),
              "annotate-empty-selection", "exit %d, stderr: %s", r.status, r.err);
        run_free(&r);
        r = run_report(ARGS("annotate", "--help"));
        check(r.status == 0 && strstr(r.out, "Usage: pyflame-report annotate"), "help-annotate",
              "exit %d", r.status);
        run_free(&r);
}

static void make_inputs(void)
{
        mkdir("app", 0755);
        static const char main_py[] = "import work\n"
                                      "\n\n\n\n\n\n\n\n"
                                      "def main():\n" /* 10 */
                                      "    w = work.Worker()\n"
                                      "    work.compute(10**6)\n" /* 12 */
                                      "    w.start()\n"
                                      "    work.fib(25)\n"; /* 14 */
        write_file("app/main.py", main_py, sizeof(main_py) - 1);
        char work_py[2048] = "";
        const char *lines[] = {
            [5] = "    def run(self):",
            [6] = "        \"\"\"The worker's loop.\"\"\"",
            [7] = "        compute(10**7)\t# busy",
            [20] = "def compute(n):",
            [21] = "    total = sum(i * i for i in range(n))",
            [22] = "    return total",
            [30] = "def fib(n):",
            [31] = "    return n if n < 2 else fib(n - 1) + fib(n - 2)",
        };
        for (int i = 1; i <= 31; i++) {
                strcat(work_py, lines[i] ? lines[i] : "");
                strcat(work_py, "\n");
        }
        write_file("app/work.py", work_py, strlen(work_py));
        /* A fixed time before the recordings, so that annotate's headers do not depend on today. */
        struct timespec old[2] = {{1700000000, 0}, {1700000000, 0}};
        utimensat(AT_FDCWD, "app/main.py", old, 0);
        utimensat(AT_FDCWD, "app/work.py", old, 0);
        if (mkfifo("app/fifo.py", 0644) < 0)
                tu_die("mkfifo: %s", strerror(errno));

        build_basic("basic.db");
        build_unfinished("unfinished.db");
        build_empty("empty.db");
        build_async("async.db");
        build_big("big.db");
        build_sources("sources.db");
        copy_prefix("sources.db", "sources-old.db", SIZE_MAX);
        sql_file("sources-old.db", "DROP TABLE sources; DROP TABLE source_encodings;");
        copy_prefix("sources.db", "sources-damaged.db", SIZE_MAX);
        sql_file("sources-damaged.db",
                 "UPDATE sources SET data = CAST(substr(data, 1, 20) || zeroblob(8) || "
                 "substr(data, 29) AS BLOB) WHERE file = (SELECT id FROM strings WHERE value = "
                 "'app/work.py');");

        write_file("notsqlite.db", "hello, I am not a database\n", 27);
        write_file("zero.db", "", 0);
        sql_file("plain.db", "CREATE TABLE t(x); INSERT INTO t VALUES (1);");
        copy_prefix("basic.db", "newer.db", SIZE_MAX);
        char sql[64];
        snprintf(sql, sizeof(sql), "PRAGMA user_version = %d;", TRACE_FORMAT_VERSION + 1);
        sql_file("newer.db", sql);

        size_t size = file_size("big.db");
        copy_prefix("big.db", "truncated-100.db", 100);
        copy_prefix("big.db", "truncated-4096.db", 4096);
        copy_prefix("big.db", "truncated-half.db", size / 2);
        copy_prefix("big.db", "truncated-last-page.db", size - 4096);
        copy_prefix("big.db", "truncated-minus-1.db", size - 1);
        copy_damaged("big.db", "damaged-middle.db", size / 2 - 2048, 4096);
        copy_damaged("big.db", "damaged-end.db", size - 4096, 4096);
}

int main(int argc, char **argv)
{
        if (argc != 4) {
                fprintf(stderr, "usage: golden PYFLAME-REPORT GOLDEN-DIR WORK-DIR\n");
                return 2;
        }
        static char bin[PATH_MAX], gdir[PATH_MAX];
        if (!realpath(argv[1], bin) || !realpath(argv[2], gdir))
                tu_die("%s or %s: %s", argv[1], argv[2], strerror(errno));
        report_bin = bin;
        golden_dir = gdir;
        const char *u = getenv("PYFLAME_UPDATE_GOLDEN");
        update = u && *u && strcmp(u, "0");

        nftw(argv[3], remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        if (mkdir(argv[3], 0755) < 0 || chdir(argv[3]) < 0)
                tu_die("%s: %s", argv[3], strerror(errno));
        make_inputs();

        views_and_formats();
        selections();
        empty_selection();
        output_file();
        export_formats();
        annotate_views();
        bad_input();
        usage_errors();

        if (update)
                printf("goldens written to %s: review each change before committing\n", golden_dir);
        printf("%d checks, %d failed\n", checks, failures);
        return failures ? 1 : 0;
}
