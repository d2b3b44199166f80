/*
 * bpfmsg.h - libbpf's last complaint, kept for the one-line message of a
 * BPF program that did not load (capture.c, bpfwalk.c): libbpf prints its
 * reasons itself, which our users would see as noise, or never.
 */
#ifndef PYFLAME_BPFMSG_H
#define PYFLAME_BPFMSG_H

/* Forget the last message and keep libbpf's from now on (its warnings, not its debug output). */
void bpfmsg_begin(void);

/* The last line libbpf printed since bpfmsg_begin(), "" when none. */
const char *bpfmsg_last(void);

/* ": " when there is a last line, "": for "...%s%s" with bpfmsg_last(). */
const char *bpfmsg_sep(void);

#endif
