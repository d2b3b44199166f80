#!/usr/bin/env python3
"""Sample by sample: are oncpu's reads wrong, or its instants? (a diagnostic, not a test)

bench/accuracy.py says how far a share is from the truth; this says why. It
records the oncpu workload once (bench/accuracy/workload.py: a thread busy and
asleep in turn, logging each sleeping call's window on CLOCK_MONOTONIC) under
perf's switch records of its thread, then compares each sample of that thread
with the truth at the sample's own instant:

  - the time average: the share of the run spent in idle_sleep, and on CPU
    (outside the sleeping calls, plus the time it ran inside them);
  - the truth at the instants: the share of the samples' instants that fell
    in a sleeping call, and at which the thread was on CPU (switched in, or
    switched out by a preemption);
  - what was recorded: the share of samples in idle_sleep, and on CPU.

Reads that agree with the truth at their instants, and instants that differ
from the time average, point at the schedule (or at the program being
disturbed around the samples), not at the reading. It also prints how long
the thread ran inside each sleeping call by the switch records and by its
own CPU clock (why the clock cannot be the truth). Usage:

  python3 bench/oncpu_instants.py --record build/record/pyflame-record \\
      --extension build/libtrace/pyflame_sqlite --python PY \\
      [--mode blocking] [--rate 1000] [--secs 6] [--load 3]
  python3 bench/oncpu_instants.py --no-record --python PY   # the calls alone

--load N runs N busy loops beside it; --no-record runs the workload without
the recorder (only the per-call figures). Needs perf and the sqlite3 shell.
"""
import argparse
import bisect
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import accuracy  # noqa: E402  (switch_records, ran_in_windows)

WORKLOAD = os.path.join(HERE, "accuracy", "workload.py")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--record")
    ap.add_argument("--extension", help="the pyflame_sqlite extension, without .so")
    ap.add_argument("--no-record", action="store_true",
                    help="run the workload alone: only the time it ran inside its calls")
    ap.add_argument("--python", required=True)
    ap.add_argument("--mode", default="nonblocking", choices=["nonblocking", "blocking"])
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--secs", type=float, default=6)
    ap.add_argument("--load", type=int, default=0, help="busy loops to run beside it")
    args = ap.parse_args()
    if not args.no_record and not (args.record and args.extension):
        ap.error("--record and --extension are needed, unless --no-record")

    tmp = tempfile.mkdtemp(prefix="pyflame-instants-")
    db, tf, pd = (os.path.join(tmp, n) for n in ("run.db", "truth.json", "switch.data"))
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(args.load)]
    try:
        record = [] if args.no_record else [args.record, "-q", "-f", "-r", str(args.rate),
                                            "--" + args.mode, "-o", db, "--"]
        subprocess.run(["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "--switch-events",
                        "-e", "dummy", "-o", pd, "--"] + record +
                       [args.python, WORKLOAD, "oncpu", str(args.secs), tf,
                        "%.9f" % (1.0 / args.rate), "cpu"], check=True)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    with open(tf) as f:
        truth = json.load(f)
    recs = accuracy.switch_records("perf", pd, truth["tid"])
    times = [r[0] for r in recs]
    windows = sorted(tuple(w) for w in truth["windows"])
    starts = [w[0] for w in windows]
    avg = accuracy.oncpu_truth(dict(truth), recs)
    print("%s: %d sleeping calls of the worker, each ran %.1f us by the switch records, "
          "%.1f us by its own CPU clock" % (
              args.python, len(windows), avg["ran_per_call_us"],
              1e6 * truth["cpu_in_calls"] / len(windows)))
    on_avg = avg["on_cpu"]
    if args.no_record:
        return

    con = sqlite3.connect(db)
    meta = dict(con.execute("SELECT key, value FROM meta"))
    origin = int(meta["start_mono_ns"]) / 1e9
    ref = con.execute("SELECT ref FROM threads WHERE name = 'worker'").fetchone()[0]
    con.close()
    query = ("SELECT p.t_ns, p.state, st.value FROM pyflame_samples p JOIN stacks s "
             "ON s.id = p.stack JOIN frames f ON f.id = s.frame JOIN strings st "
             "ON st.id = f.function WHERE p.thread = %d" % ref)
    out = subprocess.run(["sqlite3", "-csv", "-cmd", ".load " + args.extension, db, query],
                         capture_output=True, text=True, check=True).stdout

    def in_call(t):
        i = bisect.bisect_right(starts, t) - 1
        return i >= 0 and t < windows[i][1]

    def on_cpu(t):
        if not in_call(t):
            return True
        i = bisect.bisect_right(times, t) - 1
        return recs[i][1] if i >= 0 else True

    n = idle_at = idle_rec = on_at = on_rec = agree = 0
    for line in out.splitlines():
        t_ns, state, function = line.split(",", 2)
        t = origin + int(t_ns) / 1e9
        if t < windows[0][0] or t > windows[-1][1]:
            continue
        n += 1
        i_at, o_at = in_call(t), on_cpu(t)
        i_rec, o_rec = function == "idle_sleep", bool(int(state) & 1)
        idle_at += i_at
        idle_rec += i_rec
        on_at += o_at
        on_rec += o_rec
        agree += i_at == i_rec and o_at == o_rec
    if not n:
        sys.exit("no samples of the worker thread")
    print("%s, %s at %d Hz, %d busy loops beside it: %d samples of the worker" % (
        args.python, args.mode, args.rate, args.load, n))
    print("%-10s %12s %18s %9s" % ("", "time average", "truth at instants", "recorded"))
    print("%-10s %11.2f%% %17.2f%% %8.2f%%" % ("idle_sleep", 100 * truth["idle_sleep"],
                                               100.0 * idle_at / n, 100.0 * idle_rec / n))
    print("%-10s %11.2f%% %17.2f%% %8.2f%%" % ("on CPU", 100 * on_avg, 100.0 * on_at / n,
                                               100.0 * on_rec / n))
    print("samples whose function and state both agree with the truth at their instant: "
          "%.2f%%; meta: schedule %s, held_over_samples %s, missed_deadlines %s" % (
              100.0 * agree / n, meta.get("schedule", "stratified"),
              meta.get("held_over_samples"), meta.get("missed_deadlines")))


if __name__ == "__main__":
    main()
