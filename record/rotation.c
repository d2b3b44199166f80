/*
 * rotation.c - names, --on-rotate, retention and snapshots of a rotating
 * recording (rotation.h).
 *
 * The writer's committing thread finishes a file (trace_writer_rotate,
 * under the sink's lock) and only queues it here; a thread of our own then
 * runs the user's command for it, waits for that command (so the commands
 * run one at a time, in the files' order, each exactly once), and applies
 * retention, which can only ever delete a file whose command is done.
 * Snapshots are queued on the same thread, so the files they join are
 * never deleted under them. Nothing here runs on the sampling thread or
 * under the sink's lock but the queueing.
 *
 * With retention on, the files an earlier recording with the same -o left
 * (named like ours, SQLite files, not being written: a recorder with
 * retention holds a lock on DIR/.STEM.EXT.lock while it runs) count toward
 * --keep and --keep-size too, and go first: a recorder restarted for months
 * stays within its bounds.
 */
#include "rotation.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pfutil.h"
#include "trace.h"

extern char **environ;

enum job_kind { JOB_FINISHED, JOB_SNAPSHOT, JOB_RETAIN };

struct job {
        enum job_kind kind;
        char *path;          /* JOB_FINISHED: the file */
        int64_t end_mono_ns; /* JOB_FINISHED: its end (the cut) */
        pid_t reply_pid;
        int reply_fd;
};

/* A finished file of the set, oldest first. */
struct member {
        char *path;
        int64_t end_mono_ns; /* the cut that ended it, on the monotonic clock */
};

/* A file an earlier recording left, oldest first. */
struct earlier {
        char *path;
        int64_t mtime_ns; /* its last write, on the wall clock: its end */
        char stamp[17];   /* the start its name gives, YYYYmmddTHHMMSSZ */
        long seq;         /* the -N of its name (1 for none), after the stamp */
};

struct rotation {
        struct rotation_opts o;
        char *dir, *stem, *ext; /* DIR/STEM.EXT */
        char *on_rotate_sh;     /* the command with the path as its argument */
        char *current;
        /* Every file made (the current one too) that retention has not deleted, oldest first. */
        char **made;
        size_t n_made, cap_made;

        pthread_mutex_t lock;
        pthread_cond_t wake;
        pthread_t thread;
        bool stop;
        struct job *jobs;
        size_t n_jobs, cap_jobs;

        /* The worker's alone. */
        struct member *set;
        size_t n_set, cap_set;
        struct earlier *earlier;
        size_t n_earlier;

        int lock_fd; /* DIR/.STEM.EXT.lock, held while retention is on; else -1 */
};

static const char *prog = "pyflame-record";

static char *xstrndup(const char *s, size_t n)
{
        char *p = malloc(n + 1);
        if (p) {
                memcpy(p, s, n);
                p[n] = 0;
        }
        return p;
}

int rotation_name(struct rotation *rot, int64_t wall_ns, bool snapshot, char *buf, size_t len)
{
        time_t t = (time_t)(wall_ns / 1000000000);
        struct tm tm;
        gmtime_r(&t, &tm);
        char stamp[32];
        strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
        for (int n = 1; n < 1000; n++) {
                char suffix[16] = "";
                if (n > 1)
                        snprintf(suffix, sizeof(suffix), "-%d", n);
                int w = snprintf(buf, len, "%s%s-%s%s%s%s", rot->dir, rot->stem,
                                 snapshot ? "snapshot-" : "", stamp, suffix, rot->ext);
                if (w < 0 || (size_t)w >= len)
                        return -1;
                if (access(buf, F_OK) < 0 && errno == ENOENT)
                        return 0;
        }
        return -1;
}

static void push_job(struct rotation *rot, const struct job *j)
{
        pthread_mutex_lock(&rot->lock);
        if (rot->n_jobs == rot->cap_jobs) {
                size_t cap = rot->cap_jobs ? 2 * rot->cap_jobs : 8;
                struct job *p = realloc(rot->jobs, cap * sizeof(*p));
                if (!p) {
                        pthread_mutex_unlock(&rot->lock);
                        fprintf(stderr, "%s: out of memory: %s not passed on\n", prog,
                                j->path ? j->path : "a snapshot");
                        free(j->path);
                        return;
                }
                rot->jobs = p;
                rot->cap_jobs = cap;
        }
        rot->jobs[rot->n_jobs++] = *j;
        pthread_cond_signal(&rot->wake);
        pthread_mutex_unlock(&rot->lock);
}

void rotation_set_current(struct rotation *rot, const char *path)
{
        char *copy = strdup(path), *listed = strdup(path);
        if (!copy || !listed) {
                free(copy);
                free(listed);
                return; /* keeps the old name: retention then counts that file's size */
        }
        pthread_mutex_lock(&rot->lock);
        free(rot->current);
        rot->current = copy;
        if (rot->n_made == rot->cap_made) {
                size_t cap = rot->cap_made ? 2 * rot->cap_made : 16;
                char **p = realloc(rot->made, cap * sizeof(*p));
                if (p) {
                        rot->made = p;
                        rot->cap_made = cap;
                }
        }
        if (rot->n_made < rot->cap_made)
                rot->made[rot->n_made++] = listed;
        else
                free(listed); /* out of memory: the live view goes without this file */
        pthread_mutex_unlock(&rot->lock);
}

int rotation_files(struct rotation *rot, char ***paths, size_t *n)
{
        *paths = NULL;
        *n = 0;
        pthread_mutex_lock(&rot->lock);
        char **v = calloc(rot->n_made ? rot->n_made : 1, sizeof(*v));
        bool oom = !v;
        size_t k = 0;
        for (size_t i = 0; !oom && i < rot->n_made; i++) {
                if (access(rot->made[i], F_OK) < 0)
                        continue; /* not made yet, or deleted by someone else */
                oom = !(v[k++] = strdup(rot->made[i]));
        }
        pthread_mutex_unlock(&rot->lock);
        if (oom) {
                for (size_t i = 0; v && i < k; i++)
                        free(v[i]);
                free(v);
                return -1;
        }
        *paths = v;
        *n = k;
        return 0;
}

const char *rotation_current(struct rotation *rot, char *buf, size_t len)
{
        pthread_mutex_lock(&rot->lock);
        snprintf(buf, len, "%s", rot->current ? rot->current : "");
        pthread_mutex_unlock(&rot->lock);
        return buf;
}

void rotation_finished(struct rotation *rot, int64_t end_mono_ns)
{
        pthread_mutex_lock(&rot->lock);
        char *path = rot->current ? strdup(rot->current) : NULL;
        pthread_mutex_unlock(&rot->lock);
        if (!path)
                return;
        struct job j = {JOB_FINISHED, path, end_mono_ns, 0, -1};
        push_job(rot, &j);
}

void rotation_snapshot(struct rotation *rot, pid_t reply_pid, int reply_fd)
{
        struct job j = {JOB_SNAPSHOT, NULL, 0, reply_pid, reply_fd};
        push_job(rot, &j);
}

/* --on-rotate: `sh -c 'CMD "$1"' sh PATH`, waited for. */
static void run_command(struct rotation *rot, const char *path)
{
        char *argv[] = {"/bin/sh", "-c", rot->on_rotate_sh, "sh", (char *)path, NULL};
        pid_t pid;
        int rc = posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ);
        if (rc != 0) {
                fprintf(stderr, "%s: --on-rotate: cannot run /bin/sh: %s\n", prog, strerror(rc));
                return;
        }
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        if (!rot->o.quiet && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
                fprintf(stderr, "%s: --on-rotate command for %s %s %d\n", prog, path,
                        WIFEXITED(status) ? "exited with" : "killed by signal",
                        WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

static int64_t file_size(const char *path)
{
        struct stat st;
        return path && stat(path, &st) == 0 ? (int64_t)st.st_size : 0;
}

static void drop_oldest(struct rotation *rot, const char *why)
{
        struct member *m = &rot->set[0];
        pthread_mutex_lock(&rot->lock);
        for (size_t i = 0; i < rot->n_made; i++)
                if (!strcmp(rot->made[i], m->path)) {
                        free(rot->made[i]);
                        memmove(rot->made + i, rot->made + i + 1,
                                (rot->n_made - i - 1) * sizeof(*rot->made));
                        rot->n_made--;
                        break;
                }
        if (unlink(m->path) < 0 && errno != ENOENT)
                fprintf(stderr, "%s: cannot remove %s (%s): %s\n", prog, m->path, why,
                        strerror(errno));
        pthread_mutex_unlock(&rot->lock);
        free(m->path);
        memmove(rot->set, rot->set + 1, (rot->n_set - 1) * sizeof(*rot->set));
        rot->n_set--;
}

/* Delete the i-th file an earlier recording left, and its journal. */
static void drop_earlier(struct rotation *rot, size_t i, const char *why)
{
        struct earlier *e = &rot->earlier[i];
        char journal[PATH_MAX + 16];
        int len = snprintf(journal, sizeof(journal), "%s-journal", e->path);
        if (unlink(e->path) < 0 && errno != ENOENT)
                fprintf(stderr, "%s: cannot remove %s (%s): %s\n", prog, e->path, why,
                        strerror(errno));
        else if (len < (int)sizeof(journal) && unlink(journal) < 0 && errno != ENOENT)
                fprintf(stderr, "%s: cannot remove %s (%s): %s\n", prog, journal, why,
                        strerror(errno));
        free(e->path);
        memmove(e, e + 1, (rot->n_earlier - i - 1) * sizeof(*e));
        rot->n_earlier--;
}

/*
 * Delete the oldest finished files past --keep or over --keep-size. Age
 * is counted from the newest cut, on the clock the files' spans are on:
 * a file is dropped only when the files after it hold all of the last
 * --keep (a --ring snapshot covers at least the ring), not a few
 * microseconds less because this thread ran late.
 */
static void retain(struct rotation *rot)
{
        /* An earlier recording's files: each by its last write, on the wall clock. */
        if (rot->o.keep_ns) {
                int64_t now = pf_now_wall_ns();
                for (size_t i = 0; i < rot->n_earlier;)
                        if (rot->earlier[i].mtime_ns < now - rot->o.keep_ns)
                                drop_earlier(rot, i, "--keep, from an earlier recording");
                        else
                                i++;
        }
        if (rot->o.keep_ns && rot->n_set) {
                int64_t newest = rot->set[rot->n_set - 1].end_mono_ns;
                while (rot->n_set > 1 && rot->set[0].end_mono_ns < newest - rot->o.keep_ns)
                        drop_oldest(rot, "--keep");
        }
        if (rot->o.keep_bytes) {
                pthread_mutex_lock(&rot->lock);
                int64_t total = file_size(rot->current);
                pthread_mutex_unlock(&rot->lock);
                for (size_t i = 0; i < rot->n_set; i++)
                        total += file_size(rot->set[i].path);
                for (size_t i = 0; i < rot->n_earlier; i++)
                        total += file_size(rot->earlier[i].path);
                while (rot->n_earlier && (uint64_t)total > rot->o.keep_bytes) {
                        total -= file_size(rot->earlier[0].path);
                        drop_earlier(rot, 0, "--keep-size, from an earlier recording");
                }
                while (rot->n_set && (uint64_t)total > rot->o.keep_bytes) {
                        total -= file_size(rot->set[0].path);
                        drop_oldest(rot, "--keep-size");
                }
        }
}

/*
 * Tell pyflame-record --snapshot the name: through the pipe it passed the
 * number of, as its /proc entry. Only a pipe is written to; anything else
 * that number names is left alone.
 */
static void reply(pid_t pid, int fd, const char *text)
{
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/%d/fd/%d", (int)pid, fd);
        struct stat st;
        if (stat(proc, &st) < 0 || !S_ISFIFO(st.st_mode))
                return;
        int w = open(proc, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (w < 0)
                return;
        if (fstat(w, &st) == 0 && S_ISFIFO(st.st_mode)) {
                ssize_t n = write(w, text, strlen(text));
                (void)n; /* the client goes without the name, and says so */
        }
        close(w);
}

static void snapshot(struct rotation *rot, const struct job *j)
{
        char out[PATH_MAX], msg[PATH_MAX + 600];
        if (rot->n_set == 0) {
                snprintf(msg, sizeof(msg), "error: no finished file to take a snapshot of\n");
        } else if (rotation_name(rot, pf_now_wall_ns(), true, out, sizeof(out)) < 0) {
                snprintf(msg, sizeof(msg), "error: the snapshot's name is too long\n");
        } else {
                const char **paths = malloc(rot->n_set * sizeof(*paths));
                struct trace_writer *w = NULL;
                int rc = TRACE_ERR_NOMEM;
                if (paths) {
                        for (size_t i = 0; i < rot->n_set; i++)
                                paths[i] = rot->set[i].path;
                        rc = trace_join_segments(out, 0, paths, rot->n_set, &w);
                        free(paths);
                }
                if (rc == 0)
                        snprintf(msg, sizeof(msg), "%s\n", out);
                else
                        snprintf(msg, sizeof(msg), "error: writing the snapshot %s: %s\n", out,
                                 w ? trace_writer_errmsg(w) : trace_status_str(rc));
                trace_writer_free(w);
        }
        if (strncmp(msg, "error: ", 7)) {
                fputs(msg, stdout);
                fflush(stdout);
        } else {
                fprintf(stderr, "%s: %s", prog, msg + 7);
        }
        if (j->reply_pid > 0)
                reply(j->reply_pid, j->reply_fd, msg);
}

static void finished(struct rotation *rot, struct job *j)
{
        if (rot->o.on_rotate)
                run_command(rot, j->path);
        if (rot->n_set == rot->cap_set) {
                size_t cap = rot->cap_set ? 2 * rot->cap_set : 16;
                struct member *p = realloc(rot->set, cap * sizeof(*p));
                if (!p) {
                        free(j->path);
                        return; /* never deleted then: retention errs on the side of keeping */
                }
                rot->set = p;
                rot->cap_set = cap;
        }
        rot->set[rot->n_set++] = (struct member){j->path, j->end_mono_ns};
        j->path = NULL;
        retain(rot);
}

static void *run(void *arg)
{
        struct rotation *rot = arg;
        pthread_mutex_lock(&rot->lock);
        for (;;) {
                while (!rot->n_jobs && !rot->stop)
                        pthread_cond_wait(&rot->wake, &rot->lock);
                if (!rot->n_jobs)
                        break;
                struct job j = rot->jobs[0];
                memmove(rot->jobs, rot->jobs + 1, (rot->n_jobs - 1) * sizeof(*rot->jobs));
                rot->n_jobs--;
                pthread_mutex_unlock(&rot->lock);
                if (j.kind == JOB_FINISHED)
                        finished(rot, &j);
                else if (j.kind == JOB_RETAIN)
                        retain(rot);
                else
                        snapshot(rot, &j);
                free(j.path);
                pthread_mutex_lock(&rot->lock);
        }
        pthread_mutex_unlock(&rot->lock);
        return NULL;
}

static int split_output(struct rotation *rot, const char *output)
{
        const char *slash = strrchr(output, '/');
        const char *base = slash ? slash + 1 : output;
        const char *dot = strrchr(base, '.');
        if (!dot || dot == base)
                dot = base + strlen(base);
        /* The directory with its slash ("" for none, "/" for the root). */
        rot->dir = slash ? xstrndup(output, (size_t)(slash - output) + 1) : strdup("");
        rot->stem = xstrndup(base, (size_t)(dot - base));
        rot->ext = strdup(dot);
        return rot->dir && rot->stem && rot->ext && *rot->stem ? 0 : -1;
}

/*
 * Whether `name` is STEM-YYYYmmddTHHMMSSZ[-N]EXT, one of the names
 * rotation_name() gives (not a snapshot's); its N (1 for none) in *seq.
 */
static bool set_name(const struct rotation *rot, const char *name, long *seq)
{
        size_t ls = strlen(rot->stem), le = strlen(rot->ext), n = strlen(name);
        if (n < ls + 17 + le || strncmp(name, rot->stem, ls) || name[ls] != '-' ||
            strcmp(name + n - le, rot->ext))
                return false;
        const char *p = name + ls + 1, *end = name + n - le;
        for (int i = 0; i < 16; i++) {
                bool ok = i == 8    ? p[i] == 'T'
                          : i == 15 ? p[i] == 'Z'
                                    : (p[i] >= '0' && p[i] <= '9');
                if (!ok)
                        return false;
        }
        p += 16;
        *seq = 1;
        if (p == end)
                return true;
        if (*p != '-' || end - p < 2 || end - p > 4)
                return false;
        long v = 0;
        for (const char *q = p + 1; q < end; q++) {
                if (*q < '0' || *q > '9')
                        return false;
                v = v * 10 + (*q - '0');
        }
        *seq = v;
        return v >= 2;
}

/* A regular file (not a link) that starts as SQLite databases do; its mtime in *mtime_ns. */
static bool sqlite_file(const char *path, int64_t *mtime_ns)
{
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
                return false;
        struct stat st;
        char magic[16];
        bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                  pread(fd, magic, sizeof(magic), 0) == (ssize_t)sizeof(magic) &&
                  memcmp(magic, "SQLite format 3", sizeof(magic)) == 0;
        close(fd);
        if (ok)
                *mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
        return ok;
}

static int earlier_order(const void *a, const void *b)
{
        const struct earlier *x = a, *y = b;
        int c = strcmp(x->stamp, y->stamp);
        return c ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

/*
 * Hold DIR/.STEM.EXT.lock: one recorder with retention per -o, so that no
 * recorder deletes the files another is writing. 0, or -1 with a message.
 */
static int take_lock(struct rotation *rot, char *err, size_t errlen)
{
        char path[PATH_MAX];
        if (snprintf(path, sizeof(path), "%s.%s%s.lock", rot->dir, rot->stem, rot->ext) >=
            (int)sizeof(path)) {
                snprintf(err, errlen, "cannot name files after '%s': the name is too long",
                         rot->o.output);
                return -1;
        }
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) {
                snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
                return -1;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                char pid[32] = "";
                ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
                pid[n > 0 ? n : 0] = 0;
                pid[strcspn(pid, "\n")] = 0;
                snprintf(err, errlen,
                         "another pyflame-record%s%s%s writes the files named after %s and "
                         "deletes the oldest: give this one another -o",
                         *pid ? " (pid " : "", pid, *pid ? ")" : "", rot->o.output);
                close(fd);
                return -1;
        }
        char pid[32];
        int len = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
        if (ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)len, 0) < 0) {
                /* the pid is only for the message of a second recorder */
        }
        rot->lock_fd = fd;
        return 0;
}

/* The files of an earlier recording with this -o, oldest first (rot->earlier). */
static void find_earlier(struct rotation *rot)
{
        DIR *d = opendir(*rot->dir ? rot->dir : ".");
        if (!d)
                return;
        struct dirent *e;
        size_t cap = 0;
        while ((e = readdir(d)) != NULL) {
                long seq;
                int64_t mtime;
                if (!set_name(rot, e->d_name, &seq))
                        continue;
                size_t len = strlen(rot->dir) + strlen(e->d_name) + 1;
                char *path = malloc(len);
                if (!path)
                        break;
                snprintf(path, len, "%s%s", rot->dir, e->d_name);
                if (!sqlite_file(path, &mtime)) {
                        free(path);
                        continue;
                }
                if (rot->n_earlier == cap) {
                        size_t c = cap ? 2 * cap : 16;
                        struct earlier *p = realloc(rot->earlier, c * sizeof(*p));
                        if (!p) {
                                free(path);
                                break;
                        }
                        rot->earlier = p;
                        cap = c;
                }
                struct earlier *f = &rot->earlier[rot->n_earlier++];
                *f = (struct earlier){path, mtime, "", seq};
                memcpy(f->stamp, e->d_name + strlen(rot->stem) + 1, 16);
        }
        closedir(d);
        if (!rot->n_earlier)
                return;
        qsort(rot->earlier, rot->n_earlier, sizeof(*rot->earlier), earlier_order);
        if (!rot->o.quiet)
                fprintf(stderr,
                        "%s: %zu file%s an earlier recording left (%s to %s) count%s "
                        "toward --keep/--keep-size\n",
                        prog, rot->n_earlier, rot->n_earlier == 1 ? "" : "s", rot->earlier[0].path,
                        rot->earlier[rot->n_earlier - 1].path, rot->n_earlier == 1 ? "s" : "");
}

int rotation_new(const struct rotation_opts *opts, struct rotation **out, char *err, size_t errlen)
{
        struct rotation *rot = calloc(1, sizeof(*rot));
        if (!rot) {
                snprintf(err, errlen, "out of memory");
                return -1;
        }
        int ret = -1;
        rot->o = *opts;
        rot->lock_fd = -1;
        if (split_output(rot, opts->output) < 0) {
                snprintf(err, errlen, "cannot name files after '%s'", opts->output);
                goto fail;
        }
        if (opts->keep_ns || opts->keep_bytes) {
                if (take_lock(rot, err, errlen) < 0) {
                        ret = -2;
                        goto fail;
                }
                find_earlier(rot);
        }
        if (opts->on_rotate) {
                size_t n = strlen(opts->on_rotate) + 8;
                rot->on_rotate_sh = malloc(n);
                if (!rot->on_rotate_sh) {
                        snprintf(err, errlen, "out of memory");
                        goto fail;
                }
                snprintf(rot->on_rotate_sh, n, "%s \"$1\"", opts->on_rotate);
        }
        pthread_mutex_init(&rot->lock, NULL);
        pthread_cond_init(&rot->wake, NULL);
        /* Signals are the sampling thread's business. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = pthread_create(&rot->thread, NULL, run, rot);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) {
                snprintf(err, errlen, "cannot start the rotation thread: %s", strerror(rc));
                pthread_mutex_destroy(&rot->lock);
                pthread_cond_destroy(&rot->wake);
                goto fail;
        }
        if (rot->n_earlier) {
                struct job j = {JOB_RETAIN, NULL, 0, 0, -1};
                push_job(rot, &j);
        }
        *out = rot;
        return 0;
fail:
        for (size_t i = 0; i < rot->n_earlier; i++)
                free(rot->earlier[i].path);
        free(rot->earlier);
        if (rot->lock_fd >= 0)
                close(rot->lock_fd);
        free(rot->dir);
        free(rot->stem);
        free(rot->ext);
        free(rot->on_rotate_sh);
        free(rot);
        return ret;
}

void rotation_free(struct rotation *rot)
{
        if (!rot)
                return;
        pthread_mutex_lock(&rot->lock);
        rot->stop = true;
        pthread_cond_signal(&rot->wake);
        pthread_mutex_unlock(&rot->lock);
        pthread_join(rot->thread, NULL);
        pthread_mutex_destroy(&rot->lock);
        pthread_cond_destroy(&rot->wake);
        for (size_t i = 0; i < rot->n_set; i++)
                free(rot->set[i].path);
        free(rot->set);
        for (size_t i = 0; i < rot->n_earlier; i++)
                free(rot->earlier[i].path);
        free(rot->earlier);
        if (rot->lock_fd >= 0)
                close(rot->lock_fd); /* the file stays: removing it would race a new recorder */
        free(rot->jobs);
        for (size_t i = 0; i < rot->n_made; i++)
                free(rot->made[i]);
        free(rot->made);
        free(rot->current);
        free(rot->dir);
        free(rot->stem);
        free(rot->ext);
        free(rot->on_rotate_sh);
        free(rot);
}
