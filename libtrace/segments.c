/*
 * segments.c - trace_join_segments(): the files of one rotation joined back
 * into one trace (pyflame-record's flight recorder writes its snapshot so).
 *
 * A rotation (trace_writer_rotate) leaves files that share one writer's
 * ids: every string, frame, stack, thread and process of an earlier file
 * has the same id, with the same content, in every later one, and each
 * later file knows at least as much. Their times are relative to each
 * file's start on the one monotonic clock of the recorder, and each file
 * starts where the one before ended. Joining them is therefore a copy in
 * SQL, with no id mapped: the last file's dictionaries, then every file's
 * sample chunks with their times moved onto the first file's time line
 * (a chunk's blob holds times relative to its own first_ns, so it is
 * copied as it is), summed error and stack counts, and the thread spans
 * and meta computed from what was copied.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "trace.h"
#include "trace_internal.h"

struct segment_info {
        int64_t start_mono, end_mono, start_wall, end_wall, segment;
        char set[128];
        bool finished;
};

/* Run `sql` with up to two int64 parameters; returns a SQLite code. */
static int exec2(sqlite3 *db, const char *sql, int64_t a, int64_t b)
{
        sqlite3_stmt *st;
        int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
        if (rc != SQLITE_OK)
                return rc;
        int n = sqlite3_bind_parameter_count(st);
        if (n >= 1)
                sqlite3_bind_int64(st, 1, a);
        if (n >= 2)
                sqlite3_bind_int64(st, 2, b);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW)
                ;
        sqlite3_finalize(st);
        return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int attach(sqlite3 *db, const char *path)
{
        sqlite3_stmt *st;
        int rc = sqlite3_prepare_v2(db, "ATTACH DATABASE ?1 AS seg", -1, &st, NULL);
        if (rc != SQLITE_OK)
                return rc;
        sqlite3_bind_text(st, 1, path, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
        sqlite3_finalize(st);
        return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The attached file's meta as a segment; a SQLite code. */
static int read_info(sqlite3 *db, struct segment_info *si)
{
        memset(si, 0, sizeof(*si));
        si->segment = 1;
        sqlite3_stmt *st;
        int rc = sqlite3_prepare_v2(db, "SELECT key, value FROM seg.meta", -1, &st, NULL);
        if (rc != SQLITE_OK)
                return rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                const char *k = (const char *)sqlite3_column_text(st, 0);
                int64_t v = sqlite3_column_int64(st, 1);
                if (!k)
                        continue;
                if (!strcmp(k, TRACE_META_START_MONO_NS))
                        si->start_mono = v;
                else if (!strcmp(k, TRACE_META_END_MONO_NS)) {
                        si->end_mono = v;
                        si->finished = true;
                } else if (!strcmp(k, TRACE_META_START_WALL_NS))
                        si->start_wall = v;
                else if (!strcmp(k, TRACE_META_END_WALL_NS))
                        si->end_wall = v;
                else if (!strcmp(k, TRACE_META_SEGMENT))
                        si->segment = v;
                else if (!strcmp(k, TRACE_META_SEGMENT_SET)) {
                        const char *t = (const char *)sqlite3_column_text(st, 1);
                        snprintf(si->set, sizeof(si->set), "%s", t ? t : "");
                }
        }
        sqlite3_finalize(st);
        return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The last file's dictionaries, moved onto the first file's time line. */
static int copy_dictionaries(sqlite3 *db, int64_t shift)
{
        static const char *const sql[] = {
            "INSERT INTO main.strings SELECT id, value FROM seg.strings",
            "INSERT INTO main.frames(id, function, qualname, file, line, first_line, kind, module, "
            "module_offset) SELECT id, function, qualname, file, line, first_line, kind, module, "
            "module_offset FROM seg.frames",
            "INSERT INTO main.stacks SELECT id, parent, frame, depth FROM seg.stacks WHERE id > 0",
            "INSERT INTO main.processes SELECT pid, cmdline, python_version, python_build, "
            "exit_status, end_ns + ?1, recording, source_pid FROM seg.processes",
            "INSERT INTO main.threads(ref, pid, tid, python_thread_id, name, samples, task_of, "
            "task_addr) SELECT ref, pid, tid, python_thread_id, name, 0, task_of, task_addr "
            "FROM seg.threads",
            "INSERT INTO main.sources SELECT file, size, mtime_ns, encoding, data FROM seg.sources",
            "DELETE FROM main.meta",
            "INSERT INTO main.meta SELECT key, value FROM seg.meta",
        };
        int rc = SQLITE_OK;
        for (size_t i = 0; rc == SQLITE_OK && i < sizeof(sql) / sizeof(sql[0]); i++)
                rc = exec2(db, sql[i], shift, 0);
        return rc;
}

/* One file's samples and counts, moved by `shift`. */
static int copy_samples(sqlite3 *db, int64_t shift)
{
        static const char *const sql[] = {
            "INSERT INTO main.sample_chunks(thread, first_ns, last_ns, count, data) "
            "SELECT thread, first_ns + ?1, last_ns + ?1, count, data FROM seg.sample_chunks "
            "ORDER BY id",
            "INSERT INTO main.errors SELECT pid, kind, count FROM seg.errors WHERE true "
            "ON CONFLICT(pid, kind) DO UPDATE SET count = count + excluded.count",
            "INSERT INTO main.stack_counts SELECT stack, state, samples FROM seg.stack_counts "
            "WHERE true ON CONFLICT(stack, state) DO UPDATE SET samples = samples + "
            "excluded.samples",
        };
        int rc = SQLITE_OK;
        for (size_t i = 0; rc == SQLITE_OK && i < sizeof(sql) / sizeof(sql[0]); i++)
                rc = exec2(db, sql[i], shift, 0);
        return rc;
}

/* Thread spans and the summary meta, from what was copied. */
static int summarize(sqlite3 *db, const struct segment_info *first, const struct segment_info *last)
{
        static const char *const sql[] = {
            "UPDATE main.threads SET first_ns = (SELECT min(first_ns) FROM main.sample_chunks c "
            "WHERE c.thread = ref), last_ns = (SELECT max(last_ns) FROM main.sample_chunks c "
            "WHERE c.thread = ref), samples = (SELECT coalesce(sum(count), 0) FROM "
            "main.sample_chunks c WHERE c.thread = ref)",
            /* Tasks' streams (--async) are counted apart from the threads' samples. */
            "INSERT OR REPLACE INTO main.meta VALUES ('samples', (SELECT coalesce(sum(c.count), 0) "
            "FROM main.sample_chunks c JOIN main.threads t ON t.ref = c.thread "
            "WHERE t.task_of IS NULL))",
            "DELETE FROM main.meta WHERE key = 'task_samples'",
            "INSERT INTO main.meta SELECT 'task_samples', sum(c.count) FROM main.sample_chunks c "
            "JOIN main.threads t ON t.ref = c.thread WHERE t.task_of IS NOT NULL "
            "HAVING count(*) > 0",
            ("INSERT OR REPLACE INTO main.meta VALUES ('errors', (SELECT coalesce(sum(count), 0) "
             "FROM main.errors))"),
            "DELETE FROM main.meta WHERE key = 'segment'",
        };
        int rc = SQLITE_OK;
        for (size_t i = 0; rc == SQLITE_OK && i < sizeof(sql) / sizeof(sql[0]); i++)
                rc = exec2(db, sql[i], 0, 0);
        const struct {
                const char *key;
                int64_t v;
        } meta[] = {
            {TRACE_META_START_MONO_NS, first->start_mono},
            {TRACE_META_START_WALL_NS, first->start_wall},
            {TRACE_META_END_MONO_NS, last->end_mono},
            {TRACE_META_END_WALL_NS, last->end_wall},
            {TRACE_META_DURATION_NS, last->end_mono - first->start_mono},
            {"segments", 0},
        };
        for (size_t i = 0; rc == SQLITE_OK && i < sizeof(meta) / sizeof(meta[0]); i++) {
                sqlite3_stmt *st;
                rc = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO main.meta VALUES (?1, ?2)", -1,
                                        &st, NULL);
                if (rc != SQLITE_OK)
                        break;
                sqlite3_bind_text(st, 1, meta[i].key, -1, SQLITE_STATIC);
                if (!strcmp(meta[i].key, "segments")) {
                        char buf[64];
                        snprintf(buf, sizeof(buf), "%lld-%lld", (long long)first->segment,
                                 (long long)last->segment);
                        sqlite3_bind_text(st, 2, buf, -1, SQLITE_TRANSIENT);
                } else {
                        sqlite3_bind_int64(st, 2, meta[i].v);
                }
                rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(db);
                sqlite3_finalize(st);
        }
        return rc;
}

/* Check the files against each other, reading their meta; 0 or a status. */
static int check_segments(struct trace_writer *w, sqlite3 *db, const char *const *paths, size_t n,
                          struct segment_info *first, struct segment_info *last)
{
        struct segment_info prev;
        for (size_t i = 0; i < n; i++) {
                struct segment_info si;
                int rc = attach(db, paths[i]);
                if (rc == SQLITE_OK) {
                        rc = read_info(db, &si);
                        exec2(db, "DETACH DATABASE seg", 0, 0);
                }
                if (rc != SQLITE_OK)
                        return trace_writer_fail(w, TRACE_ERR_IO, "%s: %s", paths[i],
                                                 sqlite3_errmsg(db));
                if (!si.set[0] || !si.finished)
                        return trace_writer_fail(w, TRACE_ERR_ARG,
                                                 "%s: not a finished file of a rotation", paths[i]);
                if (i && (strcmp(si.set, prev.set) || si.segment != prev.segment + 1 ||
                          si.start_mono != prev.end_mono))
                        return trace_writer_fail(w, TRACE_ERR_ARG,
                                                 "%s does not follow %s in one rotation (segment "
                                                 "%lld after %lld)",
                                                 paths[i], paths[i - 1], (long long)si.segment,
                                                 (long long)prev.segment);
                if (i == 0)
                        *first = si;
                prev = si;
        }
        *last = prev;
        return 0;
}

TRACE_API int trace_join_segments(const char *out, unsigned flags, const char *const *paths,
                                  size_t n, struct trace_writer **out_w)
{
        if (!out_w)
                return TRACE_ERR_ARG;
        struct trace_writer *w = NULL;
        int rc = trace_writer_create(out, flags, &w);
        *out_w = w;
        if (rc < 0)
                return rc;
        sqlite3 *db = trace_writer_db(w);
        if (!paths || n == 0) {
                rc = trace_writer_fail(w, TRACE_ERR_ARG, "no file to join");
                goto fail;
        }
        struct segment_info first = {0}, last = {0};
        if ((rc = check_segments(w, db, paths, n, &first, &last)) < 0)
                goto fail;
        /* One transaction a file: SQLite detaches no database inside one. */
        const char *failed = paths[n - 1];
        int src = attach(db, paths[n - 1]);
        if (src == SQLITE_OK) {
                if ((src = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL)) == SQLITE_OK &&
                    (src = copy_dictionaries(db, last.start_mono - first.start_mono)) == SQLITE_OK)
                        src = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
                if (src != SQLITE_OK)
                        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
                exec2(db, "DETACH DATABASE seg", 0, 0);
        }
        for (size_t i = 0; src == SQLITE_OK && i < n; i++) {
                struct segment_info si;
                failed = paths[i];
                if ((src = attach(db, paths[i])) != SQLITE_OK)
                        break;
                if ((src = read_info(db, &si)) == SQLITE_OK &&
                    (src = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL)) == SQLITE_OK &&
                    (src = copy_samples(db, si.start_mono - first.start_mono)) == SQLITE_OK)
                        src = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
                if (src != SQLITE_OK)
                        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
                exec2(db, "DETACH DATABASE seg", 0, 0);
        }
        if (src == SQLITE_OK) {
                failed = out;
                if ((src = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL)) == SQLITE_OK &&
                    (src = summarize(db, &first, &last)) == SQLITE_OK)
                        src = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
        }
        if (src != SQLITE_OK) {
                rc = trace_writer_fail(
                    w, (src & 0xff) == SQLITE_NOMEM ? TRACE_ERR_NOMEM : TRACE_ERR_IO,
                    "joining %s: %s", failed, sqlite3_errmsg(db));
                sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
                goto fail;
        }
        if ((rc = trace_writer_close_written(w)) < 0)
                goto fail_closed;
        return 0;
fail:
        trace_writer_close_written(w);
fail_closed:
        unlink(out);
        return rc;
}
