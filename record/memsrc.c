/*
 * memsrc.c - the two memory sources behind struct memsrc: a live process read
 * with process_vm_readv (never ptrace, never a write), and a synthetic image
 * made of (address, bytes) regions for the unit tests.
 *
 * Both keep the same contract: a read fills the whole buffer or fails. The
 * kernel happily returns a short count when a range crosses the end of a
 * mapping, and a batched call stops at the first range that cannot be read,
 * so every call checks that the byte count equals the sum of the lengths.
 */
#include "memsrc.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>
#include <sys/uio.h>

/* The kernel's limit on iovecs per call (UIO_MAXIOV); larger batches are split. */
#define MEMSRC_MAX_IOV 1024

/* Map the errno of process_vm_readv to the codes memsrc.h promises. */
static int vm_errno_code(int e)
{
        switch (e) {
        case ESRCH:
                return -ESRCH;
        case EPERM:
        case EACCES:
                return -EPERM;
        case EFAULT:
                return -EFAULT;
        default:
                return -e;
        }
}

static bool range_ok(uint64_t addr, size_t len)
{
        return len <= SSIZE_MAX && addr <= UINT64_MAX - len && addr + len <= UINTPTR_MAX;
}

static int process_read(struct memsrc *m, uint64_t addr, void *buf, size_t len)
{
        if (len == 0)
                return 0;
        if (!range_ok(addr, len))
                return -EFAULT;
        struct iovec local = {.iov_base = buf, .iov_len = len};
        struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
        ssize_t r = process_vm_readv(m->pid, &local, 1, &remote, 1, 0);
        if (r < 0)
                return vm_errno_code(errno);
        return (size_t)r == len ? 0 : -EFAULT;
}

/* One system call for up to MEMSRC_MAX_IOV ranges; zero-length ranges must be filtered out. */
static int process_readv_chunk(struct memsrc *m, const struct memsrc_iov *iov, size_t n)
{
        struct iovec local[MEMSRC_MAX_IOV], remote[MEMSRC_MAX_IOV];
        size_t total = 0, k = 0;
        for (size_t i = 0; i < n; i++) {
                if (iov[i].len == 0)
                        continue;
                if (!range_ok(iov[i].addr, iov[i].len) || iov[i].len > SSIZE_MAX - total)
                        return -EFAULT;
                local[k].iov_base = iov[i].buf;
                local[k].iov_len = iov[i].len;
                remote[k].iov_base = (void *)(uintptr_t)iov[i].addr;
                remote[k].iov_len = iov[i].len;
                total += iov[i].len;
                k++;
        }
        if (k == 0)
                return 0;
        m->n_calls++;
        ssize_t r = process_vm_readv(m->pid, local, k, remote, k, 0);
        if (r < 0)
                return vm_errno_code(errno);
        /* A partial transfer stops at the first range that failed: fewer bytes means one did. */
        return (size_t)r == total ? 0 : -EFAULT;
}

static int process_readv(struct memsrc *m, const struct memsrc_iov *iov, size_t n)
{
        for (size_t done = 0; done < n; done += MEMSRC_MAX_IOV) {
                size_t k = n - done < MEMSRC_MAX_IOV ? n - done : MEMSRC_MAX_IOV;
                int rc = process_readv_chunk(m, iov + done, k);
                if (rc < 0)
                        return rc;
        }
        return 0;
}

void memsrc_init_process(struct memsrc *m, pid_t pid)
{
        memset(m, 0, sizeof(*m));
        m->read = process_read;
        m->readv = process_readv;
        m->pid = pid;
}

/*
 * Whether [addr, addr+len) is wholly covered by the image's regions (which
 * may be adjacent: a read may cross from one to the next, as it may cross
 * two adjacent mappings of a process). Each step moves to a region that
 * covers the current address and advances past it, so at most n_regions steps.
 */
static bool image_covered(const struct memsrc *m, uint64_t addr, size_t len)
{
        uint64_t cur = addr, end = addr + len;
        for (size_t step = 0; step <= m->n_regions && cur < end; step++) {
                const struct memsrc_region *hit = NULL;
                for (size_t i = 0; i < m->n_regions; i++) {
                        const struct memsrc_region *r = &m->regions[i];
                        if (cur >= r->addr && cur - r->addr < r->len) {
                                hit = r;
                                break;
                        }
                }
                if (!hit)
                        return false;
                cur = hit->addr + hit->len;
        }
        return cur >= end;
}

static int image_read(struct memsrc *m, uint64_t addr, void *buf, size_t len)
{
        if (len == 0)
                return 0;
        if (addr > UINT64_MAX - len || !image_covered(m, addr, len))
                return -EFAULT;
        /* Covered: copy piece by piece from whichever region holds each byte. */
        uint64_t cur = addr, end = addr + len;
        for (size_t step = 0; step <= m->n_regions && cur < end; step++) {
                for (size_t i = 0; i < m->n_regions; i++) {
                        const struct memsrc_region *r = &m->regions[i];
                        if (cur >= r->addr && cur - r->addr < r->len) {
                                uint64_t take = r->addr + r->len - cur;
                                if (take > end - cur)
                                        take = end - cur;
                                memcpy((char *)buf + (cur - addr),
                                       (const char *)r->data + (cur - r->addr), take);
                                cur += take;
                                break;
                        }
                }
        }
        return 0;
}

/* Like process_readv: one "call" per batch, so call counts in tests match a live process. */
static int image_readv(struct memsrc *m, const struct memsrc_iov *iov, size_t n)
{
        for (size_t done = 0; done < n; done += MEMSRC_MAX_IOV) {
                size_t k = n - done < MEMSRC_MAX_IOV ? n - done : MEMSRC_MAX_IOV;
                m->n_calls++;
                for (size_t i = done; i < done + k; i++) {
                        int rc = image_read(m, iov[i].addr, iov[i].buf, iov[i].len);
                        if (rc < 0)
                                return rc;
                }
        }
        return 0;
}

void memsrc_init_image(struct memsrc *m, const struct memsrc_region *regions, size_t n)
{
        memset(m, 0, sizeof(*m));
        m->read = image_read;
        m->readv = image_readv;
        m->regions = regions;
        m->n_regions = n;
}

int memsrc_readv(struct memsrc *m, const struct memsrc_iov *iov, size_t n)
{
        if (m->readv)
                return m->readv(m, iov, n);
        for (size_t i = 0; i < n; i++) {
                int rc = memsrc_read(m, iov[i].addr, iov[i].buf, iov[i].len);
                if (rc < 0)
                        return rc;
        }
        return 0;
}
