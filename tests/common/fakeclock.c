/*
 * fakeclock.c - a clock_gettime() that stands in for libc's in a test
 * program that links it (see testutil.h): CLOCK_MONOTONIC and
 * CLOCK_REALTIME are what the test sets, so the traces it writes are the
 * same bytes on every run. Other clocks are the real ones.
 */
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

int64_t tu_fake_mono_ns = TU_MONO_START;
int64_t tu_fake_wall_offset;

/* Default visibility: it must also stand in for libc's in libpyflametrace.so. */
__attribute__((visibility("default"))) int clock_gettime(clockid_t id, struct timespec *ts)
{
        int64_t ns;
        if (id == CLOCK_MONOTONIC)
                ns = tu_fake_mono_ns;
        else if (id == CLOCK_REALTIME)
                ns = TU_WALL_START + tu_fake_wall_offset + (tu_fake_mono_ns - TU_MONO_START);
        else
                return (int)syscall(SYS_clock_gettime, id, ts);
        ts->tv_sec = (time_t)(ns / 1000000000);
        ts->tv_nsec = (long)(ns % 1000000000);
        return 0;
}
