#!/usr/bin/env python3
"""Always on: a service recorded for half an hour, as in production.

What a recorder left on for months must hold, in a run compressed in time:
a service-like workload of --workers processes with --threads threads each
(8 in all by default), each thread serving "requests" (a CPU burst of
1-5 ms in one of three handlers, then a wait of 0-5 ms), every worker
exiting after --lifetime seconds and replaced by a new process (a new pid),
all recorded by one `pyflame-record --match TAG --rotate R --keep K` at
--rate Hz for --minutes. Each finished file is hard-linked into an archive
by `--on-rotate` before retention deletes it, so the whole run can be
checked afterwards.

Printed:
- the recorder's CPU as a share of one core (from /proc, over the run),
  its resident memory at the start and at the end (and every --every s);
  with `-- --bpf`, also the in-kernel sampler's own time (meta bpf_run_ns:
  its timer callbacks on every CPU, not the interrupts around them), which
  no process of the recorder is charged for;
- disk per hour of recording (all the files' bytes, sources included),
  in all and per 8 threads sampled;
- rotations: whether each file ends exactly where the next begins (meta),
  samples counted twice (a thread's sample in a file at or before its last
  sample in the file before) and boundary gaps: a thread's gap across a
  cut longer than two periods, beside how often such gaps occur inside the
  files (a sample lost at a cut would show as more of them at the cuts);
- the workers the recording found (distinct pids) against those started;
- `pyflame-report --by-function` over the whole set (the directory)
  against the same over the files joined into one (`pyflame-report join`),
  medians of 3, run side by side.
The targets are the README's (Performance, "Always on"); nothing is
asserted: a benchmark, not a test.

Usage: alwayson.py --record PATH --report PATH [--python PATH] [--minutes 30]
                   [--rate 100] [--rotate 2m] [--keep 10m] [--workers 2]
                   [--threads 4] [--lifetime 300] [--every 60]
                   [--sqlite-ext PATH] [--dir DIR] [--keep-files]
                   [-- EXTRA pyflame-record OPTIONS]
The pyflame_sqlite extension (for the sample-level checks) is looked for
beside the report tool's build (libtrace/pyflame_sqlite.so) unless given.
"""
import argparse
import glob
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOAD = r'''
import random, sys, threading, time

def handle_query(ms):
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        pass

def handle_render(ms):
    end = time.perf_counter() + ms / 1000.0
    x = 0
    while time.perf_counter() < end:
        x += 1

def handle_auth(ms):
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        sum(range(50))

HANDLERS = [handle_query, handle_render, handle_auth]

def serve(stop):
    rng = random.Random()
    while not stop[0]:
        rng.choice(HANDLERS)(rng.uniform(1, 5))
        time.sleep(rng.uniform(0, 0.005))

def main():
    threads, lifetime = int(sys.argv[1]), float(sys.argv[2])
    stop = [False]
    ts = [threading.Thread(target=serve, args=(stop,), name="worker-%d" % i)
          for i in range(threads)]
    for t in ts:
        t.start()
    time.sleep(lifetime)
    stop[0] = True
    for t in ts:
        t.join()

main()
'''


def proc_stat(pid):
    """(resident bytes, CPU seconds) of a process, or None once it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            rss = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rpartition(")")[2].split()
    except (OSError, StopIteration):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return rss, (int(fields[11]) + int(fields[12])) / tick


def parse_span(s):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smh]?)", s)
    if not m:
        raise argparse.ArgumentTypeError("a duration such as 90s, 2m or 1h: %r" % s)
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def sql(ext, db, query):
    """Rows of `query` over trace `db`, with the pyflame_sqlite extension loaded."""
    out = subprocess.run(["sqlite3", "-readonly", "-separator", "|", db],
                         input=".load %s\n%s\n" % (ext, query), capture_output=True,
                         text=True, check=True).stdout
    return [line.split("|") for line in out.splitlines() if line]


def meta(ext, db):
    return dict(sql(ext, db, "SELECT key, value FROM meta;"))


def timed(cmd):
    t0 = time.monotonic()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    return time.monotonic() - t0


def check_files(ext, files, rate):
    """Rotation checks over the archived files, in segment order; prints them."""
    period = 1e9 / rate
    metas = [meta(ext, f) for f in files]
    exact = sum(1 for a, b in zip(metas, metas[1:])
                if a.get("end_mono_ns") == b.get("start_mono_ns"))
    consecutive = sum(1 for a, b in zip(metas, metas[1:])
                      if int(b.get("segment", 1)) == int(a.get("segment", 1)) + 1)
    # Per file and thread: first and last sample on the recorder's clock, and the
    # thread's gaps longer than two periods inside the file (with its sample count).
    per_file = []
    inside_long = inside_gaps = 0
    for f, m in zip(files, metas):
        start = int(m["start_mono_ns"])
        # A thread is matched across files by what it is (pid, TID, Python
        # thread id): each file numbers its threads itself (since af6e110).
        rows = sql(ext, f, "SELECT t.pid || ':' || ifnull(t.tid, '') || ':' || "
                   "t.python_thread_id, min(s.t_ns), max(s.t_ns), count(*), sum(s.gap > %d) "
                   "FROM (SELECT thread, t_ns, t_ns - lag(t_ns) OVER (PARTITION BY thread "
                   "ORDER BY t_ns) AS gap FROM pyflame_samples) s JOIN threads t ON "
                   "t.ref = s.thread WHERE t.task_of IS NULL GROUP BY s.thread;" % (2 * period))
        spans = {}
        for thread, lo, hi, n, long_gaps in rows:
            lo, hi = start + int(lo), start + int(hi)
            if thread in spans:  # one thread ended and added again in one file
                lo, hi = min(lo, spans[thread][0]), max(hi, spans[thread][1])
            spans[thread] = (lo, hi)
            inside_gaps += int(n) - 1
            inside_long += int(long_gaps or 0)
        per_file.append(spans)
    doubled = cut_long = cut_gaps = 0
    for a, b in zip(per_file, per_file[1:]):
        for thread in set(a) & set(b):
            last, first = a[thread][1], b[thread][0]
            cut_gaps += 1
            if first <= last:
                doubled += 1
            elif first - last > 2 * period:
                cut_long += 1
    print("rotations: %d cuts; %d of %d files follow on by segment, %d end exactly where the "
          "next begins (meta end_mono_ns = next start_mono_ns)" %
          (len(files) - 1, consecutive, len(files) - 1, exact))
    print("           samples in two files (a thread's first sample after a cut at or before "
          "its last one before it): %d of %d thread crossings" % (doubled, cut_gaps))
    print("           gaps longer than 2 periods: %d of %d thread crossings at cuts (%.2f%%), "
          "%d of %d gaps inside files (%.2f%%)" %
          (cut_long, cut_gaps, 100.0 * cut_long / max(cut_gaps, 1), inside_long, inside_gaps,
           100.0 * inside_long / max(inside_gaps, 1)))
    return metas


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--record", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--python", default=None)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--rotate", default="2m")
    ap.add_argument("--keep", default="10m")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--lifetime", type=parse_span, default=300)
    ap.add_argument("--every", type=float, default=60)
    ap.add_argument("--sqlite-ext", default=None)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--keep-files", action="store_true")
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    python = args.python or sorted(glob.glob(os.path.expanduser(
        "~/.pyenv/versions/3.12*/bin/python3")) or [sys.executable])[-1]
    ext = args.sqlite_ext or os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(args.report))), "libtrace", "pyflame_sqlite")
    if not os.path.exists(ext + ".so") and not os.path.exists(ext):
        sys.exit("alwayson.py: no pyflame_sqlite extension at %s (give --sqlite-ext)" % ext)
    if not shutil.which("sqlite3"):
        sys.exit("alwayson.py: needs the sqlite3 command (apt-get install sqlite3)")
    top = args.dir or tempfile.mkdtemp(prefix="pyflame-alwayson-")
    live, archive = os.path.join(top, "live"), os.path.join(top, "archive")
    os.makedirs(live, exist_ok=True)
    os.makedirs(archive, exist_ok=True)
    script = os.path.join(top, "service.py")
    with open(script, "w") as f:
        f.write(WORKLOAD)
    tag = "pyflame-alwayson-%d-svc" % os.getpid()
    secs = args.minutes * 60

    rec = subprocess.Popen([args.record, "-q", "--match", tag, "-r", str(args.rate),
                            "--rotate", args.rotate, "--keep", args.keep,
                            "--on-rotate", "ln -f -t %s --" % archive,
                            "-o", os.path.join(live, "svc.db")] + args.extra)
    print("%s: %d workers x %d threads, each worker replaced every %.0f s; recorded at %d Hz "
          "with --match, --rotate %s --keep %s %s, for %.0f min" %
          (python, args.workers, args.threads, args.lifetime, args.rate, args.rotate, args.keep,
           " ".join(args.extra), args.minutes), flush=True)
    workers, started = [], 0
    t0 = time.monotonic()
    first, rows = None, []
    next_report = t0 + args.every
    try:
        while time.monotonic() - t0 < secs:
            if rec.poll() is not None:
                sys.exit("alwayson.py: the recorder exited early (status %d)" % rec.returncode)
            workers = [w for w in workers if w.poll() is None]
            while len(workers) < args.workers:
                workers.append(subprocess.Popen(
                    [python, script, str(args.threads), str(args.lifetime), tag]))
                started += 1
            now = time.monotonic()
            if now >= next_report:
                st = proc_stat(rec.pid)
                if st:
                    if first is None:
                        first = (now, st)
                    rows.append((now, st))
                    print("%6.0f s  recorder RSS %6.1f MB  CPU %.2f%% of a core since the "
                          "first reading  files on disk %d (%.1f MB)" % (
                              now - t0, st[0] / 2**20,
                              100 * (st[1] - first[1][1]) / max(now - first[0], 1e-9),
                              len(os.listdir(live)),
                              sum(os.path.getsize(os.path.join(live, f))
                                  for f in os.listdir(live)) / 2**20), flush=True)
                next_report += args.every
            time.sleep(0.5)
        end_stat = proc_stat(rec.pid)
        end_time = time.monotonic()
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait()
        rec.send_signal(signal.SIGINT)
        rec.wait()
    print("recorder exit status %d" % rec.returncode)
    cpu = 0.0
    if first and end_stat:
        cpu = 100 * (end_stat[1] - first[1][1]) / (end_time - first[0])
        print("recorder CPU: %.2f%% of one core (from the first reading, %.0f s in, to the end)"
              % (cpu, first[0] - t0))
        print("recorder RSS: %.1f MB at %.0f s, %.1f MB at the end" %
              (first[1][0] / 2**20, first[0] - t0, end_stat[0] / 2**20))

    files = sorted(glob.glob(os.path.join(archive, "*.db")),
                   key=lambda f: int(meta(ext, f).get("segment", 1)))
    if len(files) < 2:
        sys.exit("alwayson.py: fewer than two files were archived: %s" % files)
    metas = check_files(ext, files, args.rate)
    span_ns = int(metas[-1]["end_mono_ns"]) - int(metas[0]["start_mono_ns"])
    size = sum(os.path.getsize(f) for f in files)
    samples = sum(int(m.get("samples", 0)) for m in metas)
    hours = span_ns / 3.6e12
    threads_sampled = samples / (span_ns / 1e9) / args.rate
    # --bpf: the program's own time, in the timer interrupts of every CPU (not the
    # recorder's): the last file's meta has it for the whole recording.
    bpf_ns = max(int(m.get("bpf_run_ns", 0)) for m in metas)
    if bpf_ns:
        bpf = 100 * bpf_ns / span_ns
        print("in-kernel sampler (--bpf; meta bpf_run_ns over the files' span): %.3f%% of one "
              "core; with the recorder's: %.2f%%" % (bpf, bpf + cpu))
    print("disk: %d files, %.1f MB for %.1f min: %.1f MB per hour (%.0f samples/s, about %.1f "
          "threads sampled at a time: %.1f MB per hour per 8 threads), %.2f bytes per sample" % (
              len(files), size / 2**20, span_ns / 6e10, size / 2**20 / hours,
              samples / (span_ns / 1e9), threads_sampled,
              size / 2**20 / hours * 8 / max(threads_sampled, 1e-9), size / max(samples, 1)))
    pids = set()
    for f in files:
        pids.update(r[0] for r in sql(ext, f, "SELECT pid FROM processes;"))
    print("workers: %d started, %d recorded (distinct pids in the files)" % (started, len(pids)))

    merged = os.path.join(top, "merged.db")
    subprocess.run([args.report, "join"] + files + ["-o", merged], check=True,
                   stdout=subprocess.DEVNULL)
    t_set, t_one = [], []
    for _ in range(3):
        t_set.append(timed([args.report, "--by-function", archive]))
        t_one.append(timed([args.report, "--by-function", merged]))
    ratio = statistics.median(a / b for a, b in zip(t_set, t_one))
    print("report --by-function: over the %d files %.3f s, over them joined %.3f s: ratio %.2f "
          "(medians of 3, side by side)" %
          (len(files), statistics.median(t_set), statistics.median(t_one), ratio))
    if args.keep_files:
        print("files kept in %s" % top)
    else:
        shutil.rmtree(top)
    return 0 if rec.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
