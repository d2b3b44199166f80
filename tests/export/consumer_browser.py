#!/usr/bin/env python3
"""consumer_browser.py - our exports in headless Chromium (suite 'consumers').

  speedscope  the real speedscope (npm, pinned) loads every speedscope export
              (speedscope.mjs drives it): no error, the file's name, one
              profile per thread with the thread's total weight, and in the
              Sandwich view every frame's total and self time, equal to the
              fixture's samples times the 10 ms period.
  flamegraph  the svg and html flame graphs (flamegraph.mjs drives them):
              hovering shows the frame's samples and %, a click zooms the frame
              to the full width and shows only it, its callers and callees,
              Reset Zoom restores every frame, search (Ctrl-F prompt, Search
              button, the html search box) highlights exactly the matching
              frames and shows the matched share, Escape clears it; no network
              request, no script error. Screenshots are kept in WORKDIR/artifacts.

Needs node, Chromium (/usr/bin/chromium, or $CHROMIUM) and the npm packages
of tests/export/package-lock.json (playwright-core, speedscope), installed by
tests/export/setup-consumers.sh.

Usage: consumer_browser.py speedscope|flamegraph EXPORT-TEST WORKDIR SCRIPT.mjs
"""

import collections
import json
import os
import re
import shutil
import subprocess
import sys

import exportlib
from exportlib import Tally

GRAPH_WIDTH = 1180  # the default 1200 px less two 10 px margins


def find_tools(script):
    node = shutil.which("node")
    if not node:
        exportlib.missing("node", "apt-get install nodejs npm")
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.access(chromium, os.X_OK):
        exportlib.missing("Chromium", "apt-get install chromium")
    modules = os.path.join(os.path.dirname(os.path.realpath(script)), "node_modules")
    for pkg in ("playwright-core", "speedscope"):
        if not os.path.isfile(os.path.join(modules, pkg, "package.json")):
            exportlib.missing(f"the npm package {pkg}",
                              f"run `npm ci` in {os.path.dirname(os.path.realpath(script))}")
    return node, chromium


def run_node(node, script, args):
    r = subprocess.run([node, script, *args], capture_output=True, text=True, timeout=240,
                       cwd=os.path.dirname(os.path.realpath(script)))
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"FAIL: {os.path.basename(script)} exited with {r.returncode}")
    return json.loads(r.stdout)


# ---- speedscope ----

UNITS = {"ns": 1, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9, "min": 60e9}


def parse_time(text):
    """speedscope's "450.00ms (60%)" -> 450000000.0 (nanoseconds)."""
    m = re.match(r"([\d.]+)\s*(ns|µs|us|ms|s|min)\b", text)
    if not m:
        raise ValueError(f"not a time: {text!r}")
    return float(m.group(1)) * UNITS[m.group(2)]


def close(a, b):
    return abs(a - b) <= max(0.006 * b, 1e4)


def thread_title(th):
    tid = f"tid {th['tid']}"
    return f"{th['name']} ({tid}, pid {th['pid']})" if th["name"] else f"{tid} (pid {th['pid']})"


def sandwich(exp, thread):
    """{(name, file): [total, self]} in samples for one thread."""
    rows = collections.defaultdict(lambda: [0, 0])
    for s in exp["samples"]:
        if s["thread"] != thread:
            continue
        keys = []
        for label in s["stack"]:
            name, file, _ = exportlib.split_label(label)
            keys.append((label, name, file))
        rows[keys[-1]][1] += 1
        for k in set(keys):
            rows[k][0] += 1
    return rows


def check_speedscope(t, cases, seen):
    for c in cases:
        exp, name = c["exp"], c["name"]
        got = seen.get(name)
        if not t.check(got is not None, f"{name}: loaded"):
            continue
        t.equal(got["errors"], [], f"{name}: no page error")
        t.equal(got["title"], f"{c['title'] or 'pyflame profile'} - speedscope", f"{name}: title")
        period = exp["period_ns"]
        threads = exportlib.threads_with_samples(exp)
        if len(threads) > 1:
            want = [(thread_title(exp["threads"][i]),
                     sum(1 for s in exp["samples"] if s["thread"] == i) * period) for i in threads]
            have = [(p["name"], parse_time(p["total"])) for p in got["list"]]
            t.equal([n for n, _ in have], [n for n, _ in want], f"{name}: profiles listed")
            t.check(all(close(h, w) for (_, h), (_, w) in zip(have, want)),
                    f"{name}: profile totals {have} vs {want}")
        t.equal(len(got["profiles"]), max(len(threads), 1), f"{name}: profiles visited")
        if not threads:
            t.equal(got["profiles"][0]["rows"], [], f"{name}: empty profile has no frame")
            continue
        for i, p in zip(threads, got["profiles"]):
            th = exp["threads"][i]
            if len(threads) > 1:
                t.check(p["shown"] and p["shown"].startswith(thread_title(th)),
                        f"{name}: showing {thread_title(th)} (got {p['shown']})")
            want = sandwich(exp, i)
            have = collections.Counter()
            ok = True
            for r in p["rows"]:
                tot, slf = parse_time(r["total"]), parse_time(r["self"])
                match = [k for k, v in want.items()
                         if not have[k] and k[1] == r["name"] and k[2] == (r["file"] or "")
                         and close(tot, v[0] * period) and close(slf, v[1] * period)]
                if not match:
                    ok = False
                    print(f"  {name}: unexpected sandwich row {r}", file=sys.stderr)
                else:
                    have[match[0]] += 1
            t.check(ok and len(p["rows"]) == len(want) and all(have[k] == 1 for k in want),
                    f"{name}: sandwich of {thread_title(th)} ({len(p['rows'])} rows, want {len(want)})")


# ---- flame graphs ----

def flame_plan(cases):
    plan = []
    for c in cases:
        if c["format"] not in ("svg", "html") or not c["exp"]["samples"]:
            continue
        # Zoom into the widest frame at depth 2 (a frame with callers and often callees).
        nodes = sorted(exportlib.flame_nodes(c["exp"]), key=lambda n: (n[0] != 2, -n[2], n[1]))
        plan.append({"name": f"{c['name']}-{c['format']}", "path": c["path"], "kind": c["format"],
                     "zoom": nodes[0][3], "node": nodes[0], "exp": c["exp"],
                     "search": ["fib", "compute"] if c["format"] == "svg" else ["fib|odd", "Worker"]})
    return plan


def matched_samples(exp, pattern):
    """Samples with a frame matching the regular expression (what the search should show)."""
    rx = re.compile(pattern)
    return sum(1 for s in exp["samples"] if any(rx.search(l) for l in s["stack"]))


def check_flamegraph(t, plan, seen):
    for p in plan:
        name, exp = p["name"], p["exp"]
        got = seen.get(name)
        if not t.check(got is not None, f"{name}: opened"):
            continue
        t.equal(got["errors"], [], f"{name}: no page error")
        t.equal(got["requests"], [], f"{name}: no network request")
        st = got["steps"]
        total = len(exp["samples"])
        nodes = exportlib.flame_nodes(exp)
        shown = {(f["depth"], f["n"], f["name"]) for f in st["initial"]["shown"]}
        t.equal(shown, {(d, n, nm) for d, x, n, nm in nodes}, f"{name}: every frame shown")
        allw = [f["width"] for f in st["initial"]["shown"] if f["depth"] == 0]
        t.check(allw and abs(allw[0] - GRAPH_WIDTH) < 1, f"{name}: 'all' spans the graph")

        depth, x, n, label = p["node"]
        pct = f"{100 * n / total:.2f}%"
        t.check(label in st["hover"]["details"] and f"{n} samples ({pct})" in st["hover"]["details"],
                f"{name}: hover details {st['hover']['details']!r}")

        z = st["zoomed"]
        t.equal(z["zoom"], label, f"{name}: zoomed on {label}")
        t.check(z["resetShown"], f"{name}: Reset Zoom offered")
        want = {(d, nm) for d, nx, nn, nm in nodes
                if (d < depth and nx <= x and nx + nn >= x + n)
                or (d >= depth and nx >= x and nx + nn <= x + n)}
        t.equal({(f["depth"], f["name"]) for f in z["shown"]}, want,
                f"{name}: only the frame, its callers and its callees remain")
        target = [f for f in z["shown"] if f["depth"] == depth and f["name"] == label]
        t.check(target and abs(target[0]["width"] - GRAPH_WIDTH) < 1 and abs(target[0]["x"] - 10) < 1,
                f"{name}: zoomed frame spans the graph")
        t.check(target and target[0]["text"].startswith(label[:20]) or len(label) > 150,
                f"{name}: zoomed frame's label shown")
        for f in z["shown"]:
            if f["depth"] > depth:
                t.check(abs(f["width"] - GRAPH_WIDTH * f["n"] / n) < 1.5,
                        f"{name}: callee {f['name']} scaled to the zoom")
        r = st["reset"]
        t.equal(len(r["shown"]), len(st["initial"]["shown"]), f"{name}: Reset Zoom shows every frame")
        t.check(not r["resetShown"] and r["zoom"] == "", f"{name}: zoom reset")
        for s in st["search"]:
            n_match = matched_samples(exp, s["term"])
            want_text = f"Matched: {100 * n_match / total:.2f}% ({n_match} of {total} samples)"
            t.equal(s["matched"], want_text, f"{name}: search {s['term']!r} matched share")
            rx = re.compile(s["term"])
            t.equal(sorted(f["name"] for f in s["shown"] if f["match"]),
                    sorted(f["name"] for f in s["shown"] if f["depth"] > 0 and rx.search(f["name"])),
                    f"{name}: search {s['term']!r} highlights the matching frames")
        c = st["cleared"]
        t.check(c["matched"] == "" and not any(f["match"] for f in c["shown"]),
                f"{name}: search cleared")


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("speedscope", "flamegraph"):
        sys.exit("usage: consumer_browser.py speedscope|flamegraph EXPORT-TEST WORKDIR SCRIPT.mjs")
    mode, export_test, workdir, script = sys.argv[1:]
    node, chromium = find_tools(script)
    cases = exportlib.write_exports(export_test, workdir)
    artifacts = os.path.join(workdir, "artifacts")
    t = Tally(f"export-{mode}")
    if mode == "speedscope":
        cases = [c for c in cases if c["format"] == "speedscope"]
        seen = run_node(node, script, [workdir, artifacts, chromium])
        check_speedscope(t, cases, seen)
    else:
        plan = flame_plan(cases)
        plan_path = os.path.join(workdir, "plan.json")
        with open(plan_path, "w", encoding="utf-8") as f:
            json.dump([{k: v for k, v in p.items() if k not in ("exp", "node")} for p in plan], f)
        seen = run_node(node, script, [plan_path, artifacts, chromium])
        check_flamegraph(t, plan, seen)
    print(f"screenshots: {artifacts}")
    t.finish()


if __name__ == "__main__":
    main()
