/*
 * test_pytasks_live.c - the asyncio task walk (pywalk_set_tasks(),
 * pywalk_tasks()) against every installed interpreter.
 *
 * The C layouts of _asyncio are in no installed header: pylayout's numbers
 * were found in the live interpreters, and this is their check. For each
 * interpreter tasks_target.py (argv[1]) makes tasks of a known shape and
 * prints what CPython itself says of each (its address, name, the task
 * awaiting it, its await chain through cr_await with f_lineno); the walker
 * must find exactly those tasks (and the reporting one), each with that
 * name, that chain (innermost first here) and that parent. Each
 * interpreter is checked twice: with its C _asyncio module, and with the
 * pure-Python Task and Future asyncio falls back to where that module is
 * missing (PYFLAME_PURE_TASKS=1 makes the target block it). On 3.6 the C
 * tasks' registry is the static variable all_tasks of _asyncio's shared
 * object, found by its symbol.
 */
#include <errno.h>
#include <inttypes.h>
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

/* One interpreter, with _asyncio or without it. */
struct tasks_case {
        const struct pyinterp *py;
        bool pure;
        char name[64];
};

#define MAX_WANT 32

struct want_task {
        uint64_t addr, parent;
        char name[64];
        char chain[512]; /* "top:29,middle:25,leaf:21,sleep:665", outermost first */
};

struct want {
        int pid;
        uint64_t skip; /* the reporting task: found, not compared */
        struct want_task t[MAX_WANT];
        int n;
};

static void sleep_ms(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
}

/* Read the target's report up to READY (10 s at most). */
static int read_report(int fd, struct want *w)
{
        static char buf[65536];
        size_t len = 0;
        memset(w, 0, sizeof(*w));
        for (int waited = 0; waited < 10000 && !strstr(buf, "READY\n");) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (poll(&p, 1, 100) <= 0) {
                        waited += 100;
                        continue;
                }
                ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
                if (n <= 0)
                        return -1;
                len += (size_t)n;
                buf[len] = 0;
        }
        if (!strstr(buf, "READY\n"))
                return -1;
        char *save = NULL;
        for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                struct want_task *t = &w->t[w->n];
                if (sscanf(line, "PID %d", &w->pid) == 1 ||
                    sscanf(line, "SKIP %" SCNx64, &w->skip) == 1)
                        continue;
                if (w->n < MAX_WANT && sscanf(line, "T %" SCNx64 " %63s %" SCNx64 " %511s",
                                              &t->addr, t->name, &t->parent, t->chain) == 4)
                        w->n++;
        }
        return w->n > 0 && w->pid > 0 && w->skip ? 0 : -1;
}

/* The walker's view of a task's chain, outermost first, as the target prints it. */
static void chain_of(const struct pywalk_task *tk, char *out, size_t len)
{
        size_t off = 0;
        out[0] = 0;
        for (uint32_t i = tk->depth; i-- > 0 && off < len;)
                off += (size_t)snprintf(out + off, len - off, "%s%s:%d", off ? "," : "",
                                        tk->frames[i].code->name, (int)tk->frames[i].line);
}

/* 0 when the walk's tasks are the wanted ones; else what differs in `diff`. */
static int compare(const struct want *w, const struct pywalk_task *v, size_t n, bool pure,
                   char *diff, size_t len)
{
        const char *future = pure ? "Future" : "_asyncio.Future";
        if (n != (size_t)w->n + 1) {
                snprintf(diff, len, "%zu tasks found, %d wanted", n, w->n + 1);
                return -1;
        }
        for (int k = 0; k < w->n; k++) {
                const struct want_task *t = &w->t[k];
                const struct pywalk_task *got = NULL;
                for (size_t i = 0; i < n && !got; i++)
                        if (v[i].addr == t->addr)
                                got = &v[i];
                if (!got) {
                        snprintf(diff, len, "task %s not found", t->name);
                        return -1;
                }
                char chain[512];
                chain_of(got, chain, sizeof(chain));
                uint64_t parent = got->parent ? v[got->parent - 1].addr : 0;
                if (strcmp(got->name->name, t->name) != 0 || strcmp(chain, t->chain) != 0 ||
                    parent != t->parent || got->running) {
                        snprintf(diff, len,
                                 "task %s: got %s [%s] parent %" PRIx64
                                 ", want [%s] parent %" PRIx64,
                                 t->name, got->name->name, chain, parent, t->chain, t->parent);
                        return -1;
                }
                /* What it awaits: the task it awaits directly, or the future's type. */
                uint64_t awaited = 0;
                for (int j = 0; j < w->n; j++)
                        if (w->t[j].parent == t->addr && strncmp(t->chain, "awaiter:", 8) == 0)
                                awaited = w->t[j].addr;
                bool gathers = strncmp(t->chain, "gathering:", 10) == 0;
                if ((got->awaits ? v[got->awaits - 1].addr : 0) != awaited ||
                    (gathers && strcmp(got->awaiting, "_GatheringFuture") != 0) ||
                    (!gathers && !awaited && strcmp(got->awaiting, future) != 0)) {
                        snprintf(diff, len, "task %s awaits task %d, a %s", t->name, got->awaits,
                                 got->awaiting);
                        return -1;
                }
        }
        return 0;
}

static int ignore_thread(void *ctx, const struct pywalk_thread *th)
{
        (void)ctx;
        (void)th;
        return 0;
}

static void check_interpreter(void **state)
{
        const struct tasks_case *c = *state;
        const struct pyinterp *py = c->py;
        pid_t pid = 0;
        int out = -1;
        if (c->pure)
                setenv("PYFLAME_PURE_TASKS", "1", 1);
        int spawned = pyinterps_spawn(py, target_script, &pid, &out);
        unsetenv("PYFLAME_PURE_TASKS");
        assert_int_equal(spawned, 0);
        struct want want = {0};
        int rc = read_report(out, &want);
        struct pyfind_target t;
        char err[512] = "";
        for (int i = 0; rc == 0 && i < 100; i++) {
                rc = pyfind_target(pid, &t, err, sizeof(err));
                if (rc != PYFIND_NOT_READY)
                        break;
                sleep_ms(20);
        }
        struct memsrc m;
        memsrc_init_process(&m, pid);
        struct pywalk *w = NULL;
        if (rc == 0)
                rc = pywalk_open(&t, &m, &w, err, sizeof(err));
        if (rc == 0)
                rc = pywalk_set_tasks(w, err, sizeof(err));
        char diff[1024] = "";
        int matched = -1, samples = 0;
        for (; rc == 0 && samples < 50 && matched != 0; samples++) {
                rc = pywalk_sample(w, ignore_thread, NULL);
                const struct pywalk_task *v;
                size_t n;
                pywalk_tasks(w, &v, &n);
                if (rc == 0)
                        matched = compare(&want, v, n, c->pure, diff, sizeof(diff));
                sleep_ms(5);
        }
        pywalk_close(w);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(out);
        print_message("%-19s %d tasks, %d sample(s): %s\n", c->name, want.n, samples,
                      matched == 0 ? "as CPython says"
                      : diff[0]    ? diff
                                   : err);
        assert_int_equal(rc, 0);
        assert_int_equal(matched, 0);
}

int main(int argc, char **argv)
{
        if (argc < 2) {
                fprintf(stderr, "usage: %s tasks_target.py\n", argv[0]);
                return 2;
        }
        target_script = argv[1];
        static struct pyinterp pys[32];
        static struct tasks_case cases[64];
        size_t npy = pyinterps_find(pys, 32);
        struct CMUnitTest tests[64];
        size_t nt = 0;
        for (size_t i = 0; i < npy; i++) {
                if (pys[i].major != 3 || pys[i].minor < 6 || pys[i].free_threaded ||
                    pys[i].minor > 13)
                        continue;
                for (int pure = 0; pure < 2; pure++) {
                        struct tasks_case *c = &cases[nt];
                        *c = (struct tasks_case){.py = &pys[i], .pure = pure};
                        snprintf(c->name, sizeof(c->name), "%s%s", pys[i].label,
                                 pure ? " pure-Python" : "");
                        tests[nt++] = (struct CMUnitTest){
                            .name = c->name, .test_func = check_interpreter, .initial_state = c};
                }
        }
        if (nt == 0) {
                fprintf(stderr, "no Python interpreter with asyncio tasks: nothing to test\n");
                return 77; /* meson: skipped */
        }
        return _cmocka_run_group_tests("pytasks_live", tests, nt, NULL, NULL);
}
