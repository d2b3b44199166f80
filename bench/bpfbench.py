#!/usr/bin/env python3
"""Benchmark of pyflame-record --bpf, the in-kernel sampler, beside the
default mode in the same run (a program that prints numbers, not a test).

1. Cost per sample: a CPU-bound workload (bench/workloads/deep.py) with a
   30- and a 100-deep stack, in 1 busy thread and in 8, recorded at 100 Hz
   and 1 kHz in each mode (-p, --secs seconds, medians of --repeat runs);
   depth "30d"/"100d": a chain of that many different functions (every frame
   its own code object, which --bpf reads for its identity), else one
   function recursing; threads "8s": 8 threads of which 7 sleep at that
   depth (the one busy thread among others, none contending for the GIL).
   For each: samples, the recorder's own CPU time per sample (meta
   recorder_cpu_ns: both its threads, wake-ups and commits included), the
   in-kernel sampler's time per sample (meta bpf_run_ns, measured inside
   its timer callbacks: the walk, the lookups, the ring buffer; not the
   timer interrupt around it), and their sum. 'walk us' is bpf_run_ns per
   callback that found a thread to sample (meta bpf_sample_ns: finding the
   thread, walking, sending; callbacks on CPUs with nothing to sample cost
   a lookup and the timer's restart, in bpf us). The default mode samples every thread each
   period; --bpf the threads on a CPU at their CPU's instant: with 8
   threads and the GIL, about one per CPU at a time, so the columns per
   second are printed too.
   Then the callbacks that find nothing to sample (--bpf recording a
   sleeping process): their time per fire.
2. The workload's slowdown by alternation (bench/recordbench.py's method:
   one workload, the recorder attached and detached in turn), each mode at
   100 Hz and 1 kHz, with a sham (no recorder) for the noise floor, and
   bpf-timers: --bpf recording a sleeping decoy, so that its timers fire on
   the workload's CPU with nothing to walk there (the interrupts' share).

The workload runs on CPU 0, the recorder on CPU 1 (taskset); the in-kernel
sampler's timers run on every CPU. Needs root (BPF). Usage:

  python3 bench/bpfbench.py --record build/record/pyflame-record \\
      --report build/report/pyflame-report [--python PATH] [--quick]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import recordbench  # noqa: E402  (pin, info, meta_int, place_writer, onoff)

DEEP = os.path.join(HERE, "workloads", "deep.py")
MODES = {"default": [], "bpf": ["--bpf"]}


def start(py, depth, threads, distinct=False, sleeping=False):
    p = subprocess.Popen(recordbench.pin(0) + [py, DEEP, str(depth), "0", str(threads)] +
                         (["distinct"] if distinct else ["sleeping"] if sleeping else []),
                         stdout=subprocess.PIPE, universal_newlines=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    return p


def record(args, pid, rate, mode, db):
    cmd = recordbench.pin(1) + [args.record, "-q", "-f", "-o", db, "-p", str(pid), "-r",
                                str(rate), "-d", str(args.secs)] + MODES[mode]
    p = subprocess.Popen(cmd)
    recordbench.place_writer(p.pid, 0)
    if p.wait() != 0:
        raise subprocess.CalledProcessError(p.returncode, cmd)
    return recordbench.info(args.report, db)


def cost(args, py, tmp):
    print("\n## CPU per sample (%s), medians of %d recordings of %gs" % (py, args.repeat,
                                                                       args.secs))
    print("%-5s %-7s %-7s %5s %8s %9s %9s %9s %9s %10s" % (
        "depth", "threads", "mode", "rate", "samples", "rec us", "bpf us", "total us",
        "walk us", "total ms/s"))
    rows = []
    configs = [(d, t, x, False) for d in (30, 100) for t in (1, 8) for x in (False, True)
               if not (x and t > 1)] + [(30, 8, False, True)]
    for depth, threads, distinct, sleeping in configs:
        name = "%d%s" % (depth, "d" if distinct else "")
        label = "%s:%d%s" % (name, threads, "s" if sleeping else "")
        if args.configs and label not in args.configs.split(","):
            continue
        if True:
            w = start(py, depth, threads, distinct, sleeping)
            try:
                for rate in (100, 1000):
                    for mode in ("default", "bpf"):
                        runs = []
                        for _ in range(args.repeat):
                            db = os.path.join(tmp, "cost.db")
                            inf = record(args, w.pid, rate, mode, db)
                            n = inf["samples"]
                            if not n:
                                continue
                            rec = recordbench.meta_int(inf, "recorder_cpu_ns") or 0
                            bpf = recordbench.meta_int(inf, "bpf_run_ns") or 0
                            walk = recordbench.meta_int(inf, "bpf_sample_ns") or 0
                            found = recordbench.meta_int(inf, "bpf_samples") or 0
                            dur = inf["duration_ns"] / 1e9
                            runs.append((n, rec / n / 1e3, bpf / n / 1e3, (rec + bpf) / n / 1e3,
                                         walk / found / 1e3 if found else 0.0,
                                         (rec + bpf) / dur / 1e6))
                        if not runs:
                            continue
                        med = [statistics.median(r[i] for r in runs) for i in range(6)]
                        print("%-5s %-7s %-7s %5d %8d %9.2f %9.2f %9.2f %9s %10.3f" % (
                            name, "%d%s" % (threads, "s" if sleeping else ""), mode, rate,
                            med[0], med[1], med[2], med[3],
                            "%.2f" % med[4] if mode == "bpf" else "-", med[5]))
                        sys.stdout.flush()
                        rows.append((depth, threads, distinct, mode, rate, med))
            finally:
                w.kill()
                w.wait()
    return rows


def timers_alone(args, py, tmp):
    """The in-kernel sampler's cost when its timers find nothing to sample: --bpf
    recording a sleeping process, with a busy one (not recorded) on CPU 0."""
    print("\n## Timer callbacks with nothing to sample (%s), medians of %d recordings of %gs"
          % (py, args.repeat, args.secs))
    print("%5s %8s %12s %14s" % ("rate", "fires", "bpf us/fire", "bpf ms/s, all"))
    w = start(py, 30, 1)
    decoy = subprocess.Popen(recordbench.pin(1) + [py, "-c", "import time; time.sleep(1e6)"])
    time.sleep(0.5)
    try:
        for rate in (100, 1000):
            runs = []
            for _ in range(args.repeat):
                inf = record(args, decoy.pid, rate, "bpf", os.path.join(tmp, "idle.db"))
                fires = recordbench.meta_int(inf, "bpf_timer_fires") or 0
                run = recordbench.meta_int(inf, "bpf_run_ns") or 0
                if fires:
                    runs.append((fires, run / fires / 1e3, run / (inf["duration_ns"] / 1e9) / 1e6))
            if runs:
                med = [statistics.median(r[i] for r in runs) for i in range(3)]
                print("%5d %8d %12.3f %14.3f" % (rate, med[0], med[1], med[2]))
                sys.stdout.flush()
    finally:
        for p in (w, decoy):
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--python", default="/root/.pyenv/versions/3.12.1/bin/python")
    ap.add_argument("--secs", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cycles", type=int, default=9, help="attach/detach cycles per config")
    ap.add_argument("--on-secs", type=float, default=2.0)
    ap.add_argument("--off-secs", type=float, default=2.0)
    ap.add_argument("--skip", default="", help="comma list of: cost,timers,onoff")
    ap.add_argument("--configs", default="", help="cost: only these, comma list of "
                    "DEPTH[d]:THREADS[s] (e.g. 30:1,30:8s), default all")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.secs, args.repeat, args.cycles = 2.0, 1, 3
    skip = args.skip.split(",")
    print("bpfbench: %s, %d CPUs, kernel %s" % (time.strftime("%Y-%m-%d %H:%M:%S"),
                                               os.cpu_count(), os.uname().release))
    print("timer wake-up cost here: %.1f us (recordbench.wake_floor, 1 ms sleeps)"
          % recordbench.wake_floor())
    tmp = tempfile.mkdtemp(prefix="bpfbench-")
    if "cost" not in skip:
        cost(args, args.python, tmp)
    if "cost" not in skip and "timers" not in skip:
        timers_alone(args, args.python, tmp)
    if "onoff" not in skip:
        recordbench.MODE_FLAGS["bpf"] = ["--bpf"]
        recordbench.MODE_FLAGS["bpf-timers"] = ["--bpf"]
        args.modes = ["nonblocking", "bpf", "bpf-timers"]
        print("\n(bpf-timers: --bpf recording a sleeping decoy process, not the workload: its")
        print("timers fire on the workload's CPU as well and find nothing to walk there; the")
        print("slowdown of the timer interrupts alone, without the walk)")
        recordbench.onoff(args, args.python, tmp)


if __name__ == "__main__":
    main()
