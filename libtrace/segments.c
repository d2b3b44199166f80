/*
 * segments.c - trace_join_segments(): the files of one rotation joined back
 * into one trace (pyflame-record's flight recorder writes its snapshot so).
 *
 * A rotation (trace_writer_rotate) leaves files that share one writer's
 * ids: every string, frame and stack of an earlier file has the same id,
 * with the same content, in every later one, and each later file knows at
 * least as much. Threads (and tasks' streams) and processes are the
 * exception: a later file holds only the threads with samples in it,
 * numbered in its own order, and the processes alive in it, so a program
 * that makes a thread per request, or a host where --all sees many short
 * processes, does not fill every file with all it ever had; threads are
 * matched by what they are (join_threads()), processes by pid. Their times are relative to each
 * file's start on the one monotonic clock of the recorder, and each file
 * starts where the one before ended. Joining them is therefore a copy in
 * SQL, with only thread refs mapped: the last file's dictionaries, then every file's
 * sample chunks with their times moved onto the first file's time line
 * (a chunk's blob holds times relative to its own first_ns, so it is
 * copied as it is), summed error and stack counts, and the thread spans
 * and meta computed from what was copied.
 *
 * Reading a set (trace_reader_open_set) joins the same way into a
 * temporary file, with three differences: a missing file is a gap, kept in
 * meta gaps (schema/trace.sql) for the reports to show, not an error; the
 * last file may be one the recorder is still writing (its dictionaries
 * and samples are then copied in one read transaction, so they agree);
 * and the samples are not copied: each chunk's row comes with an empty
 * blob under an id that says which file holds it (trace_set_file), so the
 * join costs what the files' dictionaries and chunk rows take, and the
 * reader reads each blob in place.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "trace.h"
#include "trace_internal.h"

struct segment_info {
        int64_t start_mono, end_mono, start_wall, end_wall, segment;
        char set[128];
        bool finished;
        bool joined;      /* itself a join of files of the set (meta segments) */
        const char *path; /* the file's name, in messages */
        const char *file; /* where it is read: path, or a copy of it */
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

/*
 * Attach the file at `path` as seg, read-only: a join never writes to the
 * files it reads. (Read-write, SQLite would roll back a hot journal left
 * by a killed recorder in the user's file; read-only it says
 * SQLITE_READONLY_ROLLBACK, and the reader rolls it back in a copy.)
 */
static int attach(sqlite3 *db, const char *path)
{
        char *uri = trace_sqlite_uri(path, "mode=ro");
        if (!uri)
                return SQLITE_NOMEM;
        sqlite3_stmt *st;
        int rc = sqlite3_prepare_v2(db, "ATTACH DATABASE ?1 AS seg", -1, &st, NULL);
        if (rc == SQLITE_OK) {
                sqlite3_bind_text(st, 1, uri, -1, SQLITE_STATIC);
                rc = sqlite3_step(st);
                sqlite3_finalize(st);
        }
        free(uri);
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
                else if (!strcmp(k, "segments"))
                        si->joined = true;
                else if (!strcmp(k, TRACE_META_SEGMENT_SET)) {
                        const char *t = (const char *)sqlite3_column_text(st, 1);
                        snprintf(si->set, sizeof(si->set), "%s", t ? t : "");
                }
        }
        sqlite3_finalize(st);
        return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/*
 * The last file's dictionaries, moved onto the first file's time line.
 * Threads and processes are not among them: each file has its own
 * (join_threads(), join_processes()).
 */
static int copy_dictionaries(sqlite3 *db, int64_t shift)
{
        static const char *const sql[] = {
            "INSERT INTO main.strings SELECT id, value FROM seg.strings",
            "INSERT INTO main.frames(id, function, qualname, file, line, first_line, kind, module, "
            "module_offset) SELECT id, function, qualname, file, line, first_line, kind, module, "
            "module_offset FROM seg.frames",
            "INSERT INTO main.stacks SELECT id, parent, frame, depth FROM seg.stacks WHERE id > 0",
            "INSERT INTO main.sources SELECT file, size, mtime_ns, encoding, data FROM seg.sources",
            "DELETE FROM main.meta",
            "INSERT INTO main.meta SELECT key, value FROM seg.meta",
        };
        int rc = SQLITE_OK;
        for (size_t i = 0; rc == SQLITE_OK && i < sizeof(sql) / sizeof(sql[0]); i++)
                rc = exec2(db, sql[i], shift, 0);
        return rc;
}

/*
 * The threads and tasks' streams of one file, joined to those of the files
 * before by what they are (the writer's key: pid, tid, Python thread id; a
 * task's stream: its thread and its Task's address), new ones given the
 * next refs; temp.tmap says which ref of the join each of the file's refs
 * is. A file written before a rotation numbered its streams as the writer
 * did, and a later one only those it has samples of, in its own order.
 * Within one file two rows may be one stream: a thread ended and the same
 * one added again (trace_writer_end_thread()); both map to one.
 */
static int join_threads(sqlite3 *db)
{
        static const char *const sql[] = {
            "DELETE FROM temp.tmap",
            "INSERT INTO main.threads(ref, pid, tid, python_thread_id, name, samples) "
            "SELECT (SELECT coalesce(max(ref), 0) FROM main.threads) + row_number() OVER "
            "(ORDER BY min(s.ref)), s.pid, s.tid, s.python_thread_id, s.name, 0 FROM "
            "seg.threads s WHERE s.task_of IS NULL AND NOT EXISTS (SELECT 1 FROM main.threads m "
            "WHERE m.pid = s.pid AND m.tid IS s.tid AND m.python_thread_id IS "
            "s.python_thread_id AND m.task_of IS NULL AND m.task_addr IS NULL) GROUP BY s.pid, "
            "s.tid, s.python_thread_id ORDER BY min(s.ref)",
            "INSERT INTO temp.tmap SELECT s.ref, m.ref FROM seg.threads s JOIN main.threads m ON "
            "m.pid = s.pid AND m.tid IS s.tid AND m.python_thread_id IS s.python_thread_id AND "
            "m.task_of IS NULL AND m.task_addr IS NULL WHERE s.task_of IS NULL",
            "INSERT INTO main.threads(ref, pid, tid, python_thread_id, name, samples, task_of, "
            "task_addr) SELECT (SELECT coalesce(max(ref), 0) FROM main.threads) + row_number() "
            "OVER (ORDER BY min(s.ref)), s.pid, s.tid, s.python_thread_id, s.name, 0, p.joined, "
            "s.task_addr FROM seg.threads s JOIN temp.tmap p ON p.ref = s.task_of WHERE NOT "
            "EXISTS (SELECT 1 FROM main.threads m WHERE m.pid = s.pid AND m.tid IS s.tid AND "
            "m.python_thread_id IS s.python_thread_id AND m.task_of = p.joined AND "
            "m.task_addr IS s.task_addr) GROUP BY s.pid, s.tid, s.python_thread_id, p.joined, "
            "s.task_addr ORDER BY min(s.ref)",
            "INSERT INTO temp.tmap SELECT s.ref, m.ref FROM seg.threads s JOIN temp.tmap p ON "
            "p.ref = s.task_of JOIN main.threads m ON m.pid = s.pid AND m.tid IS s.tid AND "
            "m.python_thread_id IS s.python_thread_id AND m.task_of = p.joined AND "
            "m.task_addr IS s.task_addr",
            /* A stream's name is its latest. */
            ("UPDATE main.threads SET name = s.name FROM seg.threads s JOIN temp.tmap t ON "
             "t.ref = s.ref WHERE main.threads.ref = t.joined AND main.threads.name IS NOT s.name"),
        };
        int rc = SQLITE_OK;
        for (size_t i = 0; rc == SQLITE_OK && i < sizeof(sql) / sizeof(sql[0]); i++)
                rc = exec2(db, sql[i], 0, 0);
        return rc;
}

/*
 * The processes of one file, moved by `shift`: a rotated file has those
 * alive at its start and those that came or ended in it; a later file's
 * row of a process is the newer.
 */
static int join_processes(sqlite3 *db, int64_t shift)
{
        return exec2(db,
                     "INSERT INTO main.processes SELECT pid, cmdline, python_version, "
                     "python_build, exit_status, end_ns + ?1, recording, source_pid FROM "
                     "seg.processes WHERE true ON CONFLICT(pid) DO UPDATE SET cmdline = "
                     "excluded.cmdline, python_version = excluded.python_version, python_build = "
                     "excluded.python_build, exit_status = excluded.exit_status, end_ns = "
                     "excluded.end_ns, recording = excluded.recording, source_pid = "
                     "excluded.source_pid",
                     shift, 0);
}

/*
 * One file's samples and counts, moved by `shift`. For reading a set
 * (`in_place`), each chunk's row only, its blob left in the file, under id
 * `base` + its own, and no stack counts (a summary for SQL, which the
 * reader never reads).
 */
static int copy_samples(sqlite3 *db, int64_t shift, bool in_place, int64_t base)
{
        static const char *const sql[] = {
            "INSERT INTO main.sample_chunks(thread, first_ns, last_ns, count, data) "
            "SELECT t.joined, c.first_ns + ?1, c.last_ns + ?1, c.count, c.data "
            "FROM seg.sample_chunks c JOIN temp.tmap t ON t.ref = c.thread ORDER BY c.id",
            "INSERT INTO main.sample_chunks(id, thread, first_ns, last_ns, count, data) "
            "SELECT c.id + ?2, t.joined, c.first_ns + ?1, c.last_ns + ?1, c.count, X'' "
            "FROM seg.sample_chunks c JOIN temp.tmap t ON t.ref = c.thread ORDER BY c.id",
            "INSERT INTO main.errors SELECT pid, kind, count FROM seg.errors WHERE true "
            "ON CONFLICT(pid, kind) DO UPDATE SET count = count + excluded.count",
            "INSERT INTO main.stack_counts SELECT stack, state, samples FROM seg.stack_counts "
            "WHERE true ON CONFLICT(stack, state) DO UPDATE SET samples = samples + "
            "excluded.samples",
        };
        int rc = exec2(db, sql[in_place ? 1 : 0], shift, base);
        if (rc == SQLITE_OK)
                rc = exec2(db, sql[2], 0, 0);
        if (rc == SQLITE_OK && !in_place)
                rc = exec2(db, sql[3], 0, 0);
        return rc;
}

/* The largest chunk id in the join (0: none); a SQLite code. */
static int last_chunk_id(sqlite3 *db, int64_t *id)
{
        sqlite3_stmt *st;
        int rc = sqlite3_prepare_v2(db, "SELECT coalesce(max(id), 0) FROM main.sample_chunks", -1,
                                    &st, NULL);
        if (rc != SQLITE_OK)
                return rc;
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
                *id = sqlite3_column_int64(st, 0);
                rc = SQLITE_OK;
        }
        sqlite3_finalize(st);
        return rc;
}

/* Thread spans and the summary meta, from what was copied. */
static int summarize(sqlite3 *db, const struct segment_info *first, const struct segment_info *last)
{
        static const char *const sql[] = {
            /* One pass over the chunks (not one per thread: workers come and go). */
            "UPDATE main.threads SET first_ns = s.f, last_ns = s.l, samples = s.n FROM "
            "(SELECT thread, min(first_ns) AS f, max(last_ns) AS l, sum(count) AS n FROM "
            "main.sample_chunks GROUP BY thread) AS s WHERE s.thread = main.threads.ref",
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
                /* A file still being written has no end yet: neither has the join. */
                if (!last->finished && (i >= 2 && i <= 4))
                        continue;
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

/*
 * The attached file's meta, and for a file still being written (no end
 * yet) an end just after its last sample; a SQLite code.
 */
static int read_info_live(sqlite3 *db, struct segment_info *si)
{
        int rc = read_info(db, si);
        if (rc != SQLITE_OK || si->finished)
                return rc;
        sqlite3_stmt *st;
        if ((rc = sqlite3_prepare_v2(db, "SELECT coalesce(max(last_ns), 0) FROM seg.sample_chunks",
                                     -1, &st, NULL)) != SQLITE_OK)
                return rc;
        if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                int64_t last = sqlite3_column_int64(st, 0) + 1;
                si->end_mono = si->start_mono + last;
                si->end_wall = si->start_wall + last;
                rc = SQLITE_OK;
        }
        sqlite3_finalize(st);
        return rc;
}

/* Read each file's meta into si[i] (in the order given); 0 or a status. */
static int read_segments(struct trace_writer *w, sqlite3 *db, const char *const *paths,
                         const char *const *names, size_t n, struct segment_info *si)
{
        for (size_t i = 0; i < n; i++) {
                int rc = attach(db, paths[i]);
                if (rc == SQLITE_OK) {
                        rc = read_info_live(db, &si[i]);
                        exec2(db, "DETACH DATABASE seg", 0, 0);
                }
                if (rc == SQLITE_READONLY_ROLLBACK)
                        return trace_writer_fail(w, TRACE_ERR_ARG,
                                                 "%s: not a finished file (its recorder was "
                                                 "stopped in the middle of writing it)",
                                                 names[i]);
                /* ATTACH's own message names the URI: say what the system said. */
                if ((rc & 0xff) == SQLITE_CANTOPEN && sqlite3_system_errno(db))
                        return trace_writer_fail(w, TRACE_ERR_IO, "%s: cannot open: %s", names[i],
                                                 strerror(sqlite3_system_errno(db)));
                if (rc != SQLITE_OK)
                        return trace_writer_fail(w, TRACE_ERR_IO, "%s: %s", names[i],
                                                 sqlite3_errmsg(db));
                si[i].path = names[i];
                si[i].file = paths[i];
        }
        return 0;
}

/* Check the files against each other, in the order given; 0 or a status. */
static int check_segments(struct trace_writer *w, const struct segment_info *si, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                const struct segment_info *prev = i ? &si[i - 1] : NULL;
                if (!si[i].set[0] || !si[i].finished)
                        return trace_writer_fail(
                            w, TRACE_ERR_ARG, "%s: not a finished file of a rotation", si[i].path);
                if (prev && (strcmp(si[i].set, prev->set) || si[i].segment != prev->segment + 1 ||
                             si[i].start_mono != prev->end_mono))
                        return trace_writer_fail(w, TRACE_ERR_ARG,
                                                 "%s does not follow %s in one rotation (segment "
                                                 "%lld after %lld)",
                                                 si[i].path, prev->path, (long long)si[i].segment,
                                                 (long long)prev->segment);
        }
        return 0;
}

static int by_segment(const void *a, const void *b)
{
        int64_t x = ((const struct segment_info *)a)->segment;
        int64_t y = ((const struct segment_info *)b)->segment;
        return (x > y) - (x < y);
}

/*
 * For reading a set: put the files in their order and check that they are
 * of one rotation, allowing gaps and a last file still being written.
 * Appends the gaps to `gaps` as meta gaps has them. 0 or a status.
 */
static int order_set(struct trace_writer *w, struct segment_info *si, size_t n, char *gaps,
                     size_t gaps_size)
{
        for (size_t i = 0; i < n; i++) {
                if (!si[i].set[0])
                        return trace_writer_fail(w, TRACE_ERR_ARG,
                                                 "%s is not a file of a rotating recording (no "
                                                 "meta segment_set); to read several recordings "
                                                 "together, merge them with pyflame-report merge",
                                                 si[i].path);
                if (si[i].joined)
                        return trace_writer_fail(w, TRACE_ERR_ARG,
                                                 "%s is already the files of a rotation joined "
                                                 "(a snapshot, or pyflame-report join): read it "
                                                 "alone, or leave it out",
                                                 si[i].path);
                if (strcmp(si[i].set, si[0].set))
                        return trace_writer_fail(w, TRACE_ERR_ARG,
                                                 "%s and %s are of different recordings (segment "
                                                 "sets %s and %s); to read them together, merge "
                                                 "them with pyflame-report merge",
                                                 si[0].path, si[i].path, si[0].set, si[i].set);
        }
        qsort(si, n, sizeof(*si), by_segment);
        size_t used = 0;
        gaps[0] = '\0';
        for (size_t i = 0; i < n; i++) {
                if (!si[i].finished && i + 1 < n)
                        return trace_writer_fail(w, TRACE_ERR_ARG,
                                                 "%s: not a finished file of the rotation, yet "
                                                 "not its last (%s comes after it)",
                                                 si[i].path, si[i + 1].path);
                if (!i)
                        continue;
                const struct segment_info *prev = &si[i - 1];
                if (si[i].segment == prev->segment)
                        return trace_writer_fail(w, TRACE_ERR_ARG,
                                                 "%s and %s are both segment %lld of the "
                                                 "recording (one file given twice?)",
                                                 prev->path, si[i].path, (long long)si[i].segment);
                if (si[i].start_mono < prev->end_mono)
                        return trace_writer_fail(w, TRACE_ERR_ARG,
                                                 "%s starts before %s ends: not files of one "
                                                 "rotation",
                                                 si[i].path, prev->path);
                if (si[i].segment == prev->segment + 1 && si[i].start_mono == prev->end_mono)
                        continue;
                int k = snprintf(gaps + used, gaps_size - used, "%s%lld,%lld,%lld,%lld",
                                 used ? ";" : "", (long long)(prev->end_mono - si[0].start_mono),
                                 (long long)(si[i].start_mono - si[0].start_mono),
                                 (long long)prev->segment + 1, (long long)si[i].segment - 1);
                if (k < 0 || (size_t)k >= gaps_size - used)
                        return trace_writer_fail(w, TRACE_ERR_ARG,
                                                 "too many gaps between the files (the first "
                                                 "before %s)",
                                                 si[i].path);
                used += (size_t)k;
        }
        return 0;
}

static int set_meta_text(sqlite3 *db, const char *key, const char *value)
{
        sqlite3_stmt *st;
        int rc = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO main.meta VALUES (?1, ?2)", -1, &st,
                                    NULL);
        if (rc != SQLITE_OK)
                return rc;
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
        rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(db);
        sqlite3_finalize(st);
        return rc;
}

/*
 * Copy the files `si` (checked, in order) into the writer's database; for
 * reading a set (`files` not NULL) the chunks' rows only, files[i] set to
 * where file i's chunks are.
 */
static int copy_segments(struct trace_writer *w, sqlite3 *db, const struct segment_info *si,
                         size_t n, const char *out, const char *gaps, struct trace_set_file *files)
{
        /* One transaction a file: SQLite detaches no database inside one. */
        const char *failed = out;
        /*
         * SQLite's message of the failed statement, kept before the ROLLBACK
         * and DETACH that follow it replace it ("not an error").
         */
        char why[256] = "";
        /*
         * Threads are matched by what they are (join_threads()): an index for
         * it while joining, and each file's refs mapped to the join's in tmap.
         */
        int src = exec2(db,
                        "CREATE INDEX main.join_thread_key ON threads(pid, tid, python_thread_id, "
                        "task_of, task_addr)",
                        0, 0);
        if (src == SQLITE_OK)
                src = exec2(db, "CREATE TEMP TABLE tmap(ref INTEGER PRIMARY KEY, joined INTEGER)",
                            0, 0);
        for (size_t i = 0; src == SQLITE_OK && i < n; i++) {
                failed = si[i].path;
                int64_t shift = si[i].start_mono - si[0].start_mono;
                /* A file's chunks follow the last id of the file before. */
                int64_t base = files && i ? files[i - 1].last_id : 0;
                if ((src = attach(db, si[i].file)) != SQLITE_OK)
                        break;
                /*
                 * The last file's dictionaries hold every id of the files
                 * before; read with its samples, they hold every id those
                 * samples use even while the recorder adds to the file.
                 */
                if ((src = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL)) == SQLITE_OK &&
                    (src = join_processes(db, shift)) == SQLITE_OK &&
                    (src = join_threads(db)) == SQLITE_OK &&
                    (i + 1 < n || (src = copy_dictionaries(db, shift)) == SQLITE_OK) &&
                    (src = copy_samples(db, shift, files != NULL, base)) == SQLITE_OK &&
                    (!files || (src = last_chunk_id(db, &files[i].last_id)) == SQLITE_OK))
                        src = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
                if (src != SQLITE_OK) {
                        snprintf(why, sizeof(why), "%s", sqlite3_errmsg(db));
                        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
                }
                exec2(db, "DETACH DATABASE seg", 0, 0);
                if (files)
                        files[i].base = base;
        }
        if (src == SQLITE_OK) {
                failed = out;
                if ((src = exec2(db, "DROP INDEX main.join_thread_key", 0, 0)) == SQLITE_OK &&
                    (src = exec2(db, "DROP TABLE temp.tmap", 0, 0)) == SQLITE_OK &&
                    (src = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL)) == SQLITE_OK &&
                    (src = summarize(db, &si[0], &si[n - 1])) == SQLITE_OK &&
                    (!gaps || !gaps[0] || (src = set_meta_text(db, "gaps", gaps)) == SQLITE_OK))
                        src = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
        }
        if (src != SQLITE_OK) {
                int rc = trace_writer_fail(
                    w, (src & 0xff) == SQLITE_NOMEM ? TRACE_ERR_NOMEM : TRACE_ERR_IO,
                    "joining %s: %s", failed, why[0] ? why : sqlite3_errmsg(db));
                sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
                return rc;
        }
        return 0;
}

/* Both joins: `set` for reading a set (any order, gaps, a live last file). */
static int join(const char *out, unsigned flags, const char *const *paths, const char *const *names,
                size_t n, bool set, struct trace_writer **out_w, struct trace_set_file **out_files)
{
        if (!out_w)
                return TRACE_ERR_ARG;
        struct trace_writer *w = NULL;
        int rc = trace_writer_create(out, flags, &w);
        *out_w = w;
        if (rc < 0)
                return rc;
        sqlite3 *db = trace_writer_db(w);
        /* A live recorder holds its file's lock briefly once a second: wait for it. */
        sqlite3_busy_timeout(db, 5000);
        /*
         * The files come from anywhere: nothing in their schemas runs (the
         * join reads their tables by name), as the reader opens them.
         */
        sqlite3_extended_result_codes(db, 1);
        sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
        sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
        sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, NULL);
        sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_VIEW, 0, NULL);
        exec2(db, "PRAGMA cell_size_check = ON", 0, 0);
        struct segment_info *si = NULL;
        struct trace_set_file *files = NULL;
        char *gaps = NULL;
        if (!paths || n == 0) {
                rc = trace_writer_fail(w, TRACE_ERR_ARG, "no file to join");
                goto fail;
        }
        si = calloc(n, sizeof(*si));
        gaps = set ? malloc(TRACE_GAPS_MAX) : NULL;
        files = set ? calloc(n, sizeof(*files)) : NULL;
        if (!si || (set && (!gaps || !files))) {
                rc = trace_writer_fail(w, TRACE_ERR_NOMEM, "out of memory");
                goto fail;
        }
        if ((rc = read_segments(w, db, paths, names ? names : paths, n, si)) < 0 ||
            (rc = set ? order_set(w, si, n, gaps, TRACE_GAPS_MAX) : check_segments(w, si, n)) < 0 ||
            (rc = copy_segments(w, db, si, n, out, gaps, files)) < 0)
                goto fail;
        for (size_t i = 0; files && i < n; i++)
                if (!(files[i].path = strdup(si[i].file)) ||
                    (strcmp(si[i].file, si[i].path) && !(files[i].name = strdup(si[i].path)))) {
                        rc = trace_writer_fail(w, TRACE_ERR_NOMEM, "out of memory");
                        goto fail;
                }
        free(si);
        free(gaps);
        if ((rc = trace_writer_close_written(w)) < 0)
                goto fail_closed;
        if (out_files) {
                *out_files = files;
                return 0;
        }
        for (size_t i = 0; files && i < n; i++) {
                free(files[i].path);
                free(files[i].name);
        }
        free(files);
        return 0;
fail:
        free(si);
        free(gaps);
        trace_writer_close_written(w);
fail_closed:
        for (size_t i = 0; files && i < n; i++) {
                free(files[i].path);
                free(files[i].name);
        }
        free(files);
        unlink(out);
        return rc;
}

TRACE_API int trace_join_segments(const char *out, unsigned flags, const char *const *paths,
                                  size_t n, struct trace_writer **out_w)
{
        return join(out, flags, paths, NULL, n, false, out_w, NULL);
}

int trace_join_set(const char *out, const char *const *paths, const char *const *names, size_t n,
                   struct trace_writer **out_w, struct trace_set_file **files)
{
        if (files)
                *files = NULL;
        return join(out, TRACE_CREATE_FORCE, paths, names, n, true, out_w, files);
}
