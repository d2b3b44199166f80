/*
 * test_rotate.c - trace_writer_rotate() and trace_join_segments(): every
 * file of a rotation is a complete trace on its own (frames, stacks,
 * threads with their names, processes, sources, meta), the samples of the
 * files add up to those written, each exactly once, with the cut between
 * them; the joined trace is the one recording again, on one time line; a
 * rotation to a path that exists leaves the writer writing where it was;
 * and files that do not follow each other are not joined. Reading a set
 * (trace_reader_open_set): the files in any order read as the joined
 * trace, a missing file a gap with its span and segment, files of another
 * set, given twice or already joined refused, nothing left in TMPDIR; the
 * samples read from the files in place, as the joined trace has them, and
 * a file removed while the set is open an error naming it; a file with a
 * hot journal read from a rolled-back copy, never rolled back in place.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dirent.h>
#include <sys/inotify.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include <cmocka.h>

#include "pfutil.h"
#include "testutil.h"
#include "trace.h"
#include "trace_internal.h"

#define PER_FILE 1000 /* samples per thread and file */
#define STEP_NS  1000 /* between two samples of a thread */

struct fixture {
        char *dir;
        char *file[3];
        char *joined;
        int64_t cut[2];
        int64_t origin;
        uint32_t stack[3];
};

static struct trace_reader *open_or_fail(const char *path)
{
        struct trace_reader *r = NULL;
        if (trace_reader_open(path, &r) != 0)
                fail_msg("open %s: %s", path, trace_reader_errmsg(r));
        return r;
}

static int setup(void **state)
{
        struct fixture *f = calloc(1, sizeof(*f));
        f->dir = tu_mkdtemp();
        for (int i = 0; i < 3; i++) {
                char name[32];
                snprintf(name, sizeof(name), "seg%d.db", i);
                f->file[i] = tu_path(f->dir, name);
        }
        f->joined = tu_path(f->dir, "joined.db");

        struct trace_writer *w = NULL;
        tu_must(w, trace_writer_create(f->file[0], 0, &w), "create");
        f->origin = trace_writer_origin_ns(w);
        tu_must(w, trace_writer_set_meta(w, TRACE_META_SEGMENT_SET, "set-1"), "meta");
        tu_must(w, trace_writer_set_meta(w, TRACE_META_RATE_HZ, "100"), "meta");
        struct trace_process_desc p = {.pid = 42, .cmdline = "python app.py"};
        tu_must(w, trace_writer_add_process(w, &p), "process");
        uint32_t thread[2];
        for (int i = 0; i < 2; i++) {
                struct trace_thread_desc t = {.pid = 42, .tid = 42 + i, .name = "worker"};
                tu_must(w, trace_writer_add_thread(w, &t, &thread[i]), "thread");
        }
        const char *fn[] = {"main", "work", "idle"};
        uint32_t parent = TRACE_STACK_EMPTY;
        for (int i = 0; i < 3; i++) {
                struct trace_frame_desc fd = {fn[i], NULL, "app.py", 10 + i, 1, TRACE_FRAME_PYTHON};
                uint32_t frame;
                tu_must(w, trace_writer_intern_frame(w, &fd, &frame), "frame");
                tu_must(w, trace_writer_intern_stack(w, parent, frame, &f->stack[i]), "stack");
                parent = f->stack[i];
        }
        tu_must(w, trace_writer_add_source(w, "app.py", "def main():\n    work()\n", 23, -1),
                "source");
        /* Three stretches of samples, a rotation between them. */
        int64_t t = f->origin;
        for (int file = 0; file < 3; file++) {
                for (int k = 0; k < PER_FILE; k++) {
                        t += STEP_NS;
                        for (int i = 0; i < 2; i++)
                                tu_must(w,
                                        trace_writer_add_sample(w, thread[i], t,
                                                                f->stack[(k + i + file) % 3], 1),
                                        "sample");
                }
                tu_must(w, trace_writer_count_error(w, 42, TRACE_ERROR_TORN, 1), "error");
                if (file == 2)
                        break;
                /* Wait until the cut is in the past, as the recorder's always is. */
                int64_t cut = t + STEP_NS / 2;
                while (pf_now_mono_ns() < cut)
                        ;
                f->cut[file] = cut;
                tu_must(w, trace_writer_rotate(w, f->file[file + 1], 0, cut), "rotate");
        }
        tu_must(w, trace_writer_finalize(w), "finalize");
        trace_writer_free(w);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fixture *f = *state;
        for (int i = 0; i < 3; i++)
                free(f->file[i]);
        free(f->joined);
        tu_rmdir(f->dir);
        free(f);
        return 0;
}

static int64_t meta_int(struct trace_reader *r, const char *key)
{
        const char *v = trace_reader_meta(r, key);
        assert_non_null(v);
        return strtoll(v, NULL, 10);
}

/* Each file on its own: complete, its own samples only, times from its own start. */
static void test_each_file_complete(void **state)
{
        struct fixture *f = *state;
        for (int file = 0; file < 3; file++) {
                struct trace_reader *r = open_or_fail(f->file[file]);
                struct trace_summary s;
                assert_int_equal(trace_reader_summary(r, &s), 0);
                assert_true(s.finalized);
                assert_int_equal(s.samples, 2 * PER_FILE);
                assert_int_equal(s.errors[TRACE_ERROR_TORN], 1);
                assert_int_equal(s.frames, 3);
                assert_int_equal(s.stacks, 4);
                assert_int_equal(s.threads, 2);
                assert_int_equal(s.processes, 1);
                assert_string_equal(trace_reader_meta(r, TRACE_META_RATE_HZ), "100");
                assert_string_equal(trace_reader_meta(r, TRACE_META_SEGMENT_SET), "set-1");
                if (file)
                        assert_int_equal(meta_int(r, TRACE_META_SEGMENT), file + 1);
                int64_t start = file ? f->cut[file - 1] : f->origin;
                assert_int_equal(meta_int(r, TRACE_META_START_MONO_NS), start);
                if (file < 2) {
                        assert_int_equal(meta_int(r, TRACE_META_END_MONO_NS), f->cut[file]);
                        assert_int_equal(meta_int(r, TRACE_META_DURATION_NS), f->cut[file] - start);
                }
                for (uint32_t i = 0; i < 2; i++) {
                        struct trace_thread th;
                        assert_int_equal(trace_reader_thread_at(r, i, &th), 0);
                        assert_string_equal(th.name, "worker");
                        assert_int_equal(th.samples, PER_FILE);
                        /* The first sample of a file is the one after the cut: one step on. */
                        int64_t first_abs = f->origin + ((int64_t)file * PER_FILE + 1) * STEP_NS;
                        assert_int_equal(th.first_ns, first_abs - start);
                        assert_int_equal(th.last_ns, first_abs - start + (PER_FILE - 1) * STEP_NS);
                }
                char *text = NULL;
                size_t len = 0;
                assert_int_equal(trace_reader_source(r, "app.py", &text, &len), 1);
                assert_int_equal(len, 23);
                free(text);
                uint64_t *counts = NULL, total = 0;
                assert_int_equal(trace_reader_count_by_stack(r, NULL, &counts, &total), 0);
                assert_int_equal(total, 2 * PER_FILE);
                free(counts);
                trace_reader_close(r);
        }
}

static int add_time(void *ctx, const struct trace_sample *s)
{
        int64_t *t = ctx;
        /* Samples of one thread come in time order; thread 1's are checked. */
        if (s->thread != 1)
                return 0;
        if (t[1] != INT64_MIN && s->t_ns != t[1] + STEP_NS)
                return 1;
        t[1] = s->t_ns;
        t[0]++;
        return 0;
}

/* The joined trace: the one recording, on one time line, every sample once. */
static void test_join(void **state)
{
        struct fixture *f = *state;
        const char *paths[] = {f->file[0], f->file[1], f->file[2]};
        struct trace_writer *w = NULL;
        if (trace_join_segments(f->joined, 0, paths, 3, &w) != 0)
                fail_msg("join: %s", trace_writer_errmsg(w));
        trace_writer_free(w);
        struct trace_reader *r = open_or_fail(f->joined);
        struct trace_summary s;
        assert_int_equal(trace_reader_summary(r, &s), 0);
        assert_int_equal(s.samples, 3 * 2 * PER_FILE);
        assert_int_equal(s.errors[TRACE_ERROR_TORN], 3);
        assert_int_equal(s.threads, 2);
        assert_int_equal(meta_int(r, TRACE_META_START_MONO_NS), f->origin);
        struct trace_thread th;
        assert_int_equal(trace_reader_thread_at(r, 0, &th), 0);
        assert_int_equal(th.samples, 3 * PER_FILE);
        assert_int_equal(th.first_ns, STEP_NS);
        assert_int_equal(th.last_ns, 3 * PER_FILE * STEP_NS);
        /* Thread 1's samples: one every step, none missing, none twice. */
        int64_t seen[2] = {0, INT64_MIN};
        assert_int_equal(trace_reader_foreach_sample(r, NULL, add_time, seen), 0);
        assert_int_equal(seen[0], 3 * PER_FILE);
        uint64_t *counts = NULL, total = 0;
        assert_int_equal(trace_reader_count_by_stack(r, NULL, &counts, &total), 0);
        assert_int_equal(total, 3 * 2 * PER_FILE);
        free(counts);
        char *text = NULL;
        size_t len = 0;
        assert_int_equal(trace_reader_source(r, "app.py", &text, &len), 1);
        free(text);
        trace_reader_close(r);
}

/*
 * A file that fails to join says why: SQLite's message of the statement
 * that failed (it once said "not an error": the ROLLBACK after it had
 * replaced the message), and which file.
 */
static void test_join_says_why(void **state)
{
        struct fixture *f = *state;
        char *d = tu_mkdtemp();
        char *broken = tu_path(d, "broken.db"), *joined = tu_path(d, "joined.db");
        tu_copy_file(f->file[1], broken);
        sqlite3 *db;
        assert_int_equal(sqlite3_open(broken, &db), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db, "DROP TABLE errors", NULL, NULL, NULL), SQLITE_OK);
        sqlite3_close(db);
        const char *paths[] = {f->file[0], broken, f->file[2]};
        struct trace_writer *w = NULL;
        assert_true(trace_join_segments(joined, 0, paths, 3, &w) < 0);
        const char *msg = trace_writer_errmsg(w);
        if (!strstr(msg, "broken.db") || !strstr(msg, "no such table"))
                fail_msg("message: %s", msg);
        trace_writer_free(w);
        assert_int_equal(access(joined, F_OK), -1);
        unlink(broken);
        rmdir(d);
        free(broken);
        free(joined);
        free(d);
}

/* A file missing in the middle is a gap: refused, and no output is left. */
static void test_join_refuses_gap(void **state)
{
        struct fixture *f = *state;
        const char *paths[] = {f->file[0], f->file[2]};
        struct trace_writer *w = NULL;
        assert_int_equal(trace_join_segments(f->joined, TRACE_CREATE_FORCE, paths, 2, &w),
                         TRACE_ERR_ARG);
        assert_non_null(strstr(trace_writer_errmsg(w), "does not follow"));
        trace_writer_free(w);
        assert_int_equal(access(f->joined, F_OK), -1);
}

/* Entries in directory `dir` (not . and ..). */
static int dir_entries(const char *dir)
{
        DIR *d = opendir(dir);
        assert_non_null(d);
        int n = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
                n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
        closedir(d);
        return n;
}

/* Set TMPDIR to a fresh directory; returns it (and the old value in *old). */
static char *private_tmpdir(char **old)
{
        char *tmp = tu_mkdtemp();
        *old = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
        setenv("TMPDIR", tmp, 1);
        return tmp;
}

/*
 * How many pyflame-* entries were made in the directory the inotify watch
 * `in` looks at: a set's directory (pyflame-set-*), and one more for each
 * file rolled back apart (pyflame-rollback-*).
 */
static int created_in(int in)
{
        union {
                struct inotify_event ev;
                char buf[8192];
        } u;
        int n = 0;
        ssize_t len;
        while ((len = read(in, u.buf, sizeof(u.buf))) > 0)
                for (char *p = u.buf; p < u.buf + len;) {
                        struct inotify_event *ev = (struct inotify_event *)p;
                        if (ev->len && !strncmp(ev->name, "pyflame-", 8))
                                n++;
                        p += sizeof(*ev) + ev->len;
                }
        return n;
}

static void restore_tmpdir(char *tmp, char *old)
{
        if (old)
                setenv("TMPDIR", old, 1);
        else
                unsetenv("TMPDIR");
        free(old);
        tu_rmdir(tmp);
}

/* The files in any order read as the joined trace; the temporary copy is gone. */
static void test_open_set(void **state)
{
        struct fixture *f = *state;
        char *old, *tmp = private_tmpdir(&old);
        const char *paths[] = {f->file[2], f->file[0], f->file[1]};
        struct trace_reader *r = NULL;
        if (trace_reader_open_set(paths, 3, &r) != 0)
                fail_msg("open set: %s", trace_reader_errmsg(r));
        assert_int_equal(dir_entries(tmp), 0);
        struct trace_summary s;
        assert_int_equal(trace_reader_summary(r, &s), 0);
        assert_int_equal(s.samples, 3 * 2 * PER_FILE);
        assert_int_equal(s.errors[TRACE_ERROR_TORN], 3);
        assert_true(s.finalized);
        assert_int_equal(meta_int(r, TRACE_META_START_MONO_NS), f->origin);
        assert_int_equal(trace_reader_gap_count(r), 0);
        int64_t seen[2] = {0, INT64_MIN};
        assert_int_equal(trace_reader_foreach_sample(r, NULL, add_time, seen), 0);
        assert_int_equal(seen[0], 3 * PER_FILE);
        trace_reader_close(r);
        restore_tmpdir(tmp, old);
}

/* A missing middle file: a gap, its span the missing file's, no sample in it. */
static void test_open_set_gap(void **state)
{
        struct fixture *f = *state;
        const char *paths[] = {f->file[0], f->file[2]};
        struct trace_reader *r = NULL;
        if (trace_reader_open_set(paths, 2, &r) != 0)
                fail_msg("open set: %s", trace_reader_errmsg(r));
        struct trace_summary s;
        assert_int_equal(trace_reader_summary(r, &s), 0);
        assert_int_equal(s.samples, 2 * 2 * PER_FILE);
        assert_int_equal(trace_reader_gap_count(r), 1);
        struct trace_gap g;
        assert_int_equal(trace_reader_gap_at(r, 0, &g), 0);
        assert_int_equal(g.from_ns, f->cut[0] - f->origin);
        assert_int_equal(g.to_ns, f->cut[1] - f->origin);
        assert_int_equal(g.first_segment, 2);
        assert_int_equal(g.last_segment, 2);
        assert_int_equal(trace_reader_gap_at(r, 1, &g), TRACE_ERR_ARG);
        /* No sample lies in the gap. */
        struct trace_filter in_gap = {.from_ns = g.from_ns, .to_ns = g.to_ns};
        uint64_t *counts = NULL, total = 7;
        assert_int_equal(trace_reader_count_by_stack(r, &in_gap, &counts, &total), 0);
        assert_int_equal(total, 0);
        free(counts);
        trace_reader_close(r);
}

/* Every sample a reader visits, in order. */
struct sample_log {
        struct trace_sample *s;
        size_t n, cap;
};

static int log_sample(void *ctx, const struct trace_sample *s)
{
        struct sample_log *l = ctx;
        if (l->n == l->cap) {
                l->cap = l->cap ? 2 * l->cap : 1024;
                l->s = realloc(l->s, l->cap * sizeof(*l->s));
                assert_non_null(l->s);
        }
        l->s[l->n++] = *s;
        return 0;
}

static void assert_same_samples(const struct sample_log *a, const struct sample_log *b)
{
        assert_int_equal(a->n, b->n);
        for (size_t i = 0; i < a->n; i++) {
                assert_int_equal(a->s[i].t_ns, b->s[i].t_ns);
                assert_int_equal(a->s[i].thread, b->s[i].thread);
                assert_int_equal(a->s[i].stack, b->s[i].stack);
                assert_int_equal(a->s[i].state, b->s[i].state);
        }
}

/*
 * A set's samples are read from its files in place: the same samples, in
 * the same order, as the joined trace, scan after scan and through a time
 * window that starts in a later file; a file removed after the set was
 * opened is an error that names it, never samples left out in silence.
 */
static void test_open_set_in_place(void **state)
{
        struct fixture *f = *state;
        const char *paths[] = {f->file[1], f->file[2], f->file[0]};
        struct trace_writer *w = NULL;
        if (trace_join_segments(f->joined, TRACE_CREATE_FORCE,
                                (const char *const[]){f->file[0], f->file[1], f->file[2]}, 3,
                                &w) != 0)
                fail_msg("join: %s", trace_writer_errmsg(w));
        trace_writer_free(w);
        struct trace_reader *joined = open_or_fail(f->joined), *set = NULL;
        if (trace_reader_open_set(paths, 3, &set) != 0)
                fail_msg("open set: %s", trace_reader_errmsg(set));
        struct sample_log want = {0}, got = {0}, again = {0};
        assert_int_equal(trace_reader_foreach_sample(joined, NULL, log_sample, &want), 0);
        assert_int_equal(want.n, 3 * 2 * PER_FILE);
        assert_int_equal(trace_reader_foreach_sample(set, NULL, log_sample, &got), 0);
        assert_same_samples(&want, &got);
        assert_int_equal(trace_reader_foreach_sample(set, NULL, log_sample, &again), 0);
        assert_same_samples(&want, &again);
        /* From the middle of the second file to the middle of the third. */
        struct trace_filter window = {.from_ns = f->cut[0] - f->origin + PER_FILE / 2 * STEP_NS,
                                      .to_ns = f->cut[1] - f->origin + PER_FILE / 2 * STEP_NS};
        struct sample_log want_w = {0}, got_w = {0};
        assert_int_equal(trace_reader_foreach_sample(joined, &window, log_sample, &want_w), 0);
        assert_int_equal(want_w.n, 2 * PER_FILE);
        assert_int_equal(trace_reader_foreach_sample(set, &window, log_sample, &got_w), 0);
        assert_same_samples(&want_w, &got_w);
        /* The middle file removed (retention, by hand) after the set was opened. */
        char *moved = tu_path(f->dir, "moved.db");
        assert_int_equal(rename(f->file[1], moved), 0);
        struct sample_log lost = {0};
        assert_int_equal(trace_reader_foreach_sample(set, NULL, log_sample, &lost), TRACE_ERR_IO);
        assert_non_null(strstr(trace_reader_errmsg(set), f->file[1]));
        assert_non_null(strstr(trace_reader_errmsg(set), "removed"));
        assert_int_equal(rename(moved, f->file[1]), 0);
        free(moved);
        free(want.s);
        free(got.s);
        free(again.s);
        free(want_w.s);
        free(got_w.s);
        free(lost.s);
        trace_reader_close(set);
        trace_reader_close(joined);
}

/*
 * A set whose last file has a hot journal (its recorder killed in the
 * middle of a commit), under names a URI would misread: read as its last
 * complete commit, from a copy rolled back in TMPDIR (gone once the reader
 * is closed), while the user's file and journal are left as they were:
 * nothing that reads a set writes to it. Joining such files is refused,
 * saying why, and leaves them as they were too.
 */
static void test_open_set_hot_journal(void **state)
{
        struct fixture *f = *state;
        char *d = tu_mkdtemp();
        char *file[3] = {tu_path(d, "seg 0?mode=rw#%41.db"), tu_path(d, "seg 1%.db"),
                         tu_path(d, "seg 2#.db")};
        char *journal = tu_path(d, "seg 2#.db-journal");
        char *victim = tu_path(d, "victim.db"), *victim_journal = tu_path(d, "victim.db-journal");
        tu_copy_file(f->file[0], file[0]);
        tu_copy_file(f->file[1], file[1]);
        tu_copy_file(f->file[2], victim);
        sqlite3 *db;
        assert_int_equal(sqlite3_open(victim, &db), SQLITE_OK);
        /* A tiny cache makes SQLite write changed pages before COMMIT. */
        assert_int_equal(sqlite3_exec(db,
                                      "PRAGMA cache_size = 1; BEGIN; DELETE FROM sample_chunks; "
                                      "DELETE FROM stacks WHERE id > 0",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
        /* "Kill" the writer: the file and its journal as they are now. */
        assert_int_equal(access(victim_journal, F_OK), 0);
        tu_copy_file(victim, file[2]);
        tu_copy_file(victim_journal, journal);
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        sqlite3_close(db);
        unlink(victim);
        struct stat before_trace, before_journal, after;
        assert_int_equal(stat(file[2], &before_trace), 0);
        assert_int_equal(stat(journal, &before_journal), 0);

        char *old, *tmp = private_tmpdir(&old);
        const char *paths[] = {file[2], file[0], file[1]};
        for (int pass = 0; pass < 2; pass++) {
                struct trace_reader *r = NULL;
                /* The open makes one directory in TMPDIR: the hot file rolled back once, in it. */
                int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
                assert_true(in >= 0);
                assert_true(inotify_add_watch(in, tmp, IN_CREATE) >= 0);
                if (trace_reader_open_set(paths, 3, &r) != 0)
                        fail_msg("open set: %s", trace_reader_errmsg(r));
                assert_int_equal(created_in(in), 1);
                close(in);
                struct trace_summary s;
                assert_int_equal(trace_reader_summary(r, &s), 0);
                assert_int_equal(s.samples, 3 * 2 * PER_FILE);
                int64_t seen[2] = {0, INT64_MIN};
                assert_int_equal(trace_reader_foreach_sample(r, NULL, add_time, seen), 0);
                assert_int_equal(seen[0], 3 * PER_FILE);
                /* The rolled-back copy, read from as the scans go. */
                assert_int_equal(dir_entries(tmp), 1);
                trace_reader_close(r);
                assert_int_equal(dir_entries(tmp), 0);
        }
        struct trace_writer *w = NULL;
        char *joined = tu_path(d, "joined.db");
        assert_int_equal(
            trace_join_segments(joined, 0, (const char *const[]){file[0], file[1], file[2]}, 3, &w),
            TRACE_ERR_ARG);
        assert_non_null(strstr(trace_writer_errmsg(w), "stopped in the middle of writing"));
        assert_non_null(strstr(trace_writer_errmsg(w), file[2]));
        trace_writer_free(w);
        restore_tmpdir(tmp, old);

        assert_int_equal(stat(file[2], &after), 0);
        assert_true(after.st_size == before_trace.st_size &&
                    after.st_mtim.tv_sec == before_trace.st_mtim.tv_sec &&
                    after.st_mtim.tv_nsec == before_trace.st_mtim.tv_nsec);
        assert_int_equal(stat(journal, &after), 0);
        assert_true(after.st_size == before_journal.st_size &&
                    after.st_mtim.tv_sec == before_journal.st_mtim.tv_sec &&
                    after.st_mtim.tv_nsec == before_journal.st_mtim.tv_nsec);
        for (int i = 0; i < 3; i++)
                free(file[i]);
        free(journal);
        free(victim);
        free(victim_journal);
        free(joined);
        tu_rmdir(d);
}

/* Files of another recording, or one file twice: refused, saying why. */
static void test_open_set_refuses(void **state)
{
        struct fixture *f = *state;
        char *other = tu_path(f->dir, "other.db");
        struct trace_writer *w = NULL;
        tu_must(w, trace_writer_create(other, TRACE_CREATE_FORCE, &w), "create");
        tu_must(w, trace_writer_set_meta(w, TRACE_META_SEGMENT_SET, "set-2"), "meta");
        tu_must(w, trace_writer_finalize(w), "finalize");
        trace_writer_free(w);
        const char *mixed[] = {f->file[0], other};
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open_set(mixed, 2, &r), TRACE_ERR_ARG);
        assert_non_null(strstr(trace_reader_errmsg(r), "different recordings"));
        assert_non_null(strstr(trace_reader_errmsg(r), "merge"));
        trace_reader_close(r);
        const char *twice[] = {f->file[1], f->file[1]};
        r = NULL;
        assert_int_equal(trace_reader_open_set(twice, 2, &r), TRACE_ERR_ARG);
        assert_non_null(strstr(trace_reader_errmsg(r), "twice"));
        trace_reader_close(r);
        /* A join of the set (a snapshot) beside its files would count them twice. */
        char *joined = tu_path(f->dir, "snap.db");
        const char *parts[] = {f->file[0], f->file[1]};
        w = NULL;
        if (trace_join_segments(joined, TRACE_CREATE_FORCE, parts, 2, &w) != 0)
                fail_msg("join: %s", trace_writer_errmsg(w));
        trace_writer_free(w);
        const char *with_join[] = {joined, f->file[2]};
        r = NULL;
        assert_int_equal(trace_reader_open_set(with_join, 2, &r), TRACE_ERR_ARG);
        assert_non_null(strstr(trace_reader_errmsg(r), "already the files of a rotation joined"));
        trace_reader_close(r);
        unlink(joined);
        free(joined);
        unlink(other);
        free(other);
}

/* Bit i set when the trace lists thread ref i; and the sample count of thread `ref`. */
static unsigned thread_refs(struct trace_reader *r, uint32_t ref, uint64_t *samples)
{
        unsigned bits = 0;
        for (uint32_t i = 0; i < trace_reader_thread_count(r); i++) {
                struct trace_thread t;
                assert_int_equal(trace_reader_thread_at(r, i, &t), 0);
                bits |= 1u << t.ref;
                if (t.ref == ref && samples)
                        *samples = t.samples;
        }
        return bits;
}

static bool has_process(struct trace_reader *r, int32_t pid, int *exit_status)
{
        for (uint32_t i = 0; i < trace_reader_process_count(r); i++) {
                struct trace_process p;
                assert_int_equal(trace_reader_process_at(r, i, &p), 0);
                if (p.pid == pid) {
                        if (exit_status)
                                *exit_status = p.exit_status;
                        return true;
                }
        }
        return false;
}

/*
 * Workers that end and threads that stop being sampled: every rotated file
 * still reads on its own (thread refs 1, 2, 3... as readers require), with
 * the processes alive in it (one ended in it with its exit status) and the
 * threads and tasks' streams sampled in it (a program that makes a thread
 * per request must not fill every file with all it ever had), and a
 * set and a join count each stream's samples once, under one ref, a task
 * still its thread's.
 */
static void test_rotate_workers_come_and_go(void **state)
{
        struct fixture *f = *state;
        char *file[3], *joined = tu_path(f->dir, "live-joined.db");
        for (int i = 0; i < 3; i++) {
                char name[32];
                snprintf(name, sizeof(name), "live%d.db", i);
                file[i] = tu_path(f->dir, name);
        }
        struct trace_writer *w = NULL;
        tu_must(w, trace_writer_create(file[0], TRACE_CREATE_FORCE, &w), "create");
        tu_must(w, trace_writer_set_meta(w, TRACE_META_SEGMENT_SET, "set-live"), "meta");
        struct trace_process_desc pa = {.pid = 100, .cmdline = "python server.py"};
        struct trace_process_desc pb = {.pid = 200, .cmdline = "python worker.py"};
        tu_must(w, trace_writer_add_process(w, &pa), "process");
        tu_must(w, trace_writer_add_process(w, &pb), "process");
        /* Refs 1-3 in process 100 (a1 always sampled, a2 in files 0 and 2, a3 in 0), 4 in 200. */
        uint32_t ref[6];
        const struct trace_thread_desc td[] = {
            {100, 101, 0, "a1"}, {100, 102, 0, "a2"}, {100, 103, 0, "a3"}, {200, 201, 0, "b1"}};
        for (int i = 0; i < 4; i++)
                tu_must(w, trace_writer_add_thread(w, &td[i], &ref[i + 1]), "thread");
        struct trace_frame_desc fd = {"serve", NULL, "server.py", 1, 1, TRACE_FRAME_PYTHON};
        uint32_t frame, stack;
        tu_must(w, trace_writer_intern_frame(w, &fd, &frame), "frame");
        tu_must(w, trace_writer_intern_stack(w, TRACE_STACK_EMPTY, frame, &stack), "stack");
        /* Which threads are sampled in each file; ref 5: a task of a2's loop. */
        static const unsigned sampled[3] = {0x1e, 0x02, 0x26};
        int64_t t = trace_writer_origin_ns(w);
        for (int file_i = 0; file_i < 3; file_i++) {
                if (file_i == 2) {
                        struct trace_task_desc task = {ref[2], 0x7f0010, "fetch"};
                        tu_must(w, trace_writer_add_task(w, &task, &ref[5]), "task");
                        assert_int_equal(ref[5], 5);
                }
                for (int k = 0; k < 10; k++) {
                        t += STEP_NS;
                        for (uint32_t i = 1; i <= 5; i++)
                                if (sampled[file_i] & (1u << i))
                                        tu_must(w, trace_writer_add_sample(w, ref[i], t, stack, 1),
                                                "sample");
                }
                if (file_i == 0)
                        tu_must(w, trace_writer_end_process(w, 200, 3, t + 1), "end");
                if (file_i == 2)
                        break;
                int64_t cut = t + STEP_NS / 2;
                while (pf_now_mono_ns() < cut)
                        ;
                tu_must(w, trace_writer_rotate(w, file[file_i + 1], TRACE_CREATE_FORCE, cut),
                        "rotate");
        }
        tu_must(w, trace_writer_finalize(w), "finalize");
        trace_writer_free(w);

        /*
         * Each file on its own: its streams numbered from 1 in the order the
         * writer has them (file 1: a1; file 2: a1, a2, a2's task).
         */
        static const char *const names[3][5] = {
            {"a1", "a2", "a3", "b1"}, {"a1"}, {"a1", "a2", "fetch"}};
        static const unsigned refs[3] = {0x1e, 0x02, 0x0e};
        for (int i = 0; i < 3; i++) {
                struct trace_reader *r = open_or_fail(file[i]);
                assert_int_equal(thread_refs(r, 0, NULL), refs[i]);
                for (uint32_t k = 0; k < trace_reader_thread_count(r); k++) {
                        struct trace_thread th;
                        uint32_t of = 0;
                        uint64_t addr = 0;
                        assert_int_equal(trace_reader_thread_at(r, k, &th), 0);
                        assert_string_equal(th.name, names[i][th.ref - 1]);
                        assert_int_equal(th.samples, 10);
                        int task = trace_reader_thread_task(r, k, &of, &addr);
                        assert_int_equal(task, !strcmp(th.name, "fetch"));
                        if (task)
                                assert_int_equal(of, 2); /* a2, in this file */
                }
                /* Process 200 ended in file 0: only there, with its exit status. */
                int status = -2;
                assert_true(has_process(r, 100, NULL));
                assert_int_equal(has_process(r, 200, &status), i == 0);
                assert_int_equal(status, i == 0 ? 3 : -2);
                trace_reader_close(r);
        }
        /* Read as a set, and joined: every process and thread, each one's samples. */
        const char *paths[] = {file[2], file[0], file[1]};
        struct trace_reader *set = NULL;
        if (trace_reader_open_set(paths, 3, &set) != 0)
                fail_msg("open set: %s", trace_reader_errmsg(set));
        w = NULL;
        if (trace_join_segments(joined, TRACE_CREATE_FORCE,
                                (const char *const[]){file[0], file[1], file[2]}, 3, &w) != 0)
                fail_msg("join: %s", trace_writer_errmsg(w));
        trace_writer_free(w);
        struct trace_reader *one = open_or_fail(joined);
        struct trace_reader *both[] = {set, one};
        for (int k = 0; k < 2; k++) {
                static const uint64_t want[6] = {0, 30, 20, 10, 10, 10};
                for (uint32_t i = 1; i <= 5; i++) {
                        uint64_t n = 0;
                        assert_int_equal(thread_refs(both[k], i, &n), 0x3e);
                        assert_int_equal(n, want[i]);
                }
                struct trace_thread th;
                uint32_t of = 0;
                uint64_t addr = 0;
                assert_int_equal(trace_reader_thread_at(both[k], 4, &th), 0);
                assert_string_equal(th.name, "fetch");
                assert_int_equal(trace_reader_thread_task(both[k], 4, &of, &addr), 1);
                assert_int_equal(of, 2);
                assert_int_equal(addr, 0x7f0010);
                int status = -2;
                assert_true(has_process(both[k], 100, NULL));
                assert_true(has_process(both[k], 200, &status));
                assert_int_equal(status, 3);
        }
        trace_reader_close(set);
        trace_reader_close(one);
        for (int i = 0; i < 3; i++) {
                unlink(file[i]);
                free(file[i]);
        }
        unlink(joined);
        free(joined);
}

/*
 * A thread of a process that ended before the cut named only after it (the
 * recorder reads names late): the new file holds the thread, so its
 * process too, which readers require.
 */
static void test_rotate_late_name(void **state)
{
        struct fixture *f = *state;
        char *first = tu_path(f->dir, "late0.db"), *second = tu_path(f->dir, "late1.db");
        struct trace_writer *w = NULL;
        tu_must(w, trace_writer_create(first, TRACE_CREATE_FORCE, &w), "create");
        struct trace_process_desc p = {.pid = 300, .cmdline = "python job.py"};
        tu_must(w, trace_writer_add_process(w, &p), "process");
        uint32_t th;
        struct trace_thread_desc t = {.pid = 300, .tid = 301};
        tu_must(w, trace_writer_add_thread(w, &t, &th), "thread");
        int64_t now = pf_now_mono_ns();
        tu_must(w, trace_writer_add_sample(w, th, now, TRACE_STACK_EMPTY, 0), "sample");
        tu_must(w, trace_writer_end_process(w, 300, 0, now + 1), "end");
        while (pf_now_mono_ns() < now + 2)
                ;
        tu_must(w, trace_writer_rotate(w, second, TRACE_CREATE_FORCE, now + 2), "rotate");
        tu_must(w, trace_writer_set_thread_name(w, th, "MainThread"), "name");
        tu_must(w, trace_writer_finalize(w), "finalize");
        trace_writer_free(w);
        struct trace_reader *r = open_or_fail(second);
        int status = -2;
        assert_true(has_process(r, 300, &status));
        assert_int_equal(status, 0);
        assert_int_equal(trace_reader_thread_count(r), 1);
        trace_reader_close(r);
        unlink(first);
        unlink(second);
        free(first);
        free(second);
}

/*
 * Threads that end (trace_writer_end_thread): their rows and samples are
 * written, then the writer forgets them and gives their refs to the next
 * threads, so a thread per request does not grow the writer; a sample for
 * an ended ref is refused; a thread added again with an ended one's key is
 * a new stream, and a set joins the two into one.
 */
static void test_end_thread(void **state)
{
        struct fixture *f = *state;
        char *file[2] = {tu_path(f->dir, "end0.db"), tu_path(f->dir, "end1.db")};
        struct trace_writer *w = NULL;
        tu_must(w, trace_writer_create(file[0], TRACE_CREATE_FORCE, &w), "create");
        tu_must(w, trace_writer_set_meta(w, TRACE_META_SEGMENT_SET, "set-end"), "meta");
        struct trace_process_desc p = {.pid = 400, .cmdline = "python server.py"};
        tu_must(w, trace_writer_add_process(w, &p), "process");
        uint32_t main_ref, ref;
        struct trace_thread_desc main_td = {400, 400, 1, "MainThread"};
        tu_must(w, trace_writer_add_thread(w, &main_td, &main_ref), "thread");
        int64_t t = trace_writer_origin_ns(w);
        uint32_t max_ref = 0;
        /* 200 request threads, one after the other, each sampled 3 times. */
        for (int i = 0; i < 200; i++) {
                char name[32];
                snprintf(name, sizeof(name), "Thread-%d", i + 1);
                struct trace_thread_desc td = {400, 1000 + i, 0x7000 + (uint64_t)i, name};
                tu_must(w, trace_writer_add_thread(w, &td, &ref), "thread");
                if (ref > max_ref)
                        max_ref = ref;
                for (int k = 0; k < 3; k++) {
                        t += STEP_NS;
                        tu_must(w, trace_writer_add_sample(w, main_ref, t, TRACE_STACK_EMPTY, 1),
                                "sample");
                        tu_must(w, trace_writer_add_sample(w, ref, t, TRACE_STACK_EMPTY, 1),
                                "sample");
                }
                tu_must(w, trace_writer_end_thread(w, ref), "end");
                assert_int_equal(trace_writer_add_sample(w, ref, t + 1, TRACE_STACK_EMPTY, 1),
                                 TRACE_ERR_ARG);
                tu_must(w, trace_writer_flush(w), "flush");
        }
        /* Each ended thread's slot went to the next: refs 2 and 3 at most. */
        assert_true(max_ref <= 3);
        /* Added twice (two holders of one thread): it ends at the second end. */
        uint32_t twice_a, twice_b;
        tu_must(w, trace_writer_add_thread(w, &main_td, &twice_a), "thread");
        tu_must(w, trace_writer_add_thread(w, &main_td, &twice_b), "thread");
        assert_int_equal(twice_a, main_ref);
        assert_int_equal(twice_b, main_ref);
        tu_must(w, trace_writer_end_thread(w, main_ref), "end");
        tu_must(w, trace_writer_end_thread(w, main_ref), "end");
        t += STEP_NS;
        tu_must(w, trace_writer_add_sample(w, main_ref, t, TRACE_STACK_EMPTY, 1), "sample");
        /* The second request thread again in the same file: a row of its own. */
        struct trace_thread_desc second = {400, 1001, 0x7001, "Thread-2"};
        tu_must(w, trace_writer_add_thread(w, &second, &ref), "thread");
        t += STEP_NS;
        tu_must(w, trace_writer_add_sample(w, ref, t, TRACE_STACK_EMPTY, 1), "sample");
        /* The first request thread again (same key), after a cut: a new stream. */
        int64_t cut = t + STEP_NS / 2;
        while (pf_now_mono_ns() < cut)
                ;
        tu_must(w, trace_writer_rotate(w, file[1], TRACE_CREATE_FORCE, cut), "rotate");
        struct trace_thread_desc again = {400, 1000, 0x7000, "Thread-1"};
        tu_must(w, trace_writer_add_thread(w, &again, &ref), "thread");
        t += STEP_NS;
        tu_must(w, trace_writer_add_sample(w, ref, t, TRACE_STACK_EMPTY, 1), "sample");
        tu_must(w, trace_writer_finalize(w), "finalize");
        trace_writer_free(w);

        struct trace_reader *r = open_or_fail(file[0]);
        assert_int_equal(trace_reader_thread_count(r), 202);
        unsigned twice = 0;
        for (uint32_t i = 0; i < 202; i++) {
                struct trace_thread th;
                assert_int_equal(trace_reader_thread_at(r, i, &th), 0);
                if (th.tid == 1001 && th.samples == 1)
                        twice++;
                else
                        assert_int_equal(th.samples, th.tid == 400 ? 601 : 3);
        }
        assert_int_equal(twice, 1);
        trace_reader_close(r);
        const char *paths[] = {file[0], file[1]};
        struct trace_reader *set = NULL;
        if (trace_reader_open_set(paths, 2, &set) != 0)
                fail_msg("open set: %s", trace_reader_errmsg(set));
        assert_int_equal(trace_reader_thread_count(set), 201);
        for (uint32_t i = 0; i < 201; i++) {
                struct trace_thread th;
                assert_int_equal(trace_reader_thread_at(set, i, &th), 0);
                assert_int_equal(th.samples, th.tid == 400                      ? 601
                                             : th.tid == 1000 || th.tid == 1001 ? 4
                                                                                : 3);
        }
        trace_reader_close(set);
        for (int i = 0; i < 2; i++) {
                unlink(file[i]);
                free(file[i]);
        }
}

/*
 * A service's workers come and go for months (--match): a process that has
 * ended, whose streams have ended too, is forgotten at the next cut (a
 * thread of it is then refused, as of a process never added), so the writer
 * holds the live ones only; a pid taken again by a new process is that
 * process, alive, not the old one's end.
 */
static void test_rotate_forgets_ended_processes(void **state)
{
        struct fixture *f = *state;
        char *file[3];
        for (int i = 0; i < 3; i++) {
                char name[32];
                snprintf(name, sizeof(name), "gone%d.db", i);
                file[i] = tu_path(f->dir, name);
        }
        struct trace_writer *w = NULL;
        tu_must(w, trace_writer_create(file[0], TRACE_CREATE_FORCE, &w), "create");
        struct trace_process_desc old = {.pid = 500, .cmdline = "python worker.py --old"};
        struct trace_process_desc other = {.pid = 600, .cmdline = "python worker.py"};
        tu_must(w, trace_writer_add_process(w, &old), "process");
        tu_must(w, trace_writer_add_process(w, &other), "process");
        uint32_t ref;
        struct trace_thread_desc td = {.pid = 500, .tid = 501};
        tu_must(w, trace_writer_add_thread(w, &td, &ref), "thread");
        int64_t t = trace_writer_origin_ns(w) + STEP_NS;
        tu_must(w, trace_writer_add_sample(w, ref, t, TRACE_STACK_EMPTY, 0), "sample");
        tu_must(w, trace_writer_end_thread(w, ref), "end thread");
        tu_must(w, trace_writer_end_process(w, 500, 7, t + 1), "end");
        /* 600 ends and its pid is taken again in the same file: alive. */
        tu_must(w, trace_writer_end_process(w, 600, 1, t + 1), "end");
        tu_must(w, trace_writer_add_process(w, &other), "process again");
        for (int i = 1; i < 3; i++) {
                int64_t cut = t + (int64_t)i * STEP_NS;
                while (pf_now_mono_ns() < cut)
                        ;
                tu_must(w, trace_writer_rotate(w, file[i], TRACE_CREATE_FORCE, cut), "rotate");
        }
        struct trace_thread_desc late = {.pid = 500, .tid = 502};
        assert_int_equal(trace_writer_add_thread(w, &late, &ref), TRACE_ERR_ARG);
        /* Its pid taken by a new worker. */
        struct trace_process_desc young = {.pid = 500, .cmdline = "python worker.py --new"};
        tu_must(w, trace_writer_add_process(w, &young), "process");
        tu_must(w, trace_writer_add_thread(w, &late, &ref), "thread");
        tu_must(w, trace_writer_add_sample(w, ref, pf_now_mono_ns(), TRACE_STACK_EMPTY, 0),
                "sample");
        tu_must(w, trace_writer_finalize(w), "finalize");
        trace_writer_free(w);

        int status = -2;
        struct trace_reader *r = open_or_fail(file[0]);
        assert_true(has_process(r, 500, &status));
        assert_int_equal(status, 7);
        assert_true(has_process(r, 600, &status));
        assert_int_equal(status, -1);
        trace_reader_close(r);
        r = open_or_fail(file[1]);
        assert_false(has_process(r, 500, NULL));
        assert_true(has_process(r, 600, NULL));
        trace_reader_close(r);
        r = open_or_fail(file[2]);
        assert_true(has_process(r, 500, &status));
        assert_int_equal(status, -1);
        for (uint32_t i = 0; i < trace_reader_process_count(r); i++) {
                struct trace_process p;
                assert_int_equal(trace_reader_process_at(r, i, &p), 0);
                if (p.pid == 500)
                        assert_string_equal(p.cmdline, "python worker.py --new");
        }
        trace_reader_close(r);
        for (int i = 0; i < 3; i++) {
                unlink(file[i]);
                free(file[i]);
        }
}

/* A rotation that cannot make its file changes nothing: the writer goes on. */
static void test_rotate_to_existing_file(void **state)
{
        struct fixture *f = *state;
        char *path = tu_path(f->dir, "busy.db");
        struct trace_writer *w = NULL;
        tu_must(w, trace_writer_create(path, 0, &w), "create");
        struct trace_process_desc p = {.pid = 7};
        tu_must(w, trace_writer_add_process(w, &p), "process");
        uint32_t th;
        struct trace_thread_desc t = {.pid = 7, .tid = 7};
        tu_must(w, trace_writer_add_thread(w, &t, &th), "thread");
        int64_t now = pf_now_mono_ns();
        tu_must(w, trace_writer_add_sample(w, th, now, TRACE_STACK_EMPTY, 0), "sample");
        assert_int_equal(trace_writer_rotate(w, f->file[0], 0, pf_now_mono_ns()), TRACE_ERR_EXISTS);
        tu_must(w, trace_writer_add_sample(w, th, now + 1, TRACE_STACK_EMPTY, 0), "sample");
        tu_must(w, trace_writer_finalize(w), "finalize");
        trace_writer_free(w);
        struct trace_reader *r = open_or_fail(path);
        struct trace_summary s;
        assert_int_equal(trace_reader_summary(r, &s), 0);
        assert_int_equal(s.samples, 2);
        trace_reader_close(r);
        free(path);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_each_file_complete),
            cmocka_unit_test(test_join),
            cmocka_unit_test(test_join_refuses_gap),
            cmocka_unit_test(test_join_says_why),
            cmocka_unit_test(test_open_set),
            cmocka_unit_test(test_open_set_gap),
            cmocka_unit_test(test_open_set_in_place),
            cmocka_unit_test(test_open_set_refuses),
            cmocka_unit_test(test_open_set_hot_journal),
            cmocka_unit_test(test_rotate_to_existing_file),
            cmocka_unit_test(test_rotate_late_name),
            cmocka_unit_test(test_end_thread),
            cmocka_unit_test(test_rotate_workers_come_and_go),
            cmocka_unit_test(test_rotate_forgets_ended_processes),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
