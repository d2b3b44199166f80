"""Reading a trace's samples in the tests, independently of pyflame-report:
the sample chunks decoded as schema/trace.sql describes them."""
import sqlite3


def varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def samples(db, where="t.task_of IS NULL"):
    """[(thread ref, time ns from the trace's start, stack, state)] of every
    sample of the streams that `where` selects (threads, by default)."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT c.thread, c.first_ns, c.count, c.data FROM sample_chunks c "
                           "JOIN threads t ON t.ref = c.thread WHERE " + where).fetchall()
    finally:
        con.close()
    out = []
    for ref, first, count, data in rows:
        data = bytes(data)
        i, t, stack, state = 0, first, None, None
        for k in range(count):
            v, i = varint(data, i)
            if k:
                t += v >> 1
            if not (v & 1) or state is None:
                w, i = varint(data, i)
                state = w & 7
                stack = w >> 3
            out.append((ref, t, stack, state))
    return out


def threads(db, where="t.task_of IS NULL"):
    """The refs of the streams that `where` selects (threads, by default)."""
    con = sqlite3.connect(db)
    try:
        return [r[0] for r in con.execute("SELECT t.ref FROM threads t WHERE " + where)]
    finally:
        con.close()
