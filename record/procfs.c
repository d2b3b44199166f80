/*
 * procfs.c - readers of /proc for the recorder: mappings, threads, thread
 * states, NSpid and the command line.
 *
 * The text comes from the kernel but describes a process we do not trust:
 * comm and paths are arbitrary bytes chosen by the target. Parsers therefore
 * take explicit lengths, bound every number they read and every loop, and
 * turn anything unexpected into -EINVAL rather than guessing. Files are read
 * with plain open/read so that errors keep their errno (-ESRCH when the
 * process or thread has gone, -EACCES when ptrace access is denied).
 */
#include "procfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Big enough for any stat line up to the state letter: "pid (comm) S" with comm <= 64 bytes. */
#define STAT_READ_LEN 512
/* Status files are ~1.5 KiB; NSpid is in the first few hundred bytes. */
#define STATUS_READ_LEN 8192
/* A maps line is at most the fixed fields plus a path of PATH_MAX bytes. */
#define MAPS_LINE_LEN (PATH_MAX + 256)

/* A missing /proc/PID entry means the process (or thread) is gone. */
static int errno_code(int e)
{
        return e == ENOENT ? -ESRCH : -e;
}

/*
 * Read up to cap-1 bytes of a /proc file into buf and NUL-terminate it.
 * Returns the byte count or a negative errno.
 */
static ssize_t read_small_file(const char *path, char *buf, size_t cap)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return errno_code(errno);
        size_t got = 0;
        while (got + 1 < cap) {
                ssize_t r = read(fd, buf + got, cap - 1 - got);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        int e = errno;
                        close(fd);
                        return errno_code(e);
                }
                if (r == 0)
                        break;
                got += (size_t)r;
        }
        close(fd);
        buf[got] = 0;
        return (ssize_t)got;
}

/* Parse 1..16 hex digits at *p (< end); advances *p. */
static int parse_hex(const char **p, const char *end, uint64_t *v)
{
        uint64_t x = 0;
        int n = 0;
        while (*p < end && n < 17) {
                char c = **p;
                unsigned d;
                if (c >= '0' && c <= '9')
                        d = (unsigned)(c - '0');
                else if (c >= 'a' && c <= 'f')
                        d = (unsigned)(c - 'a' + 10);
                else if (c >= 'A' && c <= 'F')
                        d = (unsigned)(c - 'A' + 10);
                else
                        break;
                x = x << 4 | d;
                n++;
                (*p)++;
        }
        if (n == 0 || n > 16)
                return -EINVAL;
        *v = x;
        return 0;
}

/* Parse 1..20 decimal digits at *p (< end) without overflow; advances *p. */
static int parse_dec(const char **p, const char *end, uint64_t *v)
{
        uint64_t x = 0;
        int n = 0;
        while (*p < end && **p >= '0' && **p <= '9') {
                unsigned d = (unsigned)(**p - '0');
                if (x > (UINT64_MAX - d) / 10)
                        return -EINVAL;
                x = x * 10 + d;
                n++;
                (*p)++;
        }
        if (n == 0)
                return -EINVAL;
        *v = x;
        return 0;
}

static int expect_char(const char **p, const char *end, char c)
{
        if (*p >= end || **p != c)
                return -EINVAL;
        (*p)++;
        return 0;
}

static void skip_spaces(const char **p, const char *end)
{
        while (*p < end && (**p == ' ' || **p == '\t'))
                (*p)++;
}

int procfs_parse_maps_line(char *line, size_t len, struct procfs_mapping *out)
{
        const char *p = line, *end = line + len;
        struct procfs_mapping m = {0};
        uint64_t dev_major, dev_minor;

        while (end > p && (end[-1] == '\n' || end[-1] == 0))
                end--;
        if (parse_hex(&p, end, &m.start) < 0 || expect_char(&p, end, '-') < 0 ||
            parse_hex(&p, end, &m.end) < 0 || expect_char(&p, end, ' ') < 0)
                return -EINVAL;
        if (m.end < m.start || end - p < 5)
                return -EINVAL;
        if (p[0] == 'r')
                m.perms |= PROCFS_MAP_READ;
        if (p[1] == 'w')
                m.perms |= PROCFS_MAP_WRITE;
        if (p[2] == 'x')
                m.perms |= PROCFS_MAP_EXEC;
        if (p[3] == 'p')
                m.perms |= PROCFS_MAP_PRIVATE;
        p += 4;
        if (expect_char(&p, end, ' ') < 0 || parse_hex(&p, end, &m.offset) < 0 ||
            expect_char(&p, end, ' ') < 0 || parse_hex(&p, end, &dev_major) < 0 ||
            expect_char(&p, end, ':') < 0 || parse_hex(&p, end, &dev_minor) < 0 ||
            expect_char(&p, end, ' ') < 0 || parse_dec(&p, end, &m.inode) < 0)
                return -EINVAL;
        if (dev_major > UINT_MAX || dev_minor > UINT_MAX)
                return -EINVAL;
        m.dev_major = (unsigned)dev_major;
        m.dev_minor = (unsigned)dev_minor;
        skip_spaces(&p, end);

        static const char deleted[] = " (deleted)";
        const size_t dlen = sizeof(deleted) - 1;
        if ((size_t)(end - p) > dlen && memcmp(end - dlen, deleted, dlen) == 0) {
                m.deleted = true;
                end -= dlen;
        }
        /* end <= line + len: writing here is covered by the "room for len + 1" contract. */
        line[end - line] = 0;
        m.path = p;
        *out = m;
        return 0;
}

int procfs_maps_foreach(pid_t pid, procfs_maps_fn fn, void *ctx)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return errno_code(errno);
        FILE *f = fdopen(fd, "r");
        if (!f) {
                int e = errno;
                close(fd);
                return -e;
        }
        char *line = malloc(MAPS_LINE_LEN);
        if (!line) {
                fclose(f);
                return -ENOMEM;
        }
        int rc = 0;
        bool skipping = false; /* inside the rest of an over-long line */
        for (unsigned n = 0; n < PROCFS_MAX_MAP_LINES; n++) {
                errno = 0;
                if (!fgets(line, MAPS_LINE_LEN, f)) {
                        if (ferror(f))
                                rc = errno ? errno_code(errno) : -EIO;
                        break;
                }
                size_t len = strlen(line);
                bool complete = len > 0 && line[len - 1] == '\n';
                if (skipping) {
                        skipping = !complete;
                        continue;
                }
                if (!complete && !feof(f)) {
                        skipping = true;
                        continue;
                }
                struct procfs_mapping m;
                if (procfs_parse_maps_line(line, len, &m) < 0)
                        continue;
                rc = fn(ctx, &m);
                if (rc != 0)
                        break;
        }
        free(line);
        fclose(f);
        return rc;
}

static int cmp_pid(const void *a, const void *b)
{
        pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
        return (x > y) - (x < y);
}

int procfs_list_tids(pid_t pid, pid_t **tids)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
        DIR *d = opendir(path);
        if (!d)
                return errno_code(errno);
        size_t n = 0, cap = 16;
        pid_t *v = malloc(cap * sizeof(*v));
        if (!v) {
                closedir(d);
                return -ENOMEM;
        }
        struct dirent *de;
        while (n < PROCFS_MAX_THREADS && (de = readdir(d)) != NULL) {
                const char *s = de->d_name, *e = s + strlen(s);
                uint64_t tid;
                if (parse_dec(&s, e, &tid) < 0 || s != e || tid == 0 || tid > INT_MAX)
                        continue;
                if (n == cap) {
                        pid_t *nv = realloc(v, 2 * cap * sizeof(*v));
                        if (!nv) {
                                free(v);
                                closedir(d);
                                return -ENOMEM;
                        }
                        v = nv;
                        cap *= 2;
                }
                v[n++] = (pid_t)tid;
        }
        closedir(d);
        qsort(v, n, sizeof(*v), cmp_pid);
        *tids = v;
        return (int)n;
}

int procfs_thread_open(pid_t pid, pid_t tid)
{
        char path[80];
        snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        return fd < 0 ? errno_code(errno) : fd;
}

int procfs_parse_stat_state(const char *buf, size_t len)
{
        const char *close_paren = NULL;
        for (size_t i = len; i > 0; i--) {
                if (buf[i - 1] == ')') {
                        close_paren = buf + i - 1;
                        break;
                }
        }
        if (!close_paren)
                return -EINVAL;
        const char *p = close_paren + 1, *end = buf + len;
        if (p + 2 > end || p[0] != ' ')
                return -EINVAL;
        char c = p[1];
        if (c < 'A' || c > 'z' || (c > 'Z' && c < 'a'))
                return -EINVAL;
        return c;
}

int procfs_parse_stat_threads(const char *buf, size_t len)
{
        const char *p = NULL, *end = buf + len;
        for (size_t i = len; i > 0 && !p; i--)
                if (buf[i - 1] == ')')
                        p = buf + i;
        if (!p)
                return -EINVAL;
        /* Fields 3 (the state) to 19 follow the ')', each after one space. */
        for (int field = 3; field <= 19; field++) {
                if (p == end || *p != ' ')
                        return -EINVAL;
                p++;
                while (p < end && *p != ' ')
                        p++;
        }
        if (p == end || *p != ' ')
                return -EINVAL;
        p++;
        uint64_t n;
        const char *e = p;
        while (e < end && *e != ' ' && *e != '\n')
                e++;
        if (parse_dec(&p, e, &n) < 0 || p != e || n == 0 || n > INT_MAX)
                return -EINVAL;
        return (int)n;
}

int procfs_thread_stat(int fd, int *num_threads)
{
        char buf[STAT_READ_LEN];
        ssize_t r;
        *num_threads = -1;
        do
                r = pread(fd, buf, sizeof(buf), 0);
        while (r < 0 && errno == EINTR);
        if (r < 0)
                return errno_code(errno);
        if (r == 0)
                return -ESRCH;
        int state = procfs_parse_stat_state(buf, (size_t)r);
        int n = procfs_parse_stat_threads(buf, (size_t)r);
        *num_threads = n > 0 ? n : -1;
        return state;
}

int procfs_thread_state(int fd)
{
        int n;
        return procfs_thread_stat(fd, &n);
}

int procfs_thread_running(int fd)
{
        int s = procfs_thread_state(fd);
        if (s < 0)
                return s;
        return s == 'R';
}

int procfs_parse_syscall(const char *buf, size_t len)
{
        char text[32];
        size_t n = len < sizeof(text) - 1 ? len : sizeof(text) - 1;
        memcpy(text, buf, n);
        text[n] = '\0';
        if (strncmp(text, "running", 7) == 0)
                return 0;
        char *end;
        long nr = strtol(text, &end, 10);
        if (end == text || (*end != ' ' && *end != '\n' && *end != '\0'))
                return -EINVAL;
        return nr >= 0;
}

int procfs_thread_in_syscall(pid_t pid, pid_t tid)
{
        char path[64], buf[128];
        snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", (int)pid, (int)tid);
        ssize_t n = read_small_file(path, buf, sizeof(buf));
        return n < 0 ? (int)n : procfs_parse_syscall(buf, (size_t)n);
}

pid_t procfs_parse_nspid(const char *buf, size_t len)
{
        static const char key[] = "NSpid:";
        const size_t klen = sizeof(key) - 1;
        const char *end = buf + len, *p = buf;
        /* Find the key at the start of a line. */
        for (;;) {
                if ((size_t)(end - p) >= klen && memcmp(p, key, klen) == 0)
                        break;
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                if (!nl)
                        return -ENOENT;
                p = nl + 1;
        }
        p += klen;
        uint64_t last = 0;
        int count = 0;
        /* At most 33 levels of PID namespaces exist; the loop is bounded by len anyway. */
        while (p < end && *p != '\n') {
                skip_spaces(&p, end);
                if (p >= end || *p == '\n')
                        break;
                uint64_t v;
                if (parse_dec(&p, end, &v) < 0 || v == 0 || v > INT_MAX)
                        return -EINVAL;
                last = v;
                count++;
        }
        if (count == 0)
                return -EINVAL;
        return (pid_t)last;
}

static pid_t nspid_of(pid_t pid, pid_t tid)
{
        char path[80], *buf = malloc(STATUS_READ_LEN);
        if (!buf)
                return -ENOMEM;
        if (tid > 0)
                snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, (int)tid);
        else
                snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        ssize_t n = read_small_file(path, buf, STATUS_READ_LEN);
        pid_t r = n < 0 ? (pid_t)n : procfs_parse_nspid(buf, (size_t)n);
        free(buf);
        return r;
}

pid_t procfs_ns_tid(pid_t pid, pid_t tid)
{
        pid_t inner = nspid_of(pid, tid);
        return inner == -ENOENT ? tid : inner;
}

bool procfs_same_pidns(pid_t pid)
{
        pid_t inner = nspid_of(pid, 0);
        return inner == -ENOENT || inner == pid; /* as procfs_host_tid() tells */
}

pid_t procfs_host_tid(pid_t pid, pid_t ns_tid)
{
        if (ns_tid <= 0)
                return -EINVAL;
        pid_t inner = nspid_of(pid, 0);
        if (inner == -ENOENT || inner == pid) {
                /* Same PID namespace as ours (or a kernel without NSpid): ids are host ids. */
                char path[80];
                struct stat st;
                snprintf(path, sizeof(path), "/proc/%d/task/%d", (int)pid, (int)ns_tid);
                if (stat(path, &st) == 0)
                        return ns_tid;
                return errno == ENOENT ? -ENOENT : -errno;
        }
        if (inner < 0)
                return inner;
        pid_t *tids = NULL;
        int n = procfs_list_tids(pid, &tids);
        if (n < 0)
                return n;
        pid_t found = -ENOENT;
        for (int i = 0; i < n; i++) {
                if (nspid_of(pid, tids[i]) == ns_tid) {
                        found = tids[i];
                        break;
                }
        }
        free(tids);
        return found;
}

int procfs_cmdline(pid_t pid, char *buf, size_t len)
{
        if (len == 0)
                return -EINVAL;
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
        ssize_t n = read_small_file(path, buf, len);
        if (n < 0)
                return (int)n;
        while (n > 0 && buf[n - 1] == 0)
                n--;
        if (n == 0) {
                buf[0] = 0;
                return -ENOENT;
        }
        for (ssize_t i = 0; i < n; i++)
                if (buf[i] == 0)
                        buf[i] = ' ';
        buf[n] = 0;
        return 0;
}

/* The comm file at `path` into buf, without its newline. */
static int read_comm(const char *path, char *buf, size_t len)
{
        if (len == 0)
                return -EINVAL;
        ssize_t n = read_small_file(path, buf, len);
        if (n < 0)
                return (int)n;
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == 0))
                n--;
        buf[n] = 0;
        return 0;
}

int procfs_comm(pid_t pid, char *buf, size_t len)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
        return read_comm(path, buf, len);
}

int procfs_thread_comm(pid_t pid, pid_t tid, char *buf, size_t len)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", (int)pid, (int)tid);
        return read_comm(path, buf, len);
}

/* The line of `buf` that starts with `key`, from just after the key; NULL when none. */
static const char *status_line(const char *buf, size_t len, const char *key, const char **line_end)
{
        const size_t klen = strlen(key);
        const char *end = buf + len, *p = buf;
        while (p < end) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                const char *stop = nl ? nl : end;
                if ((size_t)(stop - p) >= klen && memcmp(p, key, klen) == 0) {
                        *line_end = stop;
                        return p + klen;
                }
                p = stop + 1;
        }
        return NULL;
}

/* The numbers of [p, end) into v[cap]; returns how many there were, or -EINVAL. */
static int parse_id_list(const char *p, const char *end, uint32_t *v, unsigned cap)
{
        int n = 0;
        for (;;) {
                skip_spaces(&p, end);
                if (p >= end)
                        return n;
                uint64_t x;
                if (parse_dec(&p, end, &x) < 0 || x > UINT32_MAX)
                        return -EINVAL;
                if ((unsigned)n < cap)
                        v[n] = (uint32_t)x;
                if (n < INT_MAX)
                        n++;
        }
}

int procfs_parse_creds(const char *buf, size_t len, struct procfs_creds *out)
{
        const char *end, *p;
        uint32_t ids[4];
        struct procfs_creds c;
        if (!(p = status_line(buf, len, "Uid:", &end)) || parse_id_list(p, end, ids, 4) != 4)
                return -EINVAL;
        c.fsuid = ids[3];
        if (!(p = status_line(buf, len, "Gid:", &end)) || parse_id_list(p, end, ids, 4) != 4)
                return -EINVAL;
        c.fsgid = ids[3];
        int n;
        if (!(p = status_line(buf, len, "Groups:", &end)))
                return -EINVAL;
        /* A line cut by the end of what was read may end in part of a number: not a group. */
        bool cut = end == buf + len;
        if (cut)
                while (end > p && end[-1] >= '0' && end[-1] <= '9')
                        end--;
        if ((n = parse_id_list(p, end, c.groups, PROCFS_MAX_GROUPS)) < 0)
                return -EINVAL;
        c.n_groups = (unsigned)n < PROCFS_MAX_GROUPS ? (unsigned)n : PROCFS_MAX_GROUPS;
        *out = c;
        return 0;
}

int procfs_creds(pid_t pid, struct procfs_creds *out)
{
        char path[64], *buf = malloc(STATUS_READ_LEN);
        if (!buf)
                return -ENOMEM;
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        ssize_t n = read_small_file(path, buf, STATUS_READ_LEN);
        int rc = n < 0 ? (int)n : procfs_parse_creds(buf, (size_t)n, out);
        free(buf);
        return rc;
}
