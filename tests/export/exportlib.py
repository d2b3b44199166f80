"""exportlib.py - what the export checks share.

Runs `export-test --write DIR` (which builds the fixtures through libtrace's
writer and exports each in every format, see test_export.c), loads the list
of cases and each case's expectations (every selected sample with its
root-first labels, written by the test independently of the exporters), and
derives from them what each format should show: folded counts, per-thread
sample sequences, flame-graph nodes, hotspot rows.

Also: skipping a test whose consumer is not installed (exit 77, which meson
reports as SKIP) except in CI (CI=true), where it fails; and a tiny
"N passed, N failed" tally.
"""

import collections
import json
import os
import shutil
import subprocess
import sys

SKIP = 77
EMPTY_LABEL = "<no Python frame>"


def in_ci():
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(what, how):
    """A consumer is not installed: skip here, fail in CI."""
    msg = f"{what} is not installed; {how} (or run tests/export/setup-consumers.sh)"
    if in_ci():
        print(f"FAIL: {msg}", file=sys.stderr)
        sys.exit(1)
    print(f"SKIP: {msg}")
    sys.exit(SKIP)


def write_exports(export_test, workdir):
    """Fresh workdir with every case exported; returns the parsed cases.json."""
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    subprocess.run([export_test, "--write", workdir], check=True)
    with open(os.path.join(workdir, "cases.json"), encoding="utf-8") as f:
        cases = json.load(f)
    for c in cases:
        c["path"] = os.path.join(workdir, c["file"])
        with open(os.path.join(workdir, c["expected"]), encoding="utf-8") as f:
            c["exp"] = json.load(f)
    return cases


class Tally:
    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failed = 0

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL: {what}", file=sys.stderr)
        return ok

    def equal(self, got, want, what):
        ok = got == want
        if not ok:
            print(f"FAIL: {what}\n  got:  {got!r}\n  want: {want!r}", file=sys.stderr)
            self.failed += 1
        else:
            self.passed += 1
        return ok

    def finish(self):
        print(f"{self.name}: {self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)


# ---- what the expectations imply ----

def folded(exp, thread=None):
    """Counter of root-first label tuples (of one thread index when given)."""
    c = collections.Counter()
    for s in exp["samples"]:
        if thread is None or s["thread"] == thread:
            c[tuple(s["stack"])] += 1
    return c


def threads_with_samples(exp):
    """Thread indexes with samples, in the fixture's order."""
    seen = {s["thread"] for s in exp["samples"]}
    return [i for i in range(len(exp["threads"])) if i in seen]


def thread_runs(exp, thread):
    """The thread's samples in time order, consecutive equal stacks merged: [(stack, count)]."""
    runs = []
    for s in sorted((s for s in exp["samples"] if s["thread"] == thread), key=lambda s: s["t_ns"]):
        st = tuple(s["stack"])
        if runs and runs[-1][0] == st:
            runs[-1][1] += 1
        else:
            runs.append([st, 1])
    return [(st, n) for st, n in runs]


def flame_nodes(exp):
    """{(depth, x, n, name)} of the merged flame graph, root ("all") included."""
    counts = collections.Counter()
    for s in exp["samples"]:
        st = tuple(s["stack"])
        for d in range(1, len(st) + 1):
            counts[st[:d]] += 1
    total = len(exp["samples"])
    children = collections.defaultdict(list)
    for p in counts:
        children[p[:-1]].append(p)
    nodes = set()
    if total:
        nodes.add((0, 0, total, "all"))
    # Children ordered by label, bytewise (code point order is the same for UTF-8).
    todo = [((), 0)]
    while todo:
        p, x = todo.pop()
        for c in sorted(children[p], key=lambda c: c[-1].encode("utf-8")):
            nodes.add((len(c), x, counts[c], c[-1]))
            todo.append((c, x))
            x += counts[c]
    return nodes


def split_label(label):
    """"name (file:line)" -> (name, file, line); "name (file)" -> line None; "name" -> file ""."""
    if label.endswith(")") and " (" in label:
        name, loc = label[:-1].rsplit(" (", 1)
        file, _, line = loc.rpartition(":")
        if file and line.isdigit():
            return name, file, int(line)
        return name, loc, None
    return label, "", None


def hot_rows(exp, by_line):
    """{identity: [self, total]} as the html tables count them (once per sample)."""
    rows = collections.defaultdict(lambda: [0, 0])
    for s in exp["samples"]:
        if s["stack"] == [EMPTY_LABEL]:
            continue
        keys = []
        for label, first in zip(s["stack"], s["first_lines"]):
            name, file, line = split_label(label)
            keys.append((file, line) if by_line else (name, file, first))
        rows[keys[-1]][0] += 1
        for k in set(keys):
            rows[k][1] += 1
    return rows
