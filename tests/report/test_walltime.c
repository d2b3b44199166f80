/*
 * test_walltime.c - pf_parse_wall_time(), the wall-clock times of
 * pyflame-report's --since and --until and of pyflame-diff's windows:
 * ISO-8601 in UTC or with an offset, bare dates, times relative to the end
 * of a recording, and what is refused (no zone, impossible dates, junk),
 * with the outputs untouched on a refusal.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pfutil.h"

#define SEC 1000000000LL

static void check(const char *s, int64_t want, bool want_rel)
{
        int64_t ns = 12345;
        bool rel = !want_rel;
        assert_int_equal(pf_parse_wall_time(s, &ns, &rel), 0);
        assert_true(ns == want);
        assert_true(rel == want_rel);
}

static void test_iso_utc(void **state)
{
        (void)state;
        /* date -u -d 2026-12-01T22:00:00Z +%s gives 1796162400. */
        check("2026-12-01T22:00:00Z", 1796162400LL * SEC, false);
        check("2026-12-01t22:00:00z", 1796162400LL * SEC, false);
        check("2026-12-01 22:00:00Z", 1796162400LL * SEC, false);
        check("2026-12-01T22:00Z", 1796162400LL * SEC, false);
        check("2026-12-01T22:00:00.25Z", 1796162400LL * SEC + 250000000, false);
        check("2026-12-01T22:00:00.123456789Z", 1796162400LL * SEC + 123456789, false);
        check("2026-12-01", 1796083200LL * SEC, false);
        check("1970-01-01T00:00:00Z", 0, false);
        check("2024-02-29T12:00:00Z", 1709208000LL * SEC, false);
        check("2000-03-01T00:00:00Z", 951868800LL * SEC, false);
}

static void test_iso_offsets(void **state)
{
        (void)state;
        check("2026-12-01T23:00:00+01:00", 1796162400LL * SEC, false);
        check("2026-12-01T23:30:00+0130", 1796162400LL * SEC, false);
        check("2026-12-01T17:00:00-05:00", 1796162400LL * SEC, false);
        check("2026-12-01T22:00:00+00:00", 1796162400LL * SEC, false);
}

static void test_relative(void **state)
{
        (void)state;
        check("-1h", -3600 * SEC, true);
        check("-10m", -600 * SEC, true);
        check("-30s", -30 * SEC, true);
        check("-1.5s", -1500000000LL, true);
        check("-0s", 0, true);
}

static void test_refused(void **state)
{
        (void)state;
        static const char *const bad[] = {
            "",
            "-",
            "-1x",
            "--1h",
            "-10%",
            "1h",                  /* a duration is an offset, for --from; not a wall-clock time */
            "2026-12-01T22:00:00", /* no zone: whose 22:00? */
            "2026-12-01T22:00",
            "2026-13-01T22:00:00Z",
            "2026-02-29T00:00:00Z", /* not a leap year */
            "2026-04-31",
            "2026-12-01T24:00:00Z",
            "2026-12-01T22:60:00Z",
            "2026-12-01T22:00:00.Z",
            "2026-12-01T22:00:00Zjunk",
            "2026-12-1",
            "26-12-01",
            "1969-12-31T23:59:59Z",
            "9999-01-01",
            "2026-12-01T22:00:00+25:00",
            "now",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                int64_t ns = 7;
                bool rel = true;
                if (pf_parse_wall_time(bad[i], &ns, &rel) != -1)
                        fail_msg("'%s' was accepted", bad[i]);
                assert_true(ns == 7);
                assert_true(rel);
        }
        assert_int_equal(pf_parse_wall_time(NULL, NULL, NULL), -1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_iso_utc),
            cmocka_unit_test(test_iso_offsets),
            cmocka_unit_test(test_relative),
            cmocka_unit_test(test_refused),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
