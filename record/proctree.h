/*
 * proctree.h - find the descendants of a set of processes, for
 * `pyflame-record --subprocesses`.
 *
 * The kernel here may lack /proc/PID/task/TID/children, so the tree is built
 * from the parent pid in every /proc/PID/stat: one pass over /proc per call.
 */
#ifndef PYFLAME_PROCTREE_H
#define PYFLAME_PROCTREE_H

#include <stddef.h>
#include <sys/types.h>

/* Upper bound on the processes considered in one scan. */
#define PROCTREE_MAX 65536

/*
 * Every live descendant (children, grandchildren, ...) of the processes in
 * roots[0..n_roots), roots excluded, into a malloc'ed array *out (caller
 * frees). Returns the count or a negative errno (*out untouched then).
 */
int proctree_descendants(const pid_t *roots, size_t n_roots, pid_t **out);

/*
 * Parse the parent pid out of the text of a /proc/PID/stat file (the field
 * after the state letter, which follows the last ')'). Returns it (>= 0) or
 * -EINVAL.
 */
pid_t proctree_parse_ppid(const char *buf, size_t len);

/* The parent of process `pid` (as /proc/PID/stat says), or a negative errno. */
pid_t proctree_parent(pid_t pid);

#endif
