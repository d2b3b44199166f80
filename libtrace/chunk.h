/*
 * chunk.h - encoding and decoding of sample chunks, the BLOBs in the
 * sample_chunks table (format in schema/trace.sql). Internal to libtrace and
 * the pyflame_sqlite extension, which must decode exactly as the reader does:
 * both use the cursor below. Everything here is inline because the decoder
 * runs once per sample on the read path and the encoder once per sample on
 * the write path.
 *
 * The decoder trusts nothing: a blob may be truncated, hold overlong varints,
 * stack ids out of range or a record count that does not match its row. It
 * then returns TRACE_ERR_CORRUPT with a static reason, never reads past the
 * blob, and never loops more than `count` times.
 */
#ifndef PYFLAME_CHUNK_H
#define PYFLAME_CHUNK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pfutil.h"
#include "trace.h"

/* Largest encoded record: two 10-byte varints. */
#define CHUNK_RECORD_MAX 20u

/*
 * Sample and chunk times must lie within +-2^62 ns (146 years) of the start,
 * so that differences of two valid times never overflow.
 */
#define CHUNK_TIME_LIMIT ((int64_t)1 << 62)

/* Encoder state of the chunk being filled; the bytes go to a pf_buf. */
struct chunk_encoder {
        int64_t first_ns, last_ns;
        uint32_t count;
        uint32_t stack;
        unsigned state;
};

/*
 * Append one record for a sample at relative time t_ns. The caller has
 * checked t_ns >= e->last_ns (when e->count > 0), |t_ns| < CHUNK_TIME_LIMIT,
 * state <= TRACE_STATE_MASK, and reserved CHUNK_RECORD_MAX bytes in `b`.
 */
static inline void chunk_encode(struct chunk_encoder *e, struct pf_buf *b, int64_t t_ns,
                                uint32_t stack, unsigned state)
{
        uint64_t dt = 0;
        bool same = false;
        if (e->count == 0) {
                e->first_ns = t_ns;
        } else {
                dt = (uint64_t)(t_ns - e->last_ns);
                same = stack == e->stack && state == e->state;
        }
        b->len += pf_varint_put(b->data + b->len, dt << 1 | (same ? 1u : 0u));
        if (!same)
                b->len += pf_varint_put(b->data + b->len, (uint64_t)stack << 3 | state);
        e->last_ns = t_ns;
        e->stack = stack;
        e->state = state;
        e->count++;
}

/* Decoder of one chunk. Fill with chunk_cursor_init(). */
struct chunk_cursor {
        const uint8_t *p, *end;
        uint64_t left;     /* records still to decode */
        int64_t last_ns;   /* the row's last_ns, checked at the end */
        uint32_t n_stacks; /* stack ids must be below this */
        /* The record just decoded. */
        int64_t t_ns;
        uint32_t stack;
        unsigned state;
        bool started;
};

/*
 * Check a chunk row's header fields and prepare to decode its blob. Returns 0
 * or TRACE_ERR_CORRUPT with *why set to a static reason.
 */
static inline int chunk_cursor_init(struct chunk_cursor *c, const void *blob, size_t len,
                                    int64_t first_ns, int64_t last_ns, int64_t count,
                                    uint32_t n_stacks, const char **why)
{
        if (count < 1) {
                *why = "sample count below 1";
                return TRACE_ERR_CORRUPT;
        }
        if (first_ns <= -CHUNK_TIME_LIMIT || last_ns >= CHUNK_TIME_LIMIT || first_ns > last_ns) {
                *why = "first/last times out of order or out of range";
                return TRACE_ERR_CORRUPT;
        }
        /* Every record takes 1 to CHUNK_RECORD_MAX bytes. */
        if (!blob || (uint64_t)count > len || (uint64_t)len / CHUNK_RECORD_MAX > (uint64_t)count) {
                *why = "blob size does not fit the sample count";
                return TRACE_ERR_CORRUPT;
        }
        c->p = blob;
        c->end = c->p + len;
        c->left = (uint64_t)count;
        c->last_ns = last_ns;
        c->n_stacks = n_stacks;
        c->t_ns = first_ns;
        c->stack = 0;
        c->state = 0;
        c->started = false;
        return 0;
}

/*
 * Decode the next record into c->t_ns, c->stack, c->state. Returns 1 for a
 * record, 0 at the end of a consistent chunk, or TRACE_ERR_CORRUPT with *why
 * set to a static reason.
 */
static inline int chunk_cursor_next(struct chunk_cursor *c, const char **why)
{
        if (c->left == 0) {
                if (c->p != c->end) {
                        *why = "bytes left over after the last sample";
                        return TRACE_ERR_CORRUPT;
                }
                if (c->t_ns != c->last_ns) {
                        *why = "last sample time differs from the chunk's last_ns";
                        return TRACE_ERR_CORRUPT;
                }
                return 0;
        }
        uint64_t a;
        size_t n = pf_varint_get(c->p, c->end, &a);
        if (n == 0) {
                *why = "truncated or overlong time varint";
                return TRACE_ERR_CORRUPT;
        }
        c->p += n;
        uint64_t dt = a >> 1;
        if (!c->started && dt != 0) {
                *why = "first sample time differs from the chunk's first_ns";
                return TRACE_ERR_CORRUPT;
        }
        /* t_ns <= last_ns always holds here, so the subtraction is safe. */
        if (dt > (uint64_t)(c->last_ns - c->t_ns)) {
                *why = "sample time beyond the chunk's last_ns";
                return TRACE_ERR_CORRUPT;
        }
        c->t_ns += (int64_t)dt;
        if (a & 1) {
                if (!c->started) {
                        *why = "first sample repeats a previous one";
                        return TRACE_ERR_CORRUPT;
                }
        } else {
                uint64_t b;
                n = pf_varint_get(c->p, c->end, &b);
                if (n == 0) {
                        *why = "truncated or overlong stack varint";
                        return TRACE_ERR_CORRUPT;
                }
                c->p += n;
                if ((b >> 3) >= c->n_stacks) {
                        *why = "stack id out of range";
                        return TRACE_ERR_CORRUPT;
                }
                c->stack = (uint32_t)(b >> 3);
                c->state = (unsigned)(b & TRACE_STATE_MASK);
        }
        c->started = true;
        c->left--;
        return 1;
}

#endif
