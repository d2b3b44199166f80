/*
 * cmd_join.c - `pyflame-report join FILE... -o all.db`: the files of one
 * rotating recording (pyflame-record --rotate, --ring, SIGUSR2) back into
 * one trace, one recording on one time line as if it had never been cut.
 * libtrace does the copying (trace_join_segments) and refuses files that
 * do not follow each other; this command puts the files in their order
 * (meta segment), so a glob in any order does, and writes through a
 * temporary file that takes the output's name only once complete, as
 * merge does.
 */
#include "report.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JOIN_CMD "join"

struct join_opts {
        const char *output;
        bool force;
        char **inputs;
        size_t n_inputs;
};

static void join_help(void)
{
        printf("Usage: " REPORT_PROG " join [OPTIONS] TRACE... -o OUTPUT\n"
               "Join the files of one rotating recording (pyflame-record's rotation by time,\n"
               "size or SIGUSR2, its ring) into one trace: one recording on one time line, as\n"
               "if it had never been cut. The files may come in any order; they must be "
               "consecutive files\n"
               "of one recording (a missing one is a gap, refused). For traces of different\n"
               "recordings, use merge.\n"
               "\n"
               "  -o, --output FILE      the joined trace (written whole, or not at all)\n"
               "  -f, --force            replace FILE if it exists\n"
               "  -h, --help             this help\n"
               "\n"
               "Exit status: 0 on success, 2 on a usage error, a trace that cannot be read,\n"
               "files that do not follow each other or an output that cannot be written.\n");
}

static const struct option long_options[] = {
    {"output", required_argument, NULL, 'o'},
    {"force", no_argument, NULL, 'f'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* Returns 0, 1 when --help was printed, or REPORT_EXIT_FAIL after a message. */
static int parse_args(int argc, char **argv, struct join_opts *o)
{
        opterr = 0;
        optind = 1;
        for (;;) {
                int c = getopt_long(argc, argv, ":ho:f", long_options, NULL);
                if (c == -1)
                        break;
                switch (c) {
                case 'o':
                        o->output = optarg;
                        break;
                case 'f':
                        o->force = true;
                        break;
                case 'h':
                        join_help();
                        return 1;
                default:
                        return report_bad_option(JOIN_CMD, c, argv);
                }
        }
        if (optind >= argc)
                return report_usage(JOIN_CMD, "no trace to join given");
        if (!o->output)
                return report_usage(JOIN_CMD, "give the joined trace's name with -o FILE");
        o->inputs = argv + optind;
        o->n_inputs = (size_t)(argc - optind);
        return 0;
}

struct input {
        const char *path;
        long long segment;
};

static int by_segment(const void *a, const void *b)
{
        long long x = ((const struct input *)a)->segment, y = ((const struct input *)b)->segment;
        return (x > y) - (x < y);
}

/* Each file's place in its rotation (meta segment; 1 when absent). */
static int order_inputs(const struct join_opts *o, struct input *in)
{
        for (size_t i = 0; i < o->n_inputs; i++) {
                struct trace_reader *r = NULL;
                int rc = report_open(o->inputs[i], &r);
                if (rc != 0)
                        return rc;
                const char *seg = trace_reader_meta(r, TRACE_META_SEGMENT);
                if (!trace_reader_meta(r, TRACE_META_SEGMENT_SET)) {
                        trace_reader_close(r);
                        return report_fail(o->inputs[i],
                                           "is not a file of a rotating recording (no meta "
                                           "segment_set); use merge");
                }
                in[i] = (struct input){o->inputs[i], seg ? strtoll(seg, NULL, 10) : 1};
                trace_reader_close(r);
        }
        qsort(in, o->n_inputs, sizeof(*in), by_segment);
        return 0;
}

static int run(const struct join_opts *o, struct input *in)
{
        char *tmp;
        int rc = out_trace_check(o->output, o->force, o->inputs, o->n_inputs);
        if (rc == 0)
                rc = order_inputs(o, in);
        if (rc == 0)
                rc = out_trace_temp(o->output, "joined trace", &tmp);
        if (rc != 0)
                return rc;
        const char **paths = malloc(o->n_inputs * sizeof(*paths));
        struct trace_writer *w = NULL;
        if (!paths)
                rc = report_fail(NULL, "out of memory");
        for (size_t i = 0; paths && i < o->n_inputs; i++)
                paths[i] = in[i].path;
        if (paths &&
            (rc = trace_join_segments(tmp, TRACE_CREATE_FORCE, paths, o->n_inputs, &w)) < 0)
                rc = report_fail(o->output, "cannot join: %s",
                                 w ? trace_writer_errmsg(w) : trace_status_str(rc));
        trace_writer_free(w);
        free(paths);
        return out_trace_publish(o->output, o->force, tmp, "joined trace", rc == 0);
}

int cmd_join(int argc, char **argv)
{
        struct join_opts o = {0};
        int rc = parse_args(argc, argv, &o);
        if (rc)
                return rc == 1 ? REPORT_EXIT_OK : rc;
        struct input *in = calloc(o.n_inputs, sizeof(*in));
        if (!in)
                return report_fail(NULL, "out of memory");
        rc = run(&o, in);
        free(in);
        return rc;
}
