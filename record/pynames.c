/*
 * pynames.c - the names threading gave a target's threads
 * (pywalk_thread_names(), pywalk.h), read through the walker's layout and
 * type cache but never through its per-sample snapshot.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pystr.h"
#include "pywalk_int.h"

/* ---- thread names ------------------------------------------------------------ */

/*
 * threading keeps the Thread object of every thread it knows in
 * threading._active, a dict from get_ident() (the thread_id of the thread's
 * state) to the Thread; the name is the Thread's _name attribute
 * (_Thread__name in 2.x). Reaching it means reading four dicts: the
 * interpreter's modules dict (sys.modules), the threading module's globals,
 * _active, and the Thread's attributes. From 3.11 on those attributes are
 * often not a dict at all but a "values" array indexed like the shared keys
 * of the object's class (ht_cached_keys): behind the object (3.11, 3.12) or
 * inside it (3.13+); such a class may still have a real dict made for one
 * object, which then wins.
 *
 * None of this goes through the sample snapshot: names are read about once a
 * second, and their reads must not join the next sample's batch. Every
 * object's type is checked by its flags, every size and count bounded; a
 * read that fails or a shape that does not fit means "no name".
 */

#define MAX_DICT_SLOTS   (1u << 20) /* hash table slots of a dict we read */
#define MAX_DICT_SCAN    (1u << 15) /* entries compared against a key: larger dicts give no name */
#define MAX_OBJECT_ATTRS 64         /* entries of an instance read whole (pywalk_object_attrs) */
#define MAX_ATTR_OFFSET  4096       /* tp_dictoffset or tp_basicsize we believe */
#define DICT_HEAD_BUF    128
#define KEYS_HEAD_BUF    64

#define TPFLAGS_INLINE_VALUES (1ul << 2)  /* 3.13+ */
#define TPFLAGS_MANAGED_DICT  (1ul << 4)  /* 3.11+ */
#define TPFLAGS_INT           (1ul << 23) /* 2.x int */
#define TPFLAGS_LONG          (1ul << 24)
#define TPFLAGS_DICT          (1ul << 29)

#define DICT_KEYS_SPLIT 2 /* dk_kind of a class's shared keys (3.11+) */

/* Internal result: nothing usable on the way to a name (not an error). */
#define NO_NAME 1

/* A failed read or decode on the way to a name: only the process's end and such count. */
static int soft(int rc)
{
        return fatal_read(rc) ? rc : NO_NAME;
}

static int read_word(struct pywalk *w, uint64_t addr, uint64_t *v)
{
        int rc = memsrc_read(w->m, addr, v, 8);
        return rc < 0 ? soft(rc) : 0;
}

/* A dict's entries as laid out in memory. */
struct dict_view {
        uint64_t entries; /* entry 0 */
        uint64_t values;  /* split table: values[0]; 0 when the values are in the entries */
        uint32_t n;       /* entries to look at (2.x: every slot) */
        uint8_t kind;     /* dk_kind on 3.11+, else 0 */
        uint8_t esize, key_off, value_off;
};

/* The entries of the 3.x keys object at `keys`, whose values are at `values` when split. */
static int keys_view(struct pywalk *w, uint64_t keys, uint64_t values, struct dict_view *v)
{
        const struct pylayout *L = &w->L;
        uint8_t k[KEYS_HEAD_BUF];
        if (!keys || L->dk_indices < 0 || (size_t)L->dk_indices > sizeof(k))
                return NO_NAME;
        int rc = memsrc_read(w->m, keys, k, (size_t)L->dk_indices);
        if (rc < 0)
                return soft(rc);
        uint64_t size, index_bytes;
        uint8_t kind = 0;
        if (L->dicts == PYL_DICT_36) {
                size = rd64(k + L->dk_size);
                unsigned width = size <= 0xff ? 1 : size <= 0xffff ? 2 : 4;
                index_bytes = size * width;
        } else {
                uint8_t log2 = k[L->dk_size], log2_index = k[L->dk_log2_index_bytes];
                if (log2 > 20 || log2_index > 22)
                        return NO_NAME;
                size = 1ull << log2;
                index_bytes = 1ull << log2_index;
                if (index_bytes != size * (log2 < 8 ? 1 : log2 < 16 ? 2 : 4))
                        return NO_NAME;
                kind = k[L->dk_kind];
                if (kind > DICT_KEYS_SPLIT)
                        return NO_NAME;
        }
        int64_t n = (int64_t)rd64(k + L->dk_nentries);
        if (size < 8 || size > MAX_DICT_SLOTS || (size & (size - 1)) || n <= 0 ||
            (uint64_t)n > size)
                return NO_NAME;
        bool general = L->dicts == PYL_DICT_36 || kind == 0;
        *v = (struct dict_view){
            .entries = keys + (uint64_t)L->dk_indices + index_bytes,
            .values = values,
            .n = (uint32_t)n,
            .kind = kind,
            .esize = general ? 24 : 16,
            .key_off = general ? 8 : 0,
            .value_off = general ? 16 : 8,
        };
        return 0;
}

/* The entries of the dict object at `dict` (its type checked). */
static int dict_view(struct pywalk *w, uint64_t dict, struct dict_view *v)
{
        const struct pylayout *L = &w->L;
        int32_t end = L->ob_type + 8;
        int32_t offs[] = {L->dict_keys, L->dict_values, L->dict_mask};
        for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++)
                if (offs[i] + 8 > end)
                        end = offs[i] + 8;
        uint8_t d[DICT_HEAD_BUF];
        if (!dict || L->dict_keys < 0 || end > (int32_t)sizeof(d))
                return NO_NAME;
        int rc = memsrc_read(w->m, dict, d, (size_t)end);
        uint64_t flags;
        if (rc == 0)
                rc = pywalk_type_flags(w, rd64(d + L->ob_type), &flags);
        if (rc < 0)
                return soft(rc);
        if (!(flags & TPFLAGS_DICT))
                return NO_NAME;
        if (L->dicts == PYL_DICT_PY2) {
                uint64_t slots = rd64(d + L->dict_mask) + 1, table = rd64(d + L->dict_keys);
                if (slots < 8 || slots > MAX_DICT_SLOTS || (slots & (slots - 1)) || !table)
                        return NO_NAME;
                *v = (struct dict_view){.entries = table,
                                        .n = (uint32_t)slots,
                                        .esize = 24,
                                        .key_off = 8,
                                        .value_off = 16};
                return 0;
        }
        uint64_t values = L->dict_values >= 0 ? rd64(d + L->dict_values) : 0;
        return keys_view(w, rd64(d + L->dict_keys),
                         values ? values + (uint64_t)L->values_values : 0, v);
}

/* Key and value of entry i whose `esize` bytes are `e` (a split table's value is read). */
static int entry_kv(struct pywalk *w, const struct dict_view *v, uint32_t i, const uint8_t *e,
                    uint64_t *key, uint64_t *value)
{
        *key = rd64(e + v->key_off);
        if (!v->values) {
                *value = rd64(e + v->value_off);
                return 0;
        }
        return read_word(w, v->values + 8 * (uint64_t)i, value);
}

/*
 * Read the first bytes of the str or int at addr: `want` of them when they
 * read (short strs are then decoded without another read), else the `need`
 * that every such object has (the object may end where its mapping does).
 */
static int read_head(struct pywalk *w, uint64_t addr, uint8_t *buf, size_t want, size_t need)
{
        int rc = memsrc_read(w->m, addr, buf, want);
        if (rc < 0 && !fatal_read(rc) && need < want)
                return memsrc_read(w->m, addr, buf, need) < 0 ? NO_NAME : (int)need;
        return rc < 0 ? soft(rc) : (int)want;
}

/* Bytes of a str worth reading at once: the header and a short identifier. */
static size_t str_head_len(const struct pylayout *L)
{
        return pywalk_object_head_len(L) + 32 < OBJ_PREFIX ? pywalk_object_head_len(L) + 32
                                                           : OBJ_PREFIX;
}

/* 1 when the object at `key` (first `prelen` bytes in `pre`) is the str `want`, 0 when not. */
static int key_is(struct pywalk *w, uint64_t key, const uint8_t *pre, size_t prelen,
                  const char *want)
{
        const struct pylayout *L = &w->L;
        int32_t len_off = L->strings == PYL_STR_PY2 ? L->bytes_size : L->str_length;
        if ((size_t)len_off + 8 > prelen || rd64(pre + len_off) != strlen(want))
                return 0; /* a str of another length, or not a str */
        char *text;
        size_t n;
        int rc = pywalk_read_object(w, key, true, pre, prelen, &text, &n);
        if (rc < 0)
                return fatal_read(rc) ? rc : 0;
        bool same = n == strlen(want) && memcmp(text, want, n) == 0;
        free(text);
        return same;
}

/*
 * The value under the str key `want` among the entries `v`, trying entry
 * *hint first (where it was found last time) and updating it. Returns 0 with
 * *value, NO_NAME when it is not there or cannot be read, or a fatal read
 * error.
 */
static int dict_find(struct pywalk *w, const struct dict_view *v, const char *want, uint32_t *hint,
                     uint64_t *value)
{
        size_t plen = pywalk_object_short_len(&w->L);
        uint8_t e[24], pre[OBJ_PREFIX];
        uint64_t key, val;
        int rc;
        if (*hint < v->n) {
                rc = memsrc_read(w->m, v->entries + (uint64_t)*hint * v->esize, e, v->esize);
                if (rc == 0)
                        rc = entry_kv(w, v, *hint, e, &key, &val);
                if (rc == 0 && key && val) {
                        rc = read_head(w, key, pre, str_head_len(&w->L), plen);
                        if (rc > 0 && (rc = key_is(w, key, pre, (size_t)rc, want)) == 1) {
                                *value = val;
                                return 0;
                        }
                }
                if (rc < 0 && fatal_read(rc))
                        return rc;
        }
        if (v->n > MAX_DICT_SCAN)
                return NO_NAME;
        /* Scan: every entry in one read, every key's header in one batched read. */
        uint8_t *ents = malloc((size_t)v->n * v->esize);
        uint8_t *heads = malloc((size_t)v->n * plen);
        struct memsrc_iov *iov = malloc((size_t)v->n * sizeof(*iov));
        uint32_t *idx = malloc((size_t)v->n * sizeof(*idx));
        rc = ents && heads && iov && idx ? 0 : -ENOMEM;
        if (rc == 0)
                rc = memsrc_read(w->m, v->entries, ents, (size_t)v->n * v->esize);
        size_t k = 0;
        for (uint32_t i = 0; rc == 0 && i < v->n; i++) {
                key = rd64(ents + (size_t)i * v->esize + v->key_off);
                /* Empty and deleted slots (2.x: a dummy key without a value). */
                if (!key || (!v->values && !rd64(ents + (size_t)i * v->esize + v->value_off)))
                        continue;
                iov[k] = (struct memsrc_iov){key, heads + k * plen, plen};
                idx[k++] = i;
        }
        int batch = rc == 0 && k ? memsrc_readv(w->m, iov, k) : 0;
        rc = rc < 0 ? soft(rc) : NO_NAME;
        if (fatal_read(batch))
                rc = batch;
        for (size_t j = 0; rc == NO_NAME && j < k; j++) {
                /* One key that does not read spoils the batch: then each is read alone. */
                int r = batch < 0 ? memsrc_read(w->m, iov[j].addr, iov[j].buf, plen) : 0;
                if (r == 0)
                        r = key_is(w, iov[j].addr, iov[j].buf, plen, want);
                if (r == 1) {
                        r = entry_kv(w, v, idx[j], ents + (size_t)idx[j] * v->esize, &key, &val);
                        if (r == 0 && val) {
                                *hint = idx[j];
                                *value = val;
                                rc = 0;
                        }
                }
                if (r < 0 && fatal_read(r))
                        rc = r;
        }
        free(ents);
        free(heads);
        free(iov);
        free(idx);
        return rc;
}

/* The value of the int at addr (a thread ident): 3.x a number in [0, 2^64), 2.x a C long. */
static int read_ident(struct pywalk *w, uint64_t addr, uint64_t *out)
{
        const struct pylayout *L = &w->L;
        uint8_t h[DICT_HEAD_BUF];
        size_t len = (size_t)L->int_digits;
        if (L->int_digits < L->ob_size + 8 || len + 12 > sizeof(h) ||
            (L->int_value >= 0 && L->int_value + 8 > L->int_digits))
                return NO_NAME;
        /* Two digits (a pthread_t) come with the header: every long is at least that big. */
        int got = read_head(w, addr, h, len + 8, len);
        uint64_t flags;
        int rc = got > 0 ? pywalk_type_flags(w, rd64(h + L->ob_type), &flags) : got;
        if (rc < 0)
                return soft(rc);
        if (rc == NO_NAME)
                return rc;
        if (L->ints == PYL_INT_PY2 && (flags & TPFLAGS_INT)) {
                /* 2.x made the ident a C long: the same bits as the thread state's. */
                *out = rd64(h + L->int_value);
                return 0;
        }
        if (!(flags & TPFLAGS_LONG))
                return NO_NAME;
        int64_t ndigits;
        if (L->ints == PYL_INT_TAG) {
                uint64_t tag = rd64(h + L->int_value);
                if ((tag & 3) == 2) /* negative */
                        return NO_NAME;
                ndigits = (tag & 3) == 1 ? 0 : (int64_t)(tag >> 3);
        } else {
                ndigits = (int64_t)rd64(h + L->ob_size);
        }
        if (ndigits < 0 || ndigits > 3)
                return NO_NAME;
        uint32_t d[3];
        if ((size_t)got < len + 4 * (size_t)ndigits) {
                if ((rc = memsrc_read(w->m, addr + len, h + len, 4 * (size_t)ndigits)) < 0)
                        return soft(rc);
        }
        memcpy(d, h + len, 4 * (size_t)ndigits);
        uint64_t v = 0;
        for (int64_t i = ndigits; i-- > 0;) {
                if (d[i] >> 30 || (i == 2 && d[i] >> 4))
                        return NO_NAME; /* not a 30-bit digit, or beyond 64 bits */
                v = v << 30 | d[i];
        }
        *out = v;
        return 0;
}

/* What one refresh of the names learnt about a class of threads (there are few). */
struct thread_type {
        uint64_t type, flags;
        int64_t basicsize, dictoffset;
        struct dict_view keys; /* of its shared keys (ht_cached_keys), once needed */
        int keys_rc;           /* -1: not read yet; else keys_view()'s result */
        uint32_t *hint;        /* where its instances keep the name (in struct pywalk) */
        uint64_t found_in;     /* shared keys whose entry *hint was found to be the name */
};

struct names_pass {
        struct thread_type types[NAME_TYPES];
        size_t n_types;
};

/* The flags and attribute layout of the class at `type`, once per refresh. */
static int thread_type_get(struct pywalk *w, struct names_pass *np, uint64_t type,
                           struct thread_type **out)
{
        const struct pylayout *L = &w->L;
        for (size_t i = 0; i < np->n_types; i++) {
                if (np->types[i].type == type) {
                        *out = &np->types[i];
                        return 0;
                }
        }
        /* tp_basicsize, tp_flags and tp_dictoffset in one read. */
        int32_t lo = L->tp_basicsize, hi = L->tp_dictoffset + 8;
        uint8_t buf[512];
        if (!type || L->tp_flags < lo || L->tp_flags + 8 > hi || hi - lo > (int32_t)sizeof(buf))
                return NO_NAME;
        int rc = memsrc_read(w->m, type + (uint64_t)lo, buf, (size_t)(hi - lo));
        if (rc < 0)
                return soft(rc);
        struct thread_type *t = &np->types[np->n_types < NAME_TYPES ? np->n_types++ : 0];
        *t = (struct thread_type){.type = type,
                                  .flags = rd64(buf + L->tp_flags - lo),
                                  .basicsize = (int64_t)rd64(buf),
                                  .dictoffset = (int64_t)rd64(buf + L->tp_dictoffset - lo),
                                  .keys_rc = -1};
        for (size_t i = 0; i < NAME_TYPES && !t->hint; i++)
                if (w->name_hint_type[i] == type)
                        t->hint = &w->name_hint[i];
        if (!t->hint) {
                size_t i = w->next_name_hint++ % NAME_TYPES;
                w->name_hint_type[i] = type;
                w->name_hint[i] = 0;
                t->hint = &w->name_hint[i];
        }
        *out = t;
        return 0;
}

/*
 * The entries of the attributes of the instance at obj kept the 3.11+ way
 * (`pre` holds the words before it): a dict of its own when one was made,
 * else the values array and the class's shared keys.
 */
static int managed_view(struct pywalk *w, uint64_t obj, const uint8_t *pre, size_t prelen,
                        struct thread_type *t, struct dict_view *v)
{
        const struct pylayout *L = &w->L;
        uint64_t dict = rd64(pre + prelen - (size_t)L->pre_dict), values = 0;
        if (L->attrs == PYL_ATTRS_MANAGED_311 && !dict && L->pre_values > 0) {
                values = rd64(pre + prelen - (size_t)L->pre_values);
        } else if (L->attrs == PYL_ATTRS_TAGGED_312 && (dict & 1)) {
                values = dict + 1; /* stored as the pointer minus one */
                dict = 0;
        } else if (L->attrs == PYL_ATTRS_INLINE_313 && !dict &&
                   (t->flags & TPFLAGS_INLINE_VALUES)) {
                uint8_t valid = 0;
                if (t->basicsize <= 0 || t->basicsize > MAX_ATTR_OFFSET || L->values_valid < 0)
                        return NO_NAME;
                values = obj + (uint64_t)t->basicsize;
                int rc = memsrc_read(w->m, values + (uint64_t)L->values_valid, &valid, 1);
                if (rc < 0)
                        return soft(rc);
                if (!valid)
                        return NO_NAME; /* moved into a dict that is gone again */
        }
        if (dict)
                return dict_view(w, dict, v);
        if (!values || L->ht_cached_keys < 0)
                return NO_NAME;
        if (t->keys_rc < 0) {
                uint64_t keys;
                t->keys_rc = read_word(w, t->type + (uint64_t)L->ht_cached_keys, &keys);
                if (t->keys_rc == 0)
                        t->keys_rc = keys_view(w, keys, 0, &t->keys);
                if (t->keys_rc == 0 && t->keys.kind != DICT_KEYS_SPLIT)
                        t->keys_rc = NO_NAME;
                if (t->keys_rc < 0)
                        return t->keys_rc;
        }
        *v = t->keys;
        v->values = values + (uint64_t)L->values_values;
        return t->keys_rc;
}

/* The entries of the attributes of the instance at obj: its __dict__, or its values. */
static int instance_view(struct pywalk *w, struct names_pass *np, uint64_t obj,
                         struct thread_type **type, struct dict_view *v)
{
        const struct pylayout *L = &w->L;
        /* The object's type and, before it, its managed dict or values pointers: one read. */
        size_t pre = 0;
        if (L->attrs != PYL_ATTRS_DICTOFFSET)
                pre = (size_t)(L->pre_values > L->pre_dict ? L->pre_values : L->pre_dict);
        uint8_t buf[DICT_HEAD_BUF];
        if (pre + (size_t)L->ob_type + 8 > sizeof(buf) || obj < pre)
                return NO_NAME;
        int rc = memsrc_read(w->m, obj - pre, buf, pre + (size_t)L->ob_type + 8);
        if (rc < 0)
                return soft(rc);
        struct thread_type *t;
        if ((rc = thread_type_get(w, np, rd64(buf + pre + L->ob_type), &t)) != 0)
                return rc;
        *type = t;
        if (pre && (t->flags & TPFLAGS_MANAGED_DICT))
                return managed_view(w, obj, buf, pre, t, v);
        if (t->dictoffset <= 0 || t->dictoffset > MAX_ATTR_OFFSET)
                return NO_NAME; /* no __dict__, or one at the end of a variable-size object */
        uint64_t dict;
        rc = read_word(w, obj + (uint64_t)t->dictoffset, &dict);
        return rc ? rc : dict_view(w, dict, v);
}

/* The attribute `attr` of the instance at obj, from its __dict__ or values. */
static int instance_attr(struct pywalk *w, struct names_pass *np, uint64_t obj, const char *attr,
                         uint64_t *value)
{
        struct thread_type *t;
        struct dict_view v;
        int rc = instance_view(w, np, obj, &t, &v);
        if (rc)
                return rc;
        /* Instances sharing keys (split tables, values arrays) share the name's index too. */
        if (v.values && v.entries == t->found_in && *t->hint < v.n)
                return read_word(w, v.values + 8 * (uint64_t)*t->hint, value);
        rc = dict_find(w, &v, attr, t->hint, value);
        t->found_in = rc == 0 && v.values ? v.entries : 0;
        return rc;
}

/* The str at addr as NUL-terminated UTF-8 in *out (malloc'd). */
static int read_str(struct pywalk *w, uint64_t addr, char **out)
{
        uint8_t pre[OBJ_PREFIX];
        size_t n;
        int rc = read_head(w, addr, pre, str_head_len(&w->L), pywalk_object_short_len(&w->L));
        if (rc > 0)
                rc = pywalk_read_object(w, addr, true, pre, (size_t)rc, out, &n);
        return rc < 0 ? soft(rc) : rc;
}

/* The names of one interpreter's threads, through its threading._active. */
static int interp_names(struct pywalk *w, uint64_t interp, int64_t id, pywalk_name_fn fn, void *ctx,
                        int *count)
{
        const struct pylayout *L = &w->L;
        uint64_t modules, module = 0, globals, active = 0;
        struct dict_view v;
        int rc = read_word(w, interp + (uint64_t)L->is_modules, &modules);
        if (rc == 0)
                rc = dict_view(w, modules, &v);
        if (rc == 0)
                rc = dict_find(w, &v, "threading", &w->hints[HINT_THREADING], &module);
        if (rc == 0)
                rc = read_word(w, module + (uint64_t)L->md_dict, &globals);
        if (rc == 0)
                rc = dict_view(w, globals, &v);
        if (rc == 0)
                rc = dict_find(w, &v, "_active", &w->hints[HINT_ACTIVE], &active);
        if (rc == 0)
                rc = dict_view(w, active, &v);
        if (rc == 0 && v.n > 2 * PYWALK_MAX_THREADS)
                rc = NO_NAME;
        if (rc)
                return rc < 0 ? rc : 0;
        struct names_pass np = {.n_types = 0};
        uint8_t *ents = malloc((size_t)v.n * v.esize);
        rc = ents ? memsrc_read(w->m, v.entries, ents, (size_t)v.n * v.esize) : -ENOMEM;
        const char *attr = L->major == 2 ? "_Thread__name" : "_name";
        for (uint32_t i = 0; rc == 0 && i < v.n; i++) {
                uint64_t key, thread, ident, name_obj;
                char *name = NULL;
                int r = entry_kv(w, &v, i, ents + (size_t)i * v.esize, &key, &thread);
                if (r == 0 && (!key || !thread))
                        continue;
                if (r == 0)
                        r = read_ident(w, key, &ident);
                if (r == 0)
                        r = instance_attr(w, &np, thread, attr, &name_obj);
                if (r == 0)
                        r = read_str(w, name_obj, &name);
                if (r == 0) {
                        fn(ctx, id, ident, name);
                        (*count)++;
                }
                free(name);
                if (r < 0)
                        rc = r;
        }
        free(ents);
        return rc < 0 ? soft(rc) : 0;
}

int pywalk_thread_names(struct pywalk *w, pywalk_name_fn fn, void *ctx)
{
        const struct pylayout *L = &w->L;
        if (L->is_modules < 0 || L->dict_keys < 0 || L->md_dict < 0 || L->int_digits < 0)
                return 0;
        uint64_t interp, seen[MAX_INTERPS];
        int rc =
            L->rt_interp_head >= 0
                ? memsrc_read(w->m, w->t.runtime_addr + (uint64_t)L->rt_interp_head, &interp, 8)
                : memsrc_read(w->m, w->t.interp_head_addr, &interp, 8);
        int count = 0;
        for (int64_t i = 0; rc == 0 && interp && i < MAX_INTERPS; i++) {
                for (int64_t k = 0; k < i; k++)
                        if (seen[k] == interp)
                                return count; /* a cycle in the interpreter list */
                seen[i] = interp;
                uint64_t id = (uint64_t)i;
                if (L->is_id >= 0 && memsrc_read(w->m, interp + (uint64_t)L->is_id, &id, 8) < 0)
                        id = (uint64_t)i;
                rc = interp_names(w, interp, (int64_t)id, fn, ctx, &count);
                if (rc == 0)
                        rc = memsrc_read(w->m, interp + (uint64_t)L->is_next, &interp, 8);
        }
        return rc < 0 && fatal_read(rc) ? rc : count;
}

/* ---- objects by name, for the asyncio tasks walk ----------------------------- */

int pywalk_module_global(struct pywalk *w, const char *module, const char *name, uint64_t *value)
{
        const struct pylayout *L = &w->L;
        if (L->is_modules < 0 || L->dict_keys < 0 || L->md_dict < 0)
                return NO_NAME;
        uint64_t interp, modules, mod = 0, globals;
        struct dict_view v;
        int rc =
            L->rt_interp_head >= 0
                ? memsrc_read(w->m, w->t.runtime_addr + (uint64_t)L->rt_interp_head, &interp, 8)
                : memsrc_read(w->m, w->t.interp_head_addr, &interp, 8);
        rc = rc < 0 ? soft(rc) : 0;
        if (rc == 0)
                rc = read_word(w, interp + (uint64_t)L->is_modules, &modules);
        if (rc == 0)
                rc = dict_view(w, modules, &v);
        if (rc == 0)
                rc = dict_find(w, &v, module, &w->hints[HINT_MODULE], &mod);
        if (rc == 0)
                rc = read_word(w, mod + (uint64_t)L->md_dict, &globals);
        if (rc == 0)
                rc = dict_view(w, globals, &v);
        if (rc == 0)
                rc = dict_find(w, &v, name, &w->hints[HINT_GLOBAL], value);
        return rc;
}

int pywalk_object_attr(struct pywalk *w, uint64_t obj, const char *attr, uint64_t *value)
{
        struct names_pass np = {.n_types = 0};
        return instance_attr(w, &np, obj, attr, value);
}

/*
 * What pywalk_object_attrs() remembers: str keys by address and which of
 * the caller's names each is (attribute names are interned strs the code of
 * their class holds; the caller forgets them now and then all the same);
 * the classes seen this sample; the last split table's entries (every
 * instance of a class shares them).
 */
#define ATTR_KEYS 128
struct pywalk_attrs {
        uint64_t key[ATTR_KEYS];
        int8_t which[ATTR_KEYS];
        size_t n_keys;
        struct names_pass np;
        uint64_t split_at; /* the entries below are those at split_at (0: none) */
        uint32_t split_n;
        int8_t split_which[MAX_OBJECT_ATTRS];
};

struct pywalk_attrs *pywalk_attrs_new(void)
{
        return calloc(1, sizeof(struct pywalk_attrs));
}

void pywalk_attrs_free(struct pywalk_attrs *a)
{
        free(a);
}

void pywalk_attrs_sample(struct pywalk_attrs *a, bool forget_keys)
{
        a->np.n_types = 0;
        a->split_at = 0;
        if (forget_keys)
                a->n_keys = 0;
}

/* Which of names[] the str key at `key` is: -1 for none, -2 when it does not read. */
static int attr_key(struct pywalk *w, struct pywalk_attrs *a, uint64_t key,
                    const char *const *names, size_t n_names)
{
        for (size_t i = 0; i < a->n_keys; i++)
                if (a->key[i] == key)
                        return a->which[i];
        size_t plen = pywalk_object_short_len(&w->L);
        uint8_t pre[OBJ_PREFIX];
        int rc = read_head(w, key, pre, str_head_len(&w->L), plen);
        int which = -1;
        for (size_t i = 0; rc > 0 && i < n_names && which < 0; i++) {
                int r = key_is(w, key, pre, (size_t)rc, names[i]);
                if (r < 0)
                        return fatal_read(r) ? r : -2;
                which = r == 1 ? (int)i : -1;
        }
        if (rc <= 0)
                return rc < 0 && fatal_read(rc) ? rc : -2;
        if (a->n_keys == ATTR_KEYS)
                a->n_keys = 0;
        a->key[a->n_keys] = key;
        a->which[a->n_keys++] = (int8_t)which;
        return which;
}

int pywalk_object_attrs(struct pywalk *w, uint64_t obj, const char *const *names, size_t n_names,
                        struct pywalk_attrs *a, uint64_t *values)
{
        struct thread_type *t;
        struct dict_view v;
        memset(values, 0, n_names * sizeof(*values));
        if (n_names > 127)
                return NO_NAME;
        int rc = instance_view(w, &a->np, obj, &t, &v);
        if (rc)
                return rc;
        if (v.n > MAX_OBJECT_ATTRS)
                return NO_NAME;
        uint8_t ents[MAX_OBJECT_ATTRS * 24];
        uint64_t vals[MAX_OBJECT_ATTRS];
        if (v.values) {
                /* A split table: the class's keys (once a sample), then this instance's values. */
                if (v.entries != a->split_at || v.n != a->split_n) {
                        a->split_at = 0;
                        rc = memsrc_read(w->m, v.entries, ents, (size_t)v.n * v.esize);
                        if (rc < 0)
                                return soft(rc);
                        for (uint32_t i = 0; i < v.n; i++) {
                                uint64_t key = rd64(ents + (size_t)i * v.esize + v.key_off);
                                int which = key ? attr_key(w, a, key, names, n_names) : -1;
                                if (which < -1)
                                        return which == -2 ? NO_NAME : which;
                                a->split_which[i] = (int8_t)which;
                        }
                        a->split_at = v.entries;
                        a->split_n = v.n;
                }
                rc = memsrc_read(w->m, v.values, vals, (size_t)v.n * 8);
                if (rc < 0)
                        return soft(rc);
                for (uint32_t i = 0; i < v.n; i++)
                        if (a->split_which[i] >= 0 && vals[i])
                                values[a->split_which[i]] = vals[i];
                return 0;
        }
        /* A dict of its own: every entry, key and value, in one read. */
        rc = memsrc_read(w->m, v.entries, ents, (size_t)v.n * v.esize);
        if (rc < 0)
                return soft(rc);
        for (uint32_t i = 0; i < v.n; i++) {
                const uint8_t *e = ents + (size_t)i * v.esize;
                uint64_t key = rd64(e + v.key_off), val = rd64(e + v.value_off);
                if (!key || !val)
                        continue; /* empty or deleted */
                int which = attr_key(w, a, key, names, n_names);
                if (which < -1)
                        return which == -2 ? NO_NAME : which;
                if (which >= 0)
                        values[which] = val;
        }
        return 0;
}

int pywalk_str_read(struct pywalk *w, uint64_t addr, char **out)
{
        return read_str(w, addr, out);
}

int pywalk_int_read(struct pywalk *w, uint64_t addr, uint64_t *out)
{
        return read_ident(w, addr, out);
}
