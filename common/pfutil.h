/*
 * pfutil.h - small helpers shared by libtrace and the tools that are not
 * about the trace format: a growable byte buffer, hashing, varints, and
 * parsing of durations and rates given on command lines. Internal: never
 * installed, linked statically, prefix pf_.
 */
#ifndef PYFLAME_PFUTIL_H
#define PYFLAME_PFUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

/* A growable byte buffer. Zero-initialise; release with pf_buf_free(). */
struct pf_buf {
        uint8_t *data;
        size_t len, cap;
};

/* Make room for `extra` more bytes. Returns 0, or -1 when out of memory. */
int pf_buf_reserve(struct pf_buf *b, size_t extra);
/* Append bytes. Returns 0, or -1 when out of memory (buffer unchanged). */
int pf_buf_append(struct pf_buf *b, const void *p, size_t n);
void pf_buf_free(struct pf_buf *b);

/*
 * UTF-8. The one rule for bytes that are not UTF-8, wherever text leaves
 * pyflame (trace strings read back, JSON, text, SVG, HTML, pprof): each byte
 * that does not start a well-formed sequence becomes U+FFFD.
 */
#define PF_UTF8_REPLACEMENT "\xef\xbf\xbd"

/*
 * Length (1..4) of the well-formed UTF-8 sequence at s, its code point in
 * *cp; 0 when the byte at s does not start one (overlong forms, surrogates,
 * code points past U+10FFFF, and a sequence cut by the end of the string or
 * a NUL: s must be NUL-terminated).
 */
size_t pf_utf8_decode(const char *s, uint32_t *cp);

/*
 * Append the n bytes at s (NUL-terminated after them, or not: only n are
 * read) with every byte that is not part of a well-formed sequence, NULs
 * included, made U+FFFD. Returns 0, or -1 when out of memory.
 */
int pf_buf_append_utf8(struct pf_buf *b, const char *s, size_t n);

/* 64-bit hash of a byte string (FNV-1a with a final avalanche). */
uint64_t pf_hash_bytes(const void *p, size_t n, uint64_t seed);
/* Mix a 64-bit value into a hash. */
uint64_t pf_hash_u64(uint64_t h, uint64_t v);

/*
 * LEB128-style unsigned varint. pf_varint_put writes at most 10 bytes to p
 * and returns the count. pf_varint_get reads from [p, end): returns bytes
 * consumed, or 0 when the input is truncated or longer than 10 bytes.
 */
size_t pf_varint_put(uint8_t *p, uint64_t v);
size_t pf_varint_get(const uint8_t *p, const uint8_t *end, uint64_t *v);
static inline uint64_t pf_zigzag(int64_t v)
{
        return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}
static inline int64_t pf_unzigzag(uint64_t v)
{
        return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

/*
 * Parse a duration: "1.5s", "200ms", "30us", "10ns", "2m", "1h", or a bare
 * number of seconds. Returns 0 and sets *ns, or -1 on a malformed string.
 * With `percent` non-NULL, "10%" is accepted too: *percent is set to true and
 * *ns to the fraction in parts per 1e9 (10% gives 100000000, 100% 1e9).
 */
int pf_parse_duration(const char *s, int64_t *ns, bool *percent);

/*
 * Parse a wall-clock time for a report's selection: ISO-8601 in UTC
 * ("2026-12-01T22:00:00Z", seconds optional and with a fraction, "T" or a
 * space between date and time, "Z" or a numeric offset such as "+01:00";
 * a time of day without a zone is refused, since the reader cannot know
 * the writer's; a bare date "2026-12-01" is its midnight UTC), or a time
 * before the end of the recording ("-1h", "-10m", "-30s": a '-' and a
 * duration as pf_parse_duration takes it). Returns 0 with *relative false
 * and *ns the nanoseconds since the epoch, or *relative true and *ns the
 * offset from the end (<= 0); -1 on a malformed string (outputs untouched).
 */
int pf_parse_wall_time(const char *s, int64_t *ns, bool *relative);

/* Parse a rate: "100", "1khz", "250hz", "1k". Returns 0 and sets *hz, or -1. */
int pf_parse_rate(const char *s, double *hz);

/*
 * Parse a size in bytes: "4096", "512k", "64M", "1GiB" (k, M, G are powers
 * of 1024; case and a trailing "b"/"ib" do not matter). Returns 0 and sets
 * *bytes, or -1 on a malformed or overflowing string.
 */
int pf_parse_size(const char *s, uint64_t *bytes);

/*
 * An acquire fence between loads of memory that another agent writes (the
 * kernel's perf rings, a BPF program's output). ThreadSanitizer can neither
 * model fences (gcc warns) nor see those writers: under it, a compiler
 * barrier, which on x86 also keeps the loads in order.
 */
#if defined(__SANITIZE_THREAD__)
#define PF_ACQUIRE_FENCE() __asm__ __volatile__("" ::: "memory")
#else
#define PF_ACQUIRE_FENCE() __atomic_thread_fence(__ATOMIC_ACQUIRE)
#endif

/*
 * pyflame's version: the project version, "+git.<describe>" added when
 * built from a git checkout ("0.1.0+git.3d0ce8e1a2b3-dirty"). Static string.
 */
const char *pf_version(void);

/*
 * What --version prints, for every command: "<prog> <version>", the trace
 * format version, and the CPython versions pyflame-record reads.
 */
void pf_print_version(FILE *out, const char *prog, int format_version);

/* Monotonic and wall clock, nanoseconds. */
int64_t pf_now_mono_ns(void);
int64_t pf_now_wall_ns(void);

#endif
