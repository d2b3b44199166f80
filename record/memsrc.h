/*
 * memsrc.h - how the recorder reads another process's memory.
 *
 * Everything that walks target memory goes through a struct memsrc, so the
 * same walker runs against a live process (process_vm_readv) and against
 * synthetic memory images built by the unit tests. A read either fills the
 * whole buffer or fails: a short read is a failure, because the target's
 * memory changes under us and half a struct is garbage.
 */
#ifndef PYFLAME_MEMSRC_H
#define PYFLAME_MEMSRC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* One remote range for a batched read. */
struct memsrc_iov {
        uint64_t addr;
        void *buf;
        size_t len;
};

struct memsrc_region;

struct memsrc {
        /*
         * Read `len` bytes at `addr` into `buf`. Returns 0, or -EFAULT when the
         * range is not (wholly) mapped, -ESRCH when the process is gone, -EPERM
         * when not permitted, another -errno otherwise.
         */
        int (*read)(struct memsrc *m, uint64_t addr, void *buf, size_t len);
        /*
         * Read several ranges in one go (one system call for a live process).
         * Returns 0 when every range was read whole, else a negative errno as
         * above. May be NULL: memsrc_readv() then falls back to read().
         */
        int (*readv)(struct memsrc *m, const struct memsrc_iov *iov, size_t n);
        /* Statistics: number of system calls / reads done, for benchmarks. */
        uint64_t n_calls;
        /* Backing state of the two implementations below. */
        pid_t pid;
        const struct memsrc_region *regions;
        size_t n_regions;
};

/* Read helpers that dispatch through `m`. */
static inline int memsrc_read(struct memsrc *m, uint64_t addr, void *buf, size_t len)
{
        m->n_calls++;
        return m->read(m, addr, buf, len);
}

int memsrc_readv(struct memsrc *m, const struct memsrc_iov *iov, size_t n);

/* A live process: process_vm_readv on `pid`. */
void memsrc_init_process(struct memsrc *m, pid_t pid);

/*
 * A synthetic image for tests: a set of (address, bytes) regions; reads
 * outside them fail with -EFAULT. The regions are not copied: they must
 * outlive the memsrc.
 */
struct memsrc_region {
        uint64_t addr;
        const void *data;
        size_t len;
};
void memsrc_init_image(struct memsrc *m, const struct memsrc_region *regions, size_t n);

#endif
