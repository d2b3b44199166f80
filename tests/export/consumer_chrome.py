#!/usr/bin/env python3
"""consumer_chrome.py - real Chrome trace engines read our chrome exports
(suite 'consumers').

  devtools    the trace engine of the Chrome DevTools Performance panel (npm
              @paulirish/trace_engine, pinned; chrome_devtools.mjs runs it in
              node) parses every chrome export: no error or warning, a
              generic (non-Chrome) trace, one track per thread with samples
              named as the fixture's threads, every process named; every
              slice of a thread fits in the engine's tree (none dropped as
              badly nested), each sample's stack is the chain of tree nodes
              covering its time, self time per frame is the fixture's samples
              with that frame on top times the 10 ms period, and each
              thread's top level covers its samples times the period.
  speedscope  the real speedscope (npm, pinned) in headless Chromium imports
              every chrome export with its Trace Event Format importer
              (chrome_speedscope.mjs drives it): no error, no warning about
              slices that do not nest, no network request; one profile per
              thread with the thread's total; in the Sandwich view every
              frame's total and self time as the fixture counts them; and the
              profiles speedscope saves (its Export: every frame's open and
              close time, what its Time Order view draws) replay each
              sample's stack at its time. The empty export is reported empty.

Both also get corrupted copies of the basic export (a callee before its
caller, a callee outliving its caller, a slice starting a period late, times
in the wrong unit) and must reject each: the checks are shown to catch them.

Needs node and the npm packages of tests/export/package-lock.json; speedscope
also Chromium (/usr/bin/chromium, or $CHROMIUM). Installed by
tests/export/setup-consumers.sh.

Usage: consumer_chrome.py devtools|speedscope EXPORT-TEST WORKDIR SCRIPT.mjs
"""

import collections
import contextlib
import copy
import io
import json
import os
import re
import shutil
import subprocess
import sys

import exportlib
from exportlib import Tally

UNITS = {"ns": 1, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9, "min": 60e9}


def find_tools(mode, script):
    here = os.path.dirname(os.path.realpath(script))
    node = shutil.which("node")
    if not node:
        exportlib.missing("node", "apt-get install nodejs npm")
    chromium = None
    pkgs = ["@paulirish/trace_engine"] if mode == "devtools" else ["playwright-core", "speedscope"]
    if mode == "speedscope":
        chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
        if not os.access(chromium, os.X_OK):
            exportlib.missing("Chromium", "apt-get install chromium")
    for pkg in pkgs:
        if not os.path.isfile(os.path.join(here, "node_modules", pkg, "package.json")):
            exportlib.missing(f"the npm package {pkg}", f"run `npm ci` in {here}")
    return node, chromium


def run_node(node, script, args):
    r = subprocess.run([node, script, *args], capture_output=True, text=True, timeout=240,
                       cwd=os.path.dirname(os.path.realpath(script)))
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"FAIL: {os.path.basename(script)} exited with {r.returncode}")
    return json.loads(r.stdout)


class Quiet(Tally):
    """A tally that keeps its failures instead of printing them (for the mutants)."""

    def __init__(self, name):
        super().__init__(name)
        self.failures = []

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            self.failures.append(what)
        return ok

    def equal(self, got, want, what):
        return self.check(got == want, what)


# ---- what the fixture says ----

def ns(us):
    """A trace time in microseconds (as the consumers keep it) to whole nanoseconds."""
    return round(us * 1000)


def parse_time(text):
    """speedscope's "450.00ms" -> 450000000.0 (nanoseconds); NaN for anything else
    (such as its "12:30" for minutes, which no time here comes near)."""
    m = re.match(r"([\d.]+)\s*(ns|µs|us|ms|s|min)\b", text)
    return float(m.group(1)) * UNITS[m.group(2)] if m else float("nan")


def close(a, b):
    return abs(a - b) <= max(0.006 * b, 1e4)


class Thread:
    """One thread with samples: its key, names, samples in time order, frame times."""

    def __init__(self, exp, i):
        th = exp["threads"][i]
        self.key = (th["pid"], th["tid"])
        self.name = th["name"] or f"thread {th['tid']}"
        self.samples = sorted((s for s in exp["samples"] if s["thread"] == i),
                              key=lambda s: s["t_ns"])
        period = exp["period_ns"]
        self.total = len(self.samples) * period
        self.first = self.samples[0]["t_ns"]
        self.end = self.samples[-1]["t_ns"] + period
        self.self_ns = collections.Counter()
        self.total_ns = collections.Counter()
        for s in self.samples:
            self.self_ns[s["stack"][-1]] += period
            for label in set(s["stack"]):
                self.total_ns[label] += period


def fixture_threads(exp):
    return [Thread(exp, i) for i in exportlib.threads_with_samples(exp)]


def x_events(path):
    """{(pid, tid): number of "X" events} of the file as written."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return collections.Counter((e["pid"], e["tid"]) for e in events if e.get("ph") == "X")


# ---- the DevTools trace engine ----

def tree_chain(roots, t_ns):
    chain, level = [], roots
    while True:
        hit = [n for n in level if ns(n["ts"]) <= t_ns < ns(n["ts"]) + ns(n["dur"])]
        if len(hit) != 1:
            return chain if not hit else chain + ["<overlapping slices>"]
        chain.append(hit[0]["name"])
        level = hit[0]["children"]


def tree_self(roots, acc):
    for n in roots:
        acc[n["name"]] += ns(n["self"]) if n["self"] is not None else 0
        tree_self(n["children"], acc)
    return acc


def check_devtools(t, c, got):
    name, exp = c["name"], c["exp"]
    if not t.check(got is not None, f"{name}: parsed"):
        return
    if not t.equal(got["error"], None, f"{name}: the engine parses it"):
        return
    t.check(got["generic"], f"{name}: taken as a generic (non-Chrome) trace")
    t.equal(got["warnings"], [], f"{name}: no engine warning")
    threads = fixture_threads(exp)
    seen = {(p["pid"], th["tid"]): th for p in got["processes"] for th in p["threads"]}
    t.equal(sorted(seen), sorted(th.key for th in threads), f"{name}: one track per thread with samples")
    for pid in sorted({th.key[0] for th in threads}):
        pname = got["processNames"].get(str(pid))
        t.check(bool(pname) and pname.endswith(f"(pid {pid})"), f"{name}: process {pid} named ({pname!r})")
    xs = x_events(c["path"])
    period = exp["period_ns"]
    for th in threads:
        g = seen.get(th.key)
        if not t.check(g is not None, f"{name}: track {th.key}"):
            continue
        t.equal(g["name"], th.name, f"{name}: name of {th.key}")
        t.equal((g["entries"], g["inTree"]), (xs[th.key], xs[th.key]),
                f"{name}: every slice of {th.key} in the engine's tree")
        bad = [(s["t_ns"], tree_chain(g["roots"], s["t_ns"]), s["stack"]) for s in th.samples
               if tree_chain(g["roots"], s["t_ns"]) != s["stack"]]
        for b in bad[:3]:
            print(f"  {name}: {th.key} at {b[0]} ns: engine {b[1]} != {b[2]}", file=sys.stderr)
        t.equal(len(bad), 0, f"{name}: each sample of {th.key} is the engine's chain of slices at its time")
        have = {k: v for k, v in tree_self(g["roots"], collections.Counter()).items() if v}
        t.equal(have, dict(th.self_ns), f"{name}: self time per frame on {th.key}")
        top = sum(ns(n["dur"]) for n in g["roots"])
        t.equal(top, th.total, f"{name}: top-level time of {th.key} ({len(th.samples)} x {period} ns)")


# ---- speedscope ----

def replay(profile, frames, th):
    """Samples of `th` whose stack differs from the open frames of speedscope's
    evented profile at the sample's time (relative to the thread's first slice)."""
    events = profile["events"]
    stack, i, bad = [], 0, []
    for s in th.samples:
        at = s["t_ns"] - th.first
        while i < len(events) and ns(events[i]["at"]) <= at:
            e = events[i]
            if e["type"] == "O":
                stack.append(e["frame"])
            elif stack and stack[-1] == e["frame"]:
                stack.pop()
            else:
                bad.append((ns(e["at"]), f"closes {frames[e['frame']]} not on top"))
            i += 1
        have = [frames[f] for f in stack]
        if have != s["stack"]:
            bad.append((s["t_ns"], have, s["stack"]))
    for e in events[i:]:
        if e["type"] == "O":
            stack.append(e["frame"])
        elif stack and stack[-1] == e["frame"]:
            stack.pop()
    if stack:
        bad.append(("end", [frames[f] for f in stack], []))
    return bad


def profile_title(th, list_name):
    """speedscope names a thread's profile "PROCESS (pid P), THREAD (tid T)"."""
    pid, tid = th.key
    return re.fullmatch(rf".+ \(pid {pid}\), {re.escape(th.name)} \(tid {tid}\)", list_name or "")


def check_speedscope(t, c, got):
    name, exp = c["name"], c["exp"]
    if not t.check(got is not None, f"{name}: handed to speedscope"):
        return
    t.check("log: Importing as Trace Event Format profile" in got["log"],
            f"{name}: imported as Trace Event Format ({[l for l in got['log'] if 'Import' in l]})")
    t.equal(got["errors"], [], f"{name}: no page error")
    t.equal(got["requests"], [], f"{name}: no network request")
    warnings = [l for l in got["log"] if l.startswith(("warning:", "error:")) and "WebGL" not in l]
    t.equal(warnings, [], f"{name}: no import warning")
    threads = fixture_threads(exp)
    if not threads:
        t.equal(got["dialogs"], ["Successfully imported profile, but it's empty!"], f"{name}: reported empty")
        return
    t.equal(got["dialogs"], [], f"{name}: no alert")
    if not t.check(got["loaded"], f"{name}: loaded ({got.get('wait')})"):
        return
    t.equal(got["title"], f"{c['load_as']} - speedscope", f"{name}: title")
    period = exp["period_ns"]
    if len(threads) > 1:
        t.equal(len(got["list"]), len(threads), f"{name}: one profile per thread listed")
        for th, row in zip(threads, got["list"]):
            t.check(profile_title(th, row["name"]), f"{name}: profile {row['name']!r} is {th.key} {th.name}")
            t.check(close(parse_time(row["total"]), th.total),
                    f"{name}: total of {th.key}: {row['total']} vs {th.total} ns")
    t.equal(len(got["profiles"]), len(threads), f"{name}: profiles visited")
    for th, p in zip(threads, got["profiles"]):
        if len(threads) > 1:
            t.check(p["shown"] and profile_title(th, p["shown"].rsplit(" (", 1)[0]),
                    f"{name}: showing {th.key} (got {p['shown']!r})")
        rows = {}
        for r in p["rows"]:
            rows[r["name"]] = (parse_time(r["total"]), parse_time(r["self"]))
        ok = len(rows) == len(p["rows"]) and set(rows) == set(th.total_ns)
        for label, (tot, slf) in rows.items():
            if not (close(tot, th.total_ns.get(label, -1e12)) and close(slf, th.self_ns.get(label, 0))):
                ok = False
                print(f"  {name}: {th.key} sandwich {label}: {tot}/{slf} ns, want "
                      f"{th.total_ns.get(label)}/{th.self_ns.get(label, 0)}", file=sys.stderr)
        t.check(ok, f"{name}: Sandwich of {th.key} ({len(p['rows'])} rows, want {len(th.total_ns)})")
    # What speedscope saves: its own model of every thread, slice by slice.
    saved = got["exported"]
    frames = [f["name"] for f in saved["shared"]["frames"]]
    by_thread = {}
    for prof in saved["profiles"]:
        for th in threads:
            if len(threads) == 1 or profile_title(th, prof["name"]):
                by_thread[th.key] = prof
    for th in threads:
        prof = by_thread.get(th.key)
        if not t.check(prof is not None, f"{name}: saved profile of {th.key}"):
            continue
        t.equal((prof["type"], prof["unit"]), ("evented", "microseconds"), f"{name}: saved as evented")
        t.equal(ns(prof["endValue"] - prof["startValue"]), th.end - th.first,
                f"{name}: time span of {th.key}")
        bad = replay(prof, frames, th)
        for b in bad[:3]:
            print(f"  {name}: {th.key} at {b[0]}: speedscope {b[1]} != {b[2:]}", file=sys.stderr)
        t.equal(len(bad), 0, f"{name}: each sample of {th.key} is speedscope's stack at its time")


# ---- corrupted copies: the checks must reject them ----

def contains(p, e):
    return p is not e and p["ts"] <= e["ts"] and e["ts"] + e["dur"] <= p["ts"] + p["dur"]


def mutate(doc, kind, period_us):
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    track = collections.defaultdict(list)
    for e in xs:
        track[(e["pid"], e["tid"])].append(e)
    if kind == "callee-first":  # equal start and length: the callee written before its caller
        for evs in track.values():
            for a in evs:
                for b in evs:
                    if a is not b and a["name"] != b["name"] and (a["ts"], a["dur"]) == (b["ts"], b["dur"]):
                        ia, ib = doc["traceEvents"].index(a), doc["traceEvents"].index(b)
                        doc["traceEvents"][ia], doc["traceEvents"][ib] = b, a
                        return doc
    elif kind == "callee-outlives-caller":
        for evs in track.values():
            for e in evs:
                parents = [p for p in evs if contains(p, e) and p["ts"] < e["ts"]]
                if parents:
                    p = max(parents, key=lambda p: p["ts"])
                    e["dur"] = p["ts"] + p["dur"] + period_us - e["ts"]
                    return doc
    elif kind == "late-start":  # a top-level leaf slice starts a period late
        for evs in track.values():
            for e in evs:
                if (e["dur"] > period_us and not any(contains(p, e) for p in evs)
                        and not any(contains(e, k) for k in evs)):
                    e["ts"] += period_us
                    e["dur"] -= period_us
                    return doc
    elif kind == "nanoseconds":  # times written in the wrong unit
        for e in xs:
            e["ts"] *= 1000
            e["dur"] *= 1000
        return doc
    raise SystemExit(f"FAIL: cannot make the {kind} mutant of the basic export")


MUTANTS = ("callee-first", "callee-outlives-caller", "late-start", "nanoseconds")


def mutants(cases, workdir):
    base = next(c for c in cases if c["name"] == "basic")
    with open(base["path"], encoding="utf-8") as f:
        doc = json.load(f)
    out = []
    for kind in MUTANTS:
        path = os.path.join(workdir, f"mutant-{kind}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(mutate(copy.deepcopy(doc), kind, base["exp"]["period_ns"] / 1000), f)
        out.append(dict(base, name=f"mutant-{kind}", path=path, load_as=f"mutant-{kind}.json"))
    return out


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("devtools", "speedscope"):
        sys.exit("usage: consumer_chrome.py devtools|speedscope EXPORT-TEST WORKDIR SCRIPT.mjs")
    mode, export_test, workdir, script = sys.argv[1:]
    node, chromium = find_tools(mode, script)
    cases = [c for c in exportlib.write_exports(export_test, workdir) if c["format"] == "chrome"]
    for c in cases:
        # Not *.chrome.json: speedscope takes that name for the DevTools
        # timeline format (CPU profile events) and fails on trace events.
        c["load_as"] = f"{c['name']}-trace.json"
    bad = mutants(cases, workdir)
    plan = [{"name": c["name"], "path": c["path"], "load_as": c["load_as"],
             "empty": not c["exp"]["samples"]} for c in cases + bad]
    plan_path = os.path.join(workdir, "plan.json")
    with open(plan_path, "w", encoding="utf-8") as f:
        json.dump(plan, f)
    artifacts = os.path.join(workdir, "artifacts")
    if mode == "devtools":
        seen, check = run_node(node, script, [plan_path]), check_devtools
    else:
        seen, check = run_node(node, script, [plan_path, artifacts, chromium]), check_speedscope
    t = Tally(f"export-chrome-{mode}")
    for c in cases:
        check(t, c, seen.get(c["name"]))
    for c in bad:
        q = Quiet(c["name"])
        with contextlib.redirect_stderr(io.StringIO()):
            check(q, c, seen.get(c["name"]))
        if t.check(q.failed > 0, f"{c['name']}: rejected"):
            print(f"{c['name']}: rejected by {q.failed} checks: " + "; ".join(q.failures))
    if mode == "speedscope":
        print(f"screenshots: {artifacts}")
    t.finish()


if __name__ == "__main__":
    main()
