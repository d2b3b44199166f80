#!/usr/bin/env python3
"""End-to-end test of scripts/ci-compare.sh, the CI regression gate that the
workflows in examples/ci/ call.

It builds a git repository with a small CPU-bound benchmark in three
commits: A; B, A with a comment changed; C, A with one function (compute)
given three times the work. Then:

1. A vs B, seven runs a side: the gate passes (status 0), the comment and
   both merged traces of seven recordings each are in the output directory;
   --setup ran once in each side's tree.
2. A vs C: the gate fails with status 1, and compute, the slowed function,
   is what tripped it (gate.txt) and what the comment names; compute is one
   row on both sides (both sides ran from the same path), not "new".
3. A checked out with C's changes uncommitted: they are the change, and
   compute trips the gate.
4. Errors that need no recording: a base that does not exist and a missing
   tool are usage errors (2), a benchmark that fails is status 3.

Why it does not flap. The gate compares shares of samples, not times, so a
busy machine slows both sides alike; the runs of the two sides alternate;
each side is seven merged runs, so the diff sees the variation between runs
(README, "Runs differ by more than their samples"). Seven, not three: with
three runs a side the variation between runs has so few degrees of freedom
that compute going from 22% to 50% in every run was not significant in 1
comparison of 3 (adjusted p 0.012); with five, it ranged from 4e-43 to
3.7e-4 in 10 comparisons, only 27 times under the 0.01 it must stay below;
with seven, 2e-7 or less. The rules leave a wide margin both ways: compute
goes from 25% to 50% of the samples (+25 pp, +100%), the rules trip at
+10 pp or +50%, and the README measures real identical pairs moving by 3-4
pp at most. The benchmark calls its functions in a pseudo-random order, as
tests/diff/workloads/bench.py does and for the same reason (a fixed order
is seen stroboscopically by the sampler).

Usage: test_ci_compare.py --script PATH --record PATH --report PATH --diff PATH
Exits 77 (skipped) when git is missing or the recorder cannot record here.
About 80 s.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

PYTHON = "/usr/bin/python3"
RULES = ["--fail-on", "self:+10pp", "--fail-on", "total:+50%"]

BENCH = '''"""A benchmark: four functions called for 1.5 s in a pseudo-random order."""
import time

# %(comment)s


def parse(n):
    s = 0
    for i in range(n):
        s += i & 7
    return s


def compute(n):
    s = 0
    for i in range(n * %(factor)d):
        s += i & 7
    return s


def render(n):
    s = 0
    for i in range(n):
        s += i & 7
    return s


def query(n):
    s = 0
    for i in range(n):
        s += i & 7
    return s


def main():
    work = {parse: 150, compute: 150, render: 150, query: 150}
    table = [(f, int(n * k)) for f, n in work.items() for k in (0.5, 0.8, 1.2, 1.5)]
    x = 12345
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        for _ in range(200):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
            f, n = table[x >> 27]
            f(n)


main()
'''


class Runner:
    def __init__(self, args):
        self.args = args
        self.tmp = tempfile.mkdtemp(prefix="pyflame-ci-test-")
        self.repo = os.path.join(self.tmp, "repo")
        self.passed = self.failed = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print("ok   %s" % name)
        else:
            self.failed += 1
            print("FAIL %s %s" % (name, detail))
        sys.stdout.flush()
        return ok

    def git(self, *args):
        env = dict(os.environ, GIT_AUTHOR_NAME="test", GIT_AUTHOR_EMAIL="test@example.com",
                   GIT_COMMITTER_NAME="test", GIT_COMMITTER_EMAIL="test@example.com")
        return subprocess.run(["git", "-C", self.repo] + list(args), env=env, check=True,
                              stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()

    def commit(self, tag, comment, factor):
        with open(os.path.join(self.repo, "bench.py"), "w") as f:
            f.write(BENCH % {"comment": comment, "factor": factor})
        self.git("add", "bench.py")
        self.git("commit", "-q", "-m", tag)
        self.git("tag", tag)

    def make_repo(self):
        os.mkdir(self.repo)
        self.git("init", "-q")
        self.commit("A", "The benchmark.", 1)
        self.commit("B", "The benchmark, unchanged in behaviour.", 1)
        self.git("checkout", "-q", "A")
        self.commit("C", "The benchmark, with compute three times slower.", 3)

    def compare(self, base, new, out, *extra, command=None, tools=True, env=None,
                checkout=True):
        """Check out NEW and run ci-compare.sh against BASE; its status, stdout
        and stderr."""
        if checkout:
            self.git("checkout", "-q", new)
        args = ["bash", self.args.script, "--base", base, "--out", out, "--runs", "7",
                "--rate", "200"] + list(extra)
        if tools:
            args += ["--record", self.args.record, "--report", self.args.report,
                     "--diff", self.args.diff]
        args += ["--"] + (command or [PYTHON, "bench.py"])
        start = time.monotonic()
        p = subprocess.run(args, cwd=self.repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=300, env=env)
        print("%s vs %s: status %d in %.0f s" % (base, new, p.returncode,
                                                 time.monotonic() - start))
        return p.returncode, p.stdout, p.stderr


def read(path):
    """PATH's text, or "" when there is no such file."""
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def recordings(r, trace):
    """The number of recordings merged into TRACE, from pyflame-report info."""
    p = subprocess.run([r.args.report, "info", "--format", "json", trace],
                       stdout=subprocess.PIPE, universal_newlines=True, check=True)
    return len(json.loads(p.stdout).get("recordings", []))


def test_same(r):
    out = os.path.join(r.tmp, "out-ab")
    rc, stdout, err = r.compare("A", "B", out, "--setup",
                                'test -f bench.py && echo "$PYFLAME_CI_SIDE set up"', *RULES)
    r.check("A vs B: the gate passes (status 0)", rc == 0, "status %d\n%s\n%s" % (rc, err, stdout))
    files = ("base.db", "new.db", "comment.md", "gate.txt")
    r.check("A vs B: artifacts %s" % ", ".join(files),
            all(os.path.isfile(os.path.join(out, f)) for f in files), str(os.listdir(out)))
    comment = read(os.path.join(out, "comment.md"))
    r.check("A vs B: --setup ran once in each side's tree",
            [read(os.path.join(out, "logs", "setup-%s.log" % s)) for s in ("base", "new")]
            == ["base set up\n", "new set up\n"], str(os.listdir(os.path.join(out, "logs"))))
    r.check("A vs B: the comment says the gate passed", "gate passed" in comment, comment)
    r.check("A vs B: the comment is what the script printed", comment == stdout)
    n = [recordings(r, os.path.join(out, s + ".db")) for s in ("base", "new")]
    r.check("A vs B: each side merges seven runs", n == [7, 7], str(n))
    r.check("A vs B: no run's trace is left (no --keep-runs)",
            not [f for f in os.listdir(os.path.join(out, "runs"))], "")
    r.check("A vs B: the temporary worktree is gone",
            len(r.git("worktree", "list").splitlines()) == 1, r.git("worktree", "list"))
    print(comment)


def test_slower(r):
    out = os.path.join(r.tmp, "out-ac")
    rc, stdout, err = r.compare("A", "C", out, *RULES)
    r.check("A vs C: the gate fails with status 1", rc == 1, "status %d\n%s" % (rc, err))
    gate = read(os.path.join(out, "gate.txt"))
    print(gate)
    trips = [line for line in gate.splitlines() if "tripped by" in line]
    r.check("A vs C: compute, and only compute, trips the gate",
            trips and all("tripped by compute " in line for line in trips), gate)
    comment = read(os.path.join(out, "comment.md"))
    r.check("A vs C: the comment says the gate failed and names compute",
            "gate failed" in comment.lower() and "`compute`" in comment, comment)
    # Both sides ran from one path: compute is the same row on both sides,
    # not a row that is "new" in C (and gone from A).
    base_share = re.search(r"gate self:\S+ tripped by compute .*: self ([\d.]+)% ->", gate)
    r.check("A vs C: compute is one row on both sides (about 25% of the base), not new",
            base_share and float(base_share.group(1)) > 10, gate)
    print(comment)


def test_uncommitted(r):
    """The change is the checkout, uncommitted changes included: A checked
    out with C's bench.py written over it, nothing committed."""
    r.git("checkout", "-q", "A")
    slow = r.git("show", "C:bench.py")
    with open(os.path.join(r.repo, "bench.py"), "w") as f:
        f.write(slow + "\n")
    out = os.path.join(r.tmp, "out-dirty")
    try:
        rc, _, err = r.compare("A", "HEAD", out, *RULES, checkout=False)
    finally:
        r.git("checkout", "-q", "--", "bench.py")
    comment = read(os.path.join(out, "comment.md"))
    gate = read(os.path.join(out, "gate.txt"))
    r.check("uncommitted changes are the change: compute trips the gate",
            rc == 1 and "tripped by compute " in gate,
            "status %d: %s\n%s" % (rc, err, comment))


def test_errors(r):
    out = os.path.join(r.tmp, "out-err")
    rc, _, err = r.compare("no-such-ref", "B", out)
    r.check("a base that does not exist: status 2, saying to fetch it",
            rc == 2 and "fetch" in err, "status %d: %s" % (rc, err))
    rc, _, err = r.compare("A", "B", out, command=[PYTHON, "-c", "raise SystemExit(5)"])
    r.check("a benchmark that fails: status 3, naming the side and the log",
            rc == 3 and "base side" in err and "logs/base-1.log" in err,
            "status %d: %s" % (rc, err))
    path = "/usr/bin:/bin"
    if not shutil.which("pyflame-record", path=path):
        env = dict(os.environ, PATH=path)
        env.pop("PYFLAME_RECORD", None)
        rc, _, err = r.compare("A", "B", out, tools=False, env=env)
        r.check("pyflame-record not on PATH: status 2, saying how to fix it",
                rc == 2 and "--record PATH" in err, "status %d: %s" % (rc, err))


def main():
    ap = argparse.ArgumentParser()
    for opt in ("--script", "--record", "--report", "--diff"):
        ap.add_argument(opt, required=True)
    args = ap.parse_args()
    for k in ("script", "record", "report", "diff"):
        setattr(args, k, os.path.abspath(getattr(args, k)))
    if not shutil.which("git"):
        print("SKIP: git is not installed")
        return 77
    r = Runner(args)
    try:
        probe = os.path.join(r.tmp, "probe.db")
        # (A program that exits at once may be gone before the recorder
        # looks at it, and is then refused as "not CPython".)
        p = subprocess.run([args.record, "-q", "-o", probe, "--", PYTHON, "-c",
                            "import time; time.sleep(0.5)"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        if p.returncode != 0:
            print("SKIP: cannot record here: %s" % p.stderr.strip())
            return 77
        r.make_repo()
        test_errors(r)
        test_same(r)
        test_slower(r)
        test_uncommitted(r)
    finally:
        shutil.rmtree(r.tmp, ignore_errors=True)
    print("%d passed, %d failed" % (r.passed, r.failed))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
