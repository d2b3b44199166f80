#!/usr/bin/env python3
"""What a --blocking pass costs the recorder in a process of many threads.

A target with N threads asleep in time.sleep() and 2 spinning is attached
with `pyflame-record --blocking -r 100 -d SECONDS -p PID`; the recorder's
CPU (meta recorder_cpu_ns) is divided by the passes made (duration x rate,
less the missed deadlines). With two builds (--record twice), they run in
turn, round after round, on a fresh target each, so that the machine's
noise falls on both; medians are printed at the end.

  python3 bench/manythreads.py --record /tmp/build-old/record/pyflame-record \\
      --record build/record/pyflame-record --threads 2000 --rounds 3

A benchmark, not a test: it prints numbers.
"""
import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

TARGET = r'''
import sys, threading, time
def nap():
    time.sleep(3600)
def spin():
    while True:
        sum(range(1000))
for i in range(int(sys.argv[1])):
    threading.Thread(target=nap, daemon=True).start()
for i in range(2):
    threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
time.sleep(3600)
'''


def one(record, py, script, threads, seconds, rate, db):
    target = subprocess.Popen([py, script, str(threads)], stdout=subprocess.PIPE,
                              universal_newlines=True)
    try:
        if target.stdout.readline().strip() != "ready":
            raise RuntimeError("the target did not start")
        time.sleep(0.5)
        subprocess.run([record, "-q", "-f", "--blocking", "-r", str(rate), "-d", str(seconds),
                        "-p", str(target.pid), "-o", db], check=True)
    finally:
        target.kill()
        target.wait()
    con = sqlite3.connect(db)
    meta = dict(con.execute("SELECT key, value FROM meta"))
    con.close()
    dur = int(meta["duration_ns"]) / 1e9
    missed = int(meta.get("missed_deadlines", 0))
    passes = dur * rate - missed
    return int(meta["recorder_cpu_ns"]) / 1e3 / passes, missed, int(meta["samples"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", action="append", required=True, help="a pyflame-record (twice: A/B)")
    ap.add_argument("--python", default=os.path.expanduser("~/.pyenv/versions/3.12.1/bin/python"))
    ap.add_argument("--threads", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--rate", type=int, default=100)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="pyflame-manythreads-")
    script = os.path.join(tmp, "target.py")
    with open(script, "w") as f:
        f.write(TARGET)
    per = {r: [] for r in args.record}
    print("%d threads asleep + 2 spinning, --blocking at %d Hz for %d s, %s" % (
        args.threads, args.rate, args.seconds, args.python))
    for rnd in range(args.rounds):
        for rec in args.record:
            us, missed, samples = one(rec, args.python, script, args.threads, args.seconds,
                                      args.rate, os.path.join(tmp, "run.db"))
            per[rec].append((us, missed))
            print("round %d  %-45s %7.0f us CPU per pass, %4d missed, %d thread-samples" % (
                rnd + 1, rec, us, missed, samples))
            sys.stdout.flush()
    for rec in args.record:
        print("median   %-45s %7.0f us CPU per pass, %4.0f missed" % (
            rec, statistics.median(u for u, _ in per[rec]),
            statistics.median(m for _, m in per[rec])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
