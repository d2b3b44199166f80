#!/usr/bin/env python3
"""Benchmark of pyflame-record --async (a program that prints numbers, not a test).

A target runs one event loop with N live tasks, each awaiting
work() -> asyncio.sleep (a three-deep await chain), plus the main task; it
is recorded for a few seconds at 100 Hz with and without --async, and the
recorder's own CPU time per sample (meta recorder_cpu_ns / samples, measured
around its sampling loop) is printed for N = 1, 100 and 10,000, with the
task samples written and the memory reads per sample where the recorder
prints them. With --pure the target blocks the _asyncio module: its tasks
are asyncio's pure-Python Task, read attribute by attribute. Usage:

  python3 bench/asyncbench.py --record build/record/pyflame-record \\
      [--python PATH] [--tasks 1,100,10000] [--seconds 5] [--pure]
"""
import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time

TARGET = r'''
import os, sys
if os.environ.get("PYFLAME_PURE_TASKS") == "1":
    sys.modules["_asyncio"] = None
import asyncio

async def leaf():
    await asyncio.sleep(3600)

async def work(i):
    await leaf()

async def main(n, ready):
    tasks = [asyncio.ensure_future(work(i)) for i in range(n)]
    await asyncio.sleep(0.5)
    open(ready, "w").close()
    await asyncio.sleep(3600)

loop = asyncio.new_event_loop()
asyncio.set_event_loop(loop)
loop.run_until_complete(main(int(sys.argv[1]), sys.argv[2]))
'''


def meta(db):
    con = sqlite3.connect(db)
    rows = dict(con.execute("SELECT key, value FROM meta"))
    con.close()
    return rows


def run(args, n, with_async, tmp):
    script = os.path.join(tmp, "target.py")
    with open(script, "w") as f:
        f.write(TARGET)
    ready = os.path.join(tmp, "ready")
    if os.path.exists(ready):
        os.unlink(ready)
    env = dict(os.environ, PYFLAME_PURE_TASKS="1" if args.pure else "0")
    target = subprocess.Popen([args.python, script, str(n), ready], env=env)
    try:
        deadline = time.time() + 60
        while not os.path.exists(ready) and time.time() < deadline:
            time.sleep(0.05)
        db = os.path.join(tmp, "run.db")
        cmd = [args.record, "-q", "-f", "-d", str(args.seconds), "-o", db, "-p", str(target.pid)]
        if with_async:
            cmd.insert(1, "--async")
        subprocess.run(cmd, check=True)
        m = meta(db)
        samples = int(m.get("samples", 0))
        cpu = int(m.get("recorder_cpu_ns", 0))
        return {
            "samples": samples,
            "task_samples": int(m.get("task_samples", 0)),
            "us_per_sample": cpu / 1000.0 / samples if samples else float("nan"),
        }
    finally:
        target.kill()
        target.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--tasks", default="1,100,10000")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--pure", action="store_true",
                    help="pure-Python tasks (the target cannot import _asyncio)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="pyflame-asyncbench-")
    print("python: %s" % subprocess.run([args.python, "--version"], stdout=subprocess.PIPE,
                                        universal_newlines=True).stdout.strip() +
          (", pure-Python tasks (no _asyncio)" if args.pure else ""))
    print("%8s  %14s  %14s  %10s  %12s" % ("tasks", "us/sample", "us/sample", "samples",
                                           "task samples"))
    print("%8s  %14s  %14s  %10s  %12s" % ("", "(threads)", "(--async)", "", "per sample"))
    for n in [int(x) for x in args.tasks.split(",")]:
        plain = run(args, n, False, tmp)
        tasks = run(args, n, True, tmp)
        per = tasks["task_samples"] / tasks["samples"] if tasks["samples"] else 0
        print("%8d  %14.1f  %14.1f  %10d  %12.1f" % (n, plain["us_per_sample"],
                                                     tasks["us_per_sample"], tasks["samples"],
                                                     per))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
