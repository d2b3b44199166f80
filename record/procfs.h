/*
 * procfs.h - the few things the recorder reads from /proc about a target.
 *
 * Mappings (/proc/PID/maps, for pyfind), thread ids (/proc/PID/task), each
 * thread's scheduler state (/proc/PID/task/TID/stat, on the sampling hot path:
 * open once, then one pread per thread per sample), the mapping from thread
 * ids in the target's own PID namespace to host thread ids (NSpid), the
 * command line and comm for messages and trace metadata, and the
 * credentials its file accesses are checked against (for the sources).
 *
 * All functions return 0 (or a count, or an fd) on success and a negative
 * errno on failure; -ESRCH always means "that process or thread is gone".
 * Parsers of /proc text are exposed so that the unit tests and fuzzers can
 * feed them arbitrary bytes: they never read past `len` and never assume a NUL.
 */
#ifndef PYFLAME_PROCFS_H
#define PYFLAME_PROCFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Upper bounds on what we accept from /proc, so a hostile or huge target cannot exhaust us. */
#define PROCFS_MAX_THREADS   65536
#define PROCFS_MAX_MAP_LINES (1u << 20)

/* Permission bits of a mapping. */
#define PROCFS_MAP_READ    0x1u
#define PROCFS_MAP_WRITE   0x2u
#define PROCFS_MAP_EXEC    0x4u
#define PROCFS_MAP_PRIVATE 0x8u

/* One line of /proc/PID/maps. */
struct procfs_mapping {
        uint64_t start, end; /* [start, end) in the target */
        uint64_t offset;     /* file offset of `start` */
        unsigned perms;      /* PROCFS_MAP_* */
        unsigned dev_major, dev_minor;
        uint64_t inode; /* 0 for anonymous mappings */
        /*
         * Path as the target sees it (in its mount namespace), "" for an
         * anonymous mapping, "[heap]"-style names for special ones. A trailing
         * " (deleted)" is removed and reported in `deleted` instead.
         */
        const char *path;
        bool deleted;
};

/*
 * Parse one maps line (without or with its trailing newline) of `len` bytes.
 * The line is modified in place (the path is NUL-terminated inside it), so
 * out->path points into `line`. Returns 0, or -EINVAL for a malformed line.
 */
int procfs_parse_maps_line(char *line, size_t len, struct procfs_mapping *out);

/*
 * Call fn(ctx, mapping) for each line of /proc/PID/maps, in address order.
 * The mapping and its path are valid only during the call; a non-zero return
 * from fn stops the walk and is returned. At most PROCFS_MAX_MAP_LINES lines
 * are read; malformed or over-long lines are skipped. Returns 0, -ESRCH when
 * there is no such process, -EACCES/-EPERM when not allowed, another -errno.
 */
typedef int (*procfs_maps_fn)(void *ctx, const struct procfs_mapping *m);
int procfs_maps_foreach(pid_t pid, procfs_maps_fn fn, void *ctx);

/*
 * List the thread ids of `pid` (host namespace, from /proc/PID/task) into a
 * malloc'ed array stored in *tids, which the caller frees. Returns the count
 * (at most PROCFS_MAX_THREADS; the list is a snapshot: threads come and go),
 * or a negative errno (-ESRCH for no such process) and leaves *tids alone.
 */
int procfs_list_tids(pid_t pid, pid_t **tids);

/*
 * Open /proc/PID/task/TID/stat for repeated procfs_thread_state() calls.
 * Returns an fd the caller closes, or a negative errno (-ESRCH when gone).
 */
int procfs_thread_open(pid_t pid, pid_t tid);

/*
 * The scheduler state letter of an opened thread ('R' running, 'S' sleeping,
 * 'D' disk wait, 't' traced, 'Z' zombie, ...), read with one pread. Returns
 * the letter (> 0) or a negative errno (-ESRCH once the thread has exited).
 */
int procfs_thread_state(int fd);

/*
 * The same, and the number of threads of its process (stat's field 20,
 * which every thread's stat gives for its whole thread group) into
 * *num_threads (-1 when the text has none): with it a caller that knows the
 * threads can tell that none came or went without listing /proc/PID/task,
 * the dearest read of a --blocking pass.
 */
int procfs_thread_stat(int fd, int *num_threads);

/* 1 when the thread is running or runnable ('R'), 0 when not, a negative errno on failure. */
int procfs_thread_running(int fd);

/*
 * Whether a thread that is stopped is stopped inside a system call:
 * /proc/PID/task/TID/syscall gives the call's number then, "-1 SP PC" when
 * it was stopped running its own code ("running" while it runs). Returns 1
 * in a call, 0 not, or a negative errno (-ESRCH gone, -EACCES not ours to
 * read, -EINVAL unexpected text).
 */
int procfs_thread_in_syscall(pid_t pid, pid_t tid);

/* The same from the text of that file. */
int procfs_parse_syscall(const char *buf, size_t len);

/*
 * Parse the state letter out of the text of a stat file: it follows the LAST
 * ')' because comm may itself contain spaces and parentheses. Returns the
 * letter, or -EINVAL when there is none.
 */
int procfs_parse_stat_state(const char *buf, size_t len);

/* The thread count (field 20) of a stat file's text, or -EINVAL. */
int procfs_parse_stat_threads(const char *buf, size_t len);

/*
 * From the text of a /proc/.../status file, the innermost-namespace id: the
 * last number of the "NSpid:" line (the id the process sees for itself).
 * Returns it (> 0), -ENOENT when there is no NSpid line (kernels before 4.1),
 * or -EINVAL when the line is malformed.
 */
pid_t procfs_parse_nspid(const char *buf, size_t len);

/*
 * The id host thread `tid` of `pid` has in its innermost PID namespace (what
 * the target itself sees), from /proc/PID/task/TID/status. Returns it (> 0),
 * `tid` itself on kernels without NSpid, or a negative errno (-ESRCH: gone).
 */
pid_t procfs_ns_tid(pid_t pid, pid_t tid);

/*
 * Map a thread id as the target knows it (in its own PID namespace, e.g. a
 * CPython tstate's native_thread_id) to the host thread id. Returns the host
 * tid (> 0), -ENOENT when no thread of `pid` has that namespace id, or
 * another negative errno. Cost: one status read per thread of a process in
 * a container; a single stat() otherwise.
 */
pid_t procfs_host_tid(pid_t pid, pid_t ns_tid);

/*
 * Whether `pid` is in our PID namespace (or the kernel has no NSpid), so
 * that the thread ids it knows itself are ours; false when /proc says
 * otherwise or cannot be read.
 */
bool procfs_same_pidns(pid_t pid);

/*
 * The command line of `pid`, arguments joined by single spaces, into
 * buf[len] (always NUL-terminated, truncated if needed). Returns 0, or a
 * negative errno; an empty command line (kernel thread, zombie) is -ENOENT.
 */
int procfs_cmdline(pid_t pid, char *buf, size_t len);

/* The comm (executable name, at most 15 bytes) of `pid` into buf[len]. Returns 0 or -errno. */
int procfs_comm(pid_t pid, char *buf, size_t len);

/* The same for thread `tid` of `pid` (/proc/PID/task/TID/comm). */
int procfs_thread_comm(pid_t pid, pid_t tid, char *buf, size_t len);

/* Supplementary groups kept of a process's; more are dropped (that only ever denies access). */
#define PROCFS_MAX_GROUPS 256

/*
 * What the kernel checks a process's file accesses against: its filesystem
 * uid and gid and its supplementary groups, as /proc shows them to us
 * (translated into our user namespace).
 */
struct procfs_creds {
        uint32_t fsuid, fsgid;
        uint32_t groups[PROCFS_MAX_GROUPS];
        unsigned n_groups;
};

/*
 * Parse the Uid:, Gid: (their fourth field, the filesystem id) and Groups:
 * lines of the text of a status file. Returns 0, or -EINVAL when a line is
 * missing or malformed (out untouched).
 */
int procfs_parse_creds(const char *buf, size_t len, struct procfs_creds *out);

/* The credentials of `pid` from /proc/PID/status. Returns 0 or a negative errno (-ESRCH: gone). */
int procfs_creds(pid_t pid, struct procfs_creds *out);

#endif
