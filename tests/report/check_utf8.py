#!/usr/bin/env python3
"""Bytes that are not UTF-8, in every place a trace holds text (function, file
and thread names, the command line, meta values, source text), through every
output of pyflame-report and pyflame-diff: each output must be well-formed in
its format (JSON parses, SVG and HTML parse as XML, text and CSV decode as
UTF-8, pprof's strings are UTF-8), with U+FFFD where the bad bytes were.

Usage: check_utf8.py EXAMPLE_TRACE PYFLAME_REPORT PYFLAME_DIFF WORKDIR
"""
import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET

BAD = b"\xff\xfe caf\xc3 \xed\xa0\x80 \xc0\xaf"  # stray bytes, a cut sequence, a surrogate, overlong


def make_trace(example_trace, path):
    subprocess.run([example_trace, path], stdout=subprocess.DEVNULL, check=True)
    db = sqlite3.connect(path)
    bad = BAD.hex()
    # Text columns holding bytes that are not UTF-8, as a crafted trace or an
    # odd file system or command line can give.
    db.execute("UPDATE strings SET value = CAST(x'%s' || CAST(value AS BLOB) AS TEXT)" % bad)
    db.execute("UPDATE threads SET name = CAST(x'%s' AS TEXT) WHERE name = 'worker'" % bad)
    db.execute("UPDATE processes SET cmdline = CAST(x'70797468' || x'%s' AS TEXT)" % bad)
    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('cmdline', CAST(x'%s' AS TEXT))"
               % bad)
    db.commit()
    db.close()


def pprof_strings(data):
    """The string table (field 6) of a gzipped pprof Profile."""
    buf = gzip.decompress(data)
    i, out = 0, []

    def varint():
        nonlocal i
        v = shift = 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return v

    while i < len(buf):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            varint()
        elif wire == 2:
            n = varint()
            if field == 6:
                out.append(buf[i:i + n])
            i += n
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError("bad wire type %d" % wire)
    return out


def main():
    example_trace, report, diff, work = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    trace = os.path.join(work, "bad.db")
    make_trace(example_trace, trace)
    failed = 0

    def run(args, kind, tool=report):
        nonlocal failed
        out = os.path.join(work, "out")
        if os.path.exists(out):
            os.unlink(out)
        p = subprocess.run([tool] + args + ["-o", out], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        name = " ".join(os.path.basename(a) for a in [tool] + args)
        try:
            if p.returncode not in (0, 1):
                raise ValueError("exit %d: %s" % (p.returncode, p.stderr[-300:]))
            with open(out, "rb") as f:
                data = f.read()
            if kind == "pprof":
                strings = pprof_strings(data)
                text = "\n".join(s.decode("utf-8") for s in strings)
            else:
                text = data.decode("utf-8")  # strict: raises on a bad byte
                if kind == "json":
                    json.loads(text)
                elif kind == "xml":
                    ET.fromstring(text)
            if kind != "text-no-rows" and "\ufffd" not in text:
                raise ValueError("no U+FFFD: the bad bytes vanished?")
            print("ok   %s (%s)" % (name, kind))
        except Exception as e:  # report and go on: every output is checked
            failed += 1
            print("FAIL %s (%s): %s" % (name, kind, e))

    for view in ([], ["--by-line"], ["--by-function"], ["--slices", "500ms"]):
        run(view + ["--idle", trace], "text")
        run(view + ["--idle", "--format", "json", trace], "json")
    for view in (["--by-line"], ["--by-function"], ["--slices", "500ms"]):
        run(view + ["--idle", "--format", "csv", trace], "text")
    run(["info", trace], "text")
    run(["info", "--format", "json", trace], "json")
    run(["annotate", "--idle", trace], "text")
    run(["annotate", "--idle", "--format", "json", trace], "json")
    for fmt, kind in (("svg", "xml"), ("html", "xml"), ("speedscope", "json"),
                      ("chrome", "json"), ("pprof", "pprof")):
        run(["--idle", "--format", fmt, trace], kind)
    # (Two identical sides: the markdown shows no function, only the summary.)
    for fmt, kind in (("text", "text"), ("markdown", "text-no-rows"), ("csv", "text"),
                      ("json", "json"), ("folded", "text")):
        run(["--idle", "--format", fmt, trace, trace], kind, tool=diff)
    print("%d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
