/*
 * cmd_merge.c - `pyflame-report merge A.db B.db ... -o all.db`: one trace
 * from several (hosts of one job, runs of one benchmark), every sample
 * keeping its origin. libtrace does the copying (trace_writer_add_recording);
 * this command opens the sources with the usual messages, decides where
 * each one's time 0 lies (--align start: all at 0; --align wall: by their
 * wall-clock starts, so that recordings made at the same time line up), and
 * writes the result through a temporary file in the output's directory,
 * which takes the output's name only once complete: a failed merge leaves
 * nothing behind, and an existing file is replaced only with --force.
 */
#include "report.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MERGE_CMD "merge"

enum align { ALIGN_START, ALIGN_WALL };

struct merge_opts {
        const char *output;
        bool force;
        enum align align;
        char **inputs;
        size_t n_inputs;
};

static void merge_help(void)
{
        printf("Usage: " REPORT_PROG " merge [OPTIONS] TRACE... -o OUTPUT\n"
               "Merge traces (several hosts, several runs) into one. Every sample keeps its\n"
               "origin: processes get a recording and a source pid, and the recordings\n"
               "table holds each source's file name, host, start time and meta. Pids that\n"
               "collide stay distinct (the later one gets a pid above 4194304). Views then\n"
               "show the merged samples; 'info' lists the recordings.\n"
               "\n"
               "  -o, --output FILE      the merged trace (written whole, or not at all)\n"
               "  -f, --force            replace FILE if it exists\n"
               "      --align HOW        start: every recording starts at time 0 (default,\n"
               "                         for runs made at different times); wall: by\n"
               "                         wall-clock start (for hosts recorded together)\n"
               "  -h, --help             this help\n"
               "\n"
               "Exit status: 0 on success, 2 on a usage error, a trace that cannot be read\n"
               "or an output that cannot be written.\n");
}

static const struct option long_options[] = {
    {"output", required_argument, NULL, 'o'},
    {"force", no_argument, NULL, 'f'},
    {"align", required_argument, NULL, 'a'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* Returns 0, 1 when --help was printed, or REPORT_EXIT_FAIL after a message. */
static int parse_args(int argc, char **argv, struct merge_opts *o)
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
                case 'a':
                        if (!strcmp(optarg, "start"))
                                o->align = ALIGN_START;
                        else if (!strcmp(optarg, "wall"))
                                o->align = ALIGN_WALL;
                        else
                                return report_usage(MERGE_CMD, "--align: '%s' is not start or wall",
                                                    optarg);
                        break;
                case 'h':
                        merge_help();
                        return 1;
                default:
                        return report_bad_option(MERGE_CMD, c, argv);
                }
        }
        if (optind >= argc)
                return report_usage(MERGE_CMD, "no trace to merge given");
        if (!o->output)
                return report_usage(MERGE_CMD, "give the merged trace's name with -o FILE");
        o->inputs = argv + optind;
        o->n_inputs = (size_t)(argc - optind);
        return 0;
}

/* Wall-clock start of a trace (meta start_wall_ns); false when it has none. */
static bool start_wall(struct trace_reader *r, int64_t *ns)
{
        const char *s = trace_reader_meta(r, TRACE_META_START_WALL_NS);
        char *end;
        if (!s || !*s)
                return false;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || *end)
                return false;
        *ns = v;
        return true;
}

/* Merge the open traces into `tmp`. Returns 0 or REPORT_EXIT_FAIL after a message. */
static int write_merged(const struct merge_opts *o, struct trace_reader **r, const int64_t *offset,
                        const char *tmp)
{
        struct trace_writer *w = NULL;
        int rc = trace_writer_create(tmp, TRACE_CREATE_FORCE, &w);
        for (size_t i = 0; rc == 0 && i < o->n_inputs; i++)
                rc = trace_writer_add_recording(w, r[i], o->inputs[i], offset[i]);
        if (rc == 0)
                rc = trace_writer_finalize(w);
        if (rc < 0) {
                report_fail(o->output, "cannot merge: %s",
                            w ? trace_writer_errmsg(w) : trace_status_str(rc));
                trace_writer_free(w);
                return REPORT_EXIT_FAIL;
        }
        trace_writer_free(w);
        return 0;
}

static int run(const struct merge_opts *o, struct trace_reader **r, int64_t *offset)
{
        int rc = out_trace_check(o->output, o->force, o->inputs, o->n_inputs);
        if (rc != 0)
                return rc;
        for (size_t i = 0; i < o->n_inputs; i++)
                if ((rc = report_open(o->inputs[i], &r[i])) != 0)
                        return rc;
        if (o->align == ALIGN_WALL) {
                int64_t first = INT64_MAX;
                for (size_t i = 0; i < o->n_inputs; i++) {
                        if (!start_wall(r[i], &offset[i]))
                                return report_fail(o->inputs[i],
                                                   "has no start time (meta start_wall_ns), so "
                                                   "it cannot be aligned by wall clock; use "
                                                   "--align start");
                        if (offset[i] < first)
                                first = offset[i];
                }
                for (size_t i = 0; i < o->n_inputs; i++)
                        offset[i] -= first;
        }
        char *tmp;
        if ((rc = out_trace_temp(o->output, "merged trace", &tmp)) != 0)
                return rc;
        rc = write_merged(o, r, offset, tmp);
        return out_trace_publish(o->output, o->force, tmp, "merged trace", rc == 0);
}

int cmd_merge(int argc, char **argv)
{
        struct merge_opts o = {0};
        int rc = parse_args(argc, argv, &o);
        if (rc)
                return rc == 1 ? REPORT_EXIT_OK : rc;
        struct trace_reader **r = calloc(o.n_inputs, sizeof(*r));
        int64_t *offset = calloc(o.n_inputs, sizeof(*offset));
        if (!r || !offset)
                rc = report_fail(NULL, "out of memory");
        else
                rc = run(&o, r, offset);
        for (size_t i = 0; r && i < o.n_inputs; i++)
                trace_reader_close(r[i]);
        free(r);
        free(offset);
        return rc;
}
