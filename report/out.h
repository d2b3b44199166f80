/*
 * out.h - the one writer of pyflame-report: everything a command or an
 * exporter prints is appended to a struct out, with one escaper per syntax
 * (JSON, CSV, XML), and committed at once when it has all succeeded.
 */
#ifndef PYFLAME_OUT_H
#define PYFLAME_OUT_H

#include <stdbool.h>
#include <stddef.h>

#include "pfutil.h"

enum out_format { OUT_TEXT, OUT_CSV, OUT_JSON };

/* Parse "text", "csv" or "json". Returns 0, or -1 on anything else. */
int out_format_parse(const char *s, enum out_format *f);

/*
 * Everything a command prints, held in memory until out_commit(). Zero-
 * initialise. Appends never fail visibly: running out of memory sets `nomem`
 * and out_commit() then reports it instead of writing a partial result.
 */
struct out {
        struct pf_buf buf;
        bool nomem;
};

void out_write(struct out *o, const void *p, size_t n);
void out_puts(struct out *o, const char *s);
void out_printf(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * The escapers, one per syntax. Bytes that are not UTF-8 become U+FFFD in
 * every one of them (pfutil.h's rule), so what pyflame writes always parses.
 */
/* A JSON string literal for `s` (null when s is NULL), quotes included. */
void out_json_string(struct out *o, const char *s);
/*
 * The same, safe inside an HTML page's <script> and in JavaScript source
 * too ("<" and U+2028/U+2029 escaped as well); "" when s is NULL. For the
 * exporters.
 */
void out_json_embedded(struct out *o, const char *s);
/*
 * `s` escaped for XML/HTML text and attribute values (&, <, >, " and '),
 * characters XML forbids replaced by U+FFFD as well.
 */
void out_xml_text(struct out *o, const char *s);
/* One CSV field for `s` (quoted when needed, empty when s is NULL). */
void out_csv_field(struct out *o, const char *s);

/*
 * The temporary name to write `path`'s new content under before renaming it
 * into place: ".NAME.XXXXXX" in the same directory (a template for
 * mkstemp). malloc'ed; NULL when out of memory.
 */
char *out_temp_name(const char *path);

/*
 * A trace written whole or not at all (join, merge), in three steps. First
 * out_trace_check(): `output` may be written (it does not exist, unless
 * `force`) and is none of the n `inputs`. Then out_trace_temp(): a free
 * temporary name next to it in *tmp (the file made and closed, for the
 * writer to make again), `what` naming the trace in messages ("joined
 * trace"). Last out_trace_publish(): when `ok`, give *tmp the output's name
 * (replacing it only with `force`); either way remove and free *tmp. Each
 * returns 0, or prints one line and returns REPORT_EXIT_FAIL.
 */
int out_trace_check(const char *output, bool force, char *const *inputs, size_t n);
int out_trace_temp(const char *output, const char *what, char **tmp);
int out_trace_publish(const char *output, bool force, char *tmp, const char *what, bool ok);

/*
 * Write the buffered output to stdout (path NULL) or to `path`: there through
 * a temporary file in the same directory renamed over `path` only once fully
 * written, so a failure never leaves a partial file behind. Returns 0, or
 * prints one line naming the problem and returns REPORT_EXIT_FAIL.
 */
int out_commit(struct out *o, const char *path);
void out_free(struct out *o);

#endif
