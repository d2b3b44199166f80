/*
 * bpfwalk.c - the recorder's side of in-kernel sampling (bpfwalk.h): load
 * bpfwalk.bpf.c, arm a timer on every CPU, keep its maps of processes and
 * threads, and hand its events to the sampler.
 */
#include "bpfwalk.h"

#include <errno.h>
#include <stddef.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef PYFLAME_HAVE_BPF

#include <stdarg.h>
#include <stdlib.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bpfmsg.h"

#include "bpfwalk.skel.h"

struct bpfwalk {
        struct bpfwalk_bpf *skel;
        struct ring_buffer *rb;
        bpfwalk_event_fn fn; /* of the poll under way */
        bpfwalk_native_fn native_fn;
        void *ctx;
        int fn_rc;
        unsigned ncpus;
        struct bpfw_known_set *known; /* what map `known` holds, BPFW_KNOWN_SETS */
};

static int on_event(void *ctx, void *data, size_t size)
{
        struct bpfwalk *b = ctx;
        const struct bpfw_event *e = data;
        if (size >= BPFW_EVENT_HEAD && (e->flags & BPFW_F_NATIVE)) {
                const struct bpfw_native *nv = data;
                if (size < BPFW_NATIVE_HEAD || nv->len > BPFW_NATIVE_MAX ||
                    BPFW_NATIVE_HEAD + (size_t)nv->len > size || !b->native_fn)
                        return 0;
                int rc = b->native_fn(b->ctx, nv);
                if (rc < 0)
                        b->fn_rc = rc;
                return rc < 0 ? rc : 0;
        }
        if (size < BPFW_EVENT_HEAD || e->depth > BPFW_MAX_DEPTH ||
            BPFW_EVENT_HEAD + (size_t)e->depth * sizeof(struct bpfw_frame) > size)
                return 0; /* cannot happen: the program sends whole events */
        int rc = b->fn(b->ctx, e, size);
        if (rc < 0)
                b->fn_rc = rc;
        return rc < 0 ? rc : 0;
}

/*
 * Run the arming program on every CPU (our thread, pinned to each in turn:
 * also those outside the affinity we were started with, as by taskset,
 * since the programs we record may run there). A CPU we may not run on (a
 * cpuset) or that is offline keeps no timer.
 */
static unsigned arm_cpus(struct bpfwalk *b)
{
        cpu_set_t old;
        bool have_old = sched_getaffinity(0, sizeof(old), &old) == 0;
        for (unsigned cpu = 0; cpu < b->ncpus && cpu < CPU_SETSIZE; cpu++) {
                cpu_set_t one;
                CPU_ZERO(&one);
                CPU_SET(cpu, &one);
                if (sched_setaffinity(0, sizeof(one), &one) == 0)
                        (void)getppid(); /* a system call on that CPU: `arm` runs there */
        }
        if (have_old)
                sched_setaffinity(0, sizeof(old), &old);
        unsigned armed = 0;
        for (unsigned cpu = 0; cpu < b->ncpus; cpu++) {
                struct bpfw_cpu c;
                if (bpf_map_lookup_elem(bpf_map__fd(b->skel->maps.cpus), &cpu, &c) == 0 && c.armed)
                        armed++;
        }
        return armed;
}

int bpfwalk_open(double rate_hz, int64_t start_ns, uint32_t native_bytes, struct bpfwalk **out,
                 char *err, size_t errlen)
{
        _Static_assert(offsetof(struct bpfw_native, flags) == offsetof(struct bpfw_event, flags),
                       "a native capture's flags where an event's are");
        struct stat ns;
        if (stat("/proc/self/ns/pid", &ns) < 0) {
                snprintf(err, errlen, "cannot read our PID namespace: %s", strerror(errno));
                return -errno;
        }
        if (!(rate_hz > 0)) {
                snprintf(err, errlen, "bad sampling rate");
                return -EINVAL;
        }
        struct bpfwalk *b = calloc(1, sizeof(*b));
        if (!b) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        bpfmsg_begin();
        int rc = 0;
        int ncpus = libbpf_num_possible_cpus();
        b->ncpus = ncpus > 0 ? (unsigned)ncpus : 1;
        if (b->ncpus > BPFW_MAX_CPUS)
                b->ncpus = BPFW_MAX_CPUS;
        b->skel = bpfwalk_bpf__open();
        if (!b->skel) {
                rc = -errno;
                snprintf(err, errlen, "cannot open the BPF program: %s", strerror(-rc));
                goto fail;
        }
        b->skel->rodata->ns_dev = (uint64_t)ns.st_dev;
        b->skel->rodata->ns_ino = (uint64_t)ns.st_ino;
        b->skel->rodata->arm_tgid = (uint32_t)getpid();
        b->skel->rodata->period_ns = (uint64_t)(1e9 / rate_hz);
        b->skel->rodata->start_ns = start_ns > 0 ? (uint64_t)start_ns : 0;
        b->skel->rodata->native_bytes = native_bytes;
        bpf_map__set_max_entries(b->skel->maps.nscratch, native_bytes ? b->ncpus : 1);
        /*
         * Half a second of events at this rate on every CPU, ~1.5 KiB each
         * (30 frames), between 8 and 256 MiB: the recorder takes them every
         * 100 ms, or when the ring is a quarter full.
         */
        double want = (double)b->ncpus * rate_hz * (1536.0 + native_bytes) * 0.5;
        uint32_t ring = 8u << 20;
        while (ring < (256u << 20) && (double)ring < want)
                ring <<= 1;
        bpf_map__set_max_entries(b->skel->maps.events, ring);
        if ((rc = bpfwalk_bpf__load(b->skel)) < 0) {
                /* EPERM: not allowed; anything else (EACCES, EINVAL, E2BIG): the kernel refused it.
                 */
                snprintf(err, errlen, "cannot load the BPF sampler: %s%s%s (%s)", strerror(-rc),
                         bpfmsg_sep(), bpfmsg_last(),
                         rc == -EPERM ? "run as root, or grant CAP_BPF and CAP_PERFMON"
                                      : "the kernel refused it: Linux 5.17 or later with BTF "
                                        "(/sys/kernel/btf/vmlinux) is needed");
                goto fail;
        }
        b->rb = ring_buffer__new(bpf_map__fd(b->skel->maps.events), on_event, b, NULL);
        if (!b->rb) {
                rc = -errno;
                snprintf(err, errlen, "cannot map the BPF ring buffer: %s", strerror(-rc));
                goto fail;
        }
        struct bpf_link *arm = bpf_program__attach(b->skel->progs.arm);
        if (!arm) {
                rc = -errno;
                snprintf(err, errlen, "cannot attach the BPF sampler's timer setup: %s%s%s",
                         strerror(-rc), bpfmsg_sep(), bpfmsg_last());
                goto fail;
        }
        unsigned armed = arm_cpus(b);
        bpf_link__destroy(arm);
        if (!armed) {
                rc = -ENOTSUP;
                snprintf(err, errlen, "the BPF sampler's timers did not start on any CPU");
                goto fail;
        }
        *out = b;
        return 0;
fail:
        bpfwalk_close(b);
        return rc < 0 ? rc : -EINVAL;
}

int bpfwalk_set_proc(struct bpfwalk *b, pid_t pid, const struct bpfw_proc *p)
{
        uint32_t key = (uint32_t)pid;
        return bpf_map_update_elem(bpf_map__fd(b->skel->maps.procs), &key, p, BPF_ANY) < 0 ? -errno
                                                                                           : 0;
}

void bpfwalk_del_proc(struct bpfwalk *b, pid_t pid)
{
        uint32_t key = (uint32_t)pid;
        bpf_map_delete_elem(bpf_map__fd(b->skel->maps.procs), &key);
}

int bpfwalk_set_thread(struct bpfwalk *b, pid_t tid, uint64_t tstate, uint64_t thread_id)
{
        uint32_t key = (uint32_t)tid;
        struct bpfw_thread v = {.tstate = tstate, .thread_id = thread_id};
        return bpf_map_update_elem(bpf_map__fd(b->skel->maps.threads), &key, &v, BPF_ANY) < 0
                   ? -errno
                   : 0;
}

void bpfwalk_del_thread(struct bpfwalk *b, pid_t tid)
{
        uint32_t key = (uint32_t)tid;
        bpf_map_delete_elem(bpf_map__fd(b->skel->maps.threads), &key);
}

int bpfwalk_known(struct bpfwalk *b, uint64_t code, uint64_t ident, bool lasting)
{
        if (!b->known && !(b->known = calloc(BPFW_KNOWN_SETS, sizeof(*b->known))))
                return -ENOMEM;
        uint32_t key = bpfw_known_index(code);
        if (!(ident ? bpfw_known_put(&b->known[key], code, ident, lasting)
                    : bpfw_known_forget(&b->known[key], code)))
                return 0;
        return bpf_map_update_elem(bpf_map__fd(b->skel->maps.known), &key, &b->known[key],
                                   BPF_ANY) < 0
                   ? -errno
                   : 0;
}

int bpfwalk_wait(struct bpfwalk *b, int timeout_ms)
{
        struct pollfd p = {.fd = ring_buffer__epoll_fd(b->rb), .events = POLLIN};
        int n = poll(&p, 1, timeout_ms);
        return n < 0 ? -errno : n;
}

int bpfwalk_poll(struct bpfwalk *b, bpfwalk_event_fn fn, bpfwalk_native_fn native_fn, void *ctx)
{
        b->fn = fn;
        b->native_fn = native_fn;
        b->ctx = ctx;
        b->fn_rc = 0;
        int n = ring_buffer__consume(b->rb);
        if (b->fn_rc < 0)
                return b->fn_rc;
        return n < 0 ? n : n;
}

void bpfwalk_get_stats(const struct bpfwalk *b, struct bpfwalk_stats *st)
{
        memset(st, 0, sizeof(*st));
        st->cpus_possible = b->ncpus;
        st->pinned = true;
        for (unsigned cpu = 0; cpu < b->ncpus; cpu++) {
                struct bpfw_cpu c;
                if (bpf_map_lookup_elem(bpf_map__fd(b->skel->maps.cpus), &cpu, &c) < 0 || !c.armed)
                        continue;
                st->cpus++;
                st->fires += c.fires;
                st->samples += c.samples;
                st->late += c.late;
                st->lost += c.lost;
                st->not_python += c.not_python;
                st->wakeups += c.wakeups;
                st->run_ns += c.run_ns;
                st->sample_ns += c.sample_ns;
                if (!c.pin_flags)
                        st->pinned = false;
        }
}

void bpfwalk_close(struct bpfwalk *b)
{
        if (!b)
                return;
        if (b->skel && b->skel->bss)
                __atomic_store_n(&b->skel->bss->stopping, 1, __ATOMIC_RELEASE);
        ring_buffer__free(b->rb);
        bpfwalk_bpf__destroy(b->skel); /* freeing the maps cancels the timers */
        free(b->known);
        free(b);
}

#else /* !PYFLAME_HAVE_BPF */

#include <stdlib.h>

int bpfwalk_open(double rate_hz, int64_t start_ns, uint32_t native_bytes, struct bpfwalk **out,
                 char *err, size_t errlen)
{
        (void)rate_hz, (void)start_ns, (void)native_bytes, (void)out;
        snprintf(err, errlen, "this pyflame-record was built without BPF support");
        return -ENOTSUP;
}

int bpfwalk_set_proc(struct bpfwalk *b, pid_t pid, const struct bpfw_proc *p)
{
        (void)b, (void)pid, (void)p;
        return -ENOTSUP;
}

void bpfwalk_del_proc(struct bpfwalk *b, pid_t pid)
{
        (void)b, (void)pid;
}

int bpfwalk_set_thread(struct bpfwalk *b, pid_t tid, uint64_t tstate, uint64_t thread_id)
{
        (void)b, (void)tid, (void)tstate, (void)thread_id;
        return -ENOTSUP;
}

void bpfwalk_del_thread(struct bpfwalk *b, pid_t tid)
{
        (void)b, (void)tid;
}

int bpfwalk_known(struct bpfwalk *b, uint64_t code, uint64_t ident, bool lasting)
{
        (void)b, (void)code, (void)ident, (void)lasting;
        return -ENOTSUP;
}

int bpfwalk_wait(struct bpfwalk *b, int timeout_ms)
{
        (void)b, (void)timeout_ms;
        return -ENOTSUP;
}

int bpfwalk_poll(struct bpfwalk *b, bpfwalk_event_fn fn, bpfwalk_native_fn native_fn, void *ctx)
{
        (void)b, (void)fn, (void)native_fn, (void)ctx;
        return -ENOTSUP;
}

void bpfwalk_get_stats(const struct bpfwalk *b, struct bpfwalk_stats *st)
{
        (void)b;
        memset(st, 0, sizeof(*st));
}

void bpfwalk_close(struct bpfwalk *b)
{
        (void)b;
}

#endif
