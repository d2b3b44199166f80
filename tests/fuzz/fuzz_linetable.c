/*
 * fuzz_linetable.c - libFuzzer target: the line-table decoders
 * (record/linetable.c) on any bytes, as a torn or hostile table from another
 * process would be.
 *
 * An input: the format (first byte, 1-4 of enum lt_format, others too), the
 * first line (4 bytes), an extra offset to look up (4 bytes), then the table.
 * Checked: lt_addr2line() and the decoded map (lt_map_build(),
 * lt_map_lookup()) give the same line at every offset from -1 to past the
 * end the table could describe, and at the extra one; an unknown format is
 * refused by both (-2, -EINVAL) and the map is then untouched; a crash, a
 * sanitizer report (an overflow, a read past the table), a leak or a hang
 * is a finding. Run by tests/fuzz/meson.build's fuzz-linetable (fixed seed).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linetable.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 9)
                return 0;
        enum lt_format fmt = (enum lt_format)(data[0] % 6);
        int32_t first_line;
        uint32_t extra;
        memcpy(&first_line, data + 1, 4);
        memcpy(&extra, data + 5, 4);
        const uint8_t *tab = data + 9;
        size_t len = size - 9;
        /* A table's own copy, exactly its length: ASan sees a read past it. */
        uint8_t *copy = malloc(len ? len : 1);
        if (!copy)
                abort();
        memcpy(copy, tab, len);
        struct lt_map m = {.e = NULL, .n = 12345, .first_line = 7};
        int rc = lt_map_build(fmt, copy, len, first_line, &m);
        bool known = fmt >= LT_LNOTAB_U8 && fmt <= LT_LOCATIONS_311;
        if (!known) {
                if (rc != -EINVAL || m.n != 12345 || m.e || m.first_line != 7 ||
                    lt_addr2line(fmt, copy, len, first_line, 0) != -2)
                        abort();
                free(copy);
                return 0;
        }
        if (rc != 0) /* -ENOMEM only */
                abort();
        /* Each entry of any format covers at most 2 * 255 bytes of code (3.11+: 16 units). */
        int64_t end = (int64_t)len * 512 + 64;
        for (int64_t addr = -1; addr <= end; addr += addr < 1024 ? 1 : 97) {
                int want = lt_addr2line(fmt, copy, len, first_line, addr);
                int32_t got = lt_map_lookup(&m, addr);
                if (want != got) {
                        fprintf(stderr,
                                "format %d, first line %d, %zu bytes: offset %lld: "
                                "lt_addr2line %d, lt_map_lookup %d\n",
                                (int)fmt, first_line, len, (long long)addr, want, got);
                        abort();
                }
        }
        if (lt_addr2line(fmt, copy, len, first_line, extra) != lt_map_lookup(&m, extra))
                abort();
        lt_map_free(&m);
        free(copy);
        return 0;
}
