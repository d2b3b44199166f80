#!/usr/bin/env python3
"""End-to-end tests of continuous recording: rotation, retention, the flight
recorder and following processes by command line (pyflame-record --rotate,
SIGUSR2, --on-rotate, --keep, --keep-size, --ring, SIGUSR1, --snapshot,
--match).

For each interpreter (2.7, 3.9 and 3.12 by default), a two-thread workload is
recorded and the files checked as files, never by how fast anything ran:

- rotation by time, by size and by SIGUSR2: the files' names follow the
  pattern, each is a complete trace that pyflame-report reads (info, the
  default report), the files tile the recording's time line exactly (each
  starts at the previous one's end, on the recorder's monotonic clock), no
  sample lies outside its file's span (so none is in two files), and at each
  cut every thread's last sample and its first in the next file are at most
  two sampling periods apart, plus one for each slot the recorder said it
  missed (no slot lost at a cut);
- --on-rotate ran once per file, for every file, in the files' order;
- retention (--keep, --keep-size) deleted only the oldest files of the set:
  what is left is the newest files, consecutive, and two decoys (one named
  exactly like a file of the set) are still there; the next recording with
  the same -o deletes what the first left once it is older than --keep
  (the decoys still there), and a recorder with retention on names another
  one is using is refused;
- the flight recorder (--ring): SIGUSR1 and pyflame-record --snapshot print
  the name of ONE trace that reads as one recording of at least the ring's
  span, while the older files are gone; after SIGKILL, every file left
  (the one being written included) is readable and holds samples;
- --match picks up a process started after the recorder and records it
  under its pid, and skips a matching process that is not Python, with a
  line saying so.

Usage: test_continuous.py --record PATH --report PATH [--only 3.12]
Prints one line per check and ends with 'N passed, N failed, N skipped'.
"""
import argparse
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

import interps

WORKLOAD = r'''import sys
import threading
import time

end = time.time() + float(sys.argv[1])


def spin_a():
    x = 0
    while time.time() < end:
        x += 1


def spin_b():
    x = 0
    while time.time() < end:
        x += 2


ts = [threading.Thread(target=f) for f in (spin_a, spin_b)]
for t in ts:
    t.start()
for t in ts:
    t.join()
'''

NAME_RE = re.compile(r"^run-\d{8}T\d{6}Z(-\d+)?\.db$")
DEFAULT_VERSIONS = ("2.7", "3.9", "3.12")


def interpreters():
    """(label, path) of every CPython we can test here (interps.py)."""
    return interps.interpreters(debian=False)


def meta(db):
    con = sqlite3.connect(db)
    try:
        return dict(con.execute("SELECT key, value FROM meta").fetchall())
    finally:
        con.close()


def thread_spans(db):
    """{tid: (first_ns, last_ns, samples)} from the sample chunks themselves."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT t.tid, min(c.first_ns), max(c.last_ns), sum(c.count) "
                           "FROM sample_chunks c JOIN threads t ON t.ref = c.thread "
                           "GROUP BY t.ref").fetchall()
        return {tid: (a, b, n) for tid, a, b, n in rows}
    finally:
        con.close()


def late_count(db):
    con = sqlite3.connect(db)
    try:
        row = con.execute("SELECT coalesce(sum(count), 0) FROM errors WHERE kind = 2").fetchone()
        return row[0]
    finally:
        con.close()


def segment_of(m):
    return int(m.get("segment", 1))


class Runner:
    def __init__(self, args):
        self.record = os.path.abspath(args.record)
        self.report = os.path.abspath(args.report)
        self.passed = self.failed = self.skipped = 0
        self.tmp = tempfile.mkdtemp(prefix="pyflame-continuous-")
        self.workload = os.path.join(self.tmp, "workload.py")
        with open(self.workload, "w") as f:
            f.write(WORKLOAD)

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

    def mkdtemp(self):
        return tempfile.mkdtemp(dir=self.tmp)

    def target(self, py, secs=60):
        p = subprocess.Popen([py, self.workload, str(secs)])
        time.sleep(0.5)  # let it start its threads
        return p

    def start(self, args, d):
        """A recorder in the background; its stdout and stderr go to files in d."""
        out = open(os.path.join(d, "rec.out"), "w")
        err = open(os.path.join(d, "rec.err"), "w")
        p = subprocess.Popen([self.record] + args, stdout=out, stderr=err)
        out.close()
        err.close()
        self.wait_for_file(d, p)
        return p

    def wait_for_file(self, d, p):
        """Until the recorder made its first trace (it checked the target first)."""
        for _ in range(600):
            if [f for f in os.listdir(d) if f.endswith(".db")] or p.poll() is not None:
                return
            time.sleep(0.05)

    def wait_rotations(self, d, n, p, log=None):
        """Until the recorder said n times that it went on in a new file (or log
        has n lines), however slow the machine."""
        deadline = time.time() + 180
        while time.time() < deadline and p.poll() is None:
            path = log if log else os.path.join(d, "rec.err")
            text = ""
            if os.path.exists(path):
                with open(path) as f:
                    text = f.read()
            have = len(text.split()) if log else text.count(": now writing ")
            if have >= n:
                return
            time.sleep(0.1)

    def stop(self, p, d, sig=signal.SIGINT):
        p.send_signal(sig)
        rc = p.wait(timeout=120)
        with open(os.path.join(d, "rec.err")) as f:
            err = f.read()
        with open(os.path.join(d, "rec.out")) as f:
            out = f.read()
        return rc, out, err

    def readable(self, db):
        """pyflame-report info and the default report both read db; the error if not."""
        for args in (["info", db], [db]):
            p = subprocess.run([self.report] + args, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
            if p.returncode != 0:
                return "pyflame-report %s: %s" % (" ".join(args), p.stderr.strip())
        return None

    def set_files(self, d):
        """The files of the set in d, in segment order, with their meta."""
        with_meta = []
        for f in sorted(os.listdir(d)):
            if NAME_RE.match(f):
                try:
                    with_meta.append((os.path.join(d, f), meta(os.path.join(d, f))))
                except sqlite3.DatabaseError:
                    pass  # not a trace (a decoy)
        return sorted(with_meta, key=lambda fm: segment_of(fm[1]))

    def check_tiling(self, name, files, rate):
        """Consecutive segments that tile time; no slot lost or doubled at a cut."""
        segs = [segment_of(m) for _, m in files]
        self.check("%s: segments numbered in order" % name,
                   segs == list(range(segs[0], segs[0] + len(segs))), str(segs))
        for f, m in files:
            err = self.readable(f)
            self.check("%s: %s readable" % (name, os.path.basename(f)), err is None, err or "")
        period = 1e9 / rate
        bad_seam, bad_span, bad_gap = [], [], []
        for i, (f, m) in enumerate(files):
            spans = thread_spans(f)
            dur = int(m["duration_ns"])
            for tid, (first, last, n) in spans.items():
                if first < 0 or last > dur:
                    bad_span.append((os.path.basename(f), tid, first, last, dur))
            if i + 1 == len(files):
                break
            g, gm = files[i + 1]
            if int(m["end_mono_ns"]) != int(gm["start_mono_ns"]):
                bad_seam.append((os.path.basename(f), m["end_mono_ns"], gm["start_mono_ns"]))
            nspans = thread_spans(g)
            allowed = (2 + late_count(f) + late_count(g)) * period
            for tid, (first, last, n) in spans.items():
                if tid not in nspans:
                    continue
                gap = (int(gm["start_mono_ns"]) + nspans[tid][0]) - (int(m["start_mono_ns"]) + last)
                if not 0 < gap <= allowed:
                    bad_gap.append((os.path.basename(f), tid, gap, allowed))
        self.check("%s: each file starts where the one before ended" % name, not bad_seam,
                   str(bad_seam))
        self.check("%s: every sample within its file's span" % name, not bad_span,
                   str(bad_span))
        self.check("%s: no slot lost or doubled at a cut" % name, not bad_gap, str(bad_gap))


def test_rotate_time(r, label, py):
    name = "%s rotate by time" % label
    d = r.mkdtemp()
    log = os.path.join(r.tmp, "on-rotate-%s.log" % label)
    t = r.target(py)
    try:
        p = r.start(["-p", str(t.pid), "-o", os.path.join(d, "run.db"), "--rotate", "1s",
                     "--on-rotate", "echo >>%s" % log], d)
        r.wait_rotations(d, 3, p)
        rc, out, err = r.stop(p, d)
    finally:
        t.kill()
        t.wait()
    r.check("%s: exit 0" % name, rc == 0, err)
    files = r.set_files(d)
    if not r.check("%s: at least 3 files" % name, len(files) >= 3,
                   str(os.listdir(d)) + err):
        return
    r.check("%s: only files of the pattern" % name,
            sorted(f for f in os.listdir(d) if f.endswith(".db")) ==
            sorted(os.path.basename(f) for f, _ in files), str(os.listdir(d)))
    r.check("%s: each file but the last spans the period or more" % name,
            all(int(m["duration_ns"]) >= 1000000000 for _, m in files[:-1]),
            str([m["duration_ns"] for _, m in files]))
    r.check_tiling(name, files, 100)
    # pyflame-report join, the files in any order: one recording, every sample once.
    joined = os.path.join(d, "joined.db")
    j = subprocess.run([r.report, "join", "-o", joined] + [f for f, _ in reversed(files)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120)
    jm = meta(joined) if j.returncode == 0 else {}
    r.check("%s: join makes one recording of every sample" % name,
            j.returncode == 0 and
            int(jm["samples"]) == sum(int(m["samples"]) for _, m in files) and
            int(jm["start_mono_ns"]) == int(files[0][1]["start_mono_ns"]) and
            int(jm["end_mono_ns"]) == int(files[-1][1]["end_mono_ns"]) and
            r.readable(joined) is None, j.stderr)
    with open(log) as f:
        ran = [line.strip() for line in f if line.strip()]
    r.check("%s: --on-rotate once per file, in order" % name,
            ran == [f for f, _ in files], "%s vs %s" % (ran, [f for f, _ in files]))


def test_rotate_signal(r, label, py):
    name = "%s rotate by SIGUSR2" % label
    d = r.mkdtemp()
    t = r.target(py)
    try:
        p = r.start(["-p", str(t.pid), "-o", os.path.join(d, "run.db")], d)
        for _ in range(2):
            time.sleep(0.7)
            p.send_signal(signal.SIGUSR2)
        time.sleep(0.7)
        rc, out, err = r.stop(p, d)
    finally:
        t.kill()
        t.wait()
    r.check("%s: exit 0" % name, rc == 0, err)
    first = os.path.join(d, "run.db")
    files = [(first, meta(first))] if os.path.exists(first) else []
    files += r.set_files(d)
    if not r.check("%s: run.db and two more files" % name, len(files) == 3,
                   str(os.listdir(d))):
        return
    r.check_tiling(name, files, 100)


def test_rotate_size(r, label, py):
    name = "%s rotate by size" % label
    d = r.mkdtemp()
    limit = 150 * 1024
    t = r.target(py)
    try:
        p = r.start(["-p", str(t.pid), "-o", os.path.join(d, "run.db"), "-r", "1k",
                     "--rotate", "150K"], d)
        deadline = time.time() + 60
        while (len([f for f in os.listdir(d) if NAME_RE.match(f)]) < 3 and
               time.time() < deadline and p.poll() is None):
            time.sleep(0.2)
        rc, out, err = r.stop(p, d)
    finally:
        t.kill()
        t.wait()
    r.check("%s: exit 0" % name, rc == 0, err)
    files = r.set_files(d)
    if not r.check("%s: at least 3 files" % name, len(files) >= 3, str(os.listdir(d))):
        return
    sizes = [os.path.getsize(f) for f, _ in files]
    r.check("%s: each file but the last reached the size" % name,
            all(s >= limit for s in sizes[:-1]), str(sizes))
    r.check_tiling(name, files, 1000)


def test_retention(r, label, py):
    name = "%s retention" % label
    d = r.mkdtemp()
    # Decoys: one named exactly like a file of the set (older than any), one not.
    decoys = [os.path.join(d, "run-20000101T000000Z.db"), os.path.join(d, "other.db")]
    for f in decoys:
        with open(f, "w") as fh:
            fh.write("not ours")
    log = os.path.join(r.tmp, "on-rotate-keep-%s.log" % label)
    t = r.target(py)
    try:
        p = r.start(["-p", str(t.pid), "-o", os.path.join(d, "run.db"), "--rotate", "1s",
                     "--keep", "2s", "--on-rotate", "echo >>%s" % log], d)
        r.wait_rotations(d, 6, p, log)
        rc, out, err = r.stop(p, d)
    finally:
        t.kill()
        t.wait()
    r.check("%s: exit 0" % name, rc == 0, err)
    r.check("%s: decoys untouched" % name,
            all(open(f).read() == "not ours" for f in decoys if os.path.exists(f)) and
            all(os.path.exists(f) for f in decoys), str(os.listdir(d)))
    with open(log) as f:
        ran = [line.strip() for line in f if line.strip()]
    left = [f for f, _ in r.set_files(d) if f not in decoys]
    r.check("%s: the oldest files deleted" % name,
            len(ran) >= 3 and len(left) < len(ran) and left == ran[len(ran) - len(left):],
            "ran %s, left %s" % (ran, left))
    r.check("%s: every file passed on before deletion, once" % name,
            len(ran) == len(set(ran)), str(ran))
    # A second recording with the same -o: the first one's files, all older
    # than --keep by then, are deleted as it starts; the decoys stay; and a
    # third recorder with retention on the same names is refused.
    time.sleep(2.5)
    t = r.target(py)
    try:
        p = r.start(["-p", str(t.pid), "-o", os.path.join(d, "run.db"), "--rotate", "1s",
                     "--keep", "2s"], d)
        # Until it holds the lock (it says so right after taking it).
        deadline = time.time() + 20
        while time.time() < deadline and p.poll() is None:
            with open(os.path.join(d, "rec.err")) as f:
                if "an earlier recording left" in f.read():
                    break
            time.sleep(0.05)
        third = subprocess.run([r.record, "-p", str(t.pid), "-o", os.path.join(d, "run.db"),
                                "--keep", "2s"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
        deadline = time.time() + 20
        while any(os.path.exists(f) for f in left) and time.time() < deadline:
            time.sleep(0.1)
        gone = [f for f in left if not os.path.exists(f)]
        rc, out, err2 = r.stop(p, d)
    finally:
        t.kill()
        t.wait()
    r.check("%s: an earlier recording's files count toward --keep" % name,
            rc == 0 and left and gone == left and "an earlier recording left" in err2,
            "left %s, gone %s: %s" % (left, gone, err2))
    r.check("%s: decoys untouched by the next recording" % name,
            all(os.path.exists(f) and open(f).read() == "not ours" for f in decoys),
            str(os.listdir(d)))
    r.check("%s: a second recorder with retention on the same names refused" % name,
            third.returncode == 7 and "another pyflame-record (pid %d)" % p.pid in third.stderr
            and "another -o" in third.stderr, "%d: %s" % (third.returncode, third.stderr))
    # --keep-size: what is left after the last file fits, unless only one is left.
    d2 = r.mkdtemp()
    decoy = os.path.join(d2, "run-20000101T000000Z.db")
    with open(decoy, "w") as fh:
        fh.write("not ours")
    t = r.target(py)
    limit = 400 * 1024
    try:
        p = r.start(["-p", str(t.pid), "-o", os.path.join(d2, "run.db"), "--rotate", "1s",
                     "--keep-size", "400K"], d2)
        # Enough files to pass the size: each holds at least the empty schema's 60 KiB.
        r.wait_rotations(d2, 8, p)
        rc, out, err = r.stop(p, d2)
    finally:
        t.kill()
        t.wait()
    files = [f for f, _ in r.set_files(d2) if f != decoy]
    sizes = [os.path.getsize(f) for f in files]
    segs = [segment_of(meta(f)) for f in files]
    r.check("%s: --keep-size keeps the newest within the size" % name,
            rc == 0 and (sum(sizes) <= limit or len(files) == 1) and len(segs) >= 1 and
            segs[0] > 1 and segs == list(range(segs[0], segs[0] + len(segs))),
            "%s %s %s" % (segs, sizes, err))
    r.check("%s: --keep-size decoy untouched" % name,
            os.path.exists(decoy) and open(decoy).read() == "not ours")


def test_ring(r, label, py):
    name = "%s ring" % label
    d = r.mkdtemp()
    t = r.target(py)
    ring_ns = 3 * 10**9
    try:
        p = r.start(["-p", str(t.pid), "-o", os.path.join(d, "run.db"), "--ring", "3s"], d)
        start_wall = time.time()
        time.sleep(1)
        r.wait_rotations(d, 5, p)  # a few files have come and gone
        while time.time() < start_wall + 6:
            time.sleep(0.1)
        p.send_signal(signal.SIGUSR1)
        snap = None
        for _ in range(600):
            with open(os.path.join(d, "rec.out")) as f:
                lines = f.read().split()
            if lines:
                snap = lines[0]
                break
            time.sleep(0.05)
        c = subprocess.run([r.record, "--snapshot", str(p.pid)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
        on_disk = [f for f in os.listdir(d) if NAME_RE.match(f)]
        segs = sorted(segment_of(m) for _, m in r.set_files(d))
        rc, out, err = r.stop(p, d)
    finally:
        t.kill()
        t.wait()
    r.check("%s: exit 0" % name, rc == 0, err)
    if not r.check("%s: SIGUSR1 printed a snapshot's name" % name,
                   snap is not None and os.path.exists(snap), str(snap) + err):
        return
    err_s = r.readable(snap)
    r.check("%s: the snapshot is readable" % name, err_s is None, err_s or "")
    m = meta(snap)
    r.check("%s: the snapshot covers at least the ring's span" % name,
            int(m["duration_ns"]) >= ring_ns, m["duration_ns"])
    r.check("%s: the snapshot left out what is older than the ring" % name,
            int(m["start_wall_ns"]) > int(start_wall * 1e9) + 10**9,
            "%s vs %s" % (m["start_wall_ns"], start_wall))
    spans = thread_spans(snap)
    r.check("%s: the snapshot is one recording of the target's threads" % name,
            len(spans) >= 3 and all(n > 0 for _, _, n in spans.values()) and
            sum(n for _, _, n in spans.values()) == int(m["samples"]), str(spans))
    # Files of 1 s kept for 3 s: at most 3 finished ones of the period, one at the
    # window's edge, the current one, and the two cut short by the snapshots.
    r.check("%s: the ring kept the newest files only" % name,
            len(on_disk) <= 7 and segs and segs[0] > 1, "%s %s" % (on_disk, segs))
    snap2 = c.stdout.strip()
    r.check("%s: --snapshot printed a snapshot's name" % name,
            c.returncode == 0 and os.path.exists(snap2) and snap2 != snap,
            "%d %r %s" % (c.returncode, snap2, c.stderr))
    if os.path.exists(snap2):
        err_s = r.readable(snap2)
        r.check("%s: the --snapshot file is readable" % name, err_s is None, err_s or "")


def test_kill(r, label, py):
    name = "%s ring SIGKILL" % label
    d = r.mkdtemp()
    t = r.target(py)
    try:
        p = r.start(["-p", str(t.pid), "-o", os.path.join(d, "run.db"), "--ring", "3s"], d)
        r.wait_rotations(d, 2, p)
        time.sleep(1.5)  # the recorder commits once a second
        p.kill()
        p.wait()
    finally:
        t.kill()
        t.wait()
    files = r.set_files(d)
    r.check("%s: files left" % name, len(files) >= 2, str(os.listdir(d)))
    bad = [(f, e) for f, e in ((f, r.readable(f)) for f, _ in files) if e]
    r.check("%s: every file left readable" % name, not bad, str(bad))
    r.check("%s: the files left hold samples" % name,
            sum(n for f, _ in files for _, _, n in thread_spans(f).values()) > 0)
    r.check("%s: the file being written is one of them, unfinished" % name,
            files and "end_mono_ns" not in files[-1][1] and
            all("end_mono_ns" in m for _, m in files[:-1]), str([m for _, m in files]))


def test_match(r, label, py):
    name = "%s --match" % label
    d = r.mkdtemp()
    tag = "pyflame_match_%d" % os.getpid()
    app = os.path.join(d, tag + ".py")
    with open(app, "w") as f:
        f.write(WORKLOAD)
    early = subprocess.Popen([py, app, "60"])
    late = shell = None
    try:
        time.sleep(0.5)
        p = r.start(["--match", tag, "-o", os.path.join(d, "m.db")], d)
        # Started after the recorder: a Python process and a shell (not Python) that match.
        late = subprocess.Popen([py, app, "60"])
        shell = subprocess.Popen(["sh", "-c", "sleep 60; : %s" % tag])
        deadline = time.time() + 60
        while time.time() < deadline and p.poll() is None:
            with open(os.path.join(d, "rec.err")) as f:
                err = f.read()
            if "pid %d" % late.pid in err and "pid %d" % shell.pid in err:
                break
            time.sleep(0.2)
        time.sleep(1)
        rc, out, err = r.stop(p, d)
    finally:
        for q in (early, late, shell):
            if q:
                q.kill()
                q.wait()
    r.check("%s: exit 0" % name, rc == 0, err)
    db = os.path.join(d, "m.db")
    err_s = r.readable(db)
    if not r.check("%s: readable" % name, err_s is None, err_s or ""):
        return
    con = sqlite3.connect(db)
    try:
        pids = dict(con.execute("SELECT pid, (SELECT coalesce(sum(c.count), 0) FROM threads t "
                                "JOIN sample_chunks c ON c.thread = t.ref WHERE t.pid = p.pid) "
                                "FROM processes p").fetchall())
    finally:
        con.close()
    r.check("%s: the process running before is recorded" % name,
            pids.get(early.pid, 0) > 0, str(pids))
    r.check("%s: the process started after the recorder is recorded" % name,
            pids.get(late.pid, 0) > 0, str(pids))
    r.check("%s: the shell that matches is not" % name, shell.pid not in pids, str(pids))
    skips = [line for line in err.splitlines() if "skipping pid %d " % shell.pid in line]
    r.check("%s: one line says the shell was skipped" % name, len(skips) == 1, err)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--only", help="only interpreters whose label starts with this")
    ap.add_argument("--test", help="only this test (rotate_time, rotate_signal, rotate_size, "
                    "retention, ring, kill, match)")
    args = ap.parse_args()
    r = Runner(args)
    tests = [test_rotate_time, test_rotate_signal, test_rotate_size, test_retention, test_ring,
             test_kill, test_match]
    if args.test:
        tests = [t for t in tests if t.__name__ == "test_" + args.test]
    pys = [(l, p) for l, p in interpreters()
           if (args.only and l.startswith(args.only)) or
           (not args.only and any(l.startswith(v + ".") for v in DEFAULT_VERSIONS))]
    if not pys:
        r.skip("all", "no interpreter found")
    for label, py in pys:
        for t in tests:
            t(r, label, py)
    print("%d passed, %d failed, %d skipped" % (r.passed, r.failed, r.skipped))
    if r.failed:
        print("files kept in %s" % r.tmp)
    else:
        shutil.rmtree(r.tmp, ignore_errors=True)
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
