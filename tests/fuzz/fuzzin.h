/*
 * fuzzin.h - what the structure-aware fuzz targets share: a check that
 * aborts with a message (a finding libFuzzer keeps), and an input read as a
 * stream of little-endian numbers, zeros once it runs out.
 */
#ifndef PYFLAME_TEST_FUZZIN_H
#define PYFLAME_TEST_FUZZIN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The fuzz target's name, for its messages (each target defines it). */
extern const char fuzz_name[];

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "%s: ", fuzz_name);
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
        abort();
}

#define CHECK(cond, ...)                                                                           \
        do {                                                                                       \
                if (!(cond))                                                                       \
                        die(__VA_ARGS__);                                                          \
        } while (0)

struct in {
        const uint8_t *p;
        size_t n;
};

static inline uint8_t get8(struct in *in)
{
        if (!in->n)
                return 0;
        in->n--;
        return *in->p++;
}

static inline uint64_t take(struct in *in, size_t bytes)
{
        uint64_t v = 0;
        for (size_t i = 0; i < bytes; i++)
                v |= (uint64_t)get8(in) << (8 * i);
        return v;
}

static inline uint16_t get16(struct in *in)
{
        return (uint16_t)take(in, 2);
}

static inline uint32_t get32(struct in *in)
{
        return (uint32_t)take(in, 4);
}

static inline uint64_t get64(struct in *in)
{
        return take(in, 8);
}

#endif
