/*
 * capture.c - the recorder's side of in-context reads (see capture.h and
 * capture.bpf.c): load the program, post a request in the shared request
 * block, make the kernel interrupt the thread, take the copy from the shared
 * output block.
 *
 * The request and output blocks are BPF arrays mapped into our memory, so a
 * capture costs two system calls' worth of work: none to post the request,
 * one read() of the thread's perf event, which returns only once the IPI it
 * caused has run on the thread's CPU (and with it the BPF program). The
 * output is published by its sequence number, written last; it is checked
 * before and after the data is copied out, and the request is withdrawn as
 * soon as read() returns, so a copy made later (by some other IPI) is never
 * taken for this one.
 */
#include "capture.h"

#include <errno.h>
#include <linux/perf_event.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pyflame-config.h"
#include "pfutil.h"

int capture_trigger_open(pid_t tid)
{
        struct perf_event_attr attr;
        memset(&attr, 0, sizeof(attr));
        attr.size = sizeof(attr);
        attr.type = PERF_TYPE_SOFTWARE;
        attr.config = PERF_COUNT_SW_DUMMY;
        attr.exclude_kernel = 1;
        attr.exclude_hv = 1;
        int fd = (int)syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

#ifdef PYFLAME_HAVE_BPF

#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bpfmsg.h"

#include "capture_shared.h"
#include "capture.skel.h"

struct capture {
        struct capture_bpf *skel;
        struct bpf_link *link;
        struct capture_request *req;
        struct capture_output *out;
        size_t req_len, out_len;
        uint64_t seq;
        uint64_t ns_dev, ns_ino;
};

static void *map_block(struct bpf_map *m, size_t *len)
{
        long page = sysconf(_SC_PAGESIZE);
        *len = ((size_t)bpf_map__value_size(m) + (size_t)page - 1) & ~((size_t)page - 1);
        void *p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, bpf_map__fd(m), 0);
        return p == MAP_FAILED ? NULL : p;
}

int capture_open(struct capture **out, char *err, size_t errlen)
{
        struct stat ns;
        if (stat("/proc/self/ns/pid", &ns) < 0) {
                snprintf(err, errlen, "cannot read our PID namespace: %s", strerror(errno));
                return -errno;
        }
        struct capture *c = calloc(1, sizeof(*c));
        if (!c) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        c->ns_dev = (uint64_t)ns.st_dev;
        c->ns_ino = (uint64_t)ns.st_ino;
        bpfmsg_begin();
        int rc = 0;
        c->skel = capture_bpf__open_and_load();
        if (!c->skel) {
                rc = -errno;
                snprintf(err, errlen,
                         "cannot load the BPF program: %s%s%s (needs root, or "
                         "CAP_BPF and CAP_PERFMON, and Linux 5.7 or later)",
                         strerror(-rc), bpfmsg_sep(), bpfmsg_last());
                goto fail;
        }
        /* The generic tracepoint where there is one, x86's IPI vector before Linux 6.2. */
        c->link =
            bpf_program__attach_raw_tracepoint(c->skel->progs.capture_csd, "csd_function_entry");
        if (!c->link)
                c->link = bpf_program__attach_raw_tracepoint(c->skel->progs.capture_x86,
                                                             "call_function_single_entry");
        if (!c->link) {
                rc = -errno;
                snprintf(err, errlen,
                         "cannot attach the BPF program to an IPI tracepoint "
                         "(csd_function_entry, call_function_single_entry): %s",
                         strerror(-rc));
                goto fail;
        }
        c->req = map_block(c->skel->maps.request, &c->req_len);
        c->out = map_block(c->skel->maps.output, &c->out_len);
        if (!c->req || !c->out) {
                rc = -errno;
                snprintf(err, errlen, "cannot map the BPF arrays: %s", strerror(-rc));
                goto fail;
        }
        *out = c;
        return 0;
fail:
        capture_close(c);
        return rc < 0 ? rc : -EINVAL;
}

int capture_readv(struct capture *c, pid_t tid, int trigger_fd, const struct memsrc_iov *iov,
                  size_t n, int64_t *time_ns, uint64_t *failed)
{
        _Static_assert(CAPTURE_FAILED_WORDS * 64 == CAPTURE_MAX_IOV, "failed bitmap size");
        size_t total = 0;
        if (n > CAPTURE_MAX_IOV)
                return -E2BIG;
        for (size_t i = 0; i < n; i++) {
                if (iov[i].len > CAPTURE_MAX_LEN)
                        return -E2BIG;
                total += iov[i].len;
        }
        if (total > CAPTURE_BYTES - CAPTURE_MAX_LEN)
                return -E2BIG;
        struct capture_request *r = c->req;
        r->ns_dev = c->ns_dev;
        r->ns_ino = c->ns_ino;
        r->tid = (uint32_t)tid;
        r->n_iov = (uint32_t)n;
        for (size_t i = 0; i < n; i++)
                r->iov[i] = (struct capture_iov){.addr = iov[i].addr, .len = (uint32_t)iov[i].len};
        uint64_t seq = ++c->seq;
        __atomic_store_n(&r->seq, seq, __ATOMIC_RELEASE);
        /* Returns once the IPI to the thread's CPU has run, if the thread is on one. */
        uint64_t count;
        ssize_t got = read(trigger_fd, &count, sizeof(count));
        __atomic_store_n(&r->seq, 0, __ATOMIC_RELEASE);
        if (got != (ssize_t)sizeof(count))
                return got < 0 && errno != EINTR ? -errno : -EAGAIN;
        const struct capture_output *o = c->out;
        if (__atomic_load_n(&o->seq, __ATOMIC_ACQUIRE) != seq)
                return -EAGAIN;
        if (o->status < 0)
                return o->status;
        bool any_failed = false;
        for (size_t i = 0; i < CAPTURE_FAILED_WORDS; i++) {
                if (failed)
                        failed[i] = o->failed[i];
                any_failed |= o->failed[i] != 0;
        }
        if (any_failed && !failed)
                return -EFAULT;
        size_t off = 0;
        for (size_t i = 0; i < n; i++) {
                memcpy(iov[i].buf, o->data + off, iov[i].len);
                off += iov[i].len;
        }
        int64_t t = (int64_t)o->time_ns;
        PF_ACQUIRE_FENCE();
        if (__atomic_load_n(&o->seq, __ATOMIC_RELAXED) != seq)
                return -EAGAIN; /* overwritten while copied out (cannot happen for our IPI) */
        if (time_ns)
                *time_ns = t;
        return 0;
}

void capture_close(struct capture *c)
{
        if (!c)
                return;
        if (c->req)
                munmap(c->req, c->req_len);
        if (c->out)
                munmap(c->out, c->out_len);
        bpf_link__destroy(c->link);
        capture_bpf__destroy(c->skel);
        free(c);
}

#else /* !PYFLAME_HAVE_BPF */

int capture_open(struct capture **out, char *err, size_t errlen)
{
        (void)out;
        snprintf(err, errlen, "this pyflame-record was built without BPF support");
        return -ENOTSUP;
}

int capture_readv(struct capture *c, pid_t tid, int trigger_fd, const struct memsrc_iov *iov,
                  size_t n, int64_t *time_ns, uint64_t *failed)
{
        (void)c, (void)tid, (void)trigger_fd, (void)iov, (void)n, (void)time_ns, (void)failed;
        return -ENOTSUP;
}

void capture_close(struct capture *c)
{
        (void)c;
}

#endif
