/*
 * export.h - pyflame-report's exporters: the selected samples of a trace
 * written in formats people look at (an interactive SVG flame graph, a
 * self-contained HTML report) and formats other tools already read
 * (speedscope JSON, gzipped pprof profile.proto, Chrome Trace Event JSON).
 *
 * Exporters read the trace only through libtrace's public trace.h and write
 * to a stdio stream; they never print messages of their own. The caller
 * decides where the bytes go: it is expected to write to a temporary file
 * and rename it over the destination only when export_write() returns 0, so
 * a failure never leaves a partial file that looks complete.
 */
#ifndef PYFLAME_EXPORT_H
#define PYFLAME_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "out.h"
#include "trace.h"

struct export_options {
        const char *title; /* shown on svg/html, names the speedscope file; NULL: a default */
        bool icicle;       /* svg/html: draw the flame graph top-down (root at the top) */
        unsigned width;    /* svg/html: flame graph width in pixels; 0: 1200 */
};

/*
 * Write the samples selected by `filter` (NULL: all) in `format` ("svg",
 * "html", "speedscope", "pprof" or "chrome") to `out`. `opt` may be NULL for
 * the defaults. Returns 0, or a negative enum trace_status with a one-line
 * message in `err` (always NUL-terminated when errlen > 0): TRACE_ERR_ARG for
 * an unknown format, TRACE_ERR_IO when `out` cannot be written, TRACE_ERR_NOMEM,
 * or the status libtrace returned while reading a damaged trace. On failure
 * some bytes may already be in `out`: the caller must discard them.
 */
int export_write(struct trace_reader *r, const struct trace_filter *filter, const char *format,
                 const struct export_options *opt, FILE *out, char *err, size_t errlen);

/* The same, appended to `o` (out.h) instead of written to a stream; no I/O error then. */
int export_to(struct trace_reader *r, const struct trace_filter *filter, const char *format,
              const struct export_options *opt, struct out *o, char *err, size_t errlen);

/* Whether `format` names one of the formats export_write() knows. */
bool export_format_known(const char *format);

/* The known formats, comma-separated, for help texts and error messages. */
#define EXPORT_FORMATS "svg, html, speedscope, pprof, chrome"

#endif
