/*
 * test_badfiles.c - the reader facing files that are not good traces:
 * missing, not SQLite, empty, SQLite but not ours, too new, truncated,
 * damaged tables and blobs, random corruption, and the hot journal a
 * recorder killed mid-commit leaves, and views, triggers and tables planted
 * in a trace. Each must give its own status and a message naming the
 * problem, and nothing may crash (these tests also run under ASan/UBSan).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "trace.h"
#include "trace_internal.h"

struct fixture {
        char *dir;
        char *ref_path; /* a good reference trace: copy it, then damage the copy */
        char *path;     /* the copy */
};

static int setup(void **state)
{
        struct fixture *f = calloc(1, sizeof(*f));
        struct tu_reference ref;
        f->dir = tu_mkdtemp();
        f->ref_path = tu_path(f->dir, "ref.pyflame");
        f->path = tu_path(f->dir, "bad.pyflame");
        tu_write_reference(f->ref_path, &ref, true, 0);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fixture *f = *state;
        free(f->ref_path);
        free(f->path);
        tu_rmdir(f->dir);
        free(f);
        return 0;
}

/* Open `path`, expect `status` and a message containing `words`. */
static void expect_open(const char *path, int status, const char *words)
{
        struct trace_reader *r = NULL;
        int rc = trace_reader_open(path, &r);
        assert_non_null(r);
        if (rc != status)
                fail_msg("%s: expected %s, got %s (%s)", path, trace_status_str(status),
                         trace_status_str(rc), trace_reader_errmsg(r));
        if (words && !strstr(trace_reader_errmsg(r), words))
                fail_msg("message \"%s\" lacks \"%s\"", trace_reader_errmsg(r), words);
        /* One line, naming the file. */
        assert_null(strchr(trace_reader_errmsg(r), '\n'));
        assert_non_null(strstr(trace_reader_errmsg(r), path));
        trace_reader_close(r);
}

/* Open must work, and reading all samples must report damage. */
static void expect_samples_corrupt(const char *path, const char *words)
{
        struct trace_reader *r = NULL;
        int rc = trace_reader_open(path, &r);
        if (rc != 0)
                fail_msg("open: %s", trace_reader_errmsg(r));
        uint64_t *counts = NULL, total = 0;
        assert_int_equal(trace_reader_count_by_stack(r, NULL, &counts, &total), TRACE_ERR_CORRUPT);
        assert_null(counts);
        if (words && !strstr(trace_reader_errmsg(r), words))
                fail_msg("message \"%s\" lacks \"%s\"", trace_reader_errmsg(r), words);
        trace_reader_close(r);
}

static void test_missing(void **state)
{
        struct fixture *f = *state;
        char *p = tu_path(f->dir, "nope.pyflame");
        expect_open(p, TRACE_ERR_IO, "no such file");
        /* SQLite would have created it: we must not. */
        assert_int_not_equal(access(p, F_OK), 0);
        expect_open(f->dir, TRACE_ERR_IO, "directory");
        /* A FIFO must be refused, not block the reader. */
        assert_int_equal(mkfifo(p, 0600), 0);
        expect_open(p, TRACE_ERR_IO, "not a regular file");
        unlink(p);
        free(p);
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(NULL, &r), TRACE_ERR_ARG);
        trace_reader_close(r);
}

static void test_not_sqlite(void **state)
{
        struct fixture *f = *state;
        tu_write_file(f->path, "function,samples\nmain,3\n", 24);
        expect_open(f->path, TRACE_ERR_NOT_SQLITE, "not a SQLite database");
        tu_write_file(f->path, "", 0);
        expect_open(f->path, TRACE_ERR_NOT_SQLITE, "empty");
        tu_write_file(f->path, "SQLite", 6); /* a prefix of the magic, then nothing */
        expect_open(f->path, TRACE_ERR_CORRUPT, "truncated");
}

static void test_not_trace(void **state)
{
        struct fixture *f = *state;
        assert_int_equal(tu_sql(f->path, "CREATE TABLE t(x); INSERT INTO t VALUES (1)"), SQLITE_OK);
        expect_open(f->path, TRACE_ERR_NOT_TRACE, "not a pyflame trace");
        unlink(f->path);
        /* Our stamp but not our tables. */
        assert_int_equal(tu_sql(f->path, "PRAGMA application_id = 1348027986;"
                                         "PRAGMA user_version = 1; CREATE TABLE meta(k, v)"),
                         SQLITE_OK);
        expect_open(f->path, TRACE_ERR_NOT_TRACE, "no table");
}

static void test_too_new(void **state)
{
        struct fixture *f = *state;
        tu_copy_file(f->ref_path, f->path);
        assert_int_equal(tu_sql(f->path, "PRAGMA user_version = 3"), SQLITE_OK);
        expect_open(f->path, TRACE_ERR_TOO_NEW,
                    "written by a newer pyflame (format 3, this reads up to 2)");
        assert_int_equal(tu_sql(f->path, "PRAGMA user_version = 0"), SQLITE_OK);
        expect_open(f->path, TRACE_ERR_CORRUPT, "format version");
}

static void test_truncated(void **state)
{
        struct fixture *f = *state;
        long long size = tu_file_size(f->ref_path);
        assert_true(size >= 16 * 4096); /* several pages, so the cuts land in different tables */
        static const int percent[] = {25, 50, 75, 99};
        for (size_t i = 0; i < sizeof(percent) / sizeof(percent[0]); i++) {
                tu_copy_file(f->ref_path, f->path);
                tu_truncate(f->path, size * percent[i] / 100);
                expect_open(f->path, TRACE_ERR_CORRUPT, "truncated");
        }
        tu_copy_file(f->ref_path, f->path);
        tu_truncate(f->path, size - 1);
        expect_open(f->path, TRACE_ERR_CORRUPT, "truncated");
        tu_copy_file(f->ref_path, f->path);
        tu_truncate(f->path, 60); /* inside the 100-byte header */
        expect_open(f->path, TRACE_ERR_CORRUPT, "truncated");
}

/* Damage one thing with SQL on a fresh copy, then check the reader's verdict. */
static void damage(struct fixture *f, const char *sql)
{
        tu_copy_file(f->ref_path, f->path);
        int rc = tu_sql(f->path, sql);
        if (rc != SQLITE_OK)
                fail_msg("%s: %s", sql, sqlite3_errstr(rc));
}

static void test_damaged_tables(void **state)
{
        struct fixture *f = *state;
        damage(f, "UPDATE stacks SET parent = 3 WHERE id = 3");
        expect_open(f->path, TRACE_ERR_CORRUPT, "stack 3");
        damage(f, "UPDATE stacks SET parent = 4 WHERE id = 2"); /* would make a cycle */
        expect_open(f->path, TRACE_ERR_CORRUPT, "stack 2");
        damage(f, "UPDATE stacks SET frame = 99 WHERE id = 1");
        expect_open(f->path, TRACE_ERR_CORRUPT, "stack 1");
        damage(f, "UPDATE stacks SET depth = 7 WHERE id = 2");
        expect_open(f->path, TRACE_ERR_CORRUPT, "stack 2");
        damage(f, "DELETE FROM stacks WHERE id = 2");
        expect_open(f->path, TRACE_ERR_CORRUPT, "stack ids");
        damage(f, "DELETE FROM stacks WHERE id = 0");
        expect_open(f->path, TRACE_ERR_CORRUPT, "stack");
        damage(f, "UPDATE frames SET function = 999 WHERE id = 2");
        expect_open(f->path, TRACE_ERR_CORRUPT, "frame 2");
        damage(f, "UPDATE frames SET kind = 9 WHERE id = 1");
        expect_open(f->path, TRACE_ERR_CORRUPT, "frame 1");
        damage(f, "UPDATE frames SET line = 'ten' WHERE id = 1");
        expect_open(f->path, TRACE_ERR_CORRUPT, "frame 1");
        damage(f, "DELETE FROM strings WHERE id = 1");
        expect_open(f->path, TRACE_ERR_CORRUPT, "string");
        damage(f, "UPDATE threads SET pid = 7 WHERE ref = 2");
        expect_open(f->path, TRACE_ERR_CORRUPT, "thread 2");
        damage(f, "UPDATE sample_chunks SET count = 0 WHERE id = 3");
        expect_open(f->path, TRACE_ERR_CORRUPT, "chunk");
        damage(f, "UPDATE sample_chunks SET count = 1e300 WHERE id = 3");
        expect_open(f->path, TRACE_ERR_CORRUPT, "chunk");
        /* Unknown error kinds from a later version fold into "other". */
        damage(f, "INSERT INTO errors VALUES (100, 17, 4)");
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(f->path, &r), 0);
        struct trace_summary s;
        assert_int_equal(trace_reader_summary(r, &s), 0);
        assert_int_equal(s.errors[TRACE_ERROR_OTHER], 4);
        trace_reader_close(r);
}

static void test_damaged_blobs(void **state)
{
        struct fixture *f = *state;
        damage(f, "UPDATE sample_chunks SET data = X'FFFFFFFF' WHERE id = 5");
        expect_samples_corrupt(f->path, "sample chunk 5");
        /* Stack 99 does not exist: A = 0, B = 99 << 3. */
        damage(f, "UPDATE sample_chunks SET data = X'009806', count = 1, last_ns = first_ns "
                  "WHERE id = 5");
        expect_samples_corrupt(f->path, "stack id out of range");
        damage(f, "UPDATE sample_chunks SET count = count + 1 WHERE id = 5");
        expect_samples_corrupt(f->path, "sample chunk 5");
        damage(f, "UPDATE sample_chunks SET count = count - 1 WHERE id = 5");
        expect_samples_corrupt(f->path, "left over");
        damage(f, "UPDATE sample_chunks SET last_ns = last_ns + 1 WHERE id = 5");
        expect_samples_corrupt(f->path, "last_ns");
        damage(f, "UPDATE sample_chunks SET first_ns = last_ns + 1 WHERE id = 5");
        expect_samples_corrupt(f->path, "out of order");
        damage(f, "UPDATE sample_chunks SET data = substr(data, 1, length(data) - 1) "
                  "WHERE id = 5");
        expect_samples_corrupt(f->path, "sample chunk 5");
        damage(f, "UPDATE sample_chunks SET data = zeroblob(0) WHERE id = 5");
        expect_samples_corrupt(f->path, "sample chunk 5");
        damage(f, "UPDATE sample_chunks SET data = 'text, not a blob' WHERE id = 5");
        expect_samples_corrupt(f->path, "sample chunk 5");
        damage(f, "UPDATE sample_chunks SET thread = 9 WHERE id = 5");
        expect_samples_corrupt(f->path, "sample chunk 5");

        /* foreach reports the damage too, after delivering what came before. */
        damage(f, "UPDATE sample_chunks SET data = X'FFFFFFFF' WHERE id = 5");
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(f->path, &r), 0);
        assert_int_equal(trace_reader_foreach_sample(r, NULL, NULL, NULL), TRACE_ERR_ARG);
        trace_reader_close(r);
}

static int count_cb(void *ctx, const struct trace_sample *s)
{
        (*(uint64_t *)ctx)++;
        return 0;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng(void)
{
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        return rng_state;
}

/* Random damage anywhere past the header: any verdict, never a crash. */
static void test_random_damage(void **state)
{
        struct fixture *f = *state;
        long long size = tu_file_size(f->ref_path);
        int failures = 0;
        for (int iter = 0; iter < 150; iter++) {
                tu_copy_file(f->ref_path, f->path);
                FILE *fp = fopen(f->path, "r+b");
                assert_non_null(fp);
                int n = 1 + (int)(rng() % 16);
                long long at = 100 + (long long)(rng() % (uint64_t)(size - 100 - n));
                fseek(fp, at, SEEK_SET);
                for (int k = 0; k < n; k++)
                        fputc((int)(rng() & 0xff), fp);
                fclose(fp);
                struct trace_reader *r = NULL;
                int rc = trace_reader_open(f->path, &r);
                if (rc == 0) {
                        uint64_t *counts = NULL, total = 0, n_cb = 0;
                        rc = trace_reader_count_by_stack(r, NULL, &counts, &total);
                        if (rc == 0) {
                                assert_int_equal(
                                    trace_reader_foreach_sample(r, NULL, count_cb, &n_cb), 0);
                                assert_int_equal(n_cb, total);
                                free(counts);
                        }
                }
                assert_true(rc <= 0);
                if (rc < 0)
                        assert_true(trace_reader_errmsg(r)[0] != '\0');
                failures += rc < 0;
                trace_reader_close(r);
        }
        print_message("random damage: %d of 150 damaged copies refused\n", failures);
}

/*
 * A recorder killed in the middle of a commit leaves a hot journal. The reader
 * rolls it back in a private copy and sees the last complete commit; the
 * trace and its journal are left as they were (a report never writes to the
 * file it reads, which may come from anywhere), and read the same again.
 */
static void test_hot_journal(void **state)
{
        struct fixture *f = *state;
        char *victim = tu_path(f->dir, "victim.pyflame");
        char *victim_journal = tu_path(f->dir, "victim.pyflame-journal");
        char *journal = tu_path(f->dir, "bad.pyflame-journal");
        tu_copy_file(f->ref_path, victim);
        sqlite3 *db;
        assert_int_equal(sqlite3_open(victim, &db), SQLITE_OK);
        /* A tiny cache forces SQLite to write changed pages before COMMIT. */
        assert_int_equal(sqlite3_exec(db,
                                      "PRAGMA cache_size = 1; BEGIN; DELETE FROM sample_chunks; "
                                      "DELETE FROM stacks WHERE id > 0; UPDATE meta SET value = "
                                      "'x' WHERE key = 'mode'",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
        /* "Kill" the writer: copy the file and its journal as they are now. */
        assert_int_equal(access(victim_journal, F_OK), 0);
        tu_copy_file(victim, f->path);
        tu_copy_file(victim_journal, journal);
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        sqlite3_close(db);

        struct stat before_trace, before_journal, after;
        assert_int_equal(stat(f->path, &before_trace), 0);
        assert_int_equal(stat(journal, &before_journal), 0);
        for (int pass = 0; pass < 2; pass++) {
                struct trace_reader *r = NULL;
                int rc = trace_reader_open(f->path, &r);
                if (rc != 0)
                        fail_msg("open: %s", trace_reader_errmsg(r));
                struct trace_summary s;
                assert_int_equal(trace_reader_summary(r, &s), 0);
                assert_int_equal(s.samples, TU_SAMPLES);
                assert_int_equal(s.stacks, 5);
                assert_string_equal(trace_reader_meta(r, TRACE_META_MODE), "nonblocking");
                uint64_t *counts, total;
                assert_int_equal(trace_reader_count_by_stack(r, NULL, &counts, &total), 0);
                assert_int_equal(total, TU_SAMPLES);
                free(counts);
                trace_reader_close(r);
        }
        assert_int_equal(stat(f->path, &after), 0);
        assert_true(after.st_size == before_trace.st_size &&
                    after.st_mtim.tv_sec == before_trace.st_mtim.tv_sec &&
                    after.st_mtim.tv_nsec == before_trace.st_mtim.tv_nsec);
        assert_int_equal(stat(journal, &after), 0);
        assert_true(after.st_size == before_journal.st_size);
        free(victim);
        free(victim_journal);
        free(journal);
}

/*
 * Things planted in a trace by whoever made it: views, triggers and extra
 * tables are never trusted. The reader reads its own tables by name, so
 * extra objects are ignored, and a view under a table's name (which could
 * hang the reader with an endless recursion, or show other rows) is not a
 * table: the file is refused, at once.
 */
static void test_planted(void **state)
{
        struct fixture *f = *state;
        damage(f, "CREATE TABLE log(x);"
                  "CREATE VIEW forever AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
                  "SELECT x + 1 FROM c) SELECT x FROM c;"
                  "CREATE TRIGGER t1 AFTER UPDATE ON meta BEGIN INSERT INTO log VALUES (1); END;"
                  "CREATE TRIGGER t2 BEFORE DELETE ON sample_chunks BEGIN "
                  "SELECT RAISE(ABORT, 'planted'); END;");
        struct trace_reader *r = NULL;
        if (trace_reader_open(f->path, &r) != 0)
                fail_msg("open: %s", trace_reader_errmsg(r));
        struct trace_summary s;
        assert_int_equal(trace_reader_summary(r, &s), 0);
        assert_int_equal(s.samples, TU_SAMPLES);
        uint64_t *counts = NULL, total = 0;
        assert_int_equal(trace_reader_count_by_stack(r, NULL, &counts, &total), 0);
        assert_int_equal(total, TU_SAMPLES);
        free(counts);
        trace_reader_close(r);

        damage(f, "ALTER TABLE frames RENAME TO frames_real;"
                  "CREATE VIEW frames AS SELECT * FROM frames_real");
        expect_open(f->path, TRACE_ERR_NOT_TRACE, "no table \"frames\"");
        damage(f, "ALTER TABLE stacks RENAME TO stacks_real;"
                  "CREATE VIEW stacks(id, parent, frame, depth) AS WITH RECURSIVE c(x) AS "
                  "(SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x, 0, 1, 1 FROM c");
        expect_open(f->path, TRACE_ERR_NOT_TRACE, "no table \"stacks\"");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_missing, setup, teardown),
            cmocka_unit_test_setup_teardown(test_not_sqlite, setup, teardown),
            cmocka_unit_test_setup_teardown(test_not_trace, setup, teardown),
            cmocka_unit_test_setup_teardown(test_too_new, setup, teardown),
            cmocka_unit_test_setup_teardown(test_truncated, setup, teardown),
            cmocka_unit_test_setup_teardown(test_damaged_tables, setup, teardown),
            cmocka_unit_test_setup_teardown(test_damaged_blobs, setup, teardown),
            cmocka_unit_test_setup_teardown(test_random_damage, setup, teardown),
            cmocka_unit_test_setup_teardown(test_hot_journal, setup, teardown),
            cmocka_unit_test_setup_teardown(test_planted, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
