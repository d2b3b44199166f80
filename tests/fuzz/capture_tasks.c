/*
 * capture_tasks.c - make the captures fuzz_pytasks.c walks (capture.h): for
 * every installed interpreter with asyncio tasks the walker can read (3.6 to
 * 3.13, GIL builds), start tests/record/tasks_target.py (tasks awaiting
 * coroutine chains, another task, a gather, a TaskGroup), stop it once its
 * tasks are all suspended, walk it CAPTURE_SAMPLES times with its tasks and
 * thread names, keeping every range read, and write OUTDIR/LABEL.cap; then
 * the same with asyncio's pure-Python tasks (PYFLAME_PURE_TASKS=1, the
 * target cannot import _asyncio): OUTDIR/LABEL-pure.cap; and synthetic
 * images of 3.14 and 3.14t with tasks (imgtasks.c).
 *
 *   capture_tasks TASKS_TARGET_PY OUTDIR
 *
 * Prints one line per capture. Exits 0 when at least one capture was
 * written, 77 (a skip to meson) when no interpreter here has tasks to read,
 * 1 on a failure.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "capture.h"
#include "imgtasks.h"
#include "memsrc.h"
#include "pyfind.h"
#include "pyinterps.h"
#include "pywalk.h"

struct range {
        uint64_t addr;
        size_t len;
        uint8_t *data;
};

/* A process's memory source that keeps a copy of every range read whole. */
struct keeper {
        struct memsrc m; /* first: the walker's reads come back as this */
        struct memsrc live;
        struct range *v;
        size_t n, cap;
        bool oom;
};

static void keep(struct keeper *k, uint64_t addr, const void *buf, size_t len)
{
        if (!len || k->oom)
                return;
        if (k->n == k->cap) {
                size_t cap = k->cap ? 2 * k->cap : 1024;
                struct range *v = realloc(k->v, cap * sizeof(*v));
                if (!v) {
                        k->oom = true;
                        return;
                }
                k->v = v;
                k->cap = cap;
        }
        uint8_t *d = malloc(len);
        if (!d) {
                k->oom = true;
                return;
        }
        memcpy(d, buf, len);
        k->v[k->n++] = (struct range){addr, len, d};
}

static int keeper_read(struct memsrc *m, uint64_t addr, void *buf, size_t len)
{
        struct keeper *k = (struct keeper *)m;
        int rc = memsrc_read(&k->live, addr, buf, len);
        if (rc == 0)
                keep(k, addr, buf, len);
        return rc;
}

static int keeper_readv(struct memsrc *m, const struct memsrc_iov *iov, size_t n)
{
        struct keeper *k = (struct keeper *)m;
        int rc = memsrc_readv(&k->live, iov, n);
        for (size_t i = 0; rc == 0 && i < n; i++)
                keep(k, iov[i].addr, iov[i].buf, iov[i].len);
        return rc;
}

static int by_addr(const void *a, const void *b)
{
        const struct range *x = a, *y = b;
        return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int put(FILE *f, const void *p, size_t len)
{
        return fwrite(p, 1, len, f) == len ? 0 : -1;
}

/*
 * Write the capture: the ranges merged into disjoint regions (ranges read
 * from a stopped process agree where they overlap).
 */
static int write_capture(const char *path, const struct pyfind_target *t, struct keeper *k,
                         uint32_t n_tasks, uint32_t n_threads)
{
        qsort(k->v, k->n, sizeof(*k->v), by_addr);
        FILE *f = fopen(path, "wb");
        if (!f)
                return -errno;
        /* The number of regions is known once they are written: 0 until then. */
        uint32_t head[5] = {(uint32_t)sizeof(*t), CAPTURE_SAMPLES, n_tasks, n_threads, 0};
        int rc = put(f, CAPTURE_MAGIC, 8);
        rc = rc ? rc : put(f, head, sizeof(head[0]));
        rc = rc ? rc : put(f, t, sizeof(*t));
        long count_at = ftell(f) + 3 * (long)sizeof(head[0]);
        rc = rc ? rc : put(f, head + 1, 4 * sizeof(head[0]));
        uint8_t *buf = NULL;
        uint32_t n_regions = 0;
        for (size_t i = 0; rc == 0 && i < k->n; n_regions++) {
                uint64_t start = k->v[i].addr, end = start + k->v[i].len;
                size_t j = i + 1;
                for (; j < k->n && k->v[j].addr <= end; j++)
                        if (k->v[j].addr + k->v[j].len > end)
                                end = k->v[j].addr + k->v[j].len;
                uint64_t len = end - start;
                uint8_t *b = realloc(buf, len);
                if (!b) {
                        rc = -ENOMEM;
                        break;
                }
                buf = b;
                for (size_t r = i; r < j; r++)
                        memcpy(buf + (k->v[r].addr - start), k->v[r].data, k->v[r].len);
                rc = put(f, &start, 8);
                rc = rc ? rc : put(f, &len, 8);
                rc = rc ? rc : put(f, buf, len);
                i = j;
        }
        free(buf);
        if (rc == 0 && (fseek(f, count_at, SEEK_SET) != 0 || put(f, &n_regions, 4) < 0))
                rc = -EIO;
        if (fclose(f) != 0 && rc == 0)
                rc = -errno;
        return rc < 0 ? rc : 0;
}

/* Wait for the target's READY line (20 s at most). */
static int wait_ready(int fd)
{
        static char buf[65536];
        size_t len = 0;
        buf[0] = 0;
        for (int waited = 0; waited < 20000 && !strstr(buf, "READY\n");) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (poll(&p, 1, 100) <= 0) {
                        waited += 100;
                        continue;
                }
                if (len == sizeof(buf) - 1)
                        len = 0; /* only the end matters */
                ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
                if (n <= 0)
                        return -1;
                len += (size_t)n;
                buf[len] = 0;
        }
        return strstr(buf, "READY\n") ? 0 : -1;
}

static void count_name(void *ctx, int64_t interp_id, uint64_t thread_id, const char *name)
{
        (void)interp_id, (void)thread_id, (void)name;
        ++*(int *)ctx;
}

static int count_thread(void *ctx, const struct pywalk_thread *th)
{
        (void)th;
        ++*(uint32_t *)ctx;
        return 0;
}

/*
 * Walk t through k with --async's task walk, CAPTURE_SAMPLES times (thread
 * names after the first), every range read kept in k: 0 with the last
 * sample's counts, or an error with the reason in err.
 */
static int walk_kept(struct keeper *k, const struct pyfind_target *t, size_t *n_tasks,
                     uint32_t *n_threads, int *names, char *err, size_t errlen)
{
        struct pywalk *w = NULL;
        int rc = pywalk_open(t, &k->m, &w, err, errlen);
        if (rc == 0)
                rc = pywalk_set_tasks(w, err, errlen);
        for (int i = 0; rc == 0 && i < CAPTURE_SAMPLES; i++) {
                *n_threads = 0;
                rc = pywalk_sample(w, count_thread, n_threads);
                const struct pywalk_task *v;
                pywalk_tasks(w, &v, n_tasks);
                if (rc == 0 && i == 0)
                        rc = pywalk_thread_names(w, count_name, names) < 0 ? -1 : 0;
                if (rc < 0)
                        snprintf(err, errlen, "a walk failed: %d", rc);
        }
        if (rc == 0 && k->oom) {
                snprintf(err, errlen, "out of memory");
                rc = -1;
        }
        pywalk_close(w);
        return rc;
}

static void keeper_free(struct keeper *k)
{
        for (size_t i = 0; i < k->n; i++)
                free(k->v[i].data);
        free(k->v);
}

/* One interpreter: 0 and its capture written, or -1 with the reason in err. */
static int capture_one(const struct pyinterp *py, bool pure, const char *script, const char *outdir,
                       char *err, size_t errlen)
{
        pid_t pid = 0;
        int out = -1;
        if (pure)
                setenv("PYFLAME_PURE_TASKS", "1", 1);
        int rc = pyinterps_spawn(py, script, &pid, &out);
        unsetenv("PYFLAME_PURE_TASKS");
        if (rc < 0) {
                snprintf(err, errlen, "cannot start it: %s", strerror(-rc));
                return -1;
        }
        struct keeper k = {.m = {.read = keeper_read, .readv = keeper_readv}};
        memsrc_init_process(&k.live, pid);
        struct pyfind_target t;
        rc = wait_ready(out) == 0 ? 0 : -1;
        if (rc < 0)
                snprintf(err, errlen, "it did not say READY");
        if (rc == 0)
                rc = pyfind_target(pid, &t, err, errlen);
        /* Stopped, so that every range read agrees with every other. */
        if (rc == 0 && (kill(pid, SIGSTOP) < 0 || waitpid(pid, NULL, WUNTRACED) != pid)) {
                snprintf(err, errlen, "cannot stop it: %s", strerror(errno));
                rc = -1;
        }
        uint32_t n_threads = 0;
        size_t n_tasks = 0;
        int names = 0;
        if (rc == 0)
                rc = walk_kept(&k, &t, &n_tasks, &n_threads, &names, err, errlen);
        if (rc == 0 && n_tasks < 5) {
                snprintf(err, errlen, "the walk found no tasks");
                rc = -1;
        }
        char path[1024];
        snprintf(path, sizeof(path), "%s/%d.%d.%d%s%s.cap", outdir, py->major, py->minor, py->micro,
                 strstr(py->path, "pyenv") ? "" : "-system", pure ? "-pure" : "");
        t.pid = 0; /* a capture has no process */
        if (rc == 0 && (rc = write_capture(path, &t, &k, (uint32_t)n_tasks, n_threads)) < 0)
                snprintf(err, errlen, "%s: %s", path, strerror(-rc));
        if (rc == 0)
                printf("%-40s %zu tasks, %u threads, %d names, %zu ranges read: %s\n", py->label,
                       n_tasks, n_threads, names, k.n, path);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(out);
        keeper_free(&k);
        return rc == 0 ? 0 : -1;
}

/*
 * A synthetic 3.14+ image with tasks (imgtasks.c: no such interpreter is
 * installed), walked and kept the same way: OUTDIR/3.14.2-image.cap.
 */
static int capture_image(const struct imgver *v, const char *outdir, char *err, size_t errlen)
{
        static struct imgtasks s;
        imgtasks_build(&s, v);
        struct keeper k = {.m = {.read = keeper_read, .readv = keeper_readv}, .live = s.p.mem};
        uint32_t n_threads = 0;
        size_t n_tasks = 0;
        int names = 0;
        int rc = walk_kept(&k, &s.p.target, &n_tasks, &n_threads, &names, err, errlen);
        if (rc == 0 && n_tasks != IMGTASKS_COUNT) {
                snprintf(err, errlen, "%zu tasks found in the image, %d built", n_tasks,
                         IMGTASKS_COUNT);
                rc = -1;
        }
        char path[1024];
        snprintf(path, sizeof(path), "%s/%d.%d.2%s-image.cap", outdir, v->major, v->minor,
                 v->ft ? "t" : "");
        struct pyfind_target t = s.p.target;
        t.pid = 0;
        if (rc == 0 && (rc = write_capture(path, &t, &k, (uint32_t)n_tasks, n_threads)) < 0)
                snprintf(err, errlen, "%s: %s", path, strerror(-rc));
        if (rc == 0)
                printf("%-40s %zu tasks, %u threads, %zu ranges read: %s\n", v->name, n_tasks,
                       n_threads, k.n, path);
        pyimg_free(&s.p);
        keeper_free(&k);
        return rc == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
        if (argc != 3) {
                fprintf(stderr, "usage: %s TASKS_TARGET_PY OUTDIR\n", argv[0]);
                return 2;
        }
        static struct pyinterp pys[32];
        size_t npy = pyinterps_find(pys, 32);
        int written = 0, failed = 0;
        for (size_t i = 0; i < npy; i++) {
                const struct pyinterp *py = &pys[i];
                if (py->major != 3 || py->minor < 6 || py->minor > 13 || py->free_threaded)
                        continue;
                /*
                 * With _asyncio, and with asyncio's pure-Python tasks
                 * (tasks_target.py). Not 3.6 with _asyncio: its tasks are
                 * found through a symbol of a file, which a capture does
                 * not hold.
                 */
                for (int pure = py->minor == 6; pure < 2; pure++) {
                        char err[512] = "";
                        if (capture_one(py, pure, argv[1], argv[2], err, sizeof(err)) == 0) {
                                written++;
                        } else {
                                fprintf(stderr, "capture_tasks: %s%s: %s\n", py->label,
                                        pure ? " pure-Python" : "", err);
                                failed++;
                        }
                }
        }
        for (size_t i = 0; i < IMGVER_COUNT; i++) {
                const struct imgver *v = &imgver_table[i];
                if (v->major != 3 || v->minor != 14)
                        continue;
                char err[512] = "";
                if (capture_image(v, argv[2], err, sizeof(err)) == 0) {
                        written++;
                } else {
                        fprintf(stderr, "capture_tasks: image %s: %s\n", v->name, err);
                        failed++;
                }
        }
        if (failed)
                return 1;
        if (!written) {
                printf("no interpreter with asyncio tasks here: nothing to capture\n");
                return 77;
        }
        return 0;
}
