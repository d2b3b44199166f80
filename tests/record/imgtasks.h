/*
 * imgtasks.h - a synthetic 3.14+ image with asyncio tasks of a known shape
 * (imgbuild.c), shared by test_pytasks_image.c and the fuzzer's captures
 * (capture_tasks.c).
 */
#ifndef PYFLAME_TEST_IMGTASKS_H
#define PYFLAME_TEST_IMGTASKS_H

#include <stdint.h>

#include "imgbuild.h"
#include "imgvers.h"

/*
 * Thread 0 (the main thread): "top-0" (leaf <- middle <- top, awaiting a
 * Future), "awaited" awaited directly by "awaiter", "gatherer" with
 * "kid-0".."kid-2" (awaited_by), "waiter-a" and "waiter-b" both awaiting
 * "shared" (a set), "running" (executing), a task named by CPython's
 * counter (17); thread 1 (TID 4243): "side"; the interpreter's list:
 * "orphan". 14 tasks. Each code object's unit k is on line first + 1 + k:
 * leaf 20, middle 30, top 40, awaiter 50, gathering 60, runner 70.
 */
struct imgtasks {
        struct pyimg p;
        uint64_t leaf, middle, top, awaiter, gathering, runner;
        uint64_t t_top, t_awaited, t_awaiter, t_gatherer, t_kids[3], t_shared, t_wa, t_wb;
        uint64_t t_running, t_unnamed, t_side, t_orphan;
};

#define IMGTASKS_COUNT 14

/* Build it for v (3.14+); aborts on misuse. */
void imgtasks_build(struct imgtasks *s, const struct imgver *v);

#endif
