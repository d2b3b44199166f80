#!/usr/bin/env python3
"""Benchmark of pyflame-record (a program that prints numbers, not a test).

Side by side in one run, on a CPU-bound workload (bench/workloads/deep.py)
with a ~30-deep and a ~100-deep Python stack:
  1. the recorder's own CPU time per sample (us), in each mode (--modes:
     nonblocking, the default; no-bpf, read from outside; blocking),
     as pyflame-record measures it around its sampling loop (meta
     recorder_cpu_ns / samples), and memory reads per sample;
  2. the workload's slowdown against an unprofiled run, at 100 Hz and 1 kHz,
     each mode: by runs of fixed work (interleaved, medians), and by
     alternation (one workload, the recorder attached and detached in turn:
     the finer measure on a noisy machine);
  3. the highest rate sustained for 10 s with no missed deadline
     (non-blocking modes).
The workload runs on CPU 0 and the recorder's sampling thread on CPU 1
(taskset), so the two do not share a core; the recorder's committing thread
(SQLite) is moved to CPU 0, as the scheduler would place it on a machine
with a spare core. Usage:

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


def place_writer(rec_pid, cpu):
    """Move the recorder's committing thread (every thread but the sampling
    one) to `cpu`: a machine with spare cores runs it beside the sampler,
    and on two cores a commit would otherwise take the sampler's own core
    for milliseconds. Returns once done, or when the recorder has exited."""
    if not pin(cpu):
        return
    task = "/proc/%d/task" % rec_pid
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            tids = [int(t) for t in os.listdir(task) if int(t) != rec_pid]
        except OSError:
            return
        if tids:
            for tid in tids:
                subprocess.run(["taskset", "-p", "-c", str(cpu), str(tid)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return
        time.sleep(0.002)


# The recorder's modes compared: the default (a running thread read in its
# own context, capture.h), the same read from outside, and --blocking.
MODE_FLAGS = {"nonblocking": [], "no-bpf": ["--no-bpf"], "blocking": ["--blocking"]}


def record(args, pid, rate, secs, mode, db):
    cmd = pin(1) + [args.record, "-q", "-f", "-o", db, "-p", str(pid), "-r", str(rate),
                    "-d", str(secs)] + MODE_FLAGS[mode]
    p = subprocess.Popen(cmd)
    place_writer(p.pid, 0)
    if p.wait() != 0:
        raise subprocess.CalledProcessError(p.returncode, cmd)
    return info(args.report, db)


def wake_floor(period=0.001, n=2000):
    """CPU time one timer wake-up costs on this machine (us), from a C-free
    measurement: n sleeps of `period` seconds by this Python process (the
    cost grows with the sleep on a VM: bench/nativebench.py prints it at
    its rate too)."""
    import resource
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(n):
        time.sleep(period)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return ((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)) / n * 1e6


# A rate no recorder reaches: samples are taken back to back, with no wait
# between them, so the work per sample is measured with warm caches and no
# timer wake-up, as when sampling at 100 kHz.
BACK_TO_BACK_HZ = 1000000


def cpu_per_sample(args, py, tmp):
    print("\n## Recorder cost per sample (%s), medians of %d recordings of %gs"
          % (py, args.cpu_repeat, args.secs))
    print("work: time inside sampling passes (reads, walk, state, queueing the sample), per "
          "sample;")
    print("total: the recorder's whole CPU time (both its threads), per sample, timer "
          "wake-ups and commits included")
    print("rate 'max': samples back to back, no waits (the cost that bounds the highest rate)")
    print("%-6s %-12s %6s %8s %10s %10s %10s" % ("depth", "mode", "rate", "samples", "work us",
                                               "total us", "reads/smp"))
    rows = []
    for depth in (30, 100):
        w = start_workload(py, depth)
        try:
            for mode in args.modes:
                for rate in (1000, BACK_TO_BACK_HZ):
                    runs = []
                    for _ in range(args.cpu_repeat):
                        db = os.path.join(tmp, "cpu.db")
                        inf = record(args, w.pid, rate, args.secs, mode, db)
                        samples = inf["samples"]
                        cpu = meta_int(inf, "recorder_cpu_ns")
                        work = meta_int(inf, "sampling_ns")
                        reads = meta_int(inf, "memory_reads")
                        if not samples:
                            continue
                        runs.append((work / samples / 1000.0, cpu / samples / 1000.0,
                                     reads / samples, samples))
                    if not runs:
                        continue
                    wus = statistics.median(r[0] for r in runs)
                    us = statistics.median(r[1] for r in runs)
                    rps = statistics.median(r[2] for r in runs)
                    n = int(statistics.median(r[3] for r in runs))
                    label = "max" if rate == BACK_TO_BACK_HZ else "%dk" % (rate // 1000)
                    print("%-6d %-12s %6s %8d %10.2f %10.2f %10.2f" % (depth, mode, label, n, wus,
                                                                     us, rps))
                    rows.append((depth, mode, rate, wus, us))
        finally:
            w.kill()
            w.wait()
    return rows


def timed_run(py, depth, iters, profile=None):
    """Seconds the fixed work takes, optionally under the recorder."""
    cmd = pin(0) + [py, DEEP, str(depth), "-N", str(iters)]
    if profile:
        rec, rate, mode, db = profile
        cmd = pin(1) + [rec, "-q", "-f", "-o", db, "-r", str(rate)] + MODE_FLAGS[mode] + \
            ["--"] + cmd
    out = subprocess.run(cmd, stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    return float(out.split()[-1])


def slowdown(args, py, tmp):
    print("\n## Workload slowdown, depth 30 (%s), median of %d interleaved runs"
          % (py, args.repeat))
    configs = [("unprofiled", None)]
    for rate in (100, 1000):
        for mode in args.modes:
            configs.append(("%s %d Hz" % (mode, rate),
                            (args.record, rate, mode, os.path.join(tmp, "slow.db"))))
    # Calibrate the work to about args.work seconds.
    iters = 200
    t = timed_run(py, 30, iters)
    iters = max(50, int(iters * args.work / max(t, 1e-3)))
    times = {name: [] for name, _ in configs}
    for _ in range(args.repeat):
        for name, prof in configs:
            times[name].append(timed_run(py, 30, iters, prof))
    base = statistics.median(times["unprofiled"])
    print("slowdown: of the medians; paired: median over rounds of (run / unprofiled run of "
          "the same round)")
    print("%-22s %10s %10s %10s" % ("config", "median s", "slowdown", "paired"))
    for name, _ in configs:
        m = statistics.median(times[name])
        paired = statistics.median(t / u for t, u in zip(times[name], times["unprofiled"]))
        print("%-22s %10.3f %9.2f%% %9.2f%%" % (name, m, 100.0 * (m / base - 1),
                                               100.0 * (paired - 1)))


def onoff(args, py, tmp):
    """Slowdown by alternation: one long-running workload reports its work
    every 50 ms while the recorder attaches for ON seconds and stays away for
    OFF seconds, cycle after cycle. Each cycle compares the work rate with the
    recorder attached to the rate just before and just after it, so slow
    drifts of the machine (other guests, frequency) cancel out, which runs of
    a fixed amount of work, minutes apart, cannot do."""
    print("\n## Workload slowdown by alternation, depth 30 (%s): %d cycles of %gs attached, "
          "%gs not" % (py, args.cycles, args.on_secs, args.off_secs))
    print("per cycle: rate of work while detached (before and after) / rate while attached - 1;")
    print("median over cycles, with the interquartile range; the recorder wholly on CPU 1")
    import threading
    # rate 0: the sham, `sleep` in place of the recorder: the noise floor of the method.
    configs = [(0, None)] + [(rate, mode) for rate in (100, 1000) for mode in args.modes]
    total = len(configs) * args.cycles * (args.on_secs + args.off_secs) + args.off_secs + 5
    w = subprocess.Popen(pin(0) + [py, DEEP, "30", "-T", str(total)], stdout=subprocess.PIPE,
                         universal_newlines=True)
    assert w.stdout.readline().strip() == "ready"
    points = []

    def reader():
        for line in w.stdout:
            t, n = line.split()
            points.append((float(t), int(n)))

    th = threading.Thread(target=reader)
    th.daemon = True
    th.start()
    # "bpf-timers": --bpf recording a decoy (a sleeping Python on CPU 1) in place of the
    # workload: the timers fire on every CPU, the workload's too, and find nothing to
    # walk there. The slowdown of the timer interrupts alone.
    decoy = None
    if "bpf-timers" in args.modes:
        decoy = subprocess.Popen(pin(1) + [py, "-c", "import time; time.sleep(1e6)"])
        time.sleep(0.5)
    time.sleep(args.off_secs)

    def rate(t0, t1):
        # Work per second over the reports that fall wholly inside [t0, t1].
        sel = [(t, n) for t, n in points if t0 <= t <= t1]
        if len(sel) < 3:
            return None
        return sum(n for _, n in sel[1:]) / (sel[-1][0] - sel[0][0])

    print("%-22s %10s %12s" % ("config", "slowdown", "IQR"))
    db = os.path.join(tmp, "onoff.db")
    try:
        for rate_hz, mode in configs:
            ratios = []
            for _ in range(args.cycles):
                before0 = time.monotonic() - args.off_secs + 0.2
                before1 = time.monotonic()
                target = decoy.pid if mode == "bpf-timers" else w.pid
                cmd = pin(1) + [args.record, "-q", "-f", "-o", db, "-p", str(target), "-r",
                                str(rate_hz), "-d", str(args.on_secs)] + MODE_FLAGS.get(mode, [])
                if not rate_hz:
                    cmd = pin(1) + ["sleep", str(args.on_secs)]
                t0 = time.monotonic()
                subprocess.run(cmd, check=True)
                t1 = time.monotonic()
                time.sleep(args.off_secs)
                t2 = time.monotonic()
                off = [r for r in (rate(before0, before1), rate(t1 + 0.2, t2)) if r]
                on = rate(t0 + 0.3, t1 - 0.05)
                if on and off:
                    ratios.append(statistics.mean(off) / on - 1)
            ratios.sort()
            name = "%s %d Hz" % (mode, rate_hz)
            if not rate_hz:
                name = "sham (no recorder)"
            if not ratios:
                print("%-22s %10s" % (name, "-"))
                continue
            q1 = ratios[len(ratios) // 4]
            q3 = ratios[(3 * len(ratios)) // 4]
            print("%-22s %9.2f%% %5.2f..%.2f%%" % (name, 100 * statistics.median(ratios), 100 * q1,
                                                 100 * q3))
    finally:
        w.kill()
        w.wait()
        if decoy:
            decoy.kill()
            decoy.wait()


def stalls(args, secs, tolerance_ns):
    """Gaps longer than tolerance_ns seen by a thread that only reads the clock
    on the recorder's CPU for secs (bench/stallcheck.c), or None."""
    if not args.stallcheck or not os.path.exists(args.stallcheck):
        return None
    out = subprocess.run(pin(1) + [args.stallcheck, str(secs), str(int(tolerance_ns))],
                         stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("gaps_over_"):
            return int(line.split()[1])
    return None


def max_rate(args, py, tmp, mode):
    print("\n## Highest rate sustained for %gs with no missed deadline, depth 30, "
          "%s (%s)" % (args.rate_secs, mode, py))
    print("missed: sampling slots the recorder gave up (each period's sample is due at a random")
    print("instant of it, taken at once when late, and given up when a whole period late)")
    print("stalls: for the same time just before, how often a thread that only spins on the "
          "clock")
    print("on the recorder's CPU lost that CPU for longer than a period (the machine's own "
          "floor)")
    print("%8s %9s %8s %9s %8s" % ("rate Hz", "samples", "missed", "sampled", "stalls"))
    w = start_workload(py, 30)
    best = 0
    best_floor = 0
    try:
        for rate in args.rates:
            floor = stalls(args, args.rate_secs, 1e9 / rate)
            db = os.path.join(tmp, "rate.db")
            inf = record(args, w.pid, rate, args.rate_secs, mode, db)
            late = meta_int(inf, "missed_deadlines") or 0
            n = inf["samples"]
            print("%8d %9d %8d %8.3f%% %8s" % (rate, n, late, 100.0 * n / max(n + late, 1),
                                              "-" if floor is None else floor))
            if late == 0 and best == rate_prev(args.rates, rate):
                best = rate
            if floor is not None and late <= floor and best_floor == rate_prev(args.rates, rate):
                best_floor = rate
    finally:
        w.kill()
        w.wait()
    print("highest sustained with no missed deadline: %s" % ("%d Hz" % best if best else "none"))
    print("highest sustained missing no more slots than the machine stalled: %s"
          % ("%d Hz" % best_floor if best_floor else "none"))


def rate_prev(rates, rate):
    """The rate tried before `rate` (0 for the first): a rate counts only when
    every lower one held too."""
    i = rates.index(rate)
    return rates[i - 1] if i else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--python", action="append",
                    help="interpreter(s) to measure (default: pyenv 3.12, 3.11 and 3.9)")
    ap.add_argument("--secs", type=float, default=5.0, help="recording length for CPU/sample")
    ap.add_argument("--cpu-repeat", type=int, default=3, help="recordings per CPU/sample figure")
    ap.add_argument("--repeat", type=int, default=9, help="rounds of slowdown runs")
    ap.add_argument("--work", type=float, default=2.0, help="seconds of work per slowdown run")
    ap.add_argument("--rate-secs", type=float, default=10.0)
    ap.add_argument("--rates", type=lambda s: [int(x) for x in s.split(",")],
                    default=[1000, 10000, 20000, 50000, 80000, 100000, 120000, 150000, 200000])
    ap.add_argument("--stallcheck", help="path of pyflame-stallcheck (default: beside "
                    "--record's build, bench/pyflame-stallcheck)")
    ap.add_argument("--quick", action="store_true", help="shorter runs, for a smoke test")
    ap.add_argument("--skip", default="", help="comma list of: cpu,slowdown,onoff,rate")
    ap.add_argument("--modes", type=lambda s: s.split(","),
                    default=["nonblocking", "no-bpf", "blocking"],
                    help="recorder modes compared: nonblocking (the default: a running thread "
                    "read in its own context), no-bpf (read from outside), blocking")
    ap.add_argument("--cycles", type=int, default=15, help="attach/detach cycles per config "
                    "of the alternation slowdown")
    ap.add_argument("--on-secs", type=float, default=2.0)
    ap.add_argument("--off-secs", type=float, default=2.0)
    args = ap.parse_args()
    if not args.stallcheck:
        args.stallcheck = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
            args.record))), "bench", "pyflame-stallcheck")
    if args.quick:
        args.secs, args.repeat, args.work, args.rate_secs = 2.0, 3, 0.5, 2.0
        args.cpu_repeat = 1
        args.cycles = 3
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
        if "onoff" not in skip:
            onoff(args, py, tmp)
        for mode in args.modes:
            if "rate" not in skip and mode != "blocking":
                max_rate(args, py, tmp, mode)
    return 0


if __name__ == "__main__":
    sys.exit(main())
