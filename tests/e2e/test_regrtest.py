#!/usr/bin/env python3
"""A real program's own test suite passes under the recorder exactly as
without it: CPython's regression tests, which ship with every interpreter.

A chosen set of test files is run with `python -m test` once unprofiled,
then under pyflame-record at 1 kHz in each mode (the default, --blocking,
and --native and --bpf --native where they run), without and with -s (the
test runner's own child processes recorded too), on the newest interpreter
here and on one before 3.11. Every run must report every test case with the
same outcome (passed, skipped, failed) as the unprofiled run, from the JUnit
XML the test runner writes; a run that does not finish in time fails.

The quick set (CI, about 3 minutes) is around what found a hang: child
processes and fork, and on the newest interpreter signals, whose first
test with a child interpreter hung under --blocking -s. --full runs 20
files around signals, threads, subprocesses, os, pty, wait and asyncio on
both (about 40 minutes):

  python3 tests/e2e/test_regrtest.py --record build/record/pyflame-record --full

Exits 77 (skipped) when no interpreter with its test package is here.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

QUICK = ["test_wait4", "test_fork1"]
QUICK_NEWEST = QUICK + ["test_signal"]
FULL = ["test_signal", "test_threadsignals", "test_threading", "test_thread",
        "test_threading_local", "test_subprocess", "test_os", "test_posix", "test_pty",
        "test_wait3", "test_wait4", "test_fork1", "test_faulthandler", "test_select",
        "test_selectors", "test_sched", "test_time", "test_socketserver", "test_concurrent_futures",
        "test_asyncio"]


def interpreters():
    """The newest pyenv interpreter, and the newest before 3.11, with their test packages."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = []
    for path in glob.glob(os.path.join(root, "versions", "*", "bin", "python")):
        ver = path.split(os.sep)[-3]
        m = re.match(r"^(\d+)\.(\d+)\.(\d+)$", ver)
        if not m or int(m.group(1)) < 3:
            continue
        v = tuple(int(x) for x in m.groups())
        lib = os.path.join(root, "versions", ver, "lib", "python%d.%d" % v[:2], "test",
                           "regrtest.py")
        if os.path.exists(lib):
            found.append((v, ver, path))
    found.sort()
    pick = []
    if found:
        pick.append(found[-1])
    old = [f for f in found if f[0] < (3, 11)]
    if old and old[-1] not in pick:
        pick.append(old[-1])
    return [(label, path) for _, label, path in pick]


def outcomes(xml_path):
    """{test id: outcome} from the JUnit XML of a regrtest run."""
    res = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        cid = "%s.%s" % (case.get("classname"), case.get("name"))
        kinds = [c.tag for c in case]
        res[cid] = ("failed" if "failure" in kinds or "error" in kinds else
                    "skipped" if "skipped" in kinds else "passed")
    return res


def summary(res):
    counts = {}
    for o in res.values():
        counts[o] = counts.get(o, 0) + 1
    return ", ".join("%d %s" % (counts[k], k) for k in sorted(counts))


def run(cmd, xml_path, timeout):
    start = time.time()
    try:
        p = subprocess.run(cmd + ["--junit-xml", xml_path], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, time.time() - start, "did not finish in %d s" % timeout
    return p, time.time() - start, p.stdout[-2000:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    ap.add_argument("--full", action="store_true", help="the whole set (about 40 minutes)")
    ap.add_argument("--only", help="interpreter labels, comma-separated")
    args = ap.parse_args()
    pys = interpreters()
    if args.only:
        pys = [p for p in pys if any(p[0].startswith(o) for o in args.only.split(","))]
    if not pys:
        print("SKIP: no interpreter with its test package")
        return 77
    tmp = tempfile.mkdtemp(prefix="pyflame-regrtest-")
    passed = failed = 0
    # --native holds each thread for its registers and stack, as --blocking
    # does, and reads /proc/PID/task/TID/syscall of those asleep: where the
    # build has it, the same suite runs under it too.
    # --bpf --native copies each sampled thread's registers and stack in the timer
    # interrupt, and threads with no Python too: where it runs, the suite runs under it.
    modes = ["nonblocking", "blocking"]
    for mode in ("native", "bpf native"):
        flags = ["--" + m for m in mode.split()]
        probe = subprocess.run([args.record, "-q", "-f"] + flags +
                               ["-o", os.path.join(tmp, "p.db"), "--", pys[0][1], "-c", "pass"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               universal_newlines=True)
        if probe.returncode == 0:
            modes.append(mode)
        else:
            print("SKIP %s: %s" % (" ".join(flags), probe.stdout.strip()[-300:]))
    try:
        for i, (label, py) in enumerate(pys):
            tests = FULL if args.full else QUICK_NEWEST if i == 0 else QUICK
            regr = [py, "-m", "test", "-W", "--timeout", "300"] + tests
            base_xml = os.path.join(tmp, "base.xml")
            p, secs, out = run(regr, base_xml, 3600)
            if p is None or not os.path.exists(base_xml):
                print("FAIL %s unprofiled: %s" % (label, out))
                failed += 1
                continue
            base = outcomes(base_xml)
            print("     %s unprofiled: %s in %.0f s" % (label, summary(base), secs))
            for mode in modes:
                for sub in ([], ["-s"]):
                    name = "%s %s%s" % (label, mode, " -s" if sub else "")
                    xml_path = os.path.join(tmp, "run.xml")
                    if os.path.exists(xml_path):
                        os.unlink(xml_path)
                    db = os.path.join(tmp, "run.db")
                    cmd = [args.record, "-q", "-f", "-r", "1k"] + \
                        ["--" + m for m in mode.split()] + sub + ["-o", db, "--"] + regr
                    p, secs2, out = run(cmd, xml_path, int(4 * secs) + 120)
                    if p is None or not os.path.exists(xml_path):
                        print("FAIL %s: %s" % (name, out))
                        failed += 1
                        continue
                    got = outcomes(xml_path)
                    diff = sorted(k for k in set(base) | set(got) if base.get(k) != got.get(k))
                    ok = not diff and p.returncode == 0
                    print("%s %s: %s in %.0f s (unprofiled %.0f s)%s" % (
                        "ok  " if ok else "FAIL", name, summary(got), secs2, secs,
                        "" if ok else "; status %d; differ: %s" % (
                            p.returncode, ["%s: %s -> %s" % (k, base.get(k), got.get(k))
                                           for k in diff[:10]])))
                    passed += ok
                    failed += not ok
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
