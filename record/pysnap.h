/*
 * pysnap.h - the per-sample snapshot of spans that every read of a walk goes
 * through (pywalk.c).
 *
 * A read not yet in the snapshot is issued and kept; the spans a sample used
 * are read again, all in one batched call, at the start of the next sample
 * (pysnap_begin), so a thread whose stack did not change shape costs no read
 * beyond that batch. What it guarantees:
 * - Within a sample, a range the snapshot holds is served from it, never
 *   read from the target again.
 * - Spans read in one sample are never mixed with copies from an earlier
 *   one: pysnap_begin() drops them all.
 * - `atomic` says that the batch that began the sample was read at one
 *   instant (by the batch reader, capture.h); `misses` counts the ranges
 *   read since outside that batch, so a caller can tell whether what it
 *   read came from that one instant.
 * - The batch is bounded (8192 spans, 32 MiB) whatever the target makes the
 *   walker read.
 * Not thread-safe: one walker, one thread.
 */
#ifndef PYFLAME_PYSNAP_H
#define PYFLAME_PYSNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memsrc.h"
#include "pywalk.h"

struct pysnap_span {
        uint64_t addr;
        size_t len, off; /* bytes at buf + off */
        bool used;
};

struct pysnap {
        struct memsrc *m; /* where misses are read from; set before the first use */
        uint64_t misses;  /* ranges read outside the sample's first batch, so far */
        bool atomic;      /* the sample's first batch came from the batch reader */
        struct pysnap_span *v;
        size_t n, cap;
        size_t n_sorted; /* v[0, n_sorted): the prefetched spans, sorted and disjoint */
        uint8_t *buf;
        size_t len, cap_buf;
        size_t hint;
        /* What to read at the start of the next sample, and the batch for it. */
        struct pysnap_span *next;
        size_t n_next, cap_next;
        struct memsrc_iov *iov;
        size_t cap_iov;
};

/*
 * Start a sample: drop what the last one read and read its used spans in
 * one batch, through `fn` (NULL: the memory source). A failed batch just
 * means "cold". Returns `atomic`.
 */
bool pysnap_begin(struct pysnap *s, pywalk_batch_fn fn, void *ctx);

/*
 * Drop everything, the next sample's batch included: an empty snapshot,
 * for reads that are not of one instant (pywalk_bpf_decode(): each event
 * is its own instant, long after the memory read for the one before may
 * have been freed and reused).
 */
void pysnap_reset(struct pysnap *s);

/*
 * End a sample: the spans it used, and `n_extra` more of `extra_len` bytes
 * at `extra`, make the next sample's batch (sorted, and merged when close).
 */
void pysnap_end(struct pysnap *s, const uint64_t *extra, size_t n_extra, size_t extra_len);

/* Mark every span read so far as used (kept in the next batch). */
void pysnap_all_used(struct pysnap *s);

/*
 * [addr, addr+len) from the snapshot or the target (then kept): *out points
 * into the snapshot, valid until the next read that misses it (which may
 * move the buffer). Returns 0 or a memsrc error.
 */
int pysnap_fetch_ptr(struct pysnap *s, uint64_t addr, size_t len, const uint8_t **out);

/* The same, copied into dst (zeroed on error). */
int pysnap_fetch(struct pysnap *s, uint64_t addr, void *dst, size_t len);

/* Make [addr, addr+len) one span; smaller used spans inside it stop being prefetched. */
int pysnap_fetch_region(struct pysnap *s, uint64_t addr, size_t len);

/*
 * pysnap_fetch() for n ranges at once: those not in the snapshot are read in
 * one batched call and kept. Returns 0, or the error of that call (then
 * nothing is kept).
 */
int pysnap_fetch_batch(struct pysnap *s, const struct memsrc_iov *want, size_t n);

/* Is [addr, addr+len) in the snapshot already? */
bool pysnap_covered(struct pysnap *s, uint64_t addr, size_t len);

void pysnap_free(struct pysnap *s);

#endif
