/*
 * test_sources.c - the recorder's source store (record/sources.c) on this
 * process's own files: what is stored (regular text files, members of a
 * zip archive with a shebang line in front, relative names from the working
 * directory) and what is not (FIFOs, which must not even block, directories,
 * binary files, files over the limits, relative names that climb out of the
 * working directory, "<string>"-style names), names queued once, the time
 * budget, the total limit; and the parsers it relies on: the credentials
 * in /proc/PID/status and sizes given on the command line.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "pfutil.h"
#include "procfs.h"
#include "sources.h"
#include "trace.h"

static void test_parse_creds(void **state)
{
        (void)state;
        static const char status[] = "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\n"
                                     "Uid:\t1000\t1001\t1002\t1003\n"
                                     "Gid:\t2000\t2001\t2002\t2003\n"
                                     "FDSize:\t64\nGroups:\t4 24 27 \n";
        struct procfs_creds c;
        assert_int_equal(procfs_parse_creds(status, sizeof(status) - 1, &c), 0);
        assert_int_equal(c.fsuid, 1003);
        assert_int_equal(c.fsgid, 2003);
        assert_int_equal(c.n_groups, 3);
        assert_int_equal(c.groups[0], 4);
        assert_int_equal(c.groups[2], 27);

        static const char none[] = "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\n";
        assert_int_equal(procfs_parse_creds(none, sizeof(none) - 1, &c), 0);
        assert_int_equal(c.fsuid, 0);
        assert_int_equal(c.n_groups, 0);

        /* Cut in the middle of the groups: the partial number is not a group. */
        static const char cut[] = "Uid:\t5\t5\t5\t5\nGid:\t6\t6\t6\t6\nGroups:\t10 20 12";
        assert_int_equal(procfs_parse_creds(cut, sizeof(cut) - 1, &c), 0);
        assert_int_equal(c.n_groups, 2);
        assert_int_equal(c.groups[1], 20);

        struct procfs_creds keep = c;
        static const char *const bad[] = {
            "Gid:\t6\t6\t6\t6\nGroups:\t\n",                    /* no Uid */
            "Uid:\t5\t5\t5\nGid:\t6\t6\t6\t6\nGroups:\t\n",     /* three ids */
            "Uid:\t5\t5\t5\t5x\nGid:\t6\t6\t6\t6\nGroups:\t\n", /* not a number */
            "Uid:\t5\t5\t5\t99999999999\nGid:\t6\t6\t6\t6\nGroups:\t\n",
            "Uid:\t5\t5\t5\t5\nGid:\t6\t6\t6\t6\n", /* no Groups */
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                assert_int_equal(procfs_parse_creds(bad[i], strlen(bad[i]), &c), -EINVAL);
        assert_memory_equal(&c, &keep, sizeof(c));

        assert_int_equal(procfs_creds(getpid(), &c), 0);
        assert_int_equal(c.fsuid, geteuid());
        assert_int_equal(c.fsgid, getegid());
}

static void test_parse_size(void **state)
{
        (void)state;
        uint64_t v = 7;
        assert_int_equal(pf_parse_size("4096", &v), 0);
        assert_int_equal(v, 4096);
        assert_int_equal(pf_parse_size("512k", &v), 0);
        assert_int_equal(v, 512 * 1024);
        assert_int_equal(pf_parse_size("64M", &v), 0);
        assert_int_equal(v, 64ull << 20);
        assert_int_equal(pf_parse_size("1GiB", &v), 0);
        assert_int_equal(v, 1ull << 30);
        assert_int_equal(pf_parse_size("0", &v), 0);
        assert_int_equal(v, 0);
        static const char *const bad[] = {
            "", "-1", "+1", "1.5M", "12 k", "1T", "lots", "99999999999999999999", "17179869184G"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                v = 7;
                assert_int_equal(pf_parse_size(bad[i], &v), -1);
                assert_int_equal(v, 7);
        }
}

struct fixture {
        char dir[PATH_MAX];
        char old_cwd[PATH_MAX];
        char db[PATH_MAX + 16];
        struct trace_writer *w;
};

static void write_file(const char *dir, const char *name, const void *data, size_t len)
{
        char path[PATH_MAX * 2];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(data, 1, len, f), len);
        assert_int_equal(fclose(f), 0);
}

/* A zip archive after a shebang line, as zipapp writes .pyz files. */
static void write_pyz(const char *path, const char *member, const char *text)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        assert_true(fd >= 0);
        static const char shebang[] = "#!/usr/bin/env python3\n";
        assert_int_equal(write(fd, shebang, sizeof(shebang) - 1), (ssize_t)sizeof(shebang) - 1);
        struct archive *a = archive_write_new();
        assert_int_equal(archive_write_set_format_zip(a), ARCHIVE_OK);
        assert_int_equal(archive_write_open_fd(a, fd), ARCHIVE_OK);
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, member);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0644);
        archive_entry_set_size(e, (la_int64_t)strlen(text));
        archive_entry_set_mtime(e, 1700000000, 0);
        assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
        assert_int_equal(archive_write_data(a, text, strlen(text)), (la_ssize_t)strlen(text));
        archive_entry_free(e);
        assert_int_equal(archive_write_close(a), ARCHIVE_OK);
        archive_write_free(a);
        close(fd);
}

static int setup(void **state)
{
        struct fixture *f = calloc(1, sizeof(*f));
        snprintf(f->dir, sizeof(f->dir), "/tmp/pyflame-sources-XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        assert_non_null(getcwd(f->old_cwd, sizeof(f->old_cwd)));
        /* Relative names resolve from the watched process's working directory: ours. */
        char work[PATH_MAX + 8];
        snprintf(work, sizeof(work), "%s/work", f->dir);
        assert_int_equal(mkdir(work, 0755), 0);
        assert_int_equal(chdir(work), 0);
        snprintf(f->db, sizeof(f->db), "%s/t.db", f->dir);
        assert_int_equal(trace_writer_create(f->db, 0, &f->w), 0);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fixture *f = *state;
        trace_writer_free(f->w);
        assert_int_equal(chdir(f->old_cwd), 0);
        char cmd[PATH_MAX + 16];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
        assert_int_equal(system(cmd), 0);
        free(f);
        return 0;
}

/* The text stored for `file` (malloc'ed), or NULL when none. */
static char *stored(struct trace_reader *r, const char *file)
{
        char *data = NULL;
        size_t len = 0;
        int rc = trace_reader_source(r, file, &data, &len);
        assert_true(rc == 0 || rc == 1);
        return rc == 1 ? data : NULL;
}

static struct trace_reader *finish(struct fixture *f)
{
        assert_int_equal(trace_writer_finalize(f->w), 0);
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(f->db, &r), 0);
        return r;
}

static void test_what_is_stored(void **state)
{
        struct fixture *f = *state;
        char path[PATH_MAX * 2];
        write_file(f->dir, "a.py", "x = 1\n", 6);
        write_file(f->dir, "work/rel.py", "y = 2\n", 6);
        write_file(f->dir, "escape.py", "z = 3\n", 6);
        write_file(f->dir, "nul.py", "a\0b\n", 4);
        char *big = malloc(2048);
        memset(big, '#', 2048);
        write_file(f->dir, "big.py", big, 2048);
        free(big);
        snprintf(path, sizeof(path), "%s/fifo.py", f->dir);
        assert_int_equal(mkfifo(path, 0644), 0);
        snprintf(path, sizeof(path), "%s/dir.py", f->dir);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof(path), "%s/app.pyz", f->dir);
        write_pyz(path, "pkg/mod.py", "def f():\n    return 42\n");

        struct sources_limits lim = {1024, 1 << 20};
        struct sources *s = NULL;
        char err[256];
        assert_int_equal(sources_new(f->w, &lim, &s, err, sizeof(err)), 0);
        int h = sources_watch(s, getpid());
        assert_true(h >= 0);
        static const char *const names[] = {
            "a.py",
            "fifo.py",
            "dir.py",
            "nul.py",
            "big.py",
            "app.pyz/pkg/mod.py",
            "app.pyz/pkg/none.py",
            "a.py/deeper.py",
        };
        char full[sizeof(names) / sizeof(names[0])][PATH_MAX * 2];
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
                snprintf(full[i], sizeof(full[i]), "%s/%s", f->dir, names[i]);
                sources_note(s, h, full[i]);
                sources_note(s, h, full[i]); /* once is enough */
        }
        sources_note(s, h, "rel.py");
        sources_note(s, h, "../escape.py"); /* above the working directory */
        sources_note(s, h, "<string>");
        sources_note(s, h, "<frozen importlib._bootstrap>");
        sources_note(s, h, "/proc/self/status");
        sources_note(s, h, "");
        struct sources_stats st;
        sources_get_stats(s, &st);
        assert_int_equal(st.queued, 10);
        sources_pump(s, -1);
        sources_get_stats(s, &st);
        assert_int_equal(st.queued, 0);
        assert_int_equal(st.files, 3);
        assert_int_equal(st.bytes, 6 + 6 + 23);
        assert_int_equal(st.skipped, 7);
        sources_free(s);

        struct trace_reader *r = finish(f);
        assert_int_equal(trace_reader_source_count(r), 3);
        char *t = stored(r, full[0]);
        assert_string_equal(t, "x = 1\n");
        free(t);
        t = stored(r, full[5]);
        assert_string_equal(t, "def f():\n    return 42\n");
        free(t);
        t = stored(r, "rel.py");
        assert_string_equal(t, "y = 2\n");
        free(t);
        for (uint32_t i = 0; i < trace_reader_source_count(r); i++) {
                struct trace_source src;
                assert_int_equal(trace_reader_source_at(r, i, &src), 0);
                if (!strcmp(src.file, full[5]))
                        assert_int_equal(src.mtime_ns, 1700000000LL * 1000000000);
                else
                        assert_true(src.mtime_ns > 0);
        }
        trace_reader_close(r);
}

/* Files PREFIX0.py .. PREFIX<n-1>.py holding `text`, their full names in name[]. */
static void write_numbered(const struct fixture *f, const char *prefix, int n, const char *text,
                           char (*name)[PATH_MAX * 2])
{
        for (int i = 0; i < n; i++) {
                char file[16];
                snprintf(file, sizeof(file), "%s%d.py", prefix, i);
                write_file(f->dir, file, text, strlen(text));
                snprintf(name[i], sizeof(name[i]), "%s/%s", f->dir, file);
        }
}

static void test_budget_and_total(void **state)
{
        struct fixture *f = *state;
        char name[3][PATH_MAX * 2];
        write_numbered(f, "f", 3, "0123456789\n", name);
        struct sources_limits lim = {1024, 25}; /* two files fit, not three */
        struct sources *s = NULL;
        char err[256];
        assert_int_equal(sources_new(f->w, &lim, &s, err, sizeof(err)), 0);
        int h = sources_watch(s, getpid());
        for (int i = 0; i < 3; i++)
                sources_note(s, h, name[i]);
        /* No time to spare: one file per pump all the same. */
        struct sources_stats st;
        sources_pump(s, 0);
        sources_get_stats(s, &st);
        assert_int_equal(st.files, 1);
        assert_int_equal(st.queued, 2);
        /* Unwatched: what it queued is still read. */
        sources_unwatch(s, getpid());
        sources_pump(s, -1);
        sources_get_stats(s, &st);
        assert_int_equal(st.files, 2);
        assert_int_equal(st.bytes, 22);
        assert_int_equal(st.skipped, 1);
        assert_int_equal(st.queued, 0);
        sources_free(s);
        struct trace_reader *r = finish(f);
        assert_int_equal(trace_reader_source_count(r), 2);
        trace_reader_close(r);
}

/*
 * A recorder following a service sees processes come and go for months: the
 * handle of one that is gone, and whose files are read, is taken again (the
 * store grew by a kilobyte per process before); never while its files wait.
 */
static void test_handles_reused(void **state)
{
        struct fixture *f = *state;
        char name[2][PATH_MAX * 2];
        write_numbered(f, "g", 2, "z = 3\n", name);
        struct sources_limits lim = {1024, 1 << 20};
        struct sources *s = NULL;
        char err[256];
        assert_int_equal(sources_new(f->w, &lim, &s, err, sizeof(err)), 0);
        pid_t me = getpid();
        int first = sources_watch(s, me);
        assert_true(first >= 0);
        sources_note(s, first, name[0]);
        sources_unwatch(s, me);
        /* Its file still queued: its slot is not free yet. */
        int second = sources_watch(s, me);
        assert_true(second >= 0);
        assert_int_not_equal(second, first);
        /* An unwatched handle takes no more names. */
        sources_note(s, first, name[1]);
        struct sources_stats st;
        sources_get_stats(s, &st);
        assert_int_equal(st.queued, 1);
        sources_pump(s, -1);
        sources_unwatch(s, me);
        /* Both gone and read: a thousand processes more use those two slots. */
        for (int i = 0; i < 1000; i++) {
                int h = sources_watch(s, me);
                assert_true(h == first || h == second);
                sources_unwatch(s, me);
        }
        int h = sources_watch(s, me);
        sources_note(s, h, name[1]);
        sources_pump(s, -1);
        sources_get_stats(s, &st);
        assert_int_equal(st.files, 2);
        assert_int_equal(st.skipped, 0);
        sources_free(s);
        struct trace_reader *r = finish(f);
        assert_int_equal(trace_reader_source_count(r), 2);
        trace_reader_close(r);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_parse_creds),
            cmocka_unit_test(test_parse_size),
            cmocka_unit_test_setup_teardown(test_what_is_stored, setup, teardown),
            cmocka_unit_test_setup_teardown(test_budget_and_total, setup, teardown),
            cmocka_unit_test_setup_teardown(test_handles_reused, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
