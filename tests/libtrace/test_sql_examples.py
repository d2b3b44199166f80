#!/usr/bin/env python3
"""Run the SQL examples of libtrace/EXAMPLES-SQL.md with the sqlite3 shell.

Writes the known trace of example_trace.c, runs every ```sql block of the
examples file through `sqlite3 FILE -cmd '.load EXT' QUERY` as a user would,
and checks the answers against what the generator says the trace holds. Also
checks that plain tables and the pyflame_samples extension agree, that the
extension's chunk skipping (thread and time constraints) changes no answer,
and that a damaged sample blob makes the query fail with a message instead of
crashing the shell.

Usage: test_sql_examples.py EXAMPLE_TRACE_EXE EXTENSION_SO EXAMPLES_MD SQLITE3
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile


def fail(msg):
    print('FAIL: ' + msg)
    sys.exit(1)


def main():
    generator, extension, examples, sqlite3 = sys.argv[1:5]
    ext = os.path.splitext(os.path.abspath(extension))[0]  # .load takes it without .so
    env = dict(os.environ)
    preload = os.environ.get('PYFLAME_TEST_PRELOAD')
    if preload:
        # Sanitizer builds: the extension needs the ASan runtime loaded first.
        env['LD_PRELOAD'] = preload
        env['ASAN_OPTIONS'] = 'detect_leaks=0'

    def sql(db, query, expect_ok=True, load=True):
        cmd = [sqlite3, '-bail', db]
        if load:
            cmd[2:2] = ['-cmd', '.load ' + ext]
        p = subprocess.run(cmd + [query], capture_output=True, text=True, env=env, timeout=60)
        if expect_ok and (p.returncode != 0 or p.stderr):
            fail('%s\n  exit %d, stderr: %s' % (query, p.returncode, p.stderr.strip()))
        return p

    def rows(db, query, load=True):
        out = sql(db, query, load=load).stdout.strip()
        return [line.split('|') for line in out.splitlines()] if out else []

    def scalar(db, query, load=True):
        r = rows(db, query, load)
        if len(r) != 1 or len(r[0]) != 1:
            fail('%s: expected one value, got %r' % (query, r))
        return int(float(r[0][0]))

    tmp = tempfile.mkdtemp(prefix='libtrace-sql-')
    try:
        db = os.path.join(tmp, 'example.pyflame')
        merged = os.path.join(tmp, 'merged.pyflame')
        gen = subprocess.run([generator, db, merged], capture_output=True, text=True, check=True)
        known = {k: int(v) for k, v in (line.split() for line in gen.stdout.splitlines())}

        text = open(examples).read()
        blocks = re.findall(r'```sql\n(.*?)```', text, re.S)
        if len(blocks) != 3:
            fail('expected 3 sql blocks in %s, found %d' % (examples, len(blocks)))
        plain, with_ext, origin = blocks

        # Example 1 (plain SQL) needs no extension.
        top = rows(db, plain, load=False)
        if not top or top[0][0] != 'hot_loop' or int(top[0][2]) != known['hot_loop_samples']:
            fail('plain example: expected hot_loop with %d samples first, got %r'
                 % (known['hot_loop_samples'], top))
        if sum(int(r[2]) for r in top) != known['samples']:
            fail('plain example: samples do not add up to %d: %r' % (known['samples'], top))

        # Example 2 (extension): worker ran hot_loop on CPU for all of 2..3 s.
        win = rows(db, with_ext)
        if not win or win[0][:2] != ['worker', 'hot_loop'] or int(win[0][4]) != 100:
            fail('extension example: expected worker|hot_loop 100 first, got %r' % win)
        if sum(int(r[4]) for r in win) != known['window_on_cpu']:
            fail('extension example: expected %d samples, got %r' % (known['window_on_cpu'], win))

        # Example 3 (origin): one recording, then the same merged with itself,
        # whose colliding pid 1234 stays distinct but shows its source pid.
        host = rows(db, "SELECT value FROM meta WHERE key = 'host'", load=False)[0][0]
        one = rows(db, origin, load=False)
        if one != [[host, '', '1234', '1234', str(known['samples'])]]:
            fail('origin example, single recording: %r' % one)
        two = rows(merged, origin, load=False)
        want = [[host, 'a.pyflame', '1234', '1234', str(known['samples'])],
                [host, 'b.pyflame', '4194304', '1234', str(known['samples'])]]
        if two != want:
            fail('origin example, merged: %r, expected %r' % (two, want))

        # Plain tables and decoded samples agree.
        n = known['samples']
        for q in ('SELECT count(*) FROM pyflame_samples',
                  'SELECT sum(samples) FROM threads',
                  'SELECT sum(samples) FROM stack_counts',
                  "SELECT value FROM meta WHERE key = 'samples'"):
            if scalar(db, q) != n:
                fail('%s: expected %d' % (q, n))
        per_thread = rows(db, 'SELECT thread, count(*) FROM pyflame_samples GROUP BY thread')
        if per_thread != [['1', str(known['thread_samples'])], ['2', str(known['thread_samples'])]]:
            fail('samples per thread: %r' % per_thread)
        # Pushed-down constraints (which skip chunks) give the answers SQLite alone gives.
        for where in ('thread = 2', 't_ns >= 2000000000', 't_ns < 1000000000.5',
                      't_ns BETWEEN 1e9 AND 2e9 AND thread = 1', 't_ns > 5e9', 'thread = 7'):
            direct = scalar(db, 'SELECT count(*) FROM pyflame_samples WHERE ' + where)
            unpushed = re.sub(r'\b(thread|t_ns)\b', r'+\1', where)
            slow = scalar(db, 'SELECT count(*) FROM pyflame_samples WHERE ' + unpushed)
            if direct != slow:
                fail('%s: %d with chunk skipping, %d without' % (where, direct, slow))

        # A text constraint compares as a number, with or without chunk skipping.
        if scalar(db, "SELECT count(*) FROM pyflame_samples WHERE thread = '1'") != \
                known['thread_samples']:
            fail("thread = '1' did not find thread 1's samples")

        # A damaged blob: an error message, not a crash.
        bad = os.path.join(tmp, 'bad.pyflame')
        shutil.copy(db, bad)
        sql(bad, "UPDATE sample_chunks SET data = X'FFFF' WHERE id = 1", load=False)
        p = sql(bad, 'SELECT count(*) FROM pyflame_samples', expect_ok=False)
        if p.returncode == 0 or 'damaged sample chunk 1' not in p.stderr:
            fail('damaged blob: exit %d, stderr %r' % (p.returncode, p.stderr))
        if p.returncode < 0:
            fail('damaged blob crashed the shell (signal %d)' % -p.returncode)
        # Not a trace at all.
        other = os.path.join(tmp, 'other.db')
        sql(other, 'CREATE TABLE t(x)', load=False)
        p = sql(other, 'SELECT count(*) FROM pyflame_samples', expect_ok=False)
        if p.returncode <= 0 or 'not a pyflame trace' not in p.stderr:
            fail('not a trace: exit %d, stderr %r' % (p.returncode, p.stderr))
        print('ok: %d example queries, %d samples' % (len(blocks), n))
    finally:
        shutil.rmtree(tmp)


if __name__ == '__main__':
    main()
