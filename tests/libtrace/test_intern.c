/*
 * test_intern.c - the writer's interning and the pieces under it: the idmap
 * hash index, frame and string interning (same input, same id; different
 * input, different id), the stack prefix tree, and the chunk encoder and
 * decoder of chunk.h, including every truncation and random damage of a
 * blob.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chunk.h"
#include "idmap.h"
#include "testutil.h"
#include "trace.h"
#include "trace_internal.h"

/* ------------------------------------------------------------------ */
/* idmap                                                               */
/* ------------------------------------------------------------------ */

static uint64_t keys[20001];

static bool key_eq(const void *key, uint32_t id)
{
        return keys[id] == *(const uint64_t *)key;
}

static void test_idmap(void **state)
{
        struct idmap m = {0};
        uint64_t k = 5;
        assert_int_equal(idmap_find(&m, 1, key_eq, &k), 0);
        for (uint32_t id = 1; id <= 20000; id++) {
                keys[id] = (uint64_t)id * 7919;
                /* A weak hash on purpose: many collisions, and equal hashes. */
                assert_int_equal(idmap_insert(&m, keys[id] % 1000, id), 0);
        }
        for (uint32_t id = 1; id <= 20000; id++)
                assert_int_equal(idmap_find(&m, keys[id] % 1000, key_eq, &keys[id]), id);
        k = 7919ULL * 20001;
        assert_int_equal(idmap_find(&m, k % 1000, key_eq, &k), 0);
        assert_int_equal(m.count, 20000);
        idmap_free(&m);
        assert_null(m.slots);
}

/*
 * Removal: every other id goes, with hashes that collide and wrap around
 * the end of the table, then comes back; what is left is found, what went
 * is not, and nothing else is lost.
 */
static void test_idmap_remove(void **state)
{
        (void)state;
        struct idmap m = {0};
        for (uint32_t id = 1; id <= 20000; id++) {
                keys[id] = (uint64_t)id * 7919;
                assert_int_equal(idmap_insert(&m, keys[id] % 1000 + (id % 3 ? 0 : m.mask), id), 0);
        }
        /* The hash each id was stored under (the mask grew while inserting). */
        static uint64_t hash[20001];
        for (uint32_t id = 1; id <= 20000; id++)
                hash[id] = 0;
        for (size_t i = 0; i <= m.mask; i++)
                if (m.slots[i].id)
                        hash[m.slots[i].id] = m.slots[i].hash;
        uint32_t seed = 1;
        for (int round = 0; round < 3; round++) {
                for (uint32_t id = 1; id <= 20000; id++) {
                        seed = seed * 1103515245u + 12345u;
                        if ((seed >> 16) & 1)
                                idmap_remove(&m, hash[id], id);
                }
                uint32_t left = 0;
                for (uint32_t id = 1; id <= 20000; id++) {
                        uint32_t got = idmap_find(&m, hash[id], key_eq, &keys[id]);
                        assert_true(got == 0 || got == id);
                        left += got == id;
                }
                assert_int_equal(left, m.count);
                for (uint32_t id = 1; id <= 20000; id++)
                        if (!idmap_find(&m, hash[id], key_eq, &keys[id]))
                                assert_int_equal(idmap_insert(&m, hash[id], id), 0);
                assert_int_equal(m.count, 20000);
                for (uint32_t id = 1; id <= 20000; id++)
                        assert_int_equal(idmap_find(&m, hash[id], key_eq, &keys[id]), id);
        }
        idmap_remove(&m, 12345, 99999); /* absent: nothing */
        assert_int_equal(m.count, 20000);
        idmap_free(&m);
}

/* ------------------------------------------------------------------ */
/* Interning through the writer                                        */
/* ------------------------------------------------------------------ */

struct wfix {
        char *dir, *path;
        struct trace_writer *w;
};

static int wsetup(void **state)
{
        struct wfix *f = calloc(1, sizeof(*f));
        f->dir = tu_mkdtemp();
        f->path = tu_path(f->dir, "intern.pyflame");
        assert_int_equal(trace_writer_create(f->path, 0, &f->w), 0);
        *state = f;
        return 0;
}

static int wteardown(void **state)
{
        struct wfix *f = *state;
        trace_writer_free(f->w);
        free(f->path);
        tu_rmdir(f->dir);
        free(f);
        return 0;
}

static uint32_t frame(struct trace_writer *w, const char *fn, const char *qn, const char *file,
                      int line, int first, enum trace_frame_kind kind)
{
        struct trace_frame_desc d = {fn, qn, file, line, first, kind};
        uint32_t id = 0;
        assert_int_equal(trace_writer_intern_frame(w, &d, &id), 0);
        assert_true(id >= 1);
        return id;
}

static void test_frame_interning(void **state)
{
        struct wfix *f = *state;
        struct trace_writer *w = f->w;
        uint32_t a = frame(w, "run", "Worker.run", "w.py", 10, 5, TRACE_FRAME_PYTHON);
        assert_int_equal(a, 1); /* dense from 1 */
        /* Same description, also from different buffers: same id. */
        char fn[] = "run", qn[] = "Worker.run", file[] = "w.py";
        assert_int_equal(frame(w, fn, qn, file, 10, 5, TRACE_FRAME_PYTHON), a);
        /* Any difference: a new id. (Assigned one by one: initialisers are unsequenced.) */
        uint32_t ids[12];
        ids[0] = a;
        ids[1] = frame(w, "run", "Worker.run", "w.py", 11, 5, TRACE_FRAME_PYTHON);
        ids[2] = frame(w, "run", "Worker.run", "w.py", 10, 6, TRACE_FRAME_PYTHON);
        ids[3] = frame(w, "run", "Other.run", "w.py", 10, 5, TRACE_FRAME_PYTHON);
        ids[4] = frame(w, "run", NULL, "w.py", 10, 5, TRACE_FRAME_PYTHON);
        ids[5] = frame(w, "run", "", "w.py", 10, 5, TRACE_FRAME_PYTHON);
        ids[6] = frame(w, "run", "Worker.run", "x.py", 10, 5, TRACE_FRAME_PYTHON);
        ids[7] = frame(w, "walk", "Worker.run", "w.py", 10, 5, TRACE_FRAME_PYTHON);
        ids[8] = frame(w, "run", "Worker.run", "w.py", 10, 5, TRACE_FRAME_NATIVE);
        ids[9] = frame(w, "run", "Worker.run", "w.py", -1, 5, TRACE_FRAME_PYTHON);
        /* Strings that share a prefix, or swap roles, are different. */
        ids[10] = frame(w, "ru", "Worker.run", "w.py", 10, 5, TRACE_FRAME_PYTHON);
        ids[11] = frame(w, "w.py", "run", "Worker.run", 10, 5, TRACE_FRAME_PYTHON);
        size_t n = sizeof(ids) / sizeof(ids[0]);
        for (size_t i = 0; i < n; i++) {
                assert_int_equal(ids[i], i + 1); /* each new, dense */
                for (size_t j = 0; j < i; j++)
                        assert_int_not_equal(ids[i], ids[j]);
        }
        /* Negative lines are all "unknown". */
        assert_int_equal(frame(w, "run", "Worker.run", "w.py", -7, 5, TRACE_FRAME_PYTHON), ids[9]);
        /* Many frames: ids stay stable while the tables grow. */
        char name[32];
        uint32_t first_big = 0;
        for (int i = 0; i < 5000; i++) {
                snprintf(name, sizeof(name), "f%d", i);
                uint32_t id = frame(w, name, NULL, "big.py", i, 1, TRACE_FRAME_PYTHON);
                if (i == 0)
                        first_big = id;
                assert_int_equal(id, first_big + (uint32_t)i);
        }
        for (int i = 0; i < 5000; i += 97) {
                snprintf(name, sizeof(name), "f%d", i);
                assert_int_equal(frame(w, name, NULL, "big.py", i, 1, TRACE_FRAME_PYTHON),
                                 first_big + (uint32_t)i);
        }
        assert_int_equal(frame(w, "run", "Worker.run", "w.py", 10, 5, TRACE_FRAME_PYTHON), a);

        assert_int_equal(trace_writer_finalize(w), 0);
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(f->path, &r), 0);
        assert_int_equal(trace_reader_frame_count(r), n + 5000);
        struct trace_frame fr;
        assert_int_equal(trace_reader_frame(r, ids[4], &fr), 0);
        assert_null(fr.qualname);
        assert_int_equal(trace_reader_frame(r, ids[5], &fr), 0);
        assert_string_equal(fr.qualname, "");
        assert_int_equal(trace_reader_frame(r, ids[11], &fr), 0);
        assert_string_equal(fr.function, "w.py");
        assert_string_equal(fr.file, "Worker.run");
        assert_int_equal(trace_reader_frame(r, first_big + 4321, &fr), 0);
        assert_string_equal(fr.function, "f4321");
        assert_int_equal(fr.line, 4321);
        trace_reader_close(r);
}

static void test_string_table(void **state)
{
        struct wfix *f = *state;
        /* The empty string is a string like any other, even as the very first. */
        uint32_t empty = frame(f->w, "", NULL, "", -1, -1, TRACE_FRAME_SPECIAL);
        /* Two frames sharing all three strings add exactly three strings. */
        frame(f->w, "alpha", "A.alpha", "a.py", 1, 1, TRACE_FRAME_PYTHON);
        frame(f->w, "alpha", "A.alpha", "a.py", 2, 1, TRACE_FRAME_PYTHON);
        frame(f->w, "a.py", NULL, "alpha", 2, 1, TRACE_FRAME_PYTHON);
        assert_int_equal(trace_writer_finalize(f->w), 0);
        /* The reader's frames all point at the same three strings. */
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(f->path, &r), 0);
        struct trace_frame a, b, c, e;
        assert_int_equal(trace_reader_frame(r, empty, &e), 0);
        assert_string_equal(e.function, "");
        assert_ptr_equal(e.function, e.file);
        assert_int_equal(trace_reader_frame(r, 2, &a), 0);
        assert_int_equal(trace_reader_frame(r, 3, &b), 0);
        assert_int_equal(trace_reader_frame(r, 4, &c), 0);
        /* Interned strings come back as the same storage. */
        assert_ptr_equal(a.function, b.function);
        assert_ptr_equal(a.file, b.file);
        assert_ptr_equal(a.function, c.file);
        assert_ptr_equal(a.file, c.function);
        trace_reader_close(r);
}

static void test_stack_tree(void **state)
{
        struct wfix *f = *state;
        struct trace_writer *w = f->w;
        uint32_t fa = frame(w, "a", NULL, "t.py", 1, 1, TRACE_FRAME_PYTHON);
        uint32_t fb = frame(w, "b", NULL, "t.py", 2, 2, TRACE_FRAME_PYTHON);
        uint32_t fc = frame(w, "c", NULL, "t.py", 3, 3, TRACE_FRAME_PYTHON);
        uint32_t a, ab, abc, ac, b, abc2, s;
        assert_int_equal(trace_writer_intern_stack(w, TRACE_STACK_EMPTY, fa, &a), 0);
        assert_int_equal(a, 1);
        assert_int_equal(trace_writer_intern_stack(w, a, fb, &ab), 0);
        assert_int_equal(trace_writer_intern_stack(w, ab, fc, &abc), 0);
        assert_int_equal(trace_writer_intern_stack(w, a, fc, &ac), 0);
        assert_int_equal(trace_writer_intern_stack(w, TRACE_STACK_EMPTY, fb, &b), 0);
        /* The same (parent, frame) again: the same node. */
        assert_int_equal(trace_writer_intern_stack(w, ab, fc, &abc2), 0);
        assert_int_equal(abc2, abc);
        uint32_t all[] = {a, ab, abc, ac, b};
        for (int i = 0; i < 5; i++)
                for (int j = 0; j < i; j++)
                        assert_int_not_equal(all[i], all[j]);
        /* Whole stacks, root first, land on the same nodes. */
        uint32_t path_abc[] = {fa, fb, fc}, path_ac[] = {fa, fc}, path_ba[] = {fb, fa};
        assert_int_equal(trace_writer_intern_stack_frames(w, path_abc, 3, &s), 0);
        assert_int_equal(s, abc);
        assert_int_equal(trace_writer_intern_stack_frames(w, path_ac, 2, &s), 0);
        assert_int_equal(s, ac);
        assert_int_equal(trace_writer_intern_stack_frames(w, NULL, 0, &s), 0);
        assert_int_equal(s, TRACE_STACK_EMPTY);
        uint32_t ba;
        assert_int_equal(trace_writer_intern_stack_frames(w, path_ba, 2, &ba), 0);
        assert_int_not_equal(ba, ab);
        /* A deep recursive stack: the same frame 1000 times. */
        uint32_t deep[1000];
        for (int i = 0; i < 1000; i++)
                deep[i] = fa;
        uint32_t d1000;
        assert_int_equal(trace_writer_intern_stack_frames(w, deep, 1000, &d1000), 0);

        assert_int_equal(trace_writer_finalize(w), 0);
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(f->path, &r), 0);
        uint32_t parent, top, frames[1000];
        assert_int_equal(trace_reader_stack_node(r, abc, &parent, &top), 0);
        assert_int_equal(parent, ab);
        assert_int_equal(top, fc);
        assert_int_equal(trace_reader_stack_node(r, b, &parent, &top), 0);
        assert_int_equal(parent, TRACE_STACK_EMPTY);
        assert_int_equal(top, fb);
        assert_int_equal(trace_reader_stack_frames(r, ba, frames, 1000), 2);
        assert_int_equal(frames[0], fb);
        assert_int_equal(frames[1], fa);
        assert_int_equal(trace_reader_stack_depth(r, d1000), 1000);
        assert_int_equal(trace_reader_stack_frames(r, d1000, frames, 1000), 1000);
        assert_int_equal(frames[999], fa);
        /* 0, a, ab, abc, ac, b, ba, and 999 new deep nodes past a. */
        assert_int_equal(trace_reader_stack_count(r), 7 + 999);
        trace_reader_close(r);
}

/* ------------------------------------------------------------------ */
/* Chunk encoding                                                      */
/* ------------------------------------------------------------------ */

struct rec {
        int64_t t;
        uint32_t stack;
        unsigned state;
};

static void encode(const struct rec *recs, size_t n, struct pf_buf *b, struct chunk_encoder *e)
{
        memset(e, 0, sizeof(*e));
        for (size_t i = 0; i < n; i++) {
                assert_int_equal(pf_buf_reserve(b, CHUNK_RECORD_MAX), 0);
                chunk_encode(e, b, recs[i].t, recs[i].stack, recs[i].state);
        }
}

/* Decode a whole blob; returns the number of records or a negative status. */
static int decode(const uint8_t *p, size_t len, const struct chunk_encoder *e, uint32_t n_stacks,
                  struct rec *out, size_t cap)
{
        struct chunk_cursor c;
        const char *why = NULL;
        int rc = chunk_cursor_init(&c, p, len, e->first_ns, e->last_ns, e->count, n_stacks, &why);
        if (rc < 0) {
                assert_non_null(why);
                return rc;
        }
        size_t n = 0;
        while ((rc = chunk_cursor_next(&c, &why)) == 1) {
                assert_true(n < cap);
                out[n++] = (struct rec){c.t_ns, c.stack, c.state};
        }
        if (rc < 0) {
                assert_non_null(why);
                return rc;
        }
        return (int)n;
}

static void test_chunk_example(void **state)
{
        /* The example in schema/trace.sql, byte for byte. */
        struct rec recs[] = {{0, 5, 3}, {10000000, 5, 3}};
        struct pf_buf b = {0};
        struct chunk_encoder e;
        encode(recs, 2, &b, &e);
        static const uint8_t expect[] = {0x00, 0x2b, 0x81, 0xda, 0xc4, 0x09};
        assert_int_equal(b.len, sizeof(expect));
        assert_memory_equal(b.data, expect, sizeof(expect));
        pf_buf_free(&b);
}

static void test_chunk_roundtrip(void **state)
{
        enum { N = 5000 };
        struct rec *recs = calloc(N, sizeof(*recs)), *back = calloc(N, sizeof(*back));
        uint64_t x = 12345;
        int64_t t = -1000000; /* times may start before the recording's origin */
        for (int i = 0; i < N; i++) {
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                /* Repeats, big jumps, zero deltas, the largest stack id. */
                t += (x >> 60) == 0 ? (int64_t)(x >> 20) : (int64_t)((x >> 33) % 20000000);
                recs[i].t = t;
                recs[i].stack =
                    (x >> 40) % 4 == 0 && i ? recs[i - 1].stack : (uint32_t)((x >> 8) % 70000);
                recs[i].state = (x >> 40) % 4 == 0 && i ? recs[i - 1].state
                                                        : (unsigned)(x >> 61) & TRACE_STATE_MASK;
                if (i == 17)
                        recs[i].stack = UINT32_MAX - 1;
        }
        struct pf_buf b = {0};
        struct chunk_encoder e;
        encode(recs, N, &b, &e);
        assert_int_equal(e.count, N);
        assert_int_equal(e.first_ns, recs[0].t);
        assert_int_equal(e.last_ns, recs[N - 1].t);
        assert_int_equal(decode(b.data, b.len, &e, UINT32_MAX, back, N), N);
        for (int i = 0; i < N; i++) {
                assert_int_equal(back[i].t, recs[i].t);
                assert_int_equal(back[i].stack, recs[i].stack);
                assert_int_equal(back[i].state, recs[i].state);
        }
        /* Stack ids at the limit are refused. */
        assert_int_equal(decode(b.data, b.len, &e, UINT32_MAX - 1, back, N), TRACE_ERR_CORRUPT);
        /* Every truncation is damage, and is found without reading past the end. */
        for (size_t len = 0; len < b.len; len += 1 + len / 50) {
                uint8_t *copy = malloc(len ? len : 1);
                memcpy(copy, b.data, len);
                assert_int_equal(decode(copy, len, &e, UINT32_MAX, back, N), TRACE_ERR_CORRUPT);
                free(copy);
        }
        /* A wrong count either way is damage. */
        struct chunk_encoder wrong = e;
        wrong.count = N - 1;
        assert_int_equal(decode(b.data, b.len, &wrong, UINT32_MAX, back, N), TRACE_ERR_CORRUPT);
        wrong.count = N + 1;
        assert_int_equal(decode(b.data, b.len, &wrong, UINT32_MAX, back, N + 1), TRACE_ERR_CORRUPT);
        wrong = e;
        wrong.last_ns++;
        assert_int_equal(decode(b.data, b.len, &wrong, UINT32_MAX, back, N), TRACE_ERR_CORRUPT);
        wrong = e;
        wrong.first_ns--;
        assert_int_equal(decode(b.data, b.len, &wrong, UINT32_MAX, back, N), TRACE_ERR_CORRUPT);
        wrong.count = 0;
        assert_int_equal(decode(b.data, b.len, &wrong, UINT32_MAX, back, N), TRACE_ERR_CORRUPT);

        /* Random byte damage: any verdict, never out of bounds (ASan watches). */
        uint8_t *copy = malloc(b.len);
        for (int iter = 0; iter < 2000; iter++) {
                memcpy(copy, b.data, b.len);
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                copy[(x >> 20) % b.len] ^= (uint8_t)(1u << ((x >> 50) % 8));
                int rc = decode(copy, b.len, &e, UINT32_MAX, back, N);
                assert_true(rc == N || rc == TRACE_ERR_CORRUPT);
        }
        free(copy);
        pf_buf_free(&b);
        free(recs);
        free(back);
}

static void test_chunk_hostile(void **state)
{
        struct rec back[4];
        struct chunk_encoder e = {.first_ns = 0, .last_ns = 0, .count = 1};
        /* The first record may not say "same as before". */
        static const uint8_t repeat_first[] = {0x01};
        assert_int_equal(decode(repeat_first, 1, &e, 10, back, 4), TRACE_ERR_CORRUPT);
        /* An 11-byte varint. */
        static const uint8_t overlong[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                           0x80, 0x80, 0x80, 0x80, 0x00, 0x00};
        assert_int_equal(decode(overlong, sizeof(overlong), &e, 10, back, 4), TRACE_ERR_CORRUPT);
        /* A first record that does not start at first_ns. */
        static const uint8_t late_first[] = {0x02, 0x08};
        e.last_ns = 1;
        assert_int_equal(decode(late_first, 2, &e, 10, back, 4), TRACE_ERR_CORRUPT);
        /* A time delta that would overflow int64. */
        static const uint8_t huge_dt[] = {0x00, 0x08, 0xfe, 0xff, 0xff, 0xff, 0xff,
                                          0xff, 0xff, 0xff, 0xff, 0x01, 0x08};
        e.count = 2;
        e.last_ns = 100;
        assert_int_equal(decode(huge_dt, sizeof(huge_dt), &e, 10, back, 4), TRACE_ERR_CORRUPT);
        /* Times out of range. */
        struct chunk_encoder far = {.first_ns = INT64_MIN, .last_ns = INT64_MAX, .count = 1};
        static const uint8_t one[] = {0x00, 0x08};
        assert_int_equal(decode(one, 2, &far, 10, back, 4), TRACE_ERR_CORRUPT);
        /* A blob far longer than its count allows. */
        uint8_t zeros[100] = {0};
        struct chunk_encoder two = {.first_ns = 0, .last_ns = 0, .count = 2};
        assert_int_equal(decode(zeros, sizeof(zeros), &two, 10, back, 4), TRACE_ERR_CORRUPT);
        /* And a good one for contrast: two samples in stack 1 at time 0. */
        assert_int_equal(decode((const uint8_t *)"\x00\x08\x01", 3, &two, 10, back, 4), 2);
        assert_int_equal(back[1].stack, 1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_idmap),
            cmocka_unit_test(test_idmap_remove),
            cmocka_unit_test_setup_teardown(test_frame_interning, wsetup, wteardown),
            cmocka_unit_test_setup_teardown(test_string_table, wsetup, wteardown),
            cmocka_unit_test_setup_teardown(test_stack_tree, wsetup, wteardown),
            cmocka_unit_test(test_chunk_example),
            cmocka_unit_test(test_chunk_roundtrip),
            cmocka_unit_test(test_chunk_hostile),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
