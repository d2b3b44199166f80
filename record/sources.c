/*
 * sources.c - reading the source files of sampled frames as the target
 * would, and storing them in the trace (sources.h).
 *
 * Where. A name is resolved in the target's mount namespace: an absolute
 * name from an O_PATH descriptor of /proc/PID/root with openat2's
 * RESOLVE_IN_ROOT (absolute symbolic links and ".." stay inside that root,
 * as they do for the target), a relative one from /proc/PID/cwd with
 * RESOLVE_BENEATH (it may not climb out of that directory). Magic links
 * (/proc/self/fd/...) are never followed. Both descriptors are taken when
 * the process is first watched, so files queued by a process that has
 * exited are still read in its namespace.
 *
 * As whom. The open is done with the target's filesystem uid, gid and
 * supplementary groups, read from /proc/PID/status at every pump while it
 * is sampled: setfsuid()/setfsgid() and the setgroups system call (which
 * changes only the calling thread; the recorder has one) around the open,
 * restored right after. The kernel then applies every rule the target is
 * subject to, ACLs and directory search permission included. This is
 * chosen over a child process per batch (no fork on the recorder's loop)
 * and over comparing mode bits (which misses ACLs and directories). A
 * recorder that may not change its identity (no CAP_SETUID/CAP_SETGID: a
 * user recording their own programs) opens as itself when the target has
 * the same credentials, and otherwise falls back to checking the file's
 * owner, group and mode bits against the target's. A target running as
 * root reads what our root reads.
 *
 * What. Regular files only: a name is opened O_PATH first and reopened for
 * reading only once it is known to be a regular file, so a device or FIFO
 * is never opened. A name whose open fails with ENOTDIR may be a member of
 * a zip archive (zipapp, egg, .pex: /app/x.pyz/pkg/mod.py): the longest
 * prefix that is a regular file is opened the same way and the rest of the
 * name read from it with libarchive. Text only (no NUL byte), at most
 * max_file bytes a file and max_total over the trace; files over a limit
 * are skipped, never cut.
 */
#include "sources.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pfutil.h"
#include "procfs.h"

/* Distinct names kept; later new names are dropped (and count as skipped). */
#define MAX_NAMES (1u << 18)
/* Entries of an archive looked at for one member. */
#define MAX_ARCHIVE_ENTRIES 200000
/* Longest name tried. */
#define MAX_NAME_LEN 4096

/* A process files are read for. */
struct origin {
        pid_t pid;
        int root_fd, cwd_fd; /* O_PATH; -1 when unavailable */
        struct procfs_creds creds;
        bool creds_known;
        bool watching;    /* still sampled: credentials refreshed at each pump */
        uint32_t pending; /* queued names */
};

struct name_slot {
        uint64_t hash;
        uint32_t off; /* into names, + 1; 0: empty */
};

struct job {
        uint32_t off; /* name in names */
        uint32_t origin;
};

struct sources {
        struct trace_writer *w;
        struct sources_limits lim;
        struct sources_stats st;

        struct origin *origins;
        size_t n_origins, cap_origins;

        struct pf_buf names; /* NUL-terminated names, back to back */
        struct name_slot *slots;
        size_t cap_slots, n_names;

        struct job *jobs;
        size_t head, n_jobs, cap_jobs;

        /* Our own filesystem identity, restored after each open as a target. */
        uid_t fsuid;
        gid_t fsgid;
        gid_t *groups;
        int n_groups;
        bool can_switch; /* false once changing identity failed */
};

/* ---- names ------------------------------------------------------------- */

/* Names that are not files: "<frozen importlib._bootstrap>", "<string>", "<stdin>"... */
static bool is_file_name(const char *name)
{
        if (!name[0] || name[0] == '<')
                return false;
        /* Kernel interfaces, never sources: do not even look. */
        static const char *const pseudo[] = {"/proc/", "/sys/", "/dev/"};
        for (size_t i = 0; i < sizeof(pseudo) / sizeof(pseudo[0]); i++)
                if (!strncmp(name, pseudo[i], strlen(pseudo[i])))
                        return false;
        return strlen(name) < MAX_NAME_LEN;
}

static int slots_grow(struct sources *s)
{
        size_t cap = s->cap_slots ? s->cap_slots * 2 : 1024;
        struct name_slot *t = calloc(cap, sizeof(*t));
        if (!t)
                return -1;
        for (size_t i = 0; i < s->cap_slots; i++) {
                if (!s->slots[i].off)
                        continue;
                size_t j = s->slots[i].hash & (cap - 1);
                while (t[j].off)
                        j = (j + 1) & (cap - 1);
                t[j] = s->slots[i];
        }
        free(s->slots);
        s->slots = t;
        s->cap_slots = cap;
        return 0;
}

void sources_note(struct sources *s, int handle, const char *file)
{
        if (!s || handle < 0 || (size_t)handle >= s->n_origins || !file ||
            !s->origins[handle].watching)
                return;
        size_t len = strlen(file);
        uint64_t h = pf_hash_bytes(file, len, 0);
        if (s->cap_slots) {
                for (size_t j = h & (s->cap_slots - 1); s->slots[j].off;
                     j = (j + 1) & (s->cap_slots - 1))
                        if (s->slots[j].hash == h &&
                            !strcmp((const char *)s->names.data + s->slots[j].off - 1, file))
                                return;
        }
        /* New. Remembered even when it is not a file, so that it is looked at once. */
        bool wanted = is_file_name(file);
        if (s->n_names >= MAX_NAMES || s->names.len + len + 1 > UINT32_MAX - 1 ||
            ((s->n_names + 1) * 2 > s->cap_slots && slots_grow(s) < 0)) {
                s->st.skipped += wanted;
                return;
        }
        size_t off = s->names.len;
        if (pf_buf_append(&s->names, file, len + 1) < 0) {
                s->st.skipped += wanted;
                return;
        }
        size_t j = h & (s->cap_slots - 1);
        while (s->slots[j].off)
                j = (j + 1) & (s->cap_slots - 1);
        s->slots[j] = (struct name_slot){h, (uint32_t)off + 1};
        s->n_names++;
        if (!wanted)
                return;
        if (s->n_jobs == s->cap_jobs) {
                size_t cap = s->cap_jobs ? s->cap_jobs * 2 : 256;
                struct job *p = reallocarray(s->jobs, cap, sizeof(*p));
                if (!p) {
                        s->st.skipped++;
                        return;
                }
                s->jobs = p;
                s->cap_jobs = cap;
        }
        s->jobs[s->n_jobs++] = (struct job){(uint32_t)off, (uint32_t)handle};
        s->origins[handle].pending++;
        s->st.queued++;
}

/* ---- processes --------------------------------------------------------- */

static void origin_close(struct origin *o)
{
        if (o->root_fd >= 0)
                close(o->root_fd);
        if (o->cwd_fd >= 0)
                close(o->cwd_fd);
        o->root_fd = o->cwd_fd = -1;
}

int sources_watch(struct sources *s, pid_t pid)
{
        /*
         * The slot of a process that is gone and whose files are all read is
         * taken again: a recorder following a service (--match) for months
         * sees workers come and go without end, and keeps only the live ones.
         */
        size_t i = 0;
        while (i < s->n_origins && (s->origins[i].watching || s->origins[i].pending))
                i++;
        if (i == s->n_origins && s->n_origins == s->cap_origins) {
                size_t cap = s->cap_origins ? s->cap_origins * 2 : 8;
                struct origin *p = reallocarray(s->origins, cap, sizeof(*p));
                if (!p)
                        return -ENOMEM;
                s->origins = p;
                s->cap_origins = cap;
        }
        if (i >= INT32_MAX)
                return -ENOMEM;
        struct origin *o = &s->origins[i];
        memset(o, 0, sizeof(*o));
        o->pid = pid;
        o->watching = true;
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/root", (int)pid);
        o->root_fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        snprintf(path, sizeof(path), "/proc/%d/cwd", (int)pid);
        o->cwd_fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        o->creds_known = procfs_creds(pid, &o->creds) == 0;
        if (i == s->n_origins)
                s->n_origins++;
        return (int)i;
}

void sources_unwatch(struct sources *s, pid_t pid)
{
        if (!s)
                return;
        for (size_t i = 0; i < s->n_origins; i++) {
                struct origin *o = &s->origins[i];
                if (o->pid != pid || !o->watching)
                        continue;
                o->watching = false;
                if (!o->pending)
                        origin_close(o);
        }
}

/* ---- opening as the target ---------------------------------------------- */

static bool same_identity(const struct sources *s, const struct procfs_creds *c)
{
        if (c->fsuid != s->fsuid || c->fsgid != s->fsgid || c->n_groups != (unsigned)s->n_groups)
                return false;
        for (unsigned i = 0; i < c->n_groups; i++) {
                bool found = false;
                for (int k = 0; k < s->n_groups && !found; k++)
                        found = s->groups[k] == c->groups[i];
                if (!found)
                        return false;
        }
        return true;
}

/* Back to our own identity. Cannot fail: see become(). */
static void unbecome(const struct sources *s)
{
        setfsuid(s->fsuid);
        setfsgid(s->fsgid);
        syscall(SYS_setgroups, (size_t)s->n_groups, s->groups);
}

/*
 * Take the target's filesystem identity for this thread. The setgroups
 * system call itself, not glibc's wrapper, which would change every thread
 * of the process; the recorder has only this one. Going back is always
 * allowed: the fsuid and fsgid may be set to the effective ids, and the
 * capability that allowed setting the target's groups (CAP_SETGID) is not
 * one that a non-zero fsuid takes away. Returns 0, or -1 when not permitted
 * (identity unchanged).
 */
static int become(const struct sources *s, const struct procfs_creds *c)
{
        gid_t groups[PROCFS_MAX_GROUPS];
        for (unsigned i = 0; i < c->n_groups; i++)
                groups[i] = c->groups[i];
        if (syscall(SYS_setgroups, (size_t)c->n_groups, groups) < 0)
                return -1;
        setfsgid(c->fsgid);
        setfsuid(c->fsuid);
        /* Both return the previous id and fail silently: read them back. */
        if ((uid_t)setfsuid((uid_t)-1) != c->fsuid || (gid_t)setfsgid((gid_t)-1) != c->fsgid) {
                unbecome(s);
                return -1;
        }
        return 0;
}

/* Would `c` be allowed to read the file of `st` by its mode bits? (The fallback.) */
static bool mode_allows(const struct stat *st, const struct procfs_creds *c)
{
        if (c->fsuid == 0)
                return true;
        if (st->st_uid == c->fsuid)
                return st->st_mode & S_IRUSR;
        bool member = st->st_gid == c->fsgid;
        for (unsigned i = 0; i < c->n_groups && !member; i++)
                member = st->st_gid == c->groups[i];
        if (member)
                return st->st_mode & S_IRGRP;
        return st->st_mode & S_IROTH;
}

/*
 * Open `path` below `dirfd` with `resolve` for reading, as whoever is
 * current: O_PATH first, then, only for a regular file, a real open through
 * /proc/self/fd (which checks read permission for the current identity).
 * Returns the fd, or a negative errno (-EISDIR for anything not regular).
 */
static int open_regular(int dirfd, const char *path, uint64_t resolve, struct stat *st)
{
        struct open_how how = {
            .flags = O_PATH | O_CLOEXEC,
            .resolve = resolve | RESOLVE_NO_MAGICLINKS,
        };
        long pfd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
        if (pfd < 0)
                return -errno;
        int rc;
        if (fstat((int)pfd, st) < 0) {
                rc = -errno;
        } else if (!S_ISREG(st->st_mode)) {
                rc = -EISDIR;
        } else {
                char self[64];
                snprintf(self, sizeof(self), "/proc/self/fd/%d", (int)pfd);
                rc = open(self, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
                if (rc < 0)
                        rc = -errno;
        }
        close((int)pfd);
        return rc;
}

/* open_regular() with the identity of origin `o`. */
static int open_as_target(struct sources *s, const struct origin *o, int dirfd, const char *path,
                          uint64_t resolve, struct stat *st)
{
        if (!o->creds_known)
                return -EACCES;
        if (same_identity(s, &o->creds))
                return open_regular(dirfd, path, resolve, st);
        if (s->can_switch && become(s, &o->creds) == 0) {
                int fd = open_regular(dirfd, path, resolve, st);
                unbecome(s);
                return fd;
        }
        s->can_switch = false;
        int fd = open_regular(dirfd, path, resolve, st);
        if (fd >= 0 && !mode_allows(st, &o->creds)) {
                close(fd);
                return -EACCES;
        }
        return fd;
}

/* ---- reading ------------------------------------------------------------ */

struct text {
        char *data;
        size_t len;
        int64_t mtime_ns;
};

/* Accept `data` of `len` bytes as a source text: no NUL byte. Takes ownership. */
static int take_text(char *data, size_t len, int64_t mtime_ns, struct text *out)
{
        if (memchr(data, '\0', len)) {
                free(data);
                return -EINVAL;
        }
        *out = (struct text){data, len, mtime_ns};
        return 0;
}

/* Read all of a regular file of at most `max` bytes. */
static int read_file_text(int fd, const struct stat *st, uint64_t max, struct text *out)
{
        if (st->st_size < 0 || (uint64_t)st->st_size > max)
                return -EFBIG;
        /* Bounded by max + 1 whatever the file does meanwhile (it may grow). */
        size_t cap = (size_t)max + 1, got = 0;
        size_t want = (size_t)st->st_size + 1 < cap ? (size_t)st->st_size + 1 : cap;
        char *data = malloc(want);
        if (!data)
                return -ENOMEM;
        for (;;) {
                if (got == want) {
                        if (want == cap)
                                break;
                        size_t more = want * 2 < cap ? want * 2 : cap;
                        char *p = realloc(data, more);
                        if (!p) {
                                free(data);
                                return -ENOMEM;
                        }
                        data = p;
                        want = more;
                }
                ssize_t n = read(fd, data + got, want - got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        int e = errno;
                        free(data);
                        return -e;
                }
                if (n == 0)
                        break;
                got += (size_t)n;
        }
        if (got > max) {
                free(data);
                return -EFBIG;
        }
        return take_text(data, got, (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec,
                         out);
}

/* The data of the archive's current entry, at most `max` bytes. */
static int read_entry_data(struct archive *a, uint64_t max, char **out, size_t *len)
{
        size_t cap = (size_t)max + 1, got = 0, size = 0;
        char *data = NULL;
        for (;;) {
                if (got == size) {
                        if (size == cap) {
                                free(data);
                                return -EFBIG;
                        }
                        size_t more = size ? size * 2 : 4096;
                        if (more > cap)
                                more = cap;
                        char *p = realloc(data, more);
                        if (!p) {
                                free(data);
                                return -ENOMEM;
                        }
                        data = p;
                        size = more;
                }
                la_ssize_t n = archive_read_data(a, data + got, size - got);
                if (n < 0) {
                        free(data);
                        return -EIO;
                }
                if (n == 0)
                        break;
                got += (size_t)n;
        }
        *out = data;
        *len = got;
        return 0;
}

/* Member `member` of the zip archive open at `fd`, at most `max` bytes. */
static int read_archive_member(int fd, const char *member, uint64_t max, struct text *out)
{
        struct archive *a = archive_read_new();
        if (!a)
                return -ENOMEM;
        archive_read_support_format_zip(a);
        if (archive_read_open_fd(a, fd, 65536) != ARCHIVE_OK) {
                archive_read_free(a);
                return -EINVAL;
        }
        int rc = -ENOENT;
        struct archive_entry *e;
        for (int i = 0; i < MAX_ARCHIVE_ENTRIES; i++) {
                int r = archive_read_next_header(a, &e);
                if (r == ARCHIVE_EOF || r < ARCHIVE_WARN)
                        break;
                const char *name = archive_entry_pathname(e);
                if (!name || strcmp(name, member))
                        continue;
                char *data;
                size_t len;
                if (archive_entry_filetype(e) != AE_IFREG)
                        rc = -EISDIR;
                else if (archive_entry_size_is_set(e) &&
                         (archive_entry_size(e) < 0 || (uint64_t)archive_entry_size(e) > max))
                        rc = -EFBIG;
                else if ((rc = read_entry_data(a, max, &data, &len)) == 0)
                        rc = take_text(data, len,
                                       archive_entry_mtime_is_set(e)
                                           ? (int64_t)archive_entry_mtime(e) * 1000000000 +
                                                 archive_entry_mtime_nsec(e)
                                           : -1,
                                       out);
                break;
        }
        archive_read_free(a);
        return rc;
}

/*
 * The text of `name` as origin `o` sees it: a file, or a member of a zip
 * archive on the way to it. Returns 0, or a negative errno saying why not.
 */
static int read_source(struct sources *s, const struct origin *o, const char *name,
                       struct text *out)
{
        const char *path = name;
        int dirfd = o->cwd_fd;
        uint64_t resolve = RESOLVE_BENEATH;
        if (*path == '/') {
                while (*path == '/')
                        path++;
                dirfd = o->root_fd;
                resolve = RESOLVE_IN_ROOT;
        }
        if (dirfd < 0 || !*path)
                return -ENOENT;
        struct stat st;
        int fd = open_as_target(s, o, dirfd, path, resolve, &st);
        if (fd >= 0) {
                int rc = read_file_text(fd, &st, s->lim.max_file, out);
                close(fd);
                return rc;
        }
        if (fd != -ENOTDIR)
                return fd;
        /* A component is a file: the longest such prefix may be a zip archive. */
        char prefix[MAX_NAME_LEN];
        size_t len = strlen(path);
        if (len >= sizeof(prefix))
                return -ENAMETOOLONG;
        memcpy(prefix, path, len + 1);
        for (char *slash = strrchr(prefix, '/'); slash && slash > prefix;
             slash = memrchr(prefix, '/', (size_t)(slash - prefix))) {
                *slash = '\0';
                fd = open_as_target(s, o, dirfd, prefix, resolve, &st);
                if (fd == -ENOTDIR)
                        continue;
                if (fd < 0)
                        return fd;
                /* The member is the rest of the name (prefix is cut at every slash tried). */
                int rc = read_archive_member(fd, path + (slash - prefix) + 1, s->lim.max_file, out);
                close(fd);
                return rc;
        }
        return -ENOENT;
}

/* ---- the store ---------------------------------------------------------- */

int sources_new(struct trace_writer *w, const struct sources_limits *lim, struct sources **out,
                char *err, size_t errlen)
{
        /* Without openat2 a path could not be kept inside the target's root. */
        struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT};
        long probe = syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof(how));
        if (probe < 0 && errno == ENOSYS) {
                snprintf(err, errlen,
                         "source files are not stored: this kernel has no openat2 (Linux 5.6 "
                         "or later), which keeps paths inside the target's root");
                return -ENOSYS;
        }
        if (probe >= 0)
                close((int)probe);
        struct sources *s = calloc(1, sizeof(*s));
        int n = getgroups(0, NULL);
        if (s && n >= 0)
                s->groups = malloc((size_t)(n ? n : 1) * sizeof(gid_t));
        if (!s || n < 0 || !s->groups || (n = getgroups(n, s->groups)) < 0) {
                sources_free(s);
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        s->w = w;
        s->lim = *lim;
        if (s->lim.max_file > TRACE_SOURCE_MAX_BYTES)
                s->lim.max_file = TRACE_SOURCE_MAX_BYTES;
        if (s->lim.max_file > s->lim.max_total)
                s->lim.max_file = s->lim.max_total;
        s->n_groups = n;
        s->fsuid = (uid_t)setfsuid((uid_t)-1);
        s->fsgid = (gid_t)setfsgid((gid_t)-1);
        s->can_switch = true;
        *out = s;
        return 0;
}

void sources_pump(struct sources *s, int64_t budget_ns)
{
        if (!s || s->head == s->n_jobs)
                return;
        for (size_t i = 0; i < s->n_origins; i++) {
                struct origin *o = &s->origins[i];
                struct procfs_creds c;
                /* Its identity now (a server may drop privileges after starting). */
                if (o->watching && o->pending && procfs_creds(o->pid, &c) == 0) {
                        o->creds = c;
                        o->creds_known = true;
                }
        }
        int64_t start = pf_now_mono_ns();
        while (s->head < s->n_jobs) {
                if (budget_ns >= 0 && s->head && pf_now_mono_ns() - start > budget_ns)
                        break;
                struct job j = s->jobs[s->head++];
                struct origin *o = &s->origins[j.origin];
                const char *name = (const char *)s->names.data + j.off;
                struct text t = {0};
                s->st.queued--;
                if (s->st.bytes >= s->lim.max_total || read_source(s, o, name, &t) < 0) {
                        s->st.skipped++;
                } else if (s->st.bytes + t.len > s->lim.max_total) {
                        s->st.skipped++;
                        free(t.data);
                } else if (trace_writer_add_source(s->w, name, t.data, t.len, t.mtime_ns) == 0) {
                        s->st.files++;
                        s->st.bytes += t.len;
                        free(t.data);
                } else {
                        /* Refused (out of memory): the recording goes on without it. */
                        s->st.skipped++;
                        free(t.data);
                }
                if (--o->pending == 0 && !o->watching)
                        origin_close(o);
        }
        if (s->head == s->n_jobs)
                s->head = s->n_jobs = 0;
}

void sources_get_stats(const struct sources *s, struct sources_stats *st)
{
        if (s)
                *st = s->st;
        else
                memset(st, 0, sizeof(*st));
}

void sources_free(struct sources *s)
{
        if (!s)
                return;
        for (size_t i = 0; i < s->n_origins; i++)
                origin_close(&s->origins[i]);
        free(s->origins);
        pf_buf_free(&s->names);
        free(s->slots);
        free(s->jobs);
        free(s->groups);
        free(s);
}
