/*
 * stallcheck.c - how often this machine takes the CPU away from a thread
 * that never sleeps: the floor under any sampler's missed deadlines.
 *
 * Usage: pyflame-stallcheck SECONDS NS [NS...]
 *
 * Reads CLOCK_MONOTONIC in a tight loop for SECONDS and counts the gaps
 * between two consecutive readings longer than each NS (interrupts,
 * scheduler ticks, the hypervisor running another guest). Prints one line
 * "gaps_over_NS COUNT" per threshold and "max_gap_ns N". A sampler spinning
 * toward its deadlines on the same CPU loses those moments too, so a rate
 * whose deadline tolerance is NS cannot be held with fewer misses than
 * gaps_over_NS. Run it pinned (taskset) to the CPU the recorder uses.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_THRESHOLDS 16

static int64_t now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
        if (argc < 3 || argc - 2 > MAX_THRESHOLDS) {
                fprintf(stderr, "usage: %s SECONDS NS [NS...] (at most %d thresholds)\n", argv[0],
                        MAX_THRESHOLDS);
                return 2;
        }
        double secs = atof(argv[1]);
        int n = argc - 2;
        int64_t limit[MAX_THRESHOLDS];
        uint64_t over[MAX_THRESHOLDS] = {0};
        for (int i = 0; i < n; i++)
                limit[i] = atoll(argv[2 + i]);
        int64_t start = now_ns(), prev = start, end = start + (int64_t)(secs * 1e9), max = 0;
        for (;;) {
                int64_t t = now_ns(), gap = t - prev;
                prev = t;
                if (gap > max)
                        max = gap;
                for (int i = 0; i < n; i++)
                        over[i] += gap > limit[i];
                if (t >= end)
                        break;
        }
        for (int i = 0; i < n; i++)
                printf("gaps_over_%lld %llu\n", (long long)limit[i], (unsigned long long)over[i]);
        printf("max_gap_ns %lld\n", (long long)max);
        return 0;
}
