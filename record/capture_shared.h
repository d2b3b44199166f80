/*
 * capture_shared.h - the request and output blocks shared by the recorder
 * (capture.c) and its BPF program (capture.bpf.c), both memory-mapped arrays
 * of one element. Included by both sides: only fixed-width kernel types.
 */
#ifndef PYFLAME_CAPTURE_SHARED_H
#define PYFLAME_CAPTURE_SHARED_H

#include <linux/types.h>

#define CAPTURE_MAX_IOV 256
#define CAPTURE_MAX_LEN (64u << 10) /* bytes of one range */
#define CAPTURE_BYTES   (1u << 20)  /* bytes of all ranges of one request */

struct capture_iov {
        __u64 addr;
        __u32 len;
        __u32 pad;
};

/* Written by the recorder, seq last; seq 0 means no request is pending. */
struct capture_request {
        __u64 seq;
        __u64 ns_dev, ns_ino; /* the recorder's PID namespace, in which tid is */
        __u32 tid;
        __u32 n_iov;
        struct capture_iov iov[CAPTURE_MAX_IOV];
};

/*
 * Written by the BPF program: seq 0 while it writes, the request's seq once
 * done. data holds the ranges back to back, the first n_done of them;
 * status 0, or a negative errno when they did not fit. A range that could
 * not be read there (not resident: the program cannot fault pages in) is
 * zeros in data and its bit is set in failed.
 */
struct capture_output {
        __u64 seq;
        __u64 time_ns; /* CLOCK_MONOTONIC of the copy */
        __s32 status;
        __u32 n_done;
        __u64 failed[CAPTURE_MAX_IOV / 64];
        __u8 data[CAPTURE_BYTES];
};

#endif
