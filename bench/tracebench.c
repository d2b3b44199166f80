/*
 * tracebench.c - pyflame-tracebench: how fast libtrace writes and reads a
 * large trace, and how big it is. A program, not a test: it prints figures
 * and asserts nothing about them.
 *
 * It writes a synthetic recording through the public writer API: by default
 * 10 million samples of 8 threads sampled together at about 100 Hz with
 * jitter, drawn with a skewed (hot/cold) distribution from 5,000 distinct
 * stacks about 30 frames deep that share prefixes as real call stacks do,
 * with a mix of thread states, and a fraction of samples where a thread sits
 * in the same stack as its previous sample (idle threads). The samples are
 * generated before the clock starts, so the writer figure is the library's
 * cost alone: create + add_sample for every sample (with its automatic
 * flushes) + finalize.
 *
 * Then it times reading: trace_reader_open + trace_reader_count_by_stack over
 * every sample, trace_reader_foreach_sample with an empty callback, and, given
 * --report PATH, the report tool itself: `PATH FILE` (folded) and
 * `PATH --by-line FILE`, output to /dev/null. Every figure is the median of
 * --runs runs (3). The trace is in the page cache when it is read.
 *
 * With --segments N the recording is written as N files of one rotation
 * (trace_writer_rotate at tick boundaries; a cut cannot lie after the
 * present, so the set's time line is compressed to about a second a file)
 * into the directory --out, joined with trace_join_segments, and every
 * read figure is taken over the set (trace_reader_open_set, the report over
 * the directory) and over the joined file, run by run, with their ratio.
 *
 * Usage: pyflame-tracebench [--samples N] [--runs N] [--repeat P] [--cpu N]
 *                           [--out FILE] [--keep] [--report PATH]
 *                           [--segments N]
 * Pin to one core with --cpu 1 (or taskset -c 1) for steadier figures.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pfutil.h"
#include "trace.h"

extern char **environ;

#define N_THREADS    8
#define N_FRAMES     3000
#define N_STACKS     5000
#define MAX_DEPTH    40
#define TICK_NS      10000000LL /* 100 Hz */
#define MAX_RUNS     9
#define MAX_SEGMENTS 1000

struct options {
        uint64_t samples;
        int runs;
        double repeat;
        int cpu;
        const char *out;
        const char *report;
        bool keep;
        int segments; /* >1: write a rotating recording of that many files */
};

/* The synthetic recording, generated once. */
struct workload {
        uint64_t n;
        int64_t *t_off; /* sample time minus the run's base time */
        uint32_t *leaf; /* index into the stack list, 0..N_STACKS-1 */
        uint8_t *state; /* TRACE_STATE_* */
        uint32_t stack_frames[N_STACKS][MAX_DEPTH];
        uint32_t stack_depth[N_STACKS];
};

/* CPU time (user + system) of this process, or of its waited-for children. */
static int64_t cpu_ns(int who)
{
        struct rusage ru;
        getrusage(who, &ru);
        return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
               ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

/* One timed run: wall clock and CPU time, in ns. */
struct timing {
        int64_t wall, cpu;
};

static uint64_t rng_state = 0x2545f4914f6cdd1dULL;

static uint64_t rng(void)
{
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        return rng_state * 0x2545f4914f6cdd1dULL;
}

static double rng_unit(void)
{
        return (double)(rng() >> 11) / 9007199254740992.0;
}

/*
 * Stacks as a program makes them: a few root paths, then each new stack
 * branches off an earlier one at some depth and goes deeper, so they share
 * prefixes. Frame numbers here are 1-based indexes into the frame list.
 */
static void make_stacks(struct workload *wl)
{
        for (int k = 0; k < N_STACKS; k++) {
                uint32_t *f = wl->stack_frames[k];
                uint32_t keep = 0;
                if (k >= 8) {
                        int parent = (int)(rng() % (uint64_t)k);
                        keep = 5 + (uint32_t)(rng() % (wl->stack_depth[parent] - 5));
                        memcpy(f, wl->stack_frames[parent], keep * sizeof(*f));
                }
                uint32_t depth = 25 + (uint32_t)(rng() % 11); /* 25..35, about 30 */
                if (depth < keep + 1)
                        depth = keep + 1;
                for (uint32_t d = keep; d < depth; d++)
                        f[d] = 1 + (uint32_t)(rng() % N_FRAMES);
                wl->stack_depth[k] = depth;
        }
}

static int make_workload(struct workload *wl, const struct options *o)
{
        wl->n = o->samples;
        wl->t_off = malloc(wl->n * sizeof(*wl->t_off));
        wl->leaf = malloc(wl->n * sizeof(*wl->leaf));
        wl->state = malloc(wl->n);
        if (!wl->t_off || !wl->leaf || !wl->state)
                return -1;
        make_stacks(wl);
        uint32_t prev_leaf[N_THREADS] = {0};
        uint8_t prev_state[N_THREADS] = {0};
        int64_t prev_t[N_THREADS] = {0};
        for (uint64_t i = 0; i < wl->n; i++) {
                uint64_t tick = i / N_THREADS;
                int th = (int)(i % N_THREADS);
                /* Jitter up to 2 ms per tick, threads read one after another. */
                int64_t t = (int64_t)tick * TICK_NS + (int64_t)(rng() % 2000000) + th * 20000;
                if (t < prev_t[th])
                        t = prev_t[th];
                prev_t[th] = t;
                wl->t_off[i] = t;
                if (i >= N_THREADS && rng_unit() < o->repeat) {
                        wl->leaf[i] = prev_leaf[th];
                        wl->state[i] = prev_state[th];
                        continue;
                }
                /* Hot and cold stacks: u^3 puts most samples on low indexes. */
                double u = rng_unit();
                uint32_t leaf = (uint32_t)(u * u * u * N_STACKS);
                double s = rng_unit();
                uint8_t st = s < 0.5    ? TRACE_STATE_ON_CPU | TRACE_STATE_HOLDS_GIL
                             : s < 0.7  ? TRACE_STATE_ON_CPU
                             : s < 0.95 ? 0
                                        : TRACE_STATE_HOLDS_GIL;
                wl->leaf[i] = prev_leaf[th] = leaf;
                wl->state[i] = prev_state[th] = st;
        }
        return 0;
}

static int die_writer(struct trace_writer *w, int rc, const char *what)
{
        fprintf(stderr, "pyflame-tracebench: %s: %s (%s)\n", what, trace_writer_errmsg(w),
                trace_status_str(rc));
        trace_writer_free(w);
        return -1;
}

/* Write the workload; sets the time taken, returns 0 or -1. */
/* The path of file `k` (0-based) of a set written into directory `dir`. */
static void segment_path(char *buf, size_t size, const char *dir, int k)
{
        snprintf(buf, size, "%s/part-%04d.pyflame", dir, k + 1);
}

/*
 * Write the workload (into `segments` files of one rotation in directory
 * `path` when segments > 1, cut at tick boundaries as the recorder's
 * --rotate would); sets the time taken, returns 0 or -1.
 */
static int write_trace(const struct workload *wl, const char *path, int segments,
                       uint32_t *tree_nodes, struct timing *tm)
{
        int64_t t0 = pf_now_mono_ns(), c0 = cpu_ns(RUSAGE_SELF);
        struct trace_writer *w = NULL;
        char file[PATH_MAX];
        if (segments > 1) {
                if (mkdir(path, 0755) < 0 && errno != EEXIST) {
                        fprintf(stderr, "pyflame-tracebench: %s: %s\n", path, strerror(errno));
                        return -1;
                }
                segment_path(file, sizeof(file), path, 0);
        } else {
                snprintf(file, sizeof(file), "%s", path);
        }
        int rc = trace_writer_create(file, TRACE_CREATE_FORCE, &w);
        if (rc < 0)
                return die_writer(w, rc, "create");
        trace_writer_set_meta(w, TRACE_META_RATE_HZ, "100");
        trace_writer_set_meta(w, TRACE_META_MODE, "nonblocking");
        if (segments > 1) {
                char set[32];
                snprintf(set, sizeof(set), "tracebench-%d", (int)getpid());
                trace_writer_set_meta(w, TRACE_META_SEGMENT_SET, set);
        }
        struct trace_process_desc p = {4242, "python3 synthetic.py", "3.12.1", "shared"};
        if ((rc = trace_writer_add_process(w, &p)) < 0)
                return die_writer(w, rc, "add_process");
        uint32_t refs[N_THREADS];
        for (int i = 0; i < N_THREADS; i++) {
                char name[32];
                snprintf(name, sizeof(name), i ? "worker-%d" : "MainThread", i);
                struct trace_thread_desc t = {4242, 4242 + i, 0x7f0000000000ULL + i * 0x1000ULL,
                                              name};
                if ((rc = trace_writer_add_thread(w, &t, &refs[i])) < 0)
                        return die_writer(w, rc, "add_thread");
        }
        /* Frames and stacks are interned as the recorder would, once each. */
        uint32_t frame_ids[N_FRAMES + 1];
        for (int i = 1; i <= N_FRAMES; i++) {
                char fn[32], qn[48], src[48];
                snprintf(fn, sizeof(fn), "func_%d", i);
                snprintf(qn, sizeof(qn), "Class%d.func_%d", i % 97, i);
                snprintf(src, sizeof(src), "/srv/app/pkg%d/module%d.py", i % 13, i % 211);
                struct trace_frame_desc d = {fn,           qn,          src,
                                             10 + i % 500, 1 + i % 400, TRACE_FRAME_PYTHON};
                if ((rc = trace_writer_intern_frame(w, &d, &frame_ids[i])) < 0)
                        return die_writer(w, rc, "intern_frame");
        }
        uint32_t stack_ids[N_STACKS];
        uint32_t path_ids[MAX_DEPTH];
        for (int k = 0; k < N_STACKS; k++) {
                for (uint32_t d = 0; d < wl->stack_depth[k]; d++)
                        path_ids[d] = frame_ids[wl->stack_frames[k][d]];
                rc = trace_writer_intern_stack_frames(w, path_ids, wl->stack_depth[k],
                                                      &stack_ids[k]);
                if (rc < 0)
                        return die_writer(w, rc, "intern_stack_frames");
                if (stack_ids[k] + 1 > *tree_nodes)
                        *tree_nodes = stack_ids[k] + 1;
        }
        int64_t base = pf_now_mono_ns();
        uint64_t ticks = wl->n / N_THREADS, seg = 1;
        /*
         * A cut cannot lie after the present, so a set is written on a
         * shorter time line (about a second a file), waiting for the clock
         * where the writing runs ahead of it.
         */
        double scale = 1.0;
        if (segments > 1 && ticks > 0)
                scale = fmin(1.0, 1e9 * segments / ((double)ticks * TICK_NS));
        for (uint64_t i = 0; i < wl->n; i++) {
                /* Sample times stay inside their 10 ms tick: cut at its start. */
                if (segments > 1 && i % N_THREADS == 0 && seg < (uint64_t)segments &&
                    i / N_THREADS >= seg * ticks / (uint64_t)segments) {
                        segment_path(file, sizeof(file), path, (int)seg);
                        int64_t cut = base + (int64_t)((double)(i / N_THREADS) * TICK_NS * scale);
                        while (pf_now_mono_ns() < cut)
                                usleep(1000);
                        if ((rc = trace_writer_rotate(w, file, TRACE_CREATE_FORCE, cut)) < 0)
                                return die_writer(w, rc, "rotate");
                        seg++;
                }
                rc = trace_writer_add_sample(w, refs[i % N_THREADS],
                                             base + (int64_t)((double)wl->t_off[i] * scale),
                                             stack_ids[wl->leaf[i]], wl->state[i]);
                if (rc < 0)
                        return die_writer(w, rc, "add_sample");
        }
        /* A set's last file ends after its last sample. */
        while (segments > 1 && wl->n &&
               pf_now_mono_ns() <= base + (int64_t)((double)wl->t_off[wl->n - 1] * scale))
                usleep(1000);
        if ((rc = trace_writer_finalize(w)) < 0)
                return die_writer(w, rc, "finalize");
        trace_writer_free(w);
        tm->wall = pf_now_mono_ns() - t0;
        tm->cpu = cpu_ns(RUSAGE_SELF) - c0;
        return 0;
}

static int die_reader(struct trace_reader *r, int rc, const char *what)
{
        fprintf(stderr, "pyflame-tracebench: %s: %s (%s)\n", what, trace_reader_errmsg(r),
                trace_status_str(rc));
        trace_reader_close(r);
        return -1;
}

/* The files of a set written by write_trace (NULL-terminated, static). */
static const char *set_paths[MAX_SEGMENTS + 1];
static int set_n;

/* Open `path`, or the set when path is NULL. */
static int open_trace(const char *path, struct trace_reader **r)
{
        return path ? trace_reader_open(path, r)
                    : trace_reader_open_set(set_paths, (size_t)set_n, r);
}

/* Open and count by stack; sets the time taken, returns 0 or -1. */
static int read_count(const char *path, uint64_t expect, struct timing *tm)
{
        int64_t t0 = pf_now_mono_ns(), c0 = cpu_ns(RUSAGE_SELF);
        struct trace_reader *r = NULL;
        int rc = open_trace(path, &r);
        if (rc < 0)
                return die_reader(r, rc, "open");
        uint64_t *counts, total;
        if ((rc = trace_reader_count_by_stack(r, NULL, &counts, &total)) < 0)
                return die_reader(r, rc, "count_by_stack");
        free(counts);
        trace_reader_close(r);
        tm->wall = pf_now_mono_ns() - t0;
        tm->cpu = cpu_ns(RUSAGE_SELF) - c0;
        if (total != expect) {
                fprintf(stderr, "pyflame-tracebench: read %llu samples, wrote %llu\n",
                        (unsigned long long)total, (unsigned long long)expect);
                return -1;
        }
        return 0;
}

static int count_cb(void *ctx, const struct trace_sample *s)
{
        (*(uint64_t *)ctx)++;
        return 0;
}

static int read_foreach(const char *path, uint64_t expect, struct timing *tm)
{
        int64_t t0 = pf_now_mono_ns(), c0 = cpu_ns(RUSAGE_SELF);
        struct trace_reader *r = NULL;
        int rc = open_trace(path, &r);
        if (rc < 0)
                return die_reader(r, rc, "open");
        uint64_t n = 0;
        if ((rc = trace_reader_foreach_sample(r, NULL, count_cb, &n)) < 0)
                return die_reader(r, rc, "foreach_sample");
        trace_reader_close(r);
        tm->wall = pf_now_mono_ns() - t0;
        tm->cpu = cpu_ns(RUSAGE_SELF) - c0;
        return n == expect ? 0 : -1;
}

/* Run `report [flag] path` with stdout to /dev/null; sets the time taken, returns 0 or -1. */
static int run_report(const char *report, const char *flag, const char *path, struct timing *tm)
{
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        char *argv[4];
        int argc = 0;
        argv[argc++] = (char *)report;
        if (flag)
                argv[argc++] = (char *)flag;
        argv[argc++] = (char *)path;
        argv[argc] = NULL;
        int64_t t0 = pf_now_mono_ns(), c0 = cpu_ns(RUSAGE_CHILDREN);
        pid_t pid;
        int rc = posix_spawn(&pid, report, &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (rc != 0) {
                fprintf(stderr, "pyflame-tracebench: cannot run %s: %s\n", report, strerror(rc));
                return -1;
        }
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        tm->wall = pf_now_mono_ns() - t0;
        tm->cpu = cpu_ns(RUSAGE_CHILDREN) - c0;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                fprintf(stderr, "pyflame-tracebench: %s %s%s%s failed (status 0x%x)\n", report,
                        flag ? flag : "", flag ? " " : "", path, status);
                return -1;
        }
        return 0;
}

static int cmp_i64(const void *a, const void *b)
{
        int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
        return (x > y) - (x < y);
}

/* Medians of wall and CPU time, each taken separately. */
static struct timing median(const struct timing *t, int n)
{
        int64_t wall[MAX_RUNS], cpu[MAX_RUNS];
        for (int i = 0; i < n; i++) {
                wall[i] = t[i].wall;
                cpu[i] = t[i].cpu;
        }
        qsort(wall, (size_t)n, sizeof(*wall), cmp_i64);
        qsort(cpu, (size_t)n, sizeof(*cpu), cmp_i64);
        return (struct timing){wall[n / 2], cpu[n / 2]};
}

static void usage(FILE *f)
{
        fprintf(f, "usage: pyflame-tracebench [--samples N] [--runs N] [--repeat P] [--cpu N]\n"
                   "                          [--out FILE] [--keep] [--report PATH]\n"
                   "                          [--segments N]\n");
}

static int parse_options(int argc, char **argv, struct options *o)
{
        static const struct option longopts[] = {
            {"samples", required_argument, NULL, 's'}, {"runs", required_argument, NULL, 'r'},
            {"repeat", required_argument, NULL, 'p'},  {"cpu", required_argument, NULL, 'c'},
            {"out", required_argument, NULL, 'o'},     {"report", required_argument, NULL, 'R'},
            {"keep", no_argument, NULL, 'k'},          {"segments", required_argument, NULL, 'S'},
            {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
        };
        int c;
        char *end;
        while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
                switch (c) {
                case 's':
                        o->samples = strtoull(optarg, &end, 10);
                        if (*end || o->samples < N_THREADS)
                                return -1;
                        break;
                case 'r':
                        o->runs = atoi(optarg);
                        if (o->runs < 1 || o->runs > MAX_RUNS)
                                return -1;
                        break;
                case 'p':
                        o->repeat = strtod(optarg, &end);
                        if (*end || !(o->repeat >= 0 && o->repeat <= 1))
                                return -1;
                        break;
                case 'c':
                        o->cpu = atoi(optarg);
                        break;
                case 'o':
                        o->out = optarg;
                        break;
                case 'R':
                        o->report = optarg;
                        break;
                case 'k':
                        o->keep = true;
                        break;
                case 'S':
                        o->segments = atoi(optarg);
                        if (o->segments < 1 || o->segments > MAX_SEGMENTS)
                                return -1;
                        break;
                case 'h':
                        usage(stdout);
                        exit(0);
                default:
                        return -1;
                }
        }
        return optind == argc ? 0 : -1;
}

/* Two timings taken side by side, run by run: the set's and the joined file's. */
static void print_pair(const char *what, const struct timing *a, const struct timing *b, int runs)
{
        struct timing x = median(a, runs), y = median(b, runs);
        double ratio[MAX_RUNS];
        for (int i = 0; i < runs; i++)
                ratio[i] = (double)a[i].wall / (double)(b[i].wall > 0 ? b[i].wall : 1);
        for (int i = 1; i < runs; i++) /* insertion sort for the median */
                for (int j = i; j > 0 && ratio[j] < ratio[j - 1]; j--) {
                        double t = ratio[j];
                        ratio[j] = ratio[j - 1];
                        ratio[j - 1] = t;
                }
        printf("%-22s set %.3f s wall (%.3f s CPU), joined file %.3f s wall (%.3f s CPU), "
               "ratio %.2f (median of %d)\n",
               what, (double)x.wall / 1e9, (double)x.cpu / 1e9, (double)y.wall / 1e9,
               (double)y.cpu / 1e9, ratio[runs / 2], runs);
}

/*
 * --segments N: the workload as N files of one rotation, read as a set
 * (the library's open_set, the report over the directory) beside the same
 * recording joined into one file, run by run. 0 or 1.
 */
static int bench_set(const struct workload *wl, const struct options *o)
{
        struct timing tw = {0}, tj = {0};
        uint32_t nodes = 0;
        if (write_trace(wl, o->out, o->segments, &nodes, &tw) < 0)
                return 1;
        static char names[MAX_SEGMENTS][PATH_MAX];
        long long bytes = 0;
        set_n = o->segments;
        for (int k = 0; k < set_n; k++) {
                segment_path(names[k], sizeof(names[k]), o->out, k);
                set_paths[k] = names[k];
                struct stat st;
                if (stat(names[k], &st) < 0) {
                        perror(names[k]);
                        return 1;
                }
                bytes += st.st_size;
        }
        char joined[PATH_MAX];
        snprintf(joined, sizeof(joined), "%s.joined.pyflame", o->out);
        int64_t t0 = pf_now_mono_ns();
        struct trace_writer *w = NULL;
        int rc = trace_join_segments(joined, TRACE_CREATE_FORCE, set_paths, (size_t)set_n, &w);
        if (rc < 0) {
                die_writer(w, rc, "join");
                return 1;
        }
        trace_writer_free(w);
        tj.wall = pf_now_mono_ns() - t0;
        double n = (double)wl->n;
        printf("set:           %d files, %.2f bytes/sample (%lld bytes), written in %.1f s "
               "(on a time line of about a second a file); joined with trace_join_segments "
               "in %.3f s\n",
               set_n, (double)bytes / n, bytes, (double)tw.wall / 1e9, (double)tj.wall / 1e9);

        struct timing a[MAX_RUNS], b[MAX_RUNS];
        for (int i = 0; i < o->runs; i++)
                if (read_count(NULL, wl->n, &a[i]) < 0 || read_count(joined, wl->n, &b[i]) < 0)
                        return 1;
        print_pair("read+count:", a, b, o->runs);
        for (int i = 0; i < o->runs; i++)
                if (read_foreach(NULL, wl->n, &a[i]) < 0 || read_foreach(joined, wl->n, &b[i]) < 0)
                        return 1;
        print_pair("read+foreach:", a, b, o->runs);
        int status = 0;
        static const char *const flags[] = {NULL, "--by-function", "--by-line"};
        static const char *const what[] = {
            "report folded:", "report --by-function:", "report --by-line:"};
        for (size_t f = 0; o->report && status == 0 && f < 3; f++) {
                for (int i = 0; i < o->runs && status == 0; i++)
                        if (run_report(o->report, flags[f], o->out, &a[i]) < 0 ||
                            run_report(o->report, flags[f], joined, &b[i]) < 0)
                                status = 1;
                if (status == 0)
                        print_pair(what[f], a, b, o->runs);
        }
        if (!o->report)
                printf("report:        not timed (give --report PATH to pyflame-report)\n");
        if (!o->keep) {
                for (int k = 0; k < set_n; k++)
                        unlink(names[k]);
                rmdir(o->out);
                unlink(joined);
        } else {
                printf("set kept:      %s (joined: %s)\n", o->out, joined);
        }
        return status;
}

int main(int argc, char **argv)
{
        struct options o = {.samples = 10000000, .runs = 3, .repeat = 0.25, .cpu = -1};
        if (parse_options(argc, argv, &o) < 0) {
                usage(stderr);
                return 2;
        }
        char default_out[64];
        if (!o.out) {
                snprintf(default_out, sizeof(default_out),
                         o.segments > 1 ? "/tmp/pyflame-tracebench-%d.d"
                                        : "/tmp/pyflame-tracebench-%d.pyflame",
                         (int)getpid());
                o.out = default_out;
        }
        if (o.cpu >= 0) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(o.cpu, &set);
                if (sched_setaffinity(0, sizeof(set), &set) < 0) {
                        fprintf(stderr, "pyflame-tracebench: cannot pin to cpu %d: %s\n", o.cpu,
                                strerror(errno));
                        return 1;
                }
        }
        static struct workload wl;
        if (make_workload(&wl, &o) < 0) {
                fprintf(stderr, "pyflame-tracebench: out of memory\n");
                return 1;
        }
        cpu_set_t allowed;
        int n_cpus =
            sched_getaffinity(0, sizeof(allowed), &allowed) == 0 ? CPU_COUNT(&allowed) : -1;
        printf("workload: %llu samples, %d threads at ~100 Hz, %d distinct stacks ~30 deep, "
               "%.0f%% repeats; running on %d cpu(s)\n",
               (unsigned long long)o.samples, N_THREADS, N_STACKS, o.repeat * 100, n_cpus);
        if (o.segments > 1) {
                int status = bench_set(&wl, &o);
                free(wl.t_off);
                free(wl.leaf);
                free(wl.state);
                return status;
        }

        struct timing tw[MAX_RUNS] = {{0}}, tr[MAX_RUNS] = {{0}}, tf[MAX_RUNS] = {{0}};
        struct timing trep[MAX_RUNS] = {{0}}, tline[MAX_RUNS] = {{0}};
        uint32_t nodes = 0;
        for (int i = 0; i < o.runs; i++)
                if (write_trace(&wl, o.out, 1, &nodes, &tw[i]) < 0)
                        return 1;
        struct stat st;
        if (stat(o.out, &st) < 0) {
                perror(o.out);
                return 1;
        }
        double n = (double)o.samples;
        struct timing w = median(tw, o.runs);
        printf("writer:        %.2f M samples/s wall, %.2f M samples/s CPU (%.3f s wall, %.3f s "
               "CPU; median of %d)\n",
               n / (double)w.wall * 1e3, n / (double)w.cpu * 1e3, (double)w.wall / 1e9,
               (double)w.cpu / 1e9, o.runs);
        printf("size:          %.2f bytes/sample (%lld bytes, %u stack tree nodes)\n",
               (double)st.st_size / n, (long long)st.st_size, nodes);

        for (int i = 0; i < o.runs; i++)
                if (read_count(o.out, o.samples, &tr[i]) < 0)
                        return 1;
        struct timing r = median(tr, o.runs);
        printf("read+count:    %.3f s wall, %.3f s CPU (open + trace_reader_count_by_stack of "
               "all samples; median of %d)\n",
               (double)r.wall / 1e9, (double)r.cpu / 1e9, o.runs);
        for (int i = 0; i < o.runs; i++)
                if (read_foreach(o.out, o.samples, &tf[i]) < 0)
                        return 1;
        struct timing fe = median(tf, o.runs);
        printf("read+foreach:  %.3f s wall, %.3f s CPU (open + trace_reader_foreach_sample; "
               "median of %d)\n",
               (double)fe.wall / 1e9, (double)fe.cpu / 1e9, o.runs);

        int status = 0;
        if (o.report) {
                for (int i = 0; i < o.runs && status == 0; i++)
                        if (run_report(o.report, NULL, o.out, &trep[i]) < 0)
                                status = 1;
                struct timing t = median(trep, o.runs);
                if (status == 0)
                        printf("report folded: %.3f s wall, %.3f s CPU (%s FILE > /dev/null; "
                               "median of %d)\n",
                               (double)t.wall / 1e9, (double)t.cpu / 1e9, o.report, o.runs);
                for (int i = 0; i < o.runs && status == 0; i++)
                        if (run_report(o.report, "--by-line", o.out, &tline[i]) < 0)
                                status = 1;
                t = median(tline, o.runs);
                if (status == 0)
                        printf("report lines:  %.3f s wall, %.3f s CPU (%s --by-line FILE > "
                               "/dev/null; median of %d)\n",
                               (double)t.wall / 1e9, (double)t.cpu / 1e9, o.report, o.runs);
        } else {
                printf("report:        not timed (give --report PATH to pyflame-report)\n");
        }
        if (!o.keep)
                unlink(o.out);
        else
                printf("trace kept:    %s\n", o.out);
        free(wl.t_off);
        free(wl.leaf);
        free(wl.state);
        return status;
}
