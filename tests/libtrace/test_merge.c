/*
 * test_merge.c - trace_writer_add_recording() and what the reader makes of
 * its result: every sample copied with its stack, state and thread, times
 * shifted by the offset; colliding pids kept distinct with their source
 * pids; each source's meta kept in recording_meta; the merged meta (times,
 * hosts, rate); a merged trace merged again keeps its recordings; and the
 * reader's view of traces without the recordings tables (files written
 * before merging existed, still format version 1), and of damaged origins.
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
#include "trace_internal.h"

#define OFFSET_B 5000000000LL /* the second source starts 5 s in */

struct fixture {
        char *dir;
        char *a, *b, *merged;
        struct tu_reference ref_a, ref_b;
};

static struct trace_reader *open_or_fail(const char *path)
{
        struct trace_reader *r = NULL;
        if (trace_reader_open(path, &r) != 0)
                fail_msg("open %s: %s", path, trace_reader_errmsg(r));
        return r;
}

/* Merge `paths` (named by `names`) with `offsets` into `out`. */
static void merge(const char *out, const char *const *paths, const char *const *names,
                  const int64_t *offsets, size_t n)
{
        struct trace_writer *w = NULL;
        if (trace_writer_create(out, TRACE_CREATE_FORCE, &w) != 0)
                fail_msg("create %s: %s", out, trace_writer_errmsg(w));
        for (size_t i = 0; i < n; i++) {
                struct trace_reader *r = open_or_fail(paths[i]);
                if (trace_writer_add_recording(w, r, names[i], offsets[i]) != 0)
                        fail_msg("add %s: %s", paths[i], trace_writer_errmsg(w));
                trace_reader_close(r);
        }
        if (trace_writer_finalize(w) != 0)
                fail_msg("finalize: %s", trace_writer_errmsg(w));
        trace_writer_free(w);
}

static int setup(void **state)
{
        struct fixture *f = calloc(1, sizeof(*f));
        f->dir = tu_mkdtemp();
        f->a = tu_path(f->dir, "a.pyflame");
        f->b = tu_path(f->dir, "b.pyflame");
        f->merged = tu_path(f->dir, "merged.pyflame");
        tu_write_reference(f->a, &f->ref_a, true, 0);
        tu_write_reference(f->b, &f->ref_b, true, 0);
        /* Tell the two sources apart: another host for b. */
        assert_int_equal(tu_sql(f->b, "UPDATE meta SET value = 'host-b' WHERE key = 'host'"), 0);
        const char *paths[] = {f->a, f->b}, *names[] = {"a.pyflame", "b.pyflame"};
        const int64_t offsets[] = {0, OFFSET_B};
        merge(f->merged, paths, names, offsets, 2);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fixture *f = *state;
        free(f->a);
        free(f->b);
        free(f->merged);
        tu_rmdir(f->dir);
        free(f);
        return 0;
}

static void test_recordings(void **state)
{
        struct fixture *f = *state;
        struct trace_reader *r = open_or_fail(f->merged);
        assert_int_equal(trace_reader_recording_count(r), 2);
        struct trace_recording a, b;
        assert_int_equal(trace_reader_recording_at(r, 0, &a), 0);
        assert_int_equal(trace_reader_recording_at(r, 1, &b), 0);
        assert_int_equal(trace_reader_recording_at(r, 2, &b) < 0, 1);
        assert_int_equal(trace_reader_recording_at(r, 1, &b), 0);
        assert_int_equal(a.id, 1);
        assert_int_equal(b.id, 2);
        assert_string_equal(a.file, "a.pyflame");
        assert_string_equal(b.file, "b.pyflame");
        assert_string_equal(b.host, "host-b");
        assert_int_equal(a.offset_ns, 0);
        assert_int_equal(b.offset_ns, OFFSET_B);
        assert_int_equal(a.samples, TU_SAMPLES);
        assert_int_equal(b.samples, TU_SAMPLES);
        assert_true(a.start_wall_ns > 0 && a.duration_ns > 0);

        /* Each source's meta, whole, as its file had it. */
        const char *key, *value;
        bool answer = false, host = false;
        for (size_t i = 0; trace_reader_recording_meta_at(r, 2, i, &key, &value); i++) {
                answer |= !strcmp(key, "answer") && !strcmp(value, "42");
                host |= !strcmp(key, TRACE_META_HOST) && !strcmp(value, "host-b");
        }
        assert_true(answer && host);
        assert_false(trace_reader_recording_meta_at(r, 3, 0, &key, &value));

        /* The merged meta: hosts joined, common rate kept, duration to the latest end. */
        const char *hosts = trace_reader_meta(r, TRACE_META_HOST);
        assert_non_null(hosts);
        assert_non_null(strstr(hosts, ", host-b"));
        assert_string_equal(trace_reader_meta(r, TRACE_META_RATE_HZ), "1000");
        struct trace_summary s;
        assert_int_equal(trace_reader_summary(r, &s), 0);
        assert_true(s.finalized);
        /* The reference's samples run past its recorded end: the last sample counts. */
        int64_t last = OFFSET_B + (TU_SAMPLES - 1) * TU_STEP_NS;
        assert_int_equal(s.duration_ns,
                         last > OFFSET_B + b.duration_ns ? last : OFFSET_B + b.duration_ns);
        assert_int_equal(s.samples, 2 * TU_SAMPLES);
        assert_int_equal(s.errors[TRACE_ERROR_TORN], 14);
        assert_int_equal(s.errors[TRACE_ERROR_LATE], 6);
        trace_reader_close(r);
}

static void test_processes(void **state)
{
        struct fixture *f = *state;
        struct trace_reader *r = open_or_fail(f->merged);
        assert_int_equal(trace_reader_process_count(r), 4);
        int seen = 0;
        for (uint32_t i = 0; i < 4; i++) {
                struct trace_process p;
                uint32_t rec;
                int32_t source;
                assert_int_equal(trace_reader_process_at(r, i, &p), 0);
                assert_int_equal(trace_reader_process_origin(r, i, &rec, &source), 0);
                if (p.pid == 100 || p.pid == 200) {
                        assert_int_equal(rec, 1);
                        assert_int_equal(source, p.pid);
                } else {
                        /* b's pids collided with a's: made up, above PID_MAX_LIMIT. */
                        assert_true(p.pid > 4194303);
                        assert_int_equal(rec, 2);
                        assert_true(source == 100 || source == 200);
                        assert_string_equal(p.cmdline,
                                            source == 100 ? "python3 app.py" : "python3 -c pass");
                }
                seen |= 1 << (p.pid == 100 ? 0 : p.pid == 200 ? 1 : p.pid == 4194304 ? 2 : 3);
        }
        assert_int_equal(seen, 15);
        assert_int_equal(trace_reader_process_origin(r, 4, NULL, NULL), TRACE_ERR_ARG);
        assert_string_equal(trace_reader_meta(r, TRACE_META_PIDS), "100 200 4194304 4194305");
        trace_reader_close(r);
}

/* Per source thread: sample times and stacks (as frame names) in order. */
struct sample_log {
        const struct trace_reader *r;
        int64_t t[6][TU_SAMPLES];
        char top[6][TU_SAMPLES][16];
        int n[6];
};

static int log_sample(void *ctx, const struct trace_sample *s)
{
        struct sample_log *l = ctx;
        assert_true(s->thread >= 1 && s->thread <= 6);
        int k = (int)s->thread - 1, i = l->n[k]++;
        l->t[k][i] = s->t_ns;
        uint32_t frame = 0;
        struct trace_frame fr = {.function = "-"};
        if (s->stack != TRACE_STACK_EMPTY) {
                assert_int_equal(trace_reader_stack_node(l->r, s->stack, NULL, &frame), 0);
                assert_int_equal(trace_reader_frame(l->r, frame, &fr), 0);
        }
        snprintf(l->top[k][i], sizeof(l->top[k][i]), "%s/%u", fr.function, s->state);
        return 0;
}

static void test_samples(void **state)
{
        struct fixture *f = *state;
        struct trace_reader *m = open_or_fail(f->merged), *a = open_or_fail(f->a);
        struct sample_log *lm = calloc(1, sizeof(*lm)), *la = calloc(1, sizeof(*la));
        lm->r = m;
        la->r = a;
        assert_int_equal(trace_reader_foreach_sample(m, NULL, log_sample, lm), 0);
        assert_int_equal(trace_reader_foreach_sample(a, NULL, log_sample, la), 0);
        /* Threads 1-3 come from a, 4-6 from b (the same content, 5 s later). */
        for (int k = 0; k < 3; k++) {
                assert_int_equal(lm->n[k], la->n[k]);
                assert_int_equal(lm->n[k + 3], la->n[k]);
                for (int i = 0; i < la->n[k]; i++) {
                        assert_int_equal(lm->t[k][i], la->t[k][i]);
                        assert_int_equal(lm->t[k + 3][i], la->t[k][i] + OFFSET_B);
                        assert_string_equal(lm->top[k][i], la->top[k][i]);
                        assert_string_equal(lm->top[k + 3][i], la->top[k][i]);
                }
        }
        /* Shared frames and stacks are stored once. */
        assert_int_equal(trace_reader_frame_count(m), trace_reader_frame_count(a));
        assert_int_equal(trace_reader_stack_count(m), trace_reader_stack_count(a));
        struct trace_thread t;
        assert_int_equal(trace_reader_thread_at(m, 4, &t), 0);
        assert_string_equal(t.name, "worker");
        assert_true(t.pid > 4194303);
        free(lm);
        free(la);
        trace_reader_close(m);
        trace_reader_close(a);
}

/* A merged trace merged again brings its recordings along, shifted. */
static void test_merge_of_merged(void **state)
{
        struct fixture *f = *state;
        char *twice = tu_path(f->dir, "twice.pyflame");
        const char *paths[] = {f->a, f->merged}, *names[] = {"a.pyflame", "merged.pyflame"};
        const int64_t offsets[] = {0, 1000};
        merge(twice, paths, names, offsets, 2);
        struct trace_reader *r = open_or_fail(twice);
        assert_int_equal(trace_reader_recording_count(r), 3);
        struct trace_recording rec;
        assert_int_equal(trace_reader_recording_at(r, 1, &rec), 0);
        assert_string_equal(rec.file, "a.pyflame"); /* the merged one's first, by its name */
        assert_int_equal(rec.offset_ns, 1000);
        assert_int_equal(trace_reader_recording_at(r, 2, &rec), 0);
        assert_string_equal(rec.file, "b.pyflame");
        assert_int_equal(rec.offset_ns, OFFSET_B + 1000);
        assert_int_equal(trace_reader_process_count(r), 6);
        struct trace_summary s;
        assert_int_equal(trace_reader_summary(r, &s), 0);
        assert_int_equal(s.samples, 3 * TU_SAMPLES);
        trace_reader_close(r);
        free(twice);
}

/*
 * A trace as written before merging existed (format 1 all the same): no
 * recordings tables, no origin columns. It is one recording, its meta.
 */
static void test_single_and_old(void **state)
{
        struct fixture *f = *state;
        char *old = tu_path(f->dir, "old.pyflame");
        tu_copy_file(f->a, old);
        assert_int_equal(tu_sql(old, "DROP TABLE recording_meta; DROP TABLE recordings;"
                                     "ALTER TABLE processes DROP COLUMN recording;"
                                     "ALTER TABLE processes DROP COLUMN source_pid;"),
                         0);
        const char *files[] = {f->a, old};
        for (int k = 0; k < 2; k++) {
                struct trace_reader *r = open_or_fail(files[k]);
                assert_int_equal(trace_reader_recording_count(r), 1);
                struct trace_recording rec;
                assert_int_equal(trace_reader_recording_at(r, 0, &rec), 0);
                assert_null(rec.file);
                assert_int_equal(rec.id, 1);
                assert_int_equal(rec.offset_ns, 0);
                assert_int_equal(rec.samples, TU_SAMPLES);
                assert_string_equal(rec.host, trace_reader_meta(r, TRACE_META_HOST));
                const char *key, *value;
                assert_true(trace_reader_recording_meta_at(r, 1, 0, &key, &value));
                uint32_t id;
                int32_t pid;
                struct trace_process p;
                assert_int_equal(trace_reader_process_at(r, 1, &p), 0);
                assert_int_equal(trace_reader_process_origin(r, 1, &id, &pid), 0);
                assert_int_equal(id, 1);
                assert_int_equal(pid, p.pid);
                uint64_t *counts = NULL, total = 0;
                assert_int_equal(trace_reader_count_by_stack(r, NULL, &counts, &total), 0);
                assert_int_equal(total, TU_SAMPLES);
                free(counts);
                trace_reader_close(r);
        }
        /* And an old file merges like any other. */
        char *merged = tu_path(f->dir, "old-merged.pyflame");
        const char *paths[] = {old}, *names[] = {"old.pyflame"};
        const int64_t offsets[] = {0};
        merge(merged, paths, names, offsets, 1);
        struct trace_reader *r = open_or_fail(merged);
        assert_int_equal(trace_reader_recording_count(r), 1);
        trace_reader_close(r);
        free(merged);
        free(old);
}

static void test_damaged_origin(void **state)
{
        struct fixture *f = *state;
        char *bad = tu_path(f->dir, "bad.pyflame");
        const char *damage[] = {
            "UPDATE processes SET recording = 3 WHERE pid = 100",
            "UPDATE processes SET source_pid = -1 WHERE pid = 100",
            "UPDATE recordings SET id = 7 WHERE id = 2",
            "UPDATE recordings SET samples = 'many' WHERE id = 1",
            "INSERT INTO recording_meta VALUES (9, 'k', 'v')",
        };
        for (size_t i = 0; i < sizeof(damage) / sizeof(damage[0]); i++) {
                tu_copy_file(f->merged, bad);
                assert_int_equal(tu_sql(bad, damage[i]), 0);
                struct trace_reader *r = NULL;
                int rc = trace_reader_open(bad, &r);
                if (rc != TRACE_ERR_CORRUPT)
                        fail_msg("%s: open gave %d (%s)", damage[i], rc, trace_reader_errmsg(r));
                trace_reader_close(r);
        }
        free(bad);
}

static void test_refusals(void **state)
{
        struct fixture *f = *state;
        char *out = tu_path(f->dir, "refused.pyflame");
        struct trace_writer *w = NULL;
        assert_int_equal(trace_writer_create(out, TRACE_CREATE_FORCE, &w), 0);
        assert_int_equal(trace_writer_add_recording(w, NULL, "x", 0), TRACE_ERR_ARG);
        assert_non_null(strstr(trace_writer_errmsg(w), "no source"));
        struct trace_reader *r = open_or_fail(f->a);
        assert_int_equal(trace_writer_add_recording(w, r, "x", INT64_MAX), TRACE_ERR_ARG);
        assert_int_equal(trace_writer_add_recording(NULL, r, "x", 0), TRACE_ERR_ARG);
        trace_reader_close(r);
        trace_writer_free(w);
        free(out);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_recordings),     cmocka_unit_test(test_processes),
            cmocka_unit_test(test_samples),        cmocka_unit_test(test_merge_of_merged),
            cmocka_unit_test(test_single_and_old), cmocka_unit_test(test_damaged_origin),
            cmocka_unit_test(test_refusals),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
