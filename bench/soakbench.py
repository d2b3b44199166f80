#!/usr/bin/env python3
"""Soak: a long recording, compressed. Does the recorder stay flat?

An hour at 1 kHz is 3.6 million samples per thread; this takes as many in
a fraction of the time, at a higher rate, of a workload built to make every
cache grow if it can: it compiles new code all the time (new code objects,
new frames, new stacks), starts and ends threads without pause, and recurses
to random depths. Every --every seconds it prints the recorder's resident
memory, its CPU time per sample over the last interval, the trace's size and
bytes per sample, from /proc and the trace's own meta (committed once a
second). Flat means: memory does not grow with time once the program's own
variety is seen, CPU per sample does not grow, and the trace grows in
proportion to the samples.

Usage: soakbench.py --record PATH --python PATH [--rate 10000] [--secs 360]
                    [--every 30] [-- EXTRA pyflame-record OPTIONS]
The default, 360 s at 10 kHz, is 3.6 M samples of the main thread. At such
a rate the in-context reads of a running thread (an IPI round trip each, ~57
us on our VMs) do not keep up: pass -- --no-bpf, or a lower rate.
"""
import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time

WORKLOAD = r'''
import random, sys, threading, time
sys.setrecursionlimit(5000)
def rec(n):
    return rec(n - 1) if n else 0
def churn(stop):
    # A short-lived thread every 20 ms (each one is recorded, and kept).
    while not stop[0]:
        t = threading.Thread(target=rec, args=(random.randint(1, 200),))
        t.start()
        t.join()
        time.sleep(0.02)
stop = [False]
c = threading.Thread(target=churn, args=(stop,))
c.start()
end = time.time() + float(sys.argv[1])
i = 0
while time.time() < end:
    # A new code object every time, as templates or lambdas in a loop make them,
    # under one of 500 names: what the trace must keep stays bounded.
    code = "def made_%d(n):\n    return rec(n)\n" % (i % 500)
    exec(compile(code, "<made %d>" % (i % 50), "exec"))
    eval("made_%d(%d)" % (i % 500, random.randint(1, 400)))
    i += 1
stop[0] = True
c.join()
print("made %d functions" % i)
'''


def proc_stat(pid):
    """(resident bytes, CPU seconds) of a process."""
    with open("/proc/%d/status" % pid) as f:
        rss = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    return rss, (int(fields[11]) + int(fields[12])) / tick


def meta_samples(db):
    try:
        con = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=5)
        row = con.execute("SELECT value FROM meta WHERE key = 'samples'").fetchone()
        con.close()
        return int(row[0]) if row else 0
    except sqlite3.Error:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--record", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--rate", default="10000")
    ap.add_argument("--secs", type=float, default=360)
    ap.add_argument("--every", type=float, default=30)
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="pyflame-soak-")
    db = os.path.join(tmp, "soak.db")
    script = os.path.join(tmp, "soak.py")
    with open(script, "w") as f:
        f.write(WORKLOAD)
    rec = subprocess.Popen([args.record, "-q", "-f", "-r", args.rate, "-o", db] + args.extra +
                           ["--", args.python, script, str(args.secs)])
    print("%d s at %s Hz, %s %s" % (args.secs, args.rate, args.python, " ".join(args.extra)))
    print("%7s %10s %9s %12s %9s %9s" % ("TIME_S", "SAMPLES", "RSS_MB", "US_CPU/SAMP",
                                           "TRACE_MB", "B/SAMPLE"))
    start = time.time()
    last_cpu = last_n = 0
    rows = []
    while rec.poll() is None:
        time.sleep(args.every)
        if rec.poll() is not None:
            break
        rss, cpu = proc_stat(rec.pid)
        n = meta_samples(db)
        size = os.path.getsize(db)
        if n is None or n == last_n:
            continue
        us = 1e6 * (cpu - last_cpu) / (n - last_n)
        rows.append((time.time() - start, n, rss, us, size))
        print("%7.0f %10d %9.1f %12.2f %9.1f %9.2f" % (
            time.time() - start, n, rss / 2**20, us, size / 2**20, size / n), flush=True)
        last_cpu, last_n = cpu, n
    rec.wait()
    if len(rows) >= 3:
        first, last = rows[len(rows) // 5], rows[-1]
        print("from %.0f s to %.0f s: samples x%.2f, RSS x%.2f, CPU per sample x%.2f, "
              "trace bytes per sample x%.2f" % (
                  first[0], last[0], last[1] / first[1], last[2] / first[2], last[3] / first[3],
                  (last[4] / last[1]) / (first[4] / first[1])))
    try:
        # What the recorder had to intern, which is most of its memory.
        con = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=5)
        counts = [con.execute("SELECT count(*) FROM %s" % t).fetchone()[0]
                  for t in ("stacks", "frames", "threads")]
        con.close()
        print("in the trace: %d distinct stacks, %d frames, %d threads" % tuple(counts))
    except sqlite3.Error as e:
        print("the trace's tables cannot be read: %s" % e)
    print("recorder exit status %d; trace kept in %s" % (rec.returncode, db))
    return rec.returncode


if __name__ == "__main__":
    sys.exit(main())
