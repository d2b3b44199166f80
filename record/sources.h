/*
 * sources.h - the text of the source files of sampled frames, copied into
 * the trace so that reports show the code on any machine.
 *
 * The sampler notes a file name when it interns a frame of a file it has not
 * seen (a hash lookup, nothing else on the sampling path); the names wait in
 * a queue, and sources_pump() reads them at flush time, within a time
 * budget, and at the end of the recording. A file is read only as the
 * target could read it: inside its mount namespace (through its
 * /proc/PID/root, relative names through its /proc/PID/cwd, opened when the
 * process is first watched so they outlive it), never outside that root,
 * and with its filesystem uid, gid and groups (sources.c says how).
 * Modules imported from zip archives (zipapps, eggs, .pex) are read from
 * the archive with libarchive. Sizes are bounded per file and per trace.
 */
#ifndef PYFLAME_SOURCES_H
#define PYFLAME_SOURCES_H

#include <stdint.h>
#include <sys/types.h>

#include "trace.h"

#define SOURCES_MAX_FILE_DEFAULT  (1u << 20)    /* a bigger file is not stored */
#define SOURCES_MAX_TOTAL_DEFAULT (64ull << 20) /* text stored over a whole trace */

struct sources_limits {
        uint64_t max_file;  /* bytes of one file's text, at most TRACE_SOURCE_MAX_BYTES */
        uint64_t max_total; /* bytes of text over the trace */
};

struct sources_stats {
        uint64_t files;   /* stored */
        uint64_t bytes;   /* their text */
        uint64_t skipped; /* files noted but not stored, whatever the reason */
        uint64_t queued;  /* noted, not read yet */
};

struct sources;

/*
 * A store writing to `w`. Returns 0 and sets *out, or a negative errno
 * with a one-line message in err: -ENOSYS when the kernel cannot confine a
 * path to the target's root (openat2, Linux 5.6), -ENOMEM.
 */
int sources_new(struct trace_writer *w, const struct sources_limits *lim, struct sources **out,
                char *err, size_t errlen);

/*
 * Start taking file names from process `pid`: its root, working directory
 * and credentials are captured now. Returns a handle (>= 0) for
 * sources_note(), or -ENOMEM. A process whose root cannot be opened still
 * gets a handle; its files are then skipped. The handle of a process
 * unwatched and whose queued files are read is given out again: the store
 * holds only the processes watched, however many come and go.
 */
int sources_watch(struct sources *s, pid_t pid);

/*
 * A frame of `file` was sampled in the process of `handle`. Queues the name
 * when it was never seen (names like "<frozen ...>" or "<string>" are not
 * files and are ignored). Cheap; never fails visibly (when memory runs out
 * the file is just not stored).
 */
void sources_note(struct sources *s, int handle, const char *file);

/*
 * Process `pid` is no longer sampled: what it queued is still read, then its
 * descriptors closed; its handle takes no more names.
 */
void sources_unwatch(struct sources *s, pid_t pid);

/*
 * Read queued files and add them to the writer, until `budget_ns` has
 * passed (at least one file is read), or all of them when budget_ns < 0.
 * A file that cannot be stored (unreadable by the target, absent, not
 * text, over a limit, refused by the writer) is counted as skipped: sources
 * never stop a recording.
 */
void sources_pump(struct sources *s, int64_t budget_ns);

void sources_get_stats(const struct sources *s, struct sources_stats *st);

/* Release everything, queued names included. NULL is fine. */
void sources_free(struct sources *s);

#endif
