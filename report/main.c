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
#include "top.h"

#ifdef REPORT_MAIN_COMMAND
const char report_prog[] = "pyflame-" REPORT_MAIN_COMMAND;
const char *const report_main_command = REPORT_MAIN_COMMAND;
#else
const char report_prog[] = REPORT_PROG;
const char *const report_main_command = NULL;
#endif

static const struct report_command commands[] = {
    {"report", cmd_report, "print folded stacks, a hotspot table or time slices (the default)"},
    {"info", cmd_info, "summarise a recording: duration, rate, threads, errors"},
    {"diff", cmd_diff, "compare two recordings (or two windows of one); a CI gate"},
    {"merge", cmd_merge, "merge several traces into one, keeping each sample's origin"},
    {"join", cmd_join, "join the files of one rotating recording into one trace"},
    {"top", cmd_top, "replay a trace in a live view like top, or follow one being recorded"},
    {"annotate", cmd_annotate, "print a source file with each line's share of the samples"},
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void main_help(void)
{
        printf("Usage: " REPORT_PROG " [COMMAND] [OPTIONS] TRACE...\n"
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
                pf_print_version(stdout, report_prog, TRACE_FORMAT_VERSION);
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
                pf_print_version(stdout, REPORT_PROG, TRACE_FORMAT_VERSION);
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
