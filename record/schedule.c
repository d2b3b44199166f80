/*
 * schedule.c - random sampling instants, stratified or Poisson (see
 * schedule.h).
 */
#include "schedule.h"

#include <assert.h>
#include <math.h>

/* xorshift64* (Vigna): fast, and far more uniform than the draws need. */
static uint64_t next_random(struct schedule *s)
{
        s->rng ^= s->rng >> 12;
        s->rng ^= s->rng << 25;
        s->rng ^= s->rng >> 27;
        return s->rng * 0x2545f4914f6cdd1dull;
}

uint64_t schedule_random(struct schedule *s, uint64_t n)
{
        assert(n > 0);
        /* Lemire's multiply-shift: the bias is below n / 2^64. */
        return (uint64_t)(((unsigned __int128)next_random(s) * n) >> 64);
}

/* An exponential gap of mean one period, in ns (at most ~37 periods). */
static int64_t gap(struct schedule *s)
{
        double u = ((double)(next_random(s) >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */
        return (int64_t)(-log(u) * (double)s->period_ns);
}

/*
 * Draw the instant of slot s->slot: uniform in [slot start, slot end); or,
 * Poisson, the one drawn ahead, and the one after it.
 */
static void draw(struct schedule *s)
{
        if (s->kind == SCHEDULE_POISSON) {
                s->due_ns = s->after_ns;
                s->after_ns = s->due_ns + gap(s);
                return;
        }
        int64_t offset = (int64_t)schedule_random(s, (uint64_t)s->period_ns);
        s->due_ns = s->start_ns + (int64_t)s->slot * s->period_ns + offset;
}

const char *schedule_kind_name(enum schedule_kind kind)
{
        return kind == SCHEDULE_POISSON ? "poisson" : "stratified";
}

void schedule_init(struct schedule *s, int64_t start_ns, int64_t period_ns, uint64_t seed)
{
        schedule_init_kind(s, SCHEDULE_STRATIFIED, start_ns, period_ns, seed);
}

void schedule_init_kind(struct schedule *s, enum schedule_kind kind, int64_t start_ns,
                        int64_t period_ns, uint64_t seed)
{
        assert(period_ns > 0);
        s->kind = kind;
        s->start_ns = start_ns;
        s->period_ns = period_ns;
        s->slot = 0;
        /* splitmix64 of the seed: any seed, 0 included, gives a good non-zero state. */
        uint64_t z = seed + 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        s->rng = (z ^ (z >> 31)) | 1;
        s->after_ns = kind == SCHEDULE_POISSON ? start_ns + gap(s) : 0;
        draw(s);
}

#define STALL_DRAWN 1000 /* periods of a stall whose missed Poisson instants are drawn */

uint64_t schedule_catch_up(struct schedule *s, int64_t now_ns)
{
        if (now_ns - s->due_ns < s->period_ns)
                return 0;
        if (s->kind == SCHEDULE_POISSON) {
                uint64_t missed = 0;
                /*
                 * A long stall (a recorder stopped for hours): the instants
                 * before its last STALL_DRAWN periods are counted by their
                 * mean, not drawn one by one; the process is memoryless, so
                 * the instants after do not depend on them.
                 */
                int64_t drawn_from = now_ns - STALL_DRAWN * s->period_ns;
                if (s->due_ns < drawn_from) {
                        missed = 1 + (uint64_t)((drawn_from - s->due_ns) / s->period_ns);
                        s->slot += missed;
                        s->after_ns = drawn_from + gap(s);
                        draw(s);
                }
                for (; now_ns - s->due_ns >= s->period_ns; missed++) {
                        s->slot++;
                        draw(s);
                }
                return missed;
        }
        uint64_t now_slot = (uint64_t)((now_ns - s->start_ns) / s->period_ns);
        uint64_t missed = now_slot - s->slot;
        s->slot = now_slot;
        draw(s);
        return missed;
}

void schedule_next(struct schedule *s)
{
        s->slot++;
        draw(s);
}
