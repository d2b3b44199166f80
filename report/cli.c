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
#include "top.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
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

int report_open_inputs(char *const *inputs, size_t n, const char *output, struct trace_reader **out)
{
        struct report_inputs in = {0};
        char err[1024];
        int rc = 0;
        if (report_inputs_expand(inputs, n, &in, err, sizeof(err)) < 0)
                rc = report_fail(NULL, "%s", err);
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
        report_inputs_free(&in);
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
