/*
 * test_schedule.c - the sampling schedule (record/schedule.c): the instants
 * are uniform over the period (a chi-square goodness-of-fit test that the
 * old "grid plus a quarter period of jitter" schedule fails), a periodic
 * program's share comes out right whatever its period, missed slots are
 * counted exactly, and late wake-ups or a pass that overruns into the next
 * slot leave the phases uniform; --blocking's Poisson instants are uniform
 * too and sample the time right after a sample as often as any other.
 * Everything is simulated with fixed seeds: no timing.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "schedule.h"

#define PERIOD 10000000 /* 10 ms, the default rate */
#define BINS   50
/* Chi-square with 49 degrees of freedom exceeds this with probability 0.001. */
#define CHI2_CRIT_49 85.35

static double chi_square(const uint64_t *count, size_t bins, uint64_t n)
{
        double expect = (double)n / (double)bins, x = 0;
        for (size_t i = 0; i < bins; i++)
                x += ((double)count[i] - expect) * ((double)count[i] - expect) / expect;
        return x;
}

/* Phase in [0, 1) of an instant within the period grid starting at 0. */
static double phase_of(int64_t t)
{
        int64_t r = t % PERIOD;
        if (r < 0)
                r += PERIOD;
        return (double)r / PERIOD;
}

static void test_phases_uniform(void **state)
{
        (void)state;
        for (uint64_t seed = 1; seed <= 5; seed++) {
                struct schedule s;
                schedule_init(&s, 0, PERIOD, seed);
                uint64_t count[BINS] = {0};
                const uint64_t n = 200000;
                for (uint64_t k = 0; k < n; k++) {
                        int64_t due = schedule_due(&s);
                        assert_true(due >= (int64_t)k * PERIOD && due < (int64_t)(k + 1) * PERIOD);
                        count[(size_t)(phase_of(due) * BINS)]++;
                        schedule_next(&s);
                }
                assert_true(chi_square(count, BINS, n) < CHI2_CRIT_49);
        }
}

/*
 * The same test has the power to reject what the recorder did before: a
 * grid instant plus a uniform jitter of a quarter period either side.
 */
static void test_quarter_jitter_is_rejected(void **state)
{
        (void)state;
        struct schedule rng;
        schedule_init(&rng, 0, PERIOD, 7);
        uint64_t count[BINS] = {0};
        const uint64_t n = 200000;
        for (uint64_t k = 0; k < n; k++) {
                int64_t jitter = (int64_t)schedule_random(&rng, PERIOD / 2 + 1) - PERIOD / 4;
                count[(size_t)(phase_of((int64_t)k * PERIOD + jitter) * BINS)]++;
        }
        assert_true(chi_square(count, BINS, n) > 100 * CHI2_CRIT_49);
}

/*
 * A program that repeats a cycle of `cycle` ns: the first 70% in one
 * function, the rest in another. Returns the share the samples give it.
 */
static double periodic_share(int64_t cycle, int64_t offset, uint64_t seed, uint64_t n, bool jitter)
{
        struct schedule s;
        schedule_init(&s, 0, PERIOD, seed);
        uint64_t in_a = 0;
        for (uint64_t k = 0; k < n; k++) {
                int64_t t = schedule_due(&s);
                if (jitter)
                        t = (int64_t)k * PERIOD + (int64_t)schedule_random(&s, PERIOD / 2 + 1) -
                            PERIOD / 4;
                int64_t pos = (t + offset) % cycle;
                if (pos < 0)
                        pos += cycle;
                in_a += pos < cycle * 7 / 10;
                schedule_next(&s);
        }
        return (double)in_a / (double)n;
}

static void test_periodic_programs(void **state)
{
        (void)state;
        /* Cycles from a fraction of the period to many periods, exactly one and two among them. */
        const int64_t cycles[] = {PERIOD / 3, PERIOD / 2,     PERIOD * 7 / 10, PERIOD,
                                  PERIOD * 2, PERIOD * 3 / 2, PERIOD * 10,     PERIOD * 37 / 3};
        const uint64_t n = 20000;
        const double sd = sqrt(0.7 * 0.3 / (double)n);
        for (size_t i = 0; i < sizeof(cycles) / sizeof(cycles[0]); i++) {
                for (int64_t offset = 0; offset < PERIOD; offset += PERIOD / 4) {
                        double share = periodic_share(cycles[i], offset, 11 + i, n, false);
                        assert_true(fabs(share - 0.7) < 4.5 * sd);
                }
        }
        /* The quarter-period jitter gets a loop of exactly one period wrong. */
        double worst = 0;
        for (int64_t offset = 0; offset < PERIOD; offset += PERIOD / 8)
                worst = fmax(worst, fabs(periodic_share(PERIOD, offset, 3, n, true) - 0.7));
        assert_true(worst > 0.2);
}

static void test_missed_slots(void **state)
{
        (void)state;
        struct schedule s;
        schedule_init(&s, 1000, PERIOD, 42);
        /* Past its instant, even past the end of its slot, but less than a period late: taken. */
        int64_t due = schedule_due(&s);
        assert_int_equal(schedule_catch_up(&s, due + PERIOD - 1), 0);
        assert_int_equal(s.slot, 0);
        assert_int_equal(schedule_due(&s), due);
        schedule_next(&s);
        /* Woke up in the middle of slot 6: slots 1 to 5 were missed. */
        assert_int_equal(schedule_catch_up(&s, 1000 + 6 * PERIOD + PERIOD / 2), 5);
        assert_int_equal(s.slot, 6);
        assert_true(schedule_due(&s) >= 1000 + 6 * PERIOD);
        assert_true(schedule_due(&s) < 1000 + 7 * PERIOD);
        /* Exactly a period late: missed, and the slot that holds now is next. */
        due = schedule_due(&s);
        assert_int_equal(schedule_catch_up(&s, due + PERIOD), 1);
        assert_int_equal(s.slot, 7);
}

/*
 * The recorder's loop when wake-ups come late by a random delay that does
 * not depend on the instant drawn (on a VM, tens of microseconds to wake an
 * idle CPU; here a mean of a tenth of the period): every slot still gets its
 * sample, and the instants actually sampled stay uniform over the period.
 * The schedule used to drop a sample whose slot ended before it: those drawn
 * near the end of a slot, and the phases were skewed.
 */
static void test_late_wakeups_keep_phases_uniform(void **state)
{
        (void)state;
        struct schedule s;
        schedule_init(&s, 0, PERIOD, 1234);
        uint64_t count[BINS] = {0}, taken = 0, missed = 0;
        int64_t now = 0;
        while (taken < 200000) {
                double u = ((double)schedule_random(&s, 1u << 30) + 0.5) / (1u << 30);
                int64_t delay = (int64_t)(-log(u) * PERIOD / 10);
                int64_t wake = (schedule_due(&s) > now ? schedule_due(&s) : now) + delay;
                missed += schedule_catch_up(&s, wake);
                now = wake;
                if (now < schedule_due(&s))
                        continue; /* a later slot's instant is still to come */
                count[(size_t)(phase_of(now) * BINS)]++;
                taken++;
                now += PERIOD / 100; /* the pass */
                schedule_next(&s);
        }
        double tv = 0; /* total variation distance from uniform */
        for (size_t i = 0; i < BINS; i++)
                tv += fabs((double)count[i] / (double)taken - 1.0 / BINS) / 2;
        /*
         * 0.0074 (sampling noise alone is about 0.006 at this count); the old
         * rule missed 11% of the slots and gave 0.075. A late sample that
         * delays the next one still skews the phases by a second-order
         * amount, as an overrunning pass does, which is why this is not the
         * chi-square test.
         */
        assert_true(missed < taken / 10000);
        assert_true(tv < 0.015);
}

/*
 * The recorder's loop with passes that cost 5% of the period: a sample due
 * before the previous pass ended is taken when it ends. Phases stay uniform
 * (the distortion is at most c*c/4 = 0.06% of the mass here).
 */
static void test_overrun_keeps_phases_uniform(void **state)
{
        (void)state;
        struct schedule s;
        schedule_init(&s, 0, PERIOD, 99);
        uint64_t count[BINS] = {0}, taken = 0, missed = 0;
        const int64_t cost = PERIOD / 20;
        int64_t now = 0;
        while (taken < 200000) {
                missed += schedule_catch_up(&s, now);
                int64_t t = schedule_due(&s) > now ? schedule_due(&s) : now;
                count[(size_t)(phase_of(t) * BINS)]++;
                taken++;
                now = t + cost;
                schedule_next(&s);
        }
        assert_int_equal(missed, 0);
        assert_true(chi_square(count, BINS, taken) < CHI2_CRIT_49);
}

/*
 * --blocking's Poisson instants: uniform phases (the same chi-square test),
 * one instant per period on average, and exponential gaps.
 */
static void test_poisson_phases_and_rate(void **state)
{
        (void)state;
        for (uint64_t seed = 1; seed <= 5; seed++) {
                struct schedule s;
                schedule_init_kind(&s, SCHEDULE_POISSON, 0, PERIOD, seed);
                uint64_t count[BINS] = {0};
                const uint64_t n = 200000;
                int64_t prev = 0;
                for (uint64_t k = 0; k < n; k++) {
                        int64_t due = schedule_due(&s);
                        assert_true(due >= prev);
                        assert_true(schedule_next_slot(&s) >= due);
                        count[(size_t)(phase_of(due) * BINS)]++;
                        prev = due;
                        int64_t next = schedule_next_slot(&s);
                        schedule_next(&s);
                        assert_true(schedule_due(&s) == next); /* the instant drawn ahead */
                }
                assert_true(chi_square(count, BINS, n) < CHI2_CRIT_49);
                /* n gaps of mean PERIOD and sd PERIOD: the mean within 4.5 standard errors. */
                double mean = (double)prev / (double)n;
                assert_true(fabs(mean - PERIOD) < 4.5 * PERIOD / sqrt((double)n));
        }
}

/*
 * What the Poisson instants are for. Each --blocking sample holds the
 * program, which then spends a while right after it (here half a period) in
 * whatever the hold left it doing. Those stretches must be sampled as often
 * as the time they take: the share of instants that fall in one must be the
 * share of time they cover. Stratified instants cannot fall in the rest of
 * their own slot: they see such stretches about 4 times too little.
 */
static double after_sample_bias(enum schedule_kind kind, uint64_t seed, double *time_share)
{
        struct schedule s;
        schedule_init_kind(&s, kind, 0, PERIOD, seed);
        const int64_t window = PERIOD / 2;
        const uint64_t n = 200000;
        int64_t prev = schedule_due(&s), covered = 0;
        uint64_t inside = 0;
        for (uint64_t k = 1; k < n; k++) {
                schedule_next(&s);
                int64_t t = schedule_due(&s);
                inside += t - prev < window;
                covered += t - prev < window ? t - prev : window;
                prev = t;
        }
        *time_share = (double)covered / (double)prev;
        return (double)inside / (double)(n - 1) - *time_share;
}

static void test_poisson_samples_the_time_after_a_sample(void **state)
{
        (void)state;
        double cover;
        for (uint64_t seed = 1; seed <= 3; seed++) {
                /* 1 - e^-0.5 = 39.3% of the time; binomial sd at n: 0.11 points. */
                double bias = after_sample_bias(SCHEDULE_POISSON, seed, &cover);
                assert_true(fabs(cover - 0.393) < 0.01);
                assert_true(fabs(bias) < 0.005);
        }
        /* Stratified: 47.9% of the time, 12.5% of the instants. */
        double bias = after_sample_bias(SCHEDULE_STRATIFIED, 1, &cover);
        assert_true(fabs(cover - 0.479) < 0.01);
        assert_true(bias < -0.3);
}

static void test_poisson_missed(void **state)
{
        (void)state;
        struct schedule s;
        schedule_init_kind(&s, SCHEDULE_POISSON, 1000, PERIOD, 42);
        /* Less than a period late: taken. */
        int64_t due = schedule_due(&s);
        assert_int_equal(schedule_catch_up(&s, due + PERIOD - 1), 0);
        assert_true(schedule_due(&s) == due);
        /* A stall of 500 periods, each instant drawn: about 500 missed (sd 22), and no more. */
        uint64_t missed = schedule_catch_up(&s, due + 500 * (int64_t)PERIOD);
        assert_true(missed > 400 && missed < 600);
        assert_true(due + 500 * (int64_t)PERIOD - schedule_due(&s) < PERIOD);
        assert_true(s.slot == missed);
        /* 10,000 periods: all but the last 1,000 counted by their mean (sd of the rest 32). */
        due = schedule_due(&s);
        uint64_t before = s.slot;
        missed = schedule_catch_up(&s, due + 10000 * (int64_t)PERIOD);
        assert_true(missed > 9850 && missed < 10150);
        assert_true(due + 10000 * (int64_t)PERIOD - schedule_due(&s) < PERIOD);
        assert_true(s.slot == before + missed);
        /* A stall of 10^9 periods (four months at 100 Hz): counted at once, about right. */
        due = schedule_due(&s);
        int64_t now = due + 1000000000 * (int64_t)PERIOD;
        missed = schedule_catch_up(&s, now);
        assert_true(missed > 1000000000 - 200 && missed < 1000000000 + 200);
        assert_true(now - schedule_due(&s) < PERIOD && schedule_due(&s) <= now + 40 * PERIOD);
        assert_true(schedule_next_slot(&s) >= schedule_due(&s));
}

static void test_random_choices(void **state)
{
        (void)state;
        struct schedule s;
        schedule_init(&s, 0, PERIOD, 5);
        uint64_t count[3] = {0};
        for (int i = 0; i < 30000; i++) {
                uint64_t v = schedule_random(&s, 3);
                assert_true(v < 3);
                count[v]++;
        }
        for (int i = 0; i < 3; i++)
                assert_true(count[i] > 9600 && count[i] < 10400);
        assert_int_equal(schedule_random(&s, 1), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_phases_uniform),
            cmocka_unit_test(test_quarter_jitter_is_rejected),
            cmocka_unit_test(test_periodic_programs),
            cmocka_unit_test(test_missed_slots),
            cmocka_unit_test(test_overrun_keeps_phases_uniform),
            cmocka_unit_test(test_late_wakeups_keep_phases_uniform),
            cmocka_unit_test(test_poisson_phases_and_rate),
            cmocka_unit_test(test_poisson_samples_the_time_after_a_sample),
            cmocka_unit_test(test_poisson_missed),
            cmocka_unit_test(test_random_choices),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
