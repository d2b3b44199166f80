#!/usr/bin/env python3
"""Benchmark: pyflame-record --async left on over a server that keeps making
tasks (a program that prints numbers, not a test).

The target makes 10 tasks every 10 ms (1,000 a second, about 100 alive at
any time), each `handle` -> asyncio.sleep for 50-150 ms, none named, so
CPython names them "Task-<counter>": like a server's request tasks. It is
recorded with `--async --rotate 10s` at 100 Hz. Printed: the recorder's RSS
at each rotation, and per finished file its size, stacks, frames and task
frames. The trace should not grow with the number of tasks ever seen (they
share the frame "Task-N"), so every file is about the size of the one
before and the RSS stays flat. Usage:

  python3 bench/asyncchurn.py --record build/record/pyflame-record \\
      [--python PATH] [--seconds 60]
"""
import argparse
import glob
import os
import sqlite3
import subprocess
import sys
import tempfile
import time

TARGET = r'''
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


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--seconds", type=float, default=60)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="pyflame-asyncchurn-")
    script = os.path.join(tmp, "target.py")
    with open(script, "w") as f:
        f.write(TARGET)
    out = os.path.join(tmp, "churn.db")
    rec = subprocess.Popen([args.record, "--async", "-q", "--rotate", "10s", "-o", out, "--",
                            args.python, script, str(args.seconds)])
    rss = []
    t0 = time.time()
    while rec.poll() is None:
        time.sleep(10)
        r = rss_kb(rec.pid)
        if r is not None:
            rss.append((time.time() - t0, r))
    rec.wait()
    print("recorder RSS: " + ", ".join("%.0f s %.1f MB" % (t, r / 1024.0) for t, r in rss))
    files = sorted(glob.glob(os.path.join(tmp, "churn-*.db")))
    print("%-28s %9s %8s %7s %11s %9s" % ("file", "size KB", "stacks", "frames", "task frames",
                                          "samples"))
    for path in files:
        con = sqlite3.connect(path)
        q = lambda sql: con.execute(sql).fetchone()[0]
        print("%-28s %9.0f %8d %7d %11d %9d" % (
            os.path.basename(path), os.path.getsize(path) / 1024.0,
            q("SELECT count(*) FROM stacks"), q("SELECT count(*) FROM frames"),
            q("SELECT count(*) FROM frames WHERE kind = 3"),
            q("SELECT coalesce(sum(samples), 0) FROM threads")))
        con.close()
    if len(files) >= 3 and len(rss) >= 2:
        # The last file is cut short by the target's exit: compare whole ones.
        first, last = os.path.getsize(files[0]), os.path.getsize(files[-2])
        print("file growth, last whole file / first: %.2f; RSS, last / first: %.2f"
              % (last / float(first), rss[-1][1] / float(rss[0][1])))
    print("files in %s" % tmp)


if __name__ == "__main__":
    main()
