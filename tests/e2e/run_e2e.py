#!/usr/bin/env python3
"""End-to-end tests: record real interpreters with pyflame-record and check
what pyflame-report says about them.

For every interpreter on the machine (pyenv 2.7 and 3.6+, Debian's static
python3.11) and both sampling modes, the workloads in workloads/ are recorded
and the reports are checked against what each workload is known to do: where
it burns CPU, in which ratio, on which threads, through which generators; that
spawn mode returns the program's exit status; and that a process we attached to
is left running, untraced, with its signals delivered.

The third mode, `bpf` (pyflame-record --bpf, the in-kernel sampler), runs
where the kernel and our privileges allow it (root); it samples threads on a
CPU only, so the checks about idle threads are its own there.

Usage: run_e2e.py --record PATH --report PATH [--only 3.12] [--mode blocking]
Prints one line per check and ends with 'N passed, N failed, N skipped'.
"""
import argparse
import glob
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import interps
import tracefile

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "workloads")
FRAME_RE = re.compile(r"^(.*) \((.*):(-?\d+)\)$")
ACCURACY = os.path.join(HERE, os.pardir, os.pardir, "bench", "accuracy", "workload.py")


def interpreters():
    """(label, path) of every CPython we can test here (interps.py)."""
    return interps.interpreters()


def line_of(path, marker):
    with open(path) as f:
        for i, text in enumerate(f, 1):
            if marker in text:
                return i
    raise ValueError(marker)


class Runner:
    def __init__(self, args):
        self.record = args.record
        self.report = args.report
        self.passed = self.failed = self.skipped = 0
        self.tmp = tempfile.mkdtemp(prefix="pyflame-e2e-")
        self.verbose = args.verbose

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print("ok   %s" % name)
        else:
            self.failed += 1
            print("FAIL %s %s" % (name, detail))
        sys.stdout.flush()
        return ok

    def out(self, name):
        return os.path.join(self.tmp, name + ".db")

    def rec(self, args, timeout=120, prefix=()):
        cmd = list(prefix) + [self.record, "-q", "-f"] + args
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout, universal_newlines=True)
        if self.verbose:
            print("  $ %s -> %d %s" % (" ".join(cmd), p.returncode, p.stderr.strip()))
        return p

    def rep(self, args):
        p = subprocess.run([self.report] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError("pyflame-report %s failed (%d): %s"
                               % (" ".join(args), p.returncode, p.stderr.strip()))
        return p.stdout

    def folded(self, db, extra=()):
        """[(frames, count)] with frames root first as (function, file, line)."""
        stacks = []
        for line in self.rep(list(extra) + [db]).splitlines():
            if not line.strip():
                continue
            text, _, count = line.rpartition(" ")
            frames = []
            for f in text.split(";"):
                m = FRAME_RE.match(f)
                frames.append((m.group(1), m.group(2), int(m.group(3))) if m else (f, "", -1))
            stacks.append((frames, int(count)))
        return stacks

    def info(self, db):
        return json.loads(self.rep(["info", "--format", "json", db]))

    def threads(self, db):
        return self.info(db)["threads"]


def has_func(frames, name):
    return any(f[0] == name or f[0].endswith("." + name) for f in frames)


def test_hot(r, label, py, mode):
    db = r.out("hot-%s-%s" % (label, mode))
    script = os.path.join(WORK, "hot.py")
    p = r.rec(["-o", db, "-r", "200"] + mode_flags(mode) + ["--", py, script, "2"])
    if not r.check("%s %s hot: spawn exits 0" % (label, mode), p.returncode == 0, p.stderr):
        return
    stacks = r.folded(db)
    total = sum(c for _, c in stacks)
    in_hot = sum(c for fr, c in stacks if has_func(fr, "hot_loop"))
    r.check("%s %s hot: enough samples" % (label, mode), total >= 150, "total=%d" % total)
    r.check("%s %s hot: hot_loop in >= 80%% of samples" % (label, mode),
            total and in_hot >= 0.8 * total, "%d/%d" % (in_hot, total))
    leaf = {}
    for fr, c in stacks:
        key = (os.path.basename(fr[-1][1]), fr[-1][2])
        leaf[key] = leaf.get(key, 0) + c
    top = max(leaf.items(), key=lambda kv: kv[1])[0] if leaf else None
    want = ("hot.py", line_of(script, "# HOT"))
    r.check("%s %s hot: hottest line is hot.py:%d" % (label, mode, want[1]), top == want,
            "got %s" % (top,))


def test_ratio(r, label, py, mode):
    db = r.out("ratio-%s-%s" % (label, mode))
    truth_file = db + ".truth"
    p = r.rec(["-o", db, "-r", "500"] + mode_flags(mode)
              + ["--", py, os.path.join(WORK, "ratio.py"), "3", truth_file])
    if not r.check("%s %s ratio: spawn exits 0" % (label, mode), p.returncode == 0, p.stderr):
        return
    with open(truth_file) as f:
        in_a, in_b = (float(x) for x in f.read().split())
    truth = 100.0 * in_a / (in_a + in_b)
    a = b = 0
    for fr, c in r.folded(db):
        if has_func(fr, "work_a"):
            a += c
        elif has_func(fr, "work_b"):
            b += c
    share = 100.0 * a / (a + b) if a + b else 0
    # 5 points, or 4.5 standard errors where holds repeated samples: a
    # held-over sample repeats its neighbour and tells nothing new, and on a
    # loaded machine (long holds) a third or more of them can be (the
    # accuracy bench measures the bias; this checks the attribution).
    held = int(r.info(db)["meta"].get("held_over_samples", 0))
    n_eff = max(a + b - held, (a + b) // 4, 1)
    p_true = truth / 100.0
    tol = max(5.0, 4.5 * 100.0 * math.sqrt(p_true * (1 - p_true) / n_eff))
    r.check("%s %s ratio: work_a share %.1f%% within %.1fpp of its CPU time's %.1f%%"
            % (label, mode, share, tol, truth),
            abs(share - truth) <= tol, "a=%d b=%d held over %d" % (a, b, held))


def test_imports(r, label, py, mode):
    """Import-time work (imports.py): module bodies, each freed right after its import,
    take half the CPU time, spin() between them the other half. Their share must come
    out as measured, and their samples not be lost: --bpf decodes its events up to a
    fifth of a second late, when a module's code object is gone (it is woken at once
    for code new to it, and keeps the entries of objects superseded at an address).
    (Not --blocking: it reads each sample at once, as the default mode does.)"""
    if mode == "blocking":
        return
    db = r.out("imports-%s-%s" % (label, mode))
    p = r.rec(["-o", db, "-r", "500"] + mode_flags(mode)
              + ["--", py, os.path.join(WORK, "imports.py"), "100", "10"])
    if not r.check("%s %s imports: spawn exits 0" % (label, mode), p.returncode == 0, p.stderr):
        return
    m = re.search(r"bodies ([0-9.]+) spin ([0-9.]+)", p.stderr)
    if not r.check("%s %s imports: the workload's times" % (label, mode), m, p.stderr):
        return
    in_bodies, in_spin = float(m.group(1)), float(m.group(2))
    truth = 100.0 * in_bodies / (in_bodies + in_spin)
    bodies = spin = 0
    for fr, c in r.folded(db):
        if fr and fr[-1][0] == "<module>" and "gen_mod_" in fr[-1][1]:
            bodies += c
        elif has_func(fr, "spin"):
            spin += c
    share = 100.0 * bodies / (bodies + spin) if bodies + spin else 0
    inf = r.info(db)
    held = int(inf["meta"].get("held_over_samples", 0))
    n_eff = max(bodies + spin - held, (bodies + spin) // 4, 1)
    p_true = truth / 100.0
    tol = max(5.0, 4.5 * 100.0 * math.sqrt(p_true * (1 - p_true) / n_eff))
    gone = inf["errors"].get("code_gone", 0)
    r.check("%s %s imports: module bodies' share %.1f%% within %.1fpp of their CPU time's "
            "%.1f%%, %d samples code_gone" % (label, mode, share, tol, truth, gone),
            abs(share - truth) <= tol and gone <= 0.02 * (bodies + spin) + 2,
            "bodies %d spin %d held over %d" % (bodies, spin, held))


def test_threads(r, label, py, mode, extra=()):
    db = r.out("threads-%s-%s%s" % (label, mode, "".join(extra)))
    p = r.rec(["-o", db, "-r", "200"] + mode_flags(mode) + list(extra)
              + ["--", py, os.path.join(WORK, "threads.py"), "2.5"])
    if extra:
        mode = "%s %s" % (mode, " ".join(extra))
    if not r.check("%s %s threads: spawn exits 0" % (label, mode), p.returncode == 0, p.stderr):
        return
    if mode == "nonblocking":
        # As root the on-CPU states come from context-switch records, not /proc
        # (a thread that exits is looked up in /proc once or twice).
        inf = r.info(db)
        meta, samples = inf["meta"], inf["samples"]
        proc = int(meta.get("proc_state_reads", -1))
        if os.geteuid() == 0:
            r.check("%s %s threads: states from switch records" % (label, mode),
                    meta.get("switch_events") == "on" and 0 <= proc <= 0.02 * samples,
                    "%d of %d states read from /proc" % (proc, samples))
    elif "--no-switch-events" in extra:
        inf = r.info(db)
        meta = inf["meta"]
        r.check("%s %s threads: states from /proc" % (label, mode),
                meta.get("switch_events") == "off" and
                int(meta.get("proc_state_reads", 0)) >= 0.9 * inf["samples"])
    workers = {"worker_one", "worker_two", "worker_three"}
    seen = set()
    sleeper_ok = None
    misnamed = []
    threads = r.threads(db)
    for t in threads:
        if t.get("tid") is None and "ref" not in t:
            continue  # a thread state caught before its OS thread was known
        sel = str(t["ref"]) if "ref" in t else str(t["tid"])
        busy = r.folded(db, ["--thread", sel])
        everything = r.folded(db, ["--thread", sel] + ([] if mode == "bpf" else ["--idle"]))
        funcs = set()
        for fr, c in everything:
            for f in fr:
                funcs.add(f[0].split(".")[-1])
        mine = funcs & workers
        # threads.py names each thread after its function.
        expect = min(mine) if len(mine) == 1 else "sleeper" if "sleeper" in funcs else None
        if expect and t.get("name") != expect:
            misnamed.append((t.get("name"), expect))
        if len(mine) == 1:
            w = mine.pop()
            n_busy = sum(c for _, c in busy)
            r.check("%s %s threads: %s has its own samples" % (label, mode, w),
                    n_busy >= 50 and w not in seen, "busy=%d" % n_busy)
            seen.add(w)
        elif "sleeper" in funcs:
            n_all = sum(c for _, c in everything)
            n_busy = sum(c for _, c in busy)
            if mode == "bpf":
                # On-CPU samples only: a thread that sleeps is (almost) never found.
                sleeper_ok = n_all == n_busy and n_all <= 10
                r.check("%s %s threads: sleeping thread is (almost) never sampled"
                        % (label, mode), sleeper_ok, "%d samples" % n_all)
            else:
                sleeper_ok = n_all >= 50 and n_busy <= 0.2 * n_all
                r.check("%s %s threads: sleeping thread is idle" % (label, mode), sleeper_ok,
                        "on-cpu %d of %d" % (n_busy, n_all))
        elif len(mine) > 1:
            r.check("%s %s threads: one worker per thread" % (label, mode), False,
                    "thread %s shows %s" % (sel, sorted(mine)))
    r.check("%s %s threads: all three workers seen" % (label, mode), seen == workers,
            "seen %s" % sorted(seen))
    if sleeper_ok is None and mode != "bpf":
        r.check("%s %s threads: sleeping thread found" % (label, mode), False)
    names = set(t.get("name") for t in threads)
    # --bpf: the main thread waits in join() and the sleeper sleeps: neither may be in it.
    want = workers if mode == "bpf" else workers | {"sleeper", "MainThread"}
    r.check("%s %s threads: info lists the thread names" % (label, mode),
            want <= names and not misnamed,
            "names %s, misnamed %s" % (sorted(str(n) for n in names), misnamed))
    by_name = r.folded(db, ["--thread", "worker_one"])
    funcs = set(f[0].split(".")[-1] for fr, _ in by_name for f in fr) & (workers | {"sleeper"})
    n_named = sum(c for _, c in by_name)
    r.check("%s %s threads: --thread worker_one selects that thread" % (label, mode),
            n_named >= 50 and funcs == {"worker_one"},
            "samples %d, functions %s" % (n_named, sorted(funcs)))


def test_thread_spawn(r, label, py, mode):
    """A thread started per job: every thread has at most one sample per
    instant, and the main thread one in every instant of the recording
    (before, it had a second, empty one whenever a new thread's state still
    carried its ids, and lost those where a thread's end cut the list)."""
    db = r.out("spawn-%s-%s" % (label, mode))
    p = r.rec(["-o", db, "-r", "200"] + mode_flags(mode)
              + ["--", py, os.path.join(WORK, "spawner.py"), "2"])
    if not r.check("%s %s spawn: exits 0" % (label, mode), p.returncode == 0, p.stderr):
        return
    inf = r.info(db)
    # Before 3.11 the TID is found in struct pthread, after a first sample:
    # the main thread's first samples can be in a row without it.
    main = tracefile.threads(db, "t.task_of IS NULL AND t.python_thread_id = (SELECT m.python_thread_id "
                                 "FROM threads m WHERE m.tid = m.pid AND m.task_of IS NULL) "
                                 "AND (t.tid IS NULL OR t.tid = t.pid)")
    rows = tracefile.samples(db)
    seen, doubled = set(), 0
    for ref, t, _, _ in rows:
        doubled += (ref, t) in seen
        seen.add((ref, t))
    r.check("%s %s spawn: one sample per thread and instant" % (label, mode), doubled == 0,
            "%d doubled of %d" % (doubled, len(rows)))
    if mode == "bpf":
        # On-CPU samples: the main thread, waiting for its threads, is rarely found; the
        # threads are, though each is too short-lived for the recorder to have told the
        # kernel of it: its state is found there (by the GIL, or in its interpreter's
        # list), never counted invalid for being new. What runs outside any Python
        # state (a thread's start and end in C, its exit in the kernel) is not Python's
        # time: counted apart. The other threads' share is about 40% (3.7 and 3.12:
        # 34-53% of 45-88 on-CPU samples), but their samples come in runs and one CI run
        # had 10 of 49 (20%): the bound only has to tell "found" from "not found" (0).
        errors, meta = inf["errors"], inf["meta"]
        others = sum(1 for ref, _, _, _ in rows if ref not in main)
        r.check("%s bpf spawn: new threads found in the kernel (%d of %d samples of other "
                "threads, %d invalid, %s not Python)" % (label, others, len(rows),
                                                        errors.get("invalid", 0),
                                                        meta.get("bpf_not_python")),
                others >= 0.1 * len(rows) and errors.get("invalid", 0) <= 0.02 * len(rows) + 2 and
                "bpf_not_python" in meta, "%d samples" % len(rows))
        return
    if not r.check("%s %s spawn: the main thread found" % (label, mode), main, "%s" % main):
        return
    instants = set(t for _, t, _, _ in rows)
    mine = [t for ref, t, _, _ in rows if ref in main]
    r.check("%s %s spawn: one main thread sample per instant" % (label, mode),
            len(mine) == len(set(mine)), "%d samples in %d instants" % (len(mine), len(set(mine))))
    mine = set(mine)
    torn = inf["errors"]["torn"] + inf["errors"]["read"]
    r.check("%s %s spawn: the main thread in every instant" % (label, mode),
            len(instants) >= 200 and len(instants - mine) <= torn,
            "missing from %d of %d instants, %s errors" % (len(instants - mine), len(instants), torn))


def test_threads_proc_state(r, label, py, mode):
    """The same threads, their states read from /proc (--no-switch-events)."""
    if mode == "nonblocking":
        test_threads(r, label, py, mode, ["--no-switch-events"])


def adjacent(frames, caller, callee):
    names = [f[0].split(".")[-1] for f in frames]
    return any(names[i] == caller and names[i + 1] == callee for i in range(len(names) - 1))


def test_generators(r, label, py, mode):
    db = r.out("gen-%s-%s" % (label, mode))
    p = r.rec(["-o", db, "-r", "300"] + mode_flags(mode)
              + ["--", py, os.path.join(WORK, "generators.py"), "2"])
    if not r.check("%s %s generators: spawn exits 0" % (label, mode), p.returncode == 0,
                   p.stderr):
        return
    stacks = r.folded(db)
    gen = sum(c for fr, c in stacks if adjacent(fr, "consume_generator", "numbers"))
    coro = sum(c for fr, c in stacks if adjacent(fr, "drive_coroutine", "coroutine_body"))
    r.check("%s %s generators: generator frame under its caller" % (label, mode), gen >= 20,
            "samples=%d" % gen)
    r.check("%s %s generators: coroutine frame under its caller" % (label, mode), coro >= 20,
            "samples=%d" % coro)


def test_exit_status(r, label, py, mode):
    db = r.out("exit-%s-%s" % (label, mode))
    p = r.rec(["-o", db] + mode_flags(mode) + ["--", py, os.path.join(WORK, "exits.py"), "7"])
    r.check("%s %s spawn returns the program's exit status" % (label, mode), p.returncode == 7,
            "got %d: %s" % (p.returncode, p.stderr))


def proc_status(pid):
    fields = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            fields[k] = v.strip()
    return fields


def test_attach(r, label, py, mode):
    db = r.out("attach-%s-%s" % (label, mode))
    target = subprocess.Popen([py, os.path.join(WORK, "longrun.py")], stdout=subprocess.PIPE,
                              universal_newlines=True)
    try:
        first = target.stdout.readline()
        if not r.check("%s %s attach: target started" % (label, mode), first.startswith("ready")):
            return
        rec = subprocess.Popen([r.record, "-q", "-f", "-o", db, "-p", str(target.pid), "-d",
                                "1.5"] + mode_flags(mode),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               universal_newlines=True)
        # Each signal is sent once the one before was counted: two sent
        # while the target waits for a CPU (a loaded machine) would be one
        # delivery, by the kernel's rules, with or without us.
        sent = 0
        got = 0
        deadline = time.time() + 1.2
        time.sleep(0.2)
        while time.time() < deadline:
            os.kill(target.pid, signal.SIGUSR1)
            sent += 1
            wait_until = time.time() + 3
            while got < sent and time.time() < wait_until:
                line = target.stdout.readline()
                if line.startswith("alive"):
                    got = int(line.split()[1])
        _, err = rec.communicate(timeout=60)
        r.check("%s %s attach: recorder exits 0" % (label, mode), rec.returncode == 0, err)
        time.sleep(0.3)
        st = proc_status(target.pid)
        r.check("%s %s attach: target still running" % (label, mode), target.poll() is None)
        r.check("%s %s attach: target not traced" % (label, mode), st.get("TracerPid") == "0",
                "TracerPid=%s" % st.get("TracerPid"))
        r.check("%s %s attach: target not stopped" % (label, mode),
                st.get("State", "")[:1] in ("R", "S"), "State=%s" % st.get("State"))
        # Every signal sent while we were attached must have been delivered.
        end = time.time() + 5
        while time.time() < end:
            line = target.stdout.readline()
            if line.startswith("alive"):
                got = int(line.split()[1])
                if got >= sent:
                    break
        r.check("%s %s attach: all %d signals delivered" % (label, mode, sent), got == sent,
                "target counted %d" % got)
        st = proc_status(target.pid)
        r.check("%s %s attach: no signal left pending" % (label, mode),
                int(st.get("SigPnd", "0"), 16) == 0 and int(st.get("ShdPnd", "0"), 16) == 0,
                "SigPnd=%s ShdPnd=%s" % (st.get("SigPnd"), st.get("ShdPnd")))
        stacks = r.folded(db)
        n = sum(c for fr, c in stacks if has_func(fr, "tick"))
        r.check("%s %s attach: samples in tick()" % (label, mode), n >= 50, "n=%d" % n)
    finally:
        target.kill()
        target.wait()


def test_subprocesses(r, label, py, mode):
    if mode == "blocking":
        return  # one mode is enough: following children does not depend on it
    db = r.out("pool-%s-%s" % (label, mode))
    p = r.rec(["-o", db, "-r", "200", "--subprocesses"] + mode_flags(mode)
              + ["--", py, os.path.join(WORK, "pool.py"), "2.5"])
    if not r.check("%s %s subprocesses: spawn exits 0" % (label, mode), p.returncode == 0,
                   p.stderr):
        return
    inf = r.info(db)
    workers = 0
    for proc in inf["processes"]:
        stacks = r.folded(db, ["--pid", str(proc["pid"])])
        if sum(c for fr, c in stacks if has_func(fr, "work_item")) >= 20:
            workers += 1
    r.check("%s %s subprocesses: >= 2 pool workers recorded in work_item" % (label, mode),
            workers >= 2, "workers=%d processes=%d" % (workers, len(inf["processes"])))


def test_subprocess_churn(r, label, py, mode):
    """Children that start and exit all the time, recorded with -s at 1 kHz: each
    must be let go or reaped at once. A traced child that died stayed a zombie
    of the recorder, and its parent's wait() never returned (--blocking -s)."""
    db = r.out("churn-%s-%s" % (label, mode))
    start = time.time()
    try:
        p = r.rec(["-o", db, "-r", "1k", "-s"] + mode_flags(mode) +
                  ["--", py, os.path.join(WORK, "churn.py"), "30"], timeout=60)
    except subprocess.TimeoutExpired:
        r.check("%s %s -s with 30 short-lived children: finishes" % (label, mode), False,
                "still running after 60 s")
        return
    r.check("%s %s -s with 30 short-lived children: finishes (%.1f s), exit 0"
            % (label, mode, time.time() - start), p.returncode == 0, p.stderr)


def unshare_cmd(label, py, script, args):
    """A shell command that runs `py script args` from a path that exists only
    inside new mount and PID namespaces (a copy on a private tmpfs)."""
    if label.startswith("debian"):
        setup = "cp %s /mnt/nspy/python" % py
        run = "exec /mnt/nspy/python %s %s" % (script, args)
    else:
        prefix = os.path.dirname(os.path.dirname(py))
        ver = re.match(r"(\d+\.\d+)", label).group(1)
        lib = glob.glob(os.path.join(prefix, "lib", "libpython%s*.so.1.0" % ver))[0]
        exe = os.path.realpath(py)
        setup = "mkdir -p /mnt/nspy/lib && cp %s /mnt/nspy/python && cp %s /mnt/nspy/lib/" % (
            exe, lib)
        run = ("PYTHONHOME=%s LD_LIBRARY_PATH=/mnt/nspy/lib exec /mnt/nspy/python %s %s"
               % (prefix, script, args))
    return ["unshare", "--mount", "--pid", "--fork", "--mount-proc", "--propagation", "private",
            "sh", "-c", "mount -t tmpfs none /mnt && mkdir -p /mnt/nspy && %s && %s"
            % (setup, run)]


def children_of(pid):
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    st = f.read()
            except IOError:
                continue
            if int(st.rpartition(")")[2].split()[1]) == pid:
                kids.append(int(d))
    return kids


CONTAINER_LABELS = ("debian-3.11", "2.7.18", "3.9.18", "3.12.1", "3.13.0")


def test_container(r, label, py, mode):
    if mode == "blocking" or label not in CONTAINER_LABELS:
        return
    if not shutil.which("unshare"):
        r.skipped += 1
        print("skip %s container: unshare not installed" % label)
        return
    db = r.out("container-%s" % label)
    ns = subprocess.Popen(unshare_cmd(label, py, os.path.join(WORK, "threads.py"), "8"))
    try:
        pid = None
        end = time.time() + 10
        while time.time() < end and pid is None:
            for k in children_of(ns.pid):
                try:
                    if os.readlink("/proc/%d/exe" % k).startswith("/mnt/nspy/python"):
                        pid = k
                except OSError:
                    pass
            time.sleep(0.05)
        if not r.check("%s container: interpreter started in new namespaces" % label,
                       pid is not None):
            return
        time.sleep(0.5)
        r.check("%s container: its binary does not exist outside" % label,
                not os.path.exists(os.readlink("/proc/%d/exe" % pid)))
        p = r.rec(["-o", db, "-r", "200", "-d", "2", "-p", str(pid)])
        if not r.check("%s container: recorded from outside" % label, p.returncode == 0,
                       p.stderr):
            return
        tids = set(int(t) for t in os.listdir("/proc/%d/task" % pid))
        workers = set()
        sleeper_idle = False
        for t in r.info(db)["threads"]:
            everything = r.folded(db, ["--thread", str(t["tid"]), "--idle"])
            busy = sum(c for _, c in r.folded(db, ["--thread", str(t["tid"])]))
            funcs = set(f[0].split(".")[-1] for fr, _ in everything for f in fr)
            if funcs & {"worker_one", "worker_two", "worker_three"} and t["tid"] in tids:
                workers |= funcs & {"worker_one", "worker_two", "worker_three"}
            if "sleeper" in funcs and t["tid"] in tids:
                n_all = sum(c for _, c in everything)
                sleeper_idle = n_all >= 50 and busy <= 0.2 * n_all
        r.check("%s container: threads carry host tids and their own functions" % label,
                len(workers) == 3, "workers=%s" % sorted(workers))
        r.check("%s container: sleeping thread idle (NSpid mapping)" % label, sleeper_idle)
    finally:
        ns.kill()
        ns.wait()
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def test_signals(r, label, py, mode):
    """Every way of stopping the recorder leaves a readable trace; Ctrl-C in
    spawn mode reaches the program, whose exit status the recorder returns."""
    for sig, name in ((signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM"),
                      (signal.SIGKILL, "SIGKILL")):
        db = r.out("sig-%s-%s-%s" % (name, label, mode))
        target = subprocess.Popen([py, os.path.join(WORK, "longrun.py")], stdout=subprocess.PIPE,
                                  universal_newlines=True)
        try:
            target.stdout.readline()
            rec = subprocess.Popen([r.record, "-q", "-f", "-o", db, "-p", str(target.pid)]
                                   + mode_flags(mode), stderr=subprocess.PIPE,
                                   universal_newlines=True)
            time.sleep(1.5)
            if sig == signal.SIGKILL:
                # What was committed must survive: wait until a commit is in the file (one a
                # second; a slow start, as under ThreadSanitizer with --bpf, may take longer).
                deadline = time.time() + 30
                while time.time() < deadline:
                    try:
                        if r.info(db)["samples"] >= 20:
                            break
                    except (RuntimeError, ValueError, KeyError, OSError):
                        pass
                    time.sleep(0.25)
            rec.send_signal(sig)
            _, err = rec.communicate(timeout=30)
            inf = r.info(db)
            if sig == signal.SIGKILL:
                r.check("%s %s kill -9: trace readable, samples up to the last second"
                        % (label, mode), inf["samples"] >= 20 and not inf["finalized"],
                        "samples=%d finalized=%s" % (inf["samples"], inf["finalized"]))
            else:
                r.check("%s %s %s: recorder exits 0 with a finalized trace" % (label, mode, name),
                        rec.returncode == 0 and inf["finalized"] and inf["samples"] >= 50,
                        "rc=%d finalized=%s samples=%d %s" % (rec.returncode, inf["finalized"],
                                                            inf["samples"], err))
            r.check("%s %s %s: target still running and untraced" % (label, mode, name),
                    target.poll() is None and proc_status(target.pid).get("TracerPid") == "0")
        finally:
            target.kill()
            target.wait()
    # Ctrl-C in a terminal signals the whole foreground process group.
    script = os.path.join(WORK, "hot.py")
    direct = subprocess.Popen([py, script, "30"], start_new_session=True,
                              stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    os.killpg(direct.pid, signal.SIGINT)
    direct_rc = direct.wait(timeout=30)
    direct_rc = 128 - direct_rc if direct_rc < 0 else direct_rc
    db = r.out("ctrlc-%s-%s" % (label, mode))
    rec = subprocess.Popen([r.record, "-q", "-f", "-o", db] + mode_flags(mode)
                           + ["--", py, script, "30"], start_new_session=True,
                           stderr=subprocess.PIPE, universal_newlines=True)
    time.sleep(1.5)
    os.killpg(rec.pid, signal.SIGINT)
    _, err = rec.communicate(timeout=30)
    inf = r.info(db)
    r.check("%s %s spawn Ctrl-C: exit status %d as without pyflame, trace finalized"
            % (label, mode, direct_rc), rec.returncode == direct_rc and inf["finalized"],
            "rc=%d finalized=%s %s" % (rec.returncode, inf["finalized"], err[-300:]))


def test_dump(r, label, py, mode):
    if mode == "bpf":
        return  # --dump reads from user space; --bpf refuses it
    target = subprocess.Popen([py, os.path.join(WORK, "longrun.py")], stdout=subprocess.PIPE,
                              universal_newlines=True)
    try:
        target.stdout.readline()
        p = subprocess.run([r.record, "--dump", "-p", str(target.pid)] + mode_flags(mode),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=30)
        r.check("%s %s --dump prints the stack" % (label, mode),
                p.returncode == 0 and "tick (" in p.stdout and "longrun.py" in p.stdout
                and ("Thread" in p.stdout), "rc=%d out=%r err=%r" % (p.returncode, p.stdout[:300],
                                                                   p.stderr[:300]))
        st = proc_status(target.pid)
        r.check("%s %s --dump leaves the target running, untraced" % (label, mode),
                target.poll() is None and st.get("TracerPid") == "0")
    finally:
        target.kill()
        target.wait()
    # Threads are shown under the names threading gave them.
    target = subprocess.Popen([py, os.path.join(WORK, "threads.py"), "5"])
    try:
        time.sleep(1.0)
        p = subprocess.run([r.record, "--dump", "-p", str(target.pid)] + mode_flags(mode),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=30)
        r.check("%s %s --dump names the threads" % (label, mode),
                p.returncode == 0 and all('"%s"' % n in p.stdout for n in
                                          ("worker_one", "worker_two", "sleeper", "MainThread")),
                "rc=%d out=%r" % (p.returncode, p.stdout[:600]))
    finally:
        target.kill()
        target.wait()


def on_cpu(cpu):
    """A command prefix that runs on one CPU, where the machine has two (else nothing)."""
    return ["taskset", "-c", str(cpu)] if (os.cpu_count() or 1) >= 2 and shutil.which(
        "taskset") else []


def shares(r, db, a, b, key="self", mode=None):
    """(share of a among a and b, samples of both) from --by-function, by their self
    samples or, with key="total", by the samples they are anywhere in."""
    idle = [] if mode == "bpf" else ["--idle"]  # a --bpf trace has on-CPU samples only
    rows = json.loads(r.rep(["--by-function", "--format", "json", "--top", "0"] + idle + [db]))
    x = sum(row[key] for row in rows["rows"] if row["function"] == a)
    y = sum(row[key] for row in rows["rows"] if row["function"] == b)
    return (x / (x + y) if x + y else 0.0), x + y


def test_accuracy(r, label, py, mode):
    """Shares against the truth the workload measures of itself, with generous bounds
    (bench/accuracy.py is the benchmark). A loop of exactly one sampling period: the old
    grid with a quarter period of jitter saw its 70% function at 40-99%. A stack that
    changes every few tens of ns, read from another CPU: before 3.11 half its samples
    were torn and its share halved; after, mixed reads went unnoticed."""
    truth_file = os.path.join(r.tmp, "truth.json")
    db = r.out("acc-split-%s-%s" % (label, mode))
    p = r.rec(["-o", db, "-r", "100"] + mode_flags(mode) +
              ["--", py, ACCURACY, "split", "4", truth_file, "0.007", "0.003"])
    if r.check("%s %s accuracy: periodic loop recorded" % (label, mode), p.returncode == 0,
               p.stderr):
        with open(truth_file) as f:
            truth = json.load(f)
            # --bpf samples CPU time: the truth is the functions' CPU time there.
            truth = (truth.get("cpu", truth) if mode == "bpf" else truth)["hot_a"]
        got, n = shares(r, db, "hot_a", "hot_b", key="total", mode=mode)
        # --bpf samples the workload only on a CPU: fewer on a loaded machine.
        r.check("%s %s accuracy: a loop of one period: hot_a %.1f%% of %d samples, truly %.1f%% "
                "(within 8 points)" % (label, mode, 100 * got, n, 100 * truth),
                n >= (200 if mode == "bpf" else 300) and abs(got - truth) <= 0.08)
    db = r.out("acc-fast-%s-%s" % (label, mode))
    p = r.rec(["-o", db, "-r", "500"] + mode_flags(mode) +
              ["--"] + on_cpu(0) + [py, ACCURACY, "faststack", "3", truth_file, "0.001"],
              prefix=on_cpu(1))
    if not r.check("%s %s accuracy: fast-changing stack recorded" % (label, mode),
                   p.returncode == 0, p.stderr):
        return
    with open(truth_file) as f:
        truth = json.load(f)
        truth = (truth.get("cpu", truth) if mode == "bpf" else truth)["fast_loop"]
    got, n = shares(r, db, "fast_loop", "flat", "total", mode=mode)
    inf = r.info(db)
    meta = inf["meta"]
    missed = int(meta.get("missed_deadlines", 0))
    # 6 points, or 4 standard errors when a loaded machine left fewer samples; and slots
    # the recorder missed (said in the trace) could all have fallen in one function: a
    # share is only as good as the samples that were taken.
    bound = max(0.06, 4 * math.sqrt(0.25 / max(n, 1))) + missed / max(n + missed, 1)
    r.check("%s %s accuracy: a stack that changes every few ns, read from another CPU: "
            "fast_loop %.1f%% of %d samples, truly %.1f%% (within %.0f points; %d torn; "
            "%d of %d samples elsewhere, %s held over, %d slots missed)"
            % (label, mode, 100 * got, n, 100 * truth, 100 * bound, inf["errors"]["torn"],
               inf["samples"] - n, inf["samples"], meta.get("held_over_samples", 0), missed),
            n >= 300 and abs(got - truth) <= bound)
    if mode == "nonblocking" and os.geteuid() == 0 and "capture" in inf["meta"]:
        meta = inf["meta"]
        done, idle, failed = (int(meta.get(k, 0)) for k in
                              ("captures", "captures_not_running", "captures_failed"))
        # Every sample is tried in the thread's own context; one whose thread is not on a
        # CPU then (preempted: many on a busy machine) is read from outside, as it should.
        r.check("%s %s accuracy: read in the running thread's context (%s; of %d samples, "
                "%d read in context, %d found the thread off CPU, %d failed)"
                % (label, mode, meta["capture"], inf["samples"], done, idle, failed),
                meta["capture"] == "on" and done + idle + failed >= 0.8 * inf["samples"] and
                failed <= 0.01 * inf["samples"] and done >= 50)


def test_hold_over(r, label, py, mode):
    """--blocking: a sample due while the threads are held is the held stack. A thread
    that shares its CPU with a busy loop waits for that CPU before it stops, often longer
    than a period; those samples were taken after the release or missed, and the misses
    fell on the busy stretches: a thread asleep 54% of the time came out 8-9 points more
    idle. Needs two CPUs: the recorder on one, the program and the busy loop on the other."""
    if mode != "blocking" or not on_cpu(0):
        return
    truth_file = os.path.join(r.tmp, "truth.json")
    db = r.out("holdover-%s" % label)
    hog = subprocess.Popen(on_cpu(0) + ["sh", "-c", "while :; do :; done"])
    try:
        p = r.rec(["-o", db, "-r", "1000", "--blocking", "--"] + on_cpu(0) +
                  [py, ACCURACY, "oncpu", "3", truth_file, "0.001"], prefix=on_cpu(1))
    finally:
        hog.kill()
        hog.wait()
    if not r.check("%s %s hold-over: recorded beside a busy loop" % (label, mode),
                   p.returncode == 0, p.stderr):
        return
    with open(truth_file) as f:
        truth = json.load(f)["idle_sleep"]
    rows = json.loads(r.rep(["--by-function", "--format", "json", "--top", "0", "--idle",
                             "--thread", "worker", db]))
    n = rows["samples"]
    idle = sum(row["self"] for row in rows["rows"] if row["function"] == "idle_sleep")
    got = idle / n if n else 0.0
    meta = r.info(db)["meta"]
    held = int(meta.get("held_over_samples", 0))
    r.check("%s %s hold-over: idle share %.1f%% of %d samples, truly %.1f%% (within 4 points; "
            "%d samples of instants during holds, %s missed)"
            % (label, mode, 100 * got, n, 100 * truth, held, meta.get("missed_deadlines")),
            n >= 1000 and held > 0 and abs(got - truth) <= 0.04)


def test_hold_over_two(r, label, py, mode):
    """--blocking with two processes (-s): each pass holds both until both are read, so an
    instant during it finds both held. Held one after the other, the instants after the
    first one's release were sampled after the pass, that program right where it resumed
    (the function it was held in had passed its deadline and ended), and a third to a
    half of the slots were missed: beside a busy loop, each program's 70% function came
    out 8-20 points low. Two CPUs: the recorder on one, the programs and the loop on the
    other."""
    if mode != "blocking" or not on_cpu(0):
        return
    truth_file = os.path.join(r.tmp, "truth.json")
    db = r.out("holdover2-%s" % label)
    hog = subprocess.Popen(on_cpu(0) + ["sh", "-c", "while :; do :; done"])
    try:
        p = r.rec(["-o", db, "-r", "1000", "--blocking", "-s", "--"] + on_cpu(0) +
                  [py, ACCURACY, "twoproc", "3", truth_file, "0.0007", "0.0003"],
                  prefix=on_cpu(1))
    finally:
        hog.kill()
        hog.wait()
    if not r.check("%s %s hold-over, two processes: recorded beside a busy loop" % (label, mode),
                   p.returncode == 0, p.stderr):
        return
    with open(truth_file) as f:
        truth = json.load(f)
    meta = r.info(db)["meta"]
    for pid in sorted(truth):
        rows = json.loads(r.rep(["--by-function", "--format", "json", "--top", "0", "--idle",
                                 "--pid", pid, db]))
        x = sum(row["total"] for row in rows["rows"] if row["function"] == "hot_a")
        y = sum(row["total"] for row in rows["rows"] if row["function"] == "hot_b")
        n = x + y
        got = x / n if n else 0.0
        bound = max(0.06, 4 * math.sqrt(0.21 / max(n, 1)))
        r.check("%s %s hold-over, two processes: hot_a of process %s %.1f%% of %d samples, "
                "truly %.1f%% (within %.0f points; %s held over, %s missed)"
                % (label, mode, pid, 100 * got, n, 100 * truth[pid]["hot_a"], 100 * bound,
                   meta.get("held_over_samples"), meta.get("missed_deadlines")),
                n >= 1000 and abs(got - truth[pid]["hot_a"]) <= bound)


def test_dump_consistent(r, label, py, mode):
    """--dump of a stack that changes every few tens of ns, from another CPU: always whole."""
    if mode == "bpf":
        return
    target = subprocess.Popen(on_cpu(0) + [py, ACCURACY, "faststack", "60", os.devnull, "1"])
    try:
        time.sleep(0.5)
        torn = 0
        for _ in range(20):
            p = subprocess.run(on_cpu(1) + [r.record, "--dump", "-p", str(target.pid)] +
                               mode_flags(mode), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               universal_newlines=True, timeout=30)
            torn += p.returncode != 0 or "could not be read" in p.stdout
        r.check("%s %s --dump of a fast-changing stack: 20 of 20 whole" % (label, mode),
                torn == 0, "%d torn or failed" % torn)
    finally:
        target.kill()
        target.wait()


def run_in_pty(argv, timeout=30):
    """Run argv with stderr on a terminal; return (status, everything it printed)."""
    import pty
    import select
    master, slave = pty.openpty()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=slave)
    os.close(slave)
    out = b""
    end = time.time() + timeout
    while time.time() < end:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        elif p.poll() is not None:
            break
    os.close(master)
    return p.wait(), out.decode("utf-8", "replace")


def test_cli(r, label, py, mode):
    """Status line on a terminal only; distinct exit statuses with messages that say the fix."""
    if mode == "blocking" or label not in ("3.12.1", "2.7.18"):
        return
    db = r.out("cli-%s" % label)
    if label == "3.12.1":
        # --version: the version, the trace format, the CPython versions read (which
        # include every interpreter this machine has), the same from every command.
        outs = []
        for cmd in (r.record, r.report, os.path.join(os.path.dirname(r.report), "pyflame-diff")):
            v = subprocess.run([cmd, "--version"], stdout=subprocess.PIPE,
                               universal_newlines=True, timeout=30)
            outs.append((os.path.basename(cmd), v.returncode, v.stdout))
        lines = [o[2].splitlines() for o in outs]
        ok = all(rc == 0 and len(ls) == 3 and ls[0].startswith(name + " ") and
                 ls[1] == "trace format 2" and ls[2] == lines[0][2]
                 for (name, rc, _), ls in zip(outs, lines))
        listed = lines[0][2] if ok else ""
        m = re.match(r"CPython 2\.7 and 3\.(\d+) to 3\.(\d+)$", listed)
        here = [v for v, _ in interpreters()]
        ok = ok and m is not None and all(
            v.startswith("2.7") or int(m.group(1)) <= int(v.split(".")[1]) <= int(m.group(2))
            for v in (h.replace("debian-", "") for h in here))
        r.check("--version of every command: version, trace format, CPython versions read",
                ok, repr(outs))
    # A program that exits before its interpreter can be read is recorded, empty: its
    # exit status is ours, never "does not look like CPython" or "no such process".
    quick = [subprocess.run([r.record, "-q", "-f", "-o", db, "--", py, "-c", "pass"],
                            stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
             for _ in range(8)]
    r.check("%s a program that exits at once (python -c pass, 8 runs): exit 0, no error"
            % label, all(q.returncode == 0 and not q.stderr for q in quick),
            repr([(q.returncode, q.stderr) for q in quick if q.returncode or q.stderr]))
    q = subprocess.run([r.record, "-f", "-o", db, "--", "sh", "-c", "exit 3"],
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    r.check("%s a program gone before it could be read: its exit status (3), an empty trace, "
            "a note" % label, q.returncode == 3 and "no samples" in q.stderr and
            r.info(db)["samples"] == 0, "rc=%d %s" % (q.returncode, q.stderr))
    status, out = run_in_pty([r.record, "-f", "-o", db, "-r", "100", "--", py,
                              os.path.join(WORK, "hot.py"), "1.5"])
    r.check("%s status line on a terminal (elapsed, samples, rate, errors)" % label,
            status == 0 and re.search(r"\d+\.\ds, \d+ samples, [\d.]+ Hz, \d+ errors", out)
            is not None, repr(out[-300:]))
    p = r.rec(["-o", db, "--", py, os.path.join(WORK, "exits.py"), "0"])
    r.check("%s no status line when stderr is not a terminal" % label,
            p.returncode == 0 and "samples" not in p.stderr, p.stderr)
    # Existing output is not overwritten without --force.
    p = subprocess.run([r.record, "-q", "-o", db, "--", py, os.path.join(WORK, "exits.py"),
                        "0"], stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    r.check("%s existing output refused (exit 7, says --force)" % label,
            p.returncode == 7 and "--force" in p.stderr, "rc=%d %s" % (p.returncode, p.stderr))
    # No such process.
    p = subprocess.run([r.record, "-q", "-f", "-o", db, "-p", "999999"], stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=30)
    r.check("%s no such process (exit 3)" % label, p.returncode == 3 and p.stderr.count("\n") == 1,
            "rc=%d %s" % (p.returncode, p.stderr))
    stray = r.out("never-written")
    subprocess.run([r.record, "-q", "-o", stray, "-p", "999999"], stderr=subprocess.DEVNULL)
    r.check("%s a failed attach leaves no trace file behind" % label, not os.path.exists(stray))
    # Not a Python process.
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.2)
        p = subprocess.run([r.record, "-q", "-f", "-o", db, "-p", str(sleeper.pid)],
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
        r.check("%s not a Python process (exit 4)" % label,
                p.returncode == 4 and "CPython" in p.stderr, "rc=%d %s" % (p.returncode,
                                                                        p.stderr))
    finally:
        sleeper.kill()
        sleeper.wait()
    # Permission denied: a recorder without privileges against a root process.
    if os.geteuid() == 0:
        target = subprocess.Popen([py, os.path.join(WORK, "longrun.py")], stdout=subprocess.PIPE,
                                  universal_newlines=True)
        try:
            target.stdout.readline()
            out = tempfile.mkdtemp(prefix="pyflame-nobody-")
            os.chmod(out, 0o777)

            def drop():
                os.setgid(65534)
                os.setuid(65534)
            p = subprocess.run([r.record, "-q", "-f", "-o", os.path.join(out, "x.db"), "-p",
                                str(target.pid)], stderr=subprocess.PIPE,
                               universal_newlines=True, timeout=30, preexec_fn=drop)
            r.check("%s permission denied (exit 6, names CAP_SYS_PTRACE)" % label,
                    p.returncode == 6 and "CAP_SYS_PTRACE" in p.stderr,
                    "rc=%d %s" % (p.returncode, p.stderr))
            shutil.rmtree(out, ignore_errors=True)
        finally:
            target.kill()
            target.wait()
    # A command that cannot be started.
    p = subprocess.run([r.record, "-q", "-f", "-o", db, "--", "/nonexistent/python"],
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
    r.check("%s command not found (exit 127)" % label, p.returncode == 127, p.stderr)


def mode_flags(mode):
    return {"blocking": ["--blocking"], "bpf": ["--bpf"]}.get(mode, [])


def bpf_works(r, py):
    """Whether pyflame-record --bpf runs here (root, a kernel with BPF timers), and why not."""
    db = r.out("bpf-probe")
    p = r.rec(["-o", db, "--bpf", "--", py, "-c", "pass"])
    return p.returncode == 0, p.stderr.strip()


def test_bpf(r, label, py, mode):
    """--bpf's own: a stack deeper than the in-kernel walk's bound is kept, its innermost
    frames, and counted truncated; the trace says it holds on-CPU samples and reports
    refuse --idle on it; nothing lost or invalid, few slots late; options it
    cannot combine with are refused with a message."""
    if mode != "bpf":
        return
    db = r.out("bpf-deep-%s" % label)
    p = r.rec(["-o", db, "-r", "500", "--bpf", "--", py, os.path.join(WORK, "deep.py"), "300",
               "2"])
    if not r.check("%s bpf deep: spawn exits 0" % label, p.returncode == 0, p.stderr):
        return
    inf = r.info(db)
    meta, errors = inf["meta"], inf["errors"]
    stacks = r.folded(db)
    total = sum(c for _, c in stacks)
    deep = [(fr, c) for fr, c in stacks if len(fr) >= 250]
    n_deep = sum(c for _, c in deep)
    # (A sample may catch leaf() being entered: its caller is the innermost frame then.)
    leaf_ok = sum(c for fr, c in deep if fr[-1][0].split(".")[-1] == "leaf") >= 0.95 * n_deep
    r.check("%s bpf deep: stacks of 300 frames kept to the walk's bound, leaf last "
            "(%d of %d samples, %d counted truncated)" % (label, n_deep, total,
                                                          errors.get("truncated", 0)),
            total >= 300 and n_deep >= 0.9 * total and leaf_ok and
            errors.get("truncated", 0) >= n_deep, "stacks %s" % [len(f) for f, _ in deep][:5])
    r.check("%s bpf: trace says mode bpf, on-CPU samples" % label,
            meta.get("mode") == "bpf" and meta.get("samples_of") == "on-cpu", "%s" % meta)
    # A slot is late when its CPU's timer fired a whole period after it: on a shared
    # VM that happens when the host preempts the vCPU (CI showed 10 of some 1,850 slots,
    # a loaded machine here 0-2 of 1,700); a timer that is not rearmed right misses far
    # more. So late slots are judged against every slot of every CPU, not the samples.
    late = int(meta.get("missed_deadlines", -1))
    slots = int(meta.get("bpf_timer_fires", 0)) + max(late, 0)
    r.check("%s bpf: no event lost, no thread invalid, at most 2%% of slots late" % label,
            int(meta.get("bpf_lost", -1)) == 0 and errors.get("invalid", 0) <= 2 and
            0 <= late <= 0.02 * slots,
            "lost %s invalid %s late %s of %d slots" % (meta.get("bpf_lost"),
                                                       errors.get("invalid"), late, slots))
    q = subprocess.run([r.report, "--idle", db], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=60)
    r.check("%s bpf: report --idle refused with a message" % label,
            q.returncode != 0 and "without --bpf" in q.stderr, q.stderr)
    for other in ("--blocking", "--dump"):  # (--bpf --native: test_native.py)
        q = r.rec(["-o", db, "--bpf", other, "--", py, "-c", "pass"])
        r.check("%s bpf: --bpf %s refused (exit 2, says which)" % (label, other),
                q.returncode == 2 and other in q.stderr, "rc %d %s" % (q.returncode, q.stderr))
    if os.geteuid() != 0 or not label.startswith("debian"):
        return
    # Without the privileges: --bpf says what to grant (exit 6); --bpf=auto records from
    # user space, says why, and the trace says so. (Debian's python: nobody may run it,
    # not those under /root.)
    out = tempfile.mkdtemp(prefix="pyflame-nobody-")
    os.chmod(out, 0o777)

    def drop():
        os.setgid(65534)
        os.setuid(65534)
    try:
        work = [py, "-c", "import time\nt = time.time() + 1\nwhile time.time() < t: pass"]
        q = subprocess.run([r.record, "-f", "-o", os.path.join(out, "a.db"), "--bpf", "--"] +
                           work, stderr=subprocess.PIPE, universal_newlines=True, timeout=60,
                           preexec_fn=drop)
        r.check("%s bpf: --bpf without privileges: exit 6, says to grant CAP_BPF" % label,
                q.returncode == 6 and "CAP_BPF" in q.stderr, "rc %d %s" % (q.returncode, q.stderr))
        auto = os.path.join(out, "b.db")
        q = subprocess.run([r.record, "-f", "-o", auto, "--bpf=auto", "--"] + work,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=60,
                           preexec_fn=drop)
        meta = r.info(auto)["meta"] if q.returncode == 0 else {}
        r.check("%s bpf: --bpf=auto without privileges records from user space and says why"
                % label, q.returncode == 0 and "sampling from user space" in q.stderr and
                meta.get("mode") == "nonblocking" and "CAP_BPF" in meta.get("bpf", ""),
                "rc %d %s %s" % (q.returncode, q.stderr, meta.get("bpf")))
    finally:
        shutil.rmtree(out, ignore_errors=True)



def bpf_thread_maps():
    """Ids of the BPF hash maps named threads (--bpf's table of threads), or None
    without bpftool."""
    if not shutil.which("bpftool"):
        return None
    out = subprocess.run(["bpftool", "-j", "map", "show"], stdout=subprocess.PIPE,
                         universal_newlines=True, timeout=30).stdout
    return set(m["id"] for m in json.loads(out or "[]") if m.get("name") == "threads")


def bpf_map_tids(map_id):
    """The keys (thread ids) of --bpf's table of threads `map_id`."""
    out = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(map_id)],
                         stdout=subprocess.PIPE, universal_newlines=True, timeout=30).stdout
    return set(int.from_bytes(bytes(int(b, 16) for b in e["key"]), "little")
               for e in json.loads(out or "[]"))


BPF_WORKER = r"""
import sys, threading, time
secs = float(sys.argv[1])
ts = [threading.Thread(target=time.sleep, args=(secs,)) for _ in range(2)]
for t in ts:
    t.start()
time.sleep(secs)
for t in ts:
    t.join()
"""


def test_bpf_forgets_threads(r, label, py, mode):
    """--bpf --match over workers that come and go: the kernel's table of threads
    holds a live worker's threads and forgets them when it ends (it kept every
    thread of every process, until new threads went unsampled)."""
    if mode != "bpf" or not label.startswith("3.12"):
        return
    before = bpf_thread_maps()
    if before is None:
        r.skipped += 1
        print("skip %s bpf forgets threads: bpftool not installed" % label)
        return
    d = tempfile.mkdtemp(prefix="pyflame-bpfgone-", dir=r.tmp)
    tag = "bpfgone%d" % os.getpid()
    app = os.path.join(d, tag + ".py")
    with open(app, "w") as f:
        f.write(BPF_WORKER)
    db = os.path.join(d, "gone.db")
    rec = subprocess.Popen([r.record, "-q", "-f", "--bpf", "--match", tag, "-o", db],
                           stderr=subprocess.PIPE, universal_newlines=True)
    live = None
    try:
        live = subprocess.Popen([py, app, "60"])
        # The recorder's table: a new one holding the live worker's threads (its
        # main thread's id is its pid) once the recorder has found it.
        map_id, seen = None, set()
        deadline = time.time() + 20
        while len(seen) < 3 and time.time() < deadline and rec.poll() is None:
            time.sleep(0.2)
            for i in bpf_thread_maps() - before:
                tids = bpf_map_tids(i)
                if live.pid in tids:
                    map_id, seen = i, tids
        if not r.check("%s bpf forgets threads: a live worker's 3 threads in the table" % label,
                       len(seen) >= 3, "table %s: %s" % (map_id, sorted(seen))):
            return
        live.kill()
        live.wait()
        for _ in range(6):
            subprocess.run([py, app, "0.7"], timeout=60)
        left = None
        deadline = time.time() + 10
        while left != set() and time.time() < deadline:
            time.sleep(0.5)
            left = bpf_map_tids(map_id)
        r.check("%s bpf forgets threads: none left once its 7 workers ended" % label,
                left == set(), "threads left: %s" % sorted(left))
    finally:
        if live and live.poll() is None:
            live.kill()
            live.wait()
        rec.send_signal(signal.SIGINT)
        try:
            _, err = rec.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            rec.kill()
            _, err = rec.communicate()
    r.check("%s bpf forgets threads: recorder exits 0" % label, rec.returncode == 0, err)
    procs = r.info(db)["processes"] if rec.returncode == 0 else []
    r.check("%s bpf forgets threads: the workers recorded" % label, len(procs) >= 4,
            "%d processes" % len(procs))


TESTS = [test_hot, test_ratio, test_imports, test_threads, test_thread_spawn, test_threads_proc_state, test_generators, test_exit_status, test_attach,
         test_subprocesses, test_subprocess_churn, test_container, test_signals, test_dump, test_dump_consistent,
         test_cli, test_accuracy, test_hold_over, test_hold_over_two, test_bpf,
         test_bpf_forgets_threads]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--only", help="run only interpreters whose label contains this")
    ap.add_argument("--mode", choices=["nonblocking", "blocking", "bpf"])
    ap.add_argument("--test", help="run only tests whose name contains this")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    r = Runner(args)
    interps = [i for i in interpreters() if not args.only or args.only in i[0]]
    if not interps:
        # Nothing was tested: a skip (77 to meson), never a pass.
        print("SKIP: no interpreter found%s" % (" matching %s" % args.only if args.only else ""))
        return 77
    print("interpreters: %s" % ", ".join(l for l, _ in interps))
    modes = [args.mode] if args.mode else ["nonblocking", "blocking", "bpf"]
    if "bpf" in modes:
        ok, why = bpf_works(r, interps[0][1])
        # Where CI runs (as root) it must work; elsewhere its absence is a skip.
        if not ok and (args.mode == "bpf" or (os.environ.get("CI") and os.geteuid() == 0)):
            r.check("pyflame-record --bpf works here", False, why)
        if not ok:
            print("SKIP: mode bpf: %s" % why)
            r.skipped += 1
            modes.remove("bpf")
    took = {}  # seconds per test, all interpreters and modes: CI's budget
    try:
        for label, py in interps:
            for mode in modes:
                for t in TESTS:
                    if args.test and args.test not in t.__name__:
                        continue
                    t0 = time.monotonic()
                    try:
                        t(r, label, py, mode)
                    except Exception as e:  # a crash of one check must not hide others
                        r.check("%s %s %s" % (label, mode, t.__name__), False, repr(e))
                    took[t.__name__] = took.get(t.__name__, 0.0) + time.monotonic() - t0
    finally:
        if r.failed == 0:
            shutil.rmtree(r.tmp, ignore_errors=True)
        else:
            print("traces kept in %s" % r.tmp)
    print("seconds per test: " + ", ".join("%s %.0f" % (n[5:], s) for n, s in
                                             sorted(took.items(), key=lambda x: -x[1])))
    print("%d passed, %d failed, %d skipped" % (r.passed, r.failed, r.skipped))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
