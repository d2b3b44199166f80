/*
 * record.c - pyflame-record: sample the Python stacks of running CPython
 * processes into a trace file.
 *
 *   pyflame-record -p PID[,PID...] [-o run.db]     attach to running processes
 *   pyflame-record [-o run.db] -- COMMAND [ARGS]   start a program and record it
 *   pyflame-record --dump -p PID                   print every thread's stack once
 *   pyflame-record --live ...  (or pyflame-top ...)  the same, watched in a live view
 *
 * The main loop takes one sample per period at a uniformly random instant
 * within it (schedule.h): the rate does not drift, and no periodic program
 * can alias with it. A slot that passes without its sample is recorded in
 * the trace as a missed deadline instead of silently lowering the rate. Ctrl-C, SIGTERM,
 * the end of --duration and the exit of the target all end the recording
 * cleanly: the trace is finalized with its end time and counts.
 *
 * The text of the source files of sampled frames is stored too (sources.h),
 * read once a second within a small time budget and at the end, never
 * inside a sampling pass.
 *
 * --live (and pyflame-top, this file built with RECORD_TOP) shows the
 * live view of report/top.h while recording, on a thread of its own that
 * reads the trace back through a read-only reader after each commit: the
 * sampling loop neither waits for it nor hands it anything. Quitting the
 * view is Ctrl-C: the trace is finished the same way. While the screen is
 * up, our own messages are held back and printed when it closes.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <pthread.h>

#include "capture.h"
#include "native.h"
#include "pfutil.h"
#include "procfs.h"
#include "procmatch.h"
#include "pyfind.h"
#include "proctree.h"
#include "pyflame-config.h"
#include "rotation.h"
#include "bpfwalk.h"
#include "sampler.h"
#include "schedule.h"
#include "sources.h"
#include "stopper.h"
#include "top.h"
#include "trace.h"
#include "tsink.h"

/* Exit statuses (documented in the man page and README). */
enum {
        EXIT_OK = 0,
        EXIT_USAGE = 2,
        EXIT_NO_PROCESS = 3,
        EXIT_NOT_PYTHON = 4,
        EXIT_UNSUPPORTED = 5,
        EXIT_PERMISSION = 6,
        EXIT_OUTPUT = 7,
        EXIT_INTERNAL = 8,
        EXIT_EXEC_FAILED = 127,
};

#define MAX_PIDS 1024
/* Closer to a deadline than this, spin instead of sleeping (see record_loop). */
#define SPIN_NS 30000

struct options {
        pid_t pids[MAX_PIDS];
        size_t n_pids;
        const char *output;
        bool force;
        double rate_hz;
        int64_t duration_ns; /* 0: until the targets exit or we are stopped */
        bool blocking;
        bool dump;
        bool quiet;
        bool subprocesses;     /* follow children and grandchildren */
        bool no_source;        /* do not store source files */
        bool no_switch_events; /* thread states from /proc only */
        bool no_bpf;           /* never read a running thread in its own context */
        int bpf;               /* --bpf: sample in the kernel (1), or where it can (2, =auto) */
        bool async_tasks;      /* --async: sample asyncio tasks beside the threads */
        bool native;           /* merge native stacks in (implies blocking) */
        bool native_all;       /* ... keeping the interpreter's call plumbing */
        uint64_t max_source_bytes;
        char **command; /* spawn mode: argv of the program */
        /* Continuous recording (rotation.h). */
        int64_t rotate_ns;     /* --rotate DURATION: a new file this often */
        uint64_t rotate_bytes; /* --rotate SIZE: a new file past this size */
        int64_t ring_ns;       /* --ring: keep only this much, snapshots on demand */
        int64_t keep_ns;       /* --keep */
        uint64_t keep_bytes;   /* --keep-size */
        const char *on_rotate; /* --on-rotate CMD */
        pid_t snapshot_of;     /* --snapshot PID: ask that recorder for a snapshot */
        const char *match;     /* --match REGEX: processes by command line */
        bool all;              /* --all: every Python process */
        bool live;             /* show the live view while recording */
        int64_t interval_ns;   /* --live without a terminal: snapshot period */
};

/* The live view's quit: SIGINT queued to the main thread with this value (live_quit). */
#define LIVE_QUIT_SIGNAL_VALUE 0x7079

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t forward_signal;     /* spawn mode: a signal to pass on */
static volatile sig_atomic_t rotate_requested;   /* SIGUSR2 */
static volatile sig_atomic_t snapshot_requested; /* SIGUSR1 */
static volatile sig_atomic_t snapshot_pid;       /* its sender, when it sent a pipe */
static volatile sig_atomic_t snapshot_fd;        /* that pipe's number in the sender */

#ifdef RECORD_TOP
static const char *prog = "pyflame-top";
#else
static const char *prog = "pyflame-record";
#endif

static void usage(FILE *f)
{
        fprintf(
            f,
            "Usage: %s [OPTIONS] -p PID[,PID...]\n"
            "       %s [OPTIONS] --match REGEX | --all\n"
            "       %s [OPTIONS] -- COMMAND [ARGS...]\n"
            "Sample the Python stacks of a running CPython process into a trace file.\n"
            "\n"
            "  -p, --pid PID[,PID]    attach to running process(es)\n"
            "      --match REGEX      record every Python process whose command line\n"
            "                         matches REGEX (extended), running now or started\n"
            "                         later, each under its own pid; others are skipped\n"
            "      --all              record every Python process of the host, now and later\n"
            "  -o, --output FILE      trace file (default pyflame-PID-YYYYmmdd-HHMMSS.db)\n"
            "  -f, --force            overwrite FILE if it exists\n"
            "  -r, --rate HZ          samples per second (default 100; e.g. 1k, 250hz)\n"
            "  -d, --duration SECS    stop after this long (e.g. 30, 1.5s, 2m)\n"
            "      --blocking         stop the target's threads while sampling (consistent\n"
            "                         stacks, more overhead; needs ptrace permission)\n"
            "      --nonblocking      never stop the target (default)\n"
            "      --native           also record native (C) stacks, merged with the Python\n"
            "                         ones: C extensions, libraries, threads with no Python\n"
            "                         (implies --blocking; with --bpf, copied in the\n"
            "                         sampling interrupt instead, no thread held)\n"
            "      --native-all       --native, keeping the interpreter's own call machinery\n"
            "                         (vectorcall, PyObject_Call, ...) that is hidden by default\n"
            "  -s, --subprocesses     also record child processes (started before or after\n"
            "                         attaching: multiprocessing pools, subprocess, forks)\n"
            "      --no-source        do not store the source files of sampled code\n"
            "      --bpf[=auto]       sample inside the kernel: a timer on each CPU walks\n"
            "                         the stack of the thread it interrupts (no wake-up of\n"
            "                         the recorder per sample, the target never stopped);\n"
            "                         on-CPU time only; =auto falls back to the default\n"
            "                         sampler where the kernel or privileges refuse it\n"
            "      --no-bpf           never read the thread running Python in its own context\n"
            "                         (a BPF program, on an IPI to its CPU); its stack is\n"
            "                         then read from outside while it changes, and the\n"
            "                         shares of fast-changing code can be off\n"
            "      --no-switch-events tell running from idle threads by reading /proc for\n"
            "                         each sample, not from the kernel's context-switch\n"
            "                         records (which cost the target ~0.3-0.4 us a switch)\n"
            "      --max-source-bytes N\n"
            "                         store at most N bytes of source text (default 64M,\n"
            "                         e.g. 16M, 512k); a file over 1M is never stored\n"
            "      --async            also record the asyncio tasks of each thread's running\n"
            "                         event loop: every live task once a sample, in the\n"
            "                         stack of awaits it waits in (CPython 3.7-3.13); see\n"
            "                         them with pyflame-report --async\n"
            "      --live             watch the recording in a live view like top (q stops\n"
            "                         it, as Ctrl-C does; ? lists the keys); without a\n"
            "                         terminal, a text snapshot every --interval\n"
            "      --interval SECS    --live: refresh and snapshot period (default 1)\n"
            "\n"
            "Continuous recording (files named FILE's stem-YYYYmmddTHHMMSSZ.ext, UTC):\n"
            "      --rotate WHEN      go on in a new file every DURATION (10m, 1h) or past\n"
            "                         a SIZE (256M, 1G: K, M, G in capitals or with B);\n"
            "                         may be given twice; SIGUSR2 rotates at any time\n"
            "      --on-rotate CMD    run the shell command CMD with each finished file's\n"
            "                         path as its last argument, one at a time, in order\n"
            "      --keep DURATION    delete finished files of this recording that ended\n"
            "                         longer ago than DURATION (24h)\n"
            "      --keep-size SIZE   delete the oldest finished files of this recording\n"
            "                         while all of them take more than SIZE (2G)\n"
            "      --ring DURATION    flight recorder: keep only about the last DURATION;\n"
            "                         SIGUSR1 or --snapshot writes it out as one trace\n"
            "      --snapshot PID     ask the recorder PID for a snapshot (one trace of\n"
            "                         what its files hold) and print the file's name\n"
            "\n"
            "      --dump             print every thread's stack once and exit\n"
            "  -q, --quiet            no status line or summary\n"
            "  -h, --help             this help\n"
            "  -V, --version          print the version, the trace format's and the\n"
            "                         CPython versions it reads\n"
            "\n"
            "Then read the trace with pyflame-report FILE, or replay it with\n"
            "pyflame-report top FILE.\n",
            prog, prog, prog);
}

static int parse_pids(const char *arg, struct options *o)
{
        char *copy = strdup(arg);
        if (!copy)
                return -1;
        int rc = 0;
        for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
             tok = strtok_r(NULL, ",", &save)) {
                char *end;
                errno = 0;
                long v = strtol(tok, &end, 0);
                if (errno || *end || v <= 0 || v > INT_MAX || o->n_pids >= MAX_PIDS) {
                        rc = -1;
                        break;
                }
                o->pids[o->n_pids++] = (pid_t)v;
        }
        free(copy);
        return o->n_pids ? rc : -1;
}

/*
 * --rotate 10m (a duration) or --rotate 256M (a size). "m" is minutes and
 * "M" mebibytes; any other size suffix (k, g, t, with or without "b"/"ib")
 * is a size, and a bare number is seconds.
 */
static int parse_rotate(const char *arg, struct options *o)
{
        const char *end = arg;
        while (*end && (strchr("0123456789.", *end)))
                end++;
        bool size = *end && (strchr("kKgGtTM", *end) || strchr(end, 'b') || strchr(end, 'B'));
        if (size ? pf_parse_size(arg, &o->rotate_bytes) < 0 || o->rotate_bytes < 65536
                 : pf_parse_duration(arg, &o->rotate_ns, NULL) < 0 || o->rotate_ns < 1000000000) {
                fprintf(stderr,
                        "%s: invalid --rotate '%s' (a duration of a second or more, e.g. 10m, "
                        "1h; or a size of 64K or more, e.g. 256M, 1G)\n",
                        prog, arg);
                return -1;
        }
        return 0;
}

static int parse_args(int argc, char **argv, struct options *o)
{
        enum {
                OPT_BLOCKING = 256,
                OPT_NONBLOCKING,
                OPT_DUMP,
                OPT_ASYNC,
                OPT_NO_SOURCE,
                OPT_MAX_SOURCE,
                OPT_NO_SWITCH_EVENTS,
                OPT_NO_BPF,
                OPT_BPF,
                OPT_NATIVE,
                OPT_NATIVE_ALL,
                OPT_ROTATE,
                OPT_ON_ROTATE,
                OPT_KEEP,
                OPT_KEEP_SIZE,
                OPT_RING,
                OPT_SNAPSHOT,
                OPT_MATCH,
                OPT_ALL,
                OPT_LIVE,
                OPT_INTERVAL
        };
        static const struct option longopts[] = {
            {"pid", required_argument, NULL, 'p'},
            {"output", required_argument, NULL, 'o'},
            {"force", no_argument, NULL, 'f'},
            {"rate", required_argument, NULL, 'r'},
            {"duration", required_argument, NULL, 'd'},
            {"blocking", no_argument, NULL, OPT_BLOCKING},
            {"native", no_argument, NULL, OPT_NATIVE},
            {"native-all", no_argument, NULL, OPT_NATIVE_ALL},
            {"nonblocking", no_argument, NULL, OPT_NONBLOCKING},
            {"dump", no_argument, NULL, OPT_DUMP},
            {"async", no_argument, NULL, OPT_ASYNC},
            {"subprocesses", no_argument, NULL, 's'},
            {"no-source", no_argument, NULL, OPT_NO_SOURCE},
            {"no-switch-events", no_argument, NULL, OPT_NO_SWITCH_EVENTS},
            {"no-bpf", no_argument, NULL, OPT_NO_BPF},
            {"bpf", optional_argument, NULL, OPT_BPF},
            {"live", no_argument, NULL, OPT_LIVE},
            {"interval", required_argument, NULL, OPT_INTERVAL},
            {"max-source-bytes", required_argument, NULL, OPT_MAX_SOURCE},
            {"rotate", required_argument, NULL, OPT_ROTATE},
            {"on-rotate", required_argument, NULL, OPT_ON_ROTATE},
            {"keep", required_argument, NULL, OPT_KEEP},
            {"keep-size", required_argument, NULL, OPT_KEEP_SIZE},
            {"ring", required_argument, NULL, OPT_RING},
            {"snapshot", required_argument, NULL, OPT_SNAPSHOT},
            {"match", required_argument, NULL, OPT_MATCH},
            {"all", no_argument, NULL, OPT_ALL},
            {"quiet", no_argument, NULL, 'q'},
            {"help", no_argument, NULL, 'h'},
            {"version", no_argument, NULL, 'V'},
            {NULL, 0, NULL, 0},
        };
        o->rate_hz = 100;
        o->max_source_bytes = SOURCES_MAX_TOTAL_DEFAULT;
        int c;
        /* '+': stop at the first non-option, so the command's own flags are left alone. */
        while ((c = getopt_long(argc, argv, "+p:o:fr:d:sqhV", longopts, NULL)) != -1) {
                switch (c) {
                case 'p':
                        if (parse_pids(optarg, o) < 0) {
                                fprintf(stderr, "%s: invalid pid list '%s'\n", prog, optarg);
                                return -1;
                        }
                        break;
                case 'o':
                        o->output = optarg;
                        break;
                case 'f':
                        o->force = true;
                        break;
                case 'r':
                        if (pf_parse_rate(optarg, &o->rate_hz) < 0 || o->rate_hz > 1e6) {
                                fprintf(stderr,
                                        "%s: invalid rate '%s' (a number of Hz up to 1000000, "
                                        "e.g. 100, 1k)\n",
                                        prog, optarg);
                                return -1;
                        }
                        break;
                case 'd':
                        if (pf_parse_duration(optarg, &o->duration_ns, NULL) < 0 ||
                            o->duration_ns <= 0) {
                                fprintf(stderr,
                                        "%s: invalid duration '%s' (e.g. 10, 1.5s, 500ms, 2m)\n",
                                        prog, optarg);
                                return -1;
                        }
                        break;
                case OPT_BLOCKING:
                        o->blocking = true;
                        break;
                case OPT_NATIVE_ALL:
                        o->native_all = true;
                        /* fall through */
                case OPT_NATIVE:
                        o->native = true;
                        break;
                case OPT_NONBLOCKING:
                        o->blocking = false;
                        break;
                case OPT_DUMP:
                        o->dump = true;
                        break;
                case OPT_ASYNC:
                        o->async_tasks = true;
                        break;
                case 's':
                        o->subprocesses = true;
                        break;
                case OPT_NO_SOURCE:
                        o->no_source = true;
                        break;
                case OPT_NO_SWITCH_EVENTS:
                        o->no_switch_events = true;
                        break;
                case OPT_NO_BPF:
                        o->no_bpf = true;
                        break;
                case OPT_BPF:
                        if (optarg && strcmp(optarg, "auto") != 0) {
                                fprintf(stderr, "%s: invalid --bpf=%s (--bpf or --bpf=auto)\n",
                                        prog, optarg);
                                return -1;
                        }
                        o->bpf = optarg ? 2 : 1;
                        break;
                case OPT_LIVE:
                        o->live = true;
                        break;
                case OPT_INTERVAL:
                        if (pf_parse_duration(optarg, &o->interval_ns, NULL) < 0 ||
                            o->interval_ns < 10000000) {
                                fprintf(stderr,
                                        "%s: invalid interval '%s' (at least 0.01 s, e.g. 2, "
                                        "500ms)\n",
                                        prog, optarg);
                                return -1;
                        }
                        break;
                case OPT_MAX_SOURCE:
                        if (pf_parse_size(optarg, &o->max_source_bytes) < 0) {
                                fprintf(stderr,
                                        "%s: invalid size '%s' (bytes, e.g. 16M, 512k, 0 to "
                                        "store none)\n",
                                        prog, optarg);
                                return -1;
                        }
                        break;
                case OPT_ROTATE:
                        if (parse_rotate(optarg, o) < 0)
                                return -1;
                        break;
                case OPT_ON_ROTATE:
                        o->on_rotate = optarg;
                        break;
                case OPT_KEEP:
                case OPT_RING:
                        if (pf_parse_duration(optarg, c == OPT_KEEP ? &o->keep_ns : &o->ring_ns,
                                              NULL) < 0 ||
                            (c == OPT_KEEP ? o->keep_ns : o->ring_ns) < 1000000000) {
                                fprintf(stderr,
                                        "%s: invalid duration '%s' for --%s (at least a second: "
                                        "e.g. 10m, 24h)\n",
                                        prog, optarg, c == OPT_KEEP ? "keep" : "ring");
                                return -1;
                        }
                        break;
                case OPT_KEEP_SIZE:
                        if (pf_parse_size(optarg, &o->keep_bytes) < 0 || !o->keep_bytes) {
                                fprintf(stderr, "%s: invalid size '%s' (e.g. 2G, 500M)\n", prog,
                                        optarg);
                                return -1;
                        }
                        break;
                case OPT_MATCH:
                        o->match = optarg;
                        break;
                case OPT_ALL:
                        o->all = true;
                        break;
                case OPT_SNAPSHOT: {
                        char *end;
                        errno = 0;
                        long v = strtol(optarg, &end, 10);
                        if (errno || *end || v <= 0 || v > INT_MAX) {
                                fprintf(stderr, "%s: invalid pid '%s'\n", prog, optarg);
                                return -1;
                        }
                        o->snapshot_of = (pid_t)v;
                        break;
                }
                case 'q':
                        o->quiet = true;
                        break;
                case 'h':
                        usage(stdout);
                        exit(EXIT_OK);
                case 'V':
                        pf_print_version(stdout, prog, TRACE_FORMAT_VERSION);
                        exit(EXIT_OK);
                default:
                        fprintf(stderr, "Try '%s --help'.\n", prog);
                        return -1;
                }
        }
        if (optind < argc)
                o->command = &argv[optind];
        if (o->snapshot_of)
                return 0;
        if ((o->command != NULL) + (o->n_pids > 0) + (o->match || o->all) != 1 ||
            (o->match && o->all)) {
                fprintf(stderr,
                        "%s: give one of -p PID, --match REGEX, --all or -- COMMAND\n"
                        "Try '%s --help'.\n",
                        prog, prog);
                return -1;
        }
        if (o->bpf) {
                const char *clash = o->blocking      ? "--blocking"
                                    : o->async_tasks ? "--async"
                                    : o->no_bpf      ? "--no-bpf"
                                    : o->dump        ? "--dump"
                                                     : NULL;
                if (clash) {
                        fprintf(stderr,
                                "%s: --bpf samples inside the kernel and cannot be combined "
                                "with %s yet; drop one of them\n",
                                prog, clash);
                        return -1;
                }
        }
        if (o->native && !o->bpf)
                o->blocking = true; /* the registers and stack need the thread held */
        if ((o->match || o->all) && o->dump) {
                fprintf(stderr, "%s: --dump needs -p PID\n", prog);
                return -1;
        }
        if (o->ring_ns) {
                /* Files of a tenth of the span, kept for the span: about the last span on disk. */
                if (!o->rotate_ns)
                        o->rotate_ns = o->ring_ns / 10 > 1000000000 ? o->ring_ns / 10 : 1000000000;
                if (!o->keep_ns)
                        o->keep_ns = o->ring_ns;
        }
        if (o->dump && o->live) {
                fprintf(stderr, "%s: --dump prints stacks once; it has no live view\n", prog);
                return -1;
        }
        if (o->dump && o->command) {
                fprintf(stderr, "%s: --dump needs -p PID\n", prog);
                return -1;
        }
        return 0;
}

static int exit_for_pyfind(int rc)
{
        switch (rc) {
        case PYFIND_NO_PROCESS:
                return EXIT_NO_PROCESS;
        case PYFIND_PERMISSION:
                return EXIT_PERMISSION;
        case PYFIND_NOT_PYTHON:
        case PYFIND_NOT_READY:
                return EXIT_NOT_PYTHON;
        case PYFIND_UNSUPPORTED:
                return EXIT_UNSUPPORTED;
        default:
                return EXIT_INTERNAL;
        }
}

static void on_signal(int sig, siginfo_t *si, void *uc)
{
        (void)uc;
        /*
         * Spawn mode. SIGINT is a group signal by nature (Ctrl-C signals the
         * whole foreground process group, and so does `kill -INT -PGID`), so
         * the program has it already: passing it on would deliver it twice.
         * SIGTERM and SIGHUP sent to us by a process (a supervisor, timeout)
         * are passed on; a terminal's hangup (SI_KERNEL) reached it directly.
         */
        if (sig == SIGINT && si && si->si_code == SI_QUEUE &&
            si->si_value.sival_int == LIVE_QUIT_SIGNAL_VALUE)
                forward_signal = SIGINT; /* q in the live view: Ctrl-C, which the program missed */
        else if (sig == SIGINT || (si && si->si_code == SI_KERNEL))
                forward_signal = 0;
        else
                forward_signal = sig;
        stop_requested = sig;
}

/*
 * SIGUSR1: a snapshot. pyflame-record --snapshot sends it with sigqueue(),
 * its value the number of a pipe of the sender's on which it waits for the
 * snapshot's name (rotation.c writes it there).
 */
static void on_snapshot(int sig, siginfo_t *si, void *uc)
{
        (void)sig;
        (void)uc;
        bool queued = si && si->si_code == SI_QUEUE && si->si_value.sival_int >= 0;
        snapshot_pid = queued ? si->si_pid : 0;
        snapshot_fd = queued ? si->si_value.sival_int : -1;
        snapshot_requested = 1;
}

static void on_rotate_signal(int sig)
{
        (void)sig;
        rotate_requested = 1;
}

static void install_signals(void)
{
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = on_signal;
        sa.sa_flags = SA_SIGINFO; /* no SA_RESTART: the sleep must wake up */
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        sa.sa_sigaction = on_snapshot;
        sigaction(SIGUSR1, &sa, NULL);
        sa.sa_flags = 0;
        sa.sa_handler = on_rotate_signal;
        sigaction(SIGUSR2, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
}

/* pyflame-PID-STAMP.db; for --match and --all (pid 0) pyflame-STAMP.db. */
static void default_output(char *buf, size_t len, pid_t pid)
{
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char stamp[32];
        strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
        if (pid)
                snprintf(buf, len, "pyflame-%d-%s.db", (int)pid, stamp);
        else
                snprintf(buf, len, "pyflame-%s.db", stamp);
}

/* ---- spawn mode ------------------------------------------------------- */

/*
 * Start the program. The child execs at once; a close-on-exec pipe tells us
 * whether exec worked (EOF) or failed (errno written to it).
 */
static pid_t spawn(char **argv, int *exec_errno)
{
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) < 0)
                return -1;
        pid_t pid = fork();
        if (pid < 0) {
                close(fds[0]);
                close(fds[1]);
                return -1;
        }
        if (pid == 0) {
                close(fds[0]);
                signal(SIGPIPE, SIG_DFL);
                execvp(argv[0], argv);
                int e = errno;
                if (write(fds[1], &e, sizeof(e)) < 0)
                        _exit(EXIT_EXEC_FAILED);
                _exit(EXIT_EXEC_FAILED);
        }
        close(fds[1]);
        int e = 0;
        ssize_t r;
        do
                r = read(fds[0], &e, sizeof(e));
        while (r < 0 && errno == EINTR);
        close(fds[0]);
        *exec_errno = r == sizeof(e) ? e : 0;
        return pid;
}

static int wait_status_to_exit(int status)
{
        if (WIFEXITED(status))
                return WEXITSTATUS(status);
        if (WIFSIGNALED(status))
                return 128 + WTERMSIG(status);
        return EXIT_INTERNAL;
}

/* ---- the recording ---------------------------------------------------- */

struct recording {
        struct options *o;
        struct trace_writer *w;
        struct tsink *k;         /* w behind its committing thread (tsink.h) */
        struct sources *sources; /* NULL with --no-source */
        struct sampler *samplers[MAX_PIDS];
        size_t n_samplers;
        bool ticked[MAX_PIDS];     /* pass(): read in this pass */
        char output_buf[PATH_MAX]; /* the default output's name */
        bool created;              /* the trace file exists, made by us */
        pid_t child;               /* spawn mode */
        bool child_reaped;
        int child_status;
        uint64_t late;
        bool tty;
        int64_t loop_cpu_ns;         /* the recorder's own CPU time while sampling */
        int64_t sampling_ns;         /* time inside sampling passes: the work, not the waits */
        struct sampler_stats closed; /* the counts of samplers already closed */
        struct capture *capture;     /* in-context reads (capture.h), NULL when off */
        struct bpfwalk *bpf;         /* --bpf: the in-kernel sampler, NULL when off */
        char bpf_off[600];           /* --bpf=auto: why it fell back */
        uint64_t bpf_late;           /* its late slots already counted in the trace */
        char capture_off[600];       /* why it is off */
        char priority[64];           /* the sampling thread's scheduling (sampling_priority) */
        /* Continuous recording (rotation.h); rot is NULL before the trace exists. */
        struct rotation *rot;
        int64_t segment_start;  /* the current file's start (monotonic) */
        char current[PATH_MAX]; /* the sampling thread's copy of the current file's name */
        /* --rotate SIZE: the committing thread's size check asks the sampling thread. */
        atomic_int size_rotation; /* 0 idle, 1 wanted, 2 queued */
        /*
         * --match, --all: a thread of ours scans /proc once a second and
         * leaves the new matching pids here for the sampling thread.
         */
        struct procmatch *matcher;
        pthread_t scanner;
        bool scanner_started, scanner_stop; /* stop: under match_lock */
        pthread_mutex_t match_lock;
        pthread_cond_t match_wake;
        pid_t *match_pending;
        size_t n_match_pending;
        struct live { /* --live: the view's thread (live_start) */
                pthread_t thread, main_thread;
                bool started;
                atomic_int stop;
                int saved_stderr; /* while the screen is up, -1 otherwise */
                FILE *held;       /* our messages meanwhile */
                struct rotation *rot;
                struct top_ui_opts opts;
        } live;
        /* --subprocesses (and --match): processes that are not (yet) Python. */
        struct candidate {
                pid_t pid;
                int64_t first_ns;
                bool gave_up;
        } * candidates;
        size_t n_candidates, cap_candidates;
};

static int64_t self_cpu_ns(void)
{
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
               ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

static void status_line(struct recording *r, int64_t elapsed_ns, bool final)
{
        uint64_t samples = 0, errors = 0;
        for (size_t i = 0; i < r->n_samplers; i++) {
                struct sampler_stats st;
                sampler_get_stats(r->samplers[i], &st);
                samples += st.samples;
                errors += st.torn + st.read_errors;
        }
        double secs = elapsed_ns / 1e9;
        double rate = 0;
        if (secs > 0 && r->n_samplers) {
                struct sampler_stats st;
                sampler_get_stats(r->samplers[0], &st);
                rate = st.ticks / secs;
        }
        fprintf(stderr, "\r\033[K%s: %.1fs, %llu samples, %.1f Hz, %llu errors, %llu late%s", prog,
                secs, (unsigned long long)samples, rate, (unsigned long long)errors,
                (unsigned long long)r->late, final ? "\n" : "");
}

static void stats_add(struct sampler_stats *sum, const struct sampler_stats *st)
{
        sum->ticks += st->ticks;
        sum->samples += st->samples;
        sum->torn += st->torn;
        sum->retries += st->retries;
        sum->recovered += st->recovered;
        sum->captured += st->captured;
        sum->captures += st->captures;
        sum->capture_idle += st->capture_idle;
        sum->capture_failed += st->capture_failed;
        sum->read_errors += st->read_errors;
        sum->reads += st->reads;
        sum->proc_state_reads += st->proc_state_reads;
        sum->held_over += st->held_over;
        sum->native_samples += st->native_samples;
        sum->unmatched += st->unmatched;
        sum->native_captures += st->native_captures;
        sum->native_capture_ns += st->native_capture_ns;
        sum->native_unwinds += st->native_unwinds;
        sum->native_unwind_ns += st->native_unwind_ns;
        sum->native_warm_unwinds += st->native_warm_unwinds;
        sum->native_warm_unwind_ns += st->native_warm_unwind_ns;
        sum->native_cfi_rules += st->native_cfi_rules;
        sum->native_cfi_fallbacks += st->native_cfi_fallbacks;
        sum->native_capture_bytes += st->native_capture_bytes;
        sum->native_frames += st->native_frames;
        sum->native_symbols += st->native_symbols;
        sum->native_sym_resets += st->native_sym_resets;
}

/* A sampler opened: give it what the recording shares with every sampler. */
/*
 * sampler_open(), then native stacks when asked for. Returns 0 or a
 * negative enum pyfind_status (message in err); nothing is left open on
 * failure.
 */
static int open_one(const struct options *o, pid_t pid, struct sampler **out, char *err,
                    size_t errlen)
{
        struct sampler *s;
        int rc = sampler_open(pid, o->blocking, &s, err, errlen);
        if (rc < 0 || !o->native) {
                if (rc == 0)
                        *out = s;
                return rc;
        }
        rc = sampler_set_native(s, o->native_all ? NATIVE_MERGE_KEEP_PLUMBING : 0, err, errlen);
        if (rc < 0) {
                sampler_close(s);
                return rc == -ESRCH ? PYFIND_NO_PROCESS : PYFIND_UNSUPPORTED;
        }
        *out = s;
        return 0;
}

static void setup_sampler(struct recording *r, struct sampler *s)
{
        if (r->bpf)
                sampler_set_bpf(s, r->bpf);
        if (r->o->no_switch_events)
                sampler_no_switch_events(s);
        sampler_set_capture(s, r->capture);
        char err[256];
        /* A version whose tasks we cannot read is still sampled: threads only. */
        if (r->o->async_tasks && sampler_set_async(s, err, sizeof(err)) < 0)
                fprintf(stderr, "%s: process %d: %s\n", prog, (int)sampler_pid(s), err);
}

static void remove_sampler(struct recording *r, size_t i, int64_t t_ns)
{
        struct sampler *s = r->samplers[i];
        int status = -1;
        if (r->child && sampler_pid(s) == r->child && r->child_reaped)
                status = wait_status_to_exit(r->child_status);
        tsink_lock(r->k);
        trace_writer_end_process(r->w, sampler_pid(s), status, t_ns);
        sources_unwatch(r->sources, sampler_pid(s));
        tsink_unlock(r->k);
        sampler_end_streams(s);
        if (r->bpf)
                bpfwalk_del_proc(r->bpf, sampler_pid(s));
        struct sampler_stats st;
        sampler_get_stats(s, &st);
        stats_add(&r->closed, &st);
        sampler_close(s);
        r->samplers[i] = r->samplers[--r->n_samplers];
}

static void reap_child(struct recording *r)
{
        if (!r->child || r->child_reaped)
                return;
        /*
         * With --blocking we trace its threads while we hold them, and wait()
         * then tells of their stops too: only an exit ends the program. A
         * stop seen here is a held thread's that exec'd and took the pid
         * (stopper_release_stray lets it go). Taken for the program's end,
         * it made a recording of a program that execs another interpreter
         * exit 8, "internal error" (3 of 25 runs of test_faults' stress).
         */
        int status;
        while (waitpid(r->child, &status, WNOHANG) == r->child) {
                if (WIFEXITED(status) || WIFSIGNALED(status)) {
                        r->child_reaped = true;
                        r->child_status = status;
                        return;
                }
                if (WIFSTOPPED(status))
                        stopper_release_stray(r->child, status);
        }
}

/* Store the source files of what `s` samples, when sources are stored. */
static void watch_sources(struct recording *r, struct sampler *s)
{
        if (!r->sources)
                return;
        tsink_lock(r->k);
        int handle = sources_watch(r->sources, sampler_pid(s));
        tsink_unlock(r->k);
        if (handle >= 0)
                sampler_set_sources(s, r->sources, handle);
}

static bool is_sampled(const struct recording *r, pid_t pid)
{
        for (size_t i = 0; i < r->n_samplers; i++)
                if (sampler_pid(r->samplers[i]) == pid)
                        return true;
        return false;
}

static struct candidate *candidate_get(struct recording *r, pid_t pid, int64_t now)
{
        for (size_t i = 0; i < r->n_candidates; i++)
                if (r->candidates[i].pid == pid)
                        return &r->candidates[i];
        if (r->n_candidates == r->cap_candidates) {
                size_t cap = r->cap_candidates ? r->cap_candidates * 2 : 16;
                struct candidate *c = realloc(r->candidates, cap * sizeof(*c));
                if (!c)
                        return NULL;
                r->candidates = c;
                r->cap_candidates = cap;
        }
        r->candidates[r->n_candidates] = (struct candidate){pid, now, false};
        return &r->candidates[r->n_candidates++];
}

/* Forget the candidates whose process is gone, so that the list stays small. */
static void forget_gone_candidates(struct recording *r)
{
        size_t kept = 0;
        for (size_t i = 0; i < r->n_candidates; i++)
                if (kill(r->candidates[i].pid, 0) == 0 || errno == EPERM)
                        r->candidates[kept++] = r->candidates[i];
        r->n_candidates = kept;
}

/*
 * --subprocesses: start sampling Python descendants of the processes given
 * on the command line. A new child may not be Python yet (fork, then exec):
 * it is retried for two seconds before being left alone; its own children
 * are still followed, since the tree is walked through every process.
 */
static void follow_children(struct recording *r, int64_t now)
{
        pid_t *kids;
        int n;
        if (r->matcher) {
                /* --match, --all: the roots are the processes found so far. */
                pid_t roots[MAX_PIDS];
                for (size_t i = 0; i < r->n_samplers; i++)
                        roots[i] = sampler_pid(r->samplers[i]);
                n = proctree_descendants(roots, r->n_samplers, &kids);
        } else {
                n = proctree_descendants(r->o->pids, r->o->n_pids, &kids);
        }
        if (n < 0)
                return;
        /*
         * Forget candidates that are gone, so the list stays small (with
         * --match, the scan's candidates too, which are no descendants).
         */
        size_t kept = 0;
        for (size_t i = 0; i < r->n_candidates && !r->matcher; i++) {
                bool alive = false;
                for (int k = 0; k < n && !alive; k++)
                        alive = kids[k] == r->candidates[i].pid;
                if (alive)
                        r->candidates[kept++] = r->candidates[i];
        }
        if (r->matcher)
                forget_gone_candidates(r);
        else
                r->n_candidates = kept;
        for (int k = 0; k < n && r->n_samplers < MAX_PIDS; k++) {
                if (is_sampled(r, kids[k]))
                        continue;
                struct candidate *c = candidate_get(r, kids[k], now);
                if (!c || c->gave_up)
                        continue;
                char err[512];
                struct sampler *s;
                int rc = open_one(r->o, kids[k], &s, err, sizeof(err));
                if (rc == 0)
                        setup_sampler(r, s);
                if (rc == 0 && sampler_set_sink(s, r->k, err, sizeof(err)) < 0) {
                        sampler_close(s);
                        c->gave_up = true;
                        continue;
                }
                if (rc == 0) {
                        watch_sources(r, s);
                        r->samplers[r->n_samplers++] = s;
                        c->gave_up = true; /* sampled now; never retried */
                } else if (rc != PYFIND_NOT_READY && rc != PYFIND_NOT_PYTHON) {
                        c->gave_up = true;
                        if (!r->o->quiet)
                                fprintf(stderr, "%s%s: child %d: %s\n", r->tty ? "\n" : "", prog,
                                        (int)kids[k], err);
                } else if (now - c->first_ns > 2000000000LL) {
                        c->gave_up = true;
                }
        }
        free(kids);
}

/* --match, --all: scan /proc once a second, off the sampling thread. */
static void *scan_processes(void *arg)
{
        struct recording *r = arg;
        pthread_mutex_lock(&r->match_lock);
        while (!r->scanner_stop) {
                pthread_mutex_unlock(&r->match_lock);
                pid_t *fresh = NULL;
                int n = procmatch_scan(r->matcher, &fresh);
                pthread_mutex_lock(&r->match_lock);
                if (n > 0) {
                        pid_t *p = realloc(r->match_pending,
                                           (r->n_match_pending + (size_t)n) * sizeof(*p));
                        if (p) {
                                memcpy(p + r->n_match_pending, fresh, (size_t)n * sizeof(*p));
                                r->match_pending = p;
                                r->n_match_pending += (size_t)n;
                        }
                }
                free(fresh);
                int64_t until = pf_now_mono_ns() + 1000000000;
                struct timespec ts = {until / 1000000000, until % 1000000000};
                while (!r->scanner_stop &&
                       pthread_cond_timedwait(&r->match_wake, &r->match_lock, &ts) != ETIMEDOUT)
                        ;
        }
        pthread_mutex_unlock(&r->match_lock);
        return NULL;
}

static int start_scanner(struct recording *r)
{
        char err[512];
        pid_t self = getpid();
        if (procmatch_new(r->o->all ? NULL : r->o->match, &self, 1, &r->matcher, err, sizeof(err)) <
            0) {
                fprintf(stderr, "%s: %s\n", prog, err);
                return EXIT_USAGE;
        }
        pthread_mutex_init(&r->match_lock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&r->match_wake, &ca);
        pthread_condattr_destroy(&ca);
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = pthread_create(&r->scanner, NULL, scan_processes, r);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) {
                fprintf(stderr, "%s: cannot start the /proc scan: %s\n", prog, strerror(rc));
                return EXIT_INTERNAL;
        }
        r->scanner_started = true;
        return EXIT_OK;
}

static void stop_scanner(struct recording *r)
{
        if (r->scanner_started) {
                pthread_mutex_lock(&r->match_lock);
                r->scanner_stop = true;
                pthread_cond_signal(&r->match_wake);
                pthread_mutex_unlock(&r->match_lock);
                pthread_join(r->scanner, NULL);
                r->scanner_started = false;
                pthread_mutex_destroy(&r->match_lock);
                pthread_cond_destroy(&r->match_wake);
        }
        procmatch_free(r->matcher);
        r->matcher = NULL;
        free(r->match_pending);
        r->match_pending = NULL;
}

/*
 * --match, --all: start sampling the processes the scan found. As with
 * --subprocesses, a process that is not Python yet (just forked, its
 * interpreter still starting) is retried for two seconds; one that is not
 * Python or cannot be read is skipped with one line, and the recording
 * goes on.
 */
static void follow_matches(struct recording *r, int64_t now)
{
        pthread_mutex_lock(&r->match_lock);
        pid_t *fresh = r->match_pending;
        size_t n_fresh = r->n_match_pending;
        r->match_pending = NULL;
        r->n_match_pending = 0;
        pthread_mutex_unlock(&r->match_lock);
        if (n_fresh)
                forget_gone_candidates(r);
        for (size_t i = 0; i < n_fresh; i++) {
                if (is_sampled(r, fresh[i]))
                        continue;
                struct candidate *c = candidate_get(r, fresh[i], now);
                if (c) /* a new process, maybe under a pid seen before */
                        *c = (struct candidate){fresh[i], now, false};
        }
        free(fresh);
        for (size_t i = 0; i < r->n_candidates && r->n_samplers < MAX_PIDS; i++) {
                struct candidate *c = &r->candidates[i];
                if (c->gave_up)
                        continue;
                char err[512], cmd[256] = "";
                struct sampler *s;
                int rc = sampler_open(c->pid, r->o->blocking, &s, err, sizeof(err));
                if (rc == 0) {
                        setup_sampler(r, s);
                        if (sampler_set_sink(s, r->k, err, sizeof(err)) < 0) {
                                sampler_close(s);
                                rc = -EIO;
                        }
                }
                bool retry = (rc == PYFIND_NOT_READY || rc == PYFIND_NOT_PYTHON) &&
                             now - c->first_ns <= 2000000000LL;
                if (rc != 0 && retry)
                        continue;
                c->gave_up = true; /* sampled now, or skipped: never retried */
                procfs_cmdline(c->pid, cmd, sizeof(cmd));
                if (rc == 0) {
                        watch_sources(r, s);
                        r->samplers[r->n_samplers++] = s;
                        if (!r->o->quiet)
                                fprintf(stderr, "%s%s: recording pid %d: %s\n", r->tty ? "\n" : "",
                                        prog, (int)c->pid, cmd);
                } else if (!r->o->quiet) {
                        fprintf(stderr, "%s%s: skipping pid %d (%s): %s\n", r->tty ? "\n" : "",
                                prog, (int)c->pid, cmd, err);
                }
        }
}

/*
 * Whether the recording should go on with no sampler: only with
 * --subprocesses while a process given on the command line still lives
 * (a shell that starts Python programs, say).
 */
static bool roots_alive(struct recording *r)
{
        if (r->matcher)
                return true; /* --match, --all: processes may start any time */
        if (!r->o->subprocesses)
                return false;
        if (r->child)
                return !r->child_reaped;
        for (size_t i = 0; i < r->o->n_pids; i++)
                if (kill(r->o->pids[i], 0) == 0 || errno == EPERM)
                        return true;
        return false;
}

/* Read the processes of a pass in a random order: none is always read first. */
static void shuffle_samplers(struct recording *r, struct schedule *sch)
{
        for (size_t i = r->n_samplers; i > 1; i--) {
                size_t j = (size_t)schedule_random(sch, i);
                struct sampler *t = r->samplers[i - 1];
                r->samplers[i - 1] = r->samplers[j];
                r->samplers[j] = t;
        }
}

/*
 * Run the sampling thread at real-time priority (SCHED_FIFO 1), so that it
 * runs when a sample is due whatever the target does. At normal priority
 * it waits for a CPU when the target keeps them busy, and a CPU frees up
 * when the target sleeps: the samples then gather in the target's idle
 * moments (a thread busy 38% of the time was seen busy in 15% of its
 * samples). A thread at this priority preempts the target where they
 * share a CPU, for the length of a pass (microseconds; the target's stack
 * cannot change meanwhile). Children we start later do not inherit it.
 * Returns 0, or -errno (EPERM without CAP_SYS_NICE or an RLIMIT_RTPRIO).
 */
static int sampling_priority(void)
{
        struct sched_param sp = {.sched_priority = 1};
        return sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp) < 0 ? -errno : 0;
}

/*
 * --blocking: the samples due while this pass held the threads of a process
 * are that process's samples of the hold (sampler_held). Without this, those
 * instants were sampled only after the release, or missed when the hold
 * outlasted a period, and holds are long exactly when a thread was running
 * (a runnable thread waits for a CPU before it stops): on a loaded 2-CPU
 * machine a thread busy 43% of the time at 1 kHz came out 5 points less
 * busy. A pass holds all its processes together (pass()); one that held
 * nothing (its threads all asleep) covers no instant, and the next pass then
 * reads only it (sampler_took).
 */
static void hold_over(struct recording *r, struct schedule *sch, int64_t pass_start)
{
        if (!r->o->blocking || r->n_samplers == 0)
                return;
        for (;;) {
                int64_t due = schedule_due(sch);
                size_t held = 0;
                for (size_t i = 0; i < r->n_samplers; i++)
                        if (sampler_held(r->samplers[i], pass_start, due)) {
                                sampler_hold_over(r->samplers[i], due);
                                held++;
                        }
                if (held < r->n_samplers)
                        return;
                schedule_next(sch);
        }
}

/*
 * One sample of every process but those that took this slot's already
 * (hold_over): all prepared, then all asked to stop, then each read once
 * stopped, then all let go, then written (sampler_tick_prepare). A process
 * found gone is removed once none is held.
 * Returns 0, or a fatal -errno with its message in err.
 */
static int pass(struct recording *r, struct schedule *sch, int64_t slot_due, char *err,
                size_t errlen, int64_t now)
{
        enum { MAX_GONE = 16 };
        struct sampler *gone[MAX_GONE];
        size_t n_gone = 0;
        int rc = 0;
        for (size_t i = 0; i < r->n_samplers; i++) {
                r->ticked[i] = false;
                if (sampler_took(r->samplers[i], slot_due) || n_gone == MAX_GONE || rc < 0)
                        continue;
                int hrc = sampler_tick_prepare(r->samplers[i], schedule_random(sch, UINT64_MAX),
                                               err, errlen);
                if (hrc == -ESRCH)
                        gone[n_gone++] = r->samplers[i];
                else if (hrc < 0)
                        rc = hrc;
                else
                        r->ticked[i] = true;
        }
        /*
         * The instant of the pass: every process asked at once, those not on
         * a CPU first (stopper_prepare()). After a failure the others are
         * still asked, then let go first (the first message is kept).
         */
        const int64_t t_ns = pf_now_mono_ns();
        char msg[512];
        for (int on_cpu = 0; on_cpu < 2; on_cpu++)
                for (size_t i = 0; i < r->n_samplers; i++) {
                        if (!r->ticked[i])
                                continue;
                        int hrc =
                            sampler_tick_stop(r->samplers[i], t_ns, on_cpu, rc < 0 ? msg : err,
                                              rc < 0 ? sizeof(msg) : errlen);
                        if (hrc < 0)
                                r->ticked[i] = false; /* nothing of it held */
                        if (hrc == -ESRCH && n_gone < MAX_GONE)
                                gone[n_gone++] = r->samplers[i];
                        else if (hrc < 0 && hrc != -ESRCH && rc == 0)
                                rc = hrc;
                }
        for (size_t i = 0; i < r->n_samplers; i++)
                if (r->ticked[i])
                        sampler_tick_read(r->samplers[i]);
        for (size_t i = 0; i < r->n_samplers; i++)
                if (r->ticked[i])
                        sampler_release(r->samplers[i]);
        for (size_t i = 0; i < r->n_samplers; i++) {
                if (!r->ticked[i])
                        continue;
                int frc = sampler_tick_finish(r->samplers[i], msg, sizeof(msg));
                if (frc == -ESRCH && n_gone < MAX_GONE) {
                        gone[n_gone++] = r->samplers[i];
                } else if (frc < 0 && frc != -ESRCH && rc == 0) {
                        rc = frc;
                        snprintf(err, errlen, "%s", msg);
                }
        }
        if (rc < 0)
                return rc;
        for (size_t g = 0; g < n_gone; g++) {
                reap_child(r);
                for (size_t i = 0; i < r->n_samplers; i++)
                        if (r->samplers[i] == gone[g]) {
                                remove_sampler(r, i, now);
                                break;
                        }
        }
        return 0;
}

/* The name of the file being written, for messages (the sampling thread's). */
static const char *current_file(struct recording *r)
{
        return r->rot ? rotation_current(r->rot, r->current, sizeof(r->current)) : r->o->output;
}

/* Tags of queued rotations (tsink_rotate). */
enum { ROTATE_PLAIN = 0, ROTATE_SNAPSHOT = 1 };

/*
 * On the committing thread, under the sink's lock, where the queue reaches
 * a rotation: every sample before the cut is in the writer, none after.
 * A new file that cannot be made is no reason to stop: the recording goes
 * on in the current one and says so.
 */
static void rotate_now(void *ctx, int64_t cut_ns, uint32_t tag, uint32_t reply_pid,
                       uint32_t reply_fd)
{
        struct recording *r = ctx;
        char next[PATH_MAX], current[PATH_MAX];
        rotation_current(r->rot, current, sizeof(current));
        int64_t wall = pf_now_wall_ns() - (pf_now_mono_ns() - cut_ns);
        if (rotation_name(r->rot, wall, false, next, sizeof(next)) < 0) {
                fprintf(stderr, "%s%s: cannot name the next file after %s; going on in %s\n",
                        r->tty ? "\n" : "", prog, r->o->output, current);
        } else if (trace_writer_rotate(r->w, next, 0, cut_ns) < 0) {
                fprintf(stderr, "%s%s: cannot start %s: %s; going on in %s\n", r->tty ? "\n" : "",
                        prog, next, trace_writer_errmsg(r->w), current);
        } else {
                rotation_finished(r->rot, cut_ns);
                rotation_set_current(r->rot, next);
                if (!r->o->quiet && !r->tty)
                        fprintf(stderr, "%s: now writing %s\n", prog, next);
        }
        atomic_store(&r->size_rotation, 0);
        if (tag == ROTATE_SNAPSHOT)
                rotation_snapshot(r->rot, (pid_t)reply_pid, (int)reply_fd);
}

/* --rotate SIZE, on the committing thread's passes: ask for a rotation past the size. */
static void check_size(void *ctx, int64_t now_ns)
{
        (void)now_ns;
        struct recording *r = ctx;
        char current[PATH_MAX];
        struct stat st;
        if (atomic_load(&r->size_rotation) == 0 &&
            stat(rotation_current(r->rot, current, sizeof(current)), &st) == 0 &&
            (uint64_t)st.st_size >= r->o->rotate_bytes)
                atomic_store(&r->size_rotation, 1);
}

/*
 * Between two passes: queue a rotation when one is due (--rotate, SIGUSR2)
 * or a snapshot was asked for (SIGUSR1). The cut is now, after the pass:
 * its samples all go to the current file.
 */
static void maybe_rotate(struct recording *r)
{
        int64_t now = pf_now_mono_ns();
        if (snapshot_requested) {
                snapshot_requested = 0;
                uint32_t pid = (uint32_t)snapshot_pid, fd = (uint32_t)snapshot_fd;
                tsink_rotate(r->k, now, ROTATE_SNAPSHOT, pid, fd);
                r->segment_start = now;
                return;
        }
        int expected = 1;
        bool by_size = atomic_compare_exchange_strong(&r->size_rotation, &expected, 2);
        bool by_time = r->o->rotate_ns && now - r->segment_start >= r->o->rotate_ns;
        if (rotate_requested || by_size || by_time) {
                rotate_requested = 0;
                tsink_rotate(r->k, now, ROTATE_PLAIN, 0, 0);
                r->segment_start = now;
        }
}

/* The sampling instants' kind (schedule.h): Poisson where each sample holds the program. */
static enum schedule_kind schedule_kind(const struct options *o)
{
        return o->blocking ? SCHEDULE_POISSON : SCHEDULE_STRATIFIED;
}

/*
 * --bpf: how often the recorder wakes to take the events (or sooner, when
 * the ring buffer is a quarter full) and re-reads the threads (or sooner,
 * when an event named a thread it did not know). Each wake-up costs tens
 * of microseconds on a VM: at 1 kHz they were half the recorder's work.
 */
#define BPF_POLL_NS    200000000
#define BPF_REFRESH_NS 500000000

struct bpf_dispatch {
        struct recording *r;
        bool *gone; /* per sampler: it failed, remove it */
};

/* The sampler of process `pid`, or -1 (a process removed since). */
static long bpf_sampler_of(const struct recording *r, uint32_t pid)
{
        for (size_t i = 0; i < r->n_samplers; i++)
                if (sampler_pid(r->samplers[i]) == (pid_t)pid)
                        return (long)i;
        return -1;
}

/* What sampler i said of an event: -ENOMEM and -EIO stop the poll, other errors drop it. */
static int bpf_outcome(struct bpf_dispatch *d, long i, int rc)
{
        if (rc == -ENOMEM || rc == -EIO)
                return rc;
        if (rc < 0)
                d->gone[i] = true;
        return 0;
}

/* An event of the in-kernel sampler to its process's sampler. */
static int on_bpf_event(void *ctx, const struct bpfw_event *e, size_t len)
{
        (void)len;
        struct bpf_dispatch *d = ctx;
        long i = bpf_sampler_of(d->r, e->pid);
        /* (Also of a process gone: what the code cache knows still decodes.) */
        return i < 0 ? 0 : bpf_outcome(d, i, sampler_bpf_event(d->r->samplers[i], e));
}

/* --bpf --native: a native capture to its process's sampler. */
static int on_bpf_native(void *ctx, const struct bpfw_native *nv)
{
        struct bpf_dispatch *d = ctx;
        long i = bpf_sampler_of(d->r, nv->pid);
        return i < 0 ? 0 : bpf_outcome(d, i, sampler_bpf_native(d->r->samplers[i], nv));
}

/* --bpf: the kernel samples; we take its events, follow threads and processes. */
static int record_loop_bpf(struct recording *r)
{
        const int64_t start = pf_now_mono_ns();
        const int64_t cpu_start = self_cpu_ns();
        r->segment_start = start;
        snprintf(r->priority, sizeof(r->priority), "in-kernel timers");
        int64_t last_status = 0, last_follow = 0, last_match = 0, last_refresh = 0;
        char err[512];
        bool *gone = NULL;
        size_t cap_gone = 0;
        int status = 0;
        for (bool last = false, first = true; !last; first = false) {
                if (stop_requested && r->child && forward_signal && !r->child_reaped) {
                        kill(r->child, forward_signal);
                        forward_signal = 0;
                }
                last = stop_requested && !r->child;
                int64_t now = pf_now_mono_ns();
                if (!last && !first) { /* the first pass tells the program the threads */
                        int64_t wait = BPF_POLL_NS;
                        if (r->o->duration_ns && start + r->o->duration_ns - now < wait)
                                wait = start + r->o->duration_ns - now;
                        bpfwalk_wait(r->bpf, wait > 0 ? (int)((wait + 999999) / 1000000) : 0);
                        now = pf_now_mono_ns();
                }
                if (r->o->duration_ns && now - start >= r->o->duration_ns)
                        last = true;
                if (!last && r->o->subprocesses && now - last_follow >= 200000000) {
                        follow_children(r, now);
                        last_follow = now;
                }
                if (!last && r->matcher && now - last_match >= 200000000) {
                        follow_matches(r, now);
                        last_match = now;
                }
                if (r->n_samplers > cap_gone) {
                        size_t cap = r->n_samplers * 2;
                        bool *p = realloc(gone, cap * sizeof(*p));
                        if (!p) {
                                fprintf(stderr, "%s%s: out of memory\n", r->tty ? "\n" : "", prog);
                                status = EXIT_INTERNAL;
                                break;
                        }
                        gone = p;
                        cap_gone = cap;
                }
                bool refresh = now - last_refresh >= BPF_REFRESH_NS;
                if (refresh)
                        last_refresh = now;
                for (size_t i = 0; i < r->n_samplers; i++) {
                        struct sampler *s = r->samplers[i];
                        gone[i] = false;
                        if (!refresh && !sampler_bpf_wants_refresh(s))
                                continue;
                        int rc = sampler_bpf_refresh(s, now, err, sizeof(err));
                        if (rc == -EIO || rc == -ENOMEM) {
                                fprintf(stderr, "%s%s: %s\n", r->tty ? "\n" : "", prog, err);
                                status = rc == -EIO ? EXIT_OUTPUT : EXIT_INTERNAL;
                                goto out;
                        }
                        if (rc == PYFIND_UNSUPPORTED)
                                fprintf(stderr, "%s%s: process %d: %s\n", r->tty ? "\n" : "", prog,
                                        (int)sampler_pid(s), err);
                        if (rc < 0)
                                gone[i] = true;
                }
                r->sampling_ns -= pf_now_mono_ns();
                for (size_t i = 0; i < r->n_samplers; i++)
                        sampler_bpf_begin(r->samplers[i]);
                struct bpf_dispatch d = {r, gone};
                int prc = bpfwalk_poll(r->bpf, on_bpf_event, on_bpf_native, &d);
                for (size_t i = 0; i < r->n_samplers; i++) {
                        int rc = sampler_bpf_end(r->samplers[i], err, sizeof(err));
                        if (rc < 0 && prc >= 0)
                                prc = rc;
                }
                r->sampling_ns += pf_now_mono_ns();
                if (prc == -EIO || prc == -ENOMEM) {
                        fprintf(stderr, "%s%s: writing %s: %s\n", r->tty ? "\n" : "", prog,
                                current_file(r), prc == -ENOMEM ? "out of memory" : err);
                        status = prc == -EIO ? EXIT_OUTPUT : EXIT_INTERNAL;
                        break;
                }
                if (refresh) {
                        struct bpfwalk_stats bs;
                        bpfwalk_get_stats(r->bpf, &bs);
                        if (bs.late > r->bpf_late) {
                                tsink_error(r->k, 0, TRACE_ERROR_LATE, bs.late - r->bpf_late);
                                r->late += bs.late - r->bpf_late;
                                r->bpf_late = bs.late;
                        }
                }
                reap_child(r);
                for (size_t i = r->n_samplers; i-- > 0;) {
                        bool child_gone =
                            r->child_reaped && sampler_pid(r->samplers[i]) == r->child;
                        if (gone[i] || child_gone) {
                                reap_child(r);
                                gone[i] = gone[r->n_samplers - 1];
                                remove_sampler(r, i, now);
                        }
                }
                maybe_rotate(r);
                if (r->n_samplers == 0 && !roots_alive(r))
                        break;
                if (tsink_failed(r->k)) {
                        fprintf(stderr, "%s%s: writing %s: %s\n", r->tty ? "\n" : "", prog,
                                current_file(r), tsink_errmsg(r->k));
                        status = EXIT_OUTPUT;
                        break;
                }
                if (r->tty && now - last_status >= 250000000) {
                        status_line(r, now - start, false);
                        last_status = now;
                }
        }
out:
        free(gone);
        r->loop_cpu_ns = self_cpu_ns() - cpu_start;
        if (r->tty)
                status_line(r, pf_now_mono_ns() - start, true);
        return status;
}

/* Sample until stopped. Returns 0, or an exit status for a fatal error. */
static int record_loop(struct recording *r)
{
        if (r->bpf)
                return record_loop_bpf(r);
        const int64_t period = (int64_t)(1e9 / r->o->rate_hz);
        const int64_t start = pf_now_mono_ns();
        const int64_t cpu_start = self_cpu_ns();
        r->segment_start = start;
        /*
         * One sample per period, at a uniformly random instant within it
         * (schedule.h): an absolute schedule that no periodic program can
         * alias with. With --blocking, exponential gaps instead, so that the
         * time right after a hold is sampled like any other.
         */
        uint64_t seed;
        if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != sizeof(seed))
                seed = (uint64_t)start ^ (uint64_t)getpid() << 32;
        struct schedule sch;
        schedule_init_kind(&sch, schedule_kind(r->o), start, period, seed);
        int prio = sampling_priority();
        snprintf(r->priority, sizeof(r->priority), "%s%s", prio < 0 ? "normal: " : "SCHED_FIFO 1",
                 prio < 0 ? strerror(-prio) : "");
        if (prio < 0 && !r->o->quiet)
                fprintf(stderr,
                        "%s: note: sampling at normal priority (%s): samples of a target that "
                        "keeps every CPU busy may be taken late, when it pauses; run as root or "
                        "with CAP_SYS_NICE\n",
                        prog, strerror(-prio));
        int64_t last_status = 0, last_follow = 0, last_match = 0;
        char err[512];
        while (!stop_requested || r->child) {
                if (stop_requested && r->child) {
                        /* Spawn mode: the program decides when it ends. */
                        if (forward_signal && !r->child_reaped) {
                                kill(r->child, forward_signal);
                                forward_signal = 0;
                        }
                }
                /*
                 * Sleep until the deadline; but a wake-up costs more than a
                 * short wait (13 us of CPU in our VMs), so the last stretch is
                 * spun on the vDSO clock, and a deadline already passed is
                 * not slept for at all.
                 */
                const int64_t next = schedule_due(&sch);
                int64_t now = pf_now_mono_ns();
                if (next - now > SPIN_NS) {
                        int64_t until = next - SPIN_NS / 2;
                        struct timespec ts = {until / 1000000000, until % 1000000000};
                        if (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                                continue;
                }
                while ((now = pf_now_mono_ns()) < next && !stop_requested)
                        ;
                if (r->o->duration_ns && now - start >= r->o->duration_ns)
                        break;
                /* Slots that ended without their sample: say so, and keep the schedule. */
                uint64_t missed = schedule_catch_up(&sch, now);
                if (missed) {
                        r->late += missed;
                        tsink_error(r->k, 0, TRACE_ERROR_LATE, missed);
                        if (now < schedule_due(&sch))
                                continue; /* this slot's instant is still to come */
                }
                if (r->o->subprocesses && now - last_follow >= 200000000) {
                        follow_children(r, now);
                        last_follow = now;
                }
                if (r->matcher && now - last_match >= 200000000) {
                        follow_matches(r, now);
                        last_match = now;
                }
                const int64_t pass_start = now;
                const int64_t slot_due = schedule_due(&sch);
                shuffle_samplers(r, &sch);
                for (size_t i = 0; i < r->n_samplers; i++)
                        sampler_set_horizon(r->samplers[i], schedule_next_slot(&sch));
                int rc = pass(r, &sch, slot_due, err, sizeof(err), now);
                if (rc < 0) {
                        fprintf(stderr, "%s%s: %s\n", r->tty ? "\n" : "", prog, err);
                        return rc == -EPERM ? EXIT_PERMISSION
                               : rc == -EIO ? EXIT_OUTPUT
                                            : EXIT_INTERNAL;
                }
                r->sampling_ns += pf_now_mono_ns() - pass_start;
                schedule_next(&sch);
                hold_over(r, &sch, pass_start);
                maybe_rotate(r);
                reap_child(r);
                if (r->child_reaped) {
                        for (size_t i = r->n_samplers; i-- > 0;)
                                if (sampler_pid(r->samplers[i]) == r->child)
                                        remove_sampler(r, i, now);
                }
                if (r->n_samplers == 0 && !roots_alive(r))
                        break;
                /* Commits and source files are the sink's thread's work. */
                if (tsink_failed(r->k)) {
                        fprintf(stderr, "%s%s: writing %s: %s\n", r->tty ? "\n" : "", prog,
                                current_file(r), tsink_errmsg(r->k));
                        return EXIT_OUTPUT;
                }
                if (r->tty && now - last_status >= 250000000) {
                        status_line(r, now - start, false);
                        last_status = now;
                }
        }
        r->loop_cpu_ns = self_cpu_ns() - cpu_start;
        if (r->tty)
                status_line(r, pf_now_mono_ns() - start, true);
        return 0;
}

/* Open a sampler, retrying while the interpreter is still starting up. */
static int open_sampler(struct recording *r, pid_t pid, int64_t wait_ns, struct sampler **out,
                        char *err, size_t errlen)
{
        int64_t deadline = pf_now_mono_ns() + wait_ns;
        for (;;) {
                int rc = open_one(r->o, pid, out, err, errlen);
                if (rc == 0)
                        setup_sampler(r, *out);
                if (rc == 0)
                        return 0;
                bool retry = rc == PYFIND_NOT_READY || (r->child && rc == PYFIND_NOT_PYTHON);
                if (!retry || pf_now_mono_ns() > deadline || stop_requested)
                        return rc;
                if (r->child) {
                        reap_child(r);
                        if (r->child_reaped)
                                return rc;
                }
                struct timespec ts = {0, 200000};
                nanosleep(&ts, NULL);
        }
}

static int set_meta(struct recording *r)
{
        char buf[8192];
        size_t off = 0;
        for (size_t i = 0; i < r->o->n_pids && off < sizeof(buf) - 16; i++)
                off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s%d", i ? " " : "",
                                        (int)r->o->pids[i]);
        int rc = trace_writer_set_meta(r->w, TRACE_META_PIDS, buf);
        if (rc == 0)
                rc = trace_writer_set_meta(r->w, TRACE_META_MODE,
                                           r->bpf           ? "bpf"
                                           : r->o->blocking ? "blocking"
                                                            : "nonblocking");
        if (rc == 0)
                rc = trace_writer_set_meta(r->w, "schedule",
                                           r->bpf ? "stratified per CPU"
                                                  : schedule_kind_name(schedule_kind(r->o)));
        if (rc == 0 && r->bpf)
                rc = trace_writer_set_meta(r->w, "samples_of", "on-cpu");
        if (rc == 0 && r->o->bpf == 2 && !r->bpf)
                rc = trace_writer_set_meta(r->w, "bpf", r->bpf_off);
        if (rc == 0 && r->o->native)
                rc = trace_writer_set_meta(r->w, "native", r->o->native_all ? "all" : "merged");
        snprintf(buf, sizeof(buf), "%g", r->o->rate_hz);
        if (rc == 0)
                rc = trace_writer_set_meta(r->w, TRACE_META_RATE_HZ, buf);
        if (rc == 0 && r->o->async_tasks)
                rc = trace_writer_set_meta_int(r->w, TRACE_META_ASYNC, 1);
        if (rc == 0 && r->o->command) {
                off = 0;
                for (char **a = r->o->command; *a && off < sizeof(buf) - 1; a++)
                        off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s%s",
                                                a == r->o->command ? "" : " ", *a);
                rc = trace_writer_set_meta(r->w, TRACE_META_CMDLINE, buf);
        }
        if (rc == 0 && r->n_samplers) {
                rc = trace_writer_set_meta(r->w, TRACE_META_PYTHON_VERSION,
                                           sampler_version(r->samplers[0]));
                if (rc == 0)
                        rc = trace_writer_set_meta(r->w, TRACE_META_PYTHON_BUILD,
                                                   sampler_build(r->samplers[0]));
        }
        return rc;
}

static int run_dump(struct options *o)
{
        int status = EXIT_OK;
        char err[512];
        /* The running thread's stack is read in its own context where we can (capture.h). */
        struct capture *capture = NULL;
        if (!o->blocking && !o->no_bpf && capture_open(&capture, err, sizeof(err)) < 0)
                capture = NULL;
        for (size_t i = 0; i < o->n_pids; i++) {
                struct sampler *s;
                int rc = open_one(o, o->pids[i], &s, err, sizeof(err));
                if (rc < 0) {
                        fprintf(stderr, "%s: %s\n", prog, err);
                        status = exit_for_pyfind(rc);
                        continue;
                }
                sampler_set_capture(s, capture);
                if (o->async_tasks && sampler_set_async(s, err, sizeof(err)) < 0)
                        fprintf(stderr, "%s: %s\n", prog, err);
                if (sampler_dump(s, stdout, err, sizeof(err)) < 0) {
                        fprintf(stderr, "%s: %s\n", prog, err);
                        status = EXIT_INTERNAL;
                }
                sampler_close(s);
        }
        capture_close(capture);
        return status;
}

/* Spawn mode: start the program. Returns EXIT_OK or the exit status for a failure. */
static int start_program(struct recording *r)
{
        struct options *o = r->o;
        int exec_errno = 0;
        r->child = spawn(o->command, &exec_errno);
        if (r->child < 0) {
                fprintf(stderr, "%s: cannot start %s: %s\n", prog, o->command[0], strerror(errno));
                r->child = 0;
                return EXIT_EXEC_FAILED;
        }
        if (exec_errno) {
                waitpid(r->child, NULL, 0);
                r->child = 0;
                fprintf(stderr, "%s: cannot run '%s': %s\n", prog, o->command[0],
                        strerror(exec_errno));
                return EXIT_EXEC_FAILED;
        }
        o->pids[0] = r->child;
        o->n_pids = 1;
        return EXIT_OK;
}

/*
 * The thread running Python is read in its own context where the kernel
 * lets us (capture.h); elsewhere from outside. Says why when it cannot.
 */
static void open_capture(struct recording *r)
{
        struct options *o = r->o;
        char err[512] = "";
        if (o->blocking)
                snprintf(r->capture_off, sizeof(r->capture_off), "off: --blocking");
        else if (o->no_bpf)
                snprintf(r->capture_off, sizeof(r->capture_off), "off: --no-bpf");
        else if (capture_open(&r->capture, err, sizeof(err)) < 0)
                snprintf(r->capture_off, sizeof(r->capture_off), "off: %s", err);
        if (!r->capture && !o->blocking && !o->no_bpf && !o->quiet)
                fprintf(stderr,
                        "%s: note: running threads are read from outside, and the shares "
                        "of code whose stack changes fast can be off: %s\n",
                        prog, err);
}

/*
 * --bpf: load the in-kernel sampler. --bpf=auto goes on with the default
 * sampler where it cannot, and says why.
 */
static int open_bpf(struct recording *r)
{
        struct options *o = r->o;
        if (!o->bpf)
                return EXIT_OK;
        char err[512];
        int rc = bpfwalk_open(o->rate_hz, pf_now_mono_ns(), o->native ? BPFW_NATIVE_MAX : 0,
                              &r->bpf, err, sizeof(err));
        if (rc == 0) {
                struct bpfwalk_stats bs;
                bpfwalk_get_stats(r->bpf, &bs);
                long online = sysconf(_SC_NPROCESSORS_ONLN);
                if (online > 0 && bs.cpus < (unsigned long)online && !o->quiet)
                        fprintf(stderr,
                                "%s: note: --bpf samples on %u of the %ld CPUs (we may not run "
                                "on the others): threads there are not sampled\n",
                                prog, bs.cpus, online);
                if (!bs.pinned && !o->quiet)
                        fprintf(stderr,
                                "%s: note: this kernel cannot pin the sampling timers to their "
                                "CPUs (Linux 6.7 can): it may move an idle CPU's timer to a busy "
                                "one, and the shares of threads on different CPUs can be off\n",
                                prog);
                return EXIT_OK;
        }
        if (o->bpf == 2) {
                snprintf(r->bpf_off, sizeof(r->bpf_off), "%s", err);
                if (o->native)
                        o->blocking = true; /* from user space, native stacks hold the thread */
                if (!o->quiet)
                        fprintf(stderr, "%s: note: --bpf=auto: sampling from user space: %s\n",
                                prog, err);
                return EXIT_OK;
        }
        fprintf(stderr, "%s: --bpf: %s%s\n", prog, err,
                rc == -ENOTSUP ? "" : "; or record without --bpf (or with --bpf=auto)");
        return rc == -EPERM ? EXIT_PERMISSION : EXIT_UNSUPPORTED;
}

/*
 * Whether the program we started has exited, or is exiting: a read that
 * failed may have raced with its exit (no such process, no mappings left),
 * so it gets 200 ms to become reapable.
 */
static bool child_exits(struct recording *r)
{
        for (int i = 0; i < 200 && !r->child_reaped; i++) {
                reap_child(r);
                if (!r->child_reaped) {
                        struct timespec ts = {0, 1000000};
                        nanosleep(&ts, NULL);
                }
        }
        return r->child_reaped;
}

/* Find every interpreter before creating the file: errors come first. */
static int open_samplers(struct recording *r)
{
        struct options *o = r->o;
        char err[512];
        for (size_t i = 0; i < o->n_pids; i++) {
                /* A program we started may take a while to map and start Python. */
                int64_t wait =
                    r->child ? (o->subprocesses ? 1000000000LL : 30000000000LL) : 2000000000LL;
                int rc = open_sampler(r, o->pids[i], wait, &r->samplers[r->n_samplers], err,
                                      sizeof(err));
                if (rc < 0 && o->subprocesses &&
                    (rc == PYFIND_NOT_PYTHON || rc == PYFIND_NOT_READY))
                        continue; /* not Python itself: its children may be */
                /*
                 * The program we started has already exited (`python -c pass`):
                 * nothing to sample, which is no error. Its trace is empty and
                 * its exit status ours, as for any program recorded to its exit.
                 */
                if (rc < 0 && r->child == o->pids[i] && child_exits(r)) {
                        if (!o->quiet)
                                fprintf(stderr,
                                        "%s: note: %s exited before its interpreter could be "
                                        "read: the trace holds no samples\n",
                                        prog, o->command[0]);
                        continue;
                }
                if (rc < 0) {
                        fprintf(stderr, "%s: %s\n", prog, err);
                        return exit_for_pyfind(rc);
                }
                r->n_samplers++;
        }
        return EXIT_OK;
}

/* Any option of continuous recording: the files are named by rotation.h from the first. */
static bool continuous(const struct options *o)
{
        return o->rotate_ns || o->rotate_bytes || o->ring_ns || o->keep_ns || o->keep_bytes ||
               o->on_rotate;
}

/*
 * The files' names and what happens to finished ones (rotation.h). Every
 * recording can rotate (SIGUSR2) and take snapshots (SIGUSR1); with an
 * option of continuous recording even its first file has a rotation's name.
 */
static int start_rotation(struct recording *r, char *first, size_t len)
{
        struct options *o = r->o;
        char err[512];
        struct rotation_opts ro = {o->output, o->on_rotate, o->keep_ns, o->keep_bytes, o->quiet};
        int rc = rotation_new(&ro, &r->rot, err, sizeof(err));
        if (rc < 0) {
                fprintf(stderr, "%s: %s\n", prog, err);
                return rc == -2 ? EXIT_OUTPUT : EXIT_INTERNAL;
        }
        if (!continuous(o)) {
                snprintf(first, len, "%s", o->output);
        } else if (rotation_name(r->rot, pf_now_wall_ns(), false, first, len) < 0) {
                fprintf(stderr, "%s: cannot name files after %s: the name is too long\n", prog,
                        o->output);
                return EXIT_OUTPUT;
        }
        rotation_set_current(r->rot, first);
        return EXIT_OK;
}

/* The set the files of this recording belong to (trace_join_segments checks it). */
static int set_segment_set(struct recording *r)
{
        uint64_t id;
        if (getrandom(&id, sizeof(id), GRND_NONBLOCK) != sizeof(id))
                id = (uint64_t)pf_now_wall_ns() ^ (uint64_t)getpid() << 40;
        char buf[32];
        snprintf(buf, sizeof(buf), "%016llx", (unsigned long long)id);
        return trace_writer_set_meta(r->w, TRACE_META_SEGMENT_SET, buf);
}

/* Create the trace and the sink behind it, and give the samplers to it. */
static int create_trace(struct recording *r)
{
        struct options *o = r->o;
        char err[512], first[PATH_MAX];
        int status = start_rotation(r, first, sizeof(first));
        if (status != EXIT_OK)
                return status;
        int rc =
            trace_writer_create(first, o->force && !continuous(o) ? TRACE_CREATE_FORCE : 0, &r->w);
        if (rc < 0) {
                fprintf(stderr, "%s: %s\n", prog,
                        r->w ? trace_writer_errmsg(r->w) : "out of memory");
                return EXIT_OUTPUT;
        }
        r->created = true;
        if (set_segment_set(r) < 0 || !(r->k = tsink_new(r->w))) {
                fprintf(stderr, "%s: out of memory\n", prog);
                return EXIT_INTERNAL;
        }
        tsink_set_rotate(r->k, rotate_now, r);
        if (o->rotate_bytes) {
                tsink_lock(r->k);
                rc = tsink_add_job_locked(r->k, check_size, r);
                tsink_unlock(r->k);
                if (rc < 0) {
                        fprintf(stderr, "%s: out of memory\n", prog);
                        return EXIT_INTERNAL;
                }
        }
        for (size_t i = 0; i < r->n_samplers; i++) {
                if (sampler_set_sink(r->samplers[i], r->k, err, sizeof(err)) < 0) {
                        fprintf(stderr, "%s: writing %s: %s\n", prog, current_file(r), err);
                        return EXIT_OUTPUT;
                }
        }
        return EXIT_OK;
}

/* Everything before the first sample. Returns EXIT_OK or why not. */
static int prepare(struct recording *r)
{
        struct options *o = r->o;
        if (o->output && !o->force && !continuous(o) && access(o->output, F_OK) == 0) {
                fprintf(stderr, "%s: %s exists; use --force to replace it\n", prog, o->output);
                return EXIT_OUTPUT;
        }
        int status = o->command ? start_program(r) : EXIT_OK;
        if (status != EXIT_OK)
                return status;
        if (!o->output && continuous(o)) {
                if (o->n_pids)
                        snprintf(r->output_buf, sizeof(r->output_buf), "pyflame-%d.db",
                                 (int)o->pids[0]);
                else
                        snprintf(r->output_buf, sizeof(r->output_buf), "pyflame-%s.db",
                                 o->all ? "all" : "match");
                o->output = r->output_buf;
        } else if (!o->output) {
                default_output(r->output_buf, sizeof(r->output_buf), o->pids[0]);
                o->output = r->output_buf;
        }
        /*
         * Two descriptors per sampled thread (its /proc stat file and its
         * context-switch ring): take the whole hard limit on open files,
         * after the program (spawn mode) was started with the usual one.
         */
        struct rlimit nofile;
        if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
                nofile.rlim_cur = nofile.rlim_max;
                setrlimit(RLIMIT_NOFILE, &nofile);
        }
        if ((status = open_bpf(r)) != EXIT_OK)
                return status;
        if (!r->bpf)
                open_capture(r);
        else
                snprintf(r->capture_off, sizeof(r->capture_off), "off: --bpf");
        status = open_samplers(r);
        if (status == EXIT_OK && (o->match || o->all))
                status = start_scanner(r);
        return status == EXIT_OK ? create_trace(r) : status;
}

/* Nothing was recorded: leave no file behind, and no program running. */
static int abandon(struct recording *r, int status)
{
        stop_scanner(r);
        while (r->n_samplers)
                sampler_close(r->samplers[--r->n_samplers]);
        char path[PATH_MAX];
        if (r->created)
                unlink(rotation_current(r->rot, path, sizeof(path)));
        rotation_free(r->rot);
        tsink_free(r->k);
        trace_writer_free(r->w);
        capture_close(r->capture);
        bpfwalk_close(r->bpf);
        if (r->child) {
                kill(r->child, SIGTERM);
                waitpid(r->child, NULL, 0);
        }
        return status;
}

/* ---- the live view ------------------------------------------------------ */

/* q in the view: stop as Ctrl-C does, the spawned program included. */
static void live_quit(void *ctx)
{
        struct live *l = ctx;
        pthread_sigqueue(l->main_thread, SIGINT,
                         (union sigval){.sival_int = LIVE_QUIT_SIGNAL_VALUE});
}

static void *live_main(void *arg)
{
        struct live *l = arg;
        top_ui_run(&l->opts);
        return NULL;
}

/* The view reads every file of the recording still on disk, as one. */
static int live_files(void *ctx, char ***paths, size_t *n)
{
        struct live *l = ctx;
        return rotation_files(l->rot, paths, n);
}

/* The CPU time the view's thread used so far (not the recording's cost), or 0. */
static int64_t live_cpu_ns(const struct live *l)
{
        clockid_t clock;
        struct timespec ts;
        if (!l->started || pthread_getcpuclockid(l->thread, &clock) != 0 ||
            clock_gettime(clock, &ts) != 0)
                return 0;
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/*
 * Start the view on its own thread, reading the trace being written. The
 * signals that stop us stay the main thread's, whose sleep they must end.
 * Returns 0 or a negative errno.
 */
static int live_start(struct recording *r)
{
        struct live *l = &r->live;
        const struct options *o = r->o;
        /* The screen needs the keyboard too: without it (< /dev/null), snapshots. */
        bool screen = isatty(STDOUT_FILENO) && isatty(STDIN_FILENO);
        l->saved_stderr = -1;
        l->main_thread = pthread_self();
        l->rot = r->rot;
        atomic_init(&l->stop, 0);
        l->opts = (struct top_ui_opts){
            .path = o->output,
            .title = prog,
            .live = true,
            .window_ns = 10000000000LL,
            .at_ns = -1,
            .interval_ns = o->interval_ns ? o->interval_ns : 1000000000LL,
            .stop = &l->stop,
            .on_quit = live_quit,
            .ctx = l,
            .list_files = live_files,
            .plain = !screen,
            .repaint = screen && o->command,
        };
        if (screen) {
                /* Messages would scribble over the screen: hold them until it closes. */
                r->tty = false;
                fflush(stderr);
                l->held = tmpfile();
                l->saved_stderr = l->held ? dup(STDERR_FILENO) : -1;
                if (l->saved_stderr >= 0)
                        dup2(fileno(l->held), STDERR_FILENO);
        }
        sigset_t block, old;
        sigemptyset(&block);
        sigaddset(&block, SIGINT);
        sigaddset(&block, SIGTERM);
        sigaddset(&block, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &block, &old);
        int rc = pthread_create(&l->thread, NULL, live_main, l);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        /* A resize is the view's business: it must not interrupt the sampling thread. */
        if (rc == 0 && screen) {
                sigemptyset(&block);
                sigaddset(&block, SIGWINCH);
                pthread_sigmask(SIG_BLOCK, &block, NULL);
        }
        l->started = rc == 0;
        return -rc;
}

/*
 * Close the view and print what was held back. Called once the trace is
 * finished, so that the last snapshot without a terminal shows all of it.
 * Nothing to do when the view was never started.
 */
static void live_stop(struct recording *r)
{
        struct live *l = &r->live;
        if (l->started) {
                atomic_store(&l->stop, 1);
                pthread_join(l->thread, NULL);
                l->started = false;
        }
        if (l->saved_stderr >= 0) {
                fflush(stderr);
                dup2(l->saved_stderr, STDERR_FILENO);
                close(l->saved_stderr);
                l->saved_stderr = -1;
                rewind(l->held);
                char buf[4096];
                size_t n;
                while ((n = fread(buf, 1, sizeof(buf), l->held)) > 0)
                        fwrite(buf, 1, n, stderr);
        }
        if (l->held)
                fclose(l->held);
        l->held = NULL;
}

/* Source files, the meta known at the start, the committing thread, then sampling. */
static int record(struct recording *r)
{
        struct options *o = r->o;
        char err[512];
        if (!o->no_source && o->max_source_bytes) {
                struct sources_limits lim = {SOURCES_MAX_FILE_DEFAULT, o->max_source_bytes};
                if (sources_new(r->w, &lim, &r->sources, err, sizeof(err)) < 0 && !o->quiet)
                        fprintf(stderr, "%s: note: %s\n", prog, err);
                for (size_t i = 0; i < r->n_samplers; i++)
                        watch_sources(r, r->samplers[i]);
        }
        if (set_meta(r) < 0) {
                fprintf(stderr, "%s: writing %s: %s\n", prog, current_file(r),
                        trace_writer_errmsg(r->w));
                return EXIT_OUTPUT;
        }
        if (!o->quiet && (o->match || o->all))
                fprintf(stderr, "%s: recording %s at %g Hz into %s%s\n", prog,
                        o->all ? "every Python process" : "the processes matching --match",
                        o->rate_hz, current_file(r), r->tty ? " (Ctrl-C to stop)" : "");
        else if (!o->quiet && !r->child)
                fprintf(stderr, "%s: recording %zu process%s at %g Hz into %s%s\n", prog,
                        r->n_samplers, r->n_samplers == 1 ? "" : "es", o->rate_hz, current_file(r),
                        r->tty ? " (Ctrl-C to stop)" : "");
        if (r->bpf)
                tsink_set_apply_period(r->k, 500000000); /* our loop wakes seldom: so can it */
        int rc = tsink_start(r->k, r->sources, 1000000000);
        if (rc < 0) {
                fprintf(stderr, "%s: cannot start the writing thread: %s\n", prog, strerror(-rc));
                return EXIT_INTERNAL;
        }
        if (o->live && (rc = live_start(r)) < 0) {
                fprintf(stderr, "%s: cannot start the live view: %s\n", prog, strerror(-rc));
                return EXIT_INTERNAL;
        }
        int status = record_loop(r);
        r->loop_cpu_ns -= live_cpu_ns(&r->live);
        return status;
}

/* Stop the committing thread, write the end-of-recording meta and finalize. */
static int finish_trace(struct recording *r, int status)
{
        struct options *o = r->o;
        /* From here on the writer is this thread's alone. */
        if (tsink_stop(r->k) < 0 && status == EXIT_OK) {
                fprintf(stderr, "%s: writing %s: %s\n", prog, current_file(r), tsink_errmsg(r->k));
                status = EXIT_OUTPUT;
        }
        int64_t end = pf_now_mono_ns();
        while (r->n_samplers)
                remove_sampler(r, r->n_samplers - 1, end);
        struct trace_writer *w = r->w;
        /* What sampling cost us, for `pyflame-report info` and the benchmarks. */
        trace_writer_set_meta_int(w, "recorder_cpu_ns", r->loop_cpu_ns);
        trace_writer_set_meta_int(w, "sampling_ns", r->sampling_ns);
        trace_writer_set_meta_int(w, "missed_deadlines", (int64_t)r->late);
        trace_writer_set_meta_int(w, "held_over_samples", (int64_t)r->closed.held_over);
        trace_writer_set_meta_int(w, "memory_reads", (int64_t)r->closed.reads);
        trace_writer_set_meta_int(w, "proc_state_reads", (int64_t)r->closed.proc_state_reads);
        trace_writer_set_meta(w, "switch_events",
                              r->bpf                ? "off (--bpf: every sample is on a CPU)"
                              : o->no_switch_events ? "off"
                                                    : "on");
        trace_writer_set_meta(w, "sampling_priority", r->priority);
        /* How consistent the stacks are: in-context reads, retries, what stayed torn. */
        trace_writer_set_meta(w, "capture", r->capture ? "on" : r->capture_off);
        if (r->bpf) {
                /* The in-kernel sampler's own cost: its callbacks, timed inside them. */
                struct bpfwalk_stats bs;
                bpfwalk_get_stats(r->bpf, &bs);
                trace_writer_set_meta_int(w, "bpf_run_ns", (int64_t)bs.run_ns);
                trace_writer_set_meta_int(w, "bpf_sample_ns", (int64_t)bs.sample_ns);
                trace_writer_set_meta_int(w, "bpf_timer_fires", (int64_t)bs.fires);
                trace_writer_set_meta_int(w, "bpf_samples", (int64_t)bs.samples);
                trace_writer_set_meta_int(w, "bpf_lost", (int64_t)bs.lost);
                trace_writer_set_meta_int(w, "bpf_not_python", (int64_t)bs.not_python);
                trace_writer_set_meta_int(w, "bpf_wakeups", (int64_t)bs.wakeups);
                trace_writer_set_meta_int(w, "bpf_cpus", (int64_t)bs.cpus);
                trace_writer_set_meta(w, "bpf_timers", bs.pinned ? "pinned" : "not pinned");
        }
        trace_writer_set_meta_int(w, "captured_samples", (int64_t)r->closed.captured);
        trace_writer_set_meta_int(w, "captures", (int64_t)r->closed.captures);
        trace_writer_set_meta_int(w, "captures_not_running", (int64_t)r->closed.capture_idle);
        trace_writer_set_meta_int(w, "captures_failed", (int64_t)r->closed.capture_failed);
        trace_writer_set_meta_int(w, "torn_retries", (int64_t)r->closed.retries);
        trace_writer_set_meta_int(w, "torn_recovered", (int64_t)r->closed.recovered);
        if (r->o->native) {
                const struct sampler_stats *c = &r->closed;
                trace_writer_set_meta_int(w, "native_samples", (int64_t)c->native_samples);
                trace_writer_set_meta_int(w, "native_unmatched", (int64_t)c->unmatched);
                trace_writer_set_meta_int(w, "native_captures", (int64_t)c->native_captures);
                trace_writer_set_meta_int(w, "native_capture_ns", (int64_t)c->native_capture_ns);
                trace_writer_set_meta_int(w, "native_unwinds", (int64_t)c->native_unwinds);
                trace_writer_set_meta_int(w, "native_unwind_ns", (int64_t)c->native_unwind_ns);
                trace_writer_set_meta_int(w, "native_warm_unwinds",
                                          (int64_t)c->native_warm_unwinds);
                trace_writer_set_meta_int(w, "native_warm_unwind_ns",
                                          (int64_t)c->native_warm_unwind_ns);
                trace_writer_set_meta_int(w, "native_frames", (int64_t)c->native_frames);
                trace_writer_set_meta_int(w, "native_symbols", (int64_t)c->native_symbols);
                trace_writer_set_meta_int(w, "native_symbol_resets", (int64_t)c->native_sym_resets);
                trace_writer_set_meta_int(w, "native_cfi_rules", (int64_t)c->native_cfi_rules);
                trace_writer_set_meta_int(w, "native_cfi_fallbacks",
                                          (int64_t)c->native_cfi_fallbacks);
                trace_writer_set_meta_int(w, "native_capture_bytes",
                                          (int64_t)c->native_capture_bytes);
        }
        if (r->sources) {
                /* Whatever is still queued: the processes may be gone, their roots are not. */
                sources_pump(r->sources, -1);
                struct sources_stats ss;
                sources_get_stats(r->sources, &ss);
                trace_writer_set_meta_int(w, TRACE_META_SOURCE_FILES, (int64_t)ss.files);
                trace_writer_set_meta_int(w, TRACE_META_SOURCE_BYTES, (int64_t)ss.bytes);
                trace_writer_set_meta_int(w, TRACE_META_SOURCE_SKIPPED, (int64_t)ss.skipped);
        }
        if (trace_writer_finalize(w) < 0) {
                fprintf(stderr, "%s: finishing %s: %s\n", prog, current_file(r),
                        trace_writer_errmsg(w));
                if (status == EXIT_OK)
                        status = EXIT_OUTPUT;
        } else if (!o->quiet && status == EXIT_OK) {
                fprintf(stderr, "%s: wrote %s; see it with: pyflame-report %s\n", prog,
                        current_file(r), current_file(r));
        }
        /* Finished too, even unfinalized (readable to its last commit): --on-rotate, --keep. */
        rotation_finished(r->rot, pf_now_mono_ns());
        return status;
}

/*
 * Spawn mode: the program's exit status is ours; wait for it whatever
 * happened. A recording that failed (a full disk, the trace's directory
 * gone) is no reason to harm the program: it goes on, unrecorded, to its
 * end (Ctrl-C reaches it as before).
 */
static int wait_program(struct recording *r, int status)
{
        if (!r->child)
                return status;
        if (!r->child_reaped) {
                if (status != EXIT_OK && !r->o->quiet)
                        fprintf(stderr,
                                "%s: the program goes on, no longer recorded; waiting "
                                "for it to exit\n",
                                prog);
                for (;;) {
                        pid_t w = waitpid(r->child, &r->child_status, 0);
                        if (w == r->child &&
                            (WIFEXITED(r->child_status) || WIFSIGNALED(r->child_status)))
                                break;
                        if (w == r->child && WIFSTOPPED(r->child_status))
                                stopper_release_stray(r->child, r->child_status); /* reap_child() */
                        if (w < 0 && errno != EINTR)
                                break;
                        if (forward_signal) {
                                kill(r->child, forward_signal);
                                forward_signal = 0;
                        }
                }
                r->child_reaped = true;
        }
        return status == EXIT_OK ? wait_status_to_exit(r->child_status) : status;
}

/*
 * --snapshot PID: ask a running recorder for a snapshot. It is sent
 * SIGUSR1 with the number of a pipe of ours (sigqueue), and writes the
 * snapshot's name to that pipe once the file is written (rotation.c).
 * Only a pyflame-record is sent the signal: to another program, SIGUSR1
 * may well be fatal.
 */
static int run_snapshot_client(pid_t pid)
{
        char comm[64] = "";
        if (procfs_comm(pid, comm, sizeof(comm)) < 0) {
                fprintf(stderr, "%s: no process %d\n", prog, (int)pid);
                return EXIT_NO_PROCESS;
        }
        if (strncmp(comm, "pyflame-record", 14)) {
                fprintf(stderr, "%s: process %d is %s, not pyflame-record: not asking it\n", prog,
                        (int)pid, comm);
                return EXIT_USAGE;
        }
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) < 0) {
                fprintf(stderr, "%s: pipe: %s\n", prog, strerror(errno));
                return EXIT_INTERNAL;
        }
        union sigval v = {.sival_int = fds[1]};
        if (sigqueue(pid, SIGUSR1, v) < 0) {
                fprintf(stderr, "%s: cannot signal process %d: %s%s\n", prog, (int)pid,
                        strerror(errno), errno == EPERM ? " (run as its user, or as root)" : "");
                return errno == EPERM ? EXIT_PERMISSION : EXIT_NO_PROCESS;
        }
        /* Joining files takes a while; wait as long as the recorder lives. */
        char line[PATH_MAX + 600];
        size_t len = 0;
        while (len < sizeof(line) - 1) {
                struct pollfd p = {fds[0], POLLIN, 0};
                int n = poll(&p, 1, 500);
                if (n < 0 && errno != EINTR)
                        break;
                if (n == 0) {
                        if (kill(pid, 0) < 0 && errno == ESRCH)
                                break;
                        continue;
                }
                ssize_t got = read(fds[0], line + len, sizeof(line) - 1 - len);
                if (got <= 0)
                        break;
                len += (size_t)got;
                if (memchr(line, '\n', len))
                        break;
        }
        line[len] = 0;
        close(fds[0]);
        close(fds[1]);
        if (!memchr(line, '\n', len)) {
                fprintf(stderr, "%s: recorder %d ended without telling the snapshot's name\n", prog,
                        (int)pid);
                return EXIT_INTERNAL;
        }
        if (!strncmp(line, "error: ", 7)) {
                fprintf(stderr, "%s: recorder %d: %s", prog, (int)pid, line + 7);
                return EXIT_OUTPUT;
        }
        fputs(line, stdout);
        return EXIT_OK;
}

int main(int argc, char **argv)
{
        struct options o;
        memset(&o, 0, sizeof(o));
#ifdef RECORD_TOP
        o.live = true;
#endif
        if (parse_args(argc, argv, &o) < 0)
                return EXIT_USAGE;
        install_signals();
        /* Wake up on time: the default 50 us of timer slack rules out high rates. */
        prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
        if (o.dump)
                return run_dump(&o);
        if (o.snapshot_of)
                return run_snapshot_client(o.snapshot_of);

        struct recording r = {
            .o = &o, .tty = isatty(STDERR_FILENO) && !o.quiet, .live = {.saved_stderr = -1}};
        int status = prepare(&r);
        if (status != EXIT_OK)
                return abandon(&r, status);
        status = record(&r);
        stop_scanner(&r);
        status = finish_trace(&r, status);
        live_stop(&r);
        rotation_free(r.rot); /* after the last --on-rotate command */
        tsink_free(r.k);
        trace_writer_free(r.w);
        sources_free(r.sources);
        capture_close(r.capture);
        bpfwalk_close(r.bpf);
        free(r.candidates);
        return wait_program(&r, status);
}
