#!/usr/bin/env python3
"""Faults while recording, and targets that change under the walker: each must
end with a clear message or a clean trace, the target unharmed, and nothing
already committed lost.

- stress: a target that starts and joins threads without pause, unwinds deep
  recursions, compiles new code all the time and finally execs into another
  Python version, recorded in both modes: the recorder neither crashes nor
  reports a frame it did not read (every function is one the target has).
- kill -9 of the recorder at random moments, many times: every trace opens,
  says it was not finalized, and holds the samples up to its last commit
  (about a second before the kill).
- kill -9 of the target in the middle of a recording (attached): the recorder
  ends with status 0 and a finalized trace.
- a full disk (a small tmpfs): exit 7 with a message, the program runs to its
  end and its output is intact.
- the trace's directory removed while recording: a message, the program runs
  to its end.
- a report of the trace while it is being written: works, every time.
- 1,000 threads; a tree of 50 child processes under -s: all recorded.

Usage: test_faults.py --record PATH --report PATH [--only 3.12] [--mode ...]
Needs root for the tmpfs (skipped otherwise). Exits 77 when no interpreter.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

import interps

HERE = os.path.dirname(os.path.abspath(__file__))

STRESS = r'''
import os, sys, threading, time
sys.setrecursionlimit(10000)
def rec(n):
    return rec(n - 1) if n else 0
def churn(stop):
    while not stop[0]:
        t = threading.Thread(target=rec, args=(50,))
        t.start()
        t.join()
stop = [False]
churners = [threading.Thread(target=churn, args=(stop,)) for _ in range(2)]
for t in churners:
    t.start()
end = time.time() + float(sys.argv[1])
i = 0
while time.time() < end:
    rec(2000)
    exec(compile("def fresh_%d():\n    return rec(%d)\n" % (i, 10 + i % 90), "<gen>", "exec"))
    eval("fresh_%d()" % i)
    i += 1
stop[0] = True
for t in churners:
    t.join()
sys.stdout.write("stressed %d\n" % i)
sys.stdout.flush()
if len(sys.argv) > 2:
    os.execv(sys.argv[2], [sys.argv[2], "-c", "import time\nend = time.time() + 1\nwhile time.time() < end: pass\nprint('after exec')"])
'''

BUSY = r'''
import sys, time
def busy():
    x = 0
    for i in range(1000):
        x += i
    return x
end = time.time() + float(sys.argv[1])
n = 0
while time.time() < end:
    busy()
    n += 1
print("busy done %d" % n)
'''

THREADS = r'''
import sys, threading, time
ready = threading.Barrier(int(sys.argv[1]) + 1)
stop = threading.Event()
def worker():
    ready.wait()
    stop.wait()
ts = [threading.Thread(target=worker, name="w%d" % i) for i in range(int(sys.argv[1]))]
for t in ts:
    t.start()
ready.wait()
end = time.time() + float(sys.argv[2])
while time.time() < end:
    pass
stop.set()
for t in ts:
    t.join()
print("threads done")
'''

TREE = r'''
import os, sys, time
def spin(t):
    end = time.time() + t
    while time.time() < end:
        pass
kids = []
for i in range(int(sys.argv[1])):
    pid = os.fork()
    if pid == 0:
        spin(float(sys.argv[2]))
        os._exit(0)
    kids.append(pid)
spin(float(sys.argv[2]))
for k in kids:
    os.waitpid(k, 0)
print("tree done")
'''


def interpreters():
    """(label, path) of every pyenv CPython 3 here (interps.py)."""
    return [(v, p) for v, p in interps.interpreters(debian=False) if not v.startswith("2.")]


class Runner:
    def __init__(self, args):
        self.args = args
        self.tmp = tempfile.mkdtemp(prefix="pyflame-faults-")
        self.passed = self.failed = 0

    def check(self, name, ok, detail=""):
        print("%s %s%s" % ("ok  " if ok else "FAIL", name, "" if ok else " " + str(detail)[:600]))
        sys.stdout.flush()
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        return ok

    def script(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def info(self, db):
        p = subprocess.run([self.args.report, "info", "--format", "json", db],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=60)
        return (json.loads(p.stdout) if p.returncode == 0 else None), p.stderr

    def folded(self, db, *extra):
        p = subprocess.run([self.args.report, "--idle"] + list(extra) + [db],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=60)
        return p.returncode, p.stdout


def mode_flags(mode):
    return ["--blocking"] if mode == "blocking" else []


def test_stress(r, label, py, other, mode):
    db = os.path.join(r.tmp, "stress.db")
    script = r.script("stress.py", STRESS)
    args = [py, script, "3"] + ([other] if other else [])
    p = subprocess.run([r.args.record, "-q", "-f", "-r", "1k", "-o", db] + mode_flags(mode) +
                       ["--"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120)
    name = "%s %s stress (threads, deep recursion, new code%s)" % (
        label, mode, ", exec into %s" % os.path.basename(os.path.dirname(os.path.dirname(other)))
        if other else "")
    r.check(name + ": recorder and program exit 0", p.returncode == 0 and "stressed" in p.stdout
            and (not other or "after exec" in p.stdout), "%d %s %s" % (
                p.returncode, p.stdout[-200:], p.stderr[-300:]))
    rc, out = r.folded(db)
    # Where the target's code can come from: the script, code it compiled, and
    # the standard library of either interpreter (startup, threading, imports).
    libs = [os.path.dirname(os.path.dirname(p)) for p in (py, other) if p]
    strange = set()
    for line in out.splitlines():
        for fr in line.rpartition(" ")[0].split(";"):
            m = re.match(r"^.* \((.*):-?\d+\)$", fr)
            f = m.group(1) if m else fr
            if not (f in (script, "<gen>", "<string>", "<no Python frame>") or
                    f.startswith("<frozen ") or any(f.startswith(lib) for lib in libs)):
                strange.add(f)
    r.check(name + ": the report reads it, every frame from a file the target runs",
            rc == 0 and len(out) > 0 and not strange, "rc %d, unexpected: %s" % (
                rc, sorted(strange)[:10]))


def test_kill_recorder(r, label, py, mode):
    script = r.script("busy.py", BUSY)
    bad = []
    short = []
    for i in range(10):
        db = os.path.join(r.tmp, "killed%d.db" % i)
        rec = subprocess.Popen([r.args.record, "-q", "-f", "-r", "200", "-o", db] +
                               mode_flags(mode) + ["--", py, script, "20"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
        wait = random.uniform(0.3, 3.0)
        time.sleep(wait)
        rec.kill()
        rec.wait()
        # The program is left running by a killed recorder: stop it.
        subprocess.run(["pkill", "-KILL", "-f", script], stderr=subprocess.DEVNULL)
        inf, err = r.info(db)
        if inf is None:
            bad.append((i, round(wait, 2), err.strip()[:200]))
            continue
        if inf.get("finalized"):
            bad.append((i, "claims to be finalized"))
        # Commits come about once a second: what was sampled before the last one is there.
        if wait > 1.6 and inf["samples"] < 200 * (wait - 1.6) * 0.7:
            short.append((i, round(wait, 2), inf["samples"]))
    r.check("%s %s kill -9 of the recorder, 10 times: every trace opens, not finalized" %
            (label, mode), not bad, bad)
    r.check("%s %s kill -9 of the recorder: samples up to about a second before the kill" %
            (label, mode), not short, short)


def test_kill_target(r, label, py, mode):
    script = r.script("busy.py", BUSY)
    target = subprocess.Popen([py, script, "30"], stdout=subprocess.DEVNULL)
    db = os.path.join(r.tmp, "victim.db")
    time.sleep(0.3)
    rec = subprocess.Popen([r.args.record, "-q", "-f", "-r", "1k", "-p", str(target.pid), "-o", db] +
                           mode_flags(mode), stderr=subprocess.PIPE, universal_newlines=True)
    time.sleep(random.uniform(0.5, 1.5))
    target.kill()
    target.wait()
    try:
        _, err = rec.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        rec.kill()
        r.check("%s %s target killed mid-recording: the recorder ends" % (label, mode), False)
        return
    inf, ierr = r.info(db)
    r.check("%s %s target killed mid-recording: exit 0, trace finalized with samples" % (label, mode),
            rec.returncode == 0 and inf and inf["finalized"] and inf["samples"] > 100,
            "%d %s %s" % (rec.returncode, err.strip()[:200], ierr[:200]))


def test_disk_full(r, label, py, mode):
    if os.geteuid() != 0:
        print("skip %s %s disk full: needs root for a tmpfs" % (label, mode))
        return
    mnt = tempfile.mkdtemp(prefix="small-", dir=r.tmp)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", mnt]).returncode:
        print("skip %s %s disk full: cannot mount a tmpfs" % (label, mode))
        return
    try:
        script = r.script("stress.py", STRESS)
        p = subprocess.run([r.args.record, "-f", "-r", "1k", "-o", os.path.join(mnt, "t.db")] +
                           mode_flags(mode) + ["--", py, script, "2"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
        r.check("%s %s full disk: exit 7, says so, and the program runs to its end" % (label, mode),
                p.returncode == 7 and "full" in p.stderr and "stressed" in p.stdout,
                "%d %r %r" % (p.returncode, p.stdout[-200:], p.stderr[-300:]))
    finally:
        subprocess.run(["umount", "-l", mnt])


def test_dir_removed(r, label, py, mode):
    d = os.path.join(r.tmp, "gone")
    os.mkdir(d)
    script = r.script("busy.py", BUSY)
    rec = subprocess.Popen([r.args.record, "-f", "-r", "200", "-o", os.path.join(d, "t.db")] +
                           mode_flags(mode) + ["--", py, script, "3"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True)
    time.sleep(1.0)
    shutil.rmtree(d)
    out, err = rec.communicate(timeout=60)
    r.check("%s %s trace directory removed while recording: a message, the program runs to its end"
            % (label, mode), "busy done" in out and rec.returncode != 0 and
            ("t.db" in err), "%d %r %r" % (rec.returncode, out[-200:], err[-300:]))


def test_concurrent_report(r, label, py, mode):
    db = os.path.join(r.tmp, "live.db")
    script = r.script("busy.py", BUSY)
    rec = subprocess.Popen([r.args.record, "-q", "-f", "-r", "1k", "-o", db] + mode_flags(mode) +
                           ["--", py, script, "4"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, universal_newlines=True)
    time.sleep(1.2)
    fails = []
    counts = []
    while rec.poll() is None:
        inf, err = r.info(db)
        if inf is None:
            fails.append(err.strip()[:200])
        else:
            counts.append(inf["samples"])
        time.sleep(0.05)
    rec.wait()
    final, _ = r.info(db)
    r.check("%s %s reports while recording: %d of %d read, sample counts never go down; the "
            "trace ends finalized" % (label, mode, len(counts), len(counts) + len(fails), ),
            not fails and counts == sorted(counts) and final and final["finalized"] and
            rec.returncode == 0, "%s %s" % (fails[:3], rec.stderr.read()[-200:]))


def test_many_threads(r, label, py, mode):
    db = os.path.join(r.tmp, "threads.db")
    script = r.script("threads.py", THREADS)
    p = subprocess.run([r.args.record, "-q", "-f", "-r", "100", "-o", db] + mode_flags(mode) +
                       ["--", py, script, "1000", "2"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=180)
    inf, err = r.info(db)
    names = {t["name"] for t in inf["threads"]} if inf else set()
    workers = sum(1 for n in names if n and re.match(r"^w\d+$", n))
    r.check("%s %s 1,000 threads: all recorded and named (%d)" % (label, mode, workers),
            p.returncode == 0 and workers == 1000, "%d %s" % (p.returncode, p.stderr[-300:]))


def test_process_tree(r, label, py, mode):
    db = os.path.join(r.tmp, "tree.db")
    script = r.script("tree.py", TREE)
    p = subprocess.run([r.args.record, "-q", "-f", "-r", "100", "-s", "-o", db] +
                       mode_flags(mode) + ["--", py, script, "50", "3"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=180)
    inf, err = r.info(db)
    n = len(inf["processes"]) if inf else 0
    r.check("%s %s a tree of 50 children under -s: all 51 processes recorded (%d)" %
            (label, mode, n), p.returncode == 0 and "tree done" in p.stdout and n == 51,
            "%d %s" % (p.returncode, p.stderr[-300:]))


def committed_chunks(path):
    """How many chunks of samples a trace being written has committed (0 if unreadable)."""
    try:
        con = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=0.1)
        try:
            return con.execute("SELECT count(*) FROM sample_chunks").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def test_symlinks(r, label, py, mode):
    """The recorder runs as root and may write where another user can plant symbolic
    links: a link at the trace's path or at its journal's must never be followed."""
    if os.geteuid() != 0 or mode != "nonblocking":
        return
    d = tempfile.mkdtemp(prefix="shared-", dir=r.tmp)
    os.chmod(d, 0o777)  # anyone may create and replace names here
    victim = os.path.join(r.tmp, "victim")
    with open(victim, "w") as f:
        f.write("precious\n")
    script = r.script("busy.py", BUSY)
    out = os.path.join(d, "t.db")
    os.symlink(victim, out)
    p = subprocess.run([r.args.record, "-q", "-r", "100", "-o", out, "--", py,
                        script, "0.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=60)
    r.check("%s a symbolic link at the trace's path: refused (exit 7), not followed" % label,
            p.returncode == 7 and open(victim).read() == "precious\n", "%d %s" % (
                p.returncode, p.stderr[-200:]))
    os.unlink(out)
    rec = subprocess.Popen([r.args.record, "-r", "100", "-o", out, "--", py, script, "3"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
    deadline = time.time() + 10
    # Plant once samples are committed: a link planted while the trace is being
    # created makes the recording fail to start (nothing recorded, program stopped).
    while not committed_chunks(out) and time.time() < deadline and rec.poll() is None:
        time.sleep(0.05)
    planted = False
    while not planted and time.time() < deadline and rec.poll() is None:
        try:
            os.symlink(victim, out + "-journal")  # between two commits, when it is deleted
            planted = True
        except FileExistsError:
            time.sleep(0.001)
    o, e = rec.communicate(timeout=60)
    r.check("%s a symbolic link planted at the journal's path while recording: not followed, "
            "the recording stops with a message, the program runs to its end" % label,
            planted and open(victim).read() == "precious\n" and rec.returncode == 7 and
            "journal" in e and "busy done" in o, "%s %d %r" % (planted, rec.returncode, e[-300:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--only", help="interpreter labels, comma-separated (default: newest, 3.9)")
    ap.add_argument("--mode", choices=["nonblocking", "blocking"])
    ap.add_argument("--test", help="run only tests whose name contains this")
    args = ap.parse_args()
    pys = interpreters()
    if not pys:
        print("SKIP: no interpreter found")
        return 77
    want = args.only.split(",") if args.only else [pys[-1][0].rsplit(".", 1)[0], "3.9"]
    chosen = [(v, p) for v, p in pys if any(v == w or v.startswith(w + ".") for w in want)]
    r = Runner(args)
    tests = [test_stress, test_kill_recorder, test_kill_target, test_disk_full, test_dir_removed,
             test_concurrent_report, test_many_threads, test_process_tree, test_symlinks]
    try:
        for label, py in chosen:
            # Exec into another version: the oldest 3.x here, or the newest from the oldest.
            other = pys[0][1] if pys[0][1] != py else pys[-1][1]
            for mode in [args.mode] if args.mode else ["nonblocking", "blocking"]:
                for t in tests:
                    if args.test and args.test not in t.__name__:
                        continue
                    try:
                        if t is test_stress:
                            t(r, label, py, other, mode)
                        else:
                            t(r, label, py, mode)
                    except Exception as e:
                        r.check("%s %s %s" % (label, mode, t.__name__), False, repr(e))
    finally:
        shutil.rmtree(r.tmp, ignore_errors=True)
    print("%d passed, %d failed" % (r.passed, r.failed))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
