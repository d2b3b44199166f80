/*
 * capture.bpf.c - read ranges of a thread's memory in that thread's own
 * context, so that nothing in them changes while they are read.
 *
 * The recorder reads a running thread's stack from another CPU: a read takes
 * a microsecond or two, and a thread that calls and returns every few tens of
 * nanoseconds changes its stack many times meanwhile. This program copies the
 * ranges instead while the thread itself is interrupted: it runs at the start
 * of every function-call IPI (the csd_function_entry tracepoint, or x86's
 * call_function_single_entry on kernels without it), and the recorder makes
 * the kernel send one to the CPU the thread runs on by reading the counter of
 * a perf event of that thread (perf_event_read() asks that CPU for it, and
 * waits). When the interrupted task is the requested thread, the ranges of
 * the pending request are copied (bpf_probe_read_user: the thread's own
 * memory, no page faults) into the output, stamped with the request's
 * sequence number last, so that the recorder can tell a finished copy from a
 * stale or torn one. Every other IPI costs one array lookup and a compare.
 *
 * Knows nothing of Python: the recorder's walker decides what to read.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "capture_shared.h"

/*
 * The copy is published by writing seq last. BPF has no fence instruction:
 * barrier() (bpf_helpers.h) keeps the compiler from reordering the stores,
 * and x86 keeps stores in order.
 */

char LICENSE[] SEC("license") = "GPL";

struct {
        __uint(type, BPF_MAP_TYPE_ARRAY);
        __uint(max_entries, 1);
        __uint(map_flags, BPF_F_MMAPABLE);
        __type(key, __u32);
        __type(value, struct capture_request);
} request SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_ARRAY);
        __uint(max_entries, 1);
        __uint(map_flags, BPF_F_MMAPABLE);
        __type(key, __u32);
        __type(value, struct capture_output);
} output SEC(".maps");

static __always_inline int capture(void)
{
        __u32 zero = 0;
        struct capture_request *r = bpf_map_lookup_elem(&request, &zero);
        struct capture_output *o = bpf_map_lookup_elem(&output, &zero);
        if (!r || !o)
                return 0;
        __u64 seq = r->seq;
        if (!seq || o->seq == seq)
                return 0; /* nothing pending, or done */
        struct bpf_pidns_info ns;
        if (bpf_get_ns_current_pid_tgid(r->ns_dev, r->ns_ino, &ns, sizeof(ns)) || ns.pid != r->tid)
                return 0; /* another task was interrupted */
        o->seq = 0;       /* being written */
        barrier();
        __u32 n = r->n_iov, off = 0, i;
        __s32 status = 0;
        for (i = 0; i < CAPTURE_MAX_IOV / 64; i++)
                o->failed[i] = 0;
        for (i = 0; i < CAPTURE_MAX_IOV; i++) {
                if (i >= n)
                        break;
                __u32 len = r->iov[i].len;
                if (len > CAPTURE_MAX_LEN || off > CAPTURE_BYTES - CAPTURE_MAX_LEN) {
                        status = -7; /* E2BIG */
                        break;
                }
                /* Unmapped, or not resident: zeros, and the recorder reads it itself. */
                if (bpf_probe_read_user(o->data + off, len, (const void *)r->iov[i].addr) < 0)
                        o->failed[(i / 64) & (CAPTURE_MAX_IOV / 64 - 1)] |= 1ull << (i % 64);
                off += len;
        }
        o->n_done = i;
        o->status = status;
        o->time_ns = bpf_ktime_get_ns();
        barrier();
        o->seq = seq;
        return 0;
}

SEC("raw_tp/csd_function_entry")
int capture_csd(void *ctx)
{
        return capture();
}

SEC("raw_tp/call_function_single_entry")
int capture_x86(void *ctx)
{
        return capture();
}
