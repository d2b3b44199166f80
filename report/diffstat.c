/*
 * diffstat.c - the statistics behind pyflame-diff: is the change in one
 * function's share of the samples between two recordings larger than
 * sampling noise explains, and which of many such changes can be trusted
 * together?
 *
 * One comparison (a row and a metric, e.g. the self samples of a function)
 * estimates each side's share p = x / N and tests D = a2 p2 - a1 p1 against
 * zero (a = 1 compares shares; a = the side's sampled seconds compares
 * time, --per time). The textbook two-proportion z-test takes the N samples
 * as independent draws. They are not: a sampler that finds a thread in a
 * function will likely find it there again 5 ms later, so the samples come
 * in runs and the binomial variance understates the noise, by a factor
 * (the design effect) of 10 or more for functions that run for tens of
 * milliseconds per call. A gate built on the naive test flaps.
 *
 * What a sample is: the recorder takes one per period at a uniformly random
 * instant within it (record/schedule.h), an independent draw of the
 * program's state within that period. Given what the program did, a share
 * estimated that way has at most the binomial variance, whatever the
 * program's own rhythm (a loop of exactly one period included: a fixed grid
 * would see it at one phase, and each recording would carry its own bias
 * that no estimate inside it can see); what makes samples alike is calls
 * longer than a period, which the batch means below see.
 *
 * So the variance of each side's share is estimated twice and the larger
 * estimate is used:
 *   - binomial, with Agresti and Caffo's adjustment (one success and one
 *     failure added: p~ = (x+1)/(N+2)), which never gives a zero variance
 *     to a function absent from one side;
 *   - batch means over time: the selection is cut into B consecutive time
 *     blocks, and the spread of the per-block counts around p times the
 *     block's samples gives the variance of the ratio estimator that
 *     autocorrelation at scales shorter than a block cannot hide
 *     (B/(B-1) sum_b (x_b - p n_b)^2 / N^2).
 *   - between runs, when a side is several recordings merged into one trace
 *     (pyflame-report merge): the same estimator with each run as a block.
 *     Two runs of one program differ by more than their samples show (the
 *     machine's load, memory layout, frequency), and within one recording
 *     nothing can measure that; replicated runs can.
 * When a cluster estimate (blocks or runs) wins, the variance is an estimate
 * with (clusters - 1) degrees of freedom, and the statistic is referred to
 * Student's t with the Welch-Satterthwaite degrees of freedom of the two
 * sides; otherwise to the normal distribution. Taking the largest estimate
 * never makes a test bolder than the textbook one.
 *
 * Many rows are compared at once, so the p-values are adjusted with Holm's
 * step-down method over every test that was made: the chance that any
 * reported change is noise stays below 1 - confidence (a family-wise
 * error rate), whatever the number of functions, with more power than
 * Bonferroni.
 */
#include "report.h"

#include <math.h>
#include <stdlib.h>

/* ---- distributions ---- */

/*
 * Continued fraction of the regularized incomplete beta function (modified
 * Lentz). Converges quickly for x < (a+1)/(a+b+2); bounded to 300 steps.
 */
static double beta_cf(double a, double b, double x)
{
        const double tiny = 1e-300, eps = 1e-15;
        double qab = a + b, qap = a + 1.0, qam = a - 1.0;
        double c = 1.0, d = 1.0 - qab * x / qap;
        if (fabs(d) < tiny)
                d = tiny;
        d = 1.0 / d;
        double h = d;
        for (int m = 1; m <= 300; m++) {
                int m2 = 2 * m;
                double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
                d = 1.0 + aa * d;
                if (fabs(d) < tiny)
                        d = tiny;
                c = 1.0 + aa / c;
                if (fabs(c) < tiny)
                        c = tiny;
                d = 1.0 / d;
                h *= d * c;
                aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
                d = 1.0 + aa * d;
                if (fabs(d) < tiny)
                        d = tiny;
                c = 1.0 + aa / c;
                if (fabs(c) < tiny)
                        c = tiny;
                d = 1.0 / d;
                double del = d * c;
                h *= del;
                if (fabs(del - 1.0) < eps)
                        break;
        }
        return h;
}

/* I_x(a, b), the regularized incomplete beta function, for a, b > 0 and 0 <= x <= 1. */
static double beta_inc(double a, double b, double x)
{
        if (x <= 0.0)
                return 0.0;
        if (x >= 1.0)
                return 1.0;
        double ln_front = lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x);
        double front = exp(ln_front);
        if (x < (a + 1.0) / (a + b + 2.0))
                return front * beta_cf(a, b, x) / a;
        return 1.0 - front * beta_cf(b, a, 1.0 - x) / b;
}

double diffstat_two_sided_p(double stat, double df)
{
        if (isnan(stat))
                return 1.0;
        double t = fabs(stat);
        if (!(df > 0.0) || isinf(df) || df > 1e7)
                return erfc(t / sqrt(2.0));
        if (isinf(t))
                return 0.0;
        return beta_inc(df / 2.0, 0.5, df / (df + t * t));
}

/* ---- one comparison ---- */

uint32_t diffstat_blocks_for(uint64_t samples)
{
        uint64_t b = samples / DIFFSTAT_BLOCK_MIN_SAMPLES;
        if (b > DIFFSTAT_BLOCKS_MAX)
                b = DIFFSTAT_BLOCKS_MAX;
        return b < 2 ? 2 : (uint32_t)b;
}

/*
 * The cluster-robust variance of the ratio estimator x/N over k clusters
 * (time blocks or runs) given the sums of x_c^2, x_c n_c and n_c^2:
 * k/(k-1) sum_c (x_c - p n_c)^2 / N^2. Taken as the variance with k - 1
 * degrees of freedom when it exceeds *var.
 */
static void cluster_variance(double n, double x, uint32_t clusters, double sum_x2, double sum_xn,
                             double sum_n2, double *var, double *df)
{
        if (clusters < 2 || n <= 0.0)
                return;
        double p = x / n;
        double ss = sum_x2 - 2.0 * p * sum_xn + p * p * sum_n2;
        if (ss < 0.0)
                ss = 0.0; /* rounding of the expanded square */
        double k = (double)clusters;
        double v = k / (k - 1.0) * ss / (n * n);
        if (v > *var) {
                *var = v;
                *df = k - 1.0;
        }
}

/*
 * Variance of one side's share x/N and its degrees of freedom (INFINITY
 * when the binomial estimate is the largest).
 */
static void side_variance(const struct diffstat_side *s, const struct diffstat_cell *c, double *var,
                          double *df)
{
        double n = (double)s->samples, x = (double)c->x;
        double pt = (x + 1.0) / (n + 2.0);
        *var = pt * (1.0 - pt) / (n + 2.0);
        *df = INFINITY;
        cluster_variance(n, x, s->blocks, c->sum_x2, c->sum_xn, s->sum_n2, var, df);
        cluster_variance(n, x, s->runs, c->run_sum_x2, c->run_sum_xn, s->run_sum_n2, var, df);
}

void diffstat_compare(const struct diffstat_side *base, const struct diffstat_cell *cb,
                      const struct diffstat_side *new_, const struct diffstat_cell *cn,
                      uint64_t min_samples, struct diffstat_result *out)
{
        struct diffstat_result r = {.p = 1.0, .stat = 0.0, .df = INFINITY};
        double nb = (double)base->samples, nn = (double)new_->samples;
        r.base = nb > 0 ? base->scale * (double)cb->x / nb : 0.0;
        r.new_ = nn > 0 ? new_->scale * (double)cn->x / nn : 0.0;
        r.change = r.new_ - r.base;
        r.rel = r.base > 0 ? r.change / r.base : (r.change > 0 ? INFINITY : 0.0);
        if (nb <= 0 || nn <= 0 || cb->x + cn->x < min_samples || cb->x + cn->x == 0) {
                *out = r;
                return;
        }
        double vb, dfb, vn, dfn;
        side_variance(base, cb, &vb, &dfb);
        side_variance(new_, cn, &vn, &dfn);
        double wb = base->scale * base->scale * vb, wn = new_->scale * new_->scale * vn;
        double var = wb + wn;
        if (!(var > 0.0)) {
                *out = r;
                return;
        }
        double den = (isinf(dfb) ? 0.0 : wb * wb / dfb) + (isinf(dfn) ? 0.0 : wn * wn / dfn);
        r.df = den > 0.0 ? var * var / den : INFINITY;
        r.se = sqrt(var);
        r.stat = r.change / r.se;
        r.p = diffstat_two_sided_p(r.stat, r.df);
        r.tested = true;
        *out = r;
}

/* ---- many comparisons ---- */

struct p_index {
        double p;
        size_t i;
};

static int p_index_cmp(const void *a, const void *b)
{
        const struct p_index *x = a, *y = b;
        if (x->p != y->p)
                return x->p < y->p ? -1 : 1;
        return x->i < y->i ? -1 : x->i > y->i;
}

int diffstat_holm(const double *p, size_t m, double *adjusted)
{
        if (m == 0)
                return 0;
        struct p_index *order = calloc(m, sizeof(*order));
        if (!order)
                return -1;
        for (size_t i = 0; i < m; i++)
                order[i] = (struct p_index){isnan(p[i]) ? 1.0 : p[i], i};
        qsort(order, m, sizeof(*order), p_index_cmp);
        double running = 0.0;
        for (size_t k = 0; k < m; k++) {
                double a = (double)(m - k) * order[k].p;
                if (a > 1.0)
                        a = 1.0;
                if (a > running)
                        running = a;
                adjusted[order[k].i] = running;
        }
        free(order);
        return 0;
}
