/*
 * fuzz_report.c - libFuzzer target: any file, taken as a trace, through
 * every report command and format (and so every reader entry point they
 * use): folded stacks, the hotspot tables in each format, time slices,
 * filters and windows, info, annotate, diff, merge, and the svg, html,
 * speedscope, pprof and chrome exports. Each input must end in a report or
 * in exit status 2 with a message; a crash, a hang (-timeout), a leak or an
 * unbounded allocation (-rss_limit_mb, -malloc_limit_mb) is a finding.
 *
 * Mutations are blind (libFuzzer's byte-level ones) a third of the time and
 * structure-aware otherwise: the input is loaded into an in-memory SQLite
 * database and one of its cells, rows, blobs or schema entries is changed,
 * so that damaged traces still get past "not a SQLite database" and reach
 * the code that trusts counts, ids, lengths and blobs.
 *
 * The report's main() is built in as pyflame_report_main() (-Dmain=...).
 * Build with clang: CC=clang meson setup build-fuzz -Dfuzz=true
 * -Db_sanitize=address,undefined -Db_lundef=false; run with
 * tests/fuzz/run_fuzz.sh (see it for the corpus and the long run).
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

int pyflame_report_main(int argc, char **argv);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

static char dir[] = "/tmp/pyflame-fuzz-XXXXXX";
static char trace_path[64], journal_path[80], out_path[64], merged_path[64];
static int null_fd = -1, saved_stderr = -1; /* the reports' messages go to /dev/null */

#define T "<trace>"
#define O "<out>"
#define M "<merged>"

/* Every command and format, with the options that change what is read. */
static const char *const runs[][16] = {
    {"report", T},
    {"report", "--by-line", "--top", "0", "--idle", T},
    {"report", "--by-function", "--format", "json", "--top", "0", T},
    {"report", "--by-function", "--format", "csv", "--gil", T},
    {"report", "--format", "json", "--idle", T},
    {"report", "--slices", "50ms", "--format", "json", T},
    {"report", "--slices", "1s", "--top", "2", T},
    {"report", "--from", "10%", "--to", "90%", "--thread", "1,MainThread", "--pid", "1", T},
    {"report", "--from", "1ms", "--to", "2s", "--by-line", "--format", "json", T},
    {"report", "--format", "svg", "-f", "-o", O, T},
    {"report", "--format", "html", "-f", "-o", O, T},
    {"report", "--format", "speedscope", "-f", "-o", O, "--idle", T},
    {"report", "--format", "pprof", "-f", "-o", O, T},
    {"report", "--format", "chrome", "-f", "-o", O, T},
    {"info", T},
    {"info", "--format", "json", T},
    {"annotate", T},
    {"annotate", "--format", "json", "--top", "3", T},
    {"diff", T, T},
    {"diff", "--format", "json", "--by-line", "--per", "time", T, T},
    {"diff", "--format", "markdown", "--fail-on", "self:+5pp", T "@0%..50%", T "@50%..100%"},
    {"merge", "-f", "-o", M, T, T},
    {"report", M},
};

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        (void)argc, (void)argv;
        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                abort();
        }
        snprintf(trace_path, sizeof(trace_path), "%s/t.db", dir);
        snprintf(journal_path, sizeof(journal_path), "%s-journal", trace_path);
        snprintf(out_path, sizeof(out_path), "%s/out", dir);
        snprintf(merged_path, sizeof(merged_path), "%s/merged.db", dir);
        /* A hot journal is rolled back in a copy under TMPDIR: keep those here too. */
        setenv("TMPDIR", dir, 1);
        null_fd = open("/dev/null", O_WRONLY);
        dup2(null_fd, STDOUT_FILENO);
        saved_stderr = getenv("FUZZ_VERBOSE") ? -1 : dup(STDERR_FILENO);
        return 0;
}

/* Argument `a` with the placeholders made paths, into buf. */
static char *expand(const char *a, char *buf, size_t len)
{
        if (!strcmp(a, O))
                return strcpy(buf, out_path);
        if (!strcmp(a, M))
                return strcpy(buf, merged_path);
        if (!strncmp(a, T, strlen(T))) {
                snprintf(buf, len, "%s%s", trace_path, a + strlen(T));
                return buf;
        }
        snprintf(buf, len, "%s", a);
        return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        unlink(journal_path);
        unlink(merged_path);
        int fd = open(trace_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || write(fd, data, size) != (ssize_t)size)
                abort();
        close(fd);
        for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
                char args[16][128], *argv[17];
                int argc = 0;
                argv[argc++] = (char *)"pyflame-report";
                for (size_t i = 0; i < 15 && runs[r][i]; i++)
                        argv[argc++] = expand(runs[r][i], args[i], sizeof(args[i]));
                argv[argc] = NULL;
                if (saved_stderr >= 0)
                        dup2(null_fd, STDERR_FILENO); /* libFuzzer's own reports stay */
                pyflame_report_main(argc, argv);
                if (saved_stderr >= 0)
                        dup2(saved_stderr, STDERR_FILENO);
                unlink(out_path);
        }
        return 0;
}

/* ---- structure-aware mutation ---- */

static uint64_t rng;

static uint64_t rnd(uint64_t n)
{
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return n ? rng % n : rng;
}

/* One result of a query as text (the caller frees it), or NULL. */
static char *query_text(sqlite3 *db, const char *sql)
{
        sqlite3_stmt *st;
        char *res = NULL;
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
                return NULL;
        if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
                res = strdup((const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
        return res;
}

/* A value that tends to break assumptions: extremes, negatives, wrong types. */
static void random_value(char *buf, size_t len)
{
        static const char *const special[] = {
            "0",
            "-1",
            "1",
            "2147483647",
            "-2147483648",
            "4294967295",
            "NULL",
            "9223372036854775807",
            "-9223372036854775808",
            "''",
            "x''",
            "x'00'",
            "'nan'",
            "1e308",
            "'../../etc/passwd'",
            "x'ff80'",
            "zeroblob(70000000)",
            "randomblob(64)",
            "'\xff\xfe'",
        };
        if (rnd(2))
                snprintf(buf, len, "%s", special[rnd(sizeof(special) / sizeof(special[0]))]);
        else
                snprintf(buf, len, "%lld", (long long)(int64_t)rnd(0) >> rnd(64));
}

/* Change one thing in the database: a cell, a blob's bytes, a row, the schema. */
static void mutate_db(sqlite3 *db)
{
        char sql[512], value[64];
        char *table = query_text(db, "SELECT name FROM sqlite_schema WHERE type = 'table' "
                                     "ORDER BY random() LIMIT 1");
        if (!table)
                return;
        snprintf(sql, sizeof(sql),
                 "SELECT name FROM pragma_table_info('%s') ORDER BY random() LIMIT 1", table);
        char *column = query_text(db, sql);
        switch (rnd(8)) {
        case 0:
        case 1:
        case 2: /* a cell */
                random_value(value, sizeof(value));
                snprintf(sql, sizeof(sql),
                         "UPDATE \"%s\" SET \"%s\" = %s WHERE rowid IN "
                         "(SELECT rowid FROM \"%s\" ORDER BY random() LIMIT %d)",
                         table, column ? column : "rowid", value, table, 1 + (int)rnd(3));
                break;
        case 3: /* a blob or text: cut, or bytes flipped */
                if (rnd(2))
                        snprintf(sql, sizeof(sql),
                                 "UPDATE \"%s\" SET \"%s\" = substr(\"%s\", 1, "
                                 "abs(random()) %% (length(\"%s\") + 1)) WHERE rowid IN "
                                 "(SELECT rowid FROM \"%s\" ORDER BY random() LIMIT 1)",
                                 table, column, column, column, table);
                else
                        snprintf(sql, sizeof(sql),
                                 "UPDATE \"%s\" SET \"%s\" = CASE WHEN typeof(\"%s\") = 'blob' "
                                 "AND length(\"%s\") > 0 THEN substr(\"%s\", 1, %d) || "
                                 "randomblob(1) || substr(\"%s\", %d) ELSE \"%s\" END "
                                 "WHERE rowid IN (SELECT rowid FROM \"%s\" ORDER BY random() "
                                 "LIMIT 1)",
                                 table, column, column, column, column, (int)rnd(64), column,
                                 (int)rnd(64) + 2, column, table);
                break;
        case 4: /* a row gone */
                snprintf(sql, sizeof(sql),
                         "DELETE FROM \"%s\" WHERE rowid IN "
                         "(SELECT rowid FROM \"%s\" ORDER BY random() LIMIT 1)",
                         table, table);
                break;
        case 5: /* a row twice, with another rowid */
                snprintf(sql, sizeof(sql),
                         "INSERT INTO \"%s\" SELECT * FROM \"%s\" ORDER BY random() LIMIT 1", table,
                         table);
                break;
        case 6: /* something planted in the schema */
                snprintf(sql, sizeof(sql), "%s",
                         rnd(2) ? "CREATE VIEW IF NOT EXISTS v AS WITH RECURSIVE c(x) AS "
                                  "(SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c"
                                : "CREATE TRIGGER IF NOT EXISTS t AFTER INSERT ON meta "
                                  "BEGIN SELECT load_extension('x'); END");
                break;
        default: /* a table's definition rewritten */
                snprintf(sql, sizeof(sql),
                         "PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = "
                         "replace(sql, '%s', 'x%s') WHERE name = '%s'; "
                         "PRAGMA writable_schema = OFF",
                         column ? column : "id", column ? column : "id", table);
                break;
        }
        sqlite3_exec(db, sql, NULL, NULL, NULL);
        free(table);
        free(column);
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
        rng = seed * 0x9e3779b97f4a7c15ull | 1;
        if (rnd(3) == 0 || size < 512)
                return LLVMFuzzerMutate(data, size, max_size);
        sqlite3 *db = NULL;
        unsigned char *copy = sqlite3_malloc64(size);
        if (!copy || sqlite3_open(":memory:", &db) != SQLITE_OK) {
                sqlite3_free(copy);
                sqlite3_close(db);
                return LLVMFuzzerMutate(data, size, max_size);
        }
        memcpy(copy, data, size);
        if (sqlite3_deserialize(db, "main", copy, (sqlite3_int64)size, (sqlite3_int64)size,
                                SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_RESIZEABLE) !=
            SQLITE_OK) {
                sqlite3_close(db);
                return LLVMFuzzerMutate(data, size, max_size);
        }
        for (int i = 1 + (int)rnd(3); i > 0; i--)
                mutate_db(db);
        sqlite3_int64 n = 0;
        unsigned char *out = sqlite3_serialize(db, "main", &n, 0);
        size_t len = size;
        if (out && n > 0 && (size_t)n <= max_size) {
                memcpy(data, out, (size_t)n);
                len = (size_t)n;
        }
        sqlite3_free(out);
        sqlite3_close(db);
        return len == size && !out ? LLVMFuzzerMutate(data, size, max_size) : len;
}
