/*
 * procmatch.c - processes to record by command line, as they come
 * (procmatch.h).
 *
 * Each scan lists /proc, keeps the processes that match as (pid, start
 * time) pairs sorted by pid, and tells those not in the previous scan's
 * list; the new list replaces the old, so the memory is that of the
 * matching processes alive, however long the recorder runs. A process
 * that does not match is looked at again in the next scan (its command
 * line may change: a fork of a launcher that execs the service); for
 * --all, where the look reads /proc/PID/maps, non-matching processes are
 * remembered too so that each is read once.
 */
#include "procmatch.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procfs.h"
#include "proctree.h"

struct seen {
        pid_t pid;
        uint64_t start; /* clock ticks after boot */
        bool matches;
};

struct procmatch {
        bool all;
        regex_t re;
        pid_t *exclude;
        size_t n_exclude;
        struct seen *prev;
        size_t n_prev;
};

int procmatch_new(const char *regex, const pid_t *exclude, size_t n_exclude, struct procmatch **out,
                  char *err, size_t errlen)
{
        struct procmatch *m = calloc(1, sizeof(*m));
        if (!m || (n_exclude && !(m->exclude = malloc(n_exclude * sizeof(*exclude))))) {
                free(m);
                snprintf(err, errlen, "out of memory");
                return -1;
        }
        if (n_exclude)
                memcpy(m->exclude, exclude, n_exclude * sizeof(*exclude));
        m->n_exclude = n_exclude;
        m->all = !regex;
        if (regex) {
                int rc = regcomp(&m->re, regex, REG_EXTENDED | REG_NOSUB);
                if (rc != 0) {
                        char msg[256];
                        regerror(rc, &m->re, msg, sizeof(msg));
                        snprintf(err, errlen, "invalid --match expression '%s': %s", regex, msg);
                        free(m->exclude);
                        free(m);
                        return -1;
                }
        }
        *out = m;
        return 0;
}

int procmatch_matches(const struct procmatch *m, const char *cmdline)
{
        return m->all || regexec(&m->re, cmdline, 0, NULL, 0) == 0;
}

/* The start time of `pid` (field 22 of its stat), or 0 when gone. */
static uint64_t start_time(pid_t pid)
{
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return 0;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return 0;
        buf[n] = 0;
        /* The name may hold spaces and parentheses: fields count from the last ')'. */
        char *p = strrchr(buf, ')');
        if (!p)
                return 0;
        p++;
        for (int field = 2; field < 21 && p; field++)
                p = strchr(p + 1, ' ');
        return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* --all: does the process map a file whose name holds "python"? */
static bool maps_python(pid_t pid)
{
        char path[64], buf[65536];
        snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        bool found = false;
        size_t keep = 0;
        for (int reads = 0; !found && reads < 64; reads++) {
                ssize_t n = read(fd, buf + keep, sizeof(buf) - 1 - keep);
                if (n <= 0)
                        break;
                buf[keep + (size_t)n] = 0;
                found = strstr(buf, "python") != NULL;
                /* A name cut between two reads: keep the tail. */
                size_t len = keep + (size_t)n;
                keep = len > 16 ? 16 : len;
                memmove(buf, buf + len - keep, keep);
        }
        close(fd);
        return found;
}

static const struct seen *find_seen(const struct seen *list, size_t n, pid_t pid)
{
        size_t lo = 0, hi = n;
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (list[mid].pid < pid)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo < n && list[lo].pid == pid ? &list[lo] : NULL;
}

static int cmp_seen(const void *a, const void *b)
{
        pid_t x = ((const struct seen *)a)->pid, y = ((const struct seen *)b)->pid;
        return (x > y) - (x < y);
}

static bool excluded(const struct procmatch *m, pid_t pid)
{
        for (size_t i = 0; i < m->n_exclude; i++)
                if (m->exclude[i] == pid)
                        return true;
        return false;
}

int procmatch_scan(struct procmatch *m, pid_t **out)
{
        DIR *dir = opendir("/proc");
        if (!dir)
                return -errno;
        struct seen *cur = NULL;
        size_t n_cur = 0, cap_cur = 0;
        pid_t *fresh = NULL;
        size_t n_fresh = 0, cap_fresh = 0;
        int rc = 0;
        char cmdline[4096];
        struct dirent *de;
        while ((de = readdir(dir)) && n_cur < PROCTREE_MAX) {
                if (!isdigit((unsigned char)de->d_name[0]))
                        continue;
                pid_t pid = (pid_t)strtol(de->d_name, NULL, 10);
                if (pid <= 0 || excluded(m, pid))
                        continue;
                uint64_t start = start_time(pid);
                if (!start)
                        continue; /* gone */
                const struct seen *before = find_seen(m->prev, m->n_prev, pid);
                bool known = before && before->start == start;
                bool matches;
                if (known && (before->matches || m->all)) {
                        matches = before->matches;
                } else if (m->all) {
                        matches = maps_python(pid);
                } else {
                        matches = procfs_cmdline(pid, cmdline, sizeof(cmdline)) == 0 &&
                                  procmatch_matches(m, cmdline);
                }
                if (!matches && !m->all)
                        continue; /* looked at again next time */
                if (n_cur == cap_cur) {
                        size_t cap = cap_cur ? 2 * cap_cur : 64;
                        struct seen *p = realloc(cur, cap * sizeof(*p));
                        if (!p) {
                                rc = -ENOMEM;
                                break;
                        }
                        cur = p;
                        cap_cur = cap;
                }
                cur[n_cur++] = (struct seen){pid, start, matches};
                if (!matches || (known && before->matches))
                        continue;
                if (n_fresh == cap_fresh) {
                        size_t cap = cap_fresh ? 2 * cap_fresh : 16;
                        pid_t *p = realloc(fresh, cap * sizeof(*p));
                        if (!p) {
                                rc = -ENOMEM;
                                break;
                        }
                        fresh = p;
                        cap_fresh = cap;
                }
                fresh[n_fresh++] = pid;
        }
        closedir(dir);
        if (rc < 0) {
                free(cur);
                free(fresh);
                return rc;
        }
        if (n_cur)
                qsort(cur, n_cur, sizeof(*cur), cmp_seen);
        free(m->prev);
        m->prev = cur;
        m->n_prev = n_cur;
        *out = fresh;
        return (int)n_fresh;
}

void procmatch_free(struct procmatch *m)
{
        if (!m)
                return;
        if (!m->all)
                regfree(&m->re);
        free(m->exclude);
        free(m->prev);
        free(m);
}
