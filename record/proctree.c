/*
 * proctree.c - descendants of a set of processes from /proc/PID/stat parent
 * links. See proctree.h.
 */
#include "proctree.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

pid_t proctree_parse_ppid(const char *buf, size_t len)
{
        const char *close = NULL;
        for (size_t i = 0; i < len; i++)
                if (buf[i] == ')')
                        close = buf + i;
        if (!close)
                return -EINVAL;
        const char *p = close + 1, *end = buf + len;
        /* ") S 1234 ..." */
        while (p < end && *p == ' ')
                p++;
        if (p >= end)
                return -EINVAL;
        p++; /* state letter */
        while (p < end && *p == ' ')
                p++;
        long v = 0;
        const char *digits = p;
        while (p < end && isdigit((unsigned char)*p) && v < 1L << 31)
                v = v * 10 + (*p++ - '0');
        if (p == digits || v >= 1L << 31)
                return -EINVAL;
        return (pid_t)v;
}

pid_t proctree_parent(pid_t pid)
{
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        ssize_t len = read(fd, buf, sizeof(buf));
        int e = errno;
        close(fd);
        if (len < 0)
                return -e;
        return proctree_parse_ppid(buf, (size_t)len);
}

struct link {
        pid_t pid, ppid;
};

static int read_links(struct link **out, size_t *n_out)
{
        DIR *d = opendir("/proc");
        if (!d)
                return -errno;
        struct link *links = NULL;
        size_t n = 0, cap = 0;
        struct dirent *de;
        while ((de = readdir(d)) && n < PROCTREE_MAX) {
                if (!isdigit((unsigned char)de->d_name[0]))
                        continue;
                char path[300], buf[512];
                snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        continue; /* exited meanwhile */
                ssize_t len = read(fd, buf, sizeof(buf));
                close(fd);
                if (len <= 0)
                        continue;
                pid_t ppid = proctree_parse_ppid(buf, (size_t)len);
                if (ppid < 0)
                        continue;
                if (n == cap) {
                        cap = cap ? cap * 2 : 256;
                        struct link *p = realloc(links, cap * sizeof(*p));
                        if (!p) {
                                free(links);
                                closedir(d);
                                return -ENOMEM;
                        }
                        links = p;
                }
                links[n++] = (struct link){(pid_t)atoi(de->d_name), ppid};
        }
        closedir(d);
        *out = links;
        *n_out = n;
        return 0;
}

static bool contains(const pid_t *set, size_t n, pid_t pid)
{
        for (size_t i = 0; i < n; i++)
                if (set[i] == pid)
                        return true;
        return false;
}

int proctree_descendants(const pid_t *roots, size_t n_roots, pid_t **out)
{
        struct link *links;
        size_t n_links;
        int rc = read_links(&links, &n_links);
        if (rc < 0)
                return rc;
        /* known = roots + found so far; grow generation by generation. */
        pid_t *known = malloc((n_roots + n_links + 1) * sizeof(*known));
        if (!known) {
                free(links);
                return -ENOMEM;
        }
        memcpy(known, roots, n_roots * sizeof(*known));
        size_t n_known = n_roots;
        bool grew = true;
        /* Each pass adds at least one generation; bounded by the link count. */
        for (size_t pass = 0; grew && pass <= n_links; pass++) {
                grew = false;
                for (size_t i = 0; i < n_links; i++) {
                        if (contains(known, n_known, links[i].pid))
                                continue;
                        if (contains(known, n_known, links[i].ppid)) {
                                known[n_known++] = links[i].pid;
                                grew = true;
                        }
                }
        }
        free(links);
        size_t n = n_known - n_roots;
        memmove(known, known + n_roots, n * sizeof(*known));
        *out = known;
        return (int)n;
}
