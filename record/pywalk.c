/*
 * pywalk.c - one walker for every CPython version: interpreters -> threads ->
 * frames, driven by a struct pylayout (see pywalk.h, pylayout.h).
 *
 * Reads are what a sample costs (one process_vm_readv is a few microseconds,
 * the walk itself far less), so every read of the walk goes through a
 * per-sample snapshot of spans: a read not yet in the snapshot is issued and
 * kept; the spans a sample used are read again, all in one batched call, at
 * the start of the next sample. A thread whose stack did not change shape
 * then costs no read beyond that batch: its tstate, the used part of its
 * current data-stack chunk (3.11+, where frames live), the C-stack entry
 * frames and generator frames outside it, or its heap frames (<=3.10). Spans
 * read in the same sample are never mixed with older copies; spans that lie
 * close together are merged for the next batch. Code objects are decoded
 * once into a cache keyed by address; a hit costs no read and is re-checked
 * against the frame's instruction pointer, so a code object freed and
 * replaced at the same address is noticed.
 *
 * Everything read from the target is untrusted: loops are bounded, frame and
 * thread chains are checked for cycles, object types, string kinds and
 * lengths are validated; anything inconsistent marks the thread torn.
 */
#include "pywalk.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpfwalk_shared.h"
#include "linetable.h"
#include "procfs.h"
#include "pylayout.h"
#include "pysnap.h"
#include "pystr.h"
#include "pywalk_int.h"

/* ---- reads, all through the sample's snapshot (pysnap.h) ------------------- */

static int fetch_ptr(struct pywalk *w, uint64_t addr, size_t len, const uint8_t **out)
{
        return pysnap_fetch_ptr(&w->snap, addr, len, out);
}

static int fetch(struct pywalk *w, uint64_t addr, void *dst, size_t len)
{
        return pysnap_fetch(&w->snap, addr, dst, len);
}

static int fetch_region(struct pywalk *w, uint64_t addr, size_t len)
{
        return pysnap_fetch_region(&w->snap, addr, len);
}

static int fetch_batch(struct pywalk *w, const struct memsrc_iov *want, size_t n)
{
        return pysnap_fetch_batch(&w->snap, want, n);
}

static bool covered(struct pywalk *w, uint64_t addr, size_t len)
{
        return pysnap_covered(&w->snap, addr, len);
}

static void snap_begin(struct pywalk *w)
{
        pysnap_begin(&w->snap, w->batch_fn, w->batch_ctx);
}

/* End a sample; <=3.10: the pages that held frames lately join the next batch (walk_pass). */
static void snap_end(struct pywalk *w)
{
        uint64_t pages[FRAME_PAGES];
        size_t n = 0;
        for (size_t i = 0; i < w->n_frame_pages; i++)
                if (w->frame_page_seen[i] + FRAME_PAGE_AGE >= w->sample_no)
                        pages[n++] = w->frame_page[i];
        pysnap_end(&w->snap, pages, n, PAGE);
}

/*
 * Cycle detection in a chain of addresses (Brent): the chain loops when an
 * address comes back to the one saved at the last power-of-two step. O(1)
 * memory and one comparison per step; finds a loop within twice its length
 * plus its distance from the start.
 */
struct cycle {
        uint64_t saved;
        uint32_t power, steps;
};

static void cycle_init(struct cycle *c)
{
        *c = (struct cycle){.saved = 0, .power = 1, .steps = 0};
}

static bool cycle_seen(struct cycle *c, uint64_t addr)
{
        if (addr == c->saved)
                return true;
        if (++c->steps == c->power) {
                c->saved = addr;
                c->power *= 2;
                c->steps = 0;
        }
        return false;
}

/* ---- sets, code cache, type cache ------------------------------------------ */

static size_t hash_slot(uint64_t addr, size_t cap)
{
        return (size_t)((addr >> 4) * 0x9e3779b97f4a7c15ull >> 17) & (cap - 1);
}

static struct code_entry *code_lookup(struct pywalk *w, uint64_t addr)
{
        for (size_t i = hash_slot(addr, w->hash_cap);; i = (i + 1) & (w->hash_cap - 1)) {
                struct code_entry *e = w->hash[i];
                if (!e || e->addr == addr)
                        return e;
        }
}

/* Insert or replace the entry for e->addr. */
static int code_insert(struct pywalk *w, struct code_entry *e)
{
        if ((w->hash_n + 1) * 2 > w->hash_cap) {
                size_t cap = w->hash_cap * 2;
                struct code_entry **h = calloc(cap, sizeof(*h));
                if (!h)
                        return -ENOMEM;
                for (size_t i = 0; i < w->hash_cap; i++) {
                        if (!w->hash[i])
                                continue;
                        size_t j = hash_slot(w->hash[i]->addr, cap);
                        while (h[j])
                                j = (j + 1) & (cap - 1);
                        h[j] = w->hash[i];
                }
                free(w->hash);
                w->hash = h;
                w->hash_cap = cap;
        }
        if (w->n_all == w->cap_all) {
                size_t cap = w->cap_all ? w->cap_all * 2 : 256;
                struct code_entry **a = realloc(w->all, cap * sizeof(*a));
                if (!a)
                        return -ENOMEM;
                w->all = a;
                w->cap_all = cap;
        }
        w->all[w->n_all++] = e;
        size_t i = hash_slot(e->addr, w->hash_cap);
        while (w->hash[i] && w->hash[i]->addr != e->addr)
                i = (i + 1) & (w->hash_cap - 1);
        if (!w->hash[i]) {
                w->hash_n++;
        } else {
                /* Superseded: kept (in w->all) for late events of the object it described. */
                e->older = w->hash[i];
                struct code_entry *o = e->older;
                for (int n = 1; o && n < CODE_OLDER; n++)
                        o = o->older;
                if (o)
                        o->older = NULL;
        }
        w->hash[i] = e;
        return 0;
}

static void code_free(struct code_entry *e)
{
        if (!e)
                return;
        free((char *)e->pub.name);
        free((char *)e->pub.qualname);
        free((char *)e->pub.file);
        lt_map_free(&e->lines);
        free(e->tlbc);
        free(e);
}

/*
 * Keep the code cache bounded in a program that keeps making code (exec,
 * eval, templates, lambdas in a loop; a code object freed and another built
 * at its address gets a new entry). Above CODE_CACHE_SOFT entries, at the
 * start of a sample, forget entries superseded at their address and those
 * not seen for CODE_CACHE_IDLE samples; if twice the soft bound are still
 * in use, the least recently seen go too. A forgotten code object seen again
 * is decoded again, under a new id (the ids are never reused). Amortized: the
 * next trim waits until the cache has doubled again.
 */
static int seen_cmp(const void *a, const void *b)
{
        const struct code_entry *x = *(struct code_entry *const *)a,
                                *y = *(struct code_entry *const *)b;
        return x->seen_sample > y->seen_sample ? -1 : x->seen_sample < y->seen_sample;
}

static void code_cache_trim(struct pywalk *w)
{
        if (w->n_all <= (w->trim_at > CODE_CACHE_SOFT ? w->trim_at : CODE_CACHE_SOFT))
                return;
        size_t kept = 0;
        for (size_t i = 0; i < w->n_all; i++) {
                struct code_entry *e = w->all[i];
                bool current = code_lookup(w, e->addr) == e;
                if (current && e->seen_sample + CODE_CACHE_IDLE >= w->sample_no)
                        w->all[kept++] = e;
                else
                        code_free(e);
        }
        w->n_all = kept;
        for (size_t i = 0; i < w->n_all; i++)
                w->all[i]->older = NULL; /* superseded entries are all freed (not current) */
        if (w->n_all > 2 * CODE_CACHE_SOFT) {
                qsort(w->all, w->n_all, sizeof(*w->all), seen_cmp); /* most recent first */
                for (size_t i = CODE_CACHE_SOFT; i < w->n_all; i++)
                        code_free(w->all[i]);
                w->n_all = CODE_CACHE_SOFT;
        }
        memset(w->hash, 0, w->hash_cap * sizeof(*w->hash));
        w->hash_n = 0;
        for (size_t i = 0; i < w->n_all; i++) {
                size_t j = hash_slot(w->all[i]->addr, w->hash_cap);
                while (w->hash[j])
                        j = (j + 1) & (w->hash_cap - 1);
                w->hash[j] = w->all[i];
                w->hash_n++;
        }
        w->trim_at = 2 * w->n_all;
}

/* tp_flags of the type at `type`, cached (types outlive everything we read). */
int pywalk_type_flags(struct pywalk *w, uint64_t type, uint64_t *flags)
{
        for (size_t i = 0; i < w->n_types; i++) {
                if (w->types[i].type == type) {
                        *flags = w->types[i].flags;
                        return 0;
                }
        }
        uint64_t f;
        int rc = memsrc_read(w->m, type + (uint64_t)w->L.tp_flags, &f, sizeof(f));
        if (rc < 0)
                return rc;
        size_t slot = w->n_types < 32 ? w->n_types++ : (size_t)(type >> 4) % 32;
        w->types[slot] = (struct type_flags){type, f};
        *flags = f;
        return 0;
}

/* ---- strings and bytes ---------------------------------------------------- */

/* Bytes of a str or bytes object that hold every header field pystr_shape() reads. */
size_t pywalk_object_head_len(const struct pylayout *L)
{
        int32_t ends[] = {L->ob_type + 8,      L->str_length + 8, L->str_state + 4, L->str_data + 8,
                          L->str_compact_size, L->bytes_size + 8, L->bytes_sval};
        int32_t m = 0;
        for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++)
                if (ends[i] > m)
                        m = ends[i];
        return (size_t)m < OBJ_PREFIX ? (size_t)m : OBJ_PREFIX;
}

/* Bytes enough to tell what a str or bytes object is (pystr_shape() asks for more if needed). */
size_t pywalk_object_short_len(const struct pylayout *L)
{
        int32_t ends[] = {L->ob_type + 8, L->str_length + 8, L->str_state + 4, L->bytes_size + 8};
        int32_t m = 0;
        for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++)
                if (ends[i] > m)
                        m = ends[i];
        return (size_t)m;
}

/*
 * Read the str (`want_str`) or bytes object at addr whose first `prelen`
 * bytes are already in `pre`. Returns 0 with a malloc'd buffer in *out
 * (NUL-terminated UTF-8 for a str, raw bytes for bytes) and its length,
 * PYWALK_TORN when the object is not what it should be, or a read error.
 */
int pywalk_read_object(struct pywalk *w, uint64_t addr, bool want_str, const uint8_t *pre,
                       size_t prelen, char **out, size_t *outlen)
{
        const struct pylayout *L = &w->L;
        if ((size_t)L->ob_type + 8 > prelen)
                return PYWALK_TORN;
        uint64_t type = rd64(pre + L->ob_type);
        enum pystr_obj kind;
        if (want_str && type == w->t.str_type_addr && type) {
                kind = PYSTR_STR;
        } else {
                uint64_t flags;
                int rc = type ? pywalk_type_flags(w, type, &flags) : PYWALK_TORN;
                if (rc < 0)
                        return fatal_read(rc) ? rc : PYWALK_TORN;
                if (!want_str && (flags & TPFLAGS_BYTES))
                        kind = PYSTR_BYTES;
                else if (want_str && (flags & TPFLAGS_UNICODE))
                        kind = L->strings == PYL_STR_PY2 ? PYSTR_UNICODE2 : PYSTR_STR;
                else if (want_str && (flags & TPFLAGS_BYTES) && L->strings == PYL_STR_PY2)
                        kind = PYSTR_STR;
                else
                        return PYWALK_TORN;
        }
        struct pystr_shape sh;
        uint64_t max = want_str ? MAX_NAME_CHARS : MAX_LINETABLE;
        int rc = pystr_shape(L, kind, pre, prelen, max, &sh);
        uint8_t longer[OBJ_PREFIX];
        size_t need = pywalk_object_head_len(L);
        if (rc == -ERANGE && need > prelen) {
                /* A non-compact str keeps its data pointer further in. */
                rc = memsrc_read(w->m, addr, longer, need);
                if (rc < 0)
                        return fatal_read(rc) ? rc : PYWALK_TORN;
                rc = pystr_shape(L, kind, longer, need, max, &sh);
        }
        if (rc < 0)
                return PYWALK_TORN;
        size_t nbytes = (size_t)sh.length * (sh.kind ? sh.kind : 1);
        uint8_t *data = malloc(nbytes + 1);
        if (!data)
                return -ENOMEM;
        if (sh.data_off >= 0 && (uint64_t)sh.data_off + nbytes <= prelen)
                memcpy(data, pre + sh.data_off, nbytes);
        else if (nbytes)
                rc =
                    memsrc_read(w->m, sh.data_off >= 0 ? addr + (uint64_t)sh.data_off : sh.data_ptr,
                                data, nbytes);
        if (rc < 0) {
                free(data);
                return fatal_read(rc) ? rc : PYWALK_TORN;
        }
        if (!want_str) {
                data[nbytes] = 0;
                *out = (char *)data;
                *outlen = nbytes;
                return 0;
        }
        size_t cap = pystr_utf8_max(sh.length, sh.kind);
        char *text = malloc(cap);
        long n = text ? pystr_utf8(data, sh.length, sh.kind, text, cap) : -ENOMEM;
        free(data);
        if (n < 0) {
                free(text);
                return n == -ENOMEM ? -ENOMEM : PYWALK_TORN;
        }
        *out = text;
        *outlen = (size_t)n;
        return 0;
}

/* Length of the bytes object whose first bytes are `pre` (the <=3.10 co_code). */
static int bytes_length(struct pywalk *w, const uint8_t *pre, size_t prelen, uint64_t *len)
{
        const struct pylayout *L = &w->L;
        uint64_t flags;
        struct pystr_shape sh;
        if ((size_t)L->ob_type + 8 > prelen)
                return PYWALK_TORN;
        int rc = pywalk_type_flags(w, rd64(pre + L->ob_type), &flags);
        if (rc < 0)
                return fatal_read(rc) ? rc : PYWALK_TORN;
        if (!(flags & TPFLAGS_BYTES) ||
            pystr_shape(L, PYSTR_BYTES, pre, prelen, MAX_CODE_UNITS, &sh) < 0 || !sh.length)
                return PYWALK_TORN;
        *len = sh.length;
        return 0;
}

/* ---- code objects ----------------------------------------------------------- */

/* The fields of a code object that identify it, as read from its header. */
struct code_head {
        uint64_t ptr[5]; /* name, qualname, file, table, co_code (<=3.10) */
        int32_t first_line, firsttraceable;
        uint64_t code_bytes; /* 3.11+: from ob_size; <=3.10: from co_code, in code_build() */
};

enum { P_NAME, P_QUALNAME, P_FILE, P_TABLE, P_CODE, N_PTRS };

/* Read the code object header; NOT_CODE when its type is not PyCode_Type. */
static int code_read_head(struct pywalk *w, uint64_t addr, struct code_head *h)
{
        const struct pylayout *L = &w->L;
        uint8_t co[CODE_BUF];
        /* Through the snapshot: the next sample's identity check then costs no read. */
        int rc = fetch(w, addr, co, L->co_read);
        if (rc < 0)
                return fatal_read(rc) ? rc : PYWALK_TORN;
        uint64_t type = rd64(co + L->ob_type);
        if (w->t.code_type_addr && type != w->t.code_type_addr)
                return NOT_CODE;
        memset(h, 0, sizeof(*h));
        h->ptr[P_NAME] = rd64(co + L->co_name);
        h->ptr[P_QUALNAME] = L->co_qualname >= 0 ? rd64(co + L->co_qualname) : 0;
        h->ptr[P_FILE] = rd64(co + L->co_filename);
        h->ptr[P_TABLE] = rd64(co + L->co_linetable);
        h->ptr[P_CODE] = L->co_code >= 0 ? rd64(co + L->co_code) : 0;
        h->first_line = rd32(co + L->co_firstlineno);
        h->firsttraceable = L->co_firsttraceable >= 0 ? rd32(co + L->co_firsttraceable) : -1;
        if (L->co_code_adaptive >= 0) {
                int64_t n = (int64_t)rd64(co + L->ob_size);
                if (n <= 0 || n > MAX_CODE_UNITS)
                        return PYWALK_TORN;
                h->code_bytes = 2 * (uint64_t)n;
                if (h->firsttraceable < 0 || (uint64_t)h->firsttraceable > (uint64_t)n)
                        h->firsttraceable = -1;
        }
        if (!h->ptr[P_NAME] || !h->ptr[P_FILE] || !h->ptr[P_TABLE] ||
            (L->co_code >= 0 && !h->ptr[P_CODE]))
                return PYWALK_TORN;
        return 0;
}

/* Decode the strings and line table of a code object into a new entry. */
static int code_build(struct pywalk *w, uint64_t addr, const struct code_head *h,
                      struct code_entry **out)
{
        const struct pylayout *L = &w->L;
        /* One batched read of the objects' first bytes; singly when that fails. */
        uint8_t pre[N_PTRS][OBJ_PREFIX];
        size_t prelen[N_PTRS] = {0};
        struct memsrc_iov iov[N_PTRS];
        size_t n = 0;
        for (int i = 0; i < N_PTRS; i++)
                if (h->ptr[i])
                        iov[n++] = (struct memsrc_iov){h->ptr[i], pre[i], OBJ_PREFIX};
        int rc = memsrc_readv(w->m, iov, n);
        if (fatal_read(rc))
                return rc;
        size_t head = pywalk_object_short_len(L);
        for (int i = 0; i < N_PTRS; i++) {
                if (!h->ptr[i])
                        continue;
                if (rc == 0) {
                        prelen[i] = OBJ_PREFIX;
                        continue;
                }
                int r = memsrc_read(w->m, h->ptr[i], pre[i], head);
                if (r < 0)
                        return fatal_read(r) ? r : PYWALK_TORN;
                prelen[i] = head;
        }
        uint64_t code_bytes = h->code_bytes;
        if (h->ptr[P_CODE] && (rc = bytes_length(w, pre[P_CODE], prelen[P_CODE], &code_bytes)) < 0)
                return rc;
        struct code_entry *e = calloc(1, sizeof(*e));
        if (!e)
                return -ENOMEM;
        e->last_off = INT64_MIN;
        char *text[4] = {0};
        size_t len[4] = {0};
        for (int i = 0; i < 4; i++) {
                if (!h->ptr[i])
                        continue;
                rc = pywalk_read_object(w, h->ptr[i], i != P_TABLE, pre[i], prelen[i], &text[i],
                                        &len[i]);
                if (rc < 0)
                        goto fail;
        }
        rc = lt_map_build((enum lt_format)L->linetable, (const uint8_t *)text[P_TABLE],
                          len[P_TABLE], h->first_line, &e->lines);
        free(text[P_TABLE]);
        text[P_TABLE] = NULL;
        if (rc < 0)
                goto fail;
        e->pub.name = text[P_NAME];
        e->pub.qualname = text[P_QUALNAME];
        e->pub.file = text[P_FILE];
        e->pub.first_line = h->first_line;
        e->addr = addr;
        memcpy(e->ptr, h->ptr, sizeof(e->ptr));
        e->firsttraceable = h->firsttraceable;
        e->code_bytes = code_bytes;
        e->shim = L->init_shim && strcmp(e->pub.name, "__init__") == 0 &&
                  strcmp(e->pub.file, "__init__") == 0;
        e->short_lived = strcmp(e->pub.name, "<module>") == 0 || e->pub.file[0] == '<';
        e->checked_sample = w->sample_no;
        *out = e;
        return 0;
fail:
        for (int i = 0; i < 4; i++)
                free(text[i]);
        lt_map_free(&e->lines);
        free(e);
        return rc;
}

/*
 * Whether a cached entry still describes the object at its address. A code
 * object can be freed and another built at the same address, and its
 * instruction pointer may well fit the old entry; so the identity fields
 * (first line, file, name, qualified name, line table) are compared again:
 *  - every sample for short-lived code: module bodies (run once, then
 *    dropped: a startup import's <module> is the typical victim) and code
 *    compiled at run time (file names like "<string>");
 *  - for other code, whenever it comes back onto a stack (not used in the
 *    previous sample). A function's code on the stacks sample after sample
 *    is not re-read: it would have to be freed and rebuilt between two
 *    samples, and the instruction-pointer check still applies then.
 * The comparisons of one thread are batched into one read, and the windows
 * join the next sample's prefetch, so a module body that keeps running costs
 * no system call of its own.
 */
static void code_id_window(const struct pylayout *L, int32_t *lo, int32_t *hi)
{
        const int32_t offs[] = {L->co_firstlineno, L->co_filename, L->co_name, L->co_linetable,
                                L->co_qualname};
        *lo = INT32_MAX;
        *hi = 0;
        for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
                if (offs[i] < 0)
                        continue;
                *lo = offs[i] < *lo ? offs[i] : *lo;
                *hi = offs[i] + 8 > *hi ? offs[i] + 8 : *hi;
        }
}

/* Whether the identity window `buf` (read at e->addr + lo) matches the entry. */
static bool code_same(const struct pylayout *L, const struct code_entry *e, const uint8_t *buf,
                      int32_t lo)
{
        return rd32(buf + L->co_firstlineno - lo) == e->pub.first_line &&
               rd64(buf + L->co_filename - lo) == e->ptr[P_FILE] &&
               rd64(buf + L->co_name - lo) == e->ptr[P_NAME] &&
               rd64(buf + L->co_linetable - lo) == e->ptr[P_TABLE] &&
               (L->co_qualname < 0 || rd64(buf + L->co_qualname - lo) == e->ptr[P_QUALNAME]);
}

static int code_recheck(struct pywalk *w, struct code_entry **pe);

/*
 * The cached entry for the code object at addr, decoding it on a miss.
 * *check is set when the entry must be compared with the object again
 * before its frames are reported (see code_id_window()).
 */
static int code_get(struct pywalk *w, uint64_t addr, struct code_entry **out, bool *check)
{
        struct code_entry *e = code_lookup(w, addr);
        *check = false;
        if (e) {
                bool due = e->short_lived || e->seen_sample + 1 < w->sample_no;
                if (due && e->checked_sample != w->sample_no && e->pending_sample != w->sample_no) {
                        e->pending_sample = w->sample_no;
                        *check = true;
                }
                e->seen_sample = w->sample_no;
                *out = e;
                return 0;
        }
        struct code_head h;
        int rc = code_read_head(w, addr, &h);
        if (rc != 0)
                return rc;
        rc = code_build(w, addr, &h, &e);
        if (rc < 0)
                return rc;
        e->pub.id = ++w->next_id;
        e->seen_sample = w->sample_no;
        rc = code_insert(w, e);
        if (rc < 0) {
                code_free(e);
                return rc;
        }
        *out = e;
        return 0;
}

/*
 * Compare the entries in w->pending with their objects, in one batched read
 * (windows already in the snapshot cost nothing). A changed object gets a
 * new entry (and id). Returns 1 when one changed (the frames must be walked
 * again), 0 when none did, or an error (PYWALK_TORN when unreadable).
 */
static int code_verify_pending(struct pywalk *w)
{
        const struct pylayout *L = &w->L;
        int32_t lo, hi;
        code_id_window(L, &lo, &hi);
        size_t len = (size_t)(hi - lo), n = w->n_pending;
        /* Usually one or two entries (a module body is checked every sample): no malloc. */
        uint8_t sbuf[1024];
        struct memsrc_iov siov[8];
        bool small = n <= 8 && n * len <= sizeof(sbuf);
        uint8_t *buf = small ? sbuf : malloc(n * len);
        struct memsrc_iov *iov = small ? siov : malloc(n * sizeof(*iov));
        int rc = buf && iov ? 0 : -ENOMEM;
        for (size_t i = 0; rc == 0 && i < n; i++)
                iov[i] =
                    (struct memsrc_iov){w->pending[i]->addr + (uint64_t)lo, buf + i * len, len};
        if (rc == 0)
                rc = fetch_batch(w, iov, n);
        bool changed = false;
        for (size_t i = 0; rc == 0 && i < n; i++) {
                struct code_entry *e = w->pending[i];
                if (code_same(L, e, buf + i * len, lo)) {
                        e->checked_sample = w->sample_no;
                        continue;
                }
                rc = code_recheck(w, &e); /* rebuilds it under a new id */
                changed = true;
        }
        if (!small) {
                free(buf);
                free(iov);
        }
        if (rc < 0)
                return fatal_read(rc) ? rc : PYWALK_TORN;
        return changed;
}

/*
 * The frame's instruction pointer does not fit the cached entry: the code
 * object may have been freed and another one built at its address. Re-read
 * the header (at most once per entry and sample); a different object gets a
 * new entry and id. Returns 0 with the entry to use, or an error.
 */
static int code_recheck(struct pywalk *w, struct code_entry **pe)
{
        struct code_entry *old = *pe;
        if (old->checked_sample == w->sample_no)
                return PYWALK_TORN;
        old->checked_sample = w->sample_no;
        struct code_head h;
        int rc = code_read_head(w, old->addr, &h);
        if (rc != 0)
                return rc == NOT_CODE ? PYWALK_TORN : rc;
        if (memcmp(h.ptr, old->ptr, sizeof(h.ptr)) == 0 && h.first_line == old->pub.first_line &&
            (!h.code_bytes || h.code_bytes == old->code_bytes)) {
                free(old->tlbc);
                old->tlbc = NULL;
                old->n_tlbc = 0;
                return 0;
        }
        struct code_entry *e;
        rc = code_build(w, old->addr, &h, &e);
        if (rc < 0)
                return rc;
        e->pub.id = ++w->next_id;
        rc = code_insert(w, e);
        if (rc < 0) {
                code_free(e);
                return rc;
        }
        *pe = e;
        return 0;
}

/* 3.14t: base of thread-local bytecode copy `idx` (0: none, use co_code_adaptive). */
static int tlbc_base(struct pywalk *w, struct code_entry *e, int32_t idx, uint64_t *base)
{
        if (idx < 0 || idx >= MAX_TLBC)
                return PYWALK_TORN;
        if (!e->tlbc || (uint32_t)idx >= e->n_tlbc) {
                uint64_t arr, size;
                int rc = memsrc_read(w->m, e->addr + (uint64_t)w->L.co_tlbc, &arr, 8);
                if (rc == 0)
                        rc = arr ? memsrc_read(w->m, arr, &size, 8) : PYWALK_TORN;
                if (rc == 0 && (size == 0 || size > MAX_TLBC))
                        rc = PYWALK_TORN;
                uint64_t *v = rc == 0 ? malloc(size * 8) : NULL;
                if (rc == 0 && !v)
                        rc = -ENOMEM;
                if (rc == 0)
                        rc = memsrc_read(w->m, arr + 8, v, size * 8);
                if (rc < 0) {
                        free(v);
                        return fatal_read(rc) ? rc : PYWALK_TORN;
                }
                free(e->tlbc);
                e->tlbc = v;
                e->n_tlbc = (uint32_t)size;
                if ((uint32_t)idx >= e->n_tlbc)
                        return PYWALK_TORN;
        }
        *base = e->tlbc[idx] ? e->tlbc[idx] : e->addr + (uint64_t)w->L.co_code_adaptive;
        return 0;
}

/* ---- frames ----------------------------------------------------------------- */

/* Byte offset of the frame's instruction in its code, or INT64_MIN to skip the frame. */
/* What frame_offset() needs of a frame, taken out of it before anything else is read. */
struct frame_pos {
        uint64_t ip;   /* PYL_LASTI_POINTER: the instruction pointer */
        int32_t lasti; /* otherwise: f_lasti / prev_instr index */
        int32_t tlbc;  /* 3.14t: the thread-local bytecode index */
};

static void frame_pos_get(const struct pylayout *L, const uint8_t *fr, struct frame_pos *p)
{
        *p = (struct frame_pos){0};
        if (L->lasti == PYL_LASTI_POINTER)
                p->ip = rd64(fr + L->fr_lasti);
        else
                p->lasti = rd32(fr + L->fr_lasti);
        p->tlbc = L->fr_tlbc_index >= 0 ? rd32(fr + L->fr_tlbc_index) : 0;
}

static int frame_offset(struct pywalk *w, const struct frame_pos *pos, uint64_t code,
                        struct code_entry **pe, uint8_t owner, int64_t *off)
{
        const struct pylayout *L = &w->L;
        if (L->lasti != PYL_LASTI_POINTER) {
                int32_t lasti = pos->lasti;
                int64_t o = lasti < 0                     ? -1
                            : L->lasti == PYL_LASTI_UNITS ? 2 * (int64_t)lasti
                                                          : lasti;
                for (int attempt = 0; (*pe)->code_bytes && o >= (int64_t)(*pe)->code_bytes;
                     attempt++) {
                        int rc = attempt ? PYWALK_TORN : code_recheck(w, pe);
                        if (rc < 0)
                                return rc;
                }
                *off = o;
                return 0;
        }
        uint64_t ip = pos->ip;
        int32_t idx = pos->tlbc;
        for (int attempt = 0;; attempt++) {
                struct code_entry *e = *pe;
                uint64_t base = code + (uint64_t)L->co_code_adaptive;
                int rc = idx ? tlbc_base(w, e, idx, &base) : 0;
                int64_t o = (int64_t)(ip - base);
                /* prev_instr of a fresh 3.11/3.12 frame is one unit before the code. */
                if (rc == 0 && o >= -2 && o <= (int64_t)e->code_bytes && !(o & 1)) {
                        bool incomplete = owner != L->owner_generator && e->firsttraceable >= 0 &&
                                          o < 2 * (int64_t)e->firsttraceable;
                        *off = incomplete ? INT64_MIN : o;
                        return 0;
                }
                if (rc < 0 && rc != PYWALK_TORN)
                        return rc;
                if (attempt == 1)
                        return PYWALK_TORN;
                rc = code_recheck(w, pe);
                if (rc < 0)
                        return rc;
        }
}

/*
 * Load a data-stack chunk (3.11+) as one span. `top` is the thread's
 * datastack_top when this is its current chunk (0 for older chunks, read
 * whole): then only the bytes in use are needed, plus some slack once the
 * chunk's size is known so that a growing stack still hits next time. `top`
 * is only a size hint: frames outside the span are read singly, and failures
 * here are not errors for the same reason. *previous: the older chunk, or 0.
 */
static int chunk_load(struct pywalk *w, uint64_t chunk, uint64_t top, uint64_t *previous)
{
        const struct pylayout *L = &w->L;
        uint64_t size = 0, head = (uint64_t)L->chunk_data;
        uint64_t used = top > chunk + head && top - chunk <= MAX_CHUNK_BYTES ? top - chunk : 0;
        int rc;
        *previous = 0;
        if (!used || !covered(w, chunk, (size_t)used)) {
                if (!used || covered(w, chunk, (size_t)head)) {
                        rc = fetch(w, chunk + (uint64_t)L->chunk_size, &size, 8);
                        if (rc < 0)
                                return fatal_read(rc) ? rc : 0;
                        if (size < head + 8 || size > MAX_CHUNK_BYTES)
                                return 0;
                }
                uint64_t len = size ? size : used;
                if (size && used && used <= size) {
                        len = (used + CHUNK_SLACK + 63) & ~63ull;
                        len = len < size ? len : size;
                }
                rc = fetch_region(w, chunk, (size_t)len);
                if (rc < 0)
                        return fatal_read(rc) ? rc : 0;
        }
        /* Inside the span: marks it used, cannot fail. */
        return fetch(w, chunk + (uint64_t)L->chunk_previous, previous, 8);
}

/*
 * <=3.10: whether a heap frame read as part of a thread's chain was alive and
 * running when it was read. The stack changes while it is read (a call and a
 * return take 35 ns in a tight recursion, a read a microsecond), and a frame
 * that returned under us is freed: its reference count drops to 0 and it goes
 * to its code object's zombie slot or the free list, keeping a stale f_code
 * and an f_back that is its old caller or the next free frame. Such a chain
 * looks plausible, so every frame is checked, not only the last one: alive
 * (ob_refcnt > 0) and running (f_executing set, 3.6-3.9; f_state EXECUTING 0
 * or UNWINDING 2, 3.10; 2.7 has neither). A leaf with a caller may be let
 * off the running test (`exempt`): the interpreter points tstate->frame at a
 * frame a few instructions before it marks it running, and clears the mark a
 * few before it pops it. A chain that ends at a frame not running is torn
 * whatever its length: a generator that yielded or finished under us (its
 * f_back cleared), not the root of a stack.
 */
static bool heap_frame_live(const struct pylayout *L, const uint8_t *fr, bool exempt)
{
        if ((int64_t)rd64(fr + L->ob_type - 8) <= 0)
                return false;
        if (exempt || L->fr_state < 0)
                return true;
        uint8_t st = fr[L->fr_state];
        return L->fr_state_kind == PYL_FRSTATE_EXECUTING ? st != 0 : st == 0 || st == 2;
}

/* Note that page `pg` holds a frame in this sample (kept in the batch a while). */
static void frame_page_note(struct pywalk *w, uint64_t pg)
{
        size_t oldest = 0;
        for (size_t i = 0; i < w->n_frame_pages; i++) {
                if (w->frame_page[i] == pg) {
                        w->frame_page_seen[i] = w->sample_no;
                        return;
                }
                if (w->frame_page_seen[i] < w->frame_page_seen[oldest])
                        oldest = i;
        }
        size_t i = w->n_frame_pages < FRAME_PAGES ? w->n_frame_pages++ : oldest;
        w->frame_page[i] = pg;
        w->frame_page_seen[i] = w->sample_no;
}

/*
 * One pass over a thread's frames into w->frames; cache entries to compare
 * with their objects are left in w->pending. Returns 0, PYWALK_TORN, or a
 * negative errno that ends the sample.
 */
static int walk_pass(struct pywalk *w, uint64_t tstate, const uint8_t *ts, uint32_t *depth)
{
        const struct pylayout *L = &w->L;
        uint64_t addr = rd64(ts + L->ts_frame);
        int rc;
        *depth = 0;
        if (L->cframe_current >= 0 && addr) {
                rc = fetch(w, addr + (uint64_t)L->cframe_current, &addr, 8);
                if (rc < 0)
                        return fatal_read(rc) ? rc : PYWALK_TORN;
        }
        uint64_t older_chunk = 0;
        unsigned chunks = 0;
        if (L->ts_datastack_chunk >= 0) {
                uint64_t chunk = rd64(ts + L->ts_datastack_chunk);
                uint64_t top = L->ts_datastack_top >= 0 ? rd64(ts + L->ts_datastack_top) : 0;
                if (chunk && (rc = chunk_load(w, chunk, top, &older_chunk)) < 0)
                        return rc;
        }
        struct cycle cyc;
        cycle_init(&cyc);
        uint64_t last = 0;
        bool group_has_frames = false; /* a frame since the last entry frame (3.12+) */
        w->n_pending = 0;
        for (uint32_t steps = 0; addr; steps++) {
                if (steps == MAX_STEPS || cycle_seen(&cyc, addr))
                        return PYWALK_TORN;
                /* Deep stacks spill into older chunks: load them whole too. */
                while (older_chunk && chunks < MAX_CHUNKS && !covered(w, addr, L->fr_read)) {
                        uint64_t chunk = older_chunk;
                        chunks++;
                        if ((rc = chunk_load(w, chunk, 0, &older_chunk)) < 0)
                                return rc;
                }
                /*
                 * Read in place, not copied: loading fields from a copy just
                 * made stalls on store forwarding. The pointer is good until
                 * the next read that misses the snapshot (code_get), so
                 * everything needed is taken from it before.
                 */
                /*
                 * <=3.10: frames are heap objects, recycled through a free
                 * list, so the next sample's frames are mostly other objects
                 * in the same few pages. Read whole pages: then the next
                 * batch holds them, and a batch read at one instant
                 * (pywalk_set_batch_reader) is the whole stack.
                 */
                if (L->frames == PYL_FRAMES_OBJECT) {
                        uint64_t lo = addr & ~(uint64_t)(PAGE - 1);
                        uint64_t hi = (addr + L->fr_read + PAGE - 1) & ~(uint64_t)(PAGE - 1);
                        /* (Failing that, just the frame: it may not be our kind of page.) */
                        if (hi - lo <= 2 * PAGE && !covered(w, addr, L->fr_read) &&
                            (rc = fetch_region(w, lo, (size_t)(hi - lo))) < 0 && fatal_read(rc))
                                return rc;
                        if (hi - lo <= 2 * PAGE && covered(w, lo, (size_t)(hi - lo)))
                                for (uint64_t pg = lo; pg < hi; pg += PAGE)
                                        frame_page_note(w, pg);
                }
                const uint8_t *fr;
                rc = fetch_ptr(w, addr, L->fr_read, &fr);
                if (rc < 0)
                        return fatal_read(rc) ? rc : PYWALK_TORN;
                last = addr;
                uint64_t back = rd64(fr + L->fr_back);
                if (L->frames == PYL_FRAMES_OBJECT && !heap_frame_live(L, fr, steps == 0 && back))
                        return PYWALK_TORN;
                uint64_t code = rd64(fr + L->fr_code) & L->fr_code_mask;
                uint8_t owner = L->fr_owner >= 0 ? fr[L->fr_owner] : 0;
                uint8_t entry_byte = L->fr_is_entry >= 0 ? fr[L->fr_is_entry] : 0;
                struct frame_pos pos;
                frame_pos_get(L, fr, &pos);
                fr = NULL;
                /*
                 * 3.11+: the same for a generator's embedded frame, whose
                 * `previous` is cleared when it yields. A thread's stack never
                 * starts at a generator-owned frame.
                 */
                if (!back && owner == L->owner_generator)
                        return PYWALK_TORN;
                addr = back;
                if (owner >= L->owner_skip_from) {
                        /* 3.12+: the frames since the last entry frame are one eval call's. */
                        if (*depth > 0 && group_has_frames)
                                w->frames[*depth - 1].entry = true;
                        group_has_frames = false;
                        continue;
                }
                bool is_entry =
                    L->frames == PYL_FRAMES_OBJECT || (L->fr_is_entry >= 0 && entry_byte != 0);
                if (!code)
                        continue; /* being cleared */
                /*
                 * Code objects do not change while they are in use: reading
                 * one outside the batch does not mix instants (w->snap.misses).
                 */
                uint64_t misses = w->snap.misses;
                struct code_entry *e;
                bool check;
                rc = code_get(w, code, &e, &check);
                if (rc == NOT_CODE && L->executable_any)
                        continue;
                if (rc != 0)
                        return rc == NOT_CODE || !fatal_read(rc) ? PYWALK_TORN : rc;
                if (check && w->n_pending < MAX_STEPS)
                        w->pending[w->n_pending++] = e;
                int64_t off;
                rc = frame_offset(w, &pos, code, &e, owner, &off);
                w->snap.misses = misses;
                if (rc < 0)
                        return rc;
                if (off == INT64_MIN || e->shim)
                        continue; /* not started yet, or the __init__ shim */
                if (*depth == PYWALK_MAX_DEPTH)
                        return PYWALK_TORN;
                w->frames[*depth].code = &e->pub;
                w->frames[*depth].entry = is_entry;
                group_has_frames = true;
                if (off != e->last_off) {
                        e->last_line = lt_map_lookup(&e->lines, off);
                        e->last_off = off;
                }
                w->frames[*depth].line = e->last_line;
                (*depth)++;
        }
        /* 3.15: every complete stack ends at the thread's base frame. */
        if (L->ts_base_frame >= 0 && last && last != tstate + (uint64_t)L->ts_base_frame)
                return PYWALK_TORN;
        return 0;
}

/*
 * Walk one thread's frames into w->frames, then make sure no frame used a
 * cache entry that no longer matches its object; if one did, walk again (the
 * second pass reads nothing new: everything is in the snapshot). Returns 0,
 * PYWALK_TORN, or a negative errno that ends the sample.
 */
static int walk_frames(struct pywalk *w, uint64_t tstate, const uint8_t *ts, uint32_t *depth)
{
        for (int pass = 0;; pass++) {
                int rc = walk_pass(w, tstate, ts, depth);
                if (rc < 0 || !w->n_pending)
                        return rc;
                uint64_t misses = w->snap.misses; /* code objects: see walk_pass */
                rc = code_verify_pending(w);
                w->snap.misses = misses;
                if (rc <= 0)
                        return rc;
                if (pass == 1)
                        return PYWALK_TORN;
        }
}

int pywalk_frame_decode(struct pywalk *w, const uint8_t *fr, struct pywalk_frame *out)
{
        const struct pylayout *L = &w->L;
        uint64_t code = rd64(fr + L->fr_code) & L->fr_code_mask;
        if (!code)
                return 1;
        struct frame_pos pos;
        frame_pos_get(L, fr, &pos);
        uint64_t misses = w->snap.misses; /* code objects: see walk_pass */
        struct code_entry *e;
        bool check;
        int rc = code_get(w, code, &e, &check);
        if (rc == NOT_CODE)
                return L->executable_any ? 1 : PYWALK_TORN;
        if (rc != 0)
                return !fatal_read(rc) ? PYWALK_TORN : rc;
        int64_t off;
        /* As owned by a generator: a frame not started yet shows its first line. */
        rc = frame_offset(w, &pos, code, &e, L->owner_generator, &off);
        w->snap.misses = misses;
        if (rc < 0)
                return rc;
        if (e->shim)
                return 1;
        out->code = &e->pub;
        if (off < 0) {
                out->line = e->pub.first_line;
                return 0;
        }
        if (off != e->last_off) {
                e->last_line = lt_map_lookup(&e->lines, off);
                e->last_off = off;
        }
        out->line = e->last_line;
        return 0;
}

/* ---- --bpf: frames copied in the kernel (bpfwalk.h) ------------------------ */

int pywalk_bpf_proc(struct pywalk *w, struct bpfw_proc *out, char *err, size_t errlen)
{
        const struct pylayout *L = &w->L;
        memset(out, 0, sizeof(*out));
        struct bpfw_layout *B = &out->L;
        B->ts_frame = L->ts_frame;
        B->cframe_current = L->cframe_current;
        B->ts_thread_id = L->ts_thread_id;
        B->fr_back = L->fr_back;
        B->fr_code = L->fr_code;
        B->fr_lasti = L->fr_lasti;
        B->fr_owner = L->fr_owner;
        B->fr_is_entry = L->fr_is_entry;
        B->fr_tlbc_index = L->fr_tlbc_index;
        B->lasti_pointer = L->lasti == PYL_LASTI_POINTER;
        const struct {
                int32_t off;
                uint32_t size;
        } fields[] = {
            {L->fr_back, 8},  {L->fr_code, 8},     {L->fr_lasti, B->lasti_pointer ? 8 : 4},
            {L->fr_owner, 1}, {L->fr_is_entry, 1}, {L->fr_tlbc_index, 4}};
        int32_t lo = INT32_MAX, hi = 0;
        for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
                if (fields[i].off < 0)
                        continue;
                lo = fields[i].off < lo ? fields[i].off : lo;
                hi = fields[i].off + (int32_t)fields[i].size > hi
                         ? fields[i].off + (int32_t)fields[i].size
                         : hi;
        }
        if (L->ts_frame < 0 || L->ts_thread_id < 0 || L->fr_back < 0 || L->fr_code < 0 ||
            L->fr_lasti < 0 || hi - lo > BPFW_FRAME_WINDOW) {
                snprintf(err, errlen,
                         "the in-kernel sampler cannot walk Python %s frames (fields %d bytes "
                         "apart, %d at most)",
                         L->name, hi - lo, BPFW_FRAME_WINDOW);
                return PYFIND_UNSUPPORTED;
        }
        B->fr_lo = (uint32_t)lo;
        B->fr_span = (uint32_t)(hi - lo);
        B->fr_code_mask = L->fr_code_mask;
        B->owner_skip_from = L->owner_skip_from;
        B->co_firstlineno = L->co_firstlineno;
        B->co_filename = L->co_filename;
        B->co_name = L->co_name;
        B->co_linetable = L->co_linetable;
        B->co_qualname = L->co_qualname;
        int32_t clo, chi;
        code_id_window(L, &clo, &chi);
        if (L->co_firstlineno < clo || L->co_firstlineno + 4 > chi ||
            chi - clo > BPFW_FRAME_WINDOW) {
                snprintf(err, errlen,
                         "the in-kernel sampler cannot check Python %s code objects (fields %d "
                         "bytes apart, %d at most)",
                         L->name, chi - clo, BPFW_FRAME_WINDOW);
                return PYFIND_UNSUPPORTED;
        }
        B->co_lo = (uint32_t)clo;
        B->co_span = (uint32_t)(chi - clo);
        /* 3.11+: a frame's callers are pushed below it on the same data stack. */
        B->fr_block = L->frames == PYL_FRAMES_INTERP ? BPFW_BLOCK : 0;
        /*
         * The main interpreter's list of thread states, for a thread the
         * recorder has not seen yet: the interpreter whose id is 0 (3.7+),
         * else the last of the interpreters' list (a new one is put first).
         */
        B->ts_next = L->ts_next;
        uint64_t at = 0, interp = 0,
                 head_addr = L->rt_interp_head >= 0 && w->t.runtime_addr
                                 ? w->t.runtime_addr + (uint64_t)L->rt_interp_head
                                 : w->t.interp_head_addr;
        if (head_addr && memsrc_read(w->m, head_addr, &at, 8) < 0)
                at = 0;
        for (int i = 0; at && i < MAX_INTERPS; i++) {
                uint64_t next = 0, id = 1;
                if (memsrc_read(w->m, at + (uint64_t)L->is_next, &next, 8) < 0 ||
                    (L->is_id >= 0 && memsrc_read(w->m, at + (uint64_t)L->is_id, &id, 8) < 0)) {
                        interp = 0;
                        break;
                }
                if (i > 0)
                        out->flags |=
                            BPFW_P_SUBINTERPS; /* a thread in none of main's lists may be theirs */
                if (L->is_id >= 0 ? id == 0 : !next)
                        interp = at;
                at = next;
        }
        if (interp && L->is_threads_head >= 0 && L->ts_next >= 0)
                out->threads_head_addr = interp + (uint64_t)L->is_threads_head;
        if (w->t.free_threaded) {
                out->flags |= BPFW_P_NO_GIL;
        } else if (L->gil == PYL_GIL_SYMBOL) {
                out->gil_holder_addr = w->t.tstate_current_addr;
        } else if (L->gil == PYL_GIL_RUNTIME) {
                out->gil_holder_addr = w->t.runtime_addr + (uint64_t)L->rt_tstate_current;
        } else if (w->main_gil) {
                out->gil_holder_addr = w->main_gil + (uint64_t)L->gil_holder;
                out->gil_locked_addr = w->main_gil + (uint64_t)L->gil_locked;
        }
        return 0;
}

/*
 * A batch of events spans a fifth of a second: memory read for one event
 * (a code object's strings, its header) may be freed and reused by the
 * next (a program importing modules makes and drops objects all the time),
 * so each event starts from an empty snapshot, never served another's
 * copies. What a batch shares is the code cache, whose entries are checked
 * against their objects as in a walk of the walker's own.
 */
void pywalk_bpf_begin(struct pywalk *w)
{
        w->sample_no++;
        code_cache_trim(w);
        pysnap_reset(&w->snap);
}

void pywalk_bpf_end(struct pywalk *w)
{
        pysnap_reset(&w->snap);
}

/*
 * The frames of one event as walk_pass() makes them of frames it reads
 * itself: the same skips (entry and shim frames, frames not started, code
 * being cleared), the same code cache with its identity checks, the same
 * line lookup. The copy was made while the thread was interrupted, so the
 * chain is one instant's; what is left to check is that the code objects
 * still are what the cache says.
 */
/* The identity the BPF program computes of the object at addr, read now; 0 when unreadable. */
static uint64_t object_ident(struct pywalk *w, uint64_t addr)
{
        const struct pylayout *L = &w->L;
        int32_t lo, hi;
        code_id_window(L, &lo, &hi);
        uint8_t buf[BPFW_FRAME_WINDOW];
        int32_t len = hi - lo;
        const int32_t at[] = {L->co_firstlineno - lo, L->co_filename - lo, L->co_name - lo,
                              L->co_linetable - lo, L->co_qualname >= 0 ? L->co_qualname - lo : 0};
        if (len <= 0 || len > (int32_t)sizeof(buf))
                return 0;
        for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++)
                if (at[i] < 0 || at[i] + 8 > len)
                        return 0;
        if (memsrc_read(w->m, addr + (uint64_t)lo, buf, (size_t)len) < 0)
                return 0;
        return bpfw_ident((uint32_t)rd32(buf + at[0]), rd64(buf + at[1]), rd64(buf + at[2]),
                          rd64(buf + at[3]), L->co_qualname >= 0 ? rd64(buf + at[4]) : 0);
}

/* An entry's identity as the BPF program computes it of the object (struct bpfw_frame.ident). */
static uint64_t code_ident(const struct code_entry *e)
{
        return bpfw_ident((uint32_t)e->pub.first_line, e->ptr[P_FILE], e->ptr[P_NAME],
                          e->ptr[P_TABLE], e->ptr[P_QUALNAME]);
}

bool pywalk_bpf_code_lasting(struct pywalk *w, uint64_t code, uint64_t ident)
{
        const struct code_entry *ce = code_lookup(w, code);
        return ce && code_ident(ce) == ident && !ce->short_lived;
}

static int addr_cmp(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

/*
 * Whether a truncated event's chain loops: a chain that ended (at NULL)
 * cannot, one cut at the bound can. All of it is compared, exactly: Brent's
 * step-by-step check misses most loops that close after its 128th step.
 */
static bool bpf_chain_loops(const struct bpfw_event *e)
{
        uint64_t a[BPFW_MAX_DEPTH];
        uint32_t n = e->depth < BPFW_MAX_DEPTH ? e->depth : BPFW_MAX_DEPTH;
        for (uint32_t i = 0; i < n; i++)
                a[i] = e->frames[i].addr;
        qsort(a, n, sizeof(a[0]), addr_cmp);
        for (uint32_t i = 1; i < n; i++)
                if (a[i] == a[i - 1])
                        return true;
        return false;
}

/*
 * (Cut at the bound just above an entry frame, the innermost frame kept
 * cannot know it ends an eval call: its entry flag stays false.)
 */
static int bpf_frames(struct pywalk *w, const struct bpfw_event *e, uint32_t *depth)
{
        const struct pylayout *L = &w->L;
        bool group_has_frames = false;
        *depth = 0;
        w->n_pending = 0;
        uint32_t n = e->depth < BPFW_MAX_DEPTH ? e->depth : BPFW_MAX_DEPTH;
        if ((e->flags & BPFW_F_TRUNCATED) && bpf_chain_loops(e))
                return PYWALK_TORN;
        for (uint32_t i = 0; i < n; i++) {
                const struct bpfw_frame *f = &e->frames[i];
                bool last_of_chain = i + 1 == n && !(e->flags & BPFW_F_TRUNCATED);
                uint8_t owner = L->fr_owner >= 0 ? f->owner : 0;
                if (last_of_chain && owner == L->owner_generator)
                        return PYWALK_TORN;
                if (owner >= L->owner_skip_from) {
                        if (*depth > 0 && group_has_frames)
                                w->frames[*depth - 1].entry = true;
                        group_has_frames = false;
                        continue;
                }
                bool is_entry = L->frames == PYL_FRAMES_OBJECT || (L->fr_is_entry >= 0 && f->entry);
                uint64_t code = f->code & L->fr_code_mask;
                if (!code)
                        continue;
                struct code_entry *ce;
                bool check;
                int rc = code_get(w, code, &ce, &check);
                /*
                 * 3.13+: f_executable need not be code; skipped as the walker
                 * skips it, if it is the object sampled (not a code object
                 * freed since, another object at its address).
                 */
                if (rc == NOT_CODE && L->executable_any && object_ident(w, code) == f->ident)
                        continue;
                /*
                 * Not a code object now, or not the one sampled: it was freed
                 * since (a module body ends right after its import), and
                 * another may be at its address. Never decoded as another.
                 */
                if (rc == NOT_CODE)
                        return PYWALK_CODE_GONE;
                if (rc != 0)
                        return !fatal_read(rc) ? PYWALK_TORN : rc;
                if (!f->ident)
                        return PYWALK_CODE_UNREAD; /* cannot tell it is the one sampled */
                if (f->fflags & BPFW_FR_TABLE_IDENT) {
                        /*
                         * The identity is our table's, not read from the
                         * object: this frame's object is the entry's only if
                         * the object at its address still is (compared once a
                         * batch, with the others pending, in one read). One
                         * that is not: the frame may be of either, so it is
                         * neither (and the caller makes the program forget
                         * the entry).
                         */
                        if (code_ident(ce) != f->ident)
                                return PYWALK_CODE_GONE;
                        if (ce->checked_sample != w->sample_no &&
                            ce->pending_sample != w->sample_no) {
                                if (w->n_pending == MAX_STEPS)
                                        return PYWALK_TORN;
                                ce->pending_sample = w->sample_no;
                                w->pending[w->n_pending++] = ce;
                        }
                } else if (code_ident(ce) != f->ident) {
                        /*
                         * An object this address held before (the event is
                         * older than the entry: the recorder reads events up
                         * to a batch late), else the object there now.
                         */
                        struct code_entry *o = ce->older;
                        while (o && code_ident(o) != f->ident)
                                o = o->older;
                        if (o)
                                ce = o;
                        else if (ce->checked_sample == w->sample_no ||
                                 (rc = code_recheck(w, &ce)) != 0 || code_ident(ce) != f->ident)
                                return rc < 0 && fatal_read(rc) ? rc : PYWALK_CODE_GONE;
                }
                /*
                 * No comparison with the object now (the walker's check): the
                 * event's identity of it says this entry describes the object
                 * sampled, with no read, so that the events of a process that
                 * has exited since still decode from the cache.
                 */
                (void)check;
                struct frame_pos pos = {0};
                if (L->lasti == PYL_LASTI_POINTER)
                        pos.ip = f->pos;
                else
                        pos.lasti = (int32_t)f->pos;
                pos.tlbc = L->fr_tlbc_index >= 0 ? f->tlbc : 0;
                int64_t off;
                rc = frame_offset(w, &pos, code, &ce, owner, &off);
                if (rc < 0)
                        return rc;
                /* A position that did not fit made the entry again, of the object now there. */
                if (code_ident(ce) != f->ident)
                        return PYWALK_CODE_GONE;
                if (off == INT64_MIN || ce->shim)
                        continue;
                if (*depth == PYWALK_MAX_DEPTH)
                        return PYWALK_TORN;
                w->frames[*depth].code = &ce->pub;
                w->frames[*depth].entry = is_entry;
                group_has_frames = true;
                if (off != ce->last_off) {
                        ce->last_line = lt_map_lookup(&ce->lines, off);
                        ce->last_off = off;
                }
                w->frames[*depth].line = ce->last_line;
                (*depth)++;
        }
        if (L->ts_base_frame >= 0 && n && !(e->flags & BPFW_F_TRUNCATED) &&
            e->frames[n - 1].addr != e->tstate + (uint64_t)L->ts_base_frame)
                return PYWALK_TORN;
        return 0;
}

int pywalk_bpf_decode(struct pywalk *w, const struct bpfw_event *e, struct pywalk_thread *th)
{
        *th = (struct pywalk_thread){.tstate_addr = e->tstate,
                                     .thread_id = e->thread_id,
                                     .native_tid = -1,
                                     .interp_id = 0,
                                     .gil = PYWALK_GIL_UNKNOWN,
                                     .atomic = true};
        if (e->flags & BPFW_F_GIL_KNOWN)
                th->gil = e->flags & BPFW_F_GIL_HELD ? PYWALK_GIL_HELD : 0;
        if (w->t.free_threaded)
                th->gil = PYWALK_NO_GIL | PYWALK_GIL_UNKNOWN;
        pysnap_reset(&w->snap);
        int rc = 0;
        for (int pass = 0;; pass++) {
                rc = bpf_frames(w, e, &th->depth);
                if (rc < 0 || !w->n_pending)
                        break;
                rc = code_verify_pending(w);
                if (rc == -ESRCH) {
                        /*
                         * The process has exited: what the table vouched for
                         * was checked a batch ago, and is taken as it was (the
                         * last events of a process still decode).
                         */
                        for (size_t i = 0; i < w->n_pending; i++)
                                w->pending[i]->checked_sample = w->sample_no;
                        rc = 0;
                }
                if (rc <= 0)
                        break;
                if (pass == 1) {
                        rc = PYWALK_TORN;
                        break;
                }
        }
        if (rc < 0 && rc != PYWALK_TORN && rc != PYWALK_CODE_GONE && rc != PYWALK_CODE_UNREAD)
                return rc;
        th->status = rc;
        th->frames = rc == 0 ? w->frames : NULL;
        if (rc != 0)
                th->depth = 0;
        return 0;
}

/* ---- threads and interpreters ------------------------------------------------ */

/* Bytes of a tstate to read: every field used, and the 3.15 base frame inside it. */
static size_t tstate_read_len(const struct pylayout *L)
{
        int32_t offs[] = {L->ts_next,          L->ts_interp,     L->ts_frame,
                          L->ts_thread_id,     L->ts_native_tid, L->ts_datastack_chunk,
                          L->ts_datastack_top, L->ts_state};
        size_t end = 0;
        for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++)
                if (offs[i] >= 0 && (size_t)offs[i] + 8 > end)
                        end = (size_t)offs[i] + 8;
        if (L->ts_base_frame >= 0 && (size_t)L->ts_base_frame + L->fr_read > end)
                end = (size_t)L->ts_base_frame + L->fr_read;
        return end;
}

/* Fetch the 8-byte field at base+off (next sample's batch merges neighbouring fields). */
static int fetch_u64(struct pywalk *w, uint64_t base, int32_t off, uint64_t *v)
{
        return fetch(w, base + (uint64_t)off, v, 8);
}

struct gil_view {
        bool known, no_gil;
        uint64_t holder;
};

/* Who holds the GIL of `interp` (or the process, before 3.12). */
static int gil_read(struct pywalk *w, uint64_t interp, bool main, struct gil_view *g)
{
        const struct pylayout *L = &w->L;
        int rc = 0;
        memset(g, 0, sizeof(*g));
        if (L->gil == PYL_GIL_SYMBOL) {
                if (!w->t.tstate_current_addr)
                        return 0;
                rc = fetch(w, w->t.tstate_current_addr, &g->holder, 8);
        } else if (L->gil == PYL_GIL_RUNTIME) {
                rc = fetch_u64(w, w->t.runtime_addr, L->rt_tstate_current, &g->holder);
        } else {
                uint64_t gil;
                rc = fetch_u64(w, interp, L->is_ceval_gil, &gil);
                if (rc < 0 || !gil)
                        return fatal_read(rc) ? rc : 0;
                if (main)
                        w->main_gil = gil;
                int32_t lo = L->gil_holder, hi = L->gil_holder + 8;
                if (L->gil_locked < lo)
                        lo = L->gil_locked;
                if (L->gil_locked + 4 > hi)
                        hi = L->gil_locked + 4;
                if (L->gil_enabled >= 0 && L->gil_enabled < lo)
                        lo = L->gil_enabled;
                if (L->gil_enabled >= 0 && L->gil_enabled + 4 > hi)
                        hi = L->gil_enabled + 4;
                uint8_t buf[512];
                if (hi - lo > (int32_t)sizeof(buf) || lo < 0)
                        return 0;
                rc = fetch(w, gil + (uint64_t)lo, buf, (size_t)(hi - lo));
                if (rc < 0)
                        return fatal_read(rc) ? rc : 0;
                if (L->gil_enabled >= 0 && rd32(buf + (L->gil_enabled - lo)) == 0) {
                        g->no_gil = true;
                        return 0;
                }
                bool locked = rd32(buf + (L->gil_locked - lo)) != 0;
                g->holder = locked ? rd64(buf + (L->gil_holder - lo)) : 0;
        }
        if (rc < 0)
                return fatal_read(rc) ? rc : 0;
        g->known = true;
        return 0;
}

static unsigned gil_flags(const struct pylayout *L, const struct gil_view *g, uint64_t tstate,
                          const uint8_t *ts)
{
        if (g->no_gil) {
                if (L->ts_state < 0)
                        return PYWALK_NO_GIL | PYWALK_GIL_UNKNOWN;
                return PYWALK_NO_GIL |
                       (rd32(ts + L->ts_state) == THREAD_ATTACHED ? PYWALK_GIL_HELD : 0);
        }
        if (!g->known)
                return PYWALK_GIL_UNKNOWN;
        return g->holder == tstate ? PYWALK_GIL_HELD : 0;
}

/*
 * Before 3.11 the kernel TID is only in glibc's struct pthread (pthread_t is
 * its address). Find its offset once: search the struct of every known thread
 * for the main thread's TID (the PID, or its namespace-local value); check a
 * hit against the other threads, whose value there must be a plausible TID.
 * A thread state that carries another thread's id is no evidence: 2.7 links
 * a new thread's state with its creator's id until the thread starts, and
 * a search made then must not fail for it. Tried at every sample at first,
 * then every TID_SEARCH_EVERY-th: a search that never succeeds leaves every
 * thread's state unknown (counted on CPU).
 */
static void tid_search(struct pywalk *w)
{
        if (w->tid_off >= 0 || w->L.ts_native_tid >= 0 || !w->n_tid_candidates ||
            (w->tid_tries >= TID_SEARCH_TRIES && w->sample_no % TID_SEARCH_EVERY))
                return;
        w->tid_tries++;
        for (size_t c = 0; c < w->n_tid_candidates; c++) {
                uint64_t pt = w->tid_candidates[c];
                for (uint32_t base = 0; base < TID_SCAN_BYTES; base += TID_SCAN_CHUNK) {
                        uint8_t buf[TID_SCAN_CHUNK];
                        if (memsrc_read(w->m, pt + base, buf, sizeof(buf)) < 0)
                                break;
                        for (uint32_t i = 0; i < TID_SCAN_CHUNK; i += 4) {
                                int32_t v = rd32(buf + i);
                                if (v <= 0 || (v != w->pids[0] && v != w->pids[1]))
                                        continue;
                                bool ok = true;
                                for (size_t o = 0; o < w->n_tid_candidates && ok; o++) {
                                        int32_t ov;
                                        if (w->tid_candidates[o] == pt)
                                                continue; /* c itself, or a state with its id */
                                        if (memsrc_read(w->m, w->tid_candidates[o] + base + i, &ov,
                                                        4) < 0 ||
                                            ov <= 0 || ov > (1 << 22) || ov == v)
                                                ok = false;
                                }
                                if (ok) {
                                        w->tid_off = (int32_t)(base + i);
                                        return;
                                }
                        }
                }
        }
}

static int64_t thread_tid(struct pywalk *w, const uint8_t *ts, uint64_t thread_id)
{
        const struct pylayout *L = &w->L;
        if (L->ts_native_tid >= 0) {
                int64_t v = (int64_t)rd64(ts + L->ts_native_tid);
                return v > 0 ? v : -1;
        }
        int32_t v;
        if (w->tid_off < 0 || !thread_id || fetch(w, thread_id + (uint64_t)w->tid_off, &v, 4) < 0)
                return -1;
        return v > 0 ? v : -1;
}

/*
 * Read everything this sample has used so far again, in one batch, and the
 * thread state at `tstate` from it into ts: a fresh look at a thread whose
 * stack was read torn. Returns 0 or a read error.
 */
static int snap_reread(struct pywalk *w, uint64_t tstate, uint8_t *ts, size_t ts_len)
{
        snap_end(w);
        snap_begin(w);
        /* All of it was used in this sample: keep it in the next one's batch. */
        pysnap_all_used(&w->snap);
        return fetch(w, tstate, ts, ts_len);
}

/*
 * A thread with no frames whose thread id (or TID) another state of its
 * interpreter has too is one OS thread seen twice: before 3.12 (and on 2.7) the thread
 * that starts another makes the new thread's state itself, with its own ids
 * (thread_id, native_thread_id), and the new thread sets its ids only once
 * it runs (3.11 one after the other: a state was seen with its own thread
 * id and its creator's TID). Reported, that state was a second, empty sample of the starting
 * thread in the same instant, under the same trace thread (a server's
 * accepting thread, one per connection). So a thread with no frames waits
 * until its interpreter is walked (frameless_hold()), and is reported then
 * unless a thread with frames had its id; of several with one id and no
 * frames, the last in the list (the oldest) is reported.
 */
static bool frameless_hold(struct pywalk *w, const struct pywalk_thread *th)
{
        if (th->status != 0 || th->depth != 0 || !th->thread_id)
                return false;
        if (w->n_frameless == w->cap_frameless) {
                size_t cap = w->cap_frameless ? 2 * w->cap_frameless : 8;
                struct pywalk_thread *p = realloc(w->frameless, cap * sizeof(*p));
                if (!p)
                        return false; /* reported at once: no worse than before */
                w->frameless = p;
                w->cap_frameless = cap;
        }
        w->frameless[w->n_frameless++] = *th;
        return true;
}

/* Note a thread state reported or held back in this walk of its interpreter. */
static void walked_note(struct pywalk *w, const struct pywalk_thread *th)
{
        if (w->n_walked == w->cap_walked) {
                size_t cap = w->cap_walked ? 2 * w->cap_walked : 16;
                struct walked_thread *p = realloc(w->walked, cap * sizeof(*p));
                if (!p)
                        return; /* a twin or a restart may report it twice: as before */
                w->walked = p;
                w->cap_walked = cap;
        }
        w->walked[w->n_walked++] =
            (struct walked_thread){.tstate = th->tstate_addr,
                                   .thread_id = th->thread_id,
                                   .native_tid = th->native_tid,
                                   .frames = th->status == 0 && th->depth > 0};
}

/*
 * Whether a state with frames is a second one of an OS thread already
 * reported with frames in this walk: same thread id, same TID. Before 3.11
 * the TID is read from glibc's struct pthread, which the next thread of a
 * program that starts one per job reuses, pthread_t and all: a state of a
 * thread that has just ended, still linked, read in the same walk as its
 * successor's, takes the successor's ids, and the trace had two samples of
 * one thread in one instant (1 in ~2000 samples of spawner.py on 3.10). The
 * first one read is kept. Otherwise notes it (a set by both ids).
 */
static bool framed_twin(struct pywalk *w, const struct pywalk_thread *th)
{
        if (th->status != 0 || !th->depth || !th->thread_id || th->native_tid <= 0)
                return false;
        uint64_t key = (th->thread_id * 0x9e3779b97f4a7c15ull) ^ (uint64_t)th->native_tid;
        key |= 1; /* 0 is the empty slot */
        if (2 * (w->n_twins + 1) > w->cap_twins) {
                size_t cap = w->cap_twins ? 2 * w->cap_twins : 64;
                uint64_t *v = calloc(cap, sizeof(*v));
                if (!v)
                        return false; /* not checked: as before */
                for (size_t i = 0; i < w->cap_twins; i++) {
                        if (!w->twins[i])
                                continue;
                        size_t j = (size_t)(w->twins[i] >> 7) & (cap - 1);
                        while (v[j])
                                j = (j + 1) & (cap - 1);
                        v[j] = w->twins[i];
                }
                free(w->twins);
                w->twins = v;
                w->cap_twins = cap;
        }
        size_t j = (size_t)(key >> 7) & (w->cap_twins - 1);
        for (; w->twins[j]; j = (j + 1) & (w->cap_twins - 1))
                if (w->twins[j] == key)
                        return true;
        w->twins[j] = key;
        w->n_twins++;
        return false;
}

static bool walked_before(const struct pywalk *w, uint64_t tstate)
{
        for (size_t i = 0; i < w->n_walked; i++)
                if (w->walked[i].tstate == tstate)
                        return true;
        return false;
}

/*
 * A set of ids, for frameless_report(): open addressing, 0 the empty slot.
 * A thread id and a TID are kept apart by a tag bit.
 */
#define ID_TID_TAG (1ull << 63)

static bool idset_add(uint64_t *set, size_t cap, uint64_t id, bool insert)
{
        size_t i = (size_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
        for (; set[i]; i = (i + 1) & (cap - 1))
                if (set[i] == id)
                        return true;
        if (insert)
                set[i] = id;
        return false;
}

/* Whether a thread's ids are in the set; with `insert`, they are added. */
static bool idset_has(uint64_t *set, size_t cap, uint64_t thread_id, int64_t native_tid,
                      bool insert)
{
        bool in = thread_id && idset_add(set, cap, thread_id, insert);
        if (native_tid > 0)
                in = idset_add(set, cap, (uint64_t)native_tid | ID_TID_TAG, insert) || in;
        return in;
}

/*
 * Report the held-back threads of the interpreter just walked
 * (frameless_hold()): those whose thread id and TID no thread with frames
 * has, and, of several that share one, the last in the list. Linear in the
 * threads (a program may have many states with no frames: threads of a C
 * library that calls into Python now and then).
 */
static int frameless_report(struct pywalk *w, pywalk_thread_fn fn, void *ctx, bool *stop)
{
        if (!w->n_frameless)
                return 0;
        size_t cap = 16;
        while (cap < 4 * (w->n_walked + w->n_frameless))
                cap *= 2;
        uint64_t *framed = calloc(cap, sizeof(*framed)), *later = calloc(cap, sizeof(*later));
        bool *skip = calloc(w->n_frameless, sizeof(*skip));
        if (framed && later && skip) {
                for (size_t k = 0; k < w->n_walked; k++)
                        if (w->walked[k].frames)
                                idset_has(framed, cap, w->walked[k].thread_id,
                                          w->walked[k].native_tid, true);
                for (size_t i = w->n_frameless; i-- > 0;) {
                        const struct pywalk_thread *th = &w->frameless[i];
                        skip[i] = idset_has(framed, cap, th->thread_id, th->native_tid, false);
                        /* A later one (older state) with one of its ids: that one stands. */
                        skip[i] =
                            idset_has(later, cap, th->thread_id, th->native_tid, true) || skip[i];
                }
        } /* out of memory: all are reported, as before */
        int rc = 0;
        for (size_t i = 0; i < w->n_frameless && !*stop && rc == 0; i++) {
                if (skip && skip[i])
                        continue;
                int frc = fn(ctx, &w->frameless[i]);
                if (frc < 0)
                        rc = frc;
                else if (frc > 0)
                        *stop = true;
        }
        free(framed);
        free(later);
        free(skip);
        return rc;
}

/* Walk the threads of one interpreter; *stop set when the callback asked to stop. */
static int walk_interp(struct pywalk *w, uint64_t interp, int64_t index, pywalk_thread_fn fn,
                       void *ctx, unsigned *nthreads, bool *stop)
{
        const struct pylayout *L = &w->L;
        uint64_t head, id = (uint64_t)index;
        int rc = fetch_u64(w, interp, L->is_threads_head, &head);
        if (rc == 0 && L->is_id >= 0)
                rc = fetch_u64(w, interp, L->is_id, &id);
        if (rc < 0)
                return fatal_read(rc) ? rc : 0;
        struct gil_view g;
        if ((rc = gil_read(w, interp, index == 0, &g)) < 0)
                return rc;
        size_t ts_len = tstate_read_len(L);
        uint8_t ts[1024];
        struct cycle cyc;
        cycle_init(&cyc);
        w->n_walked = w->n_frameless = 0;
        if (w->n_twins)
                memset(w->twins, 0, w->cap_twins * sizeof(*w->twins));
        w->n_twins = 0;
        unsigned first = *nthreads, restarts = 0;
        for (uint64_t tstate = head; tstate && !*stop; (*nthreads)++) {
                struct pywalk_thread th = {.tstate_addr = tstate,
                                           .native_tid = -1,
                                           .interp_id = (int64_t)id,
                                           .gil = PYWALK_GIL_UNKNOWN};
                bool last = false;
                if (*nthreads >= PYWALK_MAX_THREADS) {
                        th.status = PYWALK_TORN;
                        last = true;
                } else if (cycle_seen(&cyc, tstate) || (rc = fetch(w, tstate, ts, ts_len)) < 0 ||
                           rd64(ts + L->ts_interp) != interp) {
                        if (rc < 0 && fatal_read(rc))
                                return rc;
                        /*
                         * The list changed under us: most often a thread that
                         * had just ended, its state freed and its memory
                         * reused while a link to it was still read. The rest
                         * of the list (the oldest threads, the main thread
                         * among them) was lost with it: 3% of the main
                         * thread's samples of a program that starts a thread
                         * per job. Read the list again, fresh, from its head,
                         * skipping the threads already reported.
                         */
                        rc = 0;
                        if (restarts < w->retries) {
                                restarts++;
                                snap_end(w);
                                snap_begin(w);
                                pysnap_all_used(&w->snap);
                                cycle_init(&cyc);
                                *nthreads = first - 1; /* counted again (the loop adds one) */
                                if ((rc = fetch_u64(w, interp, L->is_threads_head, &head)) < 0)
                                        return fatal_read(rc) ? rc : 0;
                                tstate = head;
                                continue;
                        }
                        th.status = PYWALK_TORN;
                        last = true;
                } else if (walked_before(w, tstate)) {
                        tstate = rd64(ts + L->ts_next); /* reported before a restart */
                        continue;
                } else {
                        th.thread_id = rd64(ts + L->ts_thread_id);
                        th.native_tid = thread_tid(w, ts, th.thread_id);
                        th.gil = gil_flags(L, &g, tstate, ts);
                        if (w->n_tid_candidates < TID_CANDIDATES && th.thread_id)
                                w->tid_candidates[w->n_tid_candidates++] = th.thread_id;
                        uint64_t misses = w->snap.misses;
                        rc = walk_frames(w, tstate, ts, &th.depth);
                        /*
                         * Torn: the stack changed while it was read. A few
                         * microseconds later it is most often readable, and
                         * dropping it would under-count exactly the code whose
                         * stack changes fast. A walk of a batch read at one
                         * instant that needed more than the batch (the stack
                         * changed shape since the last sample) mixed instants:
                         * read again, the batch now holds all it needs.
                         */
                        while ((rc == PYWALK_TORN ||
                                (rc == 0 && w->snap.atomic && w->snap.misses != misses)) &&
                               th.retries < w->retries) {
                                th.retries++;
                                rc = snap_reread(w, tstate, ts, ts_len);
                                misses = w->snap.misses;
                                if (rc == 0 && rd64(ts + L->ts_interp) != interp)
                                        rc = PYWALK_TORN;
                                else if (rc == 0)
                                        rc = walk_frames(w, tstate, ts, &th.depth);
                                else if (!fatal_read(rc))
                                        rc = PYWALK_TORN;
                        }
                        if (rc < 0 && rc != PYWALK_TORN)
                                return rc;
                        th.atomic = rc == 0 && w->snap.atomic && w->snap.misses == misses;
                        th.status = rc;
                        th.frames = rc == 0 ? w->frames : NULL;
                        if (rc != 0)
                                th.depth = 0;
                }
                walked_note(w, &th);
                if (!framed_twin(w, &th) && !frameless_hold(w, &th)) {
                        int frc = fn(ctx, &th);
                        if (frc < 0)
                                return frc;
                        if (frc > 0)
                                *stop = true;
                }
                if (last)
                        break;
                tstate = rd64(ts + L->ts_next);
        }
        return frameless_report(w, fn, ctx, stop);
}

static int interp_head(struct pywalk *w, uint64_t *head)
{
        const struct pylayout *L = &w->L;
        if (L->rt_interp_head >= 0)
                return fetch_u64(w, w->t.runtime_addr, L->rt_interp_head, head);
        return fetch(w, w->t.interp_head_addr, head, 8);
}

int pywalk_sample(struct pywalk *w, pywalk_thread_fn fn, void *ctx)
{
        w->sample_no++;
        code_cache_trim(w);
        tid_search(w);
        w->n_tid_candidates = 0;
        snap_begin(w);
        uint64_t interp, seen[MAX_INTERPS];
        int rc = interp_head(w, &interp);
        unsigned nthreads = 0;
        bool stop = false;
        for (int64_t i = 0; rc == 0 && interp && i < MAX_INTERPS && !stop; i++) {
                for (int64_t k = 0; k < i; k++)
                        if (seen[k] == interp)
                                goto done; /* a cycle in the interpreter list */
                seen[i] = interp;
                rc = walk_interp(w, interp, i, fn, ctx, &nthreads, &stop);
                if (rc == 0 && fetch_u64(w, interp, w->L.is_next, &interp) < 0)
                        break;
        }
done:
        if (rc == 0 && w->tasks)
                rc = pytasks_walk(w);
        snap_end(w);
        return rc;
}

int pywalk_gil_holder(struct pywalk *w, uint64_t *tstate)
{
        const struct pylayout *L = &w->L;
        uint64_t holder = 0;
        int rc = 0;
        *tstate = 0;
        /* Straight from the target: the snapshot holds the last sample's copies. */
        if (L->gil == PYL_GIL_SYMBOL) {
                if (w->t.tstate_current_addr)
                        rc = memsrc_read(w->m, w->t.tstate_current_addr, &holder, 8);
        } else if (L->gil == PYL_GIL_RUNTIME) {
                rc = memsrc_read(w->m, w->t.runtime_addr + (uint64_t)L->rt_tstate_current, &holder,
                                 8);
        } else if (w->main_gil && L->gil_enabled < 0) {
                int32_t lo = L->gil_holder < L->gil_locked ? L->gil_holder : L->gil_locked;
                int32_t hi =
                    L->gil_holder + 8 > L->gil_locked + 4 ? L->gil_holder + 8 : L->gil_locked + 4;
                uint8_t buf[64];
                if (lo < 0 || hi - lo > (int32_t)sizeof(buf))
                        return 0;
                rc = memsrc_read(w->m, w->main_gil + (uint64_t)lo, buf, (size_t)(hi - lo));
                if (rc == 0 && rd32(buf + (L->gil_locked - lo)))
                        holder = rd64(buf + (L->gil_holder - lo));
        }
        if (rc < 0)
                return fatal_read(rc) ? rc : 0;
        *tstate = holder;
        return 0;
}

void pywalk_set_retries(struct pywalk *w, unsigned retries)
{
        w->retries = retries;
}

void pywalk_set_batch_reader(struct pywalk *w, pywalk_batch_fn fn, void *ctx)
{
        w->batch_fn = fn;
        w->batch_ctx = ctx;
}

size_t pywalk_code_entries(const struct pywalk *w)
{
        return w->n_all;
}

uint64_t pywalk_reads(const struct pywalk *w)
{
        return w->m->n_calls;
}

/* ---- open / close ------------------------------------------------------------- */

static int open_status(int rc)
{
        return rc == -ESRCH   ? PYFIND_NO_PROCESS
               : rc == -EPERM ? PYFIND_PERMISSION
                              : PYFIND_NOT_READY;
}

int pywalk_open(const struct pyfind_target *t, struct memsrc *m, struct pywalk **out, char *err,
                size_t errlen)
{
        struct pywalk *w = calloc(1, sizeof(*w));
        if (!w) {
                snprintf(err, errlen, "out of memory");
                return PYFIND_UNSUPPORTED;
        }
        w->t = *t;
        w->m = m;
        w->snap.m = m;
        w->tid_off = -1;
        int rc = pylayout_for_target(t, m, &w->L, err, errlen);
        const struct pylayout *L = &w->L;
        if (rc == 0 &&
            (L->fr_read > FRAME_BUF || L->co_read > CODE_BUF || tstate_read_len(L) > 1024)) {
                snprintf(err, errlen, "Python %s: layout needs reads larger than the walker's",
                         L->name);
                rc = PYFIND_UNSUPPORTED;
        }
        if (rc == 0 && L->rt_interp_head >= 0 && !t->runtime_addr) {
                snprintf(err, errlen, "Python %s: _PyRuntime was not found", L->name);
                rc = PYFIND_UNSUPPORTED;
        }
        if (rc == 0 && L->rt_interp_head < 0 && !t->interp_head_addr) {
                snprintf(err, errlen,
                         "Python %s: interp_head was not found (a stripped binary without "
                         "its .symtab?)",
                         L->name);
                rc = PYFIND_UNSUPPORTED;
        }
        uint64_t interp = 0, tstate = 0, back = 0;
        if (rc == 0) {
                int r = interp_head(w, &interp);
                if (r == 0 && interp)
                        r = fetch_u64(w, interp, L->is_threads_head, &tstate);
                if (r == 0 && tstate)
                        r = fetch_u64(w, tstate, L->ts_interp, &back);
                if (r < 0) {
                        snprintf(err, errlen, "cannot read the interpreter state: %s",
                                 strerror(-r));
                        rc = open_status(r);
                } else if (!interp || !tstate) {
                        snprintf(err, errlen, "Python %s is not initialised yet (no %s)", L->name,
                                 interp ? "thread state" : "interpreter");
                        rc = PYFIND_NOT_READY;
                } else if (back != interp) {
                        snprintf(err, errlen,
                                 "Python %s: the first thread state does not point back to its "
                                 "interpreter (%#llx != %#llx): wrong layout for this build?",
                                 L->name, (unsigned long long)back, (unsigned long long)interp);
                        rc = PYFIND_UNSUPPORTED;
                }
        }
        if (rc == 0) {
                w->frames = calloc(PYWALK_MAX_DEPTH, sizeof(*w->frames));
                w->pending = calloc(MAX_STEPS, sizeof(*w->pending));
                w->hash_cap = 1024;
                w->hash = calloc(w->hash_cap, sizeof(*w->hash));
                if (!w->frames || !w->pending || !w->hash) {
                        snprintf(err, errlen, "out of memory");
                        rc = PYFIND_UNSUPPORTED;
                }
        }
        if (rc != 0) {
                pywalk_close(w);
                return rc;
        }
        w->pids[0] = t->pid;
        pid_t ns = t->pid > 0 ? procfs_ns_tid(t->pid, t->pid) : -1;
        w->pids[1] = ns > 0 ? ns : t->pid;
        /* Learn the threads' pthread_t values (and the TID offset) before the first sample. */
        if (L->ts_native_tid < 0) {
                for (uint64_t ts = tstate; ts && w->n_tid_candidates < TID_CANDIDATES;) {
                        uint64_t id, next;
                        if (fetch_u64(w, ts, L->ts_thread_id, &id) < 0 ||
                            fetch_u64(w, ts, L->ts_next, &next) < 0)
                                break;
                        if (id)
                                w->tid_candidates[w->n_tid_candidates++] = id;
                        ts = next == ts ? 0 : next;
                }
                tid_search(w);
        }
        *out = w;
        return 0;
}

void pywalk_close(struct pywalk *w)
{
        if (!w)
                return;
        for (size_t i = 0; i < w->n_all; i++)
                code_free(w->all[i]);
        free(w->all);
        free(w->hash);
        free(w->frames);
        free(w->walked);
        free(w->frameless);
        free(w->twins);
        free(w->pending);
        pytasks_free(w->tasks);
        pysnap_free(&w->snap);
        free(w);
}
