/*
 * imgvers.h - the CPython versions the synthetic images are built for.
 *
 * One table of builds (2.7, 3.6-3.12 from pylayout's tables, a
 * Py_TRACE_REFS 3.7 debug build, and 3.13, 3.13t, 3.14, 3.14t, 3.15
 * through a _Py_DebugOffsets that imgbuild.c writes), shared by the walker's
 * image tests (test_pywalk_image.c), the in-kernel walk's (test_bpfwalk.c)
 * and the --bpf decoding fuzzer (tests/fuzz/fuzz_bpfdecode.c), so that all
 * three cover the same layouts in the same order. For 3.13+ the layout is
 * written out here by hand from the reference doc, independently of
 * pylayout.c: the walker's loader is checked against it.
 *
 * Nothing here prints or asserts: the callers decide what a failure is.
 */
#ifndef PYFLAME_TEST_IMGVERS_H
#define PYFLAME_TEST_IMGVERS_H

#include <stdbool.h>

#include "imgbuild.h"
#include "pylayout.h"

/* A build of CPython: its name in test names, x.y, free-threaded, Py_TRACE_REFS. */
struct imgver {
        const char *name;
        int major, minor;
        bool ft, debug;
};

/* Every build, oldest first; test names and fuzz inputs count on this order. */
#define IMGVER_COUNT 14
extern const struct imgver imgver_table[];

/* Which asyncio task fields a hand-written 3.13+ layout fills in. */
enum imgver_tasks {
        IMGVER_TASKS_NONE = 1, /* none: every task field -1, tasks/await/gen_created 0 */
        IMGVER_TASKS_313, /* 3.13's GIL build as pylayout.c has them, 3.14's lists; none else */
};

/*
 * The layout of a 3.13+ build v (v->minor >= 13) as the walker must read it
 * back from _Py_DebugOffsets, fr_read included; co_read is left 0 (the
 * walker derives it). Overwrites all of *L.
 */
void imgver_debug_layout(const struct imgver *v, enum imgver_tasks tasks, struct pylayout *L);

/*
 * An image of build v in p (pyimg_init(); free it with pyimg_free()): for
 * 3.13+ over imgver_debug_layout(v, tasks) with co_read as the walker
 * derives it, before 3.13 over pylayout's table for v's x.y.2 (tasks
 * unused). p->target.debug_build is v->debug. Returns 0, or -1 with p
 * untouched when pylayout has no table for v.
 */
int imgver_image(const struct imgver *v, enum imgver_tasks tasks, struct pyimg *p);

#endif
