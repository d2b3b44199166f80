/*
 * test_linetable.c - the line-table decoders against CPython itself.
 *
 * For every installed interpreter, linetable_dump.py (argv[1]) compiles
 * standard-library modules and synthetic sources and prints, per code object,
 * the raw table and the line PyCode_Addr2Line reports at every instruction
 * offset. Both lt_addr2line() and lt_map_lookup() must agree at every one of
 * them (and at offset -1). The data is generated at test time, never stored.
 * Hand-made and random tables check that hostile bytes are harmless and that
 * the map and the direct decoder never disagree.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "linetable.h"
#include "pyinterps.h"

static const char *dump_script;

static enum lt_format format_for(int major, int minor)
{
        if (major == 2)
                return LT_LNOTAB_U8;
        if (minor <= 9)
                return LT_LNOTAB_S8;
        if (minor == 10)
                return LT_LINETABLE_310;
        return LT_LOCATIONS_311;
}

static int hexval(int c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        return -1;
}

/* Decode hex (or "-" for empty) into buf; returns the byte count, -1 when malformed. */
static long unhex(const char *s, uint8_t **buf)
{
        size_t n = strcmp(s, "-") == 0 ? 0 : strlen(s);
        if (n % 2)
                return -1;
        *buf = malloc(n / 2 + 1);
        for (size_t i = 0; i < n / 2; i++) {
                int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
                if (hi < 0 || lo < 0)
                        return -1;
                (*buf)[i] = (uint8_t)(hi << 4 | lo);
        }
        return (long)(n / 2);
}

static void check_interpreter(void **state)
{
        const struct pyinterp *py = *state;
        char cmd[2048];
        snprintf(cmd, sizeof(cmd), "'%s' '%s'", py->path, dump_script);
        FILE *f = popen(cmd, "r");
        assert_non_null(f);

        enum lt_format fmt = LT_LNOTAB_U8;
        char *line = NULL;
        size_t cap = 0;
        uint8_t *tab = NULL;
        long tablen = 0;
        int32_t first = 0;
        long step = 0, n = 0;
        unsigned long codes = 0, offsets = 0, mismatches = 0, map_mismatches = 0;
        unsigned long colines_disagree = 0;
        int ended = 0;
        struct lt_map map = {0};

        while (getline(&line, &cap, f) > 0) {
                if (line[0] == 'V') {
                        int ma, mi;
                        assert_int_equal(sscanf(line, "V %d %d", &ma, &mi), 2);
                        assert_int_equal(ma, py->major);
                        fmt = format_for(ma, mi);
                } else if (line[0] == 'C') {
                        char *save = NULL;
                        char *tok[5] = {strtok_r(line, " \n", &save)};
                        for (int k = 1; k < 5; k++)
                                tok[k] = strtok_r(NULL, " \n", &save);
                        assert_non_null(tok[4]);
                        first = (int32_t)strtol(tok[1], NULL, 10);
                        step = strtol(tok[3], NULL, 10);
                        n = strtol(tok[4], NULL, 10);
                        free(tab);
                        tab = NULL;
                        tablen = unhex(tok[2], &tab);
                        assert_true(tablen >= 0);
                        lt_map_free(&map);
                        assert_int_equal(lt_map_build(fmt, tab, (size_t)tablen, first, &map), 0);
                        codes++;
                } else if (line[0] == 'L') {
                        char *p = line + 1, *end;
                        for (long i = 0; i < n; i++) {
                                long want = strtol(p, &end, 10);
                                assert_true(end != p);
                                p = end;
                                int got = lt_addr2line(fmt, tab, (size_t)tablen, first, i * step);
                                int got_map = lt_map_lookup(&map, i * step);
                                if (got != want && mismatches++ < 10)
                                        print_message("%s: mismatch at code %lu offset %ld: "
                                                      "CPython %ld, decoder %d\n",
                                                      py->label, codes, i * step, want, got);
                                if (got_map != want && map_mismatches++ < 10)
                                        print_message("%s: map mismatch at code %lu offset "
                                                      "%ld: CPython %ld, map %d\n",
                                                      py->label, codes, i * step, want, got_map);
                                offsets++;
                        }
                } else if (line[0] == 'A') {
                        long want = strtol(line + 2, NULL, 10);
                        assert_int_equal(lt_addr2line(fmt, tab, (size_t)tablen, first, -1), want);
                        assert_int_equal(lt_map_lookup(&map, -1), want);
                } else if (line[0] == 'M') {
                        colines_disagree += strtoul(line + 2, NULL, 10);
                } else if (line[0] == 'E') {
                        ended = 1;
                }
        }
        free(line);
        free(tab);
        lt_map_free(&map);
        int rc = pclose(f);
        print_message("%-24s %6lu code objects, %7lu offsets, %lu mismatches\n", py->label, codes,
                      offsets, mismatches + map_mismatches);
        assert_int_equal(rc, 0);
        assert_true(ended);
        assert_true(codes > 100);
        assert_int_equal(mismatches, 0);
        assert_int_equal(map_mismatches, 0);
        assert_int_equal(colines_disagree, 0);
}

/* Hand-checked tables, one per format. */
static void test_known_tables(void **state)
{
        (void)state;
        /* lnotab: +6 bytes -> +1 line, +4 bytes -> -2 lines (signed on 3.x, +254 on 2.7). */
        const uint8_t ln[] = {6, 1, 4, 0xfe};
        assert_int_equal(lt_addr2line(LT_LNOTAB_S8, ln, 4, 10, 0), 10);
        assert_int_equal(lt_addr2line(LT_LNOTAB_S8, ln, 4, 10, 6), 11);
        assert_int_equal(lt_addr2line(LT_LNOTAB_S8, ln, 4, 10, 10), 9);
        assert_int_equal(lt_addr2line(LT_LNOTAB_U8, ln, 4, 10, 10), 265);
        assert_int_equal(lt_addr2line(LT_LNOTAB_S8, ln, 4, 10, 1000), 9);
        /* 3.10: [0,4) line 11, [4,6) no line, [6,8) line 13, past end -1. */
        const uint8_t l310[] = {4, 1, 2, 0x80, 2, 2};
        assert_int_equal(lt_addr2line(LT_LINETABLE_310, l310, 6, 10, 2), 11);
        assert_int_equal(lt_addr2line(LT_LINETABLE_310, l310, 6, 10, 4), -1);
        assert_int_equal(lt_addr2line(LT_LINETABLE_310, l310, 6, 10, 6), 13);
        assert_int_equal(lt_addr2line(LT_LINETABLE_310, l310, 6, 10, 8), -1);
        assert_int_equal(lt_addr2line(LT_LINETABLE_310, l310, 6, 10, -1), 10);
        /*
         * 3.11: no-columns entry (code 13) of 2 units, line +3 (svarint 6);
         * short-form entry (code 0) 1 unit; none (code 15) 1 unit;
         * long form (code 14) 1 unit, line -1 (svarint 3), then 3 varints.
         */
        const uint8_t l311[] = {0x80 | 13 << 3 | 1,
                                6,
                                0x80 | 0 << 3 | 0,
                                0x11,
                                0x80 | 15 << 3 | 0,
                                0x80 | 14 << 3 | 0,
                                3,
                                0,
                                5,
                                9};
        size_t n = sizeof(l311);
        assert_int_equal(lt_addr2line(LT_LOCATIONS_311, l311, n, 100, 0), 103);
        assert_int_equal(lt_addr2line(LT_LOCATIONS_311, l311, n, 100, 2), 103);
        assert_int_equal(lt_addr2line(LT_LOCATIONS_311, l311, n, 100, 4), 103);
        assert_int_equal(lt_addr2line(LT_LOCATIONS_311, l311, n, 100, 6), -1);
        assert_int_equal(lt_addr2line(LT_LOCATIONS_311, l311, n, 100, 8), 102);
        assert_int_equal(lt_addr2line(LT_LOCATIONS_311, l311, n, 100, 10), -1);
        assert_int_equal(lt_addr2line((enum lt_format)99, l311, n, 100, 10), -2);
        struct lt_map m;
        assert_int_equal(lt_map_build((enum lt_format)99, l311, n, 1, &m), -22);
}

/* Random and truncated tables: never crash, map and decoder always agree. */
static void test_random_tables(void **state)
{
        (void)state;
        uint64_t seed = 0x9e3779b97f4a7c15ull;
        uint8_t buf[300] = {0};
        for (int iter = 0; iter < 4000; iter++) {
                size_t len = (size_t)(iter % 300);
                for (size_t i = 0; i < len; i++) {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        buf[i] = (uint8_t)seed;
                }
                if (iter % 3 == 0)
                        for (size_t i = 0; i < len; i += 3)
                                buf[i] |= 0x80; /* more plausible 3.11 entry starts */
                enum lt_format fmt = (enum lt_format)(LT_LNOTAB_U8 + iter % 4);
                struct lt_map m;
                assert_int_equal(lt_map_build(fmt, buf, len, 7, &m), 0);
                for (int64_t a = -1; a < (int64_t)len * 20; a += 1 + (a & 7))
                        assert_int_equal(lt_map_lookup(&m, a), lt_addr2line(fmt, buf, len, 7, a));
                lt_map_free(&m);
        }
}

int main(int argc, char **argv)
{
        if (argc < 2) {
                fprintf(stderr, "usage: %s linetable_dump.py\n", argv[0]);
                return 2;
        }
        dump_script = argv[1];
        static struct pyinterp pys[32];
        size_t npy = pyinterps_find(pys, 32);
        struct CMUnitTest tests[40];
        size_t nt = 0;
        tests[nt++] = (struct CMUnitTest)cmocka_unit_test(test_known_tables);
        tests[nt++] = (struct CMUnitTest)cmocka_unit_test(test_random_tables);
        for (size_t i = 0; i < npy; i++) {
                if (pys[i].major == 3 && pys[i].minor < 6)
                        continue;
                tests[nt++] = (struct CMUnitTest){
                    .name = pys[i].label, .test_func = check_interpreter, .initial_state = &pys[i]};
        }
        if (npy == 0)
                fprintf(stderr, "no Python interpreters found: only synthetic tables tested\n");
        return _cmocka_run_group_tests("linetable", tests, nt, NULL, NULL);
}
