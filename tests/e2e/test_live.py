#!/usr/bin/env python3
"""The live view, driven in a real terminal: tmux runs pyflame-top and
pyflame-report top, send-keys presses the keys, capture-pane reads the screen.

The workload has two phases whose hot functions are known (phase_one, then
phase_two, each a busy loop that owns its samples) and a thread that only
sleeps (in sleeper), so every key has a visible effect:

- live: pyflame-top on a spawned program: phase_one leads the table with
  nearly all of the own share; 2 sorts by total (the module leads), k shows
  lines (the busy loop's line), i counts idle threads (sleeper appears),
  w widens the window, space pauses and e goes back to the end; q leaves a
  finished trace that pyflame-report reads, whose samples are the ones the
  trace says it holds, with phase_one on top, and a restored terminal (no
  alternate screen) and the program's exit status;
- sigterm: pyflame-top attached to a running program, SIGTERM to the
  recorder: the terminal is restored, the trace finished, the program alive;
- replay: pyflame-report top of a recorded two-phase trace: a 1 s window at
  a time in phase one shows phase_one, at a time in phase two phase_two
  (jumped to with j, and stepped back to with Left);
- follow set: top --follow of the directory of a recording that rotates
  every second goes on into the files made after it started, to the end;
- follow: pyflame-report top --follow of a trace another pyflame-record is
  writing: the sample count grows and phase_two, which starts after the view
  did, appears; Ctrl-C leaves it with the terminal restored;
- colours when the terminal has them, none with NO_COLOR set;
- plain: pyflame-top without a terminal prints text snapshots every
  --interval, phase_one in the first and phase_two in a later one;
- live rotating: pyflame-top --rotate 1s reads every file of the recording
  (its last snapshot counts more samples than any one file holds), and
  under --ring the files retention deletes under the view are no error;
- pids: pyflame-top -p A,B shows each program's function at about half,
  and -s shows a child process's;
- unknown terminal: snapshots instead of the screen, the recording intact;
- pick follow: a thread picked with t stays picked when retention deletes
  files of the recording being followed and the list of threads changes.

Usage: test_live.py --record PATH --report PATH [--top PATH] [--only 3.12]
       [--test NAME]
Default interpreters: 2.7, 3.9, 3.12, 3.13 (those installed). Exits 77 when
tmux or every interpreter is missing.
"""
import argparse
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_e2e import interpreters  # noqa: E402

WORKLOAD = r'''
import sys, threading, time

def sleeper():
    threading.Event().wait()  # blocks on a lock: never on CPU

def phase_one(deadline):
    n = 0
    while time.time() < deadline:  # BUSY ONE
        n += 1  # BUSY ONE TOO
    return n

def phase_two(deadline):
    n = 0
    while time.time() < deadline:
        n += 1  # BUSY TWO
    return n

def main():
    t = threading.Thread(target=sleeper, name="sleeper")
    t.daemon = True
    t.start()
    try:
        phase_one(time.time() + float(sys.argv[1]))
        phase_two(time.time() + float(sys.argv[2]))
    except KeyboardInterrupt:
        pass

main()
'''

ROW_RE = re.compile(r"^\s*([\d.]+)%\s+([\d.]+)%\s+([\d.]+)s\s+([\d.]+)s\s+(.*?)\s*$")


class Runner:
    def __init__(self, args):
        self.record = args.record
        self.report = args.report
        self.top = args.top or os.path.join(os.path.dirname(args.record), "pyflame-top")
        self.passed = self.failed = 0
        self.tmp = tempfile.mkdtemp(prefix="pyflame-live-")
        self.workload = os.path.join(self.tmp, "two_phase.py")
        with open(self.workload, "w") as f:
            f.write(WORKLOAD)
        self.socket = "pyflame-live-%d" % os.getpid()

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print("ok   %s" % name)
        else:
            self.failed += 1
            print("FAIL %s %s" % (name, detail))
        sys.stdout.flush()
        return ok

    def line_of(self, marker):
        with open(self.workload) as f:
            for i, text in enumerate(f, 1):
                if marker in text:
                    return i
        raise ValueError(marker)

    # ---- tmux ----

    def tmux(self, *args, **kw):
        return subprocess.run(["tmux", "-L", self.socket] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, check=kw.get("check", True))

    def start(self, cmd):
        """Run `cmd` (a shell line) in a fresh 120x40 tmux session."""
        self.tmux("kill-server", check=False)
        line = "%s; echo EXITED $?; sleep 600" % cmd
        self.tmux("new-session", "-d", "-x", "120", "-y", "40", line)
        self.tmux("set-option", "-g", "remain-on-exit", "on", check=False)

    def screen(self):
        return self.tmux("capture-pane", "-p").stdout

    def keys(self, *keys):
        self.tmux("send-keys", *keys)

    def colours(self):
        """Does the screen use a foreground colour (an SGR 30-37 or 38 code)?"""
        text = self.tmux("capture-pane", "-p", "-e").stdout
        return any(re.search(r"(^|;)3[0-8](;|$)", m) for m in re.findall(r"\x1b\[([0-9;]*)m", text))

    def alternate_on(self):
        return self.tmux("display-message", "-p", "#{alternate_on}").stdout.strip() == "1"

    def wait(self, pred, timeout=20):
        """Poll the screen until pred(screen) is true; returns the last screen.

        A capture can fall between two writes of one redraw (tmux shows what
        it has read so far: a new header above the old rows), so a screen
        that satisfies pred is captured again a moment later, and that
        complete one is returned if pred still holds on it."""
        end = time.time() + timeout
        s = self.screen()
        while not pred(s) and time.time() < end:
            time.sleep(0.2)
            s = self.screen()
        if pred(s):
            time.sleep(0.15)
            again = self.screen()
            if pred(again):
                return again
        return s

    def stop(self):
        self.tmux("kill-server", check=False)


def rows(screen):
    """(own%, total%, label) of each table row on the screen."""
    out = []
    for line in screen.splitlines():
        m = ROW_RE.match(line)
        if m:
            out.append((float(m.group(1)), float(m.group(2)), m.group(5)))
    return out


def first(screen):
    r = rows(screen)
    return r[0] if r else (0.0, 0.0, "")


def leads(name, min_own=0.0):
    def pred(s):
        own, _, label = first(s)
        return label.startswith(name) and own >= min_own
    return pred


def sleeper_total(screen):
    """%Total of the sleeper thread's function (0 when not shown)."""
    return max([x[1] for x in rows(screen) if x[2].startswith("sleeper")] or [0.0])


def header_value(screen, word):
    m = re.search(r"%s (\d+)" % word, screen)
    return int(m.group(1)) if m else -1


def report_info(r, trace):
    p = subprocess.run([r.report, "info", trace], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    return p.returncode, p.stdout + p.stderr


def report_hot(r, trace):
    p = subprocess.run([r.report, "--by-function", trace], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    return p.returncode, p.stdout


def trace_samples(r, trace):
    """The samples the trace says it holds, and the samples its folded stacks add up to."""
    _, info = report_info(r, trace)
    m = re.search(r"^samples:\s+(\d+)", info, re.M)
    meta = int(m.group(1)) if m else -1
    p = subprocess.run([r.report, "--idle", trace], stdout=subprocess.PIPE,
                       universal_newlines=True)
    folded = sum(int(line.rsplit(" ", 1)[1]) for line in p.stdout.splitlines() if line.strip())
    return meta, folded


def test_live(r, label, py):
    name = "%s live" % label
    trace = os.path.join(r.tmp, "live-%s.db" % label)
    r.start("%s -o %s -- %s %s 60 1" % (r.top, trace, py, r.workload))
    try:
        s = r.wait(leads("phase_one", 90.0))
        own, total, lab = first(s)
        if not r.check(name + " phase_one leads", lab.startswith("phase_one") and own >= 90,
                       "first row %r\n%s" % (first(s), s)):
            return
        r.check(name + " alternate screen", r.alternate_on())
        r.check(name + " colours", r.colours())
        r.check(name + " header", "[live]" in s and "Python " in s and "window last 10s" in s
                and header_value(s, "Threads") >= 1, s)
        r.check(name + " footer", "q quit" in s and "? help" in s, s)
        r.keys("2")
        s = r.wait(lambda s: "*%Total" in s)
        totals = [x[1] for x in rows(s)]
        top3 = [x[2] for x in rows(s)[:3]]
        r.check(name + " sort by total", "*%Total" in s and totals == sorted(totals, reverse=True)
                and any(t.startswith("<module>") for t in top3), s)
        r.keys("1", "k")
        busy = ["two_phase.py:%d " % r.line_of(m) for m in ("BUSY ONE", "BUSY ONE TOO")]
        s = r.wait(lambda s: "Line (function)" in s)
        r.check(name + " by line", any(b in first(s)[2] + " " for b in busy)
                and first(s)[2].endswith("(phase_one)"), "%r\n%s" % (busy, s))
        r.keys("k", "k")  # back to functions
        s = r.wait(lambda s: "Function (file:line)" in s)
        r.check(name + " sleeper nearly absent (on CPU only)", sleeper_total(s) < 5, s)
        r.keys("i")
        s = r.wait(lambda s: sleeper_total(s) >= 30)
        r.check(name + " idle counts sleeper (half the samples)", sleeper_total(s) >= 30
                and "Filter: idle" in s, s)
        r.keys("i", "w")
        s = r.wait(lambda s: "window last 60s" in s)
        r.check(name + " window key", "window last 60s" in s, s)
        r.keys("Space")
        s = r.wait(lambda s: "paused" in s and "at end" not in s)
        r.check(name + " pause", "paused" in s and "at end" not in s, s)
        r.keys("e")
        s = r.wait(lambda s: "at end" in s)
        r.check(name + " back to the end", "at end" in s, s)
        r.tmux("resize-window", "-x", "90", "-y", "20")
        s = r.wait(lambda s: s.rstrip("\n").split("\n")[-1].startswith("q quit")
                   and len(s.rstrip("\n").split("\n")) == 20)
        lines = s.rstrip("\n").split("\n")
        r.check(name + " resize", len(lines) == 20 and lines[-1].startswith("q quit")
                and leads("phase_one")(s) and max(len(x) for x in lines) <= 90, s)
        r.keys("?")
        s = r.wait(lambda s: "Keys" in s)
        r.check(name + " help", "Left/Right" in s, s)
        r.keys("x", "q")
        s = r.wait(lambda s: "EXITED" in s)
        m = re.search(r"EXITED (\d+)", s)
        r.check(name + " q exits with the program's status", m and m.group(1) == "0", s)
        r.check(name + " terminal restored", not r.alternate_on())
        rc, info = report_info(r, trace)
        r.check(name + " trace finished", rc == 0 and "recording:  finalized" in info, info)
        meta, folded = trace_samples(r, trace)
        r.check(name + " every sample readable", meta > 0 and meta == folded,
                "meta %d folded %d" % (meta, folded))
        rc, hot = report_hot(r, trace)
        top_fn = [line for line in hot.splitlines() if "phase_" in line][:1]
        r.check(name + " report agrees", rc == 0 and top_fn and "phase_one" in top_fn[0], hot)
    finally:
        r.stop()


def test_sigterm(r, label, py):
    name = "%s sigterm" % label
    trace = os.path.join(r.tmp, "term-%s.db" % label)
    target = subprocess.Popen([py, r.workload, "60", "1"])
    pidfile = os.path.join(r.tmp, "top.pid")
    try:
        r.start("echo $$ > %s; exec %s -p %d -o %s" % (pidfile, r.top, target.pid, trace))
        s = r.wait(leads("phase_one"))
        if not r.check(name + " view up", leads("phase_one")(s), s):
            return
        with open(pidfile) as f:
            os.kill(int(f.read()), signal.SIGTERM)
        time.sleep(0.5)
        end = time.time() + 20
        while r.alternate_on() and time.time() < end:
            time.sleep(0.2)
        r.check(name + " terminal restored", not r.alternate_on())
        rc, info = report_info(r, trace)
        end = time.time() + 20
        while "finalized" not in info and time.time() < end:
            time.sleep(0.3)
            rc, info = report_info(r, trace)
        r.check(name + " trace finished", rc == 0 and "recording:  finalized" in info, info)
        r.check(name + " target alive", target.poll() is None)
    finally:
        r.stop()
        target.kill()
        target.wait()


def record(r, py, trace, one, two):
    return subprocess.Popen([r.record, "-q", "-o", trace, "--", py, r.workload, str(one), str(two)])


def test_replay(r, label, py):
    name = "%s replay" % label
    trace = os.path.join(r.tmp, "replay-%s.db" % label)
    if record(r, py, trace, 2, 2).wait() != 0:
        r.check(name + " record", False)
        return
    r.start("NO_COLOR=1 %s top --window 1s --at 1.5s %s" % (r.report, trace))
    try:
        s = r.wait(leads("phase_one", 90.0))
        r.check(name + " phase one at 1.5s", leads("phase_one", 90.0)(s) and "[replay]" in s
                and "window last 1s" in s, s)
        r.check(name + " NO_COLOR: no colours", not r.colours())
        r.keys("j", "3.5", "Enter")
        s = r.wait(leads("phase_two", 90.0))
        r.check(name + " phase two at 3.5s (jump)", leads("phase_two", 90.0)(s)
                and "Time 3.5s" in s, s)
        r.keys("Left", "Left")
        s = r.wait(lambda s: "Time 1.5s" in s)
        r.check(name + " phase one again (step back)", leads("phase_one", 90.0)(s), s)
        r.keys("w", "w", "w", "e")  # 1s -> 10s -> 60s -> all (up to the cursor), at the end
        s = r.wait(lambda s: "window all" in s and "Time 1.5s" not in s)
        got = {x[2].split(" ")[0]: x[0] for x in rows(s)}
        r.check(name + " whole recording has both phases",
                got.get("phase_one", 0) > 20 and got.get("phase_two", 0) > 20, s)
        r.keys("5")
        s = r.wait(lambda s: "*Function" in s)
        names = [x[2] for x in rows(s)]
        r.check(name + " sort by name", names == sorted(names), s)
        r.keys("q")
        s = r.wait(lambda s: "EXITED" in s)
        r.check(name + " q", "EXITED 0" in s and not r.alternate_on(), s)
    finally:
        r.stop()


def test_follow(r, label, py):
    name = "%s follow" % label
    trace = os.path.join(r.tmp, "follow-%s.db" % label)
    rec = record(r, py, trace, 3, 4)
    try:
        end = time.time() + 20
        while time.time() < end and report_info(r, trace)[0] != 0:
            time.sleep(0.2)
        r.start("%s top --follow %s" % (r.report, trace))
        s = r.wait(lambda s: header_value(s, "Samples") > 0)
        before = header_value(s, "Samples")
        had_two = any(x[2].startswith("phase_two") for x in rows(s))
        s = r.wait(lambda s: leads("phase_two")(s), timeout=30)
        r.check(name + " picks up new samples", header_value(s, "Samples") > before
                and not had_two and leads("phase_two")(s), "before %d\n%s" % (before, s))
        r.check(name + " following", "[following]" in s or "[finished]" in s, s)
        rec.wait()
        s = r.wait(lambda s: "[finished]" in s)
        r.check(name + " sees the end", "[finished]" in s, s)
        r.keys("C-c")
        s = r.wait(lambda s: "EXITED" in s)
        r.check(name + " Ctrl-C restores the terminal", "EXITED 0" in s and not r.alternate_on(),
                s)
    finally:
        r.stop()
        if rec.poll() is None:
            rec.kill()
            rec.wait()


def test_follow_set(r, label, py):
    """top --follow of the directory of a rotating recording goes on into each new file."""
    name = "%s follow set" % label
    d = os.path.join(r.tmp, "follow-set-%s" % label)
    os.makedirs(d, exist_ok=True)
    rec = subprocess.Popen([r.record, "-q", "--rotate", "1s", "-o", os.path.join(d, "run.db"),
                            "--", py, r.workload, "3", "4"])
    try:
        end = time.time() + 20
        while time.time() < end and not os.listdir(d):
            time.sleep(0.2)
        time.sleep(1.5)  # the first file's first commit
        r.start("%s top --follow %s" % (r.report, d))
        s = r.wait(lambda s: header_value(s, "Samples") > 0)
        had_two = any(x[2].startswith("phase_two") for x in rows(s))
        # phase_two starts 3 s in: files the view did not list when it started.
        s = r.wait(lambda s: leads("phase_two")(s), timeout=30)
        ok = not had_two and leads("phase_two")(s)
        detail = s
        if not ok:
            # What the files say, to tell a view that did not follow from a trace
            # whose thread states are wrong (the sleeper on CPU: seen once in CI).
            detail += "\n" + "\n".join(
                "%s: %s" % (os.path.basename(f), subprocess.run(
                    ["sqlite3", f, "SELECT group_concat(key || '=' || value, ' ') FROM meta "
                     "WHERE key IN ('switch_events', 'proc_state_reads', 'samples', "
                     "'capture', 'captures_not_running'); SELECT group_concat(name || ':' || "
                     "ifnull(tid, 'no tid') || ':' || samples, ' ') FROM threads"],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    universal_newlines=True).stdout.strip().replace("\n", " | "))
                for f in sorted(glob.glob(os.path.join(d, "*.db"))))
            detail += "\n" + report_info(r, d)[1]
            sleeper = subprocess.run([r.report, "--thread", "sleeper", "--by-function", d],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     universal_newlines=True).stdout
            detail += "\nthe sleeper's samples on CPU:\n" + sleeper[-600:]
        r.check(name + " goes on into the next files", ok, detail)
        rec.wait()
        s = r.wait(lambda s: "[finished]" in s)
        files = [f for f in os.listdir(d) if f.endswith(".db")]
        rc, info = report_info(r, d)
        m = re.search(r"samples:\s+(\d+)", info)
        r.check(name + " sees the end of the last file", "[finished]" in s and
                len(files) >= 4 and m and rc == 0 and
                header_value(s, "Samples") > 0, "%d files\n%s\n%s" % (len(files), info, s))
        r.keys("q")
        r.wait(lambda s: "EXITED" in s)
    finally:
        r.stop()
        if rec.poll() is None:
            rec.kill()
            rec.wait()


PICK_WORKLOAD = r'''
import sys, threading, time

def early():
    time.sleep(0.5)

def spin_main(deadline):
    while time.time() < deadline:
        pass

def spin_worker(deadline):
    while time.time() < deadline:
        pass

deadline = time.time() + float(sys.argv[1])
threading.Thread(target=early, name="early").start()
time.sleep(0.15)  # the worker comes after the early thread in the first file
threading.Thread(target=spin_worker, args=(deadline,), name="worker").start()
spin_main(deadline)
'''


def test_pick_follow(r, label, py):
    """The thread picked with t stays picked while the files of a rotating recording
    come and go: once retention has deleted the file of a short-lived thread listed
    before it, the set's list of threads has changed, and the view still shows the
    picked thread's function only."""
    name = "%s pick follow" % label
    d = os.path.join(r.tmp, "pick-%s" % label)
    os.makedirs(d, exist_ok=True)
    script = os.path.join(r.tmp, "pick.py")
    with open(script, "w") as f:
        f.write(PICK_WORKLOAD)
    rec = subprocess.Popen([r.record, "-q", "--rotate", "1s", "--keep", "2s", "-o",
                            os.path.join(d, "run.db"), "--", py, script, "14"])
    try:
        def traces():
            return sorted(f for f in os.listdir(d) if f.endswith(".db"))
        end = time.time() + 20
        while time.time() < end and not traces():
            time.sleep(0.2)
        first_file = (traces() or [""])[0]
        time.sleep(1.5)  # the first file's first commit
        r.start("%s top --follow %s" % (r.report, d))
        r.wait(lambda s: header_value(s, "Samples") > 0)
        # t steps through the threads (MainThread, early, worker) and back to all.
        picked, notes = False, []
        for _ in range(5):
            r.keys("t")
            time.sleep(0.4)
            notes += [l for l in r.screen().splitlines() if l.startswith("thread ")]
            picked = bool(notes) and "(worker)" in notes[-1]
            if picked:
                break
        end = time.time() + 20
        while time.time() < end and first_file in traces():
            time.sleep(0.2)
        time.sleep(2.5)  # the view reopens the set at least once more
        s = r.wait(lambda s: any(x[2].startswith("spin_worker") for x in rows(s)))
        shown = {x[2].split()[0] for x in rows(s)}
        r.check(name + ": the worker stays picked after its neighbour's file is deleted",
                picked and first_file and first_file not in traces() and
                "spin_worker" in shown and "spin_main" not in shown,
                "picks %s, files %s\n%s" % (notes, traces(), s))
        r.keys("q")
    finally:
        r.stop()
        if rec.poll() is None:
            rec.kill()
            rec.wait()


def test_plain(r, label, py):
    name = "%s plain" % label
    trace = os.path.join(r.tmp, "plain-%s.db" % label)
    p = subprocess.run([r.top, "--interval", "1", "-o", trace, "--", py, r.workload, "2", "6"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    snaps = [b for b in p.stdout.split("\n\n") if b.strip()]
    firsts = [first(b)[2] for b in snaps if rows(b)]  # the first may come before any commit
    r.check(name + " exit", p.returncode == 0, p.stderr)
    r.check(name + " snapshots", len(snaps) >= 3 and all("Samples " in b for b in snaps),
            p.stdout)
    r.check(name + " phases in order", len(firsts) >= 2 and firsts[0].startswith("phase_one")
            and firsts[-1].startswith("phase_two"), "%r" % firsts)
    r.check(name + " no escape codes", "\x1b" not in p.stdout, repr(p.stdout[:200]))
    meta, folded = trace_samples(r, trace)
    r.check(name + " trace", meta > 0 and meta == folded, "meta %d folded %d" % (meta, folded))


def top_rotating(r, py, d, args, seconds):
    """pyflame-top ARGS -o D/run.db on the workload: (exit status, snapshots, complaints)."""
    os.makedirs(d, exist_ok=True)
    p = subprocess.run([r.top] + args + ["-o", os.path.join(d, "run.db"), "--", py,
                                         r.workload] + [str(x) for x in seconds],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    snaps = [b for b in p.stdout.split("\n\n") if b.strip()]
    complaints = [line for line in p.stderr.splitlines()
                  if "now writing" not in line and "wrote " not in line]
    return p.returncode, snaps, complaints


def test_live_rotating(r, label, py):
    """--live of a recording that rotates reads all of its files, as one; under --ring,
    the files retention deletes meanwhile are no error."""
    name = "%s live rotating" % label
    d = os.path.join(r.tmp, "live-rotate-%s" % label)
    rc, snaps, complaints = top_rotating(r, py, d, ["--interval", "1", "--rotate", "1s"], (2, 3))
    firsts = [first(b)[2] for b in snaps if rows(b)]
    files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".db"))
    per_file = [trace_samples(r, f)[0] for f in files]
    last = header_value(snaps[-1], "Samples") if snaps else -1
    r.check(name + ": exit, no complaint", rc == 0 and not complaints, "\n".join(complaints))
    r.check(name + ": the view reads every file", len(files) >= 4 and
            last > max(per_file) and firsts and firsts[0].startswith("phase_one") and
            firsts[-1].startswith("phase_two"),
            "last snapshot %d samples, files %r\n%s" % (last, per_file, "".join(snaps[-1:])))
    d = os.path.join(r.tmp, "live-ring-%s" % label)
    rc, snaps, complaints = top_rotating(r, py, d, ["--interval", "0.3", "--ring", "1s"], (2, 2))
    r.check(name + ": --ring, files deleted under the view", rc == 0 and not complaints and
            len(snaps) >= 8 and header_value(snaps[-1], "Samples") > 0,
            "\n".join(complaints + snaps[-1:]))


def test_pids(r, label, py):
    """Several pids, and --subprocesses, in the snapshots."""
    name = "%s pids" % label
    trace = os.path.join(r.tmp, "pids-%s.db" % label)
    one = subprocess.Popen([py, r.workload, "60", "1"])
    two = subprocess.Popen([py, r.workload, "0", "60"])
    try:
        p = subprocess.run([r.top, "--interval", "1", "-d", "3", "-o", trace,
                            "-p", "%d,%d" % (one.pid, two.pid)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        last = [b for b in p.stdout.split("\n\n") if b.strip()][-1:]
        got = {x[2].split(" ")[0]: x[0] for x in rows(last[0])} if last else {}
        r.check(name + " both processes", p.returncode == 0
                and 35 <= got.get("phase_one", 0) <= 65 and 35 <= got.get("phase_two", 0) <= 65
                and "pid %d %d" % (one.pid, two.pid) in last[0], p.stdout[-2000:] + p.stderr)
    finally:
        for t in (one, two):
            t.kill()
            t.wait()
    parent = os.path.join(r.tmp, "parent.py")
    with open(parent, "w") as f:
        # A forked child (no exec): a child that execs right after its fork is
        # sometimes recorded as its parent's copy and lost at the exec (a
        # recorder problem of --subprocesses, not of the view).
        f.write("import multiprocessing, sys, time\n"
                "sys.path.insert(0, %r)\n"
                "from two_phase_lib import phase_one\n"
                "if __name__ == '__main__':\n"
                "    p = multiprocessing.Process(target=phase_one, args=(time.time() + 5,))\n"
                "    p.start()\n"
                "    p.join()\n" % r.tmp)
    with open(os.path.join(r.tmp, "two_phase_lib.py"), "w") as f:
        f.write(WORKLOAD.replace("\nmain()\n", "\n"))
    p = subprocess.run([r.top, "-s", "--interval", "1", "-f", "-o", trace, "--", py, parent],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    firsts = [first(b)[2] for b in p.stdout.split("\n\n") if b.strip()]
    r.check(name + " --subprocesses", p.returncode == 0
            and any(f.startswith("phase_one") for f in firsts),
            "%r %s %s" % (firsts, p.stderr, report_info(r, trace)[1]))


def test_unknown_terminal(r, label, py):
    """A terminal ncurses does not know: snapshots instead, and the recording unharmed
    (ncurses' initscr() would have exited the recorder)."""
    name = "%s unknown terminal" % label
    trace = os.path.join(r.tmp, "unknown-term-%s.db" % label)
    r.start("TERM=no-such-terminal %s -d 2 -o %s -- %s %s 5 0" % (r.top, trace, py, r.workload))
    try:
        s = r.wait(lambda s: "EXITED" in s)
        r.check(name + ": snapshots, exit 0", "EXITED 0" in s and "unknown to ncurses" in s
                and "phase_one" in s, s)
        rc, info = report_info(r, trace)
        r.check(name + ": trace finished", rc == 0 and "recording:  finalized" in info, info)
    finally:
        r.stop()


ZLIB_LOOP = ("import time, zlib\n"
             "data = b'pyflame' * 150000\n"
             "end = time.time() + 3\n"
             "while time.time() < end:\n"
             "    zlib.compress(data, 9)\n")


def test_native_key(r, label, py):
    """The n key on a --native trace: native frames shown, hidden, one per module."""
    name = "%s native key" % label
    trace = os.path.join(r.tmp, "native-%s.db" % label)
    p = subprocess.run([r.record, "-q", "--native", "-o", trace, "--", py, "-c", ZLIB_LOOP],
                       capture_output=True, text=True)
    if not r.check(name + ": recorded", p.returncode == 0, p.stderr):
        return
    libz = lambda s: any("libz" in x[2] or "deflate" in x[2] for x in rows(s)[:3])
    module = lambda s: any(x[2].startswith("libz.so") and "+0x" not in x[2].split(" ")[0]
                           for x in rows(s)[:3])
    r.start("%s top %s" % (r.report, trace))
    try:
        s = r.wait(libz)
        r.check(name + ": zlib's native code leads", libz(s), s)
        r.keys("n")
        s = r.wait(lambda s: "native frames: hidden" in s)
        r.check(name + ": n hides native frames", "native frames: hidden" in s and not libz(s)
                and any(x[2].startswith("<module>") for x in rows(s)[:1]), s)
        r.keys("n")
        s = r.wait(lambda s: "one per module" in s)
        r.check(name + ": n again shows one frame per module", module(s), s)
        r.keys("n")
        s = r.wait(lambda s: "native frames: shown" in s)
        r.check(name + ": and back", libz(s), s)
        r.keys("q")
        s = r.wait(lambda s: "EXITED" in s)
        r.check(name + ": q", "EXITED 0" in s and not r.alternate_on(), s)
    finally:
        r.stop()


TESTS = [test_live, test_sigterm, test_replay, test_follow, test_follow_set, test_plain,
         test_live_rotating, test_pids, test_unknown_terminal, test_native_key,
         test_pick_follow]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--top", help="pyflame-top (default: next to --record)")
    ap.add_argument("--only", help="interpreter labels, comma-separated "
                                   "(default: 2.7, 3.9, 3.12, 3.13)")
    ap.add_argument("--test", help="run only tests whose name contains this")
    args = ap.parse_args()
    if not shutil.which("tmux"):
        print("SKIP: tmux is not installed (scripts/deps.sh installs it)")
        return 77
    pys = interpreters()
    want = args.only.split(",") if args.only else ["2.7", "3.9", "3.12", "3.13"]
    chosen = [(v, p) for v, p in pys if any(v == w or v.startswith(w + ".") for w in want)]
    if not chosen:
        print("SKIP: no interpreter found")
        return 77
    r = Runner(args)
    try:
        for label, py in chosen:
            for t in TESTS:
                if args.test and args.test not in t.__name__:
                    continue
                try:
                    t(r, label, py)
                except Exception as e:
                    r.check("%s %s" % (label, t.__name__), False, repr(e))
    finally:
        r.stop()
        shutil.rmtree(r.tmp, ignore_errors=True)
    print("%d passed, %d failed" % (r.passed, r.failed))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
