#!/usr/bin/env python3
"""check_exports.py - parse every export of the fixtures and compare it with
what the fixtures say (suite 'unit'; Python's standard library only).

  speedscope  valid JSON in speedscope's file format; one sampled profile per
              thread with samples, whose runs of stacks and weights (period
              per sample) replay the thread's samples in time order; totals.
  chrome      valid JSON; per thread, "X" events nest properly, and the chain
              of events covering each sample's time is exactly its stack.
  svg         well-formed XML; the <g class="frame"> elements are exactly the
              merged flame graph (depth, position, samples, label), title and
              totals shown, flame or icicle orientation, nothing fetched.
  html        well-formed (also as XML); the same flame graph, per-function
              and per-line tables with self/total samples as the fixtures
              count them, a timeline whose buckets add up to the samples.

Usage: check_exports.py EXPORT-TEST WORKDIR
"""

import collections
import json
import re
import sys
import xml.etree.ElementTree as ET

import exportlib
from exportlib import EMPTY_LABEL, Tally

SVG = "{http://www.w3.org/2000/svg}"
XHTML_NS_RE = re.compile(r"\{[^}]*\}")


def ss_label(frame):
    """A speedscope frame back to the folded label."""
    if "file" not in frame:
        return frame["name"]
    if "line" in frame:
        return f"{frame['name']} ({frame['file']}:{frame['line']})"
    return f"{frame['name']} ({frame['file']})"


def thread_title(t):
    tid = f"tid {t['tid']}"
    if t["name"]:
        return f"{t['name']} ({tid}, pid {t['pid']})"
    return f"{tid} (pid {t['pid']})"


def check_speedscope(t, case):
    exp = case["exp"]
    with open(case["path"], encoding="utf-8") as f:
        doc = json.load(f)
    name = case["name"]
    t.equal(doc.get("$schema"), "https://www.speedscope.app/file-format-schema.json",
            f"{name}: $schema")
    frames = doc["shared"]["frames"]
    labels = [ss_label(fr) for fr in frames]
    profiles = doc["profiles"]
    period = exp["period_ns"]
    threads = exportlib.threads_with_samples(exp)
    if not threads:
        t.equal([p["name"] for p in profiles], ["no samples selected"], f"{name}: empty profile")
        return
    t.equal(len(profiles), len(threads), f"{name}: one profile per thread with samples")
    t.check(0 <= doc["activeProfileIndex"] < len(profiles), f"{name}: activeProfileIndex")
    for p, ti in zip(profiles, threads):
        th = exp["threads"][ti]
        t.equal(p["type"], "sampled", f"{name}: type")
        t.equal(p["unit"], "nanoseconds", f"{name}: unit")
        t.equal(p["name"], thread_title(th), f"{name}: profile name")
        t.equal(len(p["samples"]), len(p["weights"]), f"{name}: samples and weights")
        runs = [(tuple(labels[i] for i in s), w // period) for s, w in zip(p["samples"], p["weights"])]
        t.check(all(w % period == 0 for w in p["weights"]), f"{name}: weights are whole periods")
        t.equal(runs, exportlib.thread_runs(exp, ti), f"{name}: {p['name']} samples in time order")
        n = sum(1 for s in exp["samples"] if s["thread"] == ti)
        t.equal(sum(p["weights"]), n * period, f"{name}: {p['name']} total")
        first = min(s["t_ns"] for s in exp["samples"] if s["thread"] == ti)
        t.equal((p["startValue"], p["endValue"]), (first, first + n * period),
                f"{name}: start/end values")


def check_chrome(t, case):
    exp = case["exp"]
    name = case["name"]
    with open(case["path"], encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    by_tid = collections.defaultdict(list)
    names = {}
    for i, e in enumerate(events):
        if e["ph"] == "X":
            start = round(e["ts"] * 1000)
            end = start + round(e["dur"] * 1000)
            t.check(end > start, f"{name}: event {i} has a duration")
            by_tid[(e["pid"], e["tid"])].append((start, -end, i, e["name"]))
        elif e["ph"] == "M" and e["name"] == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e["ph"] != "M":
            t.check(False, f"{name}: unexpected event phase {e['ph']}")
    threads = exportlib.threads_with_samples(exp)
    want_keys = {(exp["threads"][i]["pid"], exp["threads"][i]["tid"]) for i in threads}
    t.equal(set(by_tid), want_keys, f"{name}: one track per thread with samples")
    for i in threads:
        th = exp["threads"][i]
        key = (th["pid"], th["tid"])
        t.equal(names.get(key), th["name"] or f"thread {th['tid']}", f"{name}: thread name {key}")
    for key, evs in by_tid.items():
        evs.sort()
        # Proper nesting: every event ends within the event it starts in.
        stack, nested = [], True
        for start, negend, _, _ in evs:
            while stack and -stack[-1][1] <= start:
                stack.pop()
            if stack and -negend > -stack[-1][1]:
                nested = False
            stack.append((start, negend))
        t.check(nested, f"{name}: events of {key} nest")
    # Each sample's stack is the chain of events covering its time.
    per_key_ok = collections.Counter()
    bad = 0
    for s in exp["samples"]:
        th = exp["threads"][s["thread"]]
        key = (th["pid"], th["tid"])
        chain = [n for start, negend, _, n in by_tid.get(key, []) if start <= s["t_ns"] < -negend]
        if chain != s["stack"]:
            if bad < 3:
                print(f"  {name}: at {s['t_ns']} on {key}: {chain} != {s['stack']}", file=sys.stderr)
            bad += 1
        per_key_ok[key] += 1
    t.equal(bad, 0, f"{name}: every sample's stack is the chain of events at its time")
    # Nothing else is covered: top-level time is one period per sample here.
    period = exp["period_ns"]
    for i in threads:
        th = exp["threads"][i]
        key = (th["pid"], th["tid"])
        evs = by_tid[key]
        covered, end = 0, None
        for start, negend, _, _ in evs:
            if end is None or start >= end:
                covered += -negend - start
                end = -negend
        n = sum(1 for s in exp["samples"] if s["thread"] == i)
        t.equal(covered, n * period, f"{name}: time covered on {key}")


def no_network(t, name, text):
    """No URL but the namespaces and speedscope's schema; no external src/href."""
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", text))
    urls -= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xhtml"}
    t.equal(urls, set(), f"{name}: no network references")
    t.check(not re.search(r"\s(src|href|xlink:href)=", text), f"{name}: no src/href attributes")


def strip_ns(root):
    for el in root.iter():
        el.tag = XHTML_NS_RE.sub("", el.tag)
    return root


def flame_frames(svg):
    got = set()
    ys = collections.defaultdict(set)
    for g in svg.iter("g"):
        if g.get("class") != "frame":
            continue
        d = int(g.get("data-depth"))
        got.add((d, int(g.get("data-x")), int(g.get("data-n")), g.get("data-name")))
        ys[d].add(float(g.find("rect").get("y")))
        t_el = g.find("title")
        assert t_el is not None and g.get("data-name") in t_el.text
    return got, ys


def check_flame_svg(t, name, svg, exp, icicle, title):
    total = len(exp["samples"])
    t.equal(int(svg.get("data-total")), total, f"{name}: data-total")
    texts = ["".join(el.itertext()) for el in svg.iter("text")]
    if title:
        t.check(title in texts, f"{name}: title {title!r} shown")
    t.check(any(f"{total} samples" in x for x in texts), f"{name}: total shown")
    got, ys = flame_frames(svg)
    t.equal(got, exportlib.flame_nodes(exp), f"{name}: flame graph frames")
    if total and len(ys) > 1:
        y0, y1 = min(ys[0]), min(ys[1])
        t.check((y1 > y0) if icicle else (y1 < y0), f"{name}: {'icicle' if icicle else 'flame'} orientation")
    t.equal(svg.get("data-icicle"), "1" if icicle else "0", f"{name}: data-icicle")
    classes = {el.get("class") for el in svg.iter("text")}
    for c in ("details", "matched", "button search-button", "button reset-zoom hide"):
        t.check(c in classes, f"{name}: has {c}")


def check_svg(t, case):
    with open(case["path"], encoding="utf-8") as f:
        text = f.read()
    name = case["name"] + ".svg"
    root = strip_ns(ET.fromstring(text.encode("utf-8")))
    t.equal(root.tag, "svg", f"{name}: root element")
    t.check(root.find("script") is not None and "pyflameInit" in root.find("script").text,
            f"{name}: inline script")
    check_flame_svg(t, name, root, case["exp"], case["icicle"], case["title"] or
                    ("Icicle Graph" if case["icicle"] else "Flame Graph"))
    no_network(t, name, text)


def table_rows(table):
    rows = []
    for tr in table.find("tbody").iter("tr"):
        rows.append(["".join(td.itertext()) for td in tr.iter("td")])
    return rows


def check_html(t, case):
    exp = case["exp"]
    name = case["name"] + ".html"
    with open(case["path"], encoding="utf-8") as f:
        text = f.read()
    t.check(text.startswith("<!DOCTYPE html>"), f"{name}: doctype")
    root = strip_ns(ET.fromstring(text.encode("utf-8")))
    total = len(exp["samples"])
    by_id = {el.get("id"): el for el in root.iter() if el.get("id")}
    for need in ("flame", "flamegraph", "search", "timeline", "functions", "lines", "summary"):
        t.check(need in by_id, f"{name}: has #{need}")
    t.check(f"{total} samples" in "".join(by_id["summary"].itertext()), f"{name}: summary total")
    check_flame_svg(t, name, by_id["flamegraph"], exp, case["icicle"], case["title"])
    scripts = [el.text or "" for el in root.iter("script")]
    t.check(any("pyflameInit(document.getElementById('flamegraph')" in s for s in scripts),
            f"{name}: flame graph script wired")

    # Tables.
    want_fn = exportlib.hot_rows(exp, by_line=False)
    got_fn = {}
    for r in table_rows(by_id["functions-table"]):
        fname, file, first, self_, self_pct, tot, tot_pct = r
        got_fn[(fname, file, int(first) if first else -1)] = [int(self_), int(tot)]
        t.equal(self_pct, f"{100 * int(self_) / total:.2f}%", f"{name}: self % of {fname}")
        t.equal(tot_pct, f"{100 * int(tot) / total:.2f}%", f"{name}: total % of {fname}")
    t.equal(got_fn, {k: v for k, v in want_fn.items()}, f"{name}: per-function table")
    want_ln = {(f"{f}:{l}" if l is not None else f): v for (f, l), v in
               exportlib.hot_rows(exp, by_line=True).items()}
    got_ln = {}
    for r in table_rows(by_id["lines-table"]):
        loc, fname, self_, self_pct, tot, tot_pct = r
        got_ln[loc] = [int(self_), int(tot)]
    t.equal(got_ln, want_ln, f"{name}: per-line table")
    t.check(all(v[1] <= total for v in got_fn.values()), f"{name}: no total above 100%")

    # Timeline.
    tl = by_id["timeline"].find("svg")
    on = idle = 0
    for g in tl.iter("g"):
        if g.get("class") == "bucket":
            on += int(g.get("data-on-cpu"))
            idle += int(g.get("data-idle"))
    want_on = sum(1 for s in exp["samples"] if s["state"] & 1)
    t.equal((on, idle), (want_on, total - want_on), f"{name}: timeline buckets")
    # Buckets split the recording evenly (no case here selects a time range).
    nb, span = int(tl.get("data-buckets")), exp["duration_ns"]
    want_b = collections.Counter(min(s["t_ns"] * nb // span, nb - 1) for s in exp["samples"])
    got_b = collections.Counter()
    for g in tl.iter("g"):
        if g.get("class") == "bucket":
            n = int(g.get("data-on-cpu")) + int(g.get("data-idle"))
            if n:
                got_b[int(g.get("data-bucket"))] = n
    t.equal(got_b, want_b, f"{name}: samples per bucket")
    rows = [int(g.get("data-samples")) for g in tl.iter("g") if g.get("class") == "thread-row"]
    t.equal(sum(rows), total, f"{name}: timeline thread rows")
    t.equal(len(rows), len(exportlib.threads_with_samples(exp)), f"{name}: one row per thread")
    no_network(t, name, text)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: check_exports.py EXPORT-TEST WORKDIR")
    cases = exportlib.write_exports(sys.argv[1], sys.argv[2])
    t = Tally("export-check")
    checks = {"speedscope": check_speedscope, "chrome": check_chrome, "svg": check_svg,
              "html": check_html}
    for case in cases:
        fn = checks.get(case["format"])
        if fn:
            try:
                fn(t, case)
            except Exception as e:  # a parse error is a failed check, not a crash
                t.check(False, f"{case['file']}: {type(e).__name__}: {e}")
    t.finish()


if __name__ == "__main__":
    main()
