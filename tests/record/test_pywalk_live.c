/*
 * test_pywalk_live.c - the walker against every installed interpreter.
 *
 * For each interpreter (pyinterps.h) starts live_target.py (argv[1]), which
 * builds a known stack - a method (qualname on 3.11+), a generator, a
 * coroutine (3.5+), an __init__ called often enough to get 3.13's shim frame
 * - prints what CPython reports about it (sys._getframe: names, files,
 * f_lineno; native thread ids) and spins on one line. The test finds the
 * interpreter with pyfind, walks it from outside and expects exactly that
 * stack in the main thread, the worker thread asleep in worker(), the right
 * kernel TIDs, the main thread holding the GIL, and a warm sample costing a
 * handful of reads. Then the thread names: "MainThread" and "worker-A" on
 * the threads with those TIDs, and "worker-B", a thread the target starts
 * (on SIGUSR1) after the walker opened. Interpreters that are not installed
 * are simply absent.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "memsrc.h"
#include "pyfind.h"
#include "pyinterps.h"
#include "pywalk.h"

static const char *target_script;

struct want_frame {
        char name[64], qual[64], file[512];
        int line, first;
};

struct want {
        int pid;
        long main_tid, worker_tid;
        int threads;
        struct want_frame f[32];
        int depth;
};

struct child {
        pid_t pid;
        int out; /* read end of its stdout */
};

static void sleep_ms(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
}

static void kill_target(struct child *c)
{
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
        close(c->out);
}

/* Read the target's report up to READY (10 s at most). */
static int read_report(struct child *c, struct want *w)
{
        char buf[16384];
        size_t len = 0;
        memset(w, 0, sizeof(*w));
        for (int waited = 0; waited < 10000;) {
                struct pollfd p = {.fd = c->out, .events = POLLIN};
                if (poll(&p, 1, 100) <= 0) {
                        waited += 100;
                        continue;
                }
                ssize_t n = read(c->out, buf + len, sizeof(buf) - 1 - len);
                if (n <= 0)
                        return -1;
                len += (size_t)n;
                buf[len] = 0;
                if (strstr(buf, "READY\n"))
                        break;
        }
        if (!strstr(buf, "READY\n"))
                return -1;
        char *save = NULL;
        for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                if (sscanf(line, "PID %d", &w->pid) == 1 ||
                    sscanf(line, "TID main %ld", &w->main_tid) == 1 ||
                    sscanf(line, "TID worker %ld", &w->worker_tid) == 1 ||
                    sscanf(line, "THREADS %d", &w->threads) == 1)
                        continue;
                if (line[0] == 'F' && w->depth < 32) {
                        struct want_frame *f = &w->f[w->depth];
                        if (sscanf(line, "F %63[^\t]\t%63[^\t]\t%511[^\t]\t%d\t%d", f->name,
                                   f->qual, f->file, &f->line, &f->first) == 5)
                                w->depth++;
                }
        }
        return w->depth > 0 && w->pid > 0 ? 0 : -1;
}

struct seen {
        const struct want *want;
        bool qualnames;
        int threads, main_ok, worker_ok, main_gil, worker_gil, torn, unknown_gil;
        uint64_t main_id, worker_id; /* their thread ids (what threading keys them by) */
        char diff[512];
};

static bool main_matches(struct seen *s, const struct pywalk_thread *th)
{
        const struct want *w = s->want;
        if (th->depth != (uint32_t)w->depth) {
                snprintf(s->diff, sizeof(s->diff), "depth %u, want %d (top %s)", th->depth,
                         w->depth, th->depth ? th->frames[0].code->name : "-");
                return false;
        }
        for (int i = 0; i < w->depth; i++) {
                const struct pywalk_frame *f = &th->frames[i];
                const struct want_frame *e = &w->f[i];
                const char *qual = f->code->qualname ? f->code->qualname : "-";
                if (strcmp(f->code->name, e->name) || strcmp(f->code->file, e->file) ||
                    f->line != e->line || f->code->first_line != e->first ||
                    (s->qualnames && strcmp(qual, e->qual))) {
                        snprintf(s->diff, sizeof(s->diff),
                                 "frame %d: got %s/%s %s:%d (first %d), want %s/%s %s:%d (first "
                                 "%d)",
                                 i, f->code->name, qual, f->code->file, f->line,
                                 f->code->first_line, e->name, e->qual, e->file, e->line, e->first);
                        return false;
                }
        }
        return true;
}

static int on_thread(void *ctx, const struct pywalk_thread *th)
{
        struct seen *s = ctx;
        s->threads++;
        if (th->status) {
                s->torn++;
                return 0;
        }
        if (th->gil & PYWALK_GIL_UNKNOWN)
                s->unknown_gil++;
        if (th->native_tid == s->want->main_tid)
                s->main_id = th->thread_id;
        else if (th->native_tid == s->want->worker_tid)
                s->worker_id = th->thread_id;
        if (th->native_tid == s->want->main_tid) {
                if (main_matches(s, th))
                        s->main_ok++;
                if (th->gil & PYWALK_GIL_HELD)
                        s->main_gil++;
        } else if (th->native_tid == s->want->worker_tid) {
                /* worker() over threading's bootstrap (2.7 calls it __bootstrap). */
                const char *file = th->depth ? th->frames[0].code->file : "";
                const char *bottom = th->depth ? th->frames[th->depth - 1].code->name : "";
                size_t n = strlen(file), b = strlen(bottom);
                if (th->depth >= 2 && strcmp(th->frames[0].code->name, "worker") == 0 && n >= 14 &&
                    strcmp(file + n - 14, "live_target.py") == 0 && b >= 10 &&
                    strcmp(bottom + b - 10, "_bootstrap") == 0)
                        s->worker_ok++;
                if (th->gil & PYWALK_GIL_HELD)
                        s->worker_gil++;
        }
        return 0;
}

/* ---- thread names ---- */

struct names {
        int n;
        uint64_t id[16];
        char name[16][64];
};

static void on_name(void *ctx, int64_t interp, uint64_t id, const char *name)
{
        struct names *g = ctx;
        if (g->n < 16 && interp == 0) {
                g->id[g->n] = id;
                snprintf(g->name[g->n++], sizeof(g->name[0]), "%s", name);
        }
}

static const char *name_of(const struct names *g, uint64_t id)
{
        for (int i = 0; i < g->n; i++)
                if (g->id[i] == id)
                        return g->name[i];
        return "(none)";
}

/* The thread id of the thread whose kernel TID is `tid`, from one sample. */
struct find_tid {
        long tid;
        uint64_t id;
};

static int on_thread_tid(void *ctx, const struct pywalk_thread *th)
{
        struct find_tid *f = ctx;
        if (th->native_tid == f->tid)
                f->id = th->thread_id;
        return 0;
}

/* The TID the target prints for worker-B after SIGUSR1 (5 s at most). */
static long read_worker_b(struct child *c)
{
        char buf[4096];
        size_t len = 0;
        long tid = -1;
        for (int waited = 0; waited < 5000 && tid < 0;) {
                struct pollfd p = {.fd = c->out, .events = POLLIN};
                if (poll(&p, 1, 100) <= 0) {
                        waited += 100;
                        continue;
                }
                ssize_t n = read(c->out, buf + len, sizeof(buf) - 1 - len);
                if (n <= 0)
                        break;
                len += (size_t)n;
                buf[len] = 0;
                char *at = strstr(buf, "TID worker-B ");
                if (at && strchr(at, '\n'))
                        tid = strtol(at + 13, NULL, 10);
        }
        return tid;
}

/*
 * Names of the threads that exist, then of one started after the walker
 * opened: it must be named within a few refreshes. Returns 0, or -1 with
 * the reason printed.
 */
static int check_names(const struct pyinterp *py, struct child *c, struct pywalk *w,
                       const struct seen *s)
{
        struct names g = {0};
        uint64_t r0 = pywalk_reads(w);
        int n = pywalk_thread_names(w, on_name, &g);
        uint64_t cold = pywalk_reads(w) - r0;
        g.n = 0;
        r0 = pywalk_reads(w);
        n = pywalk_thread_names(w, on_name, &g);
        uint64_t warm = pywalk_reads(w) - r0;
        print_message("%-14s names: %d (%s, %s), %llu reads, then %llu\n", py->label, n,
                      name_of(&g, s->main_id), name_of(&g, s->worker_id), (unsigned long long)cold,
                      (unsigned long long)warm);
        if (n != 2 || strcmp(name_of(&g, s->main_id), "MainThread") != 0 ||
            strcmp(name_of(&g, s->worker_id), "worker-A") != 0)
                return -1;
        if (kill(c->pid, SIGUSR1) < 0)
                return -1;
        struct find_tid f = {.tid = read_worker_b(c)};
        if (f.tid <= 0) {
                print_message("   worker-B did not start\n");
                return -1;
        }
        for (int i = 0; i < 100; i++) {
                if (!f.id && pywalk_sample(w, on_thread_tid, &f) < 0)
                        return -1;
                g.n = 0;
                if (f.id && pywalk_thread_names(w, on_name, &g) == 3 &&
                    strcmp(name_of(&g, f.id), "worker-B") == 0) {
                        print_message("%-14s worker-B named after %d tries\n", py->label, i + 1);
                        return 0;
                }
                sleep_ms(20);
        }
        print_message("   worker-B (tid %ld, id %#llx) not named: %s\n", f.tid,
                      (unsigned long long)f.id, name_of(&g, f.id));
        return -1;
}

static void check_interpreter(void **state)
{
        const struct pyinterp *py = *state;
        struct child c;
        assert_int_equal(pyinterps_spawn(py, target_script, &c.pid, &c.out), 0);
        struct want want;
        int rc = read_report(&c, &want);
        if (rc != 0)
                kill_target(&c);
        assert_int_equal(rc, 0);
        assert_int_equal(want.pid, c.pid);

        struct pyfind_target t;
        char err[512] = "";
        for (int i = 0; i < 100; i++) {
                rc = pyfind_target(c.pid, &t, err, sizeof(err));
                if (rc != PYFIND_NOT_READY)
                        break;
                sleep_ms(20);
        }
        if (rc != 0) {
                print_message("%s: pyfind: %d %s\n", py->label, rc, err);
                kill_target(&c);
                fail();
        }
        struct memsrc m;
        memsrc_init_process(&m, c.pid);
        struct pywalk *w = NULL;
        for (int i = 0; i < 100; i++) {
                rc = pywalk_open(&t, &m, &w, err, sizeof(err));
                if (rc != PYFIND_NOT_READY)
                        break;
                sleep_ms(20);
        }
        if (rc != 0) {
                print_message("%s: pywalk_open: %d %s\n", py->label, rc, err);
                kill_target(&c);
                fail();
        }

        struct seen s = {.want = &want, .qualnames = py->major == 3 && py->minor >= 11};
        int samples = 0, max_threads = 0;
        uint64_t warm_reads = UINT64_MAX;
        for (; samples < 200 && (s.main_ok < 5 || s.worker_ok < 5); samples++) {
                int before = s.threads;
                uint64_t r0 = pywalk_reads(w);
                rc = pywalk_sample(w, on_thread, &s);
                uint64_t reads = pywalk_reads(w) - r0;
                if (samples >= 2 && reads < warm_reads)
                        warm_reads = reads;
                if (rc != 0)
                        break;
                if (s.threads - before > max_threads)
                        max_threads = s.threads - before;
                sleep_ms(1);
        }
        int names_rc = rc == 0 ? check_names(py, &c, w, &s) : -1;
        pywalk_close(w);
        kill_target(&c);
        print_message("%-14s %d samples: main ok %d (GIL %d), worker ok %d (GIL %d), torn %d, "
                      "warm sample %llu read(s)\n",
                      py->label, samples, s.main_ok, s.main_gil, s.worker_ok, s.worker_gil, s.torn,
                      (unsigned long long)warm_reads);
        if (s.main_ok == 0)
                print_message("   main thread: %s\n", s.diff);
        assert_int_equal(rc, 0);
        assert_int_equal(max_threads, want.threads);
        assert_true(s.main_ok >= 5);
        assert_true(s.worker_ok >= 5);
        assert_true(s.torn * 4 < samples);
        /* The spinning main thread holds the GIL in most samples, the sleeper seldom. */
        assert_int_equal(s.unknown_gil, 0);
        assert_true(s.main_gil > 0);
        assert_true(s.worker_gil < s.main_gil);
        assert_true(warm_reads <= 4);
        assert_int_equal(names_rc, 0);
}

int main(int argc, char **argv)
{
        if (argc < 2) {
                fprintf(stderr, "usage: %s live_target.py\n", argv[0]);
                return 2;
        }
        target_script = argv[1];
        static struct pyinterp pys[32];
        size_t npy = pyinterps_find(pys, 32);
        struct CMUnitTest tests[32];
        size_t nt = 0;
        for (size_t i = 0; i < npy; i++) {
                if (pys[i].major == 3 && pys[i].minor < 6)
                        continue;
                tests[nt++] = (struct CMUnitTest){
                    .name = pys[i].label, .test_func = check_interpreter, .initial_state = &pys[i]};
        }
        if (nt == 0) {
                fprintf(stderr, "no Python interpreter installed: nothing to test\n");
                return 77; /* meson: skipped */
        }
        return _cmocka_run_group_tests("pywalk_live", tests, nt, NULL, NULL);
}
