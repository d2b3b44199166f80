/*
 * main.c - pyflame-report's entry point: the table of commands, the
 * top-level --help and --version, and the messages every command prints the
 * same way (one line, "pyflame-report: <file>: <problem>", exit status 2).
 *
 * The first argument picks a command from the table; anything else (an
 * option or a trace file) goes to the default command, `report`, so that
 * `pyflame-report run.db` prints folded stacks. A trace file that happens to
 * be called like a command is reached as ./info.
 *
 * The same file is also the entry point of pyflame-diff: built with
 * REPORT_MAIN_COMMAND="diff", the program is that one command of the table
 * under its own name, and its messages say so.
 */
#include "report.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "pyflame-config.h"

#ifdef REPORT_MAIN_COMMAND
const char report_prog[] = "pyflame-" REPORT_MAIN_COMMAND;
#else
const char report_prog[] = REPORT_PROG;
#endif

static const struct report_command commands[] = {
    {"report", cmd_report, "print folded stacks, a hotspot table or time slices (the default)"},
    {"info", cmd_info, "summarise a recording: duration, rate, threads, errors"},
    {"diff", cmd_diff, "compare two recordings (or two windows of one); a CI gate"},
    {"merge", cmd_merge, "merge several traces into one, keeping each sample's origin"},
    {"annotate", cmd_annotate, "print a source file with each line's share of the samples"},
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

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
#ifdef REPORT_MAIN_COMMAND
        if (cmd && !strcmp(cmd, REPORT_MAIN_COMMAND))
                return report_fail(NULL, "%s (see '%s --help')", msg, report_prog);
#endif
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

static void main_help(void)
{
        printf("Usage: " REPORT_PROG " [COMMAND] [OPTIONS] TRACE\n"
               "Read a trace written by pyflame-record.\n\nCommands:\n");
        for (size_t i = 0; i < N_COMMANDS; i++)
                printf("  %-8s %s\n", commands[i].name, commands[i].summary);
        printf("\nWithout a command, `report` runs. '" REPORT_PROG
               " COMMAND --help' describes a command.\n\n");
        cmd_report_help();
}

int main(int argc, char **argv)
{
#ifdef REPORT_MAIN_COMMAND
        if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))) {
                printf("%s %s\n", report_prog, PYFLAME_VERSION);
                return fflush(stdout) == 0 ? REPORT_EXIT_OK : REPORT_EXIT_FAIL;
        }
        for (size_t i = 0; i < N_COMMANDS; i++)
                if (!strcmp(commands[i].name, REPORT_MAIN_COMMAND))
                        return commands[i].run(argc, argv);
        return report_fail(NULL, "internal error: no command " REPORT_MAIN_COMMAND);
#endif
        if (argc < 2)
                return report_usage(NULL, "no trace file given");
        const char *first = argv[1];
        if (!strcmp(first, "--version") || !strcmp(first, "-V")) {
                printf(REPORT_PROG " %s\n", PYFLAME_VERSION);
                return fflush(stdout) == 0 ? REPORT_EXIT_OK : REPORT_EXIT_FAIL;
        }
        if (!strcmp(first, "--help") || !strcmp(first, "-h")) {
                main_help();
                return fflush(stdout) == 0 ? REPORT_EXIT_OK : REPORT_EXIT_FAIL;
        }
        for (size_t i = 0; i < N_COMMANDS; i++)
                if (!strcmp(first, commands[i].name))
                        return commands[i].run(argc - 1, argv + 1);
        /* The default command sees the arguments as given, argv[0] included. */
        return cmd_report(argc, argv);
}
