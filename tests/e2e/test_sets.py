#!/usr/bin/env python3
"""End-to-end tests of reports over a set of rotated files, wall-clock
selection, pyflame-diff over two wall-clock windows of one set, and the
Pyroscope recipe (scripts/pyroscope-push.sh as --on-rotate).

For each interpreter (2.7, 3.9 and 3.12 by default), a workload whose worker
thread runs phase_a until the test creates a file, then phase_b, is recorded
with --rotate 1s into 8 or more files, the switch made while the fourth file
is written (so the files that ended before it are all phase_a, those that
began after it all phase_b). Then:

- the directory reads while the recorder writes its last file;
- every report read over the directory, over the files listed in reverse
  order and over a quoted glob prints exactly what it prints over the
  same files joined by `pyflame-report join` (folded, by-line CSV, slices
  CSV, annotate JSON, info's counts, the pprof export's samples); a
  snapshot in the directory is left out, a join named beside its files
  refused;
- --since/--until (ISO-8601 UTC to the nanosecond, and -2s from the end)
  select exactly the samples whose timestamps, decoded from the trace's
  sample chunks here, lie in the window (from inclusive, until exclusive);
- with a middle file removed, info lists one gap with the missing
  segment's span and number, --slices marks exactly the slices that overlap
  it (text, JSON, and the csv's gap column), and the report counts every sample of the other files;
- files of two different recordings are refused, the message saying merge;
- pyflame-diff DIR --base-since/--base-until (the files before the switch)
  --since/--until (the files after it) counts each side's samples exactly, and --fail-on self:+50pp
  trips on phase_b (exit 1), while the same window on both sides does not;
- the Pyroscope recipe: --on-rotate runs scripts/pyroscope-push.sh for each
  file, and a local HTTP listener receives one POST /ingest per file, in
  order, with name=APP{labels}, from/until the file's wall-clock span in
  Unix seconds, format=pprof, and a body that is a gzip'd pprof Profile
  (decoded here: its string table, sample types and samples) holding the
  file's on-CPU samples.

Usage: test_sets.py --record PATH --report PATH [--only 3.12]
Prints one line per check and ends with 'N passed, N failed, N skipped'.
"""
import argparse
import csv
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time

try:
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from urllib.parse import parse_qs, urlsplit
except ImportError:  # the runner is Python 3; this keeps linters quiet
    raise

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_continuous as tc  # noqa: E402  (Runner, meta, interpreters)
import tracefile  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PUSH = os.path.join(HERE, "..", "..", "scripts", "pyroscope-push.sh")

WORKLOAD = r'''import os
import sys
import threading
import time

switch = sys.argv[1]
end = time.time() + float(sys.argv[2])


def phase_a():
    x = 0
    for _ in range(2000):
        x += 1
    return x


def phase_b():
    x = 0
    for _ in range(2000):
        x += 2
    return x


def work():
    while time.time() < end:
        if os.path.exists(switch):
            phase_b()
        else:
            phase_a()


t = threading.Thread(target=work)
t.start()
t.join()
'''


# ---- trace contents, read here independently of pyflame-report ----

def sample_times(db, on_cpu=True):
    """Every sample's time (ns from the trace's start) of the threads' streams,
    on-CPU ones only by default (what a report counts without --idle)."""
    return [t for _, t, _, state in tracefile.samples(db) if not on_cpu or state & 1]


def pb_fields(buf):
    """(field, wire type, value) of a protobuf message: ints or bytes."""
    i = 0
    while i < len(buf):
        key, i = tracefile.varint(buf, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = tracefile.varint(buf, i)
        elif wt == 2:
            n, i = tracefile.varint(buf, i)
            v = buf[i:i + n]
            i += n
        elif wt == 1:
            v = buf[i:i + 8]
            i += 8
        elif wt == 5:
            v = buf[i:i + 4]
            i += 4
        else:
            raise ValueError("wire type %d" % wt)
        yield f, wt, v


def pb_ints(wt, v):
    if wt == 0:
        return [v]
    out, i = [], 0
    while i < len(v):
        x, i = tracefile.varint(v, i)
        out.append(x)
    return out


def decode_pprof(body):
    """The parts of a gzip'd pprof Profile the checks need; raises if malformed."""
    raw = gzip.decompress(body)
    strings, sample_types, values = [], [], []
    for f, wt, v in pb_fields(raw):
        if f == 6:
            strings.append(v.decode("utf-8"))
        elif f == 1:
            st = dict((ff, vv) for ff, _, vv in pb_fields(v))
            sample_types.append((st.get(1, 0), st.get(2, 0)))
        elif f == 2:
            vals = []
            for ff, wwt, vv in pb_fields(v):
                if ff == 2:
                    vals += pb_ints(wwt, vv)
            values.append(vals)
    return {"strings": strings,
            "sample_types": [(strings[a], strings[b]) for a, b in sample_types],
            "values": values}


def iso(ns):
    """ns since the epoch as ISO-8601 UTC with nine decimals."""
    s, frac = divmod(ns, 1000000000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)) + ".%09dZ" % frac


# ---- the HTTP listener standing in for Pyroscope ----

class Ingest(object):
    def __init__(self):
        self.requests = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(n)
                outer.requests.append((self.command, self.path, body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever)
        self.thread.daemon = True
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Runner(tc.Runner):
    def __init__(self, args):
        tc.Runner.__init__(self, args)
        self.workload = os.path.join(self.tmp, "phases.py")
        with open(self.workload, "w") as f:
            f.write(WORKLOAD)

    def run(self, args, check=True):
        p = subprocess.run([self.report] + args, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300)
        return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")

    def diff(self, args):
        d = os.path.join(os.path.dirname(self.report), "pyflame-diff")
        p = subprocess.run([d] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=300)
        return p.returncode, p.stdout, p.stderr


def folded_total(text):
    return sum(int(line.rsplit(" ", 1)[1]) for line in text.decode().splitlines() if line)


def folded_functions(text):
    """The function names of a folded report's frames ("name (file:line)")."""
    names = set()
    for line in text.decode().splitlines():
        for frame in line.rsplit(" ", 1)[0].split(";"):
            if frame.endswith(")") and " (" in frame:
                names.add(frame.rsplit(" (", 1)[0])
    return names


def record_set(r, label, py, ingest):
    """A rotated recording of the phased workload: (dir, [(file, meta)], switch)."""
    d = r.mkdtemp()
    switch = os.path.join(r.tmp, "switch-%s" % label)
    push = "PYFLAME_REPORT=%s sh %s -u %s -a app.cpu -l env=ci,interp=%s" % (
        r.report, os.path.abspath(PUSH), ingest.url, label)
    t = subprocess.Popen([py, r.workload, switch, "120"])
    time.sleep(0.5)
    try:
        p = r.start(["-p", str(t.pid), "-o", os.path.join(d, "run.db"), "--rotate", "1s",
                     "--on-rotate", push], d)
        r.wait_rotations(d, 3, p)
        with open(switch, "w"):
            pass
        switched = int(time.time() * 1e9)
        # While the recorder writes the last file, the set reads (up to its last flush).
        rc, out, err = r.run(["info", "--format", "json", d])
        live = json.loads(out.decode()) if rc == 0 else {}
        r.check("%s: the set reads while its last file is being written" % label,
                rc == 0 and not live["finalized"] and live["samples"] > 0, err)
        r.wait_rotations(d, 7, p)
        rc, out, err = r.stop(p, d)
    finally:
        t.kill()
        t.wait()
    r.check("%s: recorder exit 0" % label, rc == 0, err)
    return d, r.set_files(d), err, switched


def test_sets(r, label, py):
    ingest = Ingest()
    try:
        d, files, err, switched = record_set(r, label, py, ingest)
        if not r.check("%s: 8 files or more" % label, len(files) >= 8,
                       str(os.listdir(d)) + err):
            return
        # The recorder ran --on-rotate for the last file before it exited; allow a moment.
        deadline = time.time() + 60
        while len(ingest.requests) < len(files) and time.time() < deadline:
            time.sleep(0.1)
        check_same_as_join(r, label, d, files)
        check_wall_selection(r, label, d, files)
        check_gap(r, label, d, files)
        check_different_recordings(r, label, py, files)
        check_diff_windows(r, label, d, files, switched)
        check_pyroscope(r, label, files, ingest.requests)
    finally:
        ingest.close()


def check_same_as_join(r, label, d, files):
    name = "%s set" % label
    joined = os.path.join(r.tmp, "joined-%s.db" % label)
    rc, _, err = r.run(["join", "-f", "-o", joined] + [f for f, _ in files])
    if not r.check("%s: join" % name, rc == 0, err):
        return
    paths = [f for f, _ in files]
    inputs = {"the directory": [d], "the files in reverse": list(reversed(paths)),
              "a quoted glob": [os.path.join(d, "run-*.db")]}
    views = {"folded": [], "by-line csv": ["--by-line", "--format", "csv", "--top", "0"],
             "slices csv": ["--slices", "500ms", "--format", "csv", "--idle"],
             "annotate json": ["annotate", "--format", "json"]}
    for vname, vargs in sorted(views.items()):
        want = r.run(vargs[:1] + [joined] + vargs[1:] if vargs[:1] == ["annotate"]
                     else vargs + [joined])
        for iname, ins in sorted(inputs.items()):
            args = (vargs[:1] + ins + vargs[1:] if vargs[:1] == ["annotate"] else vargs + ins)
            got = r.run(args)
            r.check("%s: %s over %s == over the joined file" % (name, vname, iname),
                    got[0] == 0 and want[0] == 0 and got[1] == want[1] and got[1],
                    "%s %s" % (got[2], want[2]))
    # The live view replays a set as one recording too (one argument: a
    # directory or a quoted glob), at its end and half way through.
    for targs in (["top"], ["top", "--at", "50%", "--idle"]):
        want = r.run(targs + [joined])
        for iname in ("the directory", "a quoted glob"):
            got = r.run(targs + inputs[iname])
            r.check("%s: %s over %s == over the joined file" % (name, " ".join(targs), iname),
                    got[0] == 0 and want[0] == 0 and got[1] == want[1] and got[1],
                    "%s %s" % (got[2], want[2]))
    # A flight-recorder snapshot in the directory is left out; a join named
    # explicitly beside its files is refused (it would count them twice).
    snap = os.path.join(d, "run-snapshot-20261202T000000Z.db")
    shutil.copy(joined, snap)
    got, want = r.run([d]), r.run([joined])
    r.check("%s: a snapshot in the directory is left out" % name,
            got[0] == 0 and got[1] == want[1], got[2])
    rc, _, err = r.run([snap] + paths[-1:])
    r.check("%s: a join beside its files is refused" % name,
            rc == 2 and "already the files of a rotation joined" in err, err)
    os.unlink(snap)
    _, wj, _ = r.run(["info", "--format", "json", joined])
    rc, gj, err = r.run(["info", "--format", "json", d])
    if r.check("%s: info over the directory" % name, rc == 0, err):
        wj, gj = json.loads(wj.decode()), json.loads(gj.decode())
        keys = ("samples", "duration_ns", "start_wall_ns", "end_wall_ns", "errors", "threads",
                "processes", "gaps")
        r.check("%s: info's counts, span, threads == the joined file's" % name,
                all(gj.get(k) == wj.get(k) for k in keys) and gj["gaps"] == [] and
                gj["samples"] == sum(int(m["samples"]) for _, m in files),
                str([(k, gj.get(k), wj.get(k)) for k in keys if gj.get(k) != wj.get(k)]))
    a, b = os.path.join(r.tmp, "a.pb.gz"), os.path.join(r.tmp, "b.pb.gz")
    ra = r.run(["--format", "pprof", "-o", a, joined])
    rb = r.run(["--format", "pprof", "-o", b, d])
    if r.check("%s: pprof export over the directory" % name, ra[0] == 0 and rb[0] == 0,
               ra[2] + rb[2]):
        with open(a, "rb") as fa, open(b, "rb") as fb:
            pa, pb = decode_pprof(fa.read()), decode_pprof(fb.read())
        r.check("%s: pprof samples == the joined file's" % name,
                sorted(pa["values"]) == sorted(pb["values"]) and pa["values"])


def check_wall_selection(r, label, d, files):
    name = "%s --since/--until" % label
    start_wall = int(files[0][1]["start_wall_ns"])
    joined = os.path.join(r.tmp, "joined-%s.db" % label)
    times = sample_times(joined)
    dur = int(meta(joined)["duration_ns"])
    # Windows that cut through files, to the nanosecond.
    a, b = 1234567891, dur - 987654321
    want = sum(1 for t in times if a <= t < b)
    rc, out, err = r.run([d, "--since", iso(start_wall + a), "--until", iso(start_wall + b)])
    r.check("%s: ISO window counts exactly the samples in it" % name,
            rc == 0 and folded_total(out) == want and 0 < want < len(times),
            "%s: %d vs %d of %d" % (err, folded_total(out) if rc == 0 else -1, want,
                                    len(times)))
    want = sum(1 for t in times if t >= dur - 2000000000)
    rc, out, err = r.run([d, "--since", "-2s"])
    r.check("%s: -2s counts the samples of the last 2 s" % name,
            rc == 0 and folded_total(out) == want and want > 0,
            "%s: %d vs %d" % (err, folded_total(out) if rc == 0 else -1, want))
    # On one file too, with an offset zone.
    f, m = files[1]
    ft = sample_times(f)
    fw = int(m["start_wall_ns"])
    cut = 400000000
    want = sum(1 for t in ft if t < cut)
    s, frac = divmod(fw + cut, 1000000000)
    plus2 = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s + 7200)) + ".%09d+02:00" % frac
    rc, out, err = r.run([f, "--until", plus2])
    r.check("%s: one file, --until with a +02:00 offset" % name,
            rc == 0 and folded_total(out) == want and 0 < want < len(ft),
            "%s: %d vs %d" % (err, folded_total(out) if rc == 0 else -1, want))
    rc, out, err = r.run([d, "--since", iso(start_wall + dur + 10 ** 9)])
    r.check("%s: a window after the end selects nothing" % name,
            rc == 0 and out == b"" and "no sample matches" in err, err)
    rc, _, err = r.run([d, "--since", "2026-12-01T22:00:00"])
    r.check("%s: a time without a zone is refused" % name,
            rc == 2 and "--since" in err and "UTC" in err, err)


def meta(db):
    return tc.meta(db)


def check_gap(r, label, d, files):
    name = "%s gap" % label
    g = r.mkdtemp()
    for f, _ in files:
        shutil.copy(f, g)
    mid = len(files) // 2
    missing, mm = files[mid]
    os.unlink(os.path.join(g, os.path.basename(missing)))
    first = int(files[0][1]["start_mono_ns"])
    want_from = int(files[mid - 1][1]["end_mono_ns"]) - first
    want_to = int(files[mid + 1][1]["start_mono_ns"]) - first
    rc, out, err = r.run(["info", "--format", "json", g])
    if not r.check("%s: info reads the set with a file missing" % name, rc == 0, err):
        return
    info = json.loads(out.decode())
    seg = tc.segment_of(mm)
    r.check("%s: info lists the gap: its span and the missing segment" % name,
            info["gaps"] == [{"from_ns": want_from, "to_ns": want_to, "first_segment": seg,
                              "last_segment": seg}] and
            info["samples"] == sum(int(m["samples"]) for f, m in files if f != missing),
            "%s vs %s" % (info["gaps"], (want_from, want_to, seg)))
    rc, out, err = r.run(["info", g])
    r.check("%s: info's text says gap and segment %d missing" % (name, seg),
            rc == 0 and b"gaps:       1" in out and
            ("segment %d missing" % seg).encode() in out, out.decode())
    rc, out, err = r.run([g, "--slices", "500ms", "--format", "json", "--idle"])
    if r.check("%s: --slices over the set" % name, rc == 0, err):
        sl = json.loads(out.decode())["slices"]
        bad = [s for s in sl
               if bool(s.get("gap")) != (s["from_s"] * 1e9 < want_to and
                                         s["to_s"] * 1e9 > want_from)]
        r.check("%s: --slices marks exactly the slices that overlap the gap" % name,
                not bad and any(s.get("gap") for s in sl), str(bad))
    rc, out, err = r.run([g, "--slices", "500ms", "--idle"])
    r.check("%s: --slices text shows the gap" % name,
            rc == 0 and b"(gap: file missing)" in out, out.decode())
    rc, out, err = r.run([g, "--slices", "500ms", "--idle", "--format", "csv"])
    if r.check("%s: --slices --format csv over the set" % name, rc == 0, err):
        rows = list(csv.DictReader(io.StringIO(out.decode())))
        bad = [row for row in rows
               if row["gap"] != ("1" if (float(row["from_s"]) * 1e9 < want_to and
                                         float(row["to_s"]) * 1e9 > want_from) else "0")]
        r.check("%s: --slices csv's gap column marks exactly the slices that overlap the gap"
                % name, rows and not bad and any(row["gap"] == "1" for row in rows),
                str(bad[:3]))


def check_different_recordings(r, label, py, files):
    name = "%s different recordings" % label
    other = r.mkdtemp()
    t = subprocess.Popen([py, r.workload, os.path.join(other, "none"), "30"])
    time.sleep(0.5)
    try:
        p = r.start(["-p", str(t.pid), "-o", os.path.join(other, "run.db"), "--rotate", "1s"],
                    other)
        r.wait_rotations(other, 1, p)
        r.stop(p, other)
    finally:
        t.kill()
        t.wait()
    theirs = [f for f, _ in r.set_files(other)]
    rc, _, err = r.run([files[0][0], theirs[0]])
    r.check("%s: refused, saying merge" % name,
            rc == 2 and "different recordings" in err and "merge" in err, err)
    rc, _, err = r.run(["info", files[0][0], files[0][0]])
    r.check("%s: one file given twice is refused" % name, rc == 2 and "twice" in err, err)


def check_diff_windows(r, label, d, files, switched):
    name = "%s diff over two windows" % label
    joined = os.path.join(r.tmp, "joined-%s.db" % label)
    times = sample_times(joined)
    first = int(files[0][1]["start_mono_ns"])
    wall = int(files[0][1]["start_wall_ns"])
    # Base: the files that ended before the switch (phase_a); new: those that
    # started 0.2 s or more after it (phase_b): 3 files or more each, normally.
    before = [m for _, m in files if int(m["end_wall_ns"]) <= switched]
    after = [m for _, m in files if int(m["start_wall_ns"]) >= switched + 200000000]
    if not r.check("%s: two files or more before the switch and after it" % name,
                   len(before) >= 2 and len(after) >= 2, "%d, %d" % (len(before), len(after))):
        return
    b0, b1 = 0, int(before[-1]["end_mono_ns"]) - first
    n0, n1 = int(after[0]["start_mono_ns"]) - first, int(after[-1]["end_mono_ns"]) - first
    args = [d, "--base-since", iso(wall + b0), "--base-until", iso(wall + b1),
            "--since", iso(wall + n0), "--until", iso(wall + n1)]
    rc, out, err = r.diff(args + ["--fail-on", "self:+50pp"])
    want_b = sum(1 for t in times if b0 <= t < b1)
    want_n = sum(1 for t in times if n0 <= t < n1)
    lines = out.splitlines()
    r.check("%s: each side counts its window's samples" % name,
            len(lines) > 2 and lines[0].startswith("base %s: %d samples" % (d, want_b)) and
            lines[1].startswith("new  %s: %d samples" % (d, want_n)),
            "%s %s (want %d, %d)" % (lines[:2], err, want_b, want_n))
    r.check("%s: the gate trips on phase_b (exit 1)" % name,
            rc == 1 and "phase_b" in err, "rc %d: %s" % (rc, err))
    same = [d, "--base-since", iso(wall + n0), "--base-until", iso(wall + n1),
            "--since", iso(wall + n0), "--until", iso(wall + n1), "--fail-on", "self:+50pp"]
    rc, out, err = r.diff(same)
    r.check("%s: the same window on both sides passes the gate" % name, rc == 0,
            "rc %d: %s" % (rc, err))
    rc, out, err = r.diff([d, "--since", "-1s", "--until", "-0s"])
    r.check("%s: a window for one side only is a usage error" % name,
            rc == 2 and "--base-since" in err, err)


def check_pyroscope(r, label, files, requests):
    name = "%s pyroscope recipe" % label
    if not r.check("%s: one request per file" % name, len(requests) == len(files),
                   "%d requests, %d files" % (len(requests), len(files))):
        return
    bad = []
    seen = set()
    for (f, m), (method, path, body) in zip(files, requests):
        u = urlsplit(path)
        q = parse_qs(u.query)
        # The span as info gives it: the wall-clock start plus the duration (the
        # samples' time line; meta end_wall_ns is a clock read of its own).
        start = int(m["start_wall_ns"])
        end = start + int(m["duration_ns"])
        want = {"name": ["app.cpu{env=ci,interp=%s}" % label],
                "from": [str(start // 10 ** 9)],
                "until": [str(-(-end // 10 ** 9))],
                "format": ["pprof"]}
        got = dict((k, q.get(k)) for k in want)
        if method != "POST" or u.path != "/ingest" or got != want:
            bad.append((os.path.basename(f), method, u.path, got, want))
            continue
        try:
            prof = decode_pprof(body)
        except Exception as e:  # any decoding failure is the finding
            bad.append((os.path.basename(f), "pprof does not decode: %r" % e))
            continue
        rc, out, err = r.run([f])
        total = folded_total(out) if rc == 0 else -1
        counted = sum(v[0] for v in prof["values"])
        # Every function the file's folded stacks name is in the profile (the
        # short last file may hold a sample or two outside both phases, or none).
        funcs = folded_functions(out) if rc == 0 else set()
        seen |= set(prof["strings"])
        if (prof["strings"][:1] != [""] or prof["sample_types"][:1] != [("samples", "count")]
                or counted != total or (total > 0 and not funcs)
                or funcs - set(prof["strings"])):
            bad.append((os.path.basename(f), prof["sample_types"], counted, total,
                        sorted(funcs - set(prof["strings"]))))
    r.check("%s: POST /ingest with name, from/until of the file's span, format=pprof, "
            "a pprof of the file's samples and functions, in order" % name, not bad, str(bad))
    r.check("%s: both phases pushed" % name, {"phase_a", "phase_b"} <= seen,
            str(sorted(seen & {"phase_a", "phase_b"})))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--only", help="only interpreters whose label starts with this")
    args = ap.parse_args()
    r = Runner(args)
    pys = [(l, p) for l, p in tc.interpreters()
           if (args.only and l.startswith(args.only)) or
           (not args.only and any(l.startswith(v + ".") for v in tc.DEFAULT_VERSIONS))]
    if not pys:
        r.skip("all", "no interpreter found")
    if not shutil.which("curl"):
        r.skip("all", "the Pyroscope recipe needs curl")
        pys = []
    for label, py in pys:
        test_sets(r, label, py)
    print("%d passed, %d failed, %d skipped" % (r.passed, r.failed, r.skipped))
    if r.failed:
        print("files kept in %s" % r.tmp)
    else:
        shutil.rmtree(r.tmp, ignore_errors=True)
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
