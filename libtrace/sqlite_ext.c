/*
 * sqlite_ext.c - pyflame_sqlite, a SQLite loadable extension that makes the
 * sample blobs of a trace queryable in plain SQL:
 *
 *     sqlite3 run.db -cmd '.load ./build/libtrace/pyflame_sqlite' \
 *         'SELECT thread, count(*) FROM pyflame_samples GROUP BY thread'
 *
 * pyflame_samples is an eponymous, read-only virtual table with one row per
 * sample: t_ns (relative to the start), thread (threads.ref), stack
 * (stacks.id) and state (the thread-state flag bits). It decodes
 * sample_chunks with the same bounded decoder as libtrace (chunk.h), so a
 * damaged blob ends the query with SQLITE_CORRUPT and a message, never a
 * crash. Constraints on thread (=) and t_ns (<, <=, >, >=) skip whole chunks;
 * SQLite still checks every row itself, so the pushdown only saves work.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#include "chunk.h"

enum { COL_T_NS, COL_THREAD, COL_STACK, COL_STATE };

struct samples_vtab {
        sqlite3_vtab base;
        sqlite3 *db;
};

/* idxNum bits: which constraints xFilter receives, in this order. */
enum { USE_THREAD = 1, USE_FROM = 2, USE_TO = 4 };

struct samples_cursor {
        sqlite3_vtab_cursor base;
        sqlite3_stmt *chunks;
        uint32_t n_stacks;
        sqlite3_int64 chunk_id, thread, rowid;
        struct chunk_cursor c;
        bool in_chunk, eof;
};

static int samples_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                           sqlite3_vtab **out, char **err)
{
        int rc = sqlite3_declare_vtab(
            db, "CREATE TABLE x(t_ns INTEGER, thread INTEGER, stack INTEGER, state INTEGER)");
        if (rc != SQLITE_OK)
                return rc;
        struct samples_vtab *v = sqlite3_malloc(sizeof(*v));
        if (!v)
                return SQLITE_NOMEM;
        memset(v, 0, sizeof(*v));
        v->db = db;
        sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
        *out = &v->base;
        return SQLITE_OK;
}

static int samples_disconnect(sqlite3_vtab *v)
{
        sqlite3_free(v);
        return SQLITE_OK;
}

static int samples_best_index(sqlite3_vtab *v, sqlite3_index_info *info)
{
        int thread = -1, from = -1, to = -1;
        for (int i = 0; i < info->nConstraint; i++) {
                const struct sqlite3_index_constraint *c = &info->aConstraint[i];
                if (!c->usable)
                        continue;
                if (c->iColumn == COL_THREAD && c->op == SQLITE_INDEX_CONSTRAINT_EQ)
                        thread = i;
                else if (c->iColumn == COL_T_NS && (c->op == SQLITE_INDEX_CONSTRAINT_GE ||
                                                    c->op == SQLITE_INDEX_CONSTRAINT_GT))
                        from = i;
                else if (c->iColumn == COL_T_NS && (c->op == SQLITE_INDEX_CONSTRAINT_LE ||
                                                    c->op == SQLITE_INDEX_CONSTRAINT_LT))
                        to = i;
        }
        int n = 0;
        info->idxNum = 0;
        if (thread >= 0) {
                info->idxNum |= USE_THREAD;
                info->aConstraintUsage[thread].argvIndex = ++n;
        }
        if (from >= 0) {
                info->idxNum |= USE_FROM;
                info->aConstraintUsage[from].argvIndex = ++n;
        }
        if (to >= 0) {
                info->idxNum |= USE_TO;
                info->aConstraintUsage[to].argvIndex = ++n;
        }
        info->estimatedCost = 1e6 / (1 + n * 10);
        info->estimatedRows = 1000000 / (1 + n * 10);
        return SQLITE_OK;
}

static int samples_open(sqlite3_vtab *v, sqlite3_vtab_cursor **out)
{
        struct samples_cursor *c = sqlite3_malloc(sizeof(*c));
        if (!c)
                return SQLITE_NOMEM;
        memset(c, 0, sizeof(*c));
        *out = &c->base;
        return SQLITE_OK;
}

static int samples_close(sqlite3_vtab_cursor *base)
{
        struct samples_cursor *c = (struct samples_cursor *)base;
        sqlite3_finalize(c->chunks);
        sqlite3_free(c);
        return SQLITE_OK;
}

static int set_error(sqlite3_vtab_cursor *base, int rc, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        sqlite3_free(base->pVtab->zErrMsg);
        base->pVtab->zErrMsg = sqlite3_vmprintf(fmt, ap);
        va_end(ap);
        return rc;
}

/* A constraint value usable for skipping chunks, or false (then skip nothing). */
static bool numeric_arg(sqlite3_value *v, sqlite3_int64 *out)
{
        int t = sqlite3_value_numeric_type(v);
        if (t == SQLITE_INTEGER) {
                *out = sqlite3_value_int64(v);
                return true;
        }
        if (t == SQLITE_FLOAT) {
                double d = sqlite3_value_double(v);
                if (!(d > -9.2e18 && d < 9.2e18))
                        return false;
                *out = (sqlite3_int64)d; /* truncation keeps the bounds conservative */
                return true;
        }
        return false;
}

/* Step to the next chunk row and start decoding it; sets eof at the end. */
static int next_chunk(struct samples_cursor *c)
{
        int rc = sqlite3_step(c->chunks);
        if (rc == SQLITE_DONE) {
                c->eof = true;
                return SQLITE_OK;
        }
        if (rc != SQLITE_ROW)
                return set_error(&c->base, rc, "pyflame_samples: %s",
                                 sqlite3_errmsg(sqlite3_db_handle(c->chunks)));
        c->chunk_id = sqlite3_column_int64(c->chunks, 0);
        c->thread = sqlite3_column_int64(c->chunks, 1);
        const void *blob = sqlite3_column_blob(c->chunks, 5);
        int len = sqlite3_column_bytes(c->chunks, 5);
        const char *why = NULL;
        if (sqlite3_column_type(c->chunks, 2) != SQLITE_INTEGER ||
            sqlite3_column_type(c->chunks, 3) != SQLITE_INTEGER ||
            sqlite3_column_type(c->chunks, 4) != SQLITE_INTEGER)
                why = "non-integer time or count";
        else
                chunk_cursor_init(&c->c, blob, (size_t)len, sqlite3_column_int64(c->chunks, 2),
                                  sqlite3_column_int64(c->chunks, 3),
                                  sqlite3_column_int64(c->chunks, 4), c->n_stacks, &why);
        if (why)
                return set_error(&c->base, SQLITE_CORRUPT,
                                 "pyflame_samples: damaged sample chunk %lld: %s",
                                 (long long)c->chunk_id, why);
        c->in_chunk = true;
        return SQLITE_OK;
}

static int samples_next(sqlite3_vtab_cursor *base)
{
        struct samples_cursor *c = (struct samples_cursor *)base;
        /* Each chunk holds at least one sample, so this loop ends. */
        while (!c->eof) {
                if (!c->in_chunk) {
                        int rc = next_chunk(c);
                        if (rc != SQLITE_OK || c->eof)
                                return rc;
                }
                const char *why = NULL;
                int d = chunk_cursor_next(&c->c, &why);
                if (d == 1) {
                        c->rowid++;
                        return SQLITE_OK;
                }
                if (d < 0)
                        return set_error(base, SQLITE_CORRUPT,
                                         "pyflame_samples: damaged sample chunk %lld: %s",
                                         (long long)c->chunk_id, why);
                c->in_chunk = false;
        }
        return SQLITE_OK;
}

static int samples_filter(sqlite3_vtab_cursor *base, int idx_num, const char *idx_str, int argc,
                          sqlite3_value **argv)
{
        struct samples_cursor *c = (struct samples_cursor *)base;
        sqlite3 *db = ((struct samples_vtab *)base->pVtab)->db;
        sqlite3_finalize(c->chunks);
        c->chunks = NULL;
        c->in_chunk = false;
        c->eof = false;
        c->rowid = 0;

        sqlite3_int64 thread = 0, from = INT64_MIN, to = INT64_MAX;
        bool by_thread = false;
        int i = 0;
        if ((idx_num & USE_THREAD) && i < argc)
                by_thread = numeric_arg(argv[i++], &thread);
        if ((idx_num & USE_FROM) && i < argc && !numeric_arg(argv[i++], &from))
                from = INT64_MIN;
        if ((idx_num & USE_TO) && i < argc && !numeric_arg(argv[i++], &to))
                to = INT64_MAX;

        /* Stack ids in the blobs must name existing stacks (ids are dense from 0). */
        sqlite3_stmt *st;
        int rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM stacks", -1, &st, NULL);
        if (rc != SQLITE_OK)
                return set_error(base, rc, "pyflame_samples: not a pyflame trace? (%s)",
                                 sqlite3_errmsg(db));
        rc = sqlite3_step(st);
        sqlite3_int64 n_stacks = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
        sqlite3_finalize(st);
        if (n_stacks < 0 || n_stacks > UINT32_MAX)
                return set_error(base, SQLITE_CORRUPT, "pyflame_samples: cannot count stacks");
        c->n_stacks = (uint32_t)n_stacks;

        rc = sqlite3_prepare_v2(db,
                                "SELECT id, thread, first_ns, last_ns, count, data "
                                "FROM sample_chunks WHERE last_ns >= ?1 AND first_ns <= ?2 "
                                "AND (?3 IS NULL OR thread = ?3) ORDER BY id",
                                -1, &c->chunks, NULL);
        if (rc != SQLITE_OK)
                return set_error(base, rc, "pyflame_samples: not a pyflame trace? (%s)",
                                 sqlite3_errmsg(db));
        sqlite3_bind_int64(c->chunks, 1, from);
        sqlite3_bind_int64(c->chunks, 2, to);
        if (by_thread)
                sqlite3_bind_int64(c->chunks, 3, thread);
        return samples_next(base);
}

static int samples_eof(sqlite3_vtab_cursor *base)
{
        return ((struct samples_cursor *)base)->eof;
}

static int samples_column(sqlite3_vtab_cursor *base, sqlite3_context *ctx, int col)
{
        struct samples_cursor *c = (struct samples_cursor *)base;
        switch (col) {
        case COL_T_NS:
                sqlite3_result_int64(ctx, c->c.t_ns);
                break;
        case COL_THREAD:
                sqlite3_result_int64(ctx, c->thread);
                break;
        case COL_STACK:
                sqlite3_result_int64(ctx, c->c.stack);
                break;
        case COL_STATE:
                sqlite3_result_int64(ctx, c->c.state);
                break;
        }
        return SQLITE_OK;
}

static int samples_rowid(sqlite3_vtab_cursor *base, sqlite3_int64 *rowid)
{
        *rowid = ((struct samples_cursor *)base)->rowid;
        return SQLITE_OK;
}

static const sqlite3_module samples_module = {
    .iVersion = 0,
    .xCreate = NULL, /* eponymous only: no CREATE VIRTUAL TABLE */
    .xConnect = samples_connect,
    .xBestIndex = samples_best_index,
    .xDisconnect = samples_disconnect,
    .xDestroy = samples_disconnect,
    .xOpen = samples_open,
    .xClose = samples_close,
    .xFilter = samples_filter,
    .xNext = samples_next,
    .xEof = samples_eof,
    .xColumn = samples_column,
    .xRowid = samples_rowid,
};

/* The entry point SQLite derives from the file name pyflame_sqlite.so. */
__attribute__((visibility("default"))) int
sqlite3_pyflamesqlite_init(sqlite3 *db, char **err, const sqlite3_api_routines *api);

__attribute__((visibility("default"))) int
sqlite3_pyflamesqlite_init(sqlite3 *db, char **err, const sqlite3_api_routines *api)
{
        SQLITE_EXTENSION_INIT2(api);
        return sqlite3_create_module(db, "pyflame_samples", &samples_module, NULL);
}
