/*
 * testutil.c - the helpers of testutil.h. Failures here are test-setup
 * failures, reported through cmocka's fail_msg.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "trace_internal.h"

char *tu_mkdtemp(void)
{
        const char *base = getenv("TMPDIR");
        char tmpl[512];
        snprintf(tmpl, sizeof(tmpl), "%s/libtrace-test-XXXXXX", base && *base ? base : "/tmp");
        char *d = mkdtemp(tmpl);
        if (!d)
                fail_msg("mkdtemp %s failed", tmpl);
        return strdup(d);
}

void tu_rmdir(char *dir)
{
        DIR *d = opendir(dir);
        if (d) {
                struct dirent *e;
                while ((e = readdir(d))) {
                        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                                continue;
                        char *p = tu_path(dir, e->d_name);
                        unlink(p);
                        free(p);
                }
                closedir(d);
        }
        rmdir(dir);
        free(dir);
}

char *tu_path(const char *dir, const char *name)
{
        size_t n = strlen(dir) + strlen(name) + 2;
        char *p = malloc(n);
        assert_non_null(p);
        snprintf(p, n, "%s/%s", dir, name);
        return p;
}

void tu_write_file(const char *path, const void *data, size_t len)
{
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(data, 1, len, f), len);
        assert_int_equal(fclose(f), 0);
}

void tu_copy_file(const char *from, const char *to)
{
        FILE *in = fopen(from, "rb");
        assert_non_null(in);
        FILE *out = fopen(to, "wb");
        assert_non_null(out);
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
                assert_int_equal(fwrite(buf, 1, n, out), n);
        fclose(in);
        assert_int_equal(fclose(out), 0);
}

long long tu_file_size(const char *path)
{
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        return (long long)st.st_size;
}

void tu_truncate(const char *path, long long size)
{
        assert_int_equal(truncate(path, size), 0);
}

int tu_sql(const char *path, const char *sql)
{
        sqlite3 *db = NULL;
        int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
        if (rc == SQLITE_OK)
                rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
        sqlite3_close(db);
        return rc;
}

uint32_t tu_stack_index(int i)
{
        /* Mostly s3 and s2, some s1, s4 and empty: a skewed, known mix. */
        static const uint32_t pattern[10] = {3, 3, 2, 3, 1, 4, 3, 2, 0, 3};
        return pattern[(i / 3) % 10];
}

unsigned tu_state_of(int i)
{
        static const unsigned pattern[4] = {
            TRACE_STATE_ON_CPU | TRACE_STATE_HOLDS_GIL,
            TRACE_STATE_HOLDS_GIL,
            0,
            TRACE_STATE_ON_CPU,
        };
        return pattern[(i / 5) % 4];
}

uint32_t tu_thread_index(int i)
{
        return (uint32_t)(i % 3);
}

void tu_write_reference(const char *path, struct tu_reference *ref, bool finalize, int flushed)
{
        struct trace_writer *w = NULL;
        int rc = trace_writer_create(path, 0, &w);
        if (rc != 0)
                fail_msg("create %s: %s", path, trace_writer_errmsg(w));
        trace_writer_set_chunk_max(w, 7);
        trace_writer_set_flush_interval(w, -1);
        assert_int_equal(trace_writer_set_meta(w, TRACE_META_RATE_HZ, "1000"), 0);
        assert_int_equal(trace_writer_set_meta(w, TRACE_META_MODE, "nonblocking"), 0);
        assert_int_equal(trace_writer_set_meta_int(w, "answer", 42), 0);

        struct trace_process_desc p1 = {100, "python3 app.py", "3.12.1", "shared"};
        struct trace_process_desc p2 = {200, "python3 -c pass", "3.11.4", "static"};
        assert_int_equal(trace_writer_add_process(w, &p1), 0);
        assert_int_equal(trace_writer_add_process(w, &p2), 0);
        struct trace_thread_desc t1 = {100, 1000, 0x7f0000001000ULL, "MainThread"};
        /* A thread id above INT64_MAX: stored as signed 64 bits, must come back. */
        struct trace_thread_desc t2 = {100, 1001, 0xfedcba9876543210ULL, NULL};
        struct trace_thread_desc t3 = {200, 2000, 0, NULL};
        assert_int_equal(trace_writer_add_thread(w, &t1, &ref->threads[0]), 0);
        assert_int_equal(trace_writer_add_thread(w, &t2, &ref->threads[1]), 0);
        assert_int_equal(trace_writer_add_thread(w, &t3, &ref->threads[2]), 0);
        assert_int_equal(trace_writer_set_thread_name(w, ref->threads[1], "worker"), 0);

        struct trace_frame_desc fd[4] = {
            {"main", "main", "app.py", 10, 1, TRACE_FRAME_PYTHON},
            {"work", "Worker.work", "app.py", 20, 18, TRACE_FRAME_PYTHON},
            {"leaf", NULL, "lib/leaf.py", -1, -1, TRACE_FRAME_PYTHON},
            {"<idle>", NULL, "<pyflame>", 0, 0, TRACE_FRAME_SPECIAL},
        };
        for (int i = 0; i < 4; i++)
                assert_int_equal(trace_writer_intern_frame(w, &fd[i], &ref->frames[i]), 0);
        ref->stacks[0] = TRACE_STACK_EMPTY;
        assert_int_equal(trace_writer_intern_stack_frames(w, ref->frames, 1, &ref->stacks[1]), 0);
        assert_int_equal(trace_writer_intern_stack_frames(w, ref->frames, 2, &ref->stacks[2]), 0);
        assert_int_equal(trace_writer_intern_stack_frames(w, ref->frames, 3, &ref->stacks[3]), 0);
        assert_int_equal(
            trace_writer_intern_stack(w, TRACE_STACK_EMPTY, ref->frames[3], &ref->stacks[4]), 0);

        /*
         * Base the times on the writer's own start (stored in meta at create)
         * so that relative times are exact.
         */
        int64_t base = 0;
        {
                assert_int_equal(trace_writer_flush(w), 0);
                struct trace_reader *r = NULL;
                assert_int_equal(trace_reader_open(path, &r), 0);
                const char *s = trace_reader_meta(r, TRACE_META_START_MONO_NS);
                assert_non_null(s);
                base = strtoll(s, NULL, 10);
                trace_reader_close(r);
        }
        ref->start_mono_ns = base;

        assert_int_equal(trace_writer_count_error(w, 100, TRACE_ERROR_TORN, 5), 0);
        assert_int_equal(trace_writer_count_error(w, 200, TRACE_ERROR_TORN, 2), 0);
        assert_int_equal(trace_writer_count_error(w, 0, TRACE_ERROR_LATE, 3), 0);
        for (int i = 0; i < TU_SAMPLES; i++) {
                if (!finalize && i == flushed)
                        assert_int_equal(trace_writer_flush(w), 0);
                rc = trace_writer_add_sample(w, ref->threads[tu_thread_index(i)],
                                             base + i * TU_STEP_NS, ref->stacks[tu_stack_index(i)],
                                             tu_state_of(i));
                if (rc != 0)
                        fail_msg("add_sample %d: %s", i, trace_writer_errmsg(w));
        }
        if (finalize) {
                assert_int_equal(trace_writer_end_process(w, 200, 3, base + 2500 * TU_STEP_NS), 0);
                rc = trace_writer_finalize(w);
                if (rc != 0)
                        fail_msg("finalize: %s", trace_writer_errmsg(w));
        }
        trace_writer_free(w);
}
