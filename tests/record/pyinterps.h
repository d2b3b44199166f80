/*
 * pyinterps.h - find the Python interpreters installed on this machine, for
 * tests that run real interpreters (line-table ground truth, live walks).
 *
 * $PYFLAME_TEST_PYTHONS (colon-separated paths) overrides discovery; otherwise
 * every $PYENV_ROOT/versions/<v>/bin/python (default ~/.pyenv) and the
 * system's /usr/bin/python3.* are used, deduplicated by real path. Each
 * interpreter is asked for its version once.
 */
#ifndef PYFLAME_TEST_PYINTERPS_H
#define PYFLAME_TEST_PYINTERPS_H

#include <stddef.h>
#include <sys/types.h>

struct pyinterp {
        char path[512];
        char label[64]; /* "3.11.7 (/usr/bin/python3.11)" style, short */
        int major, minor, micro;
        int free_threaded;
};

/* Fill up to `max` entries; returns how many were found (0 when none). */
size_t pyinterps_find(struct pyinterp *out, size_t max);

/*
 * Start `py -u script` with its standard output on a pipe: *pid the child
 * (the caller reaps it), *out the pipe's reading end (the caller closes it).
 * Returns 0, or a negative errno with nothing started.
 */
int pyinterps_spawn(const struct pyinterp *py, const char *script, pid_t *pid, int *out);

#endif
