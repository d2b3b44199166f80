/*
 * procmatch.h - find the processes to record by their command line
 * (pyflame-record --match REGEX) or all that look like Python (--all), now
 * and as they start: each scan of /proc tells only the processes that are
 * new since the scan before.
 *
 * A process is known by its pid and its start time (field 22 of
 * /proc/PID/stat), so a pid that is reused by a new process is new again.
 */
#ifndef PYFLAME_PROCMATCH_H
#define PYFLAME_PROCMATCH_H

#include <stddef.h>
#include <sys/types.h>

struct procmatch;

/*
 * A matcher for the extended regular expression `regex` (searched in the
 * command line, its arguments joined by spaces), or, with regex NULL, for
 * every process that maps a file whose name holds "python" (an interpreter
 * or libpython; cheaper than asking pyfind about every process on the
 * host). Processes in exclude[0..n_exclude) are never told. Returns 0, or
 * -1 with the reason (a bad expression) in err.
 */
int procmatch_new(const char *regex, const pid_t *exclude, size_t n_exclude, struct procmatch **out,
                  char *err, size_t errlen);

/*
 * Scan /proc: the matching processes not told before, into a malloc'ed
 * array *out (caller frees). Returns their count (>= 0) or a negative errno
 * (-ENOMEM, /proc unreadable), *out then untouched.
 */
int procmatch_scan(struct procmatch *m, pid_t **out);

/* Is the command line `cmdline` a match? (For the tests; --all: always.) */
int procmatch_matches(const struct procmatch *m, const char *cmdline);

void procmatch_free(struct procmatch *m);

#endif
