#!/usr/bin/env python3
"""End-to-end tests of asyncio tasks: pyflame-record --async and
pyflame-report --async.

For every interpreter on the machine, workloads/async_tasks.py (tasks of a
known structure on two event loops in two threads, see its docstring) is
recorded with --async while it runs, and the reports must show: every task
by name (3.8+; "Task" on 3.6 and 3.7), each in the await chain it waits in with the
file and line of every await; gather's and TaskGroup's children joined under
their parent's chain; each live task counted once in every sample, so that
the share of task-time in each chain is what the workload knows (8 of the
tasks in the "database" chain, 2 in the "cache" one); the CPU-bound task's
stacks are its thread's stacks from its coroutine on; the tasks of the second
loop belong to its thread; short-lived tasks made at a high rate do not upset
the rest, and those CPython names ("Task-<counter>") share the frame "Task-N"; under --blocking, the slots held over count every task too.
On 3.6 the C tasks are found through the static variable of _asyncio
that holds them. The same checks run again
with asyncio's pure-Python Task and Future (the workload blocks the
_asyncio module), whose tasks await each future in Future.__await__, a
frame of their chains the checks leave out. `pyflame-record --dump --async`
prints the task tree.

Usage: test_async.py --record PATH --report PATH [--only LABEL]
Prints one line per check and ends with 'N passed, N failed, N skipped'.
"""
import argparse
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

import interps

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "workloads", "async_tasks.py")
FRAME_RE = re.compile(r"^(.*) \((.*):(-?\d+)\)$")

# Long-lived tasks: name -> (chain of functions under the task, innermost last).
USERS = ["user-%d" % i for i in range(8)]
CACHES = ["cache-%d" % i for i in range(2)]


def interpreters():
    """(label, path) of every CPython we can test here (interps.py)."""
    return interps.interpreters()


def version_of(py):
    out = subprocess.run([py, "-c", "import sys; print('%d %d' % sys.version_info[:2])"],
                         stdout=subprocess.PIPE, universal_newlines=True).stdout.split()
    return int(out[0]), int(out[1])


def line_of(marker):
    with open(WORKLOAD) as f:
        for i, text in enumerate(f, 1):
            if marker in text:
                return i
    raise ValueError(marker)


class Runner:
    def __init__(self, args):
        self.record = os.path.abspath(args.record)
        self.report = os.path.abspath(args.report)
        self.passed = self.failed = self.skipped = 0
        self.tmp = tempfile.mkdtemp(prefix="pyflame-async-")

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print("ok   %s" % name)
        else:
            self.failed += 1
            print("FAIL %s %s" % (name, detail))
        sys.stdout.flush()
        return ok

    def skip(self, name, why):
        self.skipped += 1
        print("skip %s: %s" % (name, why))

    def rep(self, args):
        p = subprocess.run([self.report] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError("pyflame-report %s failed (%d): %s"
                               % (" ".join(args), p.returncode, p.stderr.strip()))
        return p.stdout


def start_workload(r, py, secs, pure=False):
    ready = os.path.join(r.tmp, "ready")
    if os.path.exists(ready):
        os.unlink(ready)
    env = dict(os.environ, PYFLAME_PURE_TASKS="1" if pure else "0")
    proc = subprocess.Popen([py, WORKLOAD, str(secs), ready], env=env)
    deadline = time.time() + 30
    while not os.path.exists(ready) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    return proc


def future_await(label):
    """Is it a frame of the pure-Python Future's __await__ (3.6: __iter__)?"""
    fn, path, _ = frame(label)
    return (path or "").endswith("futures.py") and fn.rpartition(".")[2] in ("__await__",
                                                                             "__iter__")


def folded(r, db, extra=(), pure=False):
    """[(labels root first, count)] of pyflame-report --async's folded output; for pure-Python
    tasks without the frames of Future.__await__ (asyncio/futures.py)."""
    rows = []
    for line in r.rep(["--async"] + list(extra) + [db]).splitlines():
        stack, _, count = line.rpartition(" ")
        labels = stack.split(";")
        if pure:
            labels = [l for l in labels if not future_await(l)]
        rows.append((labels, int(count)))
    return rows


def frame(label):
    """(function, file, line) of a folded label; (label, None, None) for a task's."""
    m = FRAME_RE.match(label)
    if not m:
        return label, None, None
    return m.group(1), m.group(2), int(m.group(3))


def chain_matches(labels, want):
    """Do the labels match `want`, a list of task names (str) and (function, marker) pairs?"""
    if len(labels) < len(want):
        return False
    for label, w in zip(labels, want):
        fn, path, line = frame(label)
        if isinstance(w, str):
            if path is not None or (w and fn != w):
                return False
        elif fn != w[0] or path != WORKLOAD or line != line_of(w[1]):
            return False
    return True


def test_version(r, label, py, pure=False):
    major, minor = version_of(py)
    tag = label + (" pure-Python" if pure else "")
    db = os.path.join(r.tmp, "async-%s%s.db" % (label, "-pure" if pure else ""))
    proc = start_workload(r, py, 8, pure)
    try:
        p = subprocess.run([r.record, "--async", "-q", "-f", "-d", "2", "-o", db, "-p",
                            str(proc.pid)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=120)
        dump = None
        if (major, minor) >= (3, 6):
            dump = subprocess.run([r.record, "--dump", "--async", "-p", str(proc.pid)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  universal_newlines=True, timeout=60)
    finally:
        proc.kill()
        proc.wait()
    if (major, minor) < (3, 6):
        r.check("%s: --async refused with a message, threads recorded" % tag,
                p.returncode == 0 and "asyncio tasks cannot be read" in p.stderr and
                sum(c for _, c in folded_threads(r, db)) > 0, p.stderr)
        return
    if not r.check("%s: recorded" % tag, p.returncode == 0, p.stderr):
        return
    names = (major, minor) >= (3, 8)
    rows = folded(r, db, pure=pure)
    if pure:
        awaits = sum(c for l, c in folded(r, db) if any(future_await(x) for x in l))
        r.check("%s: tasks wait in the pure-Python Future.__await__" % tag, awaits > 0)
    total = sum(c for _, c in rows)
    con = sqlite3.connect(db)
    threads = dict(con.execute("SELECT name, ref FROM threads WHERE task_of IS NULL"))
    main_ref = threads.get("MainThread")
    side_ref = threads.get("side-loop")
    thread_samples = dict(con.execute("SELECT ref, samples FROM threads WHERE task_of IS NULL"))

    def rows_of(task):
        return [(l, c) for l, c in rows if l[0] == (task if names else "Task")]

    # The database chain: user-N; handle; fetch_user; db_query; sleep.
    db_chain = [None, ("handle", "AWAIT-HANDLE"), ("fetch_user", "AWAIT-FETCH"),
                ("db_query", "AWAIT-DB")]
    cache_chain = [None, ("handle_cached", "AWAIT-HCACHE"), ("cache_get", "AWAIT-CACHE")]
    if names:
        for name in USERS + CACHES:
            want = [name] + (db_chain if name in USERS else cache_chain)[1:]
            got = rows_of(name)
            r.check("%s: %s waits in its await chain with file:line" % (tag, name),
                    got and all(chain_matches(l, want) and frame(l[-1])[0] == "sleep"
                                for l, _ in got), str(got[:2]))
    db_time = sum(c for l, c in rows if chain_matches(l, [""] + db_chain[1:]))
    cache_time = sum(c for l, c in rows if chain_matches(l, [""] + cache_chain[1:]))
    # Every live task counts once a sample: shares by number of tasks.
    n_tasks = (len(USERS) + len(CACHES) + 1 + 3 + (3 if (major, minor) >= (3, 11) else 0) +
               1 + 1 + 1 + 5 + 1)  # gather, TaskGroup, cpu, main, spawner, side loop's 5, unnamed
    main_samples = thread_samples.get(main_ref, 0)
    r.check("%s: the database chain holds 8 tasks' time (%.1f%%, expected about %.1f%%)"
            % (tag, 100.0 * db_time / max(total, 1), 800.0 / n_tasks),
            total and abs(db_time / total - 8.0 / n_tasks) < 0.03 and
            db_time >= 8 * main_samples * 0.9, "db %d of %d" % (db_time, total))
    r.check("%s: the cache chain holds 2 tasks' time (%.1f%%, expected about %.1f%%)"
            % (tag, 100.0 * cache_time / max(total, 1), 200.0 / n_tasks),
            total and abs(cache_time / total - 2.0 / n_tasks) < 0.03, "cache %d" % cache_time)
    # Each long-lived task once in every sample of its thread.
    if names:
        per_task = dict(con.execute("SELECT name, samples FROM threads WHERE task_of = ?",
                                    (main_ref,)))
        bad = [(n, per_task.get(n)) for n in USERS + CACHES
               if abs(per_task.get(n, 0) - main_samples) > 2]
        r.check("%s: each task counted once per sample (%d samples)" % (tag, main_samples),
                not bad and main_samples > 50, str(bad))
    # gather: the children under gather_parent's await.
    gather = [(l, c) for l, c in rows
              if chain_matches(l, [l[0], ("gather_parent", "AWAIT-GATHER"), "",
                                   ("gather_child", "AWAIT-GCHILD")])]
    kids = {l[2] for l, _ in gather}
    if names:
        ok = kids == {"gchild-0", "gchild-1", "gchild-2"} and all(l[0] == "gatherer"
                                                                  for l, _ in gather)
    else:  # 3.6, 3.7: every task is "Task", the three children share one line
        ok = abs(sum(c for _, c in gather) - 3 * main_samples) <= 6
    r.check("%s: gather's 3 children joined under their parent" % tag, ok, str(sorted(kids)))
    if (major, minor) >= (3, 11):
        group = [l for l, _ in rows
                 if chain_matches(l, [l[0], ("group_parent", "AWAIT-GROUP")]) and
                 len(l) > 4 and frame(l[2])[0] == "TaskGroup.__aexit__" and
                 chain_matches(l[3:], ["", ("group_child", "AWAIT-TGCHILD")])]
        kids = {l[3] for l in group}
        r.check("%s: the TaskGroup's 2 children joined under their parent" % tag,
                kids == {"tgchild-0", "tgchild-1"} and all(l[0] == "grouper" for l in group),
                str(sorted(kids)))
    # The CPU-bound task, when running, is its thread's stack from its coroutine on.
    cpu = [(l, c) for l, c in rows if len(l) > 1 and frame(l[1])[0] == "burn"]
    spin = sum(c for l, c in cpu if frame(l[-1])[0] == "spin")
    thread_rows = folded_threads(r, db, ["--idle"])
    suffixes = [l for l, _ in thread_rows]
    joined = all(any(t[-(len(l) - 1):] == l[1:] for t in suffixes)
                 for l, _ in cpu if frame(l[-1])[0] == "spin")
    r.check("%s: the CPU-bound task runs in spin most of the time (%d of %d) and matches "
            "its thread's stack" % (tag, spin, sum(c for _, c in cpu)),
            cpu and spin > 0.5 * sum(c for _, c in cpu) and joined and
            (not names or all(l[0] == "cpu" for l, _ in cpu)))
    # The second loop's tasks belong to its thread.
    side = con.execute("SELECT name, task_of FROM threads WHERE task_of IS NOT NULL AND "
                       "name LIKE 'side-%'").fetchall() if names else []
    if names:
        r.check("%s: the second loop's tasks are its thread's" % tag,
                len(side) == 5 and all(t == side_ref for _, t in side), str(side))
    side_rows = [l for l, _ in rows if len(l) > 1 and frame(l[1])[0] == "side_wait"]
    r.check("%s: the second loop's tasks wait in side_wait" % tag,
            len({tuple(l) for l in side_rows}) >= 1 and
            all(chain_matches(l, [l[0], ("side_wait", "AWAIT-SIDE")]) for l in side_rows))
    churn = [c for l, c in rows if len(l) > 1 and frame(l[1])[0] == "churn_one"]
    spawner = [c for l, c in rows if len(l) > 1 and frame(l[1])[0] == "spawner"]
    r.check("%s: short-lived tasks seen, their spawner always" % tag,
            sum(churn) > 0 and abs(sum(spawner) - main_samples) <= 2,
            "churn %d spawner %d" % (sum(churn), sum(spawner)))
    if names:
        # Tasks CPython named ("Task-<counter>") share one frame "Task-N", so the
        # stacks of a program making tasks all the time do not grow with their
        # number; each task's stream keeps its own name (the long-lived unnamed
        # task's: a short-lived one's stream is named after the last task at
        # its address, named or not).
        heads = {l[0] for l, _ in rows if len(l) > 1 and frame(l[1])[0] == "churn_one"}
        waits = [(l, c) for l, c in rows if chain_matches(l, ["", ("unnamed_wait",
                                                                   "AWAIT-UNNAMED")])]
        numbered = con.execute(
            "SELECT count(*) FROM frames f JOIN strings s ON s.id = f.function "
            "WHERE f.kind = 3 AND s.value GLOB 'Task-[0-9]*'").fetchone()[0]
        streams = con.execute("SELECT max(samples) FROM threads WHERE task_of IS NOT NULL "
                              "AND name GLOB 'Task-[0-9]*'").fetchone()[0] or 0
        r.check("%s: unnamed tasks share the frame Task-N, their streams keep their names "
                "(the waiting one's: %d samples)" % (tag, streams),
                heads <= {"churn", "Task-N"} and "churn" in heads and numbered == 0 and
                waits and {l[0] for l, _ in waits} == {"Task-N"} and
                abs(sum(c for _, c in waits) - main_samples) <= 2 and
                streams >= main_samples - 2,
                "heads %s, %d numbered task frames, waits %s" % (sorted(heads), numbered,
                                                                 waits[:2]))
    # The other views take --async too.
    by_fn = r.rep(["--async", "--by-function", "--top", "0", db])
    m = re.search(r"^\s*\d+\s+[\d.]+\s+(\d+)\s+[\d.]+\s+db_query\s", by_fn, re.M)
    r.check("%s: --by-function --async counts db_query's wall time" % tag,
            m and int(m.group(1)) == db_time, by_fn[:400])
    # The task tree of a live process.
    if dump is not None:
        text = dump.stdout
        want = ["gather_parent", "gather_child", "db_query"]
        if names:
            want += ["gatherer", "gchild-0", "user-7", "side-3"]
        r.check("%s: --dump --async prints the task tree" % tag,
                dump.returncode == 0 and all(w in text for w in want) and
                re.search(r"\(T\) gatherer awaiting _GatheringFuture\n(?:[│ ]+[^\n]*\n)*?[│ ]+[└├]── \(T\) gchild-0", text)
                if names else dump.returncode == 0 and all(w in text for w in want),
                dump.stderr + text[:600])


def test_blocking(r, label, py):
    """--blocking: the slots due while the threads are held take the held stacks, the
    tasks' samples too, so every live task still counts once in every sample."""
    major, minor = version_of(py)
    if (major, minor) < (3, 8):
        return
    db = os.path.join(r.tmp, "async-blocking-%s.db" % label)
    proc = start_workload(r, py, 8)
    try:
        # 1 kHz: holds of two threads often outlast a slot, so some are held over.
        p = subprocess.run([r.record, "--async", "--blocking", "-r", "1000", "-q", "-f", "-d",
                            "2", "-o", db, "-p", str(proc.pid)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    finally:
        proc.kill()
        proc.wait()
    if not r.check("%s --blocking: recorded" % label, p.returncode == 0, p.stderr):
        return
    con = sqlite3.connect(db)
    main_ref, main_samples = con.execute("SELECT ref, samples FROM threads WHERE task_of IS NULL "
                                         "AND name = 'MainThread'").fetchone()
    held = int(con.execute("SELECT coalesce((SELECT value FROM meta WHERE key = "
                           "'held_over_samples'), 0)").fetchone()[0])
    per_task = dict(con.execute("SELECT name, samples FROM threads WHERE task_of = ?",
                                (main_ref,)))
    bad = [(n, per_task.get(n)) for n in USERS + CACHES
           if abs(per_task.get(n, 0) - main_samples) > 2]
    r.check("%s --blocking: each task counted once per sample, held-over slots included "
            "(%d samples, %d held over)" % (label, main_samples, held),
            not bad and main_samples > 500, str(bad))


def folded_threads(r, db, extra=()):
    rows = []
    for line in r.rep(list(extra) + [db]).splitlines():
        stack, _, count = line.rpartition(" ")
        rows.append((stack.split(";"), int(count)))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--only", help="only interpreters whose label contains this")
    args = ap.parse_args()
    r = Runner(args)
    try:
        pys = [(l, p) for l, p in interpreters()
               if (not args.only or args.only in l) and not l.startswith("2.")]
        if not pys:
            r.skip("all", "no interpreter found")
        for label, py in pys:
            test_version(r, label, py)
            test_blocking(r, label, py)
            if version_of(py) >= (3, 6):
                test_version(r, label, py, pure=True)
    finally:
        shutil.rmtree(r.tmp, ignore_errors=True)
    print("%d passed, %d failed, %d skipped" % (r.passed, r.failed, r.skipped))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
