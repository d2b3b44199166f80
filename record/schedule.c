/*
 * schedule.c - stratified random sampling instants (see schedule.h).
 */
#include "schedule.h"

#include <assert.h>

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

/* Draw the instant of slot s->slot: uniform in [slot start, slot end). */
static void draw(struct schedule *s)
{
        int64_t offset = (int64_t)schedule_random(s, (uint64_t)s->period_ns);
        s->due_ns = s->start_ns + (int64_t)s->slot * s->period_ns + offset;
}

void schedule_init(struct schedule *s, int64_t start_ns, int64_t period_ns, uint64_t seed)
{
        assert(period_ns > 0);
        s->start_ns = start_ns;
        s->period_ns = period_ns;
        s->slot = 0;
        /* splitmix64 of the seed: any seed, 0 included, gives a good non-zero state. */
        uint64_t z = seed + 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        s->rng = (z ^ (z >> 31)) | 1;
        draw(s);
}

uint64_t schedule_catch_up(struct schedule *s, int64_t now_ns)
{
        if (now_ns - s->due_ns < s->period_ns)
                return 0;
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
