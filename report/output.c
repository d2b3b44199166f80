/*
 * output.c - pyflame-report's output: the atomic commit of what a command
 * wrote (out.c, out.h) to stdout or a file, and tables printed in the three
 * formats.
 *
 * Buffering is what keeps a failure from looking like a result: a trace that
 * turns out damaged halfway through aggregation prints one error line and
 * nothing on stdout, and -o never leaves a partial file (it writes a
 * temporary file next to the target and renames it only when complete).
 */
#include "report.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Write all of [p, p+n) to fd. Returns 0 or -1 with errno set. */
static int write_all(int fd, const uint8_t *p, size_t n)
{
        while (n > 0) {
                ssize_t w = write(fd, p, n);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        return -1;
                }
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

char *out_temp_name(const char *path)
{
        const char *slash = strrchr(path, '/');
        size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
        const char *base = path + dir_len;
        size_t n = dir_len + 1 + strlen(base) + sizeof(".XXXXXX");
        char *t = malloc(n);
        if (t)
                snprintf(t, n, "%.*s.%s.XXXXXX", (int)dir_len, path, base);
        return t;
}

int out_trace_check(const char *output, bool force, char *const *inputs, size_t n)
{
        struct stat st;
        int rc;
        if (!force && lstat(output, &st) == 0)
                return report_fail(output, "exists; use -f/--force to replace it");
        for (size_t i = 0; i < n; i++)
                if ((rc = report_check_output(output, inputs[i])) != 0)
                        return rc;
        return 0;
}

int out_trace_temp(const char *output, const char *what, char **tmp)
{
        *tmp = out_temp_name(output);
        if (!*tmp)
                return report_fail(NULL, "out of memory");
        int fd = mkstemp(*tmp);
        if (fd < 0) {
                int e = errno;
                free(*tmp);
                *tmp = NULL;
                return report_fail(output, "cannot create the %s next to it: %s", what,
                                   strerror(e));
        }
        close(fd);
        return 0;
}

int out_trace_publish(const char *output, bool force, char *tmp, const char *what, bool ok)
{
        int rc = ok ? 0 : REPORT_EXIT_FAIL;
        if (ok && force && rename(tmp, output) < 0)
                rc = report_fail(output, "cannot write the %s: %s", what, strerror(errno));
        else if (ok && !force && link(tmp, output) < 0)
                rc = errno == EEXIST
                         ? report_fail(output, "exists; use -f/--force to replace it")
                         : report_fail(output, "cannot write the %s: %s", what, strerror(errno));
        unlink(tmp);
        free(tmp);
        return rc;
}

static int commit_file(struct out *o, const char *path)
{
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
                return report_fail(path, "is a directory; give -o a file name");
        char *tmp = out_temp_name(path);
        if (!tmp)
                return report_fail(path, "out of memory");
        int fd = mkstemp(tmp);
        if (fd < 0) {
                int e = errno;
                free(tmp);
                return report_fail(path, "cannot create the output next to it: %s", strerror(e));
        }
        /* mkstemp makes the file 0600; give it the mode a plain creat() would. */
        mode_t mask = umask(0);
        umask(mask);
        int rc = fchmod(fd, 0666 & ~mask) < 0 || write_all(fd, o->buf.data, o->buf.len) < 0 ||
                         fsync(fd) < 0
                     ? -1
                     : 0;
        int e = errno;
        if (close(fd) < 0 && rc == 0) {
                rc = -1;
                e = errno;
        }
        if (rc == 0 && rename(tmp, path) < 0) {
                rc = -1;
                e = errno;
        }
        if (rc < 0) {
                unlink(tmp);
                free(tmp);
                return report_fail(path, "cannot write the output: %s", strerror(e));
        }
        free(tmp);
        return 0;
}

int out_commit(struct out *o, const char *path)
{
        if (o->nomem)
                return report_fail(path, "out of memory while formatting the report");
        if (path)
                return commit_file(o, path);
        if (write_all(STDOUT_FILENO, o->buf.data, o->buf.len) < 0)
                return report_fail("stdout", "cannot write the output: %s", strerror(errno));
        return 0;
}

struct table_cell *table_add_row(struct table *t)
{
        if (t->n_rows == t->cap_rows) {
                size_t cap = t->cap_rows ? 2 * t->cap_rows : 64;
                struct table_cell *c = reallocarray(t->cells, cap * t->n_cols, sizeof(*c));
                if (!c) {
                        t->nomem = true;
                        return NULL;
                }
                t->cells = c;
                t->cap_rows = cap;
        }
        struct table_cell *row = t->cells + t->n_rows * t->n_cols;
        memset(row, 0, t->n_cols * sizeof(*row));
        t->n_rows++;
        return row;
}

const char *table_own(struct table *t, char *s)
{
        if (!s) {
                t->nomem = true;
                return NULL;
        }
        if (t->n_owned == t->cap_owned) {
                size_t cap = t->cap_owned ? 2 * t->cap_owned : 64;
                char **p = reallocarray(t->owned, cap, sizeof(*p));
                if (!p) {
                        free(s);
                        t->nomem = true;
                        return NULL;
                }
                t->owned = p;
                t->cap_owned = cap;
        }
        t->owned[t->n_owned++] = s;
        return s;
}

const char *table_printf(struct table *t, const char *fmt, ...)
{
        char *s = NULL;
        va_list ap;
        va_start(ap, fmt);
        int n = vasprintf(&s, fmt, ap);
        va_end(ap);
        return table_own(t, n < 0 ? NULL : s);
}

void table_free(struct table *t)
{
        for (size_t i = 0; i < t->n_owned; i++)
                free(t->owned[i]);
        free(t->owned);
        free(t->cells);
        t->owned = NULL;
        t->cells = NULL;
        t->n_owned = t->cap_owned = t->n_rows = t->cap_rows = 0;
}

/* Format a numeric cell into buf; returns buf. Text cells are returned as they are. */
static const char *cell_str(const struct table_column *col, const struct table_cell *c, char *buf,
                            size_t size)
{
        if (c->null)
                return col->kind == TABLE_TEXT ? "" : "-";
        switch (col->kind) {
        case TABLE_TEXT:
                return c->text ? c->text : "";
        case TABLE_COUNT:
                snprintf(buf, size, "%llu", (unsigned long long)c->num);
                return buf;
        case TABLE_INT:
                snprintf(buf, size, "%lld", (long long)c->num);
                return buf;
        case TABLE_DECIMAL:
                snprintf(buf, size, "%.2f", c->real);
                return buf;
        case TABLE_DECIMAL3:
                snprintf(buf, size, "%.3f", c->real);
                return buf;
        case TABLE_SECONDS:
                snprintf(buf, size, "%.3f", (double)c->num / 1e9);
                return buf;
        case TABLE_SIGNED:
                /* JSON numbers take no "+": the sign is added for text only. */
                snprintf(buf, size, "%.2f", c->real);
                return buf;
        case TABLE_PVALUE:
                snprintf(buf, size, "%.2g", c->real);
                return buf;
        case TABLE_BOOL:
                return c->num ? "true" : "false";
        }
        return "";
}

/* A cell as text tables show it: booleans as "yes" or nothing, changes with their sign. */
static const char *cell_text(const struct table_column *col, const struct table_cell *c, char *buf,
                             size_t size)
{
        if (col->kind == TABLE_BOOL && !c->null)
                return c->num ? "yes" : "";
        if (col->kind == TABLE_SIGNED && !c->null) {
                snprintf(buf, size, "%+.2f", c->real);
                return buf;
        }
        return cell_str(col, c, buf, size);
}

/* Width on screen of a UTF-8 string, counting code points (good enough for names). */
static size_t text_width(const char *s)
{
        size_t w = 0;
        for (; *s; s++)
                w += ((unsigned char)*s & 0xc0) != 0x80;
        return w;
}

static void write_padded(struct out *o, const char *s, size_t width, bool right)
{
        size_t w = text_width(s);
        if (right)
                for (size_t i = w; i < width; i++)
                        out_write(o, " ", 1);
        out_puts(o, s);
        if (!right)
                for (size_t i = w; i < width; i++)
                        out_write(o, " ", 1);
}

static void table_write_text(const struct table *t, struct out *o)
{
        size_t *width = calloc(t->n_cols, sizeof(*width));
        if (!width) {
                o->nomem = true;
                return;
        }
        char buf[64];
        for (size_t c = 0; c < t->n_cols; c++) {
                width[c] = text_width(t->cols[c].title);
                for (size_t r = 0; r < t->n_rows; r++) {
                        const char *s =
                            cell_text(&t->cols[c], &t->cells[r * t->n_cols + c], buf, sizeof(buf));
                        size_t w = text_width(s);
                        if (w > width[c])
                                width[c] = w;
                }
        }
        for (size_t r = 0; r <= t->n_rows; r++) {
                /* Trailing blank cells are not padded, so lines carry no trailing spaces. */
                size_t last = 0;
                for (size_t c = 0; c < t->n_cols; c++) {
                        if (t->cols[c].flags & TABLE_DATA_ONLY)
                                continue;
                        const char *s =
                            r == 0 ? t->cols[c].title
                                   : cell_text(&t->cols[c], &t->cells[(r - 1) * t->n_cols + c], buf,
                                               sizeof(buf));
                        if (*s)
                                last = c + 1;
                }
                for (unsigned i = 0; i < t->indent; i++)
                        out_write(o, " ", 1);
                bool first = true;
                for (size_t c = 0; c < last; c++) {
                        const struct table_column *col = &t->cols[c];
                        if (col->flags & TABLE_DATA_ONLY)
                                continue;
                        const char *s = r == 0 ? col->title
                                               : cell_text(col, &t->cells[(r - 1) * t->n_cols + c],
                                                           buf, sizeof(buf));
                        if (!first)
                                out_puts(o, "  ");
                        first = false;
                        bool right = col->kind != TABLE_TEXT || (col->flags & TABLE_RIGHT);
                        size_t w = c + 1 == last && !right ? 0 : width[c];
                        write_padded(o, s, w, right);
                }
                out_write(o, "\n", 1);
        }
        free(width);
}

static void table_write_csv(const struct table *t, struct out *o)
{
        char buf[64];
        for (size_t r = 0; r <= t->n_rows; r++) {
                bool first = true;
                for (size_t c = 0; c < t->n_cols; c++) {
                        const struct table_column *col = &t->cols[c];
                        if (col->flags & TABLE_TEXT_ONLY)
                                continue;
                        if (!first)
                                out_write(o, ",", 1);
                        first = false;
                        if (r == 0) {
                                out_csv_field(o, col->key);
                                continue;
                        }
                        const struct table_cell *cell = &t->cells[(r - 1) * t->n_cols + c];
                        out_csv_field(o, cell->null ? NULL : cell_str(col, cell, buf, sizeof(buf)));
                }
                out_write(o, "\n", 1);
        }
}

static void table_write_json(const struct table *t, struct out *o)
{
        char buf[64];
        out_write(o, "[", 1);
        for (size_t r = 0; r < t->n_rows; r++) {
                out_puts(o, r ? ",\n  {" : "\n  {");
                bool first = true;
                for (size_t c = 0; c < t->n_cols; c++) {
                        const struct table_column *col = &t->cols[c];
                        if (col->flags & TABLE_TEXT_ONLY)
                                continue;
                        if (!first)
                                out_write(o, ", ", 2);
                        first = false;
                        out_json_string(o, col->key);
                        out_write(o, ": ", 2);
                        const struct table_cell *cell = &t->cells[r * t->n_cols + c];
                        if (cell->null)
                                out_puts(o, "null");
                        else if (col->kind == TABLE_TEXT)
                                out_json_string(o, cell->text);
                        else
                                out_puts(o, cell_str(col, cell, buf, sizeof(buf)));
                }
                out_write(o, "}", 1);
        }
        out_puts(o, t->n_rows ? "\n]" : "]");
}

void table_write(const struct table *t, enum out_format f, struct out *o)
{
        if (t->nomem) {
                o->nomem = true;
                return;
        }
        switch (f) {
        case OUT_TEXT:
                table_write_text(t, o);
                break;
        case OUT_CSV:
                table_write_csv(t, o);
                break;
        case OUT_JSON:
                table_write_json(t, o);
                break;
        }
}
