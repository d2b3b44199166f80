/*
 * status.c - names of the trace_status codes and the mapping of SQLite
 * result codes onto them, shared by the writer and the reader.
 */
#include <sqlite3.h>

#include "trace.h"
#include "trace_internal.h"

TRACE_API const char *trace_status_str(int status)
{
        switch (status) {
        case TRACE_OK:
                return "ok";
        case TRACE_ERR_NOMEM:
                return "out of memory";
        case TRACE_ERR_IO:
                return "input/output error";
        case TRACE_ERR_EXISTS:
                return "file exists";
        case TRACE_ERR_NOT_SQLITE:
                return "not a SQLite database";
        case TRACE_ERR_NOT_TRACE:
                return "not a pyflame trace";
        case TRACE_ERR_TOO_NEW:
                return "trace format too new";
        case TRACE_ERR_CORRUPT:
                return "damaged trace";
        case TRACE_ERR_ARG:
                return "invalid argument";
        case TRACE_ERR_STATE:
                return "invalid call now";
        default:
                return "unknown status";
        }
}

int trace_status_from_sqlite(int sqlite_rc)
{
        switch (sqlite_rc & 0xff) {
        case SQLITE_NOMEM:
                return TRACE_ERR_NOMEM;
        case SQLITE_CORRUPT:
        case SQLITE_FORMAT:
        case SQLITE_RANGE:
        case SQLITE_MISMATCH:
        case SQLITE_CONSTRAINT:
        case SQLITE_TOOBIG:
                return TRACE_ERR_CORRUPT;
        case SQLITE_NOTADB:
                return TRACE_ERR_NOT_SQLITE;
        default:
                return TRACE_ERR_IO;
        }
}
