/*
 * pystr.c - str and bytes objects from target memory to UTF-8 (see pystr.h).
 */
#include "pystr.h"

#include <errno.h>
#include <string.h>

static uint64_t rd64(const uint8_t *p)
{
        uint64_t v;
        memcpy(&v, p, sizeof(v));
        return v;
}

static uint32_t rd32(const uint8_t *p)
{
        uint32_t v;
        memcpy(&v, p, sizeof(v));
        return v;
}

/* Whether hdr[0, hdrlen) holds `width` bytes at `off`. */
static int have(int32_t off, size_t width, size_t hdrlen)
{
        return off >= 0 && (size_t)off + width <= hdrlen;
}

int pystr_shape(const struct pylayout *L, enum pystr_obj type, const uint8_t *hdr, size_t hdrlen,
                uint64_t max_len, struct pystr_shape *out)
{
        struct pystr_shape s = {.data_off = -1};
        if (type == PYSTR_BYTES || (type == PYSTR_STR && L->strings == PYL_STR_PY2)) {
                if (!have(L->bytes_size, 8, hdrlen))
                        return -ERANGE;
                int64_t n = (int64_t)rd64(hdr + L->bytes_size);
                if (n < 0 || (uint64_t)n > max_len)
                        return -EINVAL;
                s.kind = 0;
                s.length = (uint64_t)n;
                s.data_off = L->bytes_sval;
                *out = s;
                return 0;
        }
        if (type == PYSTR_UNICODE2) {
                if (L->strings != PYL_STR_PY2 || !have(L->str_length, 8, hdrlen) ||
                    !have(L->str_data, 8, hdrlen))
                        return L->strings != PYL_STR_PY2 ? -EINVAL : -ERANGE;
                int64_t n = (int64_t)rd64(hdr + L->str_length);
                uint64_t p = rd64(hdr + L->str_data);
                uint8_t w = L->py2_unicode_width;
                if (n < 0 || (uint64_t)n > max_len || !p || (w != 2 && w != 4))
                        return -EINVAL;
                s.kind = w;
                s.length = (uint64_t)n;
                s.data_ptr = p;
                *out = s;
                return 0;
        }
        if (type != PYSTR_STR)
                return -EINVAL;
        if (!have(L->str_length, 8, hdrlen) || !have(L->str_state, 4, hdrlen))
                return -ERANGE;
        int64_t n = (int64_t)rd64(hdr + L->str_length);
        uint32_t st = rd32(hdr + L->str_state);
        unsigned kind, compact, ascii, ready = 1;
        if (L->strings == PYL_STR_PEP393_BYTE0) {
                kind = st >> 8 & 7;
                compact = st >> 11 & 1;
                ascii = st >> 12 & 1;
        } else {
                kind = st >> 2 & 7;
                compact = st >> 5 & 1;
                ascii = st >> 6 & 1;
                /* Bit 7 is `ready` up to 3.11 (statically_allocated after): only legacy strings
                 * care. */
                if (L->minor <= 11)
                        ready = st >> 7 & 1;
        }
        if (n < 0 || (uint64_t)n > max_len || (kind != 1 && kind != 2 && kind != 4) ||
            (ascii && kind != 1))
                return -EINVAL;
        s.kind = (uint8_t)kind;
        s.length = (uint64_t)n;
        if (compact) {
                s.data_off = ascii ? L->str_ascii_size : L->str_compact_size;
        } else {
                if (!ready)
                        return -EINVAL;
                if (!have(L->str_data, 8, hdrlen))
                        return -ERANGE;
                s.data_ptr = rd64(hdr + L->str_data);
                if (!s.data_ptr && n > 0)
                        return -EINVAL;
        }
        *out = s;
        return 0;
}

static size_t put_utf8(char *o, uint32_t c)
{
        if (c >= 0xd800 && c <= 0xdfff)
                c = 0xfffd;
        if (c > 0x10ffff)
                c = 0xfffd;
        if (c < 0x80) {
                o[0] = (char)c;
                return 1;
        }
        if (c < 0x800) {
                o[0] = (char)(0xc0 | c >> 6);
                o[1] = (char)(0x80 | (c & 0x3f));
                return 2;
        }
        if (c < 0x10000) {
                o[0] = (char)(0xe0 | c >> 12);
                o[1] = (char)(0x80 | (c >> 6 & 0x3f));
                o[2] = (char)(0x80 | (c & 0x3f));
                return 3;
        }
        o[0] = (char)(0xf0 | c >> 18);
        o[1] = (char)(0x80 | (c >> 12 & 0x3f));
        o[2] = (char)(0x80 | (c >> 6 & 0x3f));
        o[3] = (char)(0x80 | (c & 0x3f));
        return 4;
}

/* Length of the valid UTF-8 sequence at p[0, n), or 0 when invalid. */
static size_t utf8_valid(const uint8_t *p, size_t n)
{
        uint8_t b = p[0];
        size_t len;
        uint32_t c;
        if (b < 0x80)
                return 1;
        if ((b & 0xe0) == 0xc0) {
                len = 2;
                c = b & 0x1f;
        } else if ((b & 0xf0) == 0xe0) {
                len = 3;
                c = b & 0x0f;
        } else if ((b & 0xf8) == 0xf0) {
                len = 4;
                c = b & 0x07;
        } else {
                return 0;
        }
        if (len > n)
                return 0;
        for (size_t i = 1; i < len; i++) {
                if ((p[i] & 0xc0) != 0x80)
                        return 0;
                c = c << 6 | (p[i] & 0x3f);
        }
        static const uint32_t min_for_len[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (c < min_for_len[len] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
                return 0;
        return len;
}

long pystr_utf8(const uint8_t *data, uint64_t length, uint8_t kind, char *out, size_t outcap)
{
        if (kind != 0 && kind != 1 && kind != 2 && kind != 4)
                return -EINVAL;
        if (outcap == 0 || length > (outcap - 1) / (kind == 0 ? 3 : 4))
                return -ENOSPC;
        size_t o = 0;
        if (kind == 0) {
                for (size_t i = 0; i < length;) {
                        size_t n = utf8_valid(data + i, (size_t)length - i);
                        if (n) {
                                memcpy(out + o, data + i, n);
                                o += n;
                                i += n;
                        } else {
                                o += put_utf8(out + o, 0xfffd);
                                i++;
                        }
                }
        } else {
                for (size_t i = 0; i < length; i++) {
                        uint32_t c;
                        if (kind == 1) {
                                c = data[i];
                        } else if (kind == 2) {
                                uint16_t u;
                                memcpy(&u, data + 2 * i, 2);
                                c = u;
                        } else {
                                memcpy(&c, data + 4 * i, 4);
                        }
                        o += put_utf8(out + o, c);
                }
        }
        out[o] = '\0';
        return (long)o;
}
