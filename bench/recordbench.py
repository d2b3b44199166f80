#!/usr/bin/env python3
"""Benchmark of pyflame-record (a program that prints numbers, not a test).

Side by side in one run, on a CPU-bound workload (bench/workloads/deep.py)
with a ~30-deep and a ~100-deep Python stack:
  1. the recorder's own CPU time per sample (us), non-blocking and blocking,
     as pyflame-record measures it around its sampling loop (meta
     recorder_cpu_ns / samples), and memory reads per sample;
  2. the workload's slowdown against an unprofiled run, at 100 Hz and 1 kHz,
     both modes (fixed work, runs interleaved, medians);
  3. the highest rate sustained for 10 s with no missed deadline.
The workload runs on CPU 0 and the recorder on CPU 1 (taskset), so the two
do not share a core. Usage:

  python3 bench/recordbench.py --record build/record/pyflame-record \
      --report build/report/pyflame-report [--python PATH ...] [--quick]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEEP = os.path.join(HERE, "workloads", "deep.py")


def pin(cpu):
    return ["taskset", "-c", str(cpu)] if os.path.exists("/usr/bin/taskset") else []


def start_workload(py, depth, secs=0):
    p = subprocess.Popen(pin(0) + [py, DEEP, str(depth), str(secs)], stdout=subprocess.PIPE,
                         universal_newlines=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    return p


def info(report, db):
    out = subprocess.run([report, "info", "--format", "json", db], stdout=subprocess.PIPE,
                         universal_newlines=True, check=True).stdout
    return json.loads(out)


def meta_int(inf, key):
    v = inf.get("meta", {}).get(key)
    return int(v) if v is not None else None


def record(args, pid, rate, secs, blocking, db):
    cmd = pin(1) + [args.record, "-q", "-f", "-o", db, "-p", str(pid), "-r", str(rate),
                    "-d", str(secs)] + (["--blocking"] if blocking else [])
    subprocess.run(cmd, check=True)
    return info(args.report, db)


def wake_floor():
    """CPU time one timer wake-up costs on this machine (us), from a C-free
    measurement: 2000 sleeps of 1 ms by this Python process."""
    import resource
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(2000):
        time.sleep(0.001)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return ((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)) / 2000 * 1e6


def cpu_per_sample(args, py, tmp):
    print("\n## Recorder cost per sample at 1 kHz (%s)" % py)
    print("work: wall time inside sampling passes (reads, walk, trace), per sample;")
    print("total: the recorder's CPU time while sampling, per sample, timer wake-ups included")
    print("%-6s %-12s %8s %10s %10s %10s" % ("depth", "mode", "samples", "work us", "total us",
                                           "reads/smp"))
    rows = []
    for depth in (30, 100):
        w = start_workload(py, depth)
        try:
            for blocking in (False, True):
                db = os.path.join(tmp, "cpu.db")
                inf = record(args, w.pid, 1000, args.secs, blocking, db)
                samples = inf["samples"]
                cpu = meta_int(inf, "recorder_cpu_ns")
                work = meta_int(inf, "sampling_ns")
                reads = meta_int(inf, "memory_reads")
                us = cpu / samples / 1000.0 if samples else float("nan")
                wus = work / samples / 1000.0 if samples and work else float("nan")
                rps = reads / samples if samples and reads is not None else float("nan")
                mode = "blocking" if blocking else "nonblocking"
                print("%-6d %-12s %8d %10.2f %10.2f %10.2f" % (depth, mode, samples, wus, us,
                                                             rps))
                rows.append((depth, mode, us))
        finally:
            w.kill()
            w.wait()
    return rows


def timed_run(py, depth, iters, profile=None):
    """Seconds the fixed work takes, optionally under the recorder."""
    cmd = pin(0) + [py, DEEP, str(depth), "-N", str(iters)]
    if profile:
        rec, rate, blocking, db = profile
        cmd = pin(1) + [rec, "-q", "-f", "-o", db, "-r", str(rate)] + \
            (["--blocking"] if blocking else []) + ["--"] + cmd
    out = subprocess.run(cmd, stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    return float(out.split()[-1])


def slowdown(args, py, tmp):
    print("\n## Workload slowdown, depth 30 (%s), median of %d interleaved runs"
          % (py, args.repeat))
    configs = [("unprofiled", None)]
    for rate in (100, 1000):
        for blocking in (False, True):
            configs.append(("%s %d Hz" % ("blocking" if blocking else "nonblocking", rate),
                            (args.record, rate, blocking, os.path.join(tmp, "slow.db"))))
    # Calibrate the work to about args.work seconds.
    iters = 200
    t = timed_run(py, 30, iters)
    iters = max(50, int(iters * args.work / max(t, 1e-3)))
    times = {name: [] for name, _ in configs}
    for _ in range(args.repeat):
        for name, prof in configs:
            times[name].append(timed_run(py, 30, iters, prof))
    base = statistics.median(times["unprofiled"])
    print("%-22s %10s %10s" % ("config", "median s", "slowdown"))
    for name, _ in configs:
        m = statistics.median(times[name])
        print("%-22s %10.3f %9.2f%%" % (name, m, 100.0 * (m / base - 1)))


def max_rate(args, py, tmp):
    print("\n## Highest rate sustained for %gs with no missed deadline, depth 30, "
          "nonblocking (%s)" % (args.rate_secs, py))
    w = start_workload(py, 30)
    best = 0
    try:
        for rate in args.rates:
            db = os.path.join(tmp, "rate.db")
            inf = record(args, w.pid, rate, args.rate_secs, False, db)
            late = meta_int(inf, "missed_deadlines")
            print("%8d Hz: %d samples, %s missed deadlines" % (rate, inf["samples"], late))
            if late:
                break
            best = rate
    finally:
        w.kill()
        w.wait()
    print("highest sustained: %d Hz" % best)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--python", action="append",
                    help="interpreter(s) to measure (default: pyenv 3.12, 3.11 and 3.9)")
    ap.add_argument("--secs", type=float, default=5.0, help="recording length for CPU/sample")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--work", type=float, default=2.0, help="seconds of work per slowdown run")
    ap.add_argument("--rate-secs", type=float, default=10.0)
    ap.add_argument("--rates", type=lambda s: [int(x) for x in s.split(",")],
                    default=[1000, 10000, 20000, 50000, 100000, 150000, 200000])
    ap.add_argument("--quick", action="store_true", help="shorter runs, for a smoke test")
    ap.add_argument("--skip", default="", help="comma list of: cpu,slowdown,rate")
    args = ap.parse_args()
    if args.quick:
        args.secs, args.repeat, args.work, args.rate_secs = 2.0, 3, 0.5, 2.0
    root = os.path.expanduser("~/.pyenv/versions")
    pys = args.python or [os.path.join(root, v, "bin", "python")
                          for v in ("3.12.1", "3.11.7", "3.9.18")
                          if os.path.exists(os.path.join(root, v, "bin", "python"))]
    skip = set(args.skip.split(","))
    tmp = tempfile.mkdtemp(prefix="pyflame-bench-")
    print("pyflame-record benchmark, %s; load average %.2f" % (time.strftime("%Y-%m-%d %H:%M"),
                                                              os.getloadavg()[0]))
    print("one timer wake-up costs %.1f us of CPU on this machine" % wake_floor())
    for py in pys:
        if "cpu" not in skip:
            cpu_per_sample(args, py, tmp)
        if "slowdown" not in skip:
            slowdown(args, py, tmp)
        if "rate" not in skip:
            max_rate(args, py, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
