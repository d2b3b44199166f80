/*
 * cpustate.c - a thread's on-CPU state from its context-switch records.
 *
 * One perf_event per watched thread: a software dummy event (it counts
 * nothing) with context_switch set, so that the kernel writes a
 * PERF_RECORD_SWITCH into the event's ring each time the thread is switched
 * in or out, and with task set, so that it writes PERF_RECORD_EXIT when the
 * thread exits (without it the ring would keep saying "switched in" forever
 * after the exit, since the context goes away before the last switch out).
 *
 * The ring is mapped read-only, which makes it an overwrite ring: the kernel
 * never waits for us and never loses records, it writes over the oldest ones.
 * With write_backward it writes from the end of the buffer towards the start,
 * so the newest record always starts at data_head (which counts down from
 * 0): reading the state is loading data_head and the 8-byte header there.
 *
 * The kernel publishes data_head after writing the record (smp_wmb, then the
 * store), so a load-acquire of data_head makes the record visible. A newer
 * record is written just below the newest one, not over it; overwriting the
 * newest takes a whole ring (512 switch records) of newer ones, each of
 * which moves data_head. Loading data_head again after the header (behind
 * an acquire fence) and finding it unchanged therefore proves the header
 * was not torn; the same idea as a seqlock, with data_head as the sequence.
 */
#include "cpustate.h"

#include <errno.h>
#include <linux/perf_event.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "pfutil.h"

/* Data pages of the ring (a power of two); one page holds 512 switch records. */
#define RING_DATA_PAGES 1
/* Attempts at a consistent read while the thread keeps switching. */
#define READ_TRIES 4

struct cpustate {
        int fd;
        void *map;
        size_t map_len;
        const struct perf_event_mmap_page *meta;
        const unsigned char *data;
        uint64_t data_mask; /* data size - 1 */
};

/*
 * PERF_RECORD_MISC_SWITCH_OUT_PREEMPT arrived in Linux 4.17; an older kernel
 * accepts the same attributes but leaves the flag clear, which would make
 * every preempted thread look blocked. Nothing in the ABI tells them apart,
 * so look at the release.
 */
static int kernel_has_preempt_flag(void)
{
        struct utsname u;
        unsigned major, minor;
        if (uname(&u) < 0 || sscanf(u.release, "%u.%u", &major, &minor) != 2)
                return 0;
        return major > 4 || (major == 4 && minor >= 17);
}

static int perf_event_open(struct perf_event_attr *attr, pid_t tid)
{
#ifdef SYS_perf_event_open
        return (int)syscall(SYS_perf_event_open, attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
#else
        (void)attr;
        (void)tid;
        errno = ENOSYS;
        return -1;
#endif
}

struct cpustate *cpustate_open(pid_t tid)
{
        if (tid <= 0) {
                errno = EINVAL;
                return NULL;
        }
        if (!kernel_has_preempt_flag()) {
                errno = ENOSYS;
                return NULL;
        }
        struct perf_event_attr attr;
        memset(&attr, 0, sizeof(attr));
        attr.size = sizeof(attr);
        attr.type = PERF_TYPE_SOFTWARE;
        attr.config = PERF_COUNT_SW_DUMMY;
        attr.context_switch = 1;
        attr.task = 1;
        /* User-only events are what perf_event_paranoid 2 allows without privilege. */
        attr.exclude_kernel = 1;
        attr.exclude_hv = 1;
        attr.write_backward = 1;

        /* Kernels before 4.3 (context_switch) or 4.7 (write_backward) say EINVAL. */
        int fd = perf_event_open(&attr, tid);
        if (fd < 0) {
                if (errno == EINVAL)
                        errno = EOPNOTSUPP;
                return NULL;
        }
        long page = sysconf(_SC_PAGESIZE);
        size_t data_len = (size_t)page * RING_DATA_PAGES;
        size_t map_len = (size_t)page + data_len;
        /* Read-only makes it an overwrite ring; the mlock accounting may say EPERM. */
        void *map = mmap(NULL, map_len, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
                int e = errno;
                close(fd);
                errno = e;
                return NULL;
        }
        const struct perf_event_mmap_page *meta = map;
        /* data_offset and data_size are filled since 4.1; we need 4.17 anyway. */
        if (meta->data_offset != (uint64_t)page || meta->data_size != data_len) {
                munmap(map, map_len);
                close(fd);
                errno = EOPNOTSUPP;
                return NULL;
        }
        struct cpustate *c = malloc(sizeof(*c));
        if (!c) {
                munmap(map, map_len);
                close(fd);
                errno = ENOMEM;
                return NULL;
        }
        c->fd = fd;
        c->map = map;
        c->map_len = map_len;
        c->meta = meta;
        c->data = (const unsigned char *)map + page;
        c->data_mask = data_len - 1;
        return c;
}

/* The newest record's verdict: see cpustate_read(); `on_cpu`: cpustate_on_cpu(). */
static int newest(const struct cpustate *c, bool on_cpu)
{
        for (int i = 0; i < READ_TRIES; i++) {
                uint64_t head = __atomic_load_n(&c->meta->data_head, __ATOMIC_ACQUIRE);
                if (head == 0)
                        return CPUSTATE_NO_SWITCH; /* nothing written since open */
                /* Records are multiples of 8 bytes: the header never wraps. */
                const uint64_t *at = (const uint64_t *)(c->data + (head & c->data_mask));
                uint64_t word = __atomic_load_n(at, __ATOMIC_RELAXED);
                PF_ACQUIRE_FENCE();
                if (__atomic_load_n(&c->meta->data_head, __ATOMIC_RELAXED) != head)
                        continue;
                struct perf_event_header h;
                memcpy(&h, &word, sizeof(h));
                switch (h.type) {
                case PERF_RECORD_SWITCH:
                        if (!(h.misc & PERF_RECORD_MISC_SWITCH_OUT))
                                return 1;
                        return !on_cpu && (h.misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT) != 0;
                case PERF_RECORD_FORK:
                        /* Written by the thread itself while it ran, after its last switch in. */
                        return 1;
                default:
                        /* PERF_RECORD_EXIT: the thread is gone, /proc will say so. */
                        return -1;
                }
        }
        return -1;
}

int cpustate_read(const struct cpustate *c)
{
        return newest(c, false);
}

int cpustate_on_cpu(const struct cpustate *c)
{
        return newest(c, true);
}

uint64_t cpustate_head(const struct cpustate *c)
{
        return __atomic_load_n(&c->meta->data_head, __ATOMIC_ACQUIRE);
}

int cpustate_fd(const struct cpustate *c)
{
        return c->fd;
}

void cpustate_close(struct cpustate *c)
{
        if (!c)
                return;
        munmap(c->map, c->map_len);
        close(c->fd);
        free(c);
}
