/*
 * linetable.h - decode CPython line tables: from a code object's table bytes,
 * its co_firstlineno and an instruction's byte offset, the source line that
 * CPython itself reports (PyCode_Addr2Line, frame.f_lineno).
 *
 * Four formats cover every supported version: co_lnotab (2.7 with unsigned
 * line deltas, 3.6-3.9 with signed ones), the 3.10 co_linetable, and the
 * 3.11+ location table. Everything here is a pure function over a byte buffer
 * that came from the target: any byte string is accepted, no read leaves the
 * buffer, and every loop is bounded by its length.
 */
#ifndef PYFLAME_LINETABLE_H
#define PYFLAME_LINETABLE_H

#include <stddef.h>
#include <stdint.h>

enum lt_format {
        LT_LNOTAB_U8 = 1, /* 2.7 co_lnotab: (addr delta u8, line delta u8) pairs */
        LT_LNOTAB_S8,     /* 3.6-3.9 co_lnotab: line delta is int8 */
        LT_LINETABLE_310, /* 3.10 co_linetable: (addr delta u8, line delta int8, -128 = none) */
        LT_LOCATIONS_311, /* 3.11+ location table (PEP 626 / 657 entries) */
};

/*
 * The line of the instruction at byte offset `addr` (a negative offset means
 * "not started": co_firstlineno), exactly as PyCode_Addr2Line computes it.
 * Returns -1 where the table says "no line" and, for 3.10+, past its end.
 * Returns -2 for an unknown format.
 */
int lt_addr2line(enum lt_format fmt, const uint8_t *tab, size_t len, int32_t first_line,
                 int64_t addr);

/* One step of a decoded table: `line` holds for offsets [start, next entry's start). */
struct lt_entry {
        uint32_t start;
        int32_t line;
};

/*
 * A table decoded once into sorted steps, so a lookup is a binary search
 * instead of a scan of the whole table (the walker looks up every frame of
 * every sample). Zero-initialise; release with lt_map_free().
 */
struct lt_map {
        struct lt_entry *e;
        uint32_t n;
        int32_t first_line;
};

/*
 * Decode `tab` into *out (any previous content is not freed). Returns 0, -ENOMEM,
 * or -EINVAL for an unknown format; *out is untouched on failure. The result
 * answers lt_map_lookup() exactly as lt_addr2line() would.
 */
int lt_map_build(enum lt_format fmt, const uint8_t *tab, size_t len, int32_t first_line,
                 struct lt_map *out);

/* The line at byte offset `addr`, as lt_addr2line() on the table it was built from. */
int32_t lt_map_lookup(const struct lt_map *m, int64_t addr);

void lt_map_free(struct lt_map *m);

#endif
