/*
 * fuzz_pytasks.c - libFuzzer target: the walker (record/pywalk.c) and its
 * asyncio task walk (record/pytasks.c: the registry of tasks, each Task, its
 * coroutine chain, who awaits it, its loop's thread), and the thread names
 * (pywalk_thread_names), fed the memory of real interpreters, damaged.
 *
 * The memory: captures (capture.h) made by capture_tasks.c of
 * tests/record/tasks_target.py under every installed interpreter with tasks
 * (3.6 to 3.13): every range the walker read of the stopped process in
 * CAPTURE_SAMPLES samples. A read inside a captured region is served from
 * it; any other fails as unmapped memory does, so a pointer the input
 * changes leads into real objects of the process or nowhere. The directory
 * of captures is $FUZZ_PYTASKS_CAPTURES.
 *
 * An input is the capture (its first byte) and a sequence of operations on
 * a walker opened on it with tasks:
 *  - a patch of 1-8 bytes anywhere in the captured memory: any value, an
 *    address found in the capture (a pointer into its objects, give or take
 *    a few bytes), a small integer, or the bytes of another place;
 *  - a region made unreadable;
 *  - reads that fail from some point on (the process gone, no longer
 *    readable, out of memory, or unmapped memory);
 *  - a sample (pywalk_sample, then pywalk_tasks), at most CAPTURE_SAMPLES;
 *  - the thread names (pywalk_thread_names), once, after a sample.
 * Patches are undone after the input.
 *
 * Checked: pywalk_sample returns 0, or a negative errno (only where memory
 * was damaged: -EFAULT, or what failing reads return); each thread has a
 * status of 0 (its frames then at most PYWALK_MAX_DEPTH, each with a code
 * whose name and file are strings), PYWALK_TORN or a negative errno; the
 * tasks are at most PYWALK_MAX_TASKS, each named, its parent and the task it
 * awaits within the sample, no chain of parents a cycle, its frames named
 * strings with files, what it awaits a string within its field. Names the
 * thread names report are strings. In an input that damaged nothing, every
 * sample finds exactly what the capture's own walk found (the tasks, their
 * names, chains and parents, the threads and their frames): the capture
 * replays. A crash, a sanitizer report, a leak or a hang is a finding. A
 * finding reproduces from its input alone (a fresh walker each input).
 *
 * Build: CC=clang meson setup build-fuzz -Dfuzz=true
 * -Db_sanitize=address,undefined -Db_lundef=false; run with
 * tests/fuzz/run_pytasks.sh (the CI run, and --long).
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "fuzzin.h"
#include "memsrc.h"
#include "pyfind.h"
#include "pywalk.h"

const char fuzz_name[] = "fuzz_pytasks";

/* ---- the captures ---- */

struct region {
        uint64_t addr;
        size_t len;
        uint8_t *data;
        bool dropped;
};

/* The captured memory, read by binary search over its sorted regions. */
struct capmem {
        struct memsrc m; /* first: the walker's reads come back as this */
        const struct region *r;
        size_t n;
        int fail; /* an error every read returns once reads_left is 0 */
        unsigned reads_left;
};

/* The region of r[0..n) (sorted, disjoint) holding addr, or NULL. */
static const struct region *region_at(const struct region *r, size_t n, uint64_t addr)
{
        size_t lo = 0, hi = n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (r[mid].addr <= addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo && addr - r[lo - 1].addr < r[lo - 1].len ? &r[lo - 1] : NULL;
}

static int capmem_read(struct memsrc *m, uint64_t addr, void *buf, size_t len)
{
        struct capmem *cm = (struct capmem *)m;
        if (cm->fail && !cm->reads_left)
                return cm->fail;
        cm->reads_left -= cm->fail != 0;
        if (!len)
                return 0;
        const struct region *r = region_at(cm->r, cm->n, addr);
        if (!r || r->dropped || len > r->len - (addr - r->addr))
                return -EFAULT;
        memcpy(buf, r->data + (addr - r->addr), len);
        return 0;
}

/* What a walk of the pristine capture found: the truth for undamaged inputs. */
struct seen_task {
        char *name;
        char *chain; /* "name:line,..." innermost first */
        uint32_t parent, awaits;
        bool running;
};

struct seen {
        struct seen_task *t;
        size_t n_tasks;
        char **threads; /* each thread's frames as "name:line,...", in order */
        size_t n_threads;
};

struct cap {
        char name[64];
        struct pyfind_target t;
        uint32_t samples, tasks, threads;
        struct region *r;
        size_t n;
        struct capmem mem;
        uint64_t *pool; /* addresses the capture holds that point into it */
        size_t n_pool;
        struct seen truth;
};

static struct cap *caps;
static size_t n_caps;

static bool get(FILE *f, void *p, size_t len)
{
        return fread(p, 1, len, f) == len;
}

static void load(struct cap *c, const char *dir, const char *file)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, file);
        snprintf(c->name, sizeof(c->name), "%.*s", (int)(strlen(file) - 4), file);
        FILE *f = fopen(path, "rb");
        CHECK(f, "%s: %s", path, strerror(errno));
        char magic[8];
        uint32_t size, head[4];
        CHECK(get(f, magic, 8) && !memcmp(magic, CAPTURE_MAGIC, 8) && get(f, &size, 4) &&
                  size == sizeof(c->t) && get(f, &c->t, sizeof(c->t)) && get(f, head, sizeof(head)),
              "%s: not a capture of this build (make it again with capture_tasks)", path);
        c->samples = head[0];
        c->tasks = head[1];
        c->threads = head[2];
        c->n = head[3];
        c->r = calloc(c->n ? c->n : 1, sizeof(*c->r));
        CHECK(c->r, "out of memory");
        for (size_t i = 0; i < c->n; i++) {
                uint64_t addr, len;
                CHECK(get(f, &addr, 8) && get(f, &len, 8) && len && len < (1u << 30) &&
                          (i == 0 || addr >= c->r[i - 1].addr + c->r[i - 1].len),
                      "%s: region %zu is damaged", path, i);
                c->r[i] = (struct region){.addr = addr, .len = (size_t)len, .data = malloc(len)};
                CHECK(c->r[i].data && get(f, c->r[i].data, len), "%s: region %zu is short", path,
                      i);
        }
        fclose(f);
        c->mem = (struct capmem){.m = {.read = capmem_read}, .r = c->r, .n = c->n};
        /* The pointers of the capture, every 8-aligned word that points into it. */
        size_t cap = 1 << 14;
        c->pool = malloc(cap * sizeof(*c->pool));
        CHECK(c->pool, "out of memory");
        for (size_t i = 0; i < c->n && c->n_pool < cap; i++) {
                c->pool[c->n_pool++] = c->r[i].addr;
                for (size_t off = (8 - (c->r[i].addr & 7)) & 7;
                     off + 8 <= c->r[i].len && c->n_pool < cap; off += 8) {
                        uint64_t v;
                        memcpy(&v, c->r[i].data + off, 8);
                        if (v != c->r[i].addr + off && region_at(c->r, c->n, v))
                                c->pool[c->n_pool++] = v;
                }
        }
}

/* ---- checks ---- */

static char *dup_str(const char *s)
{
        char *d = strdup(s);
        CHECK(d, "out of memory");
        return d;
}

/* A stack as text: "name:line,..." (strlen of each name and file: ASan reads them whole). */
static char *frames_text(const struct pywalk_frame *f, uint32_t depth, const char *what)
{
        size_t len = 1;
        for (uint32_t i = 0; i < depth; i++) {
                CHECK(f[i].code && f[i].code->name && f[i].code->file, "%s: frame %u has no code",
                      what, i);
                len += strlen(f[i].code->name) + strlen(f[i].code->file) + 16;
        }
        char *s = malloc(len), *p = s;
        CHECK(s, "out of memory");
        *p = 0;
        for (uint32_t i = 0; i < depth; i++)
                p += snprintf(p, len - (size_t)(p - s), "%s%s:%d", i ? "," : "", f[i].code->name,
                              (int)f[i].line);
        return s;
}

static void seen_free(struct seen *s)
{
        for (size_t i = 0; i < s->n_tasks; i++) {
                free(s->t[i].name);
                free(s->t[i].chain);
        }
        for (size_t i = 0; i < s->n_threads; i++)
                free(s->threads[i]);
        free(s->t);
        free(s->threads);
        memset(s, 0, sizeof(*s));
}

static int keep_thread(void *ctx, const struct pywalk_thread *th)
{
        struct seen *s = ctx;
        CHECK(th->status == 0 || th->status == PYWALK_TORN || th->status < 0,
              "thread %#llx: status %d", (unsigned long long)th->tstate_addr, th->status);
        char *text;
        if (th->status == 0) {
                CHECK(th->depth <= PYWALK_MAX_DEPTH, "thread %#llx: %u frames",
                      (unsigned long long)th->tstate_addr, th->depth);
                text = frames_text(th->frames, th->depth, "thread");
        } else {
                char buf[32];
                snprintf(buf, sizeof(buf), "status %d", th->status);
                text = dup_str(buf);
        }
        char **v = realloc(s->threads, (s->n_threads + 1) * sizeof(*v));
        CHECK(v, "out of memory");
        s->threads = v;
        s->threads[s->n_threads++] = text;
        return 0;
}

/* The tasks of the last sample, checked, into s. */
static void keep_tasks(struct pywalk *w, struct seen *s)
{
        const struct pywalk_task *v;
        size_t n;
        pywalk_tasks(w, &v, &n);
        CHECK(n <= PYWALK_MAX_TASKS, "%zu tasks", n);
        s->t = calloc(n ? n : 1, sizeof(*s->t));
        CHECK(s->t, "out of memory");
        s->n_tasks = n;
        for (size_t i = 0; i < n; i++) {
                const struct pywalk_task *tk = &v[i];
                CHECK(tk->parent <= n && tk->awaits <= n, "task %zu: parent %u, awaits %u of %zu",
                      i, tk->parent, tk->awaits, n);
                uint32_t p = tk->parent;
                for (size_t steps = 0; p; steps++) {
                        CHECK(steps <= n && p != i + 1, "task %zu: its parents make a cycle", i);
                        p = v[p - 1].parent;
                }
                CHECK(tk->name && tk->name->name, "task %zu has no name", i);
                CHECK(memchr(tk->awaiting, 0, sizeof(tk->awaiting)), "task %zu: awaiting unended",
                      i);
                CHECK(tk->depth <= PYWALK_MAX_DEPTH, "task %zu: %u frames", i, tk->depth);
                s->t[i] = (struct seen_task){
                    .name = dup_str(tk->name->name),
                    .chain = frames_text(tk->frames, tk->depth, "task"),
                    .parent = tk->parent,
                    .awaits = tk->awaits,
                    .running = tk->running,
                };
        }
}

static void same(const struct cap *c, const struct seen *a, const struct seen *b, int sample)
{
        CHECK(a->n_tasks == b->n_tasks && a->n_threads == b->n_threads,
              "%s sample %d: %zu tasks and %zu threads, the capture's walk %zu and %zu", c->name,
              sample, a->n_tasks, a->n_threads, b->n_tasks, b->n_threads);
        for (size_t i = 0; i < a->n_tasks; i++) {
                const struct seen_task *x = &a->t[i], *y = &b->t[i];
                CHECK(!strcmp(x->name, y->name) && !strcmp(x->chain, y->chain) &&
                          x->parent == y->parent && x->awaits == y->awaits &&
                          x->running == y->running,
                      "%s sample %d task %zu: %s [%s] parent %u awaits %u; the capture's walk %s "
                      "[%s] parent %u awaits %u",
                      c->name, sample, i, x->name, x->chain, x->parent, x->awaits, y->name,
                      y->chain, y->parent, y->awaits);
        }
        for (size_t i = 0; i < a->n_threads; i++)
                CHECK(!strcmp(a->threads[i], b->threads[i]),
                      "%s sample %d thread %zu: [%s]; the capture's walk [%s]", c->name, sample, i,
                      a->threads[i], b->threads[i]);
}

static void check_name(void *ctx, int64_t interp_id, uint64_t thread_id, const char *name)
{
        (void)ctx, (void)interp_id, (void)thread_id;
        CHECK(name && strlen(name) < (1u << 20), "a thread name that is no string");
}

/* ---- one input ---- */

#define MAX_PATCHES 32
#define MAX_DROPS   8
#define MAX_OPS     64

struct patch {
        uint8_t *at;
        uint8_t old[8];
        size_t len;
};

struct run {
        struct cap *c;
        struct pywalk *w;
        struct patch patches[MAX_PATCHES];
        size_t n_patches;
        struct region *drops[MAX_DROPS];
        size_t n_drops;
        bool damaged; /* memory changed or reads made to fail */
        int samples;
        bool named;
};

static void op_patch(struct run *r, struct in *in)
{
        struct cap *c = r->c;
        if (r->n_patches == MAX_PATCHES || !c->n)
                return;
        uint8_t mode = (uint8_t)take(in, 1);
        struct region *g = &c->r[take(in, 2) % c->n];
        size_t at = (size_t)take(in, 4) % g->len;
        if (mode & 0x40)
                at &= ~(size_t)7;
        size_t len = 1 + mode % 8;
        uint64_t v;
        switch (mode >> 6) {
        case 0: /* any value */
                v = take(in, 8);
                break;
        case 1: /* an address of the capture's objects, give or take a few bytes */
                v = c->pool[take(in, 2) % c->n_pool] + (uint64_t)(int64_t)(int8_t)take(in, 1);
                len = 8;
                break;
        case 2: /* a small integer (a length, a count, an index, a tag) */
                v = (uint64_t)(int64_t)(int16_t)take(in, 2);
                break;
        default: { /* the bytes of another place */
                const struct region *o = &c->r[take(in, 2) % c->n];
                size_t from = (size_t)take(in, 4) % o->len;
                v = 0;
                memcpy(&v, o->data + from, o->len - from < 8 ? o->len - from : 8);
                break;
        }
        }
        if (len > g->len - at)
                len = g->len - at;
        struct patch *p = &r->patches[r->n_patches++];
        p->at = g->data + at;
        p->len = len;
        memcpy(p->old, p->at, len);
        memcpy(p->at, &v, len);
        r->damaged = true;
}

static void op_drop(struct run *r, struct in *in)
{
        struct region *g = &r->c->r[take(in, 2) % r->c->n];
        if (r->n_drops == MAX_DROPS || g->dropped)
                return;
        g->dropped = true;
        r->drops[r->n_drops++] = g;
        r->damaged = true;
}

static void op_fail(struct run *r, struct in *in)
{
        static const int errors[] = {-ESRCH, -EPERM, -ENOMEM, -EFAULT};
        uint8_t reads = (uint8_t)take(in, 1), e = (uint8_t)take(in, 1);
        if (r->c->mem.fail)
                return;
        r->c->mem.fail = errors[e % 4];
        r->c->mem.reads_left = reads;
        r->damaged = true;
}

static void op_sample(struct run *r)
{
        struct cap *c = r->c;
        if (r->samples == (int)c->samples)
                return;
        struct seen s = {0};
        int rc = pywalk_sample(r->w, keep_thread, &s);
        r->samples++;
        CHECK(rc == 0 || (r->damaged && rc < 0), "%s: pywalk_sample returned %d", c->name, rc);
        if (rc == 0) {
                keep_tasks(r->w, &s);
                if (!r->damaged)
                        same(c, &s, &c->truth, r->samples);
        }
        seen_free(&s);
}

static void op_names(struct run *r)
{
        if (r->named || !r->samples)
                return;
        r->named = true;
        int rc = pywalk_thread_names(r->w, check_name, NULL);
        CHECK(rc >= 0 || r->damaged, "%s: pywalk_thread_names returned %d", r->c->name, rc);
}

static void undo(struct run *r)
{
        while (r->n_patches) {
                struct patch *p = &r->patches[--r->n_patches];
                memcpy(p->at, p->old, p->len);
        }
        for (size_t i = 0; i < r->n_drops; i++)
                r->drops[i]->dropped = false;
        r->c->mem.fail = 0;
}

static struct pywalk *open_walker(struct cap *c)
{
        char err[512] = "";
        struct pywalk *w = NULL;
        int rc = pywalk_open(&c->t, &c->mem.m, &w, err, sizeof(err));
        CHECK(rc == 0, "%s: pywalk_open: %d %s", c->name, rc, err);
        rc = pywalk_set_tasks(w, err, sizeof(err));
        CHECK(rc == 0, "%s: pywalk_set_tasks: %d %s", c->name, rc, err);
        return w;
}

static int by_name(const void *a, const void *b)
{
        return strcmp(((const struct cap *)a)->name, ((const struct cap *)b)->name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        (void)argc, (void)argv;
        const char *dir = getenv("FUZZ_PYTASKS_CAPTURES");
        CHECK(dir, "set FUZZ_PYTASKS_CAPTURES to a directory of captures (run_pytasks.sh does)");
        DIR *d = opendir(dir);
        CHECK(d, "%s: %s", dir, strerror(errno));
        caps = calloc(64, sizeof(*caps));
        CHECK(caps, "out of memory");
        for (struct dirent *e; (e = readdir(d)) && n_caps < 64;) {
                size_t len = strlen(e->d_name);
                if (len > 4 && !strcmp(e->d_name + len - 4, ".cap"))
                        load(&caps[n_caps++], dir, e->d_name);
        }
        closedir(d);
        CHECK(n_caps, "%s: no capture", dir);
        qsort(caps, n_caps, sizeof(*caps), by_name); /* an input's first byte names the same one */
        /* The truth: the capture's own walk, again; it must find what capture_tasks found. */
        for (size_t i = 0; i < n_caps; i++) {
                struct cap *c = &caps[i];
                struct pywalk *w = open_walker(c);
                for (uint32_t k = 0; k < c->samples; k++) {
                        seen_free(&c->truth);
                        int rc = pywalk_sample(w, keep_thread, &c->truth);
                        CHECK(rc == 0, "%s: the capture does not replay: sample %u returned %d",
                              c->name, k, rc);
                        keep_tasks(w, &c->truth);
                        if (k == 0)
                                CHECK(pywalk_thread_names(w, check_name, NULL) >= 0,
                                      "%s: thread names do not replay", c->name);
                }
                pywalk_close(w);
                CHECK(c->truth.n_tasks == c->tasks && c->truth.n_threads == c->threads,
                      "%s: the capture does not replay: %zu tasks and %zu threads, %u and %u "
                      "when captured",
                      c->name, c->truth.n_tasks, c->truth.n_threads, c->tasks, c->threads);
                fprintf(stderr,
                        "fuzz_pytasks: %s: %zu regions, %zu pointers, %zu tasks, %zu threads\n",
                        c->name, c->n, c->n_pool, c->truth.n_tasks, c->truth.n_threads);
        }
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct in in = {data, size};
        struct run r = {.c = &caps[take(&in, 1) % n_caps]};
        r.w = open_walker(r.c);
        /* Operations: 0-1 patch, 2 drop, 3 reads fail, 4-6 sample, 7 names. */
        for (int ops = 0; in.n && ops < MAX_OPS; ops++) {
                switch (take(&in, 1) % 8) {
                case 0:
                case 1:
                        op_patch(&r, &in);
                        break;
                case 2:
                        op_drop(&r, &in);
                        break;
                case 3:
                        op_fail(&r, &in);
                        break;
                case 7:
                        op_names(&r);
                        break;
                default:
                        op_sample(&r);
                        break;
                }
        }
        if (!r.samples) /* every input walks at least once */
                op_sample(&r);
        pywalk_close(r.w);
        undo(&r);
        return 0;
}
