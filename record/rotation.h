/*
 * rotation.h - the files of a recording that is cut into several
 * (pyflame-record --rotate, SIGUSR2, --ring): their names, what happens to
 * each finished file (--on-rotate, retention by --keep and --keep-size),
 * and the flight recorder's snapshot (SIGUSR1, --snapshot), all on a
 * thread of its own, never on the sampling thread.
 *
 * Names: `-o DIR/STEM.EXT` gives DIR/STEM-YYYYmmddTHHMMSSZ.EXT, the file's
 * start in UTC; a second file started within the same second gets -2, -3
 * before the extension. Snapshots are DIR/STEM-snapshot-YYYYmmddTHHMMSSZ.EXT.
 * The set that retention deletes from is the files this recorder finished
 * itself, oldest first, after the files an earlier recorder with the same
 * -o left (named as above, SQLite files; with their -journal): never the
 * file being written, a snapshot, or any other file.
 */
#ifndef PYFLAME_ROTATION_H
#define PYFLAME_ROTATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct rotation;

struct rotation_opts {
        const char *output;    /* -o: the names' pattern */
        const char *on_rotate; /* shell command, or NULL */
        int64_t keep_ns;       /* delete finished files that ended longer ago; 0: no limit */
        uint64_t keep_bytes;   /* keep the set (the current file included) under; 0: no limit */
        bool quiet;
};

/*
 * A rotation for files named after opts->output (copied). Starts its
 * thread. With retention on (keep_ns or keep_bytes), holds the lock file
 * DIR/.STEM.EXT.lock while it runs and counts the files an earlier
 * recording with the same names left toward the limits, oldest first.
 * Returns 0; -2 when another recorder with retention holds the lock; -1
 * for any other failure; with a message in err.
 */
int rotation_new(const struct rotation_opts *opts, struct rotation **out, char *err, size_t errlen);

/*
 * The name of a new file starting at wall-clock time `wall_ns`, into buf
 * (a name no file has: checked with access(), then made with O_EXCL by the
 * writer). Returns 0, or -1 when it does not fit.
 */
int rotation_name(struct rotation *rot, int64_t wall_ns, bool snapshot, char *buf, size_t len);

/* The file now written is `path` (copied); the one before, if any, is finished. */
void rotation_set_current(struct rotation *rot, const char *path);
/* The name of the file being written, copied into buf (truncated to len); returns buf. */
const char *rotation_current(struct rotation *rot, char *buf, size_t len);

/*
 * The files of this recording now on disk, oldest first, the one being
 * written last (for the live view): copies in *paths (the caller frees
 * each and the array), *n of them. Made under the lock that retention
 * deletes under, so no file listed was deleted by it before the listing
 * ended. 0, or -1 when out of memory.
 */
int rotation_files(struct rotation *rot, char ***paths, size_t *n);

/*
 * The file written so far is finished (the recording moved on to another
 * or ended at `end_mono_ns`, the cut, on the monotonic clock): queue its
 * --on-rotate command, then retention.
 */
void rotation_finished(struct rotation *rot, int64_t end_mono_ns);

/*
 * Queue a snapshot: join the finished files into one trace (after what is
 * queued before), print its name on stdout, and write it, with a newline,
 * to `reply_fd` of process `reply_pid` (a pipe of pyflame-record
 * --snapshot) when reply_pid > 0.
 */
void rotation_snapshot(struct rotation *rot, pid_t reply_pid, int reply_fd);

/* Wait for everything queued, then stop the thread and free. NULL is fine. */
void rotation_free(struct rotation *rot);

#endif
