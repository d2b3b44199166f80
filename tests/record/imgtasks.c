/*
 * imgtasks.c - a synthetic 3.14+ image with asyncio tasks of a known shape
 * (imgtasks.h).
 */
#include "imgtasks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FILE_PY "/srv/app.py"

/* A code object whose unit k is on line first + 1 + k. */
static uint64_t mkcode(struct pyimg *p, const char *name, int first)
{
        int lines[16];
        for (int i = 0; i < 16; i++)
                lines[i] = first + 1 + i;
        return pyimg_code(p, name, name, FILE_PY, first, lines, 16, 0);
}

/* leaf <- middle <- top, each suspended in an await; leaf awaits `fut`. */
static uint64_t chain3(struct imgtasks *s, uint64_t fut)
{
        struct pyimg *p = &s->p;
        uint64_t leaf = pyimg_coro(p, s->leaf, 2, -1, fut);
        uint64_t mid = pyimg_coro(p, s->middle, 1, -1, leaf);
        return pyimg_coro(p, s->top, 3, -1, mid);
}

static uint64_t str(struct pyimg *p, const char *s)
{
        return pyimg_str(p, s, PYIMG_STR_AUTO);
}

void imgtasks_build(struct imgtasks *s, const struct imgver *v)
{
        memset(s, 0, sizeof(*s));
        struct pyimg *p = &s->p;
        if (imgver_image(v, IMGVER_TASKS_313, p) != 0) {
                fprintf(stderr, "imgtasks: no image for %s\n", v->name);
                abort();
        }
        pyimg_add_thread(p, p->interps[0], 0);
        pyimg_add_thread(p, p->interps[0], 4243);
        pyimg_asyncio(p);
        s->leaf = mkcode(p, "leaf", 20);
        s->middle = mkcode(p, "middle", 30);
        s->top = mkcode(p, "top", 40);
        s->awaiter = mkcode(p, "awaiter", 50);
        s->gathering = mkcode(p, "gathering", 60);
        s->runner = mkcode(p, "runner", 70);
        uint64_t fut = pyimg_future(p, false);
        /* Thread 0, the main thread. */
        s->t_top = pyimg_task(p, 0, str(p, "top-0"), chain3(s, fut));
        pyimg_task_waiter(p, s->t_top, fut);
        s->t_awaited = pyimg_task(p, 0, str(p, "awaited"), chain3(s, pyimg_future(p, false)));
        s->t_awaiter = pyimg_task(p, 0, str(p, "awaiter"),
                                  pyimg_coro(p, s->awaiter, 4, -1, pyimg_future(p, false)));
        pyimg_task_waiter(p, s->t_awaiter, s->t_awaited);
        pyimg_task_awaited_by(p, s->t_awaited, &s->t_awaiter, 1);
        uint64_t gfut = pyimg_future(p, true);
        s->t_gatherer =
            pyimg_task(p, 0, str(p, "gatherer"), pyimg_coro(p, s->gathering, 5, -1, gfut));
        pyimg_task_waiter(p, s->t_gatherer, gfut);
        for (int i = 0; i < 3; i++) {
                char name[16];
                snprintf(name, sizeof(name), "kid-%d", i);
                s->t_kids[i] = pyimg_task(p, 0, str(p, name), pyimg_coro(p, s->leaf, 2, -1, fut));
                pyimg_task_awaited_by(p, s->t_kids[i], &s->t_gatherer, 1);
        }
        s->t_wa = pyimg_task(p, 0, str(p, "waiter-a"), pyimg_coro(p, s->awaiter, 4, -1, fut));
        s->t_wb = pyimg_task(p, 0, str(p, "waiter-b"), pyimg_coro(p, s->awaiter, 4, -1, fut));
        s->t_shared = pyimg_task(p, 0, str(p, "shared"), pyimg_coro(p, s->leaf, 2, -1, fut));
        uint64_t both[2] = {s->t_wa, s->t_wb};
        pyimg_task_awaited_by(p, s->t_shared, both, 2);
        s->t_running = pyimg_task(p, 0, str(p, "running"), pyimg_coro(p, s->runner, 6, 0, 0));
        s->t_unnamed = pyimg_task(p, 0, pyimg_int(p, 17), pyimg_coro(p, s->leaf, 2, -1, fut));
        /* Thread 1 (4243) and the interpreter's list. */
        s->t_side = pyimg_task(p, 1, str(p, "side"), pyimg_coro(p, s->leaf, 2, -1, fut));
        s->t_orphan = pyimg_task(p, -1, str(p, "orphan"), pyimg_coro(p, s->leaf, 2, -1, fut));
        pyimg_sync(p);
}
