/*
 * pysnap.c - the per-sample snapshot of spans that a walk reads through
 * (see pysnap.h).
 */
#include "pysnap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PREFETCH_SPANS 8192
#define PREFETCH_BYTES (32u << 20)
#define SPAN_GAP       2048 /* prefetched spans closer than this are read as one */

/* Room for `spans` more spans and `extra` more bytes. */
static int snap_reserve(struct pysnap *s, size_t spans, size_t extra)
{
        if (s->cap - s->n < spans) {
                size_t cap = s->cap ? s->cap : 64;
                while (cap - s->n < spans)
                        cap *= 2;
                struct pysnap_span *v = realloc(s->v, cap * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                s->v = v;
                s->cap = cap;
        }
        if (s->cap_buf - s->len < extra) {
                size_t cap = s->cap_buf ? s->cap_buf : 65536;
                while (cap - s->len < extra)
                        cap *= 2;
                uint8_t *b = realloc(s->buf, cap);
                if (!b)
                        return -ENOMEM;
                s->buf = b;
                s->cap_buf = cap;
        }
        return 0;
}

static bool span_holds(const struct pysnap_span *p, uint64_t addr, size_t len)
{
        return addr >= p->addr && addr - p->addr <= p->len && len <= p->len - (addr - p->addr);
}

/*
 * The span holding [addr, addr+len), or NULL. The prefetched spans come
 * first, sorted and disjoint (binary search); spans read during this sample
 * follow (few once warm: a linear scan). The last hit is tried first.
 */
static struct pysnap_span *snap_find(struct pysnap *s, uint64_t addr, size_t len)
{
        if (s->hint < s->n && span_holds(&s->v[s->hint], addr, len))
                return &s->v[s->hint];
        size_t lo = 0, hi = s->n_sorted;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (s->v[mid].addr <= addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (lo && span_holds(&s->v[lo - 1], addr, len)) {
                s->hint = lo - 1;
                return &s->v[lo - 1];
        }
        for (size_t i = s->n_sorted; i < s->n; i++) {
                if (span_holds(&s->v[i], addr, len)) {
                        s->hint = i;
                        return &s->v[i];
                }
        }
        return NULL;
}

/*
 * A miss: read [addr, addr+len) from the target into a new span at the end
 * of the snapshot (not yet marked used).
 */
static int snap_add(struct pysnap *s, uint64_t addr, size_t len, struct pysnap_span **out)
{
        s->misses++;
        int rc = snap_reserve(s, 1, len);
        if (rc < 0)
                return rc;
        rc = memsrc_read(s->m, addr, s->buf + s->len, len);
        if (rc < 0)
                return rc;
        *out = &s->v[s->n++];
        **out = (struct pysnap_span){.addr = addr, .len = len, .off = s->len};
        s->len += len;
        return 0;
}

/*
 * [addr, addr+len) from the snapshot or the target (then kept): *out points
 * into the snapshot, valid until the next read that misses it (which may
 * move the buffer).
 */
int pysnap_fetch_ptr(struct pysnap *s, uint64_t addr, size_t len, const uint8_t **out)
{
        struct pysnap_span *p = snap_find(s, addr, len);
        if (!p) {
                int rc = snap_add(s, addr, len, &p);
                if (rc < 0)
                        return rc;
                s->hint = s->n - 1;
        }
        p->used = true;
        *out = s->buf + p->off + (addr - p->addr);
        return 0;
}

/* Read [addr, addr+len) into dst, from the snapshot or the target (then kept). */
int pysnap_fetch(struct pysnap *s, uint64_t addr, void *dst, size_t len)
{
        const uint8_t *p;
        int rc = pysnap_fetch_ptr(s, addr, len, &p);
        if (rc == 0)
                memcpy(dst, p, len);
        else
                memset(dst, 0, len); /* defined either way */
        return rc;
}

/* Make sure [addr, addr+len) is one span; smaller used spans inside it stop being prefetched. */
int pysnap_fetch_region(struct pysnap *s, uint64_t addr, size_t len)
{
        struct pysnap_span *p = snap_find(s, addr, len);
        if (p) {
                p->used = true;
                return 0;
        }
        int rc = snap_add(s, addr, len, &p);
        if (rc < 0)
                return rc;
        for (size_t i = 0; i + 1 < s->n; i++)
                if (s->v[i].addr >= addr && s->v[i].addr - addr + s->v[i].len <= len)
                        s->v[i].used = false;
        p->used = true;
        return 0;
}

/*
 * fetch() for n ranges at once: those not in the snapshot are read in one
 * batched call and kept. Returns 0, or the error of that call (then nothing
 * is kept).
 */
int pysnap_fetch_batch(struct pysnap *s, const struct memsrc_iov *want, size_t n)
{
        size_t bytes = 0, k = 0;
        for (size_t i = 0; i < n; i++)
                bytes += want[i].len;
        int rc = snap_reserve(s, n, bytes);
        struct memsrc_iov siov[8];
        struct memsrc_iov *iov = rc < 0 ? NULL : n <= 8 ? siov : malloc(n * sizeof(*iov));
        if (!iov)
                return -ENOMEM;
        size_t off = s->len;
        for (size_t i = 0; i < n; i++) {
                if (snap_find(s, want[i].addr, want[i].len))
                        continue;
                iov[k++] = (struct memsrc_iov){want[i].addr, s->buf + off, want[i].len};
                off += want[i].len;
        }
        s->misses += k;
        rc = k ? memsrc_readv(s->m, iov, k) : 0;
        for (size_t i = 0; rc == 0 && i < k; i++) {
                s->v[s->n++] = (struct pysnap_span){
                    .addr = iov[i].addr, .len = iov[i].len, .off = s->len, .used = true};
                s->len += iov[i].len;
        }
        if (iov != siov)
                free(iov);
        for (size_t i = 0; rc == 0 && i < n; i++)
                rc = pysnap_fetch(s, want[i].addr, want[i].buf, want[i].len);
        return rc;
}

bool pysnap_covered(struct pysnap *s, uint64_t addr, size_t len)
{
        return snap_find(s, addr, len) != NULL;
}

/* Start a sample: read last sample's spans in one batch. A failure just means "cold". */
void pysnap_reset(struct pysnap *s)
{
        s->n = s->n_sorted = s->len = s->hint = 0;
        s->n_next = 0;
        s->atomic = false;
}

bool pysnap_begin(struct pysnap *s, pywalk_batch_fn fn, void *ctx)
{
        s->n = s->n_sorted = s->len = s->hint = 0;
        s->atomic = false;
        if (!s->n_next)
                return false;
        size_t total = 0;
        for (size_t i = 0; i < s->n_next; i++)
                total += s->next[i].len;
        if (s->cap < s->n_next) {
                struct pysnap_span *v = realloc(s->v, s->n_next * sizeof(*v));
                if (!v)
                        return false;
                s->v = v;
                s->cap = s->n_next;
        }
        if (s->cap_iov < s->n_next) {
                struct memsrc_iov *iov = realloc(s->iov, s->n_next * sizeof(*iov));
                if (!iov)
                        return false;
                s->iov = iov;
                s->cap_iov = s->n_next;
        }
        if (snap_reserve(s, 0, total) < 0)
                return false;
        size_t off = 0;
        for (size_t i = 0; i < s->n_next; i++) {
                s->v[i] = (struct pysnap_span){
                    .addr = s->next[i].addr, .len = s->next[i].len, .off = off};
                s->iov[i] = (struct memsrc_iov){
                    .addr = s->next[i].addr, .buf = s->buf + off, .len = s->next[i].len};
                off += s->next[i].len;
        }
        s->atomic = fn && fn(ctx, s->iov, s->n_next) == 0;
        if (s->atomic || memsrc_readv(s->m, s->iov, s->n_next) == 0) {
                s->n = s->n_sorted = s->n_next;
                s->len = total;
        }
        return s->atomic;
}

static int span_cmp(const void *a, const void *b)
{
        const struct pysnap_span *x = a, *y = b;
        return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/*
 * End a sample: the spans it used, and `extra` spans of `extra_len` bytes
 * each, are next sample's batch, sorted, and merged when less than SPAN_GAP
 * bytes apart: fewer ranges for the kernel to pin, and a gap shorter than a
 * page between two readable ranges is readable.
 */
void pysnap_end(struct pysnap *s, const uint64_t *extra, size_t n_extra, size_t extra_len)
{
        size_t bytes = 0, n = 0;
        s->n_next = 0;
        if (s->cap_next < s->n + n_extra) {
                struct pysnap_span *v = realloc(s->next, (s->n + n_extra) * sizeof(*v));
                if (!v)
                        return;
                s->next = v;
                s->cap_next = s->n + n_extra;
        }
        for (size_t i = 0; i < s->n && n < PREFETCH_SPANS; i++) {
                if (!s->v[i].used || bytes + s->v[i].len > PREFETCH_BYTES)
                        continue;
                s->next[n++] = s->v[i];
                bytes += s->v[i].len;
        }
        for (size_t i = 0; i < n_extra && n < s->cap_next && n < PREFETCH_SPANS; i++) {
                if (bytes + extra_len > PREFETCH_BYTES)
                        break;
                s->next[n++] = (struct pysnap_span){.addr = extra[i], .len = extra_len};
                bytes += extra_len;
        }
        /* A handful of spans, in nearly the same order every sample: insertion sort. */
        if (n > 64)
                qsort(s->next, n, sizeof(*s->next), span_cmp);
        for (size_t i = 1; n <= 64 && i < n; i++) {
                struct pysnap_span x = s->next[i];
                size_t j = i;
                for (; j > 0 && span_cmp(&s->next[j - 1], &x) > 0; j--)
                        s->next[j] = s->next[j - 1];
                s->next[j] = x;
        }
        for (size_t i = 0; i < n; i++) {
                struct pysnap_span *last = s->n_next ? &s->next[s->n_next - 1] : NULL;
                uint64_t end = s->next[i].addr + s->next[i].len;
                if (last && s->next[i].addr <= last->addr + last->len + SPAN_GAP) {
                        if (end > last->addr + last->len)
                                last->len = (size_t)(end - last->addr);
                        continue;
                }
                s->next[s->n_next++] = s->next[i];
        }
}

void pysnap_all_used(struct pysnap *s)
{
        for (size_t i = 0; i < s->n; i++)
                s->v[i].used = true;
}

void pysnap_free(struct pysnap *s)
{
        free(s->v);
        free(s->buf);
        free(s->next);
        free(s->iov);
        memset(s, 0, sizeof(*s));
}
