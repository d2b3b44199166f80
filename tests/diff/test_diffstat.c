/*
 * test_diffstat.c - the statistics of pyflame-diff (report/diffstat.c):
 * Student's t and normal tail probabilities against published values,
 * Holm's adjustment, the single comparison's edge cases (rows absent from
 * one side, too few samples, batch means taking over from the binomial
 * variance), and the false-alarm rate of the whole procedure on simulated
 * pairs of identical programs whose samples are autocorrelated, next to
 * the rate of the textbook two-proportion z-test on the same pairs; and,
 * when runs differ by more than their samples (each run's shares shifted at
 * random), the rate with one run per side against several runs merged.
 *
 * The simulation is deterministic (a fixed xorshift seed), so its
 * assertions are not flaky: they hold for these 1000 pairs, and the rates
 * are printed for the record.
 */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "report.h"
#include "schedule.h"

static void test_t_tail(void **state)
{
        (void)state;
        /* Two-sided tail probabilities from standard tables. */
        assert_true(fabs(diffstat_two_sided_p(1.959964, INFINITY) - 0.05) < 1e-6);
        assert_true(fabs(diffstat_two_sided_p(2.575829, INFINITY) - 0.01) < 1e-6);
        assert_true(fabs(diffstat_two_sided_p(1.0, 1.0) - 0.5) < 1e-9);
        assert_true(fabs(diffstat_two_sided_p(2.228139, 10.0) - 0.05) < 1e-6);
        assert_true(fabs(diffstat_two_sided_p(-2.228139, 10.0) - 0.05) < 1e-6);
        assert_true(fabs(diffstat_two_sided_p(3.169273, 10.0) - 0.01) < 1e-6);
        assert_true(fabs(diffstat_two_sided_p(2.0, 10.0) - 0.0733880) < 1e-6);
        assert_true(fabs(diffstat_two_sided_p(4.0, 38.0) - 0.00028239) <
                    1e-8); /* numerical integral */
        assert_true(diffstat_two_sided_p(0.0, 5.0) == 1.0);
        assert_true(diffstat_two_sided_p(INFINITY, 5.0) == 0.0);
        assert_true(diffstat_two_sided_p(NAN, 5.0) == 1.0);
        /* Many degrees of freedom approach the normal. */
        assert_true(fabs(diffstat_two_sided_p(1.959964, 1e6) - 0.05) < 1e-5);
}

static void test_holm(void **state)
{
        (void)state;
        double p[] = {0.01, 0.04, 0.03, 0.005};
        double adj[4];
        assert_int_equal(diffstat_holm(p, 4, adj), 0);
        /* Sorted 0.005 0.01 0.03 0.04 -> x4 x3 x2 x1, made monotone. */
        assert_true(fabs(adj[3] - 0.02) < 1e-12);
        assert_true(fabs(adj[0] - 0.03) < 1e-12);
        assert_true(fabs(adj[2] - 0.06) < 1e-12);
        assert_true(fabs(adj[1] - 0.06) < 1e-12);
        double big[] = {0.5, 0.9};
        assert_int_equal(diffstat_holm(big, 2, adj), 0);
        assert_true(adj[0] == 1.0 && adj[1] == 1.0);
        assert_int_equal(diffstat_holm(NULL, 0, NULL), 0);
}

static void test_blocks_for(void **state)
{
        (void)state;
        assert_int_equal(diffstat_blocks_for(0), 2);
        assert_int_equal(diffstat_blocks_for(99), 2);
        assert_int_equal(diffstat_blocks_for(400), 8);
        assert_int_equal(diffstat_blocks_for(1000000), DIFFSTAT_BLOCKS_MAX);
}

/* A side of n samples in b equal blocks, with the row spread evenly over them. */
static void even(uint64_t n, uint32_t b, uint64_t x, struct diffstat_side *s,
                 struct diffstat_cell *c)
{
        double nb = (double)n / b, xb = (double)x / b;
        *s = (struct diffstat_side){.samples = n, .blocks = b, .sum_n2 = b * nb * nb, .scale = 1.0};
        *c = (struct diffstat_cell){.x = x, .sum_x2 = b * xb * xb, .sum_xn = b * xb * nb};
}

static void test_compare(void **state)
{
        (void)state;
        struct diffstat_side a, b;
        struct diffstat_cell ca, cb;
        struct diffstat_result r;

        /* Identical sides: no change, p = 1. */
        even(1000, 10, 200, &a, &ca);
        diffstat_compare(&a, &ca, &a, &ca, 20, &r);
        assert_true(r.tested);
        assert_true(r.change == 0.0 && r.rel == 0.0 && r.p == 1.0);

        /* 20% -> 40% of 1000 samples each: unmistakable. */
        even(1000, 10, 400, &b, &cb);
        diffstat_compare(&a, &ca, &b, &cb, 20, &r);
        assert_true(fabs(r.base - 0.2) < 1e-12 && fabs(r.new_ - 0.4) < 1e-12);
        assert_true(fabs(r.rel - 1.0) < 1e-12);
        assert_true(r.p < 1e-12);
        /* Evenly spread blocks: the binomial variance is the larger, so normal. */
        assert_true(isinf(r.df));

        /* A row absent from the base: relative change is infinite, variance not zero. */
        struct diffstat_cell zero = {0};
        even(1000, 10, 50, &b, &cb);
        diffstat_compare(&a, &zero, &b, &cb, 20, &r);
        assert_true(r.tested && isinf(r.rel) && r.rel > 0 && r.se > 0 && r.p < 1e-3);

        /* Below min_samples: reported, not tested. */
        even(1000, 10, 5, &b, &cb);
        diffstat_compare(&a, &zero, &b, &cb, 20, &r);
        assert_false(r.tested);
        assert_true(r.p == 1.0 && r.change > 0);

        /* Empty side: nothing to test. */
        struct diffstat_side empty = {.scale = 1.0};
        diffstat_compare(&empty, &zero, &b, &cb, 0, &r);
        assert_false(r.tested);

        /*
         * The same totals, but the row comes in bursts: all its samples of
         * each side in two of ten blocks. Batch means sees the bursts and
         * the change (20% -> 30%) that the binomial variance would call
         * significant is not.
         */
        struct diffstat_side ba = {
            .samples = 1000, .blocks = 10, .sum_n2 = 10 * 100.0 * 100.0, .scale = 1.0};
        struct diffstat_cell bca = {
            .x = 200, .sum_x2 = 2 * 100.0 * 100.0, .sum_xn = 2 * 100.0 * 100.0};
        struct diffstat_cell bcb = {
            .x = 300, .sum_x2 = 2 * 150.0 * 150.0, .sum_xn = 2 * 150.0 * 100.0};
        diffstat_compare(&ba, &bca, &ba, &bcb, 20, &r);
        assert_true(r.tested);
        assert_true(isfinite(r.df) && r.df > 1 && r.df < 20);
        assert_true(r.p > 0.05);
        struct diffstat_cell sa = {.x = 200}, sb = {.x = 300};
        struct diffstat_side nb = {.samples = 1000, .blocks = 1, .scale = 1.0};
        diffstat_compare(&nb, &sa, &nb, &sb, 20, &r);
        assert_true(isinf(r.df) && r.p < 1e-5); /* what the textbook test says */

        /* Time: a side of 2 s, 1000 samples; 10% of it is 200 ms. */
        struct diffstat_side ta, tb;
        even(1000, 10, 100, &ta, &ca);
        even(1000, 10, 200, &tb, &cb);
        ta.scale = 2.0;
        tb.scale = 1.0;
        diffstat_compare(&ta, &ca, &tb, &cb, 20, &r);
        assert_true(fabs(r.base - 0.2) < 1e-12 && fabs(r.new_ - 0.2) < 1e-12);
        assert_true(fabs(r.change) < 1e-12 && r.p > 0.99);
}

/* ---- simulation ---- */

static uint64_t rng_state;

static double uniform(void)
{
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}

/*
 * A program of K leaf functions under two callers (leaves 0-4 under the
 * first, 5-9 under the second). The sampled leaf follows a sticky Markov
 * chain: a call lasts a geometric number of samples with mean run[k], then
 * the next leaf is drawn from share[]. Long calls make consecutive samples
 * alike, which is what the batch means must see.
 */
#define K       10
#define CALLERS 2
#define ROWS    (K + CALLERS)

struct program {
        double share[K];
        double run[K];
};

static int draw(const double *share)
{
        double u = uniform(), c = 0;
        for (int k = 0; k < K - 1; k++) {
                c += share[k];
                if (u < c)
                        return k;
        }
        return K - 1;
}

/* How a side is recorded: runs of n samples each, each run's shares shifted by up to +-shift. */
struct setup {
        uint64_t n;
        uint32_t runs;
        double shift;
};

/*
 * Record one side into per-row cells, cut in time blocks as pyflame-diff
 * cuts them (runs merged at their starts share the blocks) and, with
 * several runs, summed per run.
 */
static void record(const struct program *p, const struct setup *u, struct diffstat_side *s,
                   struct diffstat_cell *c)
{
        uint64_t total = u->n * u->runs;
        uint32_t b = diffstat_blocks_for(total);
        uint64_t bx[DIFFSTAT_BLOCKS_MAX][ROWS], bn[DIFFSTAT_BLOCKS_MAX];
        memset(bx, 0, sizeof(bx));
        memset(bn, 0, sizeof(bn));
        memset(c, 0, ROWS * sizeof(*c));
        *s = (struct diffstat_side){.samples = total, .blocks = b, .scale = 1.0};
        for (uint32_t run = 0; run < u->runs; run++) {
                double share[K], sum = 0;
                for (int k = 0; k < K; k++)
                        sum += share[k] = p->share[k] * (1.0 + u->shift * (2 * uniform() - 1));
                for (int k = 0; k < K; k++)
                        share[k] /= sum;
                uint64_t rx[ROWS] = {0};
                int cur = -1;
                for (uint64_t i = 0; i < u->n; i++) {
                        if (cur < 0 || uniform() < 1.0 / p->run[cur])
                                cur = draw(share);
                        uint32_t blk = (uint32_t)(i * b / u->n);
                        bn[blk]++;
                        bx[blk][cur]++;
                        bx[blk][K + cur / (K / CALLERS)]++;
                        rx[cur]++;
                        rx[K + cur / (K / CALLERS)]++;
                }
                if (u->runs < 2)
                        continue;
                s->runs++;
                s->run_sum_n2 += (double)u->n * u->n;
                for (int r = 0; r < ROWS; r++) {
                        c[r].run_sum_x2 += (double)rx[r] * rx[r];
                        c[r].run_sum_xn += (double)rx[r] * u->n;
                }
        }
        for (uint32_t j = 0; j < b; j++) {
                s->sum_n2 += (double)bn[j] * bn[j];
                for (int r = 0; r < ROWS; r++) {
                        c[r].x += bx[j][r];
                        c[r].sum_x2 += (double)bx[j][r] * bx[j][r];
                        c[r].sum_xn += (double)bx[j][r] * bn[j];
                }
        }
}

/* Rows whose change is significant at family-wise 1 - confidence, by our test and the textbook
 * z-test. */
static void compare_setup(const struct program *base, const struct program *new_,
                          const struct setup *u, int *ours, int *naive, bool *row0)
{
        struct diffstat_side sa, sb;
        struct diffstat_cell ca[ROWS], cb[ROWS];
        uint64_t n = u->n * u->runs;
        record(base, u, &sa, ca);
        record(new_, u, &sb, cb);
        double p[ROWS], pz[ROWS], adj[ROWS], adjz[ROWS];
        int idx[ROWS];
        size_t m = 0;
        for (int r = 0; r < ROWS; r++) {
                struct diffstat_result res;
                diffstat_compare(&sa, &ca[r], &sb, &cb[r], 20, &res);
                if (!res.tested)
                        continue;
                double pooled = (double)(ca[r].x + cb[r].x) / (double)(2 * n);
                double z = res.change / sqrt(pooled * (1 - pooled) * 2.0 / (double)n);
                idx[m] = r;
                pz[m] = diffstat_two_sided_p(z, INFINITY);
                p[m++] = res.p;
        }
        assert_int_equal(diffstat_holm(p, m, adj), 0);
        assert_int_equal(diffstat_holm(pz, m, adjz), 0);
        *ours = *naive = 0;
        *row0 = false;
        for (size_t i = 0; i < m; i++) {
                *ours += adj[i] <= 0.01;
                *naive += adjz[i] <= 0.01;
                if (idx[i] == 0 && adj[i] <= 0.01)
                        *row0 = true;
        }
}

/* One run per side, n samples each, no shift between runs. */
static void compare_pair(const struct program *base, const struct program *new_, uint64_t n,
                         int *ours, int *naive, bool *row0)
{
        struct setup u = {n, 1, 0.0};
        compare_setup(base, new_, &u, ours, naive, row0);
}

static const struct program mixed = {
    {0.25, 0.15, 0.12, 0.10, 0.08, 0.08, 0.07, 0.06, 0.05, 0.04},
    {1, 3, 10, 1, 3, 10, 1, 3, 10, 3},
};

/* False alarms: pairs of identical programs in which any row is reported significant. */
static double false_alarms(const struct program *p, uint64_t n, int pairs, double *naive_rate)
{
        int alarms = 0, naive = 0;
        for (int i = 0; i < pairs; i++) {
                int a, z;
                bool row0;
                compare_pair(p, p, n, &a, &z, &row0);
                alarms += a > 0;
                naive += z > 0;
        }
        *naive_rate = (double)naive / pairs;
        return (double)alarms / pairs;
}

static void test_false_alarm_rate(void **state)
{
        (void)state;
        rng_state = 0x9e3779b97f4a7c15ULL;
        double naive;
        /* 1000 pairs of 1000-sample recordings (5 s at 200 Hz), calls of 1 to 10 samples. */
        double rate = false_alarms(&mixed, 1000, 1000, &naive);
        printf("false alarms, 1000 identical pairs, 1000 samples, runs 1-10 samples, 99%%: "
               "%.1f%% (textbook z-test: %.1f%%)\n",
               100 * rate, 100 * naive);
        assert_true(rate <= 0.02);
        assert_true(naive >= 0.5); /* why the textbook test is not used */

        struct program slow = mixed;
        for (int k = 0; k < K; k++)
                slow.run[k] = 30;
        rate = false_alarms(&slow, 4000, 300, &naive);
        printf("false alarms, 300 pairs, 4000 samples, every call 30 samples long: %.1f%% "
               "(textbook: %.1f%%)\n",
               100 * rate, 100 * naive);
        assert_true(rate <= 0.03);
        rate = false_alarms(&slow, 400, 300, &naive);
        printf("false alarms, 300 pairs, 400 samples, every call 30 samples long: %.1f%% "
               "(textbook: %.1f%%; blocks of 50 samples barely exceed the calls)\n",
               100 * rate, 100 * naive);
        assert_true(rate <= 0.06);
}

/*
 * Runs that differ by more than their samples: every run's shares shifted by
 * up to +-20% at random (the machine's load, memory layout, frequency). One
 * run per side cannot see it and reports changes; five runs per side,
 * merged, measure it between runs and do not.
 */
static void test_run_to_run(void **state)
{
        (void)state;
        rng_state = 0x5851f42d4c957f2dULL;
        struct program quick = mixed;
        for (int k = 0; k < K; k++)
                quick.run[k] = 1;
        int pairs = 300, single = 0, merged = 0;
        struct setup one = {5000, 1, 0.2}, five = {1000, 5, 0.2};
        for (int i = 0; i < pairs; i++) {
                int a, z;
                bool row0;
                compare_setup(&quick, &quick, &one, &a, &z, &row0);
                single += a > 0;
                compare_setup(&quick, &quick, &five, &a, &z, &row0);
                merged += a > 0;
        }
        printf("false alarms, runs differing by up to 20%%, 300 pairs of 5000 samples: "
               "%.1f%% with one run per side, %.1f%% with five runs of 1000 merged\n",
               100.0 * single / pairs, 100.0 * merged / pairs);
        assert_true(single > pairs / 5);
        assert_true(merged <= pairs * 3 / 100);
        /* What replicates cost: the first leaf twice as long, found how often? */
        struct program slow = quick;
        slow.share[0] *= 2;
        double sum = 0;
        for (int k = 0; k < K; k++)
                sum += slow.share[k];
        for (int k = 0; k < K; k++)
                slow.share[k] /= sum;
        int found = 0;
        for (int i = 0; i < 100; i++) {
                int a, z;
                bool row0;
                compare_setup(&quick, &slow, &five, &a, &z, &row0);
                found += row0;
        }
        printf("power, 25%% -> 40%%, five runs of 1000 samples per side, runs differing by up "
               "to 20%%: %d%%\n",
               found);
        assert_true(found >= 80);
}

/*
 * What the samples are: the recorder takes one sample per period at a
 * uniformly random instant within it (record/schedule.c), so each sample is
 * an independent draw of the program's state within its period, and a
 * share's variance is at most binomial whatever the program does in time;
 * autocorrelation comes only from calls longer than a period, which the
 * batch means see. Here a program repeats a cycle of exactly one or two
 * periods, 70% in one function and 30% in another, each recording starting
 * at a random phase. With the schedule the recorder has, pairs of identical
 * recordings agree within the test's noise. With the one it had before (a
 * grid instant plus up to a quarter period of jitter), each recording sees
 * a few phases of the loop only, shares vary from recording to recording by
 * tens of points that no variance estimate inside one recording can see,
 * and most identical pairs "differ".
 */
enum instants { GRID_JITTER, STRATIFIED, POISSON };

static void record_periodic(double cycle_periods, enum instants how, struct diffstat_side *s,
                            struct diffstat_cell *c)
{
        const int64_t period = 10000000; /* 10 ms */
        const uint64_t n = 1000;
        const int64_t cycle = (int64_t)(cycle_periods * (double)period);
        const int64_t offset = (int64_t)(uniform() * (double)cycle);
        uint32_t b = diffstat_blocks_for(n);
        uint64_t bx[DIFFSTAT_BLOCKS_MAX][2], bn[DIFFSTAT_BLOCKS_MAX];
        memset(bx, 0, sizeof(bx));
        memset(bn, 0, sizeof(bn));
        memset(c, 0, 2 * sizeof(*c));
        *s = (struct diffstat_side){.samples = n, .blocks = b, .scale = 1.0};
        struct schedule sch;
        schedule_init_kind(&sch, how == POISSON ? SCHEDULE_POISSON : SCHEDULE_STRATIFIED, 0, period,
                           rng_state ^= rng_state << 13);
        for (uint64_t i = 0; i < n; i++) {
                int64_t t = how != GRID_JITTER
                                ? schedule_due(&sch)
                                : (int64_t)i * period +
                                      (int64_t)(uniform() * (double)(period / 2)) - period / 4;
                schedule_next(&sch);
                int64_t pos = (t + offset) % cycle;
                int row = (pos < 0 ? pos + cycle : pos) < cycle * 7 / 10 ? 0 : 1;
                uint32_t blk = (uint32_t)(i * b / n);
                bn[blk]++;
                bx[blk][row]++;
        }
        for (uint32_t j = 0; j < b; j++) {
                s->sum_n2 += (double)bn[j] * bn[j];
                for (int r = 0; r < 2; r++) {
                        c[r].x += bx[j][r];
                        c[r].sum_x2 += (double)bx[j][r] * bx[j][r];
                        c[r].sum_xn += (double)bx[j][r] * bn[j];
                }
        }
}

static double periodic_false_alarms(double cycle_periods, enum instants how, int pairs)
{
        int alarms = 0;
        for (int i = 0; i < pairs; i++) {
                struct diffstat_side sa, sb;
                struct diffstat_cell ca[2], cb[2];
                record_periodic(cycle_periods, how, &sa, ca);
                record_periodic(cycle_periods, how, &sb, cb);
                double p[2], adj[2];
                for (int r = 0; r < 2; r++) {
                        struct diffstat_result res;
                        diffstat_compare(&sa, &ca[r], &sb, &cb[r], 20, &res);
                        p[r] = res.p;
                }
                assert_int_equal(diffstat_holm(p, 2, adj), 0);
                alarms += adj[0] <= 0.01 || adj[1] <= 0.01;
        }
        return (double)alarms / pairs;
}

static void test_periodic_programs(void **state)
{
        (void)state;
        rng_state = 0x61c8864680b583ebULL;
        for (double cycle = 1; cycle <= 2; cycle++) {
                double now = periodic_false_alarms(cycle, STRATIFIED, 500);
                double poisson = periodic_false_alarms(cycle, POISSON, 500);
                double before = periodic_false_alarms(cycle, GRID_JITTER, 500);
                printf("false alarms, 500 identical pairs of a loop of %g sampling period%s, "
                       "1000 samples: %.1f%% (--blocking's Poisson instants: %.1f%%; a grid "
                       "plus a quarter period of jitter: %.1f%%)\n",
                       cycle, cycle > 1 ? "s" : "", 100 * now, 100 * poisson, 100 * before);
                assert_true(now <= 0.02);
                assert_true(poisson <= 0.02);
                assert_true(before >= 0.5);
        }
}

/*
 * Power: the first leaf takes twice as long. With short calls everywhere
 * the samples are nearly independent and 1000 of them suffice; when other
 * functions run in long calls, fewer of the samples are independent and the
 * same change needs longer recordings (printed, for the record).
 */
static double power(const struct program *base, uint64_t n, int pairs)
{
        struct program slow = *base;
        slow.share[0] *= 2;
        double sum = 0;
        for (int k = 0; k < K; k++)
                sum += slow.share[k];
        for (int k = 0; k < K; k++)
                slow.share[k] /= sum;
        int found = 0;
        for (int i = 0; i < pairs; i++) {
                int a, z;
                bool row0;
                compare_pair(base, &slow, n, &a, &z, &row0);
                found += row0;
        }
        return (double)found / pairs;
}

static void test_power(void **state)
{
        (void)state;
        rng_state = 0x2545f4914f6cdd1dULL;
        struct program quick = mixed;
        for (int k = 0; k < K; k++)
                quick.run[k] = 1;
        double p = power(&quick, 1000, 200);
        printf("power, 25%% -> 40%%, short calls: %.1f%% with 1000 samples\n", 100 * p);
        assert_true(p >= 0.95);
        double p1 = power(&mixed, 1000, 200), p4 = power(&mixed, 4000, 200);
        printf("power, 25%% -> 40%%, calls of 1-10 samples: %.1f%% with 1000 samples, "
               "%.1f%% with 4000\n",
               100 * p1, 100 * p4);
        assert_true(p4 >= 0.9);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_t_tail),
            cmocka_unit_test(test_holm),
            cmocka_unit_test(test_blocks_for),
            cmocka_unit_test(test_compare),
            cmocka_unit_test(test_false_alarm_rate),
            cmocka_unit_test(test_run_to_run),
            cmocka_unit_test(test_periodic_programs),
            cmocka_unit_test(test_power),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
