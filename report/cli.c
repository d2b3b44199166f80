/*
 * cli.c - the command-line front end every command shares: the messages
 * they print the same way (one line, "pyflame-report: <file>: <problem>",
 * exit status 2; a usage error ends with the --help to read; an option
 * refused as the user wrote it), opening a trace with a message that says
 * what is wrong, and the check that -o does not name the trace being read.
 * Several files, a directory or a glob are opened as one recording
 * (report_open_inputs): the files of one rotation, read in time order.
 * The program's name and its single command (pyflame-diff is the diff
 * command alone) come from main.c.
 */
#include "report.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <glob.h>
#include <stdlib.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Print `msg` with newlines and other control characters made spaces: one line. */
static void put_one_line(const char *msg)
{
        for (const char *p = msg; *p; p++)
                fputc((unsigned char)*p < 0x20 ? ' ' : *p, stderr);
}

__attribute__((format(printf, 2, 0))) static int vfail(const char *subject, const char *fmt,
                                                       va_list ap)
{
        char msg[1024];
        vsnprintf(msg, sizeof(msg), fmt, ap);
        fputs(report_prog, stderr);
        fputs(": ", stderr);
        if (subject) {
                put_one_line(subject);
                fputs(": ", stderr);
        }
        put_one_line(msg);
        fputc('\n', stderr);
        return REPORT_EXIT_FAIL;
}

int report_fail(const char *subject, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vfail(subject, fmt, ap);
        va_end(ap);
        return REPORT_EXIT_FAIL;
}

int report_usage(const char *cmd, const char *fmt, ...)
{
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (cmd && report_main_command && !strcmp(cmd, report_main_command))
                return report_fail(NULL, "%s (see '%s --help')", msg, report_prog);
        if (cmd)
                return report_fail(NULL, "%s (see '" REPORT_PROG " %s --help')", msg, cmd);
        return report_fail(NULL, "%s (see '" REPORT_PROG " --help')", msg);
}

/* What to tell the user for each way a trace can fail, when libtrace says nothing more. */
static const char *status_problem(int status)
{
        switch (status) {
        case TRACE_ERR_NOMEM:
                return "out of memory while reading the trace";
        case TRACE_ERR_IO:
                return "cannot read the file";
        case TRACE_ERR_NOT_SQLITE:
                return "not a pyflame trace (not a SQLite database at all)";
        case TRACE_ERR_NOT_TRACE:
                return "a SQLite database but not a pyflame trace (record one with pyflame-record)";
        case TRACE_ERR_TOO_NEW:
                return "written by a newer pyflame than this one; read it with that version's "
                       "pyflame-report";
        case TRACE_ERR_CORRUPT:
                return "the trace is damaged or truncated; nothing was reported";
        default:
                return trace_status_str(status);
        }
}

/*
 * libtrace's message names the problem precisely (and often the fix), so it
 * is preferred; it may start with the path, which our prefix already gives.
 */
static int fail_status(const char *path, const struct trace_reader *r, int status)
{
        const char *detail = r ? trace_reader_errmsg(r) : NULL;
        if (!detail || !*detail)
                return report_fail(path, "%s", status_problem(status));
        size_t n = strlen(path);
        if (!strncmp(detail, path, n) && !strncmp(detail + n, ": ", 2))
                detail += n + 2;
        return report_fail(path, "%s", detail);
}

int report_open(const char *path, struct trace_reader **out)
{
        /* Say plainly what is wrong with the path before the library looks inside. */
        struct stat st;
        if (stat(path, &st) < 0)
                return report_fail(path, "cannot open: %s", strerror(errno));
        if (S_ISDIR(st.st_mode))
                return report_fail(path, "is a directory, not a trace file");
        if (!S_ISREG(st.st_mode))
                return report_fail(path, "not a regular file, so not a trace file");

        struct trace_reader *r = NULL;
        int rc = trace_reader_open(path, &r);
        if (rc < 0) {
                fail_status(path, r, rc);
                trace_reader_close(r);
                return REPORT_EXIT_FAIL;
        }
        *out = r;
        return 0;
}

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

/* The list of files being gathered; a failed allocation is remembered. */
struct inputs {
        char **paths;
        size_t n, cap;
        bool nomem;
};

static void inputs_add(struct inputs *in, const char *path)
{
        if (in->n == in->cap) {
                size_t cap = in->cap ? in->cap * 2 : 16;
                char **p = realloc(in->paths, cap * sizeof(*p));
                if (!p) {
                        in->nomem = true;
                        return;
                }
                in->paths = p;
                in->cap = cap;
        }
        if (!(in->paths[in->n] = strdup(path)))
                in->nomem = true;
        else
                in->n++;
}

static void inputs_free(struct inputs *in)
{
        for (size_t i = 0; i < in->n; i++)
                free(in->paths[i]);
        free(in->paths);
}

static int by_name(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The trace files in directory `dir` (others, such as exports or journals, are left out). */
static int add_directory(struct inputs *in, const char *dir)
{
        DIR *d = opendir(dir);
        if (!d)
                return report_fail(dir, "cannot read the directory: %s", strerror(errno));
        size_t before = in->n;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
                /* Hidden files, and the flight recorder's snapshots (joins of the others). */
                if (e->d_name[0] == '.' || strstr(e->d_name, "-snapshot-"))
                        continue;
                size_t n = strlen(dir) + strlen(e->d_name) + 2;
                char *p = malloc(n);
                if (!p) {
                        in->nomem = true;
                        break;
                }
                snprintf(p, n, "%s/%s", dir, e->d_name);
                struct stat st;
                if (stat(p, &st) == 0 && S_ISREG(st.st_mode) && looks_like_trace(p))
                        inputs_add(in, p);
                free(p);
        }
        closedir(d);
        if (in->n == before && !in->nomem)
                return report_fail(dir, "is a directory with no pyflame trace file in it");
        qsort(in->paths + before, in->n - before, sizeof(*in->paths), by_name);
        return 0;
}

static int add_input(struct inputs *in, const char *arg)
{
        struct stat st;
        if (stat(arg, &st) == 0) {
                if (S_ISDIR(st.st_mode))
                        return add_directory(in, arg);
                inputs_add(in, arg);
                return 0;
        }
        if (!strpbrk(arg, "*?["))
                return report_fail(arg, "cannot open: %s", strerror(errno));
        /* A glob the shell did not expand (quoted, or matching nothing there). */
        glob_t g;
        int rc = glob(arg, 0, NULL, &g);
        if (rc == GLOB_NOMATCH)
                return report_fail(arg, "matches no file");
        if (rc != 0)
                return report_fail(arg, "cannot expand the pattern");
        size_t before = in->n;
        for (size_t i = 0; i < g.gl_pathc; i++)
                if (stat(g.gl_pathv[i], &st) == 0 && S_ISREG(st.st_mode) &&
                    looks_like_trace(g.gl_pathv[i]))
                        inputs_add(in, g.gl_pathv[i]);
        globfree(&g);
        if (in->n == before && !in->nomem)
                return report_fail(arg, "matches no pyflame trace file");
        return 0;
}

int report_open_inputs(char *const *inputs, size_t n, const char *output, struct trace_reader **out)
{
        struct inputs in = {0};
        int rc = 0;
        for (size_t i = 0; i < n && rc == 0; i++)
                rc = add_input(&in, inputs[i]);
        if (rc == 0 && in.nomem)
                rc = report_fail(NULL, "out of memory");
        for (size_t i = 0; i < in.n && rc == 0; i++)
                rc = report_check_output(output, in.paths[i]);
        if (rc == 0 && in.n == 1) {
                rc = report_open(in.paths[0], out);
        } else if (rc == 0) {
                struct trace_reader *r = NULL;
                int st = trace_reader_open_set((const char *const *)in.paths, in.n, &r);
                if (st < 0) {
                        /* libtrace's message names the files. */
                        if (r && *trace_reader_errmsg(r))
                                report_fail(NULL, "%s", trace_reader_errmsg(r));
                        else
                                fail_status(inputs[0], r, st);
                        trace_reader_close(r);
                        rc = REPORT_EXIT_FAIL;
                } else {
                        *out = r;
                }
        }
        inputs_free(&in);
        return rc;
}

int report_check_output(const char *output, const char *trace)
{
        struct stat a, b;
        if (output && stat(output, &a) == 0 && stat(trace, &b) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino)
                return report_fail(output, "is the trace being read; give -o another file");
        return 0;
}

int report_read_failed(const char *path, const struct trace_reader *r, int status)
{
        return fail_status(path, r, status);
}

int report_bad_option(const char *cmd, int c, char **argv)
{
        /* An unknown short option is in optopt; anything else was the last argument taken. */
        char buf[8];
        const char *opt = optopt > 0 && optopt < 256
                              ? (snprintf(buf, sizeof(buf), "-%c", optopt), buf)
                          : optind > 0 && argv[optind - 1] ? argv[optind - 1]
                                                           : "?";
        if (c == ':')
                return report_usage(cmd, "%s needs a value", opt);
        return report_usage(cmd, "unknown option '%s'", opt);
}
