#!/usr/bin/env python3
"""consumer_pprof.py - the real pprof reads our pprof exports (suite 'consumers').

For every pprof case of export-test --write, `go tool pprof` (Debian package
golang-go) must:
  -top     agree with the fixture's counts: per function name, flat = samples
           with it on top, cum = samples with it anywhere (once), and the
           header's total;
  -traces  (with -lines) print exactly the fixture's folded stacks;
  -tagfocus select by our sample labels (state, thread, gil);
  -sample_index=cpu total the samples times the 10 ms period.

Usage: consumer_pprof.py EXPORT-TEST WORKDIR
"""

import collections
import os
import re
import shutil
import subprocess
import sys

import exportlib
from exportlib import Tally


def pprof(go, path, *args):
    env = dict(os.environ, PPROF_TMPDIR=os.path.dirname(path), HOME=os.path.dirname(path))
    r = subprocess.run([go, "tool", "pprof", *args, path], capture_output=True, text=True,
                       env=env, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"go tool pprof {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def total_of(out):
    m = re.search(r"Total samples = (\S+)", out)
    return m.group(1) if m else None


def parse_top(out):
    """{name: (flat, cum)} from -top with counts."""
    rows = {}
    started = False
    for line in out.splitlines():
        if re.match(r"\s*flat\s+flat%", line):
            started = True
            continue
        if started and line.strip():
            parts = line.split(None, 5)
            rows[parts[5]] = (int(parts[0]), int(parts[3]))
    return rows


def parse_traces(out):
    """Counter of root-first frame tuples from -traces -lines (values summed)."""
    folded = collections.Counter()
    block = None
    for line in out.splitlines():
        if line.startswith("-----------+"):
            if block and block[1]:
                folded[tuple(reversed(block[1]))] += block[0]
            block = [0, []]
            continue
        if block is None:
            continue
        m = re.match(r"^\s+(\d+)\s{3}(\S.*)$", line)
        if m and not block[1]:
            block[0] = int(m.group(1))
            block[1].append(m.group(2).strip())
        elif block[1] and line.startswith(" " * 13) and line.strip():
            block[1].append(line.strip())
    if block and block[1]:
        folded[tuple(reversed(block[1]))] += block[0]
    return folded


def pprof_frame(label):
    """The folded label as pprof -lines prints the frame: "name file:line"."""
    name, file, line = exportlib.split_label(label)
    if not file:
        return name
    return f"{name} {file}:{line}" if line is not None else f"{name} {file}"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: consumer_pprof.py EXPORT-TEST WORKDIR")
    go = shutil.which("go")
    if not go:
        exportlib.missing("go (for go tool pprof)", "apt-get install golang-go")
    cases = [c for c in exportlib.write_exports(sys.argv[1], sys.argv[2]) if c["format"] == "pprof"]
    t = Tally("export-pprof-go")
    for c in cases:
        exp, name, path = c["exp"], c["name"], c["path"]
        samples = exp["samples"]
        try:
            top = pprof(go, path, "-top", "-sample_index=samples", "-nodecount=100000")
            t.equal(total_of(top), str(len(samples)), f"{name}: -top total samples")
            want = collections.defaultdict(lambda: [0, 0])
            for s in samples:
                names = [exportlib.split_label(l)[0] for l in s["stack"]]
                want[names[-1]][0] += 1
                for n in set(names):
                    want[n][1] += 1
            t.equal(parse_top(top), {k: tuple(v) for k, v in want.items()}, f"{name}: -top flat/cum")

            traces = pprof(go, path, "-traces", "-lines", "-sample_index=samples")
            want_f = collections.Counter()
            for st, n in exportlib.folded(exp).items():
                want_f[tuple(pprof_frame(l) for l in st)] += n
            t.equal(parse_traces(traces), want_f, f"{name}: -traces stacks and counts")

            cpu = pprof(go, path, "-top", "-sample_index=cpu", "-unit=ms")
            want_ms = len(samples) * exp["period_ns"] // 1000000
            t.equal(total_of(cpu), f"{want_ms}ms" if samples else "0", f"{name}: cpu total")

            if samples:
                idle = sum(1 for s in samples if not s["state"] & 1)
                out = pprof(go, path, "-top", "-sample_index=samples", "-tagfocus=state=idle")
                got = re.search(r"Showing nodes accounting for (\d+)", out)
                t.equal(int(got.group(1)) if got else 0, idle, f"{name}: -tagfocus=state=idle")
                workers = [i for i, th in enumerate(exp["threads"]) if th["name"] == "worker"]
                if workers:
                    n = sum(1 for s in samples if s["thread"] == workers[0])
                    out = pprof(go, path, "-top", "-sample_index=samples", "-tagfocus=thread=worker")
                    got = re.search(r"Showing nodes accounting for (\d+)", out)
                    t.equal(int(got.group(1)) if got else 0, n, f"{name}: -tagfocus=thread=worker")
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            t.check(False, f"{name}: {e}")
    t.finish()


if __name__ == "__main__":
    main()
