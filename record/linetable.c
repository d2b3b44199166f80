/*
 * linetable.c - CPython line-table decoders (see linetable.h).
 *
 * Each format is decoded twice over: lt_addr2line() transcribes CPython's own
 * PyCode_Addr2Line loop for that version (the reference the tests compare
 * against every address of real code objects), and lt_map_build() turns the
 * same walk into sorted (start, line) steps for O(log n) lookups. Both accept
 * arbitrary bytes: tables come from another process and may be torn.
 */
#include "linetable.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* 3.11+ location entry codes (Include/cpython/code.h, _PyCodeLocationInfoKind). */
enum {
        LOC_ONE_LINE0 = 10,
        LOC_ONE_LINE2 = 12,
        LOC_NO_COLUMNS = 13,
        LOC_LONG = 14,
        LOC_NONE = 15,
};

/* Unsigned varint of the location table: 6-bit groups, 0x40 = more. Bounded by end. */
static uint32_t loc_varint(const uint8_t *p, const uint8_t *end)
{
        uint32_t val = 0;
        unsigned shift = 0;
        while (p < end && shift <= 28) {
                uint8_t b = *p++;
                val |= (uint32_t)(b & 63) << shift;
                if (!(b & 64))
                        break;
                shift += 6;
        }
        return val;
}

static int32_t loc_svarint(const uint8_t *p, const uint8_t *end)
{
        uint32_t u = loc_varint(p, end);
        return (u & 1) ? -(int32_t)(u >> 1) : (int32_t)(u >> 1);
}

/* Line delta carried by the entry starting at p (CPython's get_line_delta). */
static int32_t loc_line_delta(const uint8_t *p, const uint8_t *end)
{
        int code = (*p >> 3) & 15;
        if (code == LOC_NO_COLUMNS || code == LOC_LONG)
                return loc_svarint(p + 1, end);
        if (code >= LOC_ONE_LINE0 && code <= LOC_ONE_LINE2)
                return code - LOC_ONE_LINE0;
        return 0;
}

/* Start of the next entry: the next byte with bit 7 set (CPython's advance()). */
static const uint8_t *loc_next(const uint8_t *p, const uint8_t *end)
{
        do
                p++;
        while (p < end && !(*p & 128));
        return p;
}

/* Wrapping add: a hostile table may overflow int32, which must not be UB here. */
static int32_t add_wrap(int32_t a, int32_t b)
{
        return (int32_t)((uint32_t)a + (uint32_t)b);
}

int lt_addr2line(enum lt_format fmt, const uint8_t *tab, size_t len, int32_t first_line,
                 int64_t addr)
{
        if (addr < 0)
                return fmt >= LT_LNOTAB_U8 && fmt <= LT_LOCATIONS_311 ? first_line : -2;
        switch (fmt) {
        case LT_LNOTAB_U8:
        case LT_LNOTAB_S8: {
                int32_t line = first_line;
                int64_t a = 0;
                for (size_t i = 0; i + 1 < len; i += 2) {
                        a += tab[i];
                        if (a > addr)
                                break;
                        line = add_wrap(line, fmt == LT_LNOTAB_U8 ? (int32_t)tab[i + 1]
                                                                  : (int32_t)(int8_t)tab[i + 1]);
                }
                return line;
        }
        case LT_LINETABLE_310: {
                int64_t start, end = 0;
                int32_t line, computed = first_line;
                for (size_t i = 0; i + 1 < len; i += 2) {
                        start = end;
                        end += tab[i];
                        int8_t ld = (int8_t)tab[i + 1];
                        if (ld == -128) {
                                line = -1;
                        } else {
                                computed = add_wrap(computed, ld);
                                line = computed;
                        }
                        if (start <= addr && addr < end)
                                return line;
                }
                return -1;
        }
        case LT_LOCATIONS_311: {
                const uint8_t *p = tab, *end = tab + len;
                int64_t start = 0;
                int32_t computed = first_line;
                while (p < end) {
                        int code = (*p >> 3) & 15;
                        int64_t n = ((*p & 7) + 1) * 2;
                        computed = add_wrap(computed, loc_line_delta(p, end));
                        if (start <= addr && addr < start + n)
                                return code == LOC_NONE ? -1 : computed;
                        start += n;
                        p = loc_next(p, end);
                }
                return -1;
        }
        }
        return -2;
}

/* Append a step, merging it with the previous one when that adds nothing. */
static void map_push(struct lt_map *m, uint32_t start, int32_t line)
{
        if (m->n && m->e[m->n - 1].start == start) {
                m->e[m->n - 1].line = line;
                if (m->n >= 2 && m->e[m->n - 2].line == line)
                        m->n--;
                return;
        }
        if (m->n && m->e[m->n - 1].line == line)
                return;
        m->e[m->n].start = start;
        m->e[m->n].line = line;
        m->n++;
}

int lt_map_build(enum lt_format fmt, const uint8_t *tab, size_t len, int32_t first_line,
                 struct lt_map *out)
{
        if (fmt < LT_LNOTAB_U8 || fmt > LT_LOCATIONS_311)
                return -EINVAL;
        /* Every step consumes at least one byte; +2 for the first and the end steps. */
        struct lt_map m = {.e = malloc((len + 2) * sizeof(struct lt_entry)),
                           .first_line = first_line};
        if (!m.e)
                return -ENOMEM;
        switch (fmt) {
        case LT_LNOTAB_U8:
        case LT_LNOTAB_S8: {
                int32_t line = first_line;
                uint64_t a = 0;
                map_push(&m, 0, line);
                for (size_t i = 0; i + 1 < len && a <= UINT32_MAX; i += 2) {
                        a += tab[i];
                        line = add_wrap(line, fmt == LT_LNOTAB_U8 ? (int32_t)tab[i + 1]
                                                                  : (int32_t)(int8_t)tab[i + 1]);
                        if (a <= UINT32_MAX)
                                map_push(&m, (uint32_t)a, line);
                }
                break;
        }
        case LT_LINETABLE_310: {
                uint64_t start, end = 0;
                int32_t computed = first_line;
                for (size_t i = 0; i + 1 < len && end <= UINT32_MAX; i += 2) {
                        start = end;
                        end += tab[i];
                        int8_t ld = (int8_t)tab[i + 1];
                        int32_t line = -1;
                        if (ld != -128) {
                                computed = add_wrap(computed, ld);
                                line = computed;
                        }
                        if (end > start)
                                map_push(&m, (uint32_t)start, line);
                }
                map_push(&m, end <= UINT32_MAX ? (uint32_t)end : UINT32_MAX, -1);
                break;
        }
        case LT_LOCATIONS_311: {
                const uint8_t *p = tab, *end = tab + len;
                uint64_t start = 0;
                int32_t computed = first_line;
                while (p < end && start <= UINT32_MAX) {
                        int code = (*p >> 3) & 15;
                        computed = add_wrap(computed, loc_line_delta(p, end));
                        map_push(&m, (uint32_t)start, code == LOC_NONE ? -1 : computed);
                        start += ((*p & 7) + 1) * 2;
                        p = loc_next(p, end);
                }
                map_push(&m, start <= UINT32_MAX ? (uint32_t)start : UINT32_MAX, -1);
                break;
        }
        }
        *out = m;
        return 0;
}

int32_t lt_map_lookup(const struct lt_map *m, int64_t addr)
{
        if (addr < 0)
                return m->first_line;
        /* Largest i with e[i].start <= addr. */
        uint32_t lo = 0, hi = m->n;
        while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2;
                if ((int64_t)m->e[mid].start <= addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo ? m->e[lo - 1].line : -1;
}

void lt_map_free(struct lt_map *m)
{
        free(m->e);
        memset(m, 0, sizeof(*m));
}
