/*
 * pytasks.c - the asyncio tasks of a target, for pyflame-record --async
 * (pywalk_set_tasks(), pywalk_tasks(), pywalk.h).
 *
 * Before 3.14 CPython keeps no list of tasks per loop that a reader can
 * follow; it keeps a registry of every task: the WeakSet
 * asyncio.tasks._all_tasks (3.7-3.11), or the WeakSet _scheduled_tasks and
 * the set _eager_tasks (3.12, 3.13); on 3.6 a WeakSet only a static
 * variable of _asyncio holds (all_tasks, found by its symbol in the
 * module's shared object) and, for the pure-Python Task, the class
 * attribute _PyTask._all_tasks. Each sample reads the registry's hash
 * table, each task's C struct (_asyncio's TaskObj: its loop, coroutine,
 * awaited future, name, first done callback) or, for a pure-Python task
 * (asyncio.tasks._PyTask, where _asyncio is missing), the same from its
 * attributes, and each coroutine's frame,
 * following what a suspended coroutine awaits (the top of its value stack,
 * what cr_await reports) down to the innermost one. A task's loop gives its
 * thread (the loop's _thread_id, set while it runs). Who awaits a task: the
 * task whose awaited future is that task, or a _GatheringFuture listing it
 * in _children (gather), or the TaskGroup whose _on_task_done is its first
 * done callback (that group's _parent_task).
 *
 * The walk runs within the sample (after the threads), level by level for
 * all tasks at once: the registry's table, every weakref, every Task, then
 * per await level every coroutine (3.11+ with its embedded frame; <=3.10 then
 * every frame) and every value-stack top, each a batch of a few
 * process_vm_readv calls whatever the number of tasks, neighbouring ranges
 * read as one span (10,000 tasks: about 22 ms a sample on 3.12,
 * bench/asyncbench.py). Not through the sample's snapshot:
 * tens of thousands of small spans would swamp it. Code objects are the
 * walker's, cached. The registry's place and each loop's thread are looked
 * up by name now and then. Everything is bounded and type-checked: a task
 * that does not read or fit is left out of the sample, never reported as
 * garbage.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#define TPFLAGS_LIST_SUBCLASS  (1ul << 25)
#define TPFLAGS_TUPLE_SUBCLASS (1ul << 26)
#define MAX_TYPE_BASES         16

/* What a type is to us, by its tp_name (and its bases', for tasks). */
enum obj_class {
        CLS_OTHER = 1,
        CLS_TASK,      /* _asyncio.Task or a subclass */
        CLS_WEAKREF,   /* weakref.ref */
        CLS_CORO,      /* coroutine, or a generator (yield from, @types.coroutine) */
        CLS_GATHERING, /* asyncio.tasks._GatheringFuture */
        CLS_METHOD,    /* a bound method */
        CLS_TASKGROUP, /* asyncio.TaskGroup */
        CLS_PYTASK,    /* asyncio.tasks._PyTask (the pure-Python Task) or a subclass */
        CLS_NONE,      /* None: a pure-Python task's attribute that holds nothing */
};

/* The attributes of a pure-Python Task we read (pytask_attrs()), in this order. */
enum { PA_STATE, PA_WAITER, PA_CALLBACKS, PA_CORO, PA_LOOP, PA_NAME, N_PA };
static const char *const pytask_attr_names[N_PA] = {
    [PA_STATE] = "_state", [PA_WAITER] = "_fut_waiter", [PA_CALLBACKS] = "_callbacks",
    [PA_CORO] = "_coro",   [PA_LOOP] = "_loop",         [PA_NAME] = "_name",
};

struct type_class {
        uint64_t type;
        uint8_t cls;
        char name[sizeof(((struct pywalk_task *)0)->awaiting)]; /* its tp_name, cut short */
};

struct loop_thread {
        uint64_t loop, thread_id, checked;
};

/* A task's name (and the pseudo code that carries it), keyed by task and name object. */
struct name_entry {
        uint64_t task, obj;
        struct pywalk_code *code;
};

/*
 * What _asyncio publishes in its .AsyncioDebug section (3.14+): 13 u64,
 * offsets into TaskObj, the interpreter and the thread state.
 */
#define ASYNCIO_DEBUG_LEN 104
struct asyncio_offsets {
        uint64_t at; /* where they were read (0: not yet) */
        uint32_t task_size, task_name, task_awaited_by, task_is_set, task_coro, task_node;
        uint32_t interp_head, ts_head;
};

/* A task found in a list (3.14+), and its thread. */
struct listed {
        uint64_t task, thread_id;
};

struct pytasks {
        struct asyncio_offsets ao; /* 3.14+ */
        bool own_file_checked;     /* 3.14+: the interpreter's file has no .AsyncioDebug */
        struct listed *listed;     /* 3.14+: this sample's tasks from the lists */
        size_t n_listed, cap_listed;
        uint64_t registry[2]; /* the sets of tasks (0: none); weak: registry[0] holds weakrefs */
        bool weak[2];
        uint64_t registry_due; /* sample number of the next lookup by name */
        uint64_t pytask_type;  /* asyncio.tasks._PyTask, looked up with the registry (0: none) */
        uint64_t static_at;    /* 3.6: the address of _asyncio's all_tasks (0: not found yet) */
        uint64_t pending;      /* asyncio.base_futures._PENDING, a pure-Python task's _state */
        struct pywalk_attrs *attrs; /* pure-Python tasks' attribute names and classes */
        struct type_class types[TYPE_SLOTS];
        size_t n_types;
        struct loop_thread loops[MAX_LOOPS];
        size_t n_loops;
        struct name_entry *names; /* open addressing */
        size_t names_cap, names_n;
        struct pywalk_task *v; /* this sample's tasks, sorted by address */
        size_t n, cap;
        uint64_t *found; /* addresses of the tasks in the registry */
        size_t n_found, cap_found;
        struct pywalk_frame *frames; /* every task's chain, back to back */
        size_t n_frames, cap_frames;
        /* Per task (cap entries): awaited future, first done callback, ... */
        uint64_t *waiter, *callback;
        uint64_t *awaited_by;   /* 3.14+: task_awaited_by, a task or a set of them */
        uint8_t *ab_set;        /* 3.14+: task_awaited_by_is_set */
        uint64_t *cur;          /* the coroutine its chain is at (a slot's address in between) */
        uint64_t *frame;        /* that coroutine's frame (first: the task's loop) */
        int8_t *state;          /* 3.11+: that coroutine's gi_frame_state */
        uint8_t *cls;           /* classes of its awaited future and callback */
        uint32_t *active;       /* the tasks whose chain goes on at this level */
        size_t *chain_at;       /* (first: the name object) then where its frames start */
        struct chain_frame *cf; /* frames found, level by level */
        size_t n_cf, cap_cf;
        /* One batch of reads. */
        struct memsrc_iov *iov;
        bool *ok;
        size_t cap_iov;
        uint8_t *buf;
        size_t cap_buf;
        /* The same batch read as spans of neighbouring ranges (span_read). */
        struct by_addr *sorted; /* the ranges in address order, then scratch: 2 x cap_sorted */
        struct memsrc_iov *spans;
        size_t cap_sorted;
        uint8_t *span_buf;
        size_t cap_span_buf;
};

struct by_addr {
        uint64_t addr;
        size_t i;
};

struct chain_frame {
        uint32_t task, level;
        struct pywalk_frame f;
};

int pywalk_set_tasks(struct pywalk *w, char *err, size_t errlen)
{
        const struct pylayout *L = &w->L;
        bool lists = L->tasks == PYL_TASKS_LISTS;
        if (!L->tasks || (!lists && (L->task_size <= 0 || L->is_modules < 0 || L->dict_keys < 0))) {
                snprintf(err, errlen,
                         "--async: asyncio tasks cannot be read on Python %s (pyflame knows the "
                         "task layouts of 3.6 to 3.14): its threads only are recorded",
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
                        /* group is static */
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
        pywalk_attrs_free(t->attrs);
        free(t->listed);
        free(t->awaited_by);
        free(t->ab_set);
        free(t->v);
        free(t->found);
        free(t->frames);
        free(t->waiter);
        free(t->callback);
        free(t->cur);
        free(t->frame);
        free(t->state);
        free(t->cls);
        free(t->active);
        free(t->chain_at);
        free(t->cf);
        free(t->iov);
        free(t->ok);
        free(t->buf);
        free(t->sorted);
        free(t->spans);
        free(t->span_buf);
        free(t);
}

static int soft(int rc)
{
        return fatal_read(rc) ? rc : 1;
}

/* The cache entry of the type at `type`, NULL when it has none. */
static const struct type_class *type_cached(const struct pytasks *t, uint64_t type)
{
        for (size_t i = 0; i < t->n_types; i++)
                if (t->types[i].type == type)
                        return &t->types[i];
        return NULL;
}

/* The class of the type at `type`, cached (types live as long as their objects, mostly). */
static int type_class(struct pywalk *w, uint64_t type, uint8_t *out)
{
        struct pytasks *t = w->tasks;
        const struct pylayout *L = &w->L;
        const struct type_class *c = type_cached(t, type);
        if (c) {
                *out = c->cls;
                return 0;
        }
        if (!type)
                return 1;
        uint8_t cls = CLS_OTHER;
        uint64_t cur = type;
        char first[sizeof(((struct type_class *)0)->name)] = "";
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
                if (depth == 0)
                        snprintf(first, sizeof(first), "%s", name);
                if (strcmp(name, "_asyncio.Task") == 0) {
                        cls = CLS_TASK;
                        break;
                }
                if (t->pytask_type && cur == t->pytask_type) {
                        cls = CLS_PYTASK;
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
                        else if (strcmp(name, "NoneType") == 0)
                                cls = CLS_NONE;
                        if (cls != CLS_OTHER)
                                break;
                }
                rc = memsrc_read(w->m, cur + (uint64_t)L->tp_base, &cur, 8);
                if (rc < 0)
                        return soft(rc);
        }
        size_t i = t->n_types < TYPE_SLOTS ? t->n_types++ : (size_t)(type >> 4) % TYPE_SLOTS;
        t->types[i] = (struct type_class){type, cls, ""};
        memcpy(t->types[i].name, first, sizeof(first));
        *out = cls;
        return 0;
}

/*
 * Find the registry of tasks by name (asyncio.tasks' globals, then the
 * WeakSet's data), and what tells a pure-Python task: its class and the
 * state of a pending one.
 */
static int registry_lookup(struct pywalk *w)
{
        struct pytasks *t = w->tasks;
        const struct pylayout *L = &w->L;
        uint64_t pytask = 0, pending = 0;
        int rc = pywalk_module_global(w, "asyncio.tasks", "_PyTask", &pytask);
        if (rc == 0)
                rc = pywalk_module_global(w, "asyncio.base_futures", "_PENDING", &pending);
        if (rc < 0)
                return rc;
        if (rc > 0)
                pytask = pending = 0;
        if (pytask != t->pytask_type)
                t->n_types = 0; /* classes were told without it */
        t->pytask_type = pytask;
        t->pending = pending;
        if (t->attrs)
                pywalk_attrs_sample(t->attrs, true);
        uint64_t objs[2] = {0, 0};
        if (L->tasks == PYL_TASKS_STATIC) {
                /* 3.6: _asyncio's static all_tasks (once it is loaded), and _PyTask._all_tasks. */
                if (!t->static_at && w->t.pid > 0 &&
                    pyfind_object_symbol(w->t.pid, "_asyncio.", "all_tasks", &t->static_at) != 0)
                        t->static_at = 0;
                rc = t->static_at ? memsrc_read(w->m, t->static_at, &objs[0], 8) : 0;
                if (rc < 0 && fatal_read(rc))
                        return rc;
                rc = pytask ? pywalk_object_attr(w, pytask, "_all_tasks", &objs[1]) : 0;
                t->weak[0] = t->weak[1] = true;
        } else {
                const char *names[2] = {L->tasks == PYL_TASKS_ALL ? "_all_tasks"
                                                                  : "_scheduled_tasks",
                                        L->tasks == PYL_TASKS_SCHEDULED ? "_eager_tasks" : NULL};
                for (int i = 0; i < 2 && rc >= 0; i++)
                        rc = names[i] ? pywalk_module_global(w, "asyncio.tasks", names[i], &objs[i])
                                      : 0;
                t->weak[0] = true;
                t->weak[1] = false;
        }
        if (rc < 0)
                return rc;
        for (int i = 0; i < 2; i++) {
                uint64_t set = 0;
                t->registry[i] = 0;
                rc = objs[i] && t->weak[i] ? pywalk_object_attr(w, objs[i], "data", &set) : 0;
                if (rc < 0)
                        return rc;
                if (rc == 0)
                        t->registry[i] = t->weak[i] ? set : objs[i];
        }
        return 0;
}

/* Add the members of the set at `set` (weakrefs to them when `weak`) to t->found. */

/* Scratch for one batch of reads: n ranges of `each` bytes. */
static int batch_reserve(struct pytasks *t, size_t n, size_t each)
{
        if (n > t->cap_iov) {
                struct memsrc_iov *iov = realloc(t->iov, n * sizeof(*iov));
                if (iov)
                        t->iov = iov;
                bool *ok = realloc(t->ok, n * sizeof(*ok));
                if (ok)
                        t->ok = ok;
                if (!iov || !ok)
                        return -ENOMEM;
                t->cap_iov = n;
        }
        if (n * each > t->cap_buf) {
                uint8_t *b = realloc(t->buf, n * each);
                if (!b)
                        return -ENOMEM;
                t->buf = b;
                t->cap_buf = n * each;
        }
        return 0;
}

/*
 * Ranges at most SPAN_GAP bytes apart are read as one span, up to SPAN_MAX
 * bytes: the kernel pins and copies page by page for each range of a
 * process_vm_readv, so the objects of 10,000 tasks, packed by size in
 * pymalloc's pools, cost their pools' pages once instead of once a range.
 * (A gap shorter than a page lies on a page of one of its two neighbours:
 * a span reads whenever its ranges do.)
 */
#define SPAN_GAP      256
#define SPAN_MAX      (64u << 10)
#define SPAN_MIN_RUNS 16 /* fewer ranges are read as they are */

/* Sort v[0, n) by address (radix, 11 bits a pass over the range used), tmp as scratch. */
static void sort_by_addr(struct by_addr *v, struct by_addr *tmp, size_t n)
{
        uint64_t lo = UINT64_MAX, hi = 0;
        for (size_t i = 0; i < n; i++) {
                lo = v[i].addr < lo ? v[i].addr : lo;
                hi = v[i].addr > hi ? v[i].addr : hi;
        }
        struct by_addr *from = v, *to = tmp;
        for (unsigned shift = 0; shift < 64 && n && (hi - lo) >> shift; shift += 11) {
                size_t at[2048] = {0};
                for (size_t i = 0; i < n; i++)
                        at[((from[i].addr - lo) >> shift) & 2047]++;
                for (size_t d = 0, sum = 0; d < 2048; d++) {
                        size_t c = at[d];
                        at[d] = sum;
                        sum += c;
                }
                for (size_t i = 0; i < n; i++)
                        to[at[((from[i].addr - lo) >> shift) & 2047]++] = from[i];
                struct by_addr *x = from;
                from = to;
                to = x;
        }
        if (from != v)
                memcpy(v, from, n * sizeof(*v));
}

/*
 * Read t->iov[0, n) as spans of neighbouring ranges, copied out to each
 * range's buffer. Returns 0, 1 when that could not be done (no memory, or
 * a span did not read: the caller reads the ranges), or a fatal read
 * error.
 */
static int span_read(struct pywalk *w, size_t n)
{
        struct pytasks *t = w->tasks;
        if (n > t->cap_sorted) {
                struct by_addr *sorted = realloc(t->sorted, 2 * n * sizeof(*sorted));
                if (sorted)
                        t->sorted = sorted;
                struct memsrc_iov *spans = realloc(t->spans, n * sizeof(*spans));
                if (spans)
                        t->spans = spans;
                if (!sorted || !spans)
                        return 1;
                t->cap_sorted = n;
        }
        for (size_t i = 0; i < n; i++)
                t->sorted[i] = (struct by_addr){t->iov[i].addr, i};
        sort_by_addr(t->sorted, t->sorted + n, n);
        /* The spans, with their offsets into span_buf in .buf until it is allocated. */
        size_t n_spans = 0, total = 0;
        uint64_t end = 0;
        for (size_t k = 0; k < n; k++) {
                const struct memsrc_iov *r = &t->iov[t->sorted[k].i];
                struct memsrc_iov *cur = n_spans ? &t->spans[n_spans - 1] : NULL;
                uint64_t r_end = r->addr + r->len;
                if (cur && r->addr <= end + SPAN_GAP &&
                    (r_end > end ? r_end : end) - cur->addr <= SPAN_MAX) {
                        if (r_end > end) {
                                total += r_end - end;
                                end = r_end;
                                cur->len = end - cur->addr;
                        }
                        continue;
                }
                t->spans[n_spans++] =
                    (struct memsrc_iov){r->addr, (void *)(uintptr_t)total, r->len};
                total += r->len;
                end = r_end;
        }
        if (total > t->cap_span_buf) {
                uint8_t *b = realloc(t->span_buf, total);
                if (!b)
                        return 1;
                t->span_buf = b;
                t->cap_span_buf = total;
        }
        for (size_t k = 0; k < n_spans; k++)
                t->spans[k].buf = t->span_buf + (uintptr_t)t->spans[k].buf;
        int rc = memsrc_readv(w->m, t->spans, n_spans);
        if (rc < 0)
                return fatal_read(rc) ? rc : 1;
        /* Each range from its span: in address order, the ranges walk the spans in order. */
        size_t k = 0;
        for (size_t j = 0; j < n; j++) {
                const struct memsrc_iov *r = &t->iov[t->sorted[j].i];
                while (r->addr + r->len > t->spans[k].addr + t->spans[k].len)
                        k++;
                memcpy(r->buf, (uint8_t *)t->spans[k].buf + (r->addr - t->spans[k].addr), r->len);
                t->ok[t->sorted[j].i] = true;
        }
        return 0;
}

/*
 * Read t->iov[0, n) in one batch (a few system calls whatever n); when a
 * range fails, each is read alone. t->ok[i] says which read. Returns 0 or a
 * fatal read error.
 */
static int batch_read(struct pywalk *w, size_t n)
{
        struct pytasks *t = w->tasks;
        if (n >= SPAN_MIN_RUNS) {
                int rc = span_read(w, n);
                if (rc <= 0)
                        return rc;
        }
        int rc = n ? memsrc_readv(w->m, t->iov, n) : 0;
        for (size_t i = 0; i < n; i++)
                t->ok[i] = rc == 0;
        if (rc == 0 || fatal_read(rc))
                return rc == 0 ? 0 : rc;
        for (size_t i = 0; i < n; i++) {
                rc = memsrc_read(w->m, t->iov[i].addr, t->iov[i].buf, t->iov[i].len);
                if (rc < 0 && fatal_read(rc))
                        return rc;
                t->ok[i] = rc == 0;
        }
        return 0;
}

/* The class of the object whose first bytes (its header) are at `obj`. */
static int header_class(struct pywalk *w, const uint8_t *obj, uint8_t *out)
{
        int rc = type_class(w, rd64(obj + w->L.ob_type), out);
        return rc > 0 ? (*out = CLS_OTHER, 0) : rc;
}

/*
 * The array v (*cap elements of `each` bytes) with room for one more after
 * its n: v itself, or v moved; NULL when out of memory (v kept as it was).
 */
static void *grow(void *v, size_t *cap, size_t n, size_t each)
{
        if (n < *cap)
                return v;
        size_t c = *cap ? 2 * *cap : 256;
        void *p = realloc(v, c * each);
        if (p)
                *cap = c;
        return p;
}

static int found_push(struct pytasks *t, uint64_t addr)
{
        uint64_t *v = grow(t->found, &t->cap_found, t->n_found, sizeof(*v));
        if (!v)
                return -ENOMEM;
        t->found = v;
        t->found[t->n_found++] = addr;
        return 0;
}

/* Add the members of the set at `set` (weakrefs to them when `weak`) to t->found. */
static int registry_read(struct pywalk *w, uint64_t set, bool weak)
{
        struct pytasks *t = w->tasks;
        const struct pylayout *L = &w->L;
        uint64_t mask, table;
        int rc = memsrc_read(w->m, set + (uint64_t)L->set_mask, &mask, 8);
        if (rc == 0)
                rc = memsrc_read(w->m, set + (uint64_t)L->set_table, &table, 8);
        if (rc < 0)
                return soft(rc);
        uint64_t slots = mask + 1;
        if (!table || slots < 8 || slots > MAX_SET_SLOTS || (slots & mask))
                return 1;
        if ((rc = batch_reserve(t, 1, (size_t)slots * 16)) < 0)
                return rc;
        rc = memsrc_read(w->m, table, t->buf, (size_t)slots * 16);
        if (rc < 0)
                return soft(rc);
        size_t first = t->n_found;
        for (uint64_t i = 0; i < slots; i++) {
                uint64_t key = rd64(t->buf + 16 * i);
                if (key && (rc = found_push(t, key)) < 0)
                        return rc;
        }
        if (!weak)
                return 0;
        /* Each weakref's header and referent in one batch; the set's dummy key drops out. */
        size_t n = t->n_found - first, each = (size_t)L->wr_object + 8;
        if ((rc = batch_reserve(t, n, each)) < 0)
                return rc;
        for (size_t i = 0; i < n; i++)
                t->iov[i] = (struct memsrc_iov){t->found[first + i], t->buf + i * each, each};
        if ((rc = batch_read(w, n)) < 0)
                return rc;
        size_t k = first;
        for (size_t i = 0; i < n; i++) {
                uint8_t cls;
                const uint8_t *wr = t->buf + i * each;
                if (!t->ok[i])
                        continue;
                if ((rc = header_class(w, wr, &cls)) < 0)
                        return rc;
                if (cls == CLS_WEAKREF && rd64(wr + L->wr_object))
                        t->found[k++] = rd64(wr + L->wr_object);
        }
        t->n_found = k;
        return 0;
}

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
        bool made_up = false; /* a name CPython made up: "Task-<counter>" */
        int rc = obj ? pywalk_str_read(w, obj, &name) : 1;
        if (rc == 1 && obj && pywalk_int_read(w, obj, &counter) == 0) {
                /* 3.12+: the counter, formatted only when the name is asked for */
                char buf[32];
                snprintf(buf, sizeof(buf), "Task-%llu", (unsigned long long)counter);
                name = strdup(buf);
                rc = name ? 0 : -ENOMEM;
                made_up = true;
        } else if (rc == 0) {
                /* 3.8-3.11 format it at once; a name given in that form is taken as one */
                made_up = strncmp(name, "Task-", 5) == 0 && name[5] &&
                          strspn(name + 5, "0123456789") == strlen(name + 5);
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
                                  .task = true,
                                  .group = made_up ? "Task-N" : NULL};
        t->names[j] = (struct name_entry){task, obj, c};
        t->names_n++;
        *out = c;
        return 0;
}

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

/* A frame of task `task`'s chain at await level `level` (sorted into chains at the end). */
static int frame_push(struct pytasks *t, uint32_t task, uint32_t level,
                      const struct pywalk_frame *f)
{
        if (t->n_cf == t->cap_cf) {
                size_t cap = t->cap_cf ? 2 * t->cap_cf : 1024;
                struct chain_frame *p = realloc(t->cf, cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                t->cf = p;
                t->cap_cf = cap;
        }
        t->cf[t->n_cf++] = (struct chain_frame){task, level, *f};
        return 0;
}

/*
 * Follow every task's await chain from its coroutine (t->cur), one level
 * for all tasks at a time: each level is a batch of coroutine reads (3.11+:
 * the coroutine with its embedded frame; <=3.10: the coroutine, then a batch
 * of its frames) and a batch of value-stack tops, what each awaits.
 */
static int await_chains(struct pywalk *w)
{
        struct pytasks *t = w->tasks;
        const struct pylayout *L = &w->L;
        /* 3.14+: stackpointer, a pointer; the slots are tagged _PyStackRefs. */
        bool sp_ptr = L->await == PYL_AWAIT_STACKPOINTER;
        bool embedded = L->await == PYL_AWAIT_LOCALSPLUS || sp_ptr;
        size_t need = L->fr_read;
        if (embedded && (size_t)L->fr_stacktop + (sp_ptr ? 8 : 4) > need)
                need = (size_t)L->fr_stacktop + (sp_ptr ? 8 : 4);
        for (size_t i = 0; !embedded && i < 2; i++) {
                int32_t end = (i ? L->fr_valuestack : L->fr_stacktop) + 8;
                if ((size_t)end > need)
                        need = (size_t)end;
        }
        size_t head = embedded
                          ? (size_t)L->gen_iframe + need
                          : (size_t)(L->gen_frame > L->ob_type ? L->gen_frame : L->ob_type) + 8;
        int rc = 0;
        for (uint32_t level = 0; level < MAX_AWAIT_DEPTH && rc == 0; level++) {
                size_t n = 0;
                for (size_t i = 0; i < t->n; i++)
                        if (t->cur[i])
                                t->active[n++] = (uint32_t)i;
                if (!n)
                        break;
                if ((rc = batch_reserve(t, n, head > need ? head : need)) < 0)
                        return rc;
                for (size_t k = 0; k < n; k++)
                        t->iov[k] =
                            (struct memsrc_iov){t->cur[t->active[k]], t->buf + k * head, head};
                if ((rc = batch_read(w, n)) < 0)
                        return rc;
                /* The frame of each: inside the coroutine (3.11+), else where gi_frame points. */
                for (size_t k = 0; k < n; k++) {
                        uint32_t i = t->active[k];
                        const uint8_t *co = t->buf + k * head;
                        uint8_t cls = CLS_OTHER;
                        if (t->ok[k] && (rc = header_class(w, co, &cls)) < 0)
                                return rc;
                        t->frame[i] = 0;
                        if (cls != CLS_CORO)
                                continue;
                        if (embedded) {
                                int8_t state = (int8_t)co[L->gen_frame_state];
                                if (state > 0)
                                        continue; /* completed or cleared */
                                t->frame[i] = t->cur[i] + (uint64_t)L->gen_iframe;
                                t->state[i] = state;
                        } else {
                                t->frame[i] = rd64(co + L->gen_frame);
                        }
                }
                uint8_t *frames = t->buf; /* 3.11+: the frames are in the coroutines read */
                size_t stride = head, off = embedded ? (size_t)L->gen_iframe : 0;
                if (!embedded) {
                        for (size_t k = 0; k < n; k++) {
                                uint32_t i = t->active[k];
                                t->iov[k] = (struct memsrc_iov){t->frame[i], t->buf + k * need,
                                                                t->frame[i] ? need : 0};
                        }
                        if ((rc = batch_read(w, n)) < 0)
                                return rc;
                        stride = need;
                }
                for (size_t k = 0; k < n; k++) {
                        uint32_t i = t->active[k];
                        const uint8_t *fr = frames + k * stride + off;
                        uint64_t slot = 0;
                        t->cur[i] = 0;
                        if (!t->frame[i] || (!embedded && !t->ok[k]))
                                continue;
                        bool running, follow;
                        if (embedded) {
                                running = t->state[i] == 0;
                                /* Suspended (-1; 3.13: in an await): what it awaits is on top. */
                                follow = t->state[i] == -1;
                                uint64_t sp = sp_ptr ? rd64(fr + L->fr_stacktop) : 0;
                                int32_t top = sp_ptr ? 0 : rd32(fr + L->fr_stacktop);
                                if (sp_ptr && follow && sp > t->frame[i] + 8 &&
                                    sp - t->frame[i] < 8 * (uint64_t)MAX_VALUE_STACK)
                                        slot = sp - 8;
                                else if (follow && top > 0 && top < MAX_VALUE_STACK)
                                        slot = t->frame[i] + (uint64_t)L->fr_valuestack +
                                               8 * (uint64_t)(top - 1);
                        } else {
                                uint8_t st = fr[L->fr_state];
                                running = L->fr_state_kind == PYL_FRSTATE_EXECUTING
                                              ? st != 0
                                              : st == 0 || st == 2;
                                uint64_t f0 = t->frame[i];
                                if (!running && L->await == PYL_AWAIT_STACKTOP) {
                                        uint64_t sp = rd64(fr + L->fr_stacktop);
                                        if (sp > f0 + 8 && sp - f0 < 8 * (uint64_t)MAX_VALUE_STACK)
                                                slot = sp - 8;
                                } else if (!running) {
                                        int32_t depth = rd32(fr + L->fr_stacktop);
                                        uint64_t vs = rd64(fr + L->fr_valuestack);
                                        if (vs && depth > 0 && depth < MAX_VALUE_STACK)
                                                slot = vs + 8 * (uint64_t)(depth - 1);
                                }
                        }
                        struct pywalk_frame f;
                        rc = pywalk_frame_decode(w, fr, &f);
                        if (rc < 0 && fatal_read(rc))
                                return rc;
                        if (rc != 0) {
                                /*
                                 * The chain ends here, as at a link that is no
                                 * coroutine: its levels must stay 0..depth-1
                                 * (a frame left out and the next one pushed
                                 * made a hole that the frames were written
                                 * past; found by fuzz_pytasks).
                                 */
                                rc = 0;
                                continue;
                        }
                        if (level == 0)
                                t->v[i].root = f.code;
                        if ((rc = frame_push(t, i, level, &f)) < 0)
                                return rc;
                        if (running)
                                t->v[i].running = true;
                        else
                                t->cur[i] = slot; /* the slot's address, for now */
                }
                /* What each awaits: the value on top of its stack. */
                size_t m = 0;
                for (size_t k = 0; k < n; k++) {
                        uint32_t i = t->active[k];
                        if (t->cur[i])
                                t->active[m++] = i;
                }
                if ((rc = batch_reserve(t, m, 8)) < 0)
                        return rc;
                for (size_t k = 0; k < m; k++)
                        t->iov[k] = (struct memsrc_iov){t->cur[t->active[k]], t->buf + 8 * k, 8};
                if ((rc = batch_read(w, m)) < 0)
                        return rc;
                for (size_t k = 0; k < m; k++) {
                        uint64_t v = t->ok[k] ? rd64(t->buf + 8 * k) : 0;
                        /* A _PyStackRef: an object with its tag bits, or an int or NULL. */
                        if (sp_ptr)
                                v = (v & 3) == 3 || v <= 3 ? 0 : v & L->fr_code_mask;
                        t->cur[t->active[k]] = v;
                }
        }
        return rc;
}

static int link_awaited_by(struct pywalk *w);

/* Who awaits whom: awaited tasks, gather's children, TaskGroup members. */
static int link_parents(struct pywalk *w)
{
        struct pytasks *t = w->tasks;
        const struct pylayout *L = &w->L;
        /* The types of every awaited future and first done callback, in one batch. */
        size_t each = (size_t)L->ob_type + 8;
        int rc = batch_reserve(t, 2 * t->n, each);
        if (rc < 0)
                return rc;
        for (size_t i = 0; i < t->n; i++) {
                t->iov[2 * i] = (struct memsrc_iov){t->waiter[i], t->buf + 2 * i * each,
                                                    t->waiter[i] ? each : 0};
                t->iov[2 * i + 1] = (struct memsrc_iov){t->callback[i], t->buf + (2 * i + 1) * each,
                                                        t->callback[i] ? each : 0};
        }
        if ((rc = batch_read(w, 2 * t->n)) < 0)
                return rc;
        for (size_t i = 0; i < t->n; i++) {
                uint8_t wcls = CLS_OTHER, ccls = CLS_OTHER;
                if (t->waiter[i] && t->ok[2 * i] &&
                    (rc = header_class(w, t->buf + 2 * i * each, &wcls)) < 0)
                        return rc;
                if (t->callback[i] && t->ok[2 * i + 1] &&
                    (rc = header_class(w, t->buf + (2 * i + 1) * each, &ccls)) < 0)
                        return rc;
                t->cls[i] = (uint8_t)(wcls << 4 | ccls);
                const struct type_class *c =
                    t->waiter[i] && t->ok[2 * i]
                        ? type_cached(t, rd64(t->buf + 2 * i * each + L->ob_type))
                        : NULL;
                if (c && wcls != CLS_NONE)
                        memcpy(t->v[i].awaiting, c->name, sizeof(c->name));
        }
        if (L->tasks == PYL_TASKS_LISTS && (rc = link_awaited_by(w)) < 0)
                return rc;
        for (size_t i = 0; i < t->n && L->tasks != PYL_TASKS_LISTS; i++) {
                uint8_t wcls = t->cls[i] >> 4, ccls = t->cls[i] & 15;
                if (wcls == CLS_TASK || wcls == CLS_PYTASK) {
                        uint32_t c = task_index(t, t->waiter[i]);
                        if (c && c != i + 1) {
                                t->v[c - 1].parent = (uint32_t)i + 1;
                                t->v[i].awaits = c;
                        }
                } else if (wcls == CLS_GATHERING) {
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
                if (ccls == CLS_METHOD && !t->v[i].parent) {
                        uint64_t self, type, parent;
                        uint8_t cls;
                        rc = memsrc_read(w->m, t->callback[i] + (uint64_t)L->meth_self, &self, 8);
                        if (rc == 0)
                                rc = memsrc_read(w->m, self + (uint64_t)L->ob_type, &type, 8);
                        if (rc == 0)
                                rc = type_class(w, type, &cls);
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

/*
 * The fields of the pure-Python task at `addr` (asyncio.tasks._PyTask, used
 * where _asyncio is missing), from its attributes, into entry k of the
 * per-task arrays as pytasks_walk() fills them for a C task. Returns 0, 1
 * when it is no pending task or does not read, or a fatal read error.
 */
static int pytask_fields(struct pywalk *w, uint64_t addr, size_t k)
{
        struct pytasks *t = w->tasks;
        const struct pylayout *L = &w->L;
        uint64_t a[N_PA];
        if (!t->attrs && !(t->attrs = pywalk_attrs_new()))
                return -ENOMEM;
        int rc = pywalk_object_attrs(w, addr, pytask_attr_names, N_PA, t->attrs, a);
        if (rc)
                return rc < 0 ? soft(rc) : 1;
        /* _state is the class attribute _PENDING until the task is done or cancelled. */
        if ((a[PA_STATE] && a[PA_STATE] != t->pending) || !a[PA_CORO] || !a[PA_LOOP])
                return 1;
        /* The first done callback: _callbacks[0], a (callback, context) tuple (3.7+). */
        uint64_t callback = 0, flags;
        uint8_t head[64];
        size_t list_head = (size_t)L->list_items + 8, tuple_head = (size_t)L->ob_size + 16;
        if (a[PA_CALLBACKS] && list_head <= sizeof(head) && tuple_head <= sizeof(head)) {
                uint64_t n = 0, item = 0;
                rc = memsrc_read(w->m, a[PA_CALLBACKS], head, list_head);
                if (rc == 0)
                        rc = pywalk_type_flags(w, rd64(head + L->ob_type), &flags);
                if (rc == 0 && (flags & TPFLAGS_LIST_SUBCLASS)) {
                        n = rd64(head + L->ob_size);
                        item = rd64(head + L->list_items);
                }
                if (rc == 0 && n > 0 && n < (1u << 20) && item)
                        rc = memsrc_read(w->m, item, &item, 8);
                else
                        item = 0;
                /* A tuple's items follow its size (through 3.13). */
                if (rc == 0 && item)
                        rc = memsrc_read(w->m, item, head, tuple_head);
                if (rc == 0 && item)
                        rc = pywalk_type_flags(w, rd64(head + L->ob_type), &flags);
                if (rc == 0 && item && (flags & TPFLAGS_TUPLE_SUBCLASS) &&
                    rd64(head + L->ob_size) >= 1)
                        callback = rd64(head + L->ob_size + 8);
                if (rc < 0 && fatal_read(rc))
                        return rc;
        }
        t->v[k] = (struct pywalk_task){.addr = addr};
        t->waiter[k] = a[PA_WAITER];
        t->callback[k] = callback;
        t->cur[k] = a[PA_CORO];
        t->frame[k] = a[PA_LOOP];
        t->chain_at[k] = a[PA_NAME];
        return 0;
}

/* Room for n tasks in every per-task array. */
static int tasks_reserve(struct pytasks *t, size_t n)
{
        if (n <= t->cap)
                return 0;
        struct pywalk_task *v = realloc(t->v, n * sizeof(*v));
        if (v)
                t->v = v;
        uint64_t **arrays[] = {&t->waiter, &t->callback, &t->cur, &t->frame, &t->awaited_by};
        bool ok = v != NULL;
        for (size_t a = 0; a < sizeof(arrays) / sizeof(arrays[0]); a++) {
                uint64_t *p = realloc(*arrays[a], n * sizeof(*p));
                if (p)
                        *arrays[a] = p;
                ok &= p != NULL;
        }
        uint32_t *act = realloc(t->active, n * sizeof(*act));
        if (act)
                t->active = act;
        int8_t *st = realloc(t->state, n);
        if (st)
                t->state = st;
        uint8_t *cls = realloc(t->cls, n);
        if (cls)
                t->cls = cls;
        uint8_t *ab_set = realloc(t->ab_set, n);
        if (ab_set)
                t->ab_set = ab_set;
        size_t *at = realloc(t->chain_at, (n + 1) * sizeof(*at));
        if (at)
                t->chain_at = at;
        if (!ok || !act || !st || !cls || !at || !ab_set)
                return -ENOMEM;
        t->cap = n;
        return 0;
}

/* ---- 3.14+: the per-thread lists of tasks ---------------------------------- */

/*
 * _asyncio's offsets, once it is loaded: its .AsyncioDebug section (in its
 * shared object, else built into the interpreter's file), validated against
 * the sizes it gives. Returns 0 (t->ao.at set when found and sound), or a
 * fatal read error.
 */
static int asyncio_offsets(struct pywalk *w)
{
        struct pytasks *t = w->tasks;
        const struct pylayout *L = &w->L;
        uint64_t at = w->t.asyncio_debug_addr, size = ASYNCIO_DEBUG_LEN;
        /* The interpreter's own file is looked at once: it does not change. */
        bool own_file = !t->own_file_checked;
        t->own_file_checked = true;
        if (!at && (w->t.pid <= 0 || pyfind_object_section(w->t.pid, "_asyncio.", ".AsyncioDebug",
                                                           own_file, &at, &size) != 0))
                return 0;
        uint64_t d[ASYNCIO_DEBUG_LEN / 8];
        int rc = size >= ASYNCIO_DEBUG_LEN ? memsrc_read(w->m, at, d, sizeof(d)) : 1;
        if (rc != 0)
                return rc < 0 && fatal_read(rc) ? rc : 0;
        /* task: size name awaited_by is_task is_set coro node; interp: size head; tstate: size
         * running_loop running_task head */
        uint64_t task = d[0], interp = d[7], ts = d[9];
        bool ok = task >= (uint64_t)L->ob_type + 8 && task <= 4096 && interp <= (1u << 20) &&
                  ts <= (1u << 16);
        for (int i = 1; i <= 6; i++)
                ok &= d[i] + (i == 3 || i == 4 ? 1 : i == 6 ? 16 : 8) <= task;
        ok &= d[8] + 16 <= interp && d[12] + 16 <= ts && d[10] + 8 <= ts && d[11] + 8 <= ts;
        if (!ok)
                return 0; /* not what this reader knows: no tasks */
        t->ao = (struct asyncio_offsets){.at = at,
                                         .task_size = (uint32_t)task,
                                         .task_name = (uint32_t)d[1],
                                         .task_awaited_by = (uint32_t)d[2],
                                         .task_is_set = (uint32_t)d[4],
                                         .task_coro = (uint32_t)d[5],
                                         .task_node = (uint32_t)d[6],
                                         .interp_head = (uint32_t)d[8],
                                         .ts_head = (uint32_t)d[12]};
        return 0;
}

static int listed_push(struct pytasks *t, uint64_t task, uint64_t thread_id)
{
        struct listed *v = grow(t->listed, &t->cap_listed, t->n_listed, sizeof(*v));
        if (!v)
                return -ENOMEM;
        t->listed = v;
        t->listed[t->n_listed++] = (struct listed){task, thread_id};
        return 0;
}

/*
 * The tasks of the circular list whose head (a struct llist_node {next,
 * prev}) is at `head`: each node is a task's task_node. A list that does
 * not come back to its head within PYWALK_MAX_TASKS nodes, or leads
 * nowhere, ends there (it changed under us).
 */
static int list_walk(struct pywalk *w, uint64_t head, uint64_t thread_id)
{
        struct pytasks *t = w->tasks;
        uint64_t node;
        int rc = memsrc_read(w->m, head, &node, 8);
        for (size_t k = 0; rc == 0 && node && node != head && k < PYWALK_MAX_TASKS; k++) {
                if (node < t->ao.task_node || node % 8)
                        break;
                if ((rc = listed_push(t, node - t->ao.task_node, thread_id)) < 0)
                        return rc;
                uint64_t next;
                rc = memsrc_read(w->m, node, &next, 8);
                if (rc == 0 && next == node)
                        break; /* a node that leads to itself */
                node = next;
        }
        return rc < 0 && fatal_read(rc) ? rc : 0;
}

static int listed_cmp(const void *a, const void *b)
{
        uint64_t x = ((const struct listed *)a)->task, y = ((const struct listed *)b)->task;
        return (x > y) - (x < y);
}

/* Every pending task of the main interpreter, from each thread state's list and its own. */
static int lists_read(struct pywalk *w)
{
        struct pytasks *t = w->tasks;
        const struct pylayout *L = &w->L;
        t->n_listed = 0;
        uint64_t interp, ts;
        int rc = memsrc_read(w->m, w->t.runtime_addr + (uint64_t)L->rt_interp_head, &interp, 8);
        if (rc == 0)
                rc = memsrc_read(w->m, interp + (uint64_t)L->is_threads_head, &ts, 8);
        for (size_t k = 0; rc == 0 && ts && k < PYWALK_MAX_THREADS; k++) {
                uint64_t id = 0, next = 0;
                rc = memsrc_read(w->m, ts + (uint64_t)L->ts_thread_id, &id, 8);
                if (rc == 0)
                        rc = memsrc_read(w->m, ts + (uint64_t)L->ts_next, &next, 8);
                if (rc == 0)
                        rc = list_walk(w, ts + t->ao.ts_head, id);
                ts = next;
        }
        if (rc == 0)
                rc = list_walk(w, interp + t->ao.interp_head, 0);
        if (rc < 0 && fatal_read(rc))
                return rc;
        if (t->n_listed > 1)
                qsort(t->listed, t->n_listed, sizeof(*t->listed), listed_cmp);
        t->n_found = 0;
        for (size_t i = 0; i < t->n_listed; i++) {
                if (i && t->listed[i].task == t->listed[i - 1].task)
                        continue;
                t->listed[t->n_found] = t->listed[i];
                if ((rc = found_push(t, t->listed[i].task)) < 0)
                        return rc;
        }
        return 0;
}

/*
 * 3.14+: who awaits whom, from each task's awaited_by (the tasks awaiting
 * it: one object, or a set of them). The first that is a task of this
 * sample is its parent.
 */
static int link_awaited_by(struct pywalk *w)
{
        struct pytasks *t = w->tasks;
        const struct pylayout *L = &w->L;
        for (size_t i = 0; i < t->n; i++) {
                uint64_t ab = t->awaited_by[i];
                uint32_t p = 0;
                if (ab && !t->ab_set[i]) {
                        p = task_index(t, ab);
                } else if (ab) {
                        uint64_t mask, table;
                        uint8_t ents[16 * 64];
                        int rc = memsrc_read(w->m, ab + (uint64_t)L->set_mask, &mask, 8);
                        if (rc == 0)
                                rc = memsrc_read(w->m, ab + (uint64_t)L->set_table, &table, 8);
                        /* A set of awaiting tasks is small: 8 slots, more when it grew. */
                        if (rc == 0 && (mask + 1 > 64 || (mask & (mask + 1))))
                                rc = 1;
                        if (rc == 0)
                                rc = memsrc_read(w->m, table, ents, 16 * (size_t)(mask + 1));
                        for (uint64_t k = 0; rc == 0 && k <= mask && !p; k++) {
                                uint64_t key = rd64(ents + 16 * k), hash = rd64(ents + 16 * k + 8);
                                if (key && hash != UINT64_MAX) /* not empty, not a dummy */
                                        p = task_index(t, key);
                        }
                        if (rc < 0 && fatal_read(rc))
                                return rc;
                }
                if (p && p != i + 1) {
                        t->v[i].parent = p;
                        /* Awaited directly: the parent's awaited future is this task. */
                        if (t->waiter[p - 1] == t->v[i].addr)
                                t->v[p - 1].awaits = (uint32_t)i + 1;
                }
        }
        return 0;
}

int pytasks_walk(struct pywalk *w)
{
        struct pytasks *t = w->tasks;
        const struct pylayout *L = &w->L;
        t->n = t->n_found = t->n_cf = t->n_frames = 0;
        int rc = 0;
        if (t->attrs)
                pywalk_attrs_sample(t->attrs, false);
        bool lists = L->tasks == PYL_TASKS_LISTS;
        if (lists && !t->ao.at && w->sample_no >= t->registry_due) {
                /* Look now and then until _asyncio is loaded; then it stays where it is. */
                if ((rc = asyncio_offsets(w)) < 0)
                        return rc;
                t->registry_due = w->sample_no + 64;
        } else if (!lists && w->sample_no >= t->registry_due) {
                rc = registry_lookup(w);
                if (rc < 0)
                        return rc;
                /* Look again soon while asyncio is not imported yet. */
                t->registry_due = w->sample_no + (t->registry[0] ? REGISTRY_RECHECK : 64);
        }
        if (lists && t->ao.at && (rc = lists_read(w)) < 0)
                return rc;
        for (int i = 0; i < 2 && !lists; i++) {
                if (!t->registry[i])
                        continue;
                rc = registry_read(w, t->registry[i], t->weak[i]);
                if (rc < 0)
                        return rc;
                if (rc)
                        t->registry_due = 0; /* moved or gone: look it up again */
        }
        if (t->n_found > 1 && !lists) /* none found: t->found may be NULL: no qsort */
                qsort(t->found, t->n_found, sizeof(*t->found), addr_cmp);
        size_t k = 0;
        for (size_t i = 0; i < t->n_found && k < PYWALK_MAX_TASKS; i++)
                if (!k || t->found[i] != t->found[k - 1])
                        t->found[k++] = t->found[i];
        t->n_found = k;
        if (k == 0)
                return 0; /* no task yet (asyncio imported, no loop running): nothing is sized */
        /* Every candidate's Task struct in one batch. */
        size_t each = lists ? t->ao.task_size : (size_t)L->task_size;
        if ((rc = tasks_reserve(t, t->n_found)) < 0 ||
            (rc = batch_reserve(t, t->n_found, each)) < 0)
                return rc;
        for (size_t i = 0; i < t->n_found; i++)
                t->iov[i] = (struct memsrc_iov){t->found[i], t->buf + i * each, each};
        if ((rc = batch_read(w, t->n_found)) < 0)
                return rc;
        for (size_t i = 0; i < t->n_found; i++) {
                const uint8_t *p = t->buf + i * each;
                uint8_t cls;
                if (!t->ok[i])
                        continue;
                if ((rc = header_class(w, p, &cls)) < 0)
                        return rc;
                if (cls == CLS_PYTASK) {
                        if ((rc = pytask_fields(w, t->found[i], t->n)) < 0)
                                return rc;
                        t->n += rc == 0;
                        continue;
                }
                if (cls != CLS_TASK)
                        continue;
                struct pywalk_task *tk = &t->v[t->n];
                *tk = (struct pywalk_task){.addr = t->found[i]};
                if (lists) {
                        /* Listed tasks are pending ones; each list is its thread's. */
                        const struct asyncio_offsets *a = &t->ao;
                        tk->thread_id = t->listed[i].thread_id;
                        t->waiter[t->n] =
                            L->task_fut_waiter >= 0 ? rd64(p + L->task_fut_waiter) : 0;
                        t->callback[t->n] = 0;
                        t->awaited_by[t->n] = rd64(p + a->task_awaited_by);
                        t->ab_set[t->n] = p[a->task_is_set] != 0;
                        t->cur[t->n] = rd64(p + a->task_coro);
                        t->frame[t->n] = 0;
                        t->chain_at[t->n] = rd64(p + a->task_name);
                        t->n++;
                        continue;
                }
                if (rd32(p + L->fut_state) != 0) /* done */
                        continue;
                t->waiter[t->n] = rd64(p + L->task_fut_waiter);
                t->callback[t->n] = L->fut_callback0 >= 0 ? rd64(p + L->fut_callback0) : 0;
                t->cur[t->n] = rd64(p + L->task_coro);
                /* The loop's fut_loop and the name: kept here, read below (they read). */
                t->frame[t->n] = rd64(p + L->fut_loop);
                t->chain_at[t->n] = L->task_name >= 0 ? rd64(p + L->task_name) : 0;
                t->n++;
        }
        for (size_t i = 0; i < t->n; i++) {
                if (!lists && (rc = loop_thread(w, t->frame[i], &t->v[i].thread_id)) < 0)
                        return rc;
                if ((rc = task_name(w, t->v[i].addr, t->chain_at[i], &t->v[i].name)) < 0)
                        return rc;
        }
        if ((rc = await_chains(w)) < 0)
                return rc;
        /* The chains' frames, task by task, innermost first (as a thread's). */
        if (t->n_cf > t->cap_frames) {
                struct pywalk_frame *f = realloc(t->frames, t->n_cf * sizeof(*f));
                if (!f)
                        return -ENOMEM;
                t->frames = f;
                t->cap_frames = t->n_cf;
        }
        memset(t->chain_at, 0, (t->n + 1) * sizeof(*t->chain_at));
        for (size_t i = 0; i < t->n_cf; i++)
                t->chain_at[t->cf[i].task + 1]++;
        for (size_t i = 0; i < t->n; i++) {
                t->chain_at[i + 1] += t->chain_at[i];
                /* No chain at all (every coroutine unreadable): no array yet. */
                t->v[i].frames = t->frames ? t->frames + t->chain_at[i] : NULL;
                t->v[i].depth = (uint32_t)(t->chain_at[i + 1] - t->chain_at[i]);
        }
        /* Levels were pushed in order, 0..depth-1 for each task: the deepest goes first. */
        for (size_t i = 0; i < t->n_cf; i++) {
                struct pywalk_task *tk = &t->v[t->cf[i].task];
                assert(t->cf[i].level < tk->depth);
                tk->frames[tk->depth - 1 - t->cf[i].level] = t->cf[i].f;
        }
        t->n_frames = t->n_cf;
        rc = link_parents(w);
        return rc < 0 && (fatal_read(rc) || rc == -ENOMEM) ? rc : 0;
}
