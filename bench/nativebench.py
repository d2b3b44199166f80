#!/usr/bin/env python3
"""Benchmark of pyflame-record --native (a program that prints numbers, not a test).

A workload with a Python stack 30 deep calling into a small C extension
(built here against the interpreter's headers) that recurses 10 C frames
deep and spins: with the interpreter's own frames below, about 20 native
frames on 3.11+ (one eval loop activation runs every Python frame), more
before (each Python call is a few C frames). For each interpreter given:
  1. the recorder's CPU time per sample (meta recorder_cpu_ns / samples) with
     --native, beside --blocking without native stacks, the default mode,
     --no-bpf, --bpf and --bpf --native (native stacks copied in the
     sampling interrupt, no thread held), in the same run (the four alternate on one workload process,
     --rounds times each); and the same in the steady state: the recorder's
     CPU time (every thread's schedstat) from 1 s after it starts to 0.5 s
     before it ends, over the samples the trace holds in that window. The
     --no-bpf row is the floor of any sample on the machine: a timer
     wake-up and one read from outside;
  2. inside it, from the recorder's own counters (meta native_*): the
     capture while the thread is held (registers, one copy of the stack) per
     thread sample, and the unwinding per stack, warm (no address named for
     the first time) and overall;
  3. the workload's slowdown at --rate (default 100 Hz): fixed work timed
     unprofiled, under --blocking, --native and --bpf --native, interleaved,
     medians;
  4. --native over two programs as users run them (--real-seconds each,
     twice, whole recordings): a pure-Python loop, whose samples land on
     thousands of the interpreter's addresses (each named the first time),
     and 8 threads asleep in time.sleep beside a busy one (each sleeping
     thread's stack read from /proc every sample).
For --bpf modes the in-kernel program's own time per sample (meta
bpf_run_ns) is printed beside the recorder's and added to it.
The workload runs on CPU 0, the recorder on CPU 1 (taskset) when there are
two. Usage:

  python3 bench/nativebench.py --record build/record/pyflame-record \\
      --report build/report/pyflame-report \\
      [--python ~/.pyenv/versions/3.12.1/bin/python ...] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from recordbench import wake_floor

EXT_C = r'''
#include <Python.h>

static volatile double bench_sink;

__attribute__((noinline)) static double bench_spin(long n)
{
        double s = 0;
        for (long i = 0; i < n; i++) s += (double)i * 0.5 + bench_sink;
        return s;
}

__attribute__((noinline)) static double bench_deep(int depth, long n)
{
        double r = depth <= 1 ? bench_spin(n) : bench_deep(depth - 1, n);
        bench_sink += 1;
        return r;
}

static PyObject *deep(PyObject *self, PyObject *args)
{
        int depth;
        long n;
        if (!PyArg_ParseTuple(args, "il", &depth, &n))
                return NULL;
        bench_sink = bench_deep(depth, n);
        Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"deep", deep, METH_VARARGS, NULL}, {NULL, NULL, 0, NULL}};

#if PY_MAJOR_VERSION >= 3
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "benchext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_benchext(void)
{
        return PyModule_Create(&module);
}
#else
PyMODINIT_FUNC initbenchext(void)
{
        Py_InitModule("benchext", methods);
}
#endif
'''

WORK_PY = r'''
import sys
import time

sys.path.insert(0, sys.argv[1])
import benchext


def recurse(depth, fn):
    if depth <= 1:
        return fn()
    return recurse(depth - 1, fn)


def unit():
    benchext.deep(10, 20000)


mode = sys.argv[2]
if mode == "forever":
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    recurse(30, lambda: [unit() for _ in iter(int, 1)])
else:
    iters = int(sys.argv[3])
    t0 = time.time()
    recurse(30, lambda: [unit() for _ in range(iters)])
    sys.stdout.write("%.6f\n" % (time.time() - t0))
'''

# Programs as users run them, for what --native costs there: a pure-Python loop (its
# samples land on thousands of addresses of the interpreter, each named once), and a
# service-like program with 8 threads asleep in time.sleep and one busy (each asleep
# thread's stack is read from /proc every sample).
REAL_PY = r'''
import sys
import threading
import time


def sleeper():
    while True:
        time.sleep(0.05)


def work(n):
    s = 0
    for i in range(n):
        s += i * i % 7
        if s > 1000:
            s = s // 3
    d = {}
    for i in range(n // 10):
        d[str(i)] = [i, i + 1]
    return s + len(d)


if sys.argv[1] == "sleepers":
    for _ in range(8):
        t = threading.Thread(target=sleeper)
        t.daemon = True
        t.start()
sys.stdout.write("ready\n")
sys.stdout.flush()
while True:
    work(10000)
'''


def pin(cpu):
    return ["taskset", "-c", str(cpu)] if os.path.exists("/usr/bin/taskset") and \
        os.cpu_count() and os.cpu_count() > 1 else []


def build(py, work):
    inc = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                         stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    src = os.path.join(work, "benchext.c")
    with open(src, "w") as f:
        f.write(EXT_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-g", "-I", inc, "-o",
                    os.path.join(work, "benchext.so"), src], check=True)
    with open(os.path.join(work, "work.py"), "w") as f:
        f.write(WORK_PY)
    with open(os.path.join(work, "real.py"), "w") as f:
        f.write(REAL_PY)


def meta(report, db):
    out = subprocess.run([report, "info", "--format", "json", db], stdout=subprocess.PIPE,
                         universal_newlines=True, check=True).stdout
    return {k: v for k, v in json.loads(out).get("meta", {}).items()}


def cpu_ns(pid):
    """CPU time of every thread of process pid so far, in ns (schedstat: ns, not clock ticks)."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that exited meanwhile
    return total


def samples_between(args, db, start_ns, t0, t1):
    """Samples of the trace between CLOCK_MONOTONIC instants t0 and t1 (seconds)."""
    out = subprocess.run([args.report, "--from", "%.6fs" % (t0 - start_ns / 1e9),
                          "--to", "%.6fs" % (t1 - start_ns / 1e9), db],
                         stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    return sum(int(line.rsplit(" ", 1)[1]) for line in out.splitlines() if line.strip())


def record(args, pid, db, mode, secs):
    """Record pid for secs with `mode` (an option of pyflame-record); meta, plus the
    steady state: the recorder's CPU per sample from 1 s after it starts to 0.5 s
    before it ends (attaching, reading symbol tables and finishing the trace are
    left out: costs of a recording, not of a sample)."""
    cmd = pin(1) + [args.record, "-q", "-f", "-r", str(args.rate), "-d", str(secs), "-o", db,
                    "-p", str(pid)] + (mode.split() if mode else [])
    rec = subprocess.Popen(cmd)
    time.sleep(1.0)
    c0, t0 = cpu_ns(rec.pid), time.monotonic()
    time.sleep(max(0.5, secs - 1.5))
    c1, t1 = cpu_ns(rec.pid), time.monotonic()
    if rec.wait() != 0:
        raise SystemExit("pyflame-record failed: %s" % " ".join(cmd))
    m = meta(args.report, db)
    n = samples_between(args, db, int(m["start_mono_ns"]), t0, t1)
    m["steady_cpu_us"] = (c1 - c0) / 1000.0 / n if n else float("nan")
    return m


def per(m, num, den):
    d = int(m.get(den) or 0)
    return int(m.get(num) or 0) / d / 1000.0 if d else float("nan")


def timed(args, py, work, iters, mode):
    cmd = pin(0) + [py, os.path.join(work, "work.py"), work, "fixed", str(iters)]
    if mode:
        cmd = pin(1) + [args.record, "-q", "-f", "-r", str(args.rate), "-o",
                        os.path.join(work, "slow.db")] + mode.split() + ["--"] + cmd
    out = subprocess.run(cmd, stdout=subprocess.PIPE, universal_newlines=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def bench(args, py):
    work = tempfile.mkdtemp(prefix="pyflame-nativebench-")
    build(py, work)
    ver = subprocess.run([py, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                         stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    p = subprocess.Popen(pin(0) + [py, os.path.join(work, "work.py"), work, "forever"],
                         stdout=subprocess.PIPE, universal_newlines=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    modes = (("default", None), ("no-bpf", "--no-bpf"), ("blocking", "--blocking"),
             ("native", "--native"), ("bpf", "--bpf"), ("bpf-native", "--bpf --native"))
    if args.modes:
        modes = tuple(m for m in modes if m[0] in args.modes.split(","))
    rows = {name: [] for name, _ in modes}
    try:
        for _ in range(args.rounds):
            for name, opt in modes:
                m = record(args, p.pid, os.path.join(work, "t.db"), opt, args.seconds)
                rows[name].append(m)
    finally:
        p.kill()
        p.wait()
    if modes:
        print("Python %s (%s), rate %g Hz, %d rounds of %g s each mode" % (
            ver, py, args.rate, args.rounds, args.seconds))
        print("  recorder CPU per sample, us: whole recording (meta) | steady state; medians "
              "(runs)")
    else:
        print("Python %s (%s)" % (ver, py))
    for name, _ in modes:
        ms = rows[name]
        cpu = [per(m, "recorder_cpu_ns", "samples") for m in ms]
        steady = [m["steady_cpu_us"] for m in ms]
        # --bpf: the program's own time in the kernel (meta bpf_run_ns) is the rest.
        prog = [per(m, "bpf_run_ns", "samples") for m in ms] if name.startswith("bpf") else None
        print("  %-10s %6.1f (%s) | %6.1f (%s)%s" % (
            name, statistics.median(cpu), ", ".join("%.1f" % c for c in cpu),
            statistics.median(steady), ", ".join("%.1f" % c for c in steady),
            "" if prog is None else " + in the kernel %.1f (%s) = %.1f steady" % (
                statistics.median(prog), ", ".join("%.1f" % c for c in prog),
                statistics.median([a + b for a, b in zip(steady, prog)]))))
    for name in ("native", "bpf-native"):
        if rows.get(name):
            native_rows(name, rows[name])
    if args.real_seconds > 0:
        real_rows(args, py, work)
    if args.no_slowdown:
        return
    # Slowdown: fixed work, interleaved, medians.
    iters = args.iters
    t = {None: [], "--blocking": [], "--native": [], "--bpf --native": []}
    for _ in range(args.rounds):
        for mode in t:
            t[mode].append(timed(args, py, work, iters, mode))
    base = statistics.median(t[None])
    for mode in ("--blocking", "--native", "--bpf --native"):
        print("  %-14s target slowdown at %g Hz: %.3fx (%.2f s vs %.2f s unprofiled)" % (
            mode, args.rate, statistics.median(t[mode]) / base, statistics.median(t[mode]),
            base))
    sys.stdout.flush()


def real_rows(args, py, work):
    """--native over programs as users run them, args.real_seconds each, twice."""
    for kind in ("loop", "sleepers"):
        p = subprocess.Popen(pin(0) + [py, os.path.join(work, "real.py"), kind],
                             stdout=subprocess.PIPE, universal_newlines=True)
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        ms = []
        try:
            for _ in range(2):
                ms.append(record(args, p.pid, os.path.join(work, "real.db"), "--native",
                                 args.real_seconds))
        finally:
            p.kill()
            p.wait()
        what = ("a pure-Python loop" if kind == "loop" else
                "8 threads in time.sleep, one busy")
        # Whole recordings: naming every address the first time it is met is part of it.
        print("  --native, %s, %g s (2 runs): recorder CPU per thread sample %s us; "
              "unwinding per stack %s us (warm %s); capture per thread %s us; "
              "%s addresses named" % (
                  what, args.real_seconds,
                  " / ".join("%.1f" % per(m, "recorder_cpu_ns", "samples") for m in ms),
                  " / ".join("%.1f" % per(m, "native_unwind_ns", "native_unwinds") for m in ms),
                  " / ".join("%.1f" % per(m, "native_warm_unwind_ns", "native_warm_unwinds")
                             for m in ms),
                  " / ".join("%.1f" % per(m, "native_capture_ns", "native_captures") for m in ms),
                  " / ".join(str(m.get("native_symbols")) for m in ms)))
    sys.stdout.flush()


def native_rows(name, ms):
    tag = "--" + name.replace("-", " --")
    frames = [int(m.get("native_frames") or 0) / max(1, int(m.get("native_unwinds") or 0))
              for m in ms]
    print("  %-14s native frames per stack (unwound): %.1f" % (tag, statistics.median(frames)))
    if name == "native":
        print("  %-14s capture while held, per thread: median %.1f us" % (
            tag, statistics.median([per(m, "native_capture_ns", "native_captures") for m in ms])))
    else:
        print("  %-14s stack copied in the interrupt: median %.0f bytes" % (
            tag, statistics.median([int(m.get("native_capture_bytes") or 0) /
                                    max(1, int(m.get("native_captures") or 0)) for m in ms])))
    print("  %-14s unwinding per stack, warm: median %.1f us; overall %.1f us" % (
        tag,
        statistics.median([per(m, "native_warm_unwind_ns", "native_warm_unwinds") for m in ms]),
        statistics.median([per(m, "native_unwind_ns", "native_unwinds") for m in ms])))
    print("  %-14s unmatched stacks: %s of %s samples" % (
        tag, sum(int(m.get("native_unmatched") or 0) for m in ms),
        sum(int(m.get("samples") or 0) for m in ms)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--python", action="append")
    ap.add_argument("--rate", type=float, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--iters", type=int, default=250000,
                    help="units of fixed work to time (about 16 us each here: 4 s)")
    ap.add_argument("--modes", help="only these modes, by name, comma-separated (default, "
                    "no-bpf, blocking, native, bpf, bpf-native)")
    ap.add_argument("--no-slowdown", action="store_true", help="skip timing the target")
    ap.add_argument("--real-seconds", type=float, default=20,
                    help="seconds of each recording of the programs as users run them "
                    "(a pure-Python loop; 8 sleeping threads and one busy); 0: none")
    args = ap.parse_args()
    home = os.path.expanduser("~/.pyenv/versions")
    print("one timer wake-up of a process that only sleeps costs %.1f us of CPU after %g ms, "
          "%.1f us after 1 ms (the floor of any sample at these rates)" % (
              wake_floor(1.0 / args.rate, int(2 * args.rate)), 1000.0 / args.rate,
              wake_floor()))
    pys = args.python or [os.path.join(home, v, "bin", "python") for v in ("3.12.1", "3.9.18")]
    for py in pys:
        if os.path.exists(py):
            bench(args, py)
        else:
            print("skip %s: not found" % py)
    return 0


if __name__ == "__main__":
    sys.exit(main())
