/*
 * pytasks.c - the asyncio tasks of a target, for pyflame-record --async
 * (pywalk_set_tasks(), pywalk_tasks(), pywalk.h).
 *
 * Before 3.14 CPython keeps no list of tasks per loop that a reader can
 * follow; it keeps a registry of every task: the WeakSet
 * asyncio.tasks._all_tasks (3.7-3.11), or the WeakSet _scheduled_tasks and
 * the set _eager_tasks (3.12, 3.13). Each sample reads the registry's hash
 * table, each task's C struct (_asyncio's TaskObj: its loop, coroutine,
 * awaited future, name, first done callback) and each coroutine's frame,
 * following what a suspended coroutine awaits (the top of its value stack,
 * what cr_await reports) down to the innermost one. A task's loop gives its
 * thread (the loop's _thread_id, set while it runs). Who awaits a task: the
 * task whose awaited future is that task, or a _GatheringFuture listing it
 * in _children (gather), or the TaskGroup whose _on_task_done is its first
 * done callback (that group's _parent_task).
 *
 * Reads of tasks, coroutines and frames go through the sample's snapshot
 * (pysnap.h), so they join the next sample's batched read; the registry's
 * place and each loop's thread are looked up by name now and then, outside
 * it. Everything is bounded and type-checked: a task that does not read
 * or fit is left out of the sample, never reported as garbage.
 */
#include <stdio.h>
#include <stdlib.h>

#include "pywalk_int.h"

#define MAX_SET_SLOTS    (1u << 18) /* hash table slots of a registry set */
#define MAX_AWAIT_DEPTH  256        /* coroutines followed down one task's chain */
#define MAX_VALUE_STACK  (1 << 16)  /* a frame's value stack depth we believe */
#define MAX_GATHER       4096       /* children of one gather we look at */
#define REGISTRY_RECHECK 512        /* samples between lookups of the registry by name */
#define LOOP_RECHECK     256        /* samples between reads of a loop's _thread_id */
#define MAX_LOOPS        64
#define TYPE_SLOTS       64
#define NAME_CACHE_MAX   (1u << 16) /* task name entries kept before starting afresh */
#define TP_NAME_MAX      48
#define MAX_TYPE_BASES   16

/* What a type is to us, by its tp_name (and its bases', for tasks). */
enum obj_class {
        CLS_OTHER = 1,
        CLS_TASK,      /* _asyncio.Task or a subclass */
        CLS_WEAKREF,   /* weakref.ref */
        CLS_CORO,      /* coroutine, or a generator (yield from, @types.coroutine) */
        CLS_GATHERING, /* asyncio.tasks._GatheringFuture */
        CLS_METHOD,    /* a bound method */
        CLS_TASKGROUP, /* asyncio.TaskGroup */
};

struct type_class {
        uint64_t type;
        uint8_t cls;
};

struct loop_thread {
        uint64_t loop, thread_id, checked;
};

/* A task's name (and the pseudo code that carries it), keyed by task and name object. */
struct name_entry {
        uint64_t task, obj;
        struct pywalk_code *code;
};

struct pytasks {
        uint64_t registry[2]; /* the sets of tasks (0: none); weak: registry[0] holds weakrefs */
        bool weak[2];
        uint64_t registry_due; /* sample number of the next lookup by name */
        struct type_class types[TYPE_SLOTS];
        size_t n_types;
        struct loop_thread loops[MAX_LOOPS];
        size_t n_loops;
        struct name_entry *names; /* open addressing */
        size_t names_cap, names_n;
        struct pywalk_task *v; /* this sample's tasks */
        size_t n, cap;
        uint64_t *found; /* addresses of the tasks in the registry */
        size_t n_found, cap_found;
        struct pywalk_frame *frames; /* every task's chain, back to back */
        size_t n_frames, cap_frames;
        uint64_t *waiter, *callback; /* per task: awaited future, first done callback */
};

int pywalk_set_tasks(struct pywalk *w, char *err, size_t errlen)
{
        const struct pylayout *L = &w->L;
        if (!L->tasks || L->task_size <= 0 || L->is_modules < 0 || L->dict_keys < 0) {
                snprintf(err, errlen,
                         "--async: asyncio tasks cannot be read on Python %s (pyflame knows the "
                         "task layouts of 3.7 to 3.13): its threads only are recorded",
                         L->name);
                return PYFIND_UNSUPPORTED;
        }
        if (w->tasks)
                return 0;
        w->tasks = calloc(1, sizeof(*w->tasks));
        return w->tasks ? 0 : -ENOMEM;
}

void pywalk_tasks(const struct pywalk *w, const struct pywalk_task **tasks, size_t *n)
{
        *tasks = w->tasks ? w->tasks->v : NULL;
        *n = w->tasks ? w->tasks->n : 0;
}

static void names_clear(struct pytasks *t)
{
        for (size_t i = 0; i < t->names_cap; i++) {
                if (t->names[i].code) {
                        free((char *)t->names[i].code->name);
                        free(t->names[i].code);
                }
        }
        free(t->names);
        t->names = NULL;
        t->names_cap = t->names_n = 0;
}

void pytasks_free(struct pytasks *t)
{
        if (!t)
                return;
        names_clear(t);
        free(t->v);
        free(t->found);
        free(t->frames);
        free(t->waiter);
        free(t->callback);
        free(t);
}

static int soft(int rc)
{
        return fatal_read(rc) ? rc : 1;
}

/* The class of the type at `type`, cached (types live as long as their objects, mostly). */
static int type_class(struct pywalk *w, uint64_t type, uint8_t *out)
{
        struct pytasks *t = w->tasks;
        const struct pylayout *L = &w->L;
        for (size_t i = 0; i < t->n_types; i++) {
                if (t->types[i].type == type) {
                        *out = t->types[i].cls;
                        return 0;
                }
        }
        if (!type)
                return 1;
        uint8_t cls = CLS_OTHER;
        uint64_t cur = type;
        for (int depth = 0; cur && depth < MAX_TYPE_BASES; depth++) {
                uint64_t name_ptr;
                char name[TP_NAME_MAX + 1] = {0};
                int rc = memsrc_read(w->m, cur + (uint64_t)L->tp_name, &name_ptr, 8);
                if (rc == 0 && name_ptr)
                        rc = memsrc_read(w->m, name_ptr, name, TP_NAME_MAX);
                if (rc < 0 && !fatal_read(rc) && name_ptr) /* near the end of a mapping */
                        rc = memsrc_read(w->m, name_ptr, name, 16);
                if (rc < 0)
                        return soft(rc);
                name[TP_NAME_MAX] = 0;
                if (strcmp(name, "_asyncio.Task") == 0) {
                        cls = CLS_TASK;
                        break;
                }
                if (depth == 0) {
                        if (strcmp(name, "weakref") == 0 ||
                            strcmp(name, "weakref.ReferenceType") == 0)
                                cls = CLS_WEAKREF;
                        else if (strcmp(name, "coroutine") == 0 || strcmp(name, "generator") == 0)
                                cls = CLS_CORO;
                        else if (strcmp(name, "_GatheringFuture") == 0)
                                cls = CLS_GATHERING;
                        else if (strcmp(name, "method") == 0)
                                cls = CLS_METHOD;
                        else if (strcmp(name, "TaskGroup") == 0)
                                cls = CLS_TASKGROUP;
                        if (cls != CLS_OTHER)
                                break;
                }
                rc = memsrc_read(w->m, cur + (uint64_t)L->tp_base, &cur, 8);
                if (rc < 0)
                        return soft(rc);
        }
        size_t i = t->n_types < TYPE_SLOTS ? t->n_types++ : (size_t)(type >> 4) % TYPE_SLOTS;
        t->types[i] = (struct type_class){type, cls};
        *out = cls;
        return 0;
}

/* The class of the object at addr (its type read through the snapshot). */
static int object_class(struct pywalk *w, uint64_t addr, uint8_t *out)
{
        uint64_t type;
        if (!addr)
                return 1;
        int rc = pysnap_fetch(&w->snap, addr + (uint64_t)w->L.ob_type, &type, 8);
        if (rc < 0)
                return soft(rc);
        return type_class(w, type, out);
}

/* Find the registry of tasks by name (asyncio.tasks' globals, then the WeakSet's data). */
static int registry_lookup(struct pywalk *w)
{
        struct pytasks *t = w->tasks;
        const struct pylayout *L = &w->L;
        const char *names[2] = {L->tasks == PYL_TASKS_ALL ? "_all_tasks" : "_scheduled_tasks",
                                L->tasks == PYL_TASKS_SCHEDULED ? "_eager_tasks" : NULL};
        for (int i = 0; i < 2; i++) {
                uint64_t obj = 0, set = 0;
                t->registry[i] = 0;
                if (!names[i])
                        continue;
                int rc = pywalk_module_global(w, "asyncio.tasks", names[i], &obj);
                t->weak[i] = i == 0;
                if (rc == 0)
                        rc = t->weak[i] ? pywalk_object_attr(w, obj, "data", &set) : 0;
                if (rc < 0)
                        return rc;
                if (rc == 0)
                        t->registry[i] = t->weak[i] ? set : obj;
        }
        return 0;
}

/* Add the members of the set at `set` (weakrefs to them when `weak`) to t->found. */
static int registry_read(struct pywalk *w, uint64_t set, bool weak)
{
        struct pytasks *t = w->tasks;
        const struct pylayout *L = &w->L;
        uint64_t mask, table;
        int rc = pysnap_fetch(&w->snap, set + (uint64_t)L->set_mask, &mask, 8);
        if (rc == 0)
                rc = pysnap_fetch(&w->snap, set + (uint64_t)L->set_table, &table, 8);
        if (rc < 0)
                return soft(rc);
        uint64_t slots = mask + 1;
        if (!table || slots < 8 || slots > MAX_SET_SLOTS || (slots & mask))
                return 1;
        const uint8_t *ents;
        rc = pysnap_fetch_ptr(&w->snap, table, (size_t)slots * 16, &ents);
        if (rc < 0)
                return soft(rc);
        /* Keys first: the pointer is good until the next read that misses the snapshot. */
        size_t first = t->n_found;
        for (uint64_t i = 0; i < slots; i++) {
                uint64_t key = rd64(ents + 16 * i);
                if (!key)
                        continue;
                if (t->n_found == t->cap_found) {
                        size_t cap = t->cap_found ? 2 * t->cap_found : 256;
                        uint64_t *p = realloc(t->found, cap * sizeof(*p));
                        if (!p)
                                return -ENOMEM;
                        t->found = p;
                        t->cap_found = cap;
                }
                t->found[t->n_found++] = key;
        }
        if (!weak)
                return 0;
        /* The set's dummy key and dead references are dropped here or by the task's type. */
        size_t k = first;
        for (size_t i = first; i < t->n_found; i++) {
                uint8_t cls;
                uint64_t obj;
                rc = object_class(w, t->found[i], &cls);
                if (rc < 0)
                        return rc;
                if (rc || cls != CLS_WEAKREF)
                        continue;
                rc = pysnap_fetch(&w->snap, t->found[i] + (uint64_t)L->wr_object, &obj, 8);
                if (rc < 0)
                        return soft(rc);
                t->found[k++] = obj;
        }
        t->n_found = k;
        return 0;
}

/* The thread running the loop at `loop`: its _thread_id, read now and then. */
static int loop_thread(struct pywalk *w, uint64_t loop, uint64_t *thread_id)
{
        struct pytasks *t = w->tasks;
        struct loop_thread *e = NULL;
        for (size_t i = 0; i < t->n_loops && !e; i++)
                if (t->loops[i].loop == loop)
                        e = &t->loops[i];
        if (e && e->checked + LOOP_RECHECK > w->sample_no) {
                *thread_id = e->thread_id;
                return 0;
        }
        if (!e) {
                e = &t->loops[t->n_loops < MAX_LOOPS ? t->n_loops++
                                                     : (size_t)(loop >> 4) % MAX_LOOPS];
                e->loop = loop;
        }
        uint64_t obj, id = 0;
        int rc = pywalk_object_attr(w, loop, "_thread_id", &obj);
        if (rc == 0 && pywalk_int_read(w, obj, &id) != 0)
                id = 0; /* None: the loop is not running */
        if (rc < 0)
                return rc;
        e->thread_id = id;
        e->checked = w->sample_no;
        *thread_id = id;
        return 0;
}

static size_t name_slot(uint64_t task, uint64_t obj, size_t cap)
{
        return (size_t)((task * 0x9e3779b97f4a7c15ull ^ obj) >> 7) & (cap - 1);
}

/* The pseudo code naming task `task` whose name object is `obj` (str, or 3.12+'s counter). */
static int task_name(struct pywalk *w, uint64_t task, uint64_t obj, const struct pywalk_code **out)
{
        struct pytasks *t = w->tasks;
        if (t->names_n >= NAME_CACHE_MAX)
                names_clear(t); /* ids are never reused: the sampler's caches stay right */
        if (2 * (t->names_n + 1) > t->names_cap) {
                size_t cap = t->names_cap ? 2 * t->names_cap : 1024;
                struct name_entry *v = calloc(cap, sizeof(*v));
                if (!v)
                        return -ENOMEM;
                for (size_t i = 0; i < t->names_cap; i++) {
                        if (!t->names[i].code)
                                continue;
                        size_t j = name_slot(t->names[i].task, t->names[i].obj, cap);
                        while (v[j].code)
                                j = (j + 1) & (cap - 1);
                        v[j] = t->names[i];
                }
                free(t->names);
                t->names = v;
                t->names_cap = cap;
        }
        size_t j = name_slot(task, obj, t->names_cap);
        for (; t->names[j].code; j = (j + 1) & (t->names_cap - 1)) {
                if (t->names[j].task == task && t->names[j].obj == obj) {
                        *out = t->names[j].code;
                        return 0;
                }
        }
        char *name = NULL;
        uint64_t counter;
        int rc = obj ? pywalk_str_read(w, obj, &name) : 1;
        if (rc == 1 && obj && pywalk_int_read(w, obj, &counter) == 0) {
                char buf[32];
                snprintf(buf, sizeof(buf), "Task-%llu", (unsigned long long)counter);
                name = strdup(buf);
                rc = name ? 0 : -ENOMEM;
        }
        if (rc == 1) { /* 3.7: tasks have no names; or one we cannot read */
                name = strdup("Task");
                rc = name ? 0 : -ENOMEM;
        }
        if (rc < 0)
                return rc;
        struct pywalk_code *c = calloc(1, sizeof(*c));
        if (!c) {
                free(name);
                return -ENOMEM;
        }
        *c = (struct pywalk_code){.id = ++w->next_id,
                                  .name = name,
                                  .qualname = NULL,
                                  .file = "<task>",
                                  .first_line = -1,
                                  .task = true};
        t->names[j] = (struct name_entry){task, obj, c};
        t->names_n++;
        *out = c;
        return 0;
}

static int frame_push(struct pytasks *t, const struct pywalk_frame *f)
{
        if (t->n_frames == t->cap_frames) {
                size_t cap = t->cap_frames ? 2 * t->cap_frames : 1024;
                struct pywalk_frame *p = realloc(t->frames, cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                t->frames = p;
                t->cap_frames = cap;
        }
        t->frames[t->n_frames++] = *f;
        return 0;
}

/*
 * Follow the await chain from the coroutine at `coro` into t->frames
 * (outermost first); sets tk->running and tk->root. Returns 0, or a fatal
 * error; a chain that stops reading just ends there.
 */
static int await_chain(struct pywalk *w, uint64_t coro, struct pywalk_task *tk)
{
        struct pytasks *t = w->tasks;
        const struct pylayout *L = &w->L;
        for (unsigned level = 0; coro && level < MAX_AWAIT_DEPTH; level++) {
                uint8_t cls;
                int rc = object_class(w, coro, &cls);
                if (rc != 0 || cls != CLS_CORO)
                        return rc < 0 ? rc : 0;
                const uint8_t *fr;
                uint64_t frame, next = 0;
                bool running, follow;
                if (L->await == PYL_AWAIT_LOCALSPLUS) {
                        int8_t state;
                        frame = coro + (uint64_t)L->gen_iframe;
                        rc = pysnap_fetch(&w->snap, coro + (uint64_t)L->gen_frame_state, &state, 1);
                        if (rc < 0)
                                return soft(rc) < 0 ? rc : 0;
                        if (state > 0)
                                return 0; /* completed or cleared */
                        running = state == 0;
                        /*
                         * Suspended (-1; 3.13: suspended in an await or yield from). What
                         * the stack top holds is checked by its type at the next level.
                         */
                        follow = state == -1;
                } else {
                        rc = pysnap_fetch(&w->snap, coro + (uint64_t)L->gen_frame, &frame, 8);
                        if (rc < 0 || !frame)
                                return rc < 0 && fatal_read(rc) ? rc : 0;
                        running = follow = false;
                }
                size_t need = L->fr_read;
                int32_t ends[] = {L->fr_stacktop + 8, L->fr_valuestack + 8};
                for (size_t i = 0; i < 2; i++)
                        if (L->await != PYL_AWAIT_LOCALSPLUS && ends[i] > (int32_t)need)
                                need = (size_t)ends[i];
                if (L->await == PYL_AWAIT_LOCALSPLUS && (size_t)L->fr_stacktop + 4 > need)
                        need = (size_t)L->fr_stacktop + 4;
                rc = pysnap_fetch_ptr(&w->snap, frame, need, &fr);
                if (rc < 0)
                        return fatal_read(rc) ? rc : 0;
                uint64_t slot = 0;
                if (L->await == PYL_AWAIT_LOCALSPLUS) {
                        int32_t top = rd32(fr + L->fr_stacktop);
                        if (follow && top > 0 && top < MAX_VALUE_STACK)
                                slot = frame + (uint64_t)L->fr_valuestack + 8 * (uint64_t)(top - 1);
                } else {
                        uint8_t st = fr[L->fr_state];
                        running = L->fr_state_kind == PYL_FRSTATE_EXECUTING ? st != 0
                                                                            : st == 0 || st == 2;
                        if (!running && L->await == PYL_AWAIT_STACKTOP) {
                                uint64_t sp = rd64(fr + L->fr_stacktop);
                                if (sp > frame + 8 && sp - frame < 8 * (uint64_t)MAX_VALUE_STACK)
                                        slot = sp - 8;
                        } else if (!running) {
                                int32_t depth = rd32(fr + L->fr_stacktop);
                                uint64_t vs = rd64(fr + L->fr_valuestack);
                                if (vs && depth > 0 && depth < MAX_VALUE_STACK)
                                        slot = vs + 8 * (uint64_t)(depth - 1);
                        }
                }
                struct pywalk_frame f;
                uint8_t copy[FRAME_BUF];
                memcpy(copy, fr, L->fr_read); /* decoding may read past the snapshot */
                rc = pywalk_frame_decode(w, copy, &f);
                if (rc < 0)
                        return fatal_read(rc) ? rc : 0;
                if (rc == 0) {
                        if (level == 0)
                                tk->root = f.code;
                        if ((rc = frame_push(t, &f)) < 0)
                                return rc;
                }
                if (running) {
                        tk->running = true;
                        return 0;
                }
                if (slot && (rc = pysnap_fetch(&w->snap, slot, &next, 8)) < 0)
                        return fatal_read(rc) ? rc : 0;
                coro = next;
        }
        return 0;
}

/* The index + 1 of the task at addr among this sample's (sorted by address), 0 none. */
static uint32_t task_index(const struct pytasks *t, uint64_t addr)
{
        size_t lo = 0, hi = t->n;
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (t->v[mid].addr < addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo < t->n && t->v[lo].addr == addr ? (uint32_t)lo + 1 : 0;
}

static int addr_cmp(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

/* Who awaits whom: awaited tasks, gather's children, TaskGroup members. */
static int link_parents(struct pywalk *w)
{
        struct pytasks *t = w->tasks;
        const struct pylayout *L = &w->L;
        for (size_t i = 0; i < t->n; i++) {
                uint8_t cls;
                int rc = object_class(w, t->waiter[i], &cls);
                if (rc < 0)
                        return rc;
                if (rc == 0 && cls == CLS_TASK) {
                        uint32_t c = task_index(t, t->waiter[i]);
                        if (c && c != i + 1)
                                t->v[c - 1].parent = (uint32_t)i + 1;
                } else if (rc == 0 && cls == CLS_GATHERING) {
                        uint64_t list, n, items;
                        rc = pywalk_object_attr(w, t->waiter[i], "_children", &list);
                        if (rc == 0)
                                rc = memsrc_read(w->m, list + (uint64_t)L->ob_size, &n, 8);
                        if (rc == 0)
                                rc = memsrc_read(w->m, list + (uint64_t)L->list_items, &items, 8);
                        if (rc == 0 && n > MAX_GATHER)
                                n = MAX_GATHER;
                        for (uint64_t k = 0; rc == 0 && items && k < n; k++) {
                                uint64_t child;
                                rc = memsrc_read(w->m, items + 8 * k, &child, 8);
                                uint32_t c = rc == 0 ? task_index(t, child) : 0;
                                if (c && c != i + 1)
                                        t->v[c - 1].parent = (uint32_t)i + 1;
                        }
                        if (rc < 0 && fatal_read(rc))
                                return rc;
                }
                /* A TaskGroup's task: its first done callback is the group's _on_task_done. */
                rc = object_class(w, t->callback[i], &cls);
                if (rc < 0)
                        return rc;
                if (rc == 0 && cls == CLS_METHOD && !t->v[i].parent) {
                        uint64_t self, parent;
                        rc = pysnap_fetch(&w->snap, t->callback[i] + (uint64_t)L->meth_self, &self,
                                          8);
                        if (rc == 0)
                                rc = object_class(w, self, &cls);
                        if (rc == 0 && cls == CLS_TASKGROUP)
                                rc = pywalk_object_attr(w, self, "_parent_task", &parent);
                        else if (rc == 0)
                                rc = 1;
                        uint32_t p = rc == 0 ? task_index(t, parent) : 0;
                        if (p && p != i + 1)
                                t->v[i].parent = p;
                        if (rc < 0 && fatal_read(rc))
                                return rc;
                }
        }
        /* A cycle (the target changed under us) would make a chain endless: cut it. */
        for (size_t i = 0; i < t->n; i++) {
                uint32_t p = t->v[i].parent;
                for (size_t steps = 0; p && steps <= t->n; steps++) {
                        if (p == i + 1) {
                                t->v[i].parent = 0;
                                break;
                        }
                        p = t->v[p - 1].parent;
                }
        }
        return 0;
}

int pytasks_walk(struct pywalk *w)
{
        struct pytasks *t = w->tasks;
        const struct pylayout *L = &w->L;
        t->n = t->n_found = t->n_frames = 0;
        int rc = 0;
        if (w->sample_no >= t->registry_due) {
                rc = registry_lookup(w);
                if (rc < 0)
                        return rc;
                /* Look again soon while asyncio is not imported yet. */
                t->registry_due = w->sample_no + (t->registry[0] ? REGISTRY_RECHECK : 64);
        }
        for (int i = 0; i < 2; i++) {
                if (!t->registry[i])
                        continue;
                rc = registry_read(w, t->registry[i], t->weak[i]);
                if (rc < 0)
                        return rc;
                if (rc)
                        t->registry_due = 0; /* moved or gone: look it up again */
        }
        qsort(t->found, t->n_found, sizeof(*t->found), addr_cmp);
        if (t->n_found > PYWALK_MAX_TASKS)
                t->n_found = PYWALK_MAX_TASKS;
        if (t->cap < t->n_found) {
                struct pywalk_task *v = realloc(t->v, t->n_found * sizeof(*v));
                uint64_t *wt = realloc(t->waiter, t->n_found * sizeof(*wt));
                if (wt)
                        t->waiter = wt;
                uint64_t *cb = realloc(t->callback, t->n_found * sizeof(*cb));
                if (cb)
                        t->callback = cb;
                if (v)
                        t->v = v;
                if (!v || !wt || !cb)
                        return -ENOMEM;
                t->cap = t->n_found;
        }
        size_t *chain_at = malloc((t->n_found + 1) * sizeof(*chain_at));
        if (!chain_at)
                return -ENOMEM;
        for (size_t i = 0; i < t->n_found; i++) {
                uint64_t addr = t->found[i];
                if (i && addr == t->found[i - 1])
                        continue;
                uint8_t cls;
                rc = object_class(w, addr, &cls);
                if (rc < 0)
                        break;
                if (rc || cls != CLS_TASK)
                        continue;
                const uint8_t *p;
                rc = pysnap_fetch_ptr(&w->snap, addr, (size_t)L->task_size, &p);
                if (rc < 0 && fatal_read(rc))
                        break;
                if (rc < 0 || rd32(p + L->fut_state) != 0) /* not pending: done */
                        continue;
                uint64_t loop = rd64(p + L->fut_loop), coro = rd64(p + L->task_coro);
                uint64_t name = L->task_name >= 0 ? rd64(p + L->task_name) : 0;
                t->waiter[t->n] = rd64(p + L->task_fut_waiter);
                t->callback[t->n] = rd64(p + L->fut_callback0);
                struct pywalk_task *tk = &t->v[t->n];
                *tk = (struct pywalk_task){.addr = addr};
                if ((rc = loop_thread(w, loop, &tk->thread_id)) < 0)
                        break;
                if ((rc = task_name(w, addr, name, &tk->name)) < 0)
                        break;
                chain_at[t->n] = t->n_frames;
                if ((rc = await_chain(w, coro, tk)) < 0)
                        break;
                t->n++;
        }
        chain_at[t->n] = t->n_frames;
        /* Frames innermost first, as a thread's; pointers once the buffer stopped growing. */
        for (size_t i = 0; rc >= 0 && i < t->n; i++) {
                struct pywalk_frame *f = t->frames + chain_at[i];
                size_t d = chain_at[i + 1] - chain_at[i];
                for (size_t a = 0, b = d; a + 1 < b; a++, b--) {
                        struct pywalk_frame x = f[a];
                        f[a] = f[b - 1];
                        f[b - 1] = x;
                }
                t->v[i].frames = f;
                t->v[i].depth = (uint32_t)d;
        }
        free(chain_at);
        if (rc < 0 && fatal_read(rc))
                return rc;
        if (rc == -ENOMEM)
                return rc;
        rc = link_parents(w);
        return rc < 0 && (fatal_read(rc) || rc == -ENOMEM) ? rc : 0;
}
