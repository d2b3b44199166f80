#!/usr/bin/env python3
"""Benchmark: pyflame-record left on, with --rotate, over a server that keeps
making tasks or threads (a program that prints numbers, not a test).

- tasks: the target makes 10 asyncio tasks every 10 ms (1,000 a second,
  about 100 alive at any time), each `handle` -> asyncio.sleep for 50-150
  ms, none named, so CPython names them "Task-<counter>": like a server's
  request tasks; recorded with `--async`.
- threads: the target starts 5 threads every 10 ms (a thread per request,
  as socketserver's ThreadingMixIn does; about 500 a second, 20-80 ms each,
  sleeping in 5 ms steps).
- processes: a service's workers come and go: three worker processes at any
  time, each with two busy threads, each living 1.5 s (about 2 new
  processes a second), recorded with `--match` (and --bpf, say, after --).
Each is recorded with `--rotate 10s` at 100 Hz (processes: `--keep 30s`
too). For processes, the recorder's RSS should stop growing once its
caches are warm, however many workers it has seen: printed, its growth per
worker started over the second half of the run. Printed: the recorder's RSS
every 10 s, and per file its size, threads (streams: tasks' too), stacks,
frames and task frames. A file should hold what its own 10 s hold, not
everything seen since the start: every whole file about the size of the
first. Usage:

  python3 bench/churnbench.py --record build/record/pyflame-record \\
      [--python PATH] [--seconds 60] [--kinds tasks,threads,processes]
      [-- EXTRA pyflame-record OPTIONS]
"""
import argparse
import glob
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

TASKS = r'''
import asyncio, random, sys

async def handle(i):
    await asyncio.sleep(random.uniform(0.05, 0.15))

async def main(secs):
    loop = asyncio.get_running_loop()
    end = loop.time() + secs
    n = 0
    while loop.time() < end:
        for _ in range(10):
            asyncio.ensure_future(handle(n))
            n += 1
        await asyncio.sleep(0.01)
    print("target: %d tasks made" % n)

asyncio.run(main(float(sys.argv[1])))
'''

THREADS = r'''
import random, sys, threading, time

def work():
    end = time.time() + random.uniform(0.02, 0.08)
    while time.time() < end:
        time.sleep(0.005)

t0 = time.time()
n = 0
while time.time() - t0 < float(sys.argv[1]):
    for _ in range(5):
        threading.Thread(target=work).start()
        n += 1
    time.sleep(0.01)
print("target: %d threads made" % n)
'''

PROCESSES = r'''
import os, subprocess, sys, threading, time

if sys.argv[1] == "worker":
    end = time.time() + 1.5
    def spin():
        x = 0
        while time.time() < end:
            x += 1
    ts = [threading.Thread(target=spin) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    sys.exit(0)
secs, tag, count = float(sys.argv[2]), sys.argv[3], sys.argv[4]
t0 = time.time()
n = 0
procs = []
while time.time() - t0 < secs:
    procs = [p for p in procs if p.poll() is None]
    while len(procs) < 3:
        procs.append(subprocess.Popen([sys.executable, __file__, "worker", tag]))
        n += 1
        with open(count + ".tmp", "w") as f:
            f.write("%d\n" % n)
        os.replace(count + ".tmp", count)
    time.sleep(0.05)
for p in procs:
    p.wait()
print("target: %d worker processes made" % n)
'''


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def run(args, kind):
    print("== %s" % kind)
    sys.stdout.flush()
    tmp = tempfile.mkdtemp(prefix="pyflame-churnbench-")
    script = os.path.join(tmp, "target.py")
    with open(script, "w") as f:
        f.write({"tasks": TASKS, "threads": THREADS, "processes": PROCESSES}[kind])
    out = os.path.join(tmp, "churn.db")
    count = os.path.join(tmp, "workers")
    sup = None
    if kind == "processes":
        tag = "churnbench-%d" % os.getpid()
        rec = subprocess.Popen([args.record, "-q", "--match", "worker " + tag, "--rotate", "10s",
                                "--keep", "30s", "-o", out] + args.extra)
        time.sleep(1)
        sup = subprocess.Popen([args.python, script, "supervise", str(args.seconds), tag, count])
    else:
        rec = subprocess.Popen([args.record] + (["--async"] if kind == "tasks" else []) +
                               ["-q", "--rotate", "10s", "-o", out] + args.extra +
                               ["--", args.python, script, str(args.seconds)])
    rss = []
    t0 = time.time()
    while (sup or rec).poll() is None:
        time.sleep(10)
        r = rss_kb(rec.pid)
        try:
            with open(count) as f:
                made = int(f.read())
        except (OSError, ValueError):
            made = 0
        if r is not None:
            rss.append((time.time() - t0, r, made))
    if sup:
        time.sleep(2)
        rec.send_signal(signal.SIGINT)
    rec.wait()
    print("recorder RSS: " + ", ".join("%.0f s %.1f MB" % (t, r / 1024.0) for t, r, _ in rss))
    if sup and len(rss) >= 4:
        (ta, ra, wa), (tb, rb, wb) = rss[len(rss) // 2], rss[-1]
        print("workers started: %d; RSS from %.0f s (%d workers, %.1f MB) to %.0f s (%d, %.1f MB):"
              " %.2f KB per worker" % (wb, ta, wa, ra / 1024.0, tb, wb, rb / 1024.0,
                                       (rb - ra) / float(max(wb - wa, 1))))
    files = sorted(glob.glob(os.path.join(tmp, "churn-*.db")))
    print("%-28s %9s %8s %8s %7s %11s %9s" % ("file", "size KB", "threads", "stacks", "frames",
                                              "task frames", "samples"))
    for path in files:
        con = sqlite3.connect(path)
        q = lambda sql: con.execute(sql).fetchone()[0]
        print("%-28s %9.0f %8d %8d %7d %11d %9d" % (
            os.path.basename(path), os.path.getsize(path) / 1024.0,
            q("SELECT count(*) FROM threads"), q("SELECT count(*) FROM stacks"), q("SELECT count(*) FROM frames"),
            q("SELECT count(*) FROM frames WHERE kind = 3"),
            q("SELECT coalesce(sum(samples), 0) FROM threads")))
        con.close()
    if len(files) >= 3 and len(rss) >= 2 and not sup:
        # The last file is cut short by the target's exit: compare whole ones.
        first, last = os.path.getsize(files[0]), os.path.getsize(files[-2])
        print("file growth, last whole file / first: %.2f; RSS, last / first: %.2f"
              % (last / float(first), rss[-1][1] / float(rss[0][1])))
    print("files in %s" % tmp)
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--kinds", default="tasks,threads")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.extra = extra
    for kind in args.kinds.split(","):
        run(args, kind)


if __name__ == "__main__":
    main()
