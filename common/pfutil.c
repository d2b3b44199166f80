/*
 * pfutil.c - the helpers of pfutil.h: byte buffers, hashing, varints,
 * duration and rate parsing, clocks.
 */
#include "pfutil.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

int pf_buf_reserve(struct pf_buf *b, size_t extra)
{
        if (b->cap - b->len >= extra)
                return 0;
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < extra) {
                if (cap > SIZE_MAX / 2)
                        return -1;
                cap *= 2;
        }
        uint8_t *p = realloc(b->data, cap);
        if (!p)
                return -1;
        b->data = p;
        b->cap = cap;
        return 0;
}

int pf_buf_append(struct pf_buf *b, const void *p, size_t n)
{
        if (pf_buf_reserve(b, n) < 0)
                return -1;
        if (n)
                memcpy(b->data + b->len, p, n);
        b->len += n;
        return 0;
}

size_t pf_utf8_decode(const char *str, uint32_t *cp)
{
        const unsigned char *s = (const unsigned char *)str;
        unsigned char c = s[0];
        if (c < 0x80) {
                *cp = c;
                return 1;
        }
        size_t n;
        uint32_t v, min;
        if ((c & 0xe0) == 0xc0) {
                n = 2, v = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
                n = 3, v = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
                n = 4, v = c & 0x07, min = 0x10000;
        } else {
                return 0;
        }
        /* A short sequence stops at a byte that is not a continuation (the NUL at the end). */
        for (size_t i = 1; i < n; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                v = (v << 6) | (s[i] & 0x3f);
        }
        if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
                return 0;
        *cp = v;
        return n;
}

int pf_buf_append_utf8(struct pf_buf *b, const char *s, size_t n)
{
        size_t i = 0;
        while (i < n) {
                /* Decode from a bounded copy: s need not end at n. */
                char seq[5] = {0};
                size_t avail = n - i < 4 ? n - i : 4;
                memcpy(seq, s + i, avail);
                uint32_t cp;
                size_t len = seq[0] ? pf_utf8_decode(seq, &cp) : 0;
                int rc =
                    len ? pf_buf_append(b, s + i, len) : pf_buf_append(b, PF_UTF8_REPLACEMENT, 3);
                if (rc < 0)
                        return -1;
                i += len ? len : 1;
        }
        return 0;
}

void pf_buf_free(struct pf_buf *b)
{
        free(b->data);
        b->data = NULL;
        b->len = b->cap = 0;
}

static uint64_t avalanche(uint64_t h)
{
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 33;
        h *= 0xc4ceb9fe1a85ec53ULL;
        h ^= h >> 33;
        return h;
}

uint64_t pf_hash_bytes(const void *p, size_t n, uint64_t seed)
{
        const uint8_t *s = p;
        uint64_t h = 0xcbf29ce484222325ULL ^ seed;
        for (size_t i = 0; i < n; i++) {
                h ^= s[i];
                h *= 0x100000001b3ULL;
        }
        return avalanche(h ^ n);
}

uint64_t pf_hash_u64(uint64_t h, uint64_t v)
{
        return avalanche(h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)));
}

size_t pf_varint_put(uint8_t *p, uint64_t v)
{
        size_t n = 0;
        while (v >= 0x80) {
                p[n++] = (uint8_t)(v | 0x80);
                v >>= 7;
        }
        p[n++] = (uint8_t)v;
        return n;
}

size_t pf_varint_get(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
        uint64_t r = 0;
        for (size_t i = 0; i < 10 && p + i < end; i++) {
                uint8_t b = p[i];
                if (i == 9 && b > 1)
                        return 0;
                r |= (uint64_t)(b & 0x7f) << (7 * i);
                if (!(b & 0x80)) {
                        *v = r;
                        return i + 1;
                }
        }
        return 0;
}

int pf_parse_duration(const char *s, int64_t *ns, bool *percent)
{
        if (!s || !*s)
                return -1;
        errno = 0;
        char *end;
        double v = strtod(s, &end);
        if (errno || end == s || !isfinite(v) || v < 0)
                return -1;
        while (*end == ' ')
                end++;
        double mult;
        bool pct = false;
        if (!*end || !strcasecmp(end, "s") || !strcasecmp(end, "sec"))
                mult = 1e9;
        else if (!strcasecmp(end, "ms"))
                mult = 1e6;
        else if (!strcasecmp(end, "us"))
                mult = 1e3;
        else if (!strcasecmp(end, "ns"))
                mult = 1;
        else if (!strcasecmp(end, "m") || !strcasecmp(end, "min"))
                mult = 60e9;
        else if (!strcasecmp(end, "h"))
                mult = 3600e9;
        else if (!strcmp(end, "%") && percent) {
                if (v > 100)
                        return -1;
                mult = 1e7; /* 100% -> 1e9 */
                pct = true;
        } else
                return -1;
        double r = v * mult;
        if (r > 9.2e18)
                return -1;
        *ns = (int64_t)llround(r);
        if (percent)
                *percent = pct;
        return 0;
}

/* Exactly `n` decimal digits at *p, moved past; -1 when not. */
static int take_digits(const char **p, int n)
{
        int v = 0;
        for (int i = 0; i < n; i++) {
                if (!isdigit((unsigned char)(*p)[i]))
                        return -1;
                v = v * 10 + ((*p)[i] - '0');
        }
        *p += n;
        return v;
}

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar (H. Hinnant's). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
        y -= m <= 2;
        int64_t era = (y >= 0 ? y : y - 399) / 400;
        unsigned yoe = (unsigned)(y - era * 400);
        unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
        unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        return era * 146097 + (int64_t)doe - 719468;
}

static int days_in_month(int y, int m)
{
        static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        return m == 2 && leap ? 29 : days[m - 1];
}

int pf_parse_wall_time(const char *s, int64_t *ns, bool *relative)
{
        if (!s || !*s)
                return -1;
        if (s[0] == '-') {
                int64_t d;
                if (pf_parse_duration(s + 1, &d, NULL) < 0)
                        return -1;
                *ns = -d;
                *relative = true;
                return 0;
        }
        const char *p = s;
        int y = take_digits(&p, 4);
        int mo = *p == '-' ? (p++, take_digits(&p, 2)) : -1;
        int d = *p == '-' ? (p++, take_digits(&p, 2)) : -1;
        if (y < 1970 || y > 2262 || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo))
                return -1;
        int64_t secs = days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400;
        int64_t frac = 0;
        if (*p == 'T' || *p == 't' || *p == ' ') {
                p++;
                int h = take_digits(&p, 2);
                int mi = *p == ':' ? (p++, take_digits(&p, 2)) : -1;
                int sec = 0;
                if (*p == ':' && (p++, sec = take_digits(&p, 2)) < 0)
                        return -1;
                if (h < 0 || h > 23 || mi < 0 || mi > 59 || sec > 60)
                        return -1;
                if (*p == '.' || *p == ',') {
                        p++;
                        int64_t scale = 100000000;
                        if (!isdigit((unsigned char)*p))
                                return -1;
                        for (; isdigit((unsigned char)*p); p++, scale /= 10)
                                frac += scale * (*p - '0');
                }
                secs += h * 3600 + mi * 60 + sec;
                /* The zone: required with a time of day. */
                if (*p == 'Z' || *p == 'z') {
                        p++;
                } else if (*p == '+' || *p == '-') {
                        int sign = *p++ == '-' ? -1 : 1;
                        int oh = take_digits(&p, 2), om = 0;
                        if (*p == ':')
                                p++;
                        if (isdigit((unsigned char)*p))
                                om = take_digits(&p, 2);
                        if (oh < 0 || oh > 23 || om < 0 || om > 59)
                                return -1;
                        secs -= sign * (oh * 3600 + om * 60);
                } else {
                        return -1;
                }
        }
        if (*p)
                return -1;
        *ns = secs * 1000000000 + frac;
        *relative = false;
        return 0;
}

int pf_parse_rate(const char *s, double *hz)
{
        if (!s || !*s)
                return -1;
        errno = 0;
        char *end;
        double v = strtod(s, &end);
        if (errno || end == s || !isfinite(v) || v <= 0)
                return -1;
        double mult = 1;
        if (!strcasecmp(end, "") || !strcasecmp(end, "hz"))
                mult = 1;
        else if (!strcasecmp(end, "k") || !strcasecmp(end, "khz"))
                mult = 1e3;
        else
                return -1;
        *hz = v * mult;
        return 0;
}

int pf_parse_size(const char *s, uint64_t *bytes)
{
        if (!s || !*s || *s == '-' || *s == '+')
                return -1;
        errno = 0;
        char *end;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || end == s)
                return -1;
        static const struct {
                const char *suffix;
                unsigned shift;
        } units[] = {
            {"", 0},    {"b", 0},    {"k", 10}, {"kb", 10}, {"kib", 10}, {"m", 20},
            {"mb", 20}, {"mib", 20}, {"g", 30}, {"gb", 30}, {"gib", 30},
        };
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
                if (strcasecmp(end, units[i].suffix))
                        continue;
                if (v > (UINT64_MAX >> units[i].shift))
                        return -1;
                *bytes = (uint64_t)v << units[i].shift;
                return 0;
        }
        return -1;
}

static int64_t clock_ns(clockid_t id)
{
        struct timespec ts;
        clock_gettime(id, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t pf_now_mono_ns(void)
{
        return clock_ns(CLOCK_MONOTONIC);
}

int64_t pf_now_wall_ns(void)
{
        return clock_ns(CLOCK_REALTIME);
}
