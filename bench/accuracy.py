#!/usr/bin/env python3
"""Accuracy against ground truth: does pyflame report the shares a program
really has?

Workloads whose true shares are known by construction (bench/accuracy/
workload.py: each measures its own truth while it runs) are recorded with
pyflame-record on every interpreter of the machine, in both modes, at 100 Hz
and 1 kHz, several times each, and measured with pyflame-report:

  split-P/3, split-1P, split-2P, split-10P
                 hot_a 70% and hot_b 30% of a loop that repeats every P/3,
                 1, 2 or 10 sampling periods exactly (the stroboscope test)
  split-random   the same with random lengths (mean cycle one period)
  twoproc        split-1P in two processes recorded together (-s): each pass
                 reads them in a random order
  depth          a leaf 100 frames deep against one 1 frame deep (no depth bias)
  faststack      a loop calling a 20-deep recursion (its stack changes every
                 few tens of ns) against a flat loop: the loop's total share
  oncpu          a thread busy 40% and asleep 60% in random lengths: the share
                 of its samples on CPU and, with --idle, the share in the
                 sleeping function (the on-CPU truth adds the time the thread
                 runs inside its sleeping calls, from the kernel's switch
                 records: needs perf, or --no-switch-truth)
  threads        split-1P in eight threads of one process at once (they take
                 turns with the GIL, waiting inside hot_a or hot_b): each
                 thread's share, all its samples (--idle) counted
  gil            three threads contending for the GIL: of the samples in which
                 one of them holds the GIL, each one's share (truth: its
                 share of the three threads' CPU time; a thread that only
                 runs Python runs only while it holds the GIL)

For each case, rate and mode it prints the mean true share, the mean measured
share, the bias (mean of measured - true over runs and interpreters, with its
standard error) and how many runs fell outside the 99% binomial interval of
their own truth (about 1% are expected by chance; the tail probability of
seeing as many is printed). Target: |bias| <= 1 point everywhere.

Usage: accuracy.py --record PATH --report PATH [--only 3.12,2.7]
                   [--modes nonblocking,blocking,bpf] [--rates 100,1000]
                   [--cases split-1P,...] [--runs 3] [--secs 6] [--json OUT]
                   [-- EXTRA pyflame-record OPTIONS]
A full run on every interpreter takes about 1.5 hours on a 2-CPU machine.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
import interps  # noqa: E402  (the interpreters the tests run against)
WORKLOAD = os.path.join(HERE, "accuracy", "workload.py")

CASES = ["split-P/3", "split-1P", "split-2P", "split-10P", "split-random", "twoproc", "depth",
         "faststack", "oncpu", "threads", "gil"]


def interpreters():
    """(label, path) of every CPython here: pyenv's and Debian's static 3.11."""
    return interps.interpreters()


def workload_args(case, period):
    """The workload's arguments for a case at a sampling period (seconds)."""
    split = {"split-P/3": period / 3, "split-1P": period, "split-2P": 2 * period,
             "split-10P": 10 * period}
    if case in split:
        c = split[case]
        return ["split", "%.9f" % (0.7 * c), "%.9f" % (0.3 * c)]
    if case in ("twoproc", "threads"):
        return [case, "%.9f" % (0.7 * period), "%.9f" % (0.3 * period)]
    if case == "split-random":
        return ["split", "%.9f" % (0.7 * period), "%.9f" % (0.3 * period), "random"]
    if case in ("depth", "faststack"):
        return [case, "%.9f" % (period / 2)]
    if case == "oncpu":
        return ["oncpu", "%.9f" % period]
    return ["gil"]


def report_json(report, db, *args):
    out = subprocess.run([report, "--by-function", "--format", "json", "--top", "0"] +
                         list(args) + [db], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def counts(rows, key, names):
    got = {name: 0 for name in names}
    for r in rows:
        if r["function"] in got:
            got[r["function"]] += r[key]
    return got


def measure(report, db, case, truth, mode="nonblocking"):
    """[(metric, truth, measured, n)] for one recording. A --bpf trace holds on-CPU
    samples only (reports refuse --idle on it): its shares are of those."""
    idle = () if mode == "bpf" else ("--idle",)

    def of(t):
        """--bpf samples CPU time: its truth is the functions' CPU time, where known."""
        return t.get("cpu", t) if mode == "bpf" else t
    if case.startswith("split") or case == "depth" or case == "faststack":
        # hot_a and hot_b never nest: each counts with what it calls (its own
        # clock reads, inside its window; see workload.py).
        a, b, key_a, key_b = {"depth": ("deep_leaf", "shallow_leaf", "self", "self"),
                              "faststack": ("fast_loop", "flat", "total", "self")}.get(
                                  case, ("hot_a", "hot_b", "total", "total"))
        rows = report_json(report, db, *idle)["rows"]
        x = counts(rows, key_a, [a])[a]
        y = counts(rows, key_b, [b])[b]
        if x + y == 0:
            return []
        return [(a, of(truth)[a], x / (x + y), x + y)]
    if case in ("twoproc", "threads"):
        # A truth per process (--pid) or per thread (--thread), each measured apart.
        res = []
        for key in sorted(truth):
            rows = report_json(report, db, *(idle + (
                "--pid" if case == "twoproc" else "--thread", key)))["rows"]
            x = counts(rows, "total", ["hot_a"])["hot_a"]
            y = counts(rows, "total", ["hot_b"])["hot_b"]
            if x + y:
                res.append(("hot_a", of(truth[key])["hot_a"], x / (x + y), x + y))
        return res
    if case == "oncpu" and mode == "bpf":
        return []  # every sample of --bpf is on CPU: nothing to measure
    if case == "oncpu":
        every = report_json(report, db, "--idle", "--thread", "worker")
        on = report_json(report, db, "--thread", "worker")
        n = every["samples"]
        if not n:
            return []
        idle = counts(every["rows"], "self", ["idle_sleep"])["idle_sleep"]
        return [("on-cpu", truth["on_cpu"], on["samples"] / n, n),
                ("idle_sleep", truth["idle_sleep"], idle / n, n)]
    # gil: of the samples in which one of them holds the GIL, each one's share.
    held = dict((name, report_json(report, db, *(idle + ("--gil", "--thread", name)))["samples"])
                for name in truth)
    n = sum(held.values())
    return [(name, truth[name], held[name] / n, n) for name in sorted(truth)] if n else []


def switch_records(perf, data, tid):
    """[(time, on_cpu)] of thread tid from perf's switch records, in time order.

    On CPU means what the recorder means: switched in, or switched out by a
    preemption (ready to go on running).
    """
    out = subprocess.run([perf, "script", "-i", data, "--show-switch-events", "-F", "tid,time",
                          "--ns", "--tid", str(tid)], capture_output=True, text=True,
                         check=True).stdout
    recs = []
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 4 and f[2] == "PERF_RECORD_SWITCH" and f[0] == str(tid):
            recs.append((float(f[1].rstrip(":")), f[3] == "IN" or "preempt" in f[4:]))
    recs.sort()
    return recs


def ran_in_windows(recs, windows):
    """Seconds the thread was on CPU inside the windows [(start, end)], sorted."""
    total, k, state = 0.0, 0, True  # it runs when it starts its first sleeping call
    for s, e in windows:
        while k < len(recs) and recs[k][0] <= s:
            state = recs[k][1]
            k += 1
        at, j, st = s, k, state
        while j < len(recs) and recs[j][0] < e:
            if st:
                total += recs[j][0] - at
            at, st = recs[j][0], recs[j][1]
            j += 1
        if st:
            total += e - at
    return total


def oncpu_truth(truth, recs):
    """The oncpu case's on-CPU truth with the time it ran inside its sleeping calls
    (recs: its thread's switch_records)."""
    windows = sorted(tuple(w) for w in truth["windows"])
    if not recs or not windows:
        raise ValueError("no switch records of thread %d" % truth["tid"])
    ran = ran_in_windows(recs, windows)
    truth["on_cpu"] += ran / truth["wall"]
    truth["ran_per_call_us"] = 1e6 * ran / len(windows)
    return truth


def binom_tail(k, n, p):
    """P(X >= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--record", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--only", help="interpreter labels, comma-separated (e.g. 3.12,2.7)")
    ap.add_argument("--modes", default="nonblocking,blocking")
    ap.add_argument("--rates", default="100,1000")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--secs", type=float, default=6, help="seconds per run at 100 Hz "
                    "(at 1 kHz a third of it)")
    ap.add_argument("--json", help="write every run's figures here")
    ap.add_argument("--no-switch-truth", action="store_true",
                    help="oncpu: take the time outside the sleeping calls as the on-CPU truth, "
                    "without the time the thread ran inside them (which needs perf's "
                    "switch records)")
    ap.add_argument("extra", nargs="*", help="more pyflame-record options, after --")
    args = ap.parse_args()

    pys = interpreters()
    if args.only:
        want = args.only.split(",")
        pys = [p for p in pys if any(p[0] == w or p[0].startswith(w + ".") for w in want)]
    if not pys:
        sys.exit("no interpreter found")
    cases = args.cases.split(",")
    for c in cases:
        if c not in CASES:
            sys.exit("unknown case %s (one of %s)" % (c, ", ".join(CASES)))
    perf = None if args.no_switch_truth else shutil.which("perf")
    if "oncpu" in cases and not perf and not args.no_switch_truth:
        sys.exit("the oncpu case needs perf (linux-perf) for the time its thread runs inside its "
                 "sleeping calls; or pass --no-switch-truth to leave that time out of the truth")
    tmp = tempfile.mkdtemp(prefix="pyflame-accuracy-")
    results = []
    total = len(pys) * len(args.modes.split(",")) * len(args.rates.split(",")) * len(cases) * \
        args.runs
    done = torn = late = samples = 0
    failures = []
    t0 = time.time()
    for label, py in pys:
        for mode in args.modes.split(","):
            for rate in [int(r) for r in args.rates.split(",")]:
                secs = args.secs if rate <= 100 else args.secs / 3
                for case in cases:
                    for run in range(args.runs):
                        db = os.path.join(tmp, "run.db")
                        tf = os.path.join(tmp, "truth.json")
                        wargs = workload_args(case, 1.0 / rate)
                        cmd = [args.record, "-q", "-f", "-r", str(rate), "--" + mode, "-o", db] + \
                            (["-s"] if case == "twoproc" else []) + args.extra + \
                            ["--", py, WORKLOAD, wargs[0], str(secs), tf] + wargs[1:]
                        pdata = os.path.join(tmp, "switch.data")
                        if case == "oncpu" and perf:
                            # The kernel's switch records of every thread, on CLOCK_MONOTONIC
                            # like the workload's windows: the truth of when its thread ran.
                            cmd = [perf, "record", "-q", "-k", "CLOCK_MONOTONIC",
                                   "--switch-events", "-e", "dummy", "-o", pdata, "--"] + cmd
                        try:
                            subprocess.run(cmd, check=True, timeout=secs * 10 + 60)
                            with open(tf) as f:
                                truth = json.load(f)
                            if case == "oncpu" and perf:
                                truth = oncpu_truth(
                                    truth, switch_records(perf, pdata, truth["tid"]))
                        except (subprocess.SubprocessError, OSError, ValueError) as e:
                            failures.append("%s %s %d Hz %s run %d: %s" % (
                                label, mode, rate, case, run + 1, e))
                            print("FAILED " + failures[-1], flush=True)
                            done += 1
                            continue
                        info = json.loads(subprocess.run(
                            [args.report, "info", "--format", "json", db], capture_output=True,
                            text=True, check=True).stdout)
                        for metric, true, got, n in measure(args.report, db, case, truth, mode):
                            sd = math.sqrt(max(true * (1 - true), 1e-9) / n)
                            results.append({
                                "python": label, "mode": mode, "rate": rate, "case": case,
                                "metric": metric, "run": run, "truth": true, "measured": got,
                                "n": n, "outside": abs(got - true) > 2.576 * sd,
                                "capture": info["meta"].get("capture", ""),
                                "errors": dict((k, v) for k, v in info["errors"].items() if v),
                                "ran_per_call_us": truth.get("ran_per_call_us")})
                        torn += info["errors"]["torn"]
                        late += info["errors"]["late"]
                        samples += info["samples"]
                        done += 1
                        last = results[-1] if results else None
                        print("[%d/%d %.0fs] %s %s %d Hz %s run %d: %s" % (
                            done, total, time.time() - t0, label, mode, rate, case, run + 1,
                            "%s true %.4f measured %.4f (n %d)" % (
                                last["metric"], last["truth"], last["measured"], last["n"])
                            if last and last["case"] == case else "no samples"), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)

    print()
    print("%d interpreters (%s), %d runs each; bias = measured - true share, in points" % (
        len(pys), ", ".join(p[0] for p in pys), args.runs))
    print("%-13s %-12s %-5s %-12s %5s %7s %8s %13s %9s %8s" % (
        "CASE", "METRIC", "RATE", "MODE", "RUNS", "TRUE%", "MEASURED", "BIAS", "OUTSIDE", "P_TAIL"))
    worst = 0.0
    keys = []
    for r in results:
        k = (r["case"], r["metric"], r["rate"], r["mode"])
        if k not in keys:
            keys.append(k)
    for k in keys:
        rs = [r for r in results if (r["case"], r["metric"],
                                     r["rate"], r["mode"]) == k]
        biases = [100 * (r["measured"] - r["truth"]) for r in rs]
        mean = sum(biases) / len(biases)
        se = math.sqrt(sum((b - mean) ** 2 for b in biases) / (len(biases) - 1) /
                       len(biases)) if len(biases) > 1 else float("nan")
        out = sum(r["outside"] for r in rs)
        worst = max(worst, abs(mean))
        print("%-13s %-12s %-5d %-12s %5d %7.2f %8.2f %+6.2f ± %4.2f %4d/%-4d %8.2g" % (
            k[0], k[1], k[2], k[3], len(rs), 100 * sum(r["truth"] for r in rs) / len(rs),
            100 * sum(r["measured"] for r in rs) / len(rs), mean, se, out, len(rs),
            binom_tail(out, len(rs), 0.01)))
    ran = sorted(r["ran_per_call_us"] for r in results
                 if r["metric"] == "on-cpu" and r.get("ran_per_call_us") is not None)
    if ran:
        print("oncpu: its thread ran %.1f us inside each sleeping call (median of %d runs, from "
              "the kernel's switch records), counted on CPU in the on-cpu truth" % (
                  ran[len(ran) // 2], len(ran)))
    print()
    print("largest |bias|: %.2f points (target 1); %d samples, %d torn, %d slots missed" % (
        worst, samples, torn, late))
    for f in failures:
        print("FAILED " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
