/*
 * die.c - how a test program that is not a cmocka test fails (see
 * testutil.h): one line on stderr, named after the program, and exit 1.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

void tu_die(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "%s: ", program_invocation_short_name);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
        exit(1);
}

void tu_must(struct trace_writer *w, int rc, const char *what)
{
        if (rc < 0)
                tu_die("%s: %s (%s)", what, trace_status_str(rc), w ? trace_writer_errmsg(w) : "");
}
