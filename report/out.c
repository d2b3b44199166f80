/*
 * out.c - the one writer (out.h): appending to the buffer, and the escapers
 * of JSON, XML and CSV. Nothing here prints a message or touches a file:
 * committing is output.c's.
 */
#include "out.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int out_format_parse(const char *s, enum out_format *f)
{
        if (!strcmp(s, "text"))
                *f = OUT_TEXT;
        else if (!strcmp(s, "csv"))
                *f = OUT_CSV;
        else if (!strcmp(s, "json"))
                *f = OUT_JSON;
        else
                return -1;
        return 0;
}

void out_write(struct out *o, const void *p, size_t n)
{
        if (!o->nomem && pf_buf_append(&o->buf, p, n) < 0)
                o->nomem = true;
}

void out_puts(struct out *o, const char *s)
{
        out_write(o, s, strlen(s));
}

void out_printf(struct out *o, const char *fmt, ...)
{
        char small[256];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(small, sizeof(small), fmt, ap);
        va_end(ap);
        if (n < 0) {
                o->nomem = true;
                return;
        }
        if ((size_t)n < sizeof(small)) {
                out_write(o, small, (size_t)n);
                return;
        }
        if (o->nomem || pf_buf_reserve(&o->buf, (size_t)n + 1) < 0) {
                o->nomem = true;
                return;
        }
        va_start(ap, fmt);
        vsnprintf((char *)o->buf.data + o->buf.len, (size_t)n + 1, fmt, ap);
        va_end(ap);
        o->buf.len += (size_t)n;
}

/*
 * The JSON escaper. `embedded` also escapes what would end a <script> in an
 * HTML page ("<") or a line in older JavaScript (U+2028, U+2029).
 */
static void json_string(struct out *o, const char *s, bool embedded)
{
        out_write(o, "\"", 1);
        const char *run = s, *p = s;
        while (*p) {
                uint32_t cp = 0;
                size_t n = pf_utf8_decode(p, &cp);
                bool special = embedded && (cp == '<' || cp == 0x2028 || cp == 0x2029);
                if (n && cp >= 0x20 && cp != '"' && cp != '\\' && !special) {
                        p += n;
                        continue;
                }
                out_write(o, run, (size_t)(p - run));
                if (!n) /* not UTF-8: the one rule (pfutil.h) */
                        out_puts(o, PF_UTF8_REPLACEMENT);
                else if (cp == '"')
                        out_puts(o, "\\\"");
                else if (cp == '\\')
                        out_puts(o, "\\\\");
                else if (cp == '\n')
                        out_puts(o, "\\n");
                else if (cp == '\t')
                        out_puts(o, "\\t");
                else
                        out_printf(o, "\\u%04x", (unsigned)cp);
                p += n ? n : 1;
                run = p;
        }
        out_puts(o, run);
        out_write(o, "\"", 1);
}

void out_json_string(struct out *o, const char *s)
{
        if (s)
                json_string(o, s, false);
        else
                out_puts(o, "null");
}

void out_json_embedded(struct out *o, const char *s)
{
        json_string(o, s ? s : "", true);
}

void out_xml_text(struct out *o, const char *s)
{
        const char *run = s ? s : "", *p = run;
        while (*p) {
                uint32_t cp = 0;
                size_t n = pf_utf8_decode(p, &cp);
                const char *esc = NULL;
                if (n == 0 || (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') ||
                    cp == 0xfffe || cp == 0xffff)
                        esc = PF_UTF8_REPLACEMENT;
                else if (cp == '&')
                        esc = "&amp;";
                else if (cp == '<')
                        esc = "&lt;";
                else if (cp == '>')
                        esc = "&gt;";
                else if (cp == '"')
                        esc = "&quot;";
                else if (cp == '\'')
                        esc = "&#39;";
                if (esc) {
                        out_write(o, run, (size_t)(p - run));
                        out_puts(o, esc);
                        p += n ? n : 1;
                        run = p;
                } else {
                        p += n;
                }
        }
        out_write(o, run, (size_t)(p - run));
}

void out_csv_field(struct out *o, const char *s)
{
        if (!s)
                return;
        if (!strpbrk(s, ",\"\r\n")) {
                out_puts(o, s);
                return;
        }
        out_write(o, "\"", 1);
        for (const char *p = s; *p; p++) {
                if (*p == '"')
                        out_write(o, "\"", 1);
                out_write(o, p, 1);
        }
        out_write(o, "\"", 1);
}

void out_free(struct out *o)
{
        pf_buf_free(&o->buf);
        o->nomem = false;
}
