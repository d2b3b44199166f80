/*
 * test_locks.c - the reader never closes a descriptor of the trace file while
 * SQLite has the file open. POSIX record locks belong to a process and a
 * file: closing any descriptor of the file drops all of them, SQLite's shared
 * read lock included, and a recorder writing the trace could then commit in
 * the middle of a read (a read of a live trace in a few hundred came out
 * "malformed" when the truncation check opened the file again and closed
 * it).
 *
 * close() is interposed: closing a descriptor of the trace (same device and
 * inode) while another descriptor of it is open in this process is counted
 * as a violation (SQLite's own descriptor is the other one).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "testutil.h"
#include "trace.h"

static struct stat watched;
static bool watching;
static int violations;

/* Descriptors of this process open on the watched file, `fd` left out. */
static int others_open(int fd)
{
        DIR *d = opendir("/proc/self/fd");
        int n = 0;
        struct dirent *de;
        while (d && (de = readdir(d))) {
                int other = atoi(de->d_name);
                struct stat st;
                if (de->d_name[0] == '.' || other == fd || other == dirfd(d) ||
                    fstat(other, &st) < 0)
                        continue;
                n += st.st_dev == watched.st_dev && st.st_ino == watched.st_ino;
        }
        if (d)
                closedir(d);
        return n;
}

int close(int fd);
int close(int fd)
{
        static int (*real_close)(int);
        if (!real_close)
                real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
        struct stat st;
        if (watching && fstat(fd, &st) == 0 && st.st_dev == watched.st_dev &&
            st.st_ino == watched.st_ino) {
                watching = false; /* others_open() closes its directory */
                violations += others_open(fd) > 0;
                watching = true;
        }
        return real_close(fd);
}

static void read_all(const char *path)
{
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(path, &r), 0);
        uint64_t *counts, total;
        assert_int_equal(trace_reader_count_by_stack(r, NULL, &counts, &total), 0);
        free(counts);
        trace_reader_close(r);
}

static void test_no_close_behind_sqlite(void **state)
{
        (void)state;
        char *dir = tu_mkdtemp();
        char *path = tu_path(dir, "t.db");
        struct tu_reference ref;
        tu_write_reference(path, &ref, true, 0);
        assert_int_equal(stat(path, &watched), 0);
        watching = true;
        violations = 0;
        read_all(path);
        /* A trace never finalized, which the reader checks for truncation too. */
        char *partial = tu_path(dir, "partial.db");
        tu_write_reference(partial, &ref, false, TU_SAMPLES / 2);
        assert_int_equal(stat(partial, &watched), 0);
        read_all(partial);
        watching = false;
        assert_int_equal(violations, 0);
        free(path);
        free(partial);
        tu_rmdir(dir);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_no_close_behind_sqlite),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
