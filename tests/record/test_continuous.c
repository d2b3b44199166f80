/*
 * test_continuous.c - the parts of continuous recording that need no
 * interpreter: the names of a rotation's files (rotation_name), --on-rotate
 * run once per file in order, retention by size deleting the oldest files
 * only, retention by age counted on the files' cuts, the files the live
 * view lists (rotation_files), the files an earlier recording left counted
 * toward retention (only those named and made as ours, oldest first) and
 * the lock that keeps a second recorder with retention off the same names,
 * and the /proc scan
 * of --match (a process told once, a new process under the same
 * expression told again, a bad expression refused).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "procmatch.h"
#include "rotation.h"

static char dir[] = "/tmp/pyflame-continuous-XXXXXX";

static void write_bytes(const char *path, size_t n)
{
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        for (size_t i = 0; i < n; i++)
                fputc('x', f);
        fclose(f);
}

static void test_names(void **state)
{
        (void)state;
        char out[512], buf[600], err[256];
        snprintf(out, sizeof(out), "%s/run.db", dir);
        struct rotation_opts o = {.output = out, .quiet = true};
        struct rotation *rot;
        assert_int_equal(rotation_new(&o, &rot, err, sizeof(err)), 0);
        /* 2026-12-02 13:15:00 UTC */
        int64_t t = 1796217300LL * 1000000000LL;
        assert_int_equal(rotation_name(rot, t, false, buf, sizeof(buf)), 0);
        snprintf(out, sizeof(out), "%s/run-20261202T131500Z.db", dir);
        assert_string_equal(buf, out);
        write_bytes(buf, 1);
        /* A second file in the same second. */
        assert_int_equal(rotation_name(rot, t, false, buf, sizeof(buf)), 0);
        snprintf(out, sizeof(out), "%s/run-20261202T131500Z-2.db", dir);
        assert_string_equal(buf, out);
        assert_int_equal(rotation_name(rot, t, true, buf, sizeof(buf)), 0);
        snprintf(out, sizeof(out), "%s/run-snapshot-20261202T131500Z.db", dir);
        assert_string_equal(buf, out);
        assert_int_equal(rotation_name(rot, t, false, buf, 10), -1);
        rotation_free(rot);

        /* No directory, no extension. */
        struct rotation_opts bare = {.output = "trace", .quiet = true};
        assert_int_equal(rotation_new(&bare, &rot, err, sizeof(err)), 0);
        assert_int_equal(rotation_name(rot, t, false, buf, sizeof(buf)), 0);
        assert_string_equal(buf, "trace-20261202T131500Z");
        rotation_free(rot);
}

/* Files f0..f3 finished in turn, f4 current; 1000 bytes each; keep 2500. */
static void test_on_rotate_and_keep_size(void **state)
{
        (void)state;
        char out[512], log[512], cmd[600], err[256], f[5][512], decoy[512];
        snprintf(out, sizeof(out), "%s/keep.db", dir);
        snprintf(log, sizeof(log), "%s/on-rotate.log", dir);
        snprintf(cmd, sizeof(cmd), "echo >>%s", log);
        snprintf(decoy, sizeof(decoy), "%s/keep-20000101T000000Z.db", dir);
        write_bytes(decoy, 5000);
        struct rotation_opts o = {
            .output = out, .on_rotate = cmd, .keep_bytes = 2500, .quiet = true};
        struct rotation *rot;
        assert_int_equal(rotation_new(&o, &rot, err, sizeof(err)), 0);
        for (int i = 0; i < 5; i++) {
                snprintf(f[i], sizeof(f[i]), "%s/keep-%d.db", dir, i);
                write_bytes(f[i], 1000);
                if (i)
                        rotation_finished(rot, i * 1000000000LL);
                rotation_set_current(rot, f[i]);
        }
        rotation_free(rot); /* waits for the commands and retention */
        /* Once per finished file, in order. */
        FILE *l = fopen(log, "r");
        assert_non_null(l);
        char line[600];
        for (int i = 0; i < 4; i++) {
                assert_non_null(fgets(line, sizeof(line), l));
                line[strcspn(line, "\n")] = 0;
                assert_string_equal(line, f[i]);
        }
        assert_null(fgets(line, sizeof(line), l));
        fclose(l);
        /* The oldest went; the newest and the one being written stayed; the decoy too. */
        assert_int_equal(access(f[0], F_OK), -1);
        assert_int_equal(access(f[1], F_OK), -1);
        assert_int_equal(access(f[2], F_OK), -1);
        assert_int_equal(access(f[3], F_OK), 0);
        assert_int_equal(access(f[4], F_OK), 0);
        assert_int_equal(access(decoy, F_OK), 0);
}

/*
 * --keep 3s (--ring 3s) with files cut every second, the cuts given on
 * the monotonic clock as the recorder passes them: however late the
 * worker thread runs, a file is deleted only when the files after it hold
 * all of the last 3 s, so a snapshot always covers the ring. The cut at
 * exactly 3 s before the newest is kept; one a nanosecond older is not.
 * Cuts 40 years into the clock: no wall clock is read.
 */
static void test_keep_by_cut(void **state)
{
        (void)state;
        char out[512], err[256], f[7][512];
        snprintf(out, sizeof(out), "%s/ring.db", dir);
        struct rotation_opts o = {.output = out, .keep_ns = 3000000000LL, .quiet = true};
        struct rotation *rot;
        assert_int_equal(rotation_new(&o, &rot, err, sizeof(err)), 0);
        const int64_t base = 40LL * 365 * 86400 * 1000000000LL, s = 1000000000LL;
        /* f0 ends at 1 s, f1 at 2 s - 1 ns, f2 at 2 s, f3 at 4 s, f4 at 5 s; f5 current. */
        const int64_t ends[] = {1 * s, 2 * s - 1, 2 * s, 4 * s, 5 * s};
        for (int i = 0; i < 6; i++) {
                snprintf(f[i], sizeof(f[i]), "%s/ring-%d.db", dir, i);
                write_bytes(f[i], 10);
                if (i)
                        rotation_finished(rot, base + ends[i - 1]);
                rotation_set_current(rot, f[i]);
        }
        /*
         * What the live view reads: every file made and still on disk, oldest
         * first, the current one last; not those retention deleted (its
         * thread may still be at work: wait for it), nor one deleted by hand.
         */
        char **listed = NULL;
        size_t n_listed = 0;
        for (int tries = 0; tries < 5000; tries++) {
                for (size_t i = 0; i < n_listed; i++)
                        free(listed[i]);
                free(listed);
                assert_int_equal(rotation_files(rot, &listed, &n_listed), 0);
                if (n_listed == 4)
                        break;
                usleep(1000);
        }
        assert_int_equal(n_listed, 4);
        for (int i = 0; i < 4; i++)
                assert_string_equal(listed[i], f[i + 2]);
        for (size_t i = 0; i < n_listed; i++)
                free(listed[i]);
        free(listed);
        unlink(f[3]);
        assert_int_equal(rotation_files(rot, &listed, &n_listed), 0);
        assert_int_equal(n_listed, 3);
        assert_string_equal(listed[0], f[2]);
        assert_string_equal(listed[1], f[4]);
        assert_string_equal(listed[2], f[5]);
        for (size_t i = 0; i < n_listed; i++)
                free(listed[i]);
        free(listed);
        write_bytes(f[3], 10);
        rotation_free(rot);
        /* Newest cut 5 s: f1 ended before 2 s, f2 at 2 s (3 s ago, not longer). */
        assert_int_equal(access(f[0], F_OK), -1);
        assert_int_equal(access(f[1], F_OK), -1);
        assert_int_equal(access(f[2], F_OK), 0);
        assert_int_equal(access(f[3], F_OK), 0);
        assert_int_equal(access(f[4], F_OK), 0);
        assert_int_equal(access(f[5], F_OK), 0);
}

/* A file that starts as SQLite's do, `n` bytes, last written `age_s` seconds ago. */
static void write_sqlite(const char *path, size_t n, long age_s)
{
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fwrite("SQLite format 3", 1, 16, f);
        for (size_t i = 16; i < n; i++)
                fputc(0, f);
        fclose(f);
        struct timespec ts[2];
        clock_gettime(CLOCK_REALTIME, &ts[0]);
        ts[0].tv_sec -= age_s;
        ts[1] = ts[0];
        assert_int_equal(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW), 0);
}

static bool exists(const char *d, const char *name)
{
        char p[700];
        snprintf(p, sizeof(p), "%s/%s", d, name);
        return access(p, F_OK) == 0 || (errno = 0, false);
}

static void test_earlier_recording(void **state)
{
        (void)state;
        char d[600], out[700], p[700], err[512];
        snprintf(d, sizeof(d), "%s/earlier", dir);
        assert_int_equal(mkdir(d, 0755), 0);
        snprintf(out, sizeof(out), "%s/svc.db", d);
        /*
         * An earlier recording's files: ten hours old (with a journal), two,
         * half an hour (each judged by its own age, whatever the names' order).
         */
        static const char *const old[] = {"svc-20261201T000000Z.db", "svc-20261201T000000Z-10.db",
                                          "svc-20261201T000000Z-2.db"};
        const long ages[] = {36000, 7200, 1800};
        for (int i = 0; i < 3; i++) {
                snprintf(p, sizeof(p), "%s/%s", d, old[i]);
                write_sqlite(p, 1000, ages[i]);
        }
        snprintf(p, sizeof(p), "%s/svc-20261201T000000Z.db-journal", d);
        write_bytes(p, 10);
        /* Not of the set, however old: other names, a snapshot, not SQLite, a link. */
        static const char *const decoys[] = {
            "svc-snapshot-20261201T000000Z.db", "svc-2026120T000000Z.db",
            "svc-20261201T000000Z.db.bak",      "svc-20261201T000000Z-1.db",
            "svcx-20261201T000000Z.db",         "other-20261201T000000Z.db"};
        for (size_t i = 0; i < sizeof(decoys) / sizeof(decoys[0]); i++) {
                snprintf(p, sizeof(p), "%s/%s", d, decoys[i]);
                write_sqlite(p, 1000, 36000);
        }
        snprintf(p, sizeof(p), "%s/svc-20261201T000001Z.db", d);
        write_bytes(p, 1000);
        struct timespec ts[2] = {{0, 0}, {0, 0}};
        assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
        char target[700];
        snprintf(target, sizeof(target), "%s/elsewhere.sqlite", d);
        write_sqlite(target, 1000, 36000);
        snprintf(p, sizeof(p), "%s/svc-20261201T000002Z.db", d);
        assert_int_equal(symlink(target, p), 0);

        /* --keep 1h: the files older than an hour go, their journal with them. */
        struct rotation_opts o = {.output = out, .keep_ns = 3600LL * 1000000000LL, .quiet = true};
        struct rotation *rot, *second;
        assert_int_equal(rotation_new(&o, &rot, err, sizeof(err)), 0);
        /* A second recorder with retention on the same names is refused, naming the first. */
        assert_int_equal(rotation_new(&o, &second, err, sizeof(err)), -2);
        char pid[32];
        snprintf(pid, sizeof(pid), "(pid %d)", (int)getpid());
        assert_non_null(strstr(err, pid));
        assert_non_null(strstr(err, "another -o"));
        /* One without retention deletes nothing: it needs no lock. */
        struct rotation_opts plain = {.output = out, .quiet = true};
        assert_int_equal(rotation_new(&plain, &second, err, sizeof(err)), 0);
        rotation_free(second);
        rotation_free(rot); /* waits for the retention it queued */
        assert_false(exists(d, "svc-20261201T000000Z.db"));
        assert_false(exists(d, "svc-20261201T000000Z.db-journal"));
        assert_false(exists(d, "svc-20261201T000000Z-10.db"));
        assert_true(exists(d, "svc-20261201T000000Z-2.db"));
        for (size_t i = 0; i < sizeof(decoys) / sizeof(decoys[0]); i++)
                assert_true(exists(d, decoys[i]));
        assert_true(exists(d, "svc-20261201T000001Z.db"));
        assert_true(exists(d, "svc-20261201T000002Z.db"));
        assert_true(exists(d, "elsewhere.sqlite"));

        /*
         * --keep-size 2500 over three 1000-byte files of an earlier run: the
         * oldest goes, in the order of the names' stamps and then of their
         * -N (-2 before -10, which sorts first as text).
         */
        snprintf(p, sizeof(p), "%s/svc-20261201T000000Z-10.db", d);
        write_sqlite(p, 1000, 60);
        snprintf(p, sizeof(p), "%s/svc-20261201T000003Z.db", d);
        write_sqlite(p, 1000, 60);
        struct rotation_opts sized = {.output = out, .keep_bytes = 2500, .quiet = true};
        assert_int_equal(rotation_new(&sized, &rot, err, sizeof(err)), 0);
        rotation_free(rot);
        assert_false(exists(d, "svc-20261201T000000Z-2.db"));
        assert_true(exists(d, "svc-20261201T000000Z-10.db"));
        assert_true(exists(d, "svc-20261201T000003Z.db"));
}

/*
 * A process whose command line carries `tag` and that never forks: sleep
 * with the tag as its argv[0]. (`sh -c "sleep 30" tag` forked a child that
 * carried the tag too until it exec'd sleep, and a scan could see it.)
 */
static pid_t start_tagged(const char *tag)
{
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                execl("/bin/sleep", tag, "30", (char *)NULL);
                _exit(127);
        }
        /* Until its command line is sleep's. */
        for (int i = 0; i < 5000; i++) {
                char path[64], buf[256] = "";
                snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
                FILE *f = fopen(path, "r");
                size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
                if (f)
                        fclose(f);
                if (n > 2 && !strcmp(buf, tag))
                        break;
                usleep(1000);
        }
        return pid;
}

static void stop(pid_t pid)
{
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
}

static void test_match_scan(void **state)
{
        (void)state;
        char tag[64], err[256];
        /* Ends in a letter, so that no other pid's tag has it as a prefix. */
        snprintf(tag, sizeof(tag), "pyflame-procmatch-%d-x", (int)getpid());
        struct procmatch *m;
        pid_t self = getpid();
        assert_int_equal(procmatch_new(tag, &self, 1, &m, err, sizeof(err)), 0);
        pid_t a = start_tagged(tag);
        pid_t *got = NULL;
        int n = procmatch_scan(m, &got);
        assert_int_equal(n, 1);
        assert_int_equal(got[0], a);
        free(got);
        /* Told once. */
        n = procmatch_scan(m, &got);
        assert_int_equal(n, 0);
        free(got);
        /* A new process is new, whatever the pid. */
        stop(a);
        pid_t b = start_tagged(tag);
        n = procmatch_scan(m, &got);
        assert_int_equal(n, 1);
        assert_int_equal(got[0], b);
        free(got);
        stop(b);
        procmatch_free(m);

        assert_int_equal(procmatch_new("([", NULL, 0, &m, err, sizeof(err)), -1);
        assert_non_null(strstr(err, "invalid --match"));
}

int main(void)
{
        if (!mkdtemp(dir))
                return 1;
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_names),       cmocka_unit_test(test_on_rotate_and_keep_size),
            cmocka_unit_test(test_keep_by_cut), cmocka_unit_test(test_earlier_recording),
            cmocka_unit_test(test_match_scan),
        };
        int rc = cmocka_run_group_tests(tests, NULL, NULL);
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0)
                rc = rc ? rc : 1;
        return rc;
}
