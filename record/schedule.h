/*
 * schedule.h - when to take each sample: one uniformly random instant per
 * period (stratified sampling of time).
 *
 * Time is cut into slots of one period from the start of the recording:
 * slot k is [start + k P, start + (k+1) P). Each slot gets one sample, at an
 * instant drawn uniformly within it, independently of every other slot. So:
 *   - every instant of the recording has the same chance of being sampled,
 *     whatever the program's own period: a loop that lasts exactly one or two
 *     periods is seen at uniformly spread phases, never stroboscopically;
 *   - a slot's sample is an independent uniform draw of the program's state
 *     within that slot, so a share is estimated at least as well as by
 *     independent uniform instants (binomial variance or less), which is what
 *     pyflame-diff's test assumes;
 *   - the rate is exactly 1/P over any stretch of slots and the schedule is
 *     absolute (no drift, however long the recording).
 * A sample whose instant has passed (a wake-up comes late: tens of
 * microseconds on a VM whose idle CPU the host must wake; or a pass overran)
 * is taken at once, less than a period late. Its instant is then the drawn
 * one plus a delay that does not depend on the draw, still uniform over the
 * period modulo the period, and the next slot's sample is drawn as usual.
 * (Dropping the samples whose slot ended before them instead would drop
 * those drawn near the end of their slot: the phases would no longer be
 * uniform, and at 1 kHz on a VM 5-10% of the slots went that way.) A sample
 * a whole period or more late (the recorder was stalled) is missed, and so
 * is every slot that ended meanwhile: counted, never made up later (with
 * --blocking, a slot whose instant fell while every process was held takes
 * the held stacks instead: record.c's hold_over()). A pass
 * that costs a fraction c of the period moves the distribution of phases
 * by at most c*c/4.
 *
 * With --blocking the instants are a Poisson process instead: independent
 * exponential gaps of one period on average (SCHEDULE_POISSON). Each sample
 * holds the program, and on a busy machine a thread let go waits for a CPU,
 * for up to milliseconds, right after the sample. In a stratified schedule
 * the rest of a slot after its sample cannot be sampled again, so that time,
 * which the program spends in whatever it was doing when held, was seen too
 * little: a thread busy 49% of the time came out 1.45-1.51 points less busy
 * at 1 kHz under load. Exponential gaps are memoryless: the time right after
 * a sample is as likely to be sampled as any other (the same thread: +0.03
 * and +0.05). Their phases are uniform too, a share's variance is binomial
 * (what pyflame-diff's floor assumes; stratified is at most that), and the
 * rate is 1/P on average. Missed instants follow the same rule: one a period
 * or more in the past is missed.
 */
#ifndef PYFLAME_SCHEDULE_H
#define PYFLAME_SCHEDULE_H

#include <stdint.h>

enum schedule_kind {
        SCHEDULE_STRATIFIED, /* one uniform instant per period (the default mode) */
        SCHEDULE_POISSON,    /* exponential gaps, one period on average (--blocking) */
};

struct schedule {
        enum schedule_kind kind;
        int64_t start_ns, period_ns;
        uint64_t slot;    /* the slot (the instant, when Poisson) whose sample comes next */
        int64_t due_ns;   /* its instant */
        int64_t after_ns; /* Poisson: the instant after it, drawn ahead */
        uint64_t rng;     /* xorshift64* state, never 0 */
};

/*
 * Start a stratified schedule at `start_ns` with slots of `period_ns` (> 0).
 * `seed` picks the random instants (any value; the same seed gives the same
 * instants, which is what the tests use).
 */
void schedule_init(struct schedule *s, int64_t start_ns, int64_t period_ns, uint64_t seed);

/* The same, of either kind. */
void schedule_init_kind(struct schedule *s, enum schedule_kind kind, int64_t start_ns,
                        int64_t period_ns, uint64_t seed);

/* "stratified" or "poisson", for the trace's meta. */
const char *schedule_kind_name(enum schedule_kind kind);

/* The instant at which the next sample is due. */
static inline int64_t schedule_due(const struct schedule *s)
{
        return s->due_ns;
}

/*
 * It is `now_ns`. If the next sample is due a period or more ago, it is
 * missed, and so is every later slot that has ended: skip them and return
 * how many (missed deadlines); the slot holding now_ns is then the next one
 * (Poisson: every instant a period or more ago is skipped and counted).
 * Otherwise return 0. Either way the sample is due at schedule_due(), which
 * may already have passed: take it at once.
 */
uint64_t schedule_catch_up(struct schedule *s, int64_t now_ns);

/* Where the next slot begins (Poisson: the next instant): no later sample is due before it. */
static inline int64_t schedule_next_slot(const struct schedule *s)
{
        if (s->kind == SCHEDULE_POISSON)
                return s->after_ns;
        return s->start_ns + (int64_t)(s->slot + 1) * s->period_ns;
}

/* The sample of the current slot was taken: move on to the next slot. */
void schedule_next(struct schedule *s);

/*
 * A uniform draw from [0, n) (n > 0) of the schedule's generator, for other
 * choices that must not line up with the program: the order in which the
 * processes of a pass are read, so that none is always read first.
 */
uint64_t schedule_random(struct schedule *s, uint64_t n);

#endif
