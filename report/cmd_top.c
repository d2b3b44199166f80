/*
 * cmd_top.c - `pyflame-report top`: replay a trace in the live view (top.h),
 * or keep up with one that a recorder is still writing (--follow). The
 * options are the view's starting state; everything can be changed from
 * the keyboard. Without a terminal it prints text snapshots.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report.h"
#include "top.h"

static atomic_int top_stop;

static void on_stop_signal(int sig)
{
        (void)sig;
        atomic_store(&top_stop, 1);
}

static void top_help(void)
{
        printf("Usage: " REPORT_PROG " top [OPTIONS] TRACE|DIR|'GLOB'\n"
               "Show a trace in the live view, like `top`: the functions (or lines, or files)\n"
               "with their own and total share of the samples over a time window, with a time\n"
               "cursor to replay the recording. A directory or a quoted glob is the files of\n"
               "one rotating recording, read as one. Press ? in the view for its keys.\n\n"
               "  -f, --follow         keep up with a trace pyflame-record is still writing (a\n"
               "                       directory is listed again at each refresh: new files\n"
               "                       of a rotation are followed into)\n"
               "      --window W       1s, 10s, 60s or all (default: all; following: 10s)\n"
               "      --at TIME        start with the cursor at TIME (e.g. 12.5s, 50%%)\n"
               "      --by KEY         function (default), line or file\n"
               "      --sort COL       own (default), total, own-time, total-time or name\n"
               "      --interval SECS  refresh period; without a terminal, one snapshot per\n"
               "                       period while following (default 1)\n"
               "      --rows N         rows per snapshot without a terminal (default 20)\n"
               "      --plain          print snapshots even on a terminal\n"
               "      --pid PID[,PID]  only these processes\n"
               "      --thread T[,T]   only these threads (name, OS or Python thread id)\n"
               "      --idle           also count samples of threads that were not on CPU\n"
               "      --gil            count only samples holding the GIL\n"
               "      --no-native      leave out native frames (the n key cycles: shown,\n"
               "                       hidden, one per module)\n"
               "      --native-modules native code as one frame per module\n"
               "      --async          the asyncio tasks' samples (pyflame-record --async)\n"
               "  -h, --help           this help\n\n"
               "Without a terminal (stdout a pipe or a log, or stdin not a terminal), a replay\n"
               "prints one snapshot of the window at the cursor; --follow prints one per\n"
               "interval until the recording ends.\n");
}

static int parse_enum(const char *arg, const char *const *names, int n)
{
        for (int i = 0; i < n; i++)
                if (!strcmp(arg, names[i]))
                        return i;
        return -1;
}

int cmd_top(int argc, char **argv)
{
        enum {
                OPT_WINDOW = SELECT_OPT_END,
                OPT_AT,
                OPT_BY,
                OPT_SORT,
                OPT_INTERVAL,
                OPT_ROWS,
                OPT_PLAIN
        };
        static const struct option longopts[] = {
            {"follow", no_argument, NULL, 'f'},
            {"window", required_argument, NULL, OPT_WINDOW},
            {"at", required_argument, NULL, OPT_AT},
            {"by", required_argument, NULL, OPT_BY},
            {"sort", required_argument, NULL, OPT_SORT},
            {"interval", required_argument, NULL, OPT_INTERVAL},
            {"rows", required_argument, NULL, OPT_ROWS},
            {"plain", no_argument, NULL, OPT_PLAIN},
            {"help", no_argument, NULL, 'h'},
            SELECT_LONG_OPTIONS,
            {NULL, 0, NULL, 0},
        };
        static const char *const keys[] = {"function", "line", "file"};
        static const char *const sorts[] = {"own", "total", "own-time", "total-time", "name"};
        struct select_opts sel = {0};
        struct top_ui_opts o = {
            .title = REPORT_PROG " top",
            .at_ns = -1,
            .window_ns = -1,
            .interval_ns = 1000000000LL,
            .stop = &top_stop,
        };
        const char *at = NULL;
        int c, rc = REPORT_EXIT_OK;
        optind = 1;
        opterr = 0;
        while ((c = getopt_long(argc, argv, ":fh", longopts, NULL)) != -1) {
                int taken = select_opts_parse(&sel, c, optarg);
                if (taken == 1)
                        continue;
                if (taken) {
                        rc = taken;
                        goto out;
                }
                int64_t ns;
                bool percent;
                switch (c) {
                case 'f':
                        o.follow = true;
                        break;
                case 'h':
                        top_help();
                        rc = fflush(stdout) == 0 ? REPORT_EXIT_OK : REPORT_EXIT_FAIL;
                        goto out;
                case OPT_WINDOW:
                        if (!strcmp(optarg, "all"))
                                o.window_ns = 0;
                        else if (pf_parse_duration(optarg, &ns, &percent) == 0 && !percent &&
                                 (ns == 1000000000LL || ns == 10000000000LL || ns == 60000000000LL))
                                o.window_ns = ns;
                        else {
                                rc = report_usage(
                                    "top", "--window: '%s' is not 1s, 10s, 60s or all", optarg);
                                goto out;
                        }
                        break;
                case OPT_AT:
                        at = optarg;
                        break;
                case OPT_BY:
                        if ((c = parse_enum(optarg, keys, TOP_KEY_COUNT)) < 0) {
                                rc = report_usage("top", "--by: '%s' is not function, line or file",
                                                  optarg);
                                goto out;
                        }
                        o.key = (enum top_key)c;
                        break;
                case OPT_SORT:
                        if ((c = parse_enum(optarg, sorts, TOP_SORT_COUNT)) < 0) {
                                rc = report_usage("top",
                                                  "--sort: '%s' is not own, total, own-time, "
                                                  "total-time or name",
                                                  optarg);
                                goto out;
                        }
                        o.sort = (enum top_sort)c;
                        break;
                case OPT_INTERVAL:
                        if (pf_parse_duration(optarg, &ns, &percent) < 0 || percent ||
                            ns < 10000000LL) {
                                rc = report_usage("top", "--interval takes a duration of at "
                                                         "least 0.01 s, e.g. 2 or 500ms");
                                goto out;
                        }
                        o.interval_ns = ns;
                        break;
                case OPT_ROWS: {
                        char *end;
                        long n = strtol(optarg, &end, 10);
                        if (end == optarg || *end || n < 1 || n > 100000) {
                                rc = report_usage("top", "--rows takes a number from 1");
                                goto out;
                        }
                        o.max_rows = (unsigned)n;
                        break;
                }
                case OPT_PLAIN:
                        o.plain = true;
                        break;
                default:
                        rc = report_bad_option("top", c, argv);
                        goto out;
                }
        }
        if (optind != argc - 1) {
                rc = report_usage("top", optind >= argc ? "no trace file given"
                                                        : "give exactly one trace file, "
                                                          "directory or quoted glob");
                goto out;
        }
        if ((rc = select_opts_check(&sel, "top")) != 0)
                goto out;
        o.path = argv[optind];
        if (!o.follow) {
                /* A finished trace: say now what is wrong with it or with --pid, --thread. */
                struct trace_reader *r;
                struct select check;
                if ((rc = report_open_inputs((char *const *)&o.path, 1, NULL, &r)) != 0)
                        goto out;
                rc = select_resolve(r, o.path, &sel, &check);
                if (rc == 0)
                        select_free(&check);
                trace_reader_close(r);
                if (rc != 0)
                        goto out;
        }
        if (o.window_ns < 0)
                o.window_ns = o.follow ? 10000000000LL : 0;
        if (at) {
                int64_t ns;
                bool percent;
                if (pf_parse_duration(at, &ns, &percent) < 0) {
                        rc = report_usage("top", "--at takes a time such as 12.5s or 50%%");
                        goto out;
                }
                if (percent) {
                        /* A share of the recording: its length is known once it is open. */
                        struct trace_reader *r;
                        if ((rc = report_open_inputs((char *const *)&o.path, 1, NULL, &r)) != 0)
                                goto out;
                        ns = (int64_t)((double)top_end_ns(r) * (double)ns / 1e9);
                        trace_reader_close(r);
                }
                o.at_ns = ns;
        }
        o.pids = sel.pids;
        o.threads = sel.threads;
        o.idle = sel.idle;
        o.gil = sel.gil;
        o.native = sel.native;
        o.async = sel.async;
        /* The screen needs the keyboard too: without it (< /dev/null), snapshots. */
        if (!isatty(STDOUT_FILENO) || !isatty(STDIN_FILENO))
                o.plain = true;
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_stop_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        rc = top_ui_run(&o);
out:
        select_opts_free(&sel);
        return rc;
}
