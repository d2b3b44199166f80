/*
 * inputs.c - what the user named as one recording, made a list of trace
 * files (report_inputs_expand, top.h): a file as it is, a directory's trace
 * files in name order (hidden files and the flight recorder's snapshots
 * left out), a glob the shell left alone (quoted). Nothing is printed, so
 * the live view can say it on its screen: pyflame-report's commands print
 * the message (report_open_inputs), the live view shows it.
 */
#include "top.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Does the file at `path` start as a pyflame trace does (SQLite, application_id "PYFR")? */
static bool looks_like_trace(const char *path)
{
        unsigned char h[72];
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        ssize_t n = read(fd, h, sizeof(h));
        close(fd);
        return n == (ssize_t)sizeof(h) && !memcmp(h, "SQLite format 3", 16) && h[68] == 'P' &&
               h[69] == 'Y' && h[70] == 'F' && h[71] == 'R';
}

/* The list being gathered, and where a problem is written. */
struct gather {
        struct report_inputs *in;
        size_t cap;
        bool nomem;
        char *err;
        size_t err_size;
};

static int inputs_fail(struct gather *in, const char *subject, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int inputs_fail(struct gather *in, const char *subject, const char *fmt, ...)
{
        char msg[768];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        snprintf(in->err, in->err_size, "%s%s%s", subject ? subject : "", subject ? ": " : "", msg);
        return -1;
}

static void inputs_add(struct gather *g, const char *path)
{
        struct report_inputs *in = g->in;
        if (in->n == g->cap) {
                size_t cap = g->cap ? g->cap * 2 : 16;
                char **p = realloc(in->paths, cap * sizeof(*p));
                if (!p) {
                        g->nomem = true;
                        return;
                }
                in->paths = p;
                g->cap = cap;
        }
        if (!(in->paths[in->n] = strdup(path)))
                g->nomem = true;
        else
                in->n++;
}

void report_inputs_free(struct report_inputs *in)
{
        for (size_t i = 0; in && i < in->n; i++)
                free(in->paths[i]);
        if (in) {
                free(in->paths);
                in->paths = NULL;
                in->n = 0;
        }
}

static int by_name(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The trace files in directory `dir` (others, such as exports or journals, are left out). */
static int add_directory(struct gather *g, const char *dir)
{
        DIR *d = opendir(dir);
        if (!d)
                return inputs_fail(g, dir, "cannot read the directory: %s", strerror(errno));
        size_t before = g->in->n;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
                /* Hidden files, and the flight recorder's snapshots (joins of the others). */
                if (e->d_name[0] == '.' || strstr(e->d_name, "-snapshot-"))
                        continue;
                size_t n = strlen(dir) + strlen(e->d_name) + 2;
                char *p = malloc(n);
                if (!p) {
                        g->nomem = true;
                        break;
                }
                snprintf(p, n, "%s/%s", dir, e->d_name);
                struct stat st;
                if (stat(p, &st) == 0 && S_ISREG(st.st_mode) && looks_like_trace(p))
                        inputs_add(g, p);
                free(p);
        }
        closedir(d);
        if (g->in->n == before && !g->nomem)
                return inputs_fail(g, dir, "is a directory with no pyflame trace file in it");
        qsort(g->in->paths + before, g->in->n - before, sizeof(*g->in->paths), by_name);
        return 0;
}

static int add_input(struct gather *g, const char *arg)
{
        struct stat st;
        if (stat(arg, &st) == 0) {
                if (S_ISDIR(st.st_mode))
                        return add_directory(g, arg);
                inputs_add(g, arg);
                return 0;
        }
        if (!strpbrk(arg, "*?["))
                return inputs_fail(g, arg, "cannot open: %s", strerror(errno));
        /* A glob the shell did not expand (quoted, or matching nothing there). */
        glob_t gl;
        int rc = glob(arg, 0, NULL, &gl);
        if (rc == GLOB_NOMATCH)
                return inputs_fail(g, arg, "matches no file");
        if (rc != 0)
                return inputs_fail(g, arg, "cannot expand the pattern");
        size_t before = g->in->n;
        for (size_t i = 0; i < gl.gl_pathc; i++)
                if (stat(gl.gl_pathv[i], &st) == 0 && S_ISREG(st.st_mode) &&
                    looks_like_trace(gl.gl_pathv[i]))
                        inputs_add(g, gl.gl_pathv[i]);
        globfree(&gl);
        if (g->in->n == before && !g->nomem)
                return inputs_fail(g, arg, "matches no pyflame trace file");
        return 0;
}

int report_inputs_expand(char *const *args, size_t n, struct report_inputs *out, char *err,
                         size_t err_size)
{
        struct gather g = {.in = out, .err = err, .err_size = err_size};
        out->paths = NULL;
        out->n = 0;
        int rc = 0;
        for (size_t i = 0; i < n && rc == 0; i++)
                rc = add_input(&g, args[i]);
        if (rc == 0 && g.nomem)
                rc = inputs_fail(&g, NULL, "out of memory");
        if (rc < 0)
                report_inputs_free(out);
        return rc;
}
