/*
 * test_sources.c - source texts in a trace: what trace_writer_add_source()
 * stores, trace_reader_source() gives back byte for byte (compressed or
 * not), the writer's refusals, traces written before the sources table
 * existed, and damaged source rows, which must be TRACE_ERR_CORRUPT and
 * never a crash or an allocation bigger than the format allows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"
#include "trace.h"

/* Compressible, like real code. */
static char *python_text(size_t *len)
{
        size_t cap = 64 * 1024, n = 0;
        char *s = malloc(cap);
        assert_non_null(s);
        for (int i = 0; n + 200 < cap; i++)
                n += (size_t)snprintf(s + n, cap - n,
                                      "def function_%d(x):\n    return x * %d + sum(range(%d))\n\n",
                                      i, i, i % 17);
        *len = n;
        return s;
}

struct fixture {
        char *dir, *path;
        char *py;
        size_t py_len;
};

static int setup(void **state)
{
        struct fixture *f = calloc(1, sizeof(*f));
        f->dir = tu_mkdtemp();
        f->path = tu_path(f->dir, "src.pyflame");
        f->py = python_text(&f->py_len);
        struct trace_writer *w = NULL;
        assert_int_equal(trace_writer_create(f->path, 0, &w), 0);
        struct trace_process_desc p = {1, "python app.py", "3.12.1", "shared"};
        assert_int_equal(trace_writer_add_process(w, &p), 0);
        struct trace_frame_desc fd = {"main", NULL, "/app/main.py", 3, 1, TRACE_FRAME_PYTHON};
        uint32_t frame;
        assert_int_equal(trace_writer_intern_frame(w, &fd, &frame), 0);

        assert_int_equal(
            trace_writer_add_source(w, "/app/main.py", f->py, f->py_len, 1700000000123456789LL), 0);
        /* Short and unrepetitive: stored as it is. */
        assert_int_equal(trace_writer_add_source(w, "short.py", "x=1\n", 4, -1), 0);
        assert_int_equal(trace_writer_add_source(w, "/app/empty.py", "", 0, 5), 0);
        /* A second text for a file keeps the first. */
        assert_int_equal(trace_writer_add_source(w, "short.py", "y=2\n", 4, 7), 1);
        assert_int_equal(trace_writer_flush(w), 0);
        /* Added after a flush: written by the next one (here, finalize). */
        assert_int_equal(trace_writer_add_source(w, "/app.pyz/pkg/mod.py", "import os\n", 10, 9),
                         0);
        assert_int_equal(trace_writer_add_source(w, "/app/main.py", "other", 5, -1), 1);
        assert_int_equal(trace_writer_finalize(w), 0);
        trace_writer_free(w);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fixture *f = *state;
        free(f->py);
        free(f->path);
        tu_rmdir(f->dir);
        free(f);
        return 0;
}

static void expect_text(struct trace_reader *r, const char *file, const char *want, size_t len)
{
        char *data = NULL;
        size_t n = 0;
        int rc = trace_reader_source(r, file, &data, &n);
        if (rc != 1)
                fail_msg("%s: %d %s", file, rc, trace_reader_errmsg(r));
        assert_int_equal(n, len);
        assert_memory_equal(data, want, len);
        assert_int_equal(data[len], '\0');
        free(data);
}

static const struct trace_source *find_source(struct trace_reader *r, const char *file,
                                              struct trace_source *out)
{
        for (uint32_t i = 0; i < trace_reader_source_count(r); i++) {
                assert_int_equal(trace_reader_source_at(r, i, out), 0);
                if (!strcmp(out->file, file))
                        return out;
        }
        return NULL;
}

static void test_roundtrip(void **state)
{
        struct fixture *f = *state;
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(f->path, &r), 0);
        assert_int_equal(trace_reader_source_count(r), 4);
        expect_text(r, "/app/main.py", f->py, f->py_len);
        expect_text(r, "short.py", "x=1\n", 4);
        expect_text(r, "/app/empty.py", "", 0);
        expect_text(r, "/app.pyz/pkg/mod.py", "import os\n", 10);

        struct trace_source s;
        assert_non_null(find_source(r, "/app/main.py", &s));
        assert_int_equal(s.size, f->py_len);
        assert_true(s.stored * 3 < s.size); /* code compresses well */
        assert_int_equal(s.mtime_ns, 1700000000123456789LL);
        assert_non_null(find_source(r, "short.py", &s));
        assert_int_equal(s.size, 4);
        assert_int_equal(s.stored, 4);
        assert_int_equal(s.mtime_ns, -1);
        assert_int_equal(trace_reader_source_at(r, 4, &s), TRACE_ERR_ARG);

        /* Absent: 0, and the outputs are left alone. */
        char *data = (char *)"untouched";
        size_t len = 99;
        assert_int_equal(trace_reader_source(r, "/app/other.py", &data, &len), 0);
        assert_string_equal(data, "untouched");
        assert_int_equal(len, 99);
        assert_int_equal(trace_reader_source(r, NULL, &data, &len), TRACE_ERR_ARG);
        trace_reader_close(r);
}

static void test_writer_refusals(void **state)
{
        struct fixture *f = *state;
        char *path = tu_path(f->dir, "refuse.pyflame");
        struct trace_writer *w = NULL;
        assert_int_equal(trace_writer_create(path, 0, &w), 0);
        assert_int_equal(trace_writer_add_source(w, NULL, "x", 1, -1), TRACE_ERR_ARG);
        assert_int_equal(trace_writer_add_source(w, "", "x", 1, -1), TRACE_ERR_ARG);
        assert_int_equal(trace_writer_add_source(w, "a.py", NULL, 1, -1), TRACE_ERR_ARG);
        assert_int_equal(trace_writer_add_source(w, "a.py", "a\0b", 3, -1), TRACE_ERR_ARG);
        assert_non_null(strstr(trace_writer_errmsg(w), "NUL"));
        /* The length is checked before the text is looked at. */
        static const char small[1];
        assert_int_equal(
            trace_writer_add_source(w, "big.py", small, (size_t)TRACE_SOURCE_MAX_BYTES + 1, -1),
            TRACE_ERR_ARG);
        /* Refused files were not recorded as having a source. */
        assert_int_equal(trace_writer_add_source(w, "a.py", "ok\n", 3, -1), 0);
        assert_int_equal(trace_writer_finalize(w), 0);
        assert_int_equal(trace_writer_add_source(w, "b.py", "x", 1, -1), TRACE_ERR_STATE);
        trace_writer_free(w);

        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(path, &r), 0);
        assert_int_equal(trace_reader_source_count(r), 1);
        expect_text(r, "a.py", "ok\n", 3);
        trace_reader_close(r);
        free(path);
}

/* The largest text the format allows goes through, compressed or not. */
static void test_largest(void **state)
{
        struct fixture *f = *state;
        char *path = tu_path(f->dir, "large.pyflame");
        size_t n = TRACE_SOURCE_MAX_BYTES;
        char *big = malloc(n);
        assert_non_null(big);
        uint64_t x = 88172645463325252ULL;
        for (size_t i = 0; i < n; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                big[i] = (char)(' ' + x % 95); /* printable noise: barely compresses */
        }
        struct trace_writer *w = NULL;
        assert_int_equal(trace_writer_create(path, 0, &w), 0);
        assert_int_equal(trace_writer_add_source(w, "noise.py", big, n, -1), 0);
        assert_int_equal(trace_writer_finalize(w), 0);
        trace_writer_free(w);
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(path, &r), 0);
        expect_text(r, "noise.py", big, n);
        trace_reader_close(r);
        free(big);
        free(path);
}

/* Files written before the table existed open, and hold no source. */
static void test_old_trace(void **state)
{
        struct fixture *f = *state;
        char *path = tu_path(f->dir, "old.pyflame");
        struct tu_reference ref;
        tu_write_reference(path, &ref, true, 0);
        assert_int_equal(tu_sql(path, "DROP TABLE sources; DROP TABLE source_encodings;"), 0);
        struct trace_reader *r = NULL;
        int rc = trace_reader_open(path, &r);
        if (rc != 0)
                fail_msg("%s", trace_reader_errmsg(r));
        assert_int_equal(trace_reader_source_count(r), 0);
        char *data = NULL;
        size_t len = 0;
        assert_int_equal(trace_reader_source(r, "main.py", &data, &len), 0);
        assert_null(data);
        struct trace_summary s;
        assert_int_equal(trace_reader_summary(r, &s), 0);
        assert_int_equal(s.samples, TU_SAMPLES);
        trace_reader_close(r);
        free(path);
}

/* Damage the copy with `sql`; opening must fail as corrupt, naming the sources. */
static void expect_open_corrupt(struct fixture *f, const char *sql)
{
        char *path = tu_path(f->dir, "damaged.pyflame");
        tu_copy_file(f->path, path);
        assert_int_equal(tu_sql(path, sql), 0);
        struct trace_reader *r = NULL;
        int rc = trace_reader_open(path, &r);
        if (rc != TRACE_ERR_CORRUPT)
                fail_msg("%s: open gave %d (%s)", sql, rc, trace_reader_errmsg(r));
        assert_non_null(strstr(trace_reader_errmsg(r), "source"));
        trace_reader_close(r);
        free(path);
}

/* Damage the copy with `sql`; it opens, and reading `file` is TRACE_ERR_CORRUPT. */
static void expect_read_corrupt(struct fixture *f, const char *sql, const char *file)
{
        char *path = tu_path(f->dir, "damaged.pyflame");
        tu_copy_file(f->path, path);
        assert_int_equal(tu_sql(path, sql), 0);
        struct trace_reader *r = NULL;
        int rc = trace_reader_open(path, &r);
        if (rc != 0)
                fail_msg("%s: open gave %d (%s)", sql, rc, trace_reader_errmsg(r));
        char *data = (char *)"untouched";
        size_t len = 99;
        rc = trace_reader_source(r, file, &data, &len);
        if (rc != TRACE_ERR_CORRUPT)
                fail_msg("%s: reading %s gave %d", sql, file, rc);
        assert_string_equal(data, "untouched");
        assert_int_equal(len, 99);
        assert_non_null(strstr(trace_reader_errmsg(r), file));
        /* The rest of the trace is still readable. */
        expect_text(r, "short.py", "x=1\n", 4);
        trace_reader_close(r);
        free(path);
}

#define MAIN_ID "(SELECT id FROM strings WHERE value = '/app/main.py')"
#define MOD_ID  "(SELECT id FROM strings WHERE value = '/app.pyz/pkg/mod.py')"

static void test_damaged(void **state)
{
        struct fixture *f = *state;
        expect_open_corrupt(f, "UPDATE sources SET file = 999999 WHERE file = " MAIN_ID);
        expect_open_corrupt(f, "UPDATE sources SET size = 16777217 WHERE file = " MAIN_ID);
        expect_open_corrupt(f, "UPDATE sources SET size = -1 WHERE file = " MAIN_ID);
        expect_open_corrupt(f, "UPDATE sources SET mtime_ns = 'yesterday'");
        expect_open_corrupt(f, "UPDATE sources SET encoding = -1 WHERE file = " MAIN_ID);
        /* A plain text must take exactly its size. */
        expect_open_corrupt(f, "UPDATE sources SET size = size + 1 WHERE encoding = 0");
        /* A claimed size the stream cannot inflate to, either way. */
        expect_read_corrupt(f, "UPDATE sources SET size = size + 1 WHERE file = " MAIN_ID,
                            "/app/main.py");
        expect_read_corrupt(f, "UPDATE sources SET size = size - 1 WHERE file = " MAIN_ID,
                            "/app/main.py");
        expect_read_corrupt(f, "UPDATE sources SET size = 16777216 WHERE file = " MAIN_ID,
                            "/app/main.py");
        /* Bytes of the stream damaged (same length), or not a stream at all. */
        expect_read_corrupt(f,
                            "UPDATE sources SET data = CAST(substr(data, 1, 40) || zeroblob(16) || "
                            "substr(data, 57) AS BLOB) WHERE file = " MAIN_ID,
                            "/app/main.py");
        expect_read_corrupt(
            f, "UPDATE sources SET data = randomblob(length(data)) WHERE file = " MAIN_ID,
            "/app/main.py");
        /* Plain text with a NUL, or stored as TEXT instead of a BLOB. */
        expect_read_corrupt(
            f, "UPDATE sources SET data = x'696d706f7274006f730a' WHERE file = " MOD_ID,
            "/app.pyz/pkg/mod.py");
        expect_read_corrupt(
            f, "UPDATE sources SET data = 'import os' || char(10) WHERE file = " MOD_ID,
            "/app.pyz/pkg/mod.py");
}

/* An encoding from a later version is a source this reader does not have. */
static void test_unknown_encoding(void **state)
{
        struct fixture *f = *state;
        char *path = tu_path(f->dir, "future.pyflame");
        tu_copy_file(f->path, path);
        assert_int_equal(tu_sql(path, "UPDATE sources SET encoding = 7 WHERE file = " MAIN_ID), 0);
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(path, &r), 0);
        assert_int_equal(trace_reader_source_count(r), 3);
        char *data = NULL;
        size_t len = 0;
        assert_int_equal(trace_reader_source(r, "/app/main.py", &data, &len), 0);
        expect_text(r, "short.py", "x=1\n", 4);
        trace_reader_close(r);
        free(path);
}

/* Merging carries the sources along; for a file both have, the first recording's text. */
static void test_merge(void **state)
{
        struct fixture *f = *state;
        char *second = tu_path(f->dir, "second.pyflame");
        char *merged = tu_path(f->dir, "merged.pyflame");
        struct trace_writer *w = NULL;
        assert_int_equal(trace_writer_create(second, 0, &w), 0);
        assert_int_equal(trace_writer_add_source(w, "short.py", "z=3\n", 4, 11), 0);
        assert_int_equal(trace_writer_add_source(w, "/other/only.py", "pass\n", 5, 12), 0);
        assert_int_equal(trace_writer_finalize(w), 0);
        trace_writer_free(w);

        assert_int_equal(trace_writer_create(merged, 0, &w), 0);
        const char *inputs[] = {f->path, second};
        for (int i = 0; i < 2; i++) {
                struct trace_reader *src = NULL;
                assert_int_equal(trace_reader_open(inputs[i], &src), 0);
                int rc = trace_writer_add_recording(w, src, inputs[i], 0);
                if (rc != 0)
                        fail_msg("merge: %s", trace_writer_errmsg(w));
                trace_reader_close(src);
        }
        assert_int_equal(trace_writer_finalize(w), 0);
        trace_writer_free(w);

        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(merged, &r), 0);
        assert_int_equal(trace_reader_source_count(r), 5);
        expect_text(r, "/app/main.py", f->py, f->py_len);
        expect_text(r, "short.py", "x=1\n", 4);
        expect_text(r, "/other/only.py", "pass\n", 5);
        struct trace_source s;
        assert_non_null(find_source(r, "/other/only.py", &s));
        assert_int_equal(s.mtime_ns, 12);
        trace_reader_close(r);

        /* A damaged source fails the merge, with the source's message. */
        char *damaged = tu_path(f->dir, "damaged-merge.pyflame");
        tu_copy_file(f->path, damaged);
        assert_int_equal(tu_sql(damaged, "UPDATE sources SET data = randomblob(length(data)) "
                                         "WHERE file = " MAIN_ID),
                         0);
        assert_int_equal(trace_writer_create(merged, TRACE_CREATE_FORCE, &w), 0);
        struct trace_reader *src = NULL;
        assert_int_equal(trace_reader_open(damaged, &src), 0);
        assert_int_equal(trace_writer_add_recording(w, src, damaged, 0), TRACE_ERR_CORRUPT);
        assert_non_null(strstr(trace_writer_errmsg(w), "/app/main.py"));
        trace_reader_close(src);
        trace_writer_free(w);
        free(damaged);
        free(second);
        free(merged);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
            cmocka_unit_test_setup_teardown(test_writer_refusals, setup, teardown),
            cmocka_unit_test_setup_teardown(test_largest, setup, teardown),
            cmocka_unit_test_setup_teardown(test_old_trace, setup, teardown),
            cmocka_unit_test_setup_teardown(test_damaged, setup, teardown),
            cmocka_unit_test_setup_teardown(test_unknown_encoding, setup, teardown),
            cmocka_unit_test_setup_teardown(test_merge, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
