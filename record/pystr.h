/*
 * pystr.h - decode the Python string objects found in a target's memory.
 *
 * A str is read in two steps: pystr_shape() looks at the object's first
 * bytes and says where its characters are and how wide they are (PEP 393
 * compact ASCII, compact Latin-1/UCS-2/UCS-4, legacy non-compact strings with
 * a data pointer; 2.x str and unicode), then pystr_utf8() converts the
 * characters to UTF-8. Both are pure functions over bytes copied from the
 * target: kinds and lengths are validated, nothing is read past the buffers.
 */
#ifndef PYFLAME_PYSTR_H
#define PYFLAME_PYSTR_H

#include <stddef.h>
#include <stdint.h>

#include "pylayout.h"

/* Which object type the bytes are (decided by the caller from ob_type). */
enum pystr_obj {
        PYSTR_STR = 1,  /* 3.x str, or 2.x str (bytes, taken as UTF-8) */
        PYSTR_UNICODE2, /* 2.x unicode: length and a Py_UNICODE pointer */
        PYSTR_BYTES,    /* 3.x bytes, 2.x str: raw bytes (line tables) */
};

struct pystr_shape {
        uint8_t kind;      /* bytes per character: 1, 2 or 4; 0 for raw bytes */
        uint64_t length;   /* characters (kind >= 1) or bytes (kind 0) */
        int64_t data_off;  /* characters at object + data_off when >= 0 ... */
        uint64_t data_ptr; /* ... else at this address */
};

/*
 * Describe the object whose first `hdrlen` bytes are `hdr`. Returns 0, -EINVAL
 * when the header is malformed (bad kind, not ready, NULL data) or the length
 * exceeds `max_len`, -ERANGE when `hdrlen` is too short to hold the header.
 * *out is untouched on failure.
 */
int pystr_shape(const struct pylayout *L, enum pystr_obj type, const uint8_t *hdr, size_t hdrlen,
                uint64_t max_len, struct pystr_shape *out);

/*
 * Convert `length` characters of width `kind` at `data` to NUL-terminated
 * UTF-8 in out[outcap]. Invalid code points (surrogates, > U+10FFFF) and, for
 * kind 0, invalid UTF-8 become U+FFFD. Returns the bytes written without the
 * NUL, or -ENOSPC when out is too small (worst case: 4 bytes per character
 * plus one; for kind 0, 3 per byte plus one).
 */
long pystr_utf8(const uint8_t *data, uint64_t length, uint8_t kind, char *out, size_t outcap);

/* Worst-case UTF-8 size (with NUL) of `length` characters of width `kind`. */
static inline size_t pystr_utf8_max(uint64_t length, uint8_t kind)
{
        return (size_t)length * (kind == 0 ? 3 : 4) + 1;
}

#endif
