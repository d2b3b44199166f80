/*
 * bpfmsg.c - libbpf's last complaint (bpfmsg.h).
 */
#include "bpfmsg.h"

#ifdef PYFLAME_HAVE_BPF

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <bpf/libbpf.h>

static char last[256];

__attribute__((format(printf, 2, 0))) static int keep_last(enum libbpf_print_level level,
                                                           const char *fmt, va_list ap)
{
        if (level == LIBBPF_DEBUG)
                return 0;
        char line[256];
        vsnprintf(line, sizeof(line), fmt, ap);
        size_t n = strcspn(line, "\n");
        if (n) {
                line[n] = 0;
                snprintf(last, sizeof(last), "%s", line);
        }
        return 0;
}

void bpfmsg_begin(void)
{
        last[0] = 0;
        libbpf_set_print(keep_last);
}

#else

static char last[1];

void bpfmsg_begin(void)
{
}

#endif

const char *bpfmsg_last(void)
{
        return last;
}

const char *bpfmsg_sep(void)
{
        return last[0] ? ": " : "";
}
