#!/usr/bin/env python3
"""End-to-end tests of the source files pyflame-record stores in a trace.

For every interpreter on the machine, a script that imports a module from a
zipapp (a .pyz made here with zipfile, shebang line and all) is recorded; the
trace is moved to another directory and the script and the .pyz are deleted,
and `pyflame-report --by-line` and `pyflame-report annotate` must still show
their code. The stored text is also decoded here straight from the SQLite
file, as schema/trace.sql specifies it (plain or zlib), and compared byte for
byte with the files. Then: --no-source stores nothing; --max-source-bytes
skips what does not fit; a file the target's user may not read (the target
runs as nobody, the file is root's, mode 0600) is not stored though its code
was sampled; a file that exists only in the target's mount namespace is
stored; a relative file name is read from the target's working directory.

Usage: test_sources.py --record PATH --report PATH [--only LABEL]
Prints one line per check and ends with 'N passed, N failed, N skipped'.
"""
import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib

import interps

MAIN_PY = r'''import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib.pyz"))
from pkg import zmod


def local_work(n):
    s = 0
    for i in range(n):
        s += i % 3  # HOT-MAIN
    return s


def main(secs):
    end = time.time() + secs
    while time.time() < end:
        local_work(20000)
        zmod.zip_work(20000)


main(float(sys.argv[1]))
'''

ZMOD_PY = r'''def zip_work(n):
    total = 0
    for i in range(n):
        total += i * i % 7  # HOT-ZIP
    return total
'''

# Run as nobody: code "from" a file nobody may read (compiled from a string
# under that name), and from a file anyone may read.
NOBODY_PY = r'''import sys
import time

secret, public = sys.argv[1], sys.argv[2]
src = "def hidden(n):\n    return sum(i * i for i in range(n))  # SECRET\n"
ns = {}
exec(compile(src, secret, "exec"), ns)
pub = {}
with open(public) as f:
    exec(compile(f.read(), public, "exec"), pub)
end = time.time() + float(sys.argv[3])
while time.time() < end:
    ns["hidden"](20000)
    pub["visible"](20000)
'''

PUBLIC_PY = r'''def visible(n):
    return sum(i * i for i in range(n))  # PUBLIC
'''


def interpreters():
    """(label, path) of every CPython we can test here (interps.py)."""
    return interps.interpreters()


def stored_sources(db):
    """{file name: text bytes} decoded as schema/trace.sql says, sizes checked."""
    out = {}
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT s.value, c.size, c.encoding, c.data FROM sources c "
                           "JOIN strings s ON s.id = c.file").fetchall()
    finally:
        con.close()
    for name, size, encoding, data in rows:
        text = bytes(data) if encoding == 0 else zlib.decompress(bytes(data))
        if len(text) != size:
            raise AssertionError("%s: %d bytes stored, %d claimed" % (name, len(text), size))
        out[name] = text
    return out


def meta(db):
    con = sqlite3.connect(db)
    try:
        return dict(con.execute("SELECT key, value FROM meta").fetchall())
    finally:
        con.close()


def make_pyz(path, members):
    """A zipapp-style archive: a shebang line, then the zip."""
    with open(path, "wb") as f:
        f.write(b"#!/usr/bin/env python3\n")
        with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
            for name, text in members.items():
                z.writestr(name, text)


def make_app(d):
    app = os.path.join(d, "app")
    os.mkdir(app)
    with open(os.path.join(app, "main.py"), "w") as f:
        f.write(MAIN_PY)
    make_pyz(os.path.join(app, "lib.pyz"), {"pkg/__init__.py": "", "pkg/zmod.py": ZMOD_PY})
    return app


class Runner:
    def __init__(self, args):
        self.record = os.path.abspath(args.record)
        self.report = os.path.abspath(args.report)
        self.passed = self.failed = self.skipped = 0
        self.tmp = tempfile.mkdtemp(prefix="pyflame-sources-")

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print("ok   %s" % name)
        else:
            self.failed += 1
            print("FAIL %s %s" % (name, detail))
        sys.stdout.flush()
        return ok

    def skip(self, name, why):
        self.skipped += 1
        print("skip %s: %s" % (name, why))

    def rec(self, args, cwd=None):
        return subprocess.run([self.record, "-q", "-f"] + args, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=120,
                              cwd=cwd)

    def rep(self, args, cwd=None):
        p = subprocess.run([self.report] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=120, cwd=cwd)
        if p.returncode != 0:
            raise RuntimeError("pyflame-report %s failed (%d): %s"
                               % (" ".join(args), p.returncode, p.stderr.strip()))
        return p.stdout

    def mkdtemp(self):
        return tempfile.mkdtemp(dir=self.tmp)


def hot_row(by_line, marker):
    """The --by-line row whose source text holds `marker`, as (self, text), or None."""
    for line in by_line.splitlines():
        if marker in line:
            return int(line.split()[0]), line
    return None


def annotated_line(text, marker):
    """The annotate line holding `marker`: (self %, total %), 0 where blank."""
    for line in text.splitlines():
        if marker in line:
            self_pct, total_pct = line[0:7].strip(), line[8:15].strip()
            return float(self_pct or 0), float(total_pct or 0)
    return None


def test_travel(r, label, py):
    """Record, move the trace, delete the sources: the reports still show the code."""
    d = r.mkdtemp()
    app = make_app(d)
    main_py = os.path.join(app, "main.py")
    member = os.path.join(app, "lib.pyz", "pkg", "zmod.py")
    db = os.path.join(d, "run.db")
    p = r.rec(["-o", db, "-r", "200", "--", py, main_py, "2"])
    if not r.check("%s travel: recorded" % label, p.returncode == 0, p.stderr):
        return
    src = stored_sources(db)
    r.check("%s travel: the script is stored as it was" % label,
            src.get(main_py) == MAIN_PY.encode(), sorted(src))
    r.check("%s travel: the module from the zipapp is stored" % label,
            src.get(member) == ZMOD_PY.encode(), sorted(src))
    m = meta(db)
    r.check("%s travel: meta counts the stored files" % label,
            int(m.get("source_files", 0)) == len(src) and
            int(m.get("source_bytes", 0)) == sum(len(t) for t in src.values()),
            "meta %s, %d files" % ({k: v for k, v in m.items() if "source" in k}, len(src)))

    elsewhere = r.mkdtemp()
    moved = os.path.join(elsewhere, "moved.db")
    shutil.move(db, moved)
    shutil.rmtree(d)
    by_line = r.rep(["--by-line", "--top", "0", "moved.db"], cwd=elsewhere)
    for marker in ("# HOT-MAIN", "# HOT-ZIP"):
        row = hot_row(by_line, marker)
        r.check("%s travel: --by-line shows '%s' with samples" % (label, marker),
                row is not None and row[0] > 0, by_line[:2000])
    for name, marker in (("main.py", "# HOT-MAIN"), ("zmod.py", "# HOT-ZIP")):
        text = r.rep(["annotate", "--source", name, "moved.db"], cwd=elsewhere)
        hot = annotated_line(text, marker)
        r.check("%s travel: annotate %s shows its hot line with a share" % (label, name),
                hot is not None and hot[0] > 5.0, text[:2000])
        r.check("%s travel: annotate %s says the text is the trace's" % (label, name),
                "Source: stored in the trace" in text, text[:300])
    doc = json.loads(r.rep(["annotate", "--top", "2", "--format", "json", "moved.db"],
                           cwd=elsewhere))
    names = [f["file"] for f in doc["files"]]
    r.check("%s travel: the two hottest files are the script and the zipped module" % label,
            sorted(names) == sorted([main_py, member]) and
            all(f["source"] == "trace" for f in doc["files"]), names)
    alias = r.rep(["--source", "main.py", "moved.db"], cwd=elsewhere)
    r.check("%s travel: report --source is annotate" % label,
            alias == r.rep(["annotate", "--source", "main.py", "moved.db"], cwd=elsewhere))


def test_no_source(r, py):
    d = r.mkdtemp()
    app = make_app(d)
    db = os.path.join(d, "none.db")
    p = r.rec(["--no-source", "-o", db, "--", py, os.path.join(app, "main.py"), "1"])
    if not r.check("no-source: recorded", p.returncode == 0, p.stderr):
        return
    r.check("no-source: no source stored", stored_sources(db) == {})
    r.check("no-source: no source meta", "source_files" not in meta(db))
    shutil.rmtree(app)
    by_line = r.rep(["--by-line", db])
    r.check("no-source: --by-line has no text once the files are gone",
            "# HOT" not in by_line and "local_work" in by_line, by_line[:1000])
    text = r.rep(["annotate", "--source", "main.py", db])
    r.check("no-source: annotate lists the sampled lines alone",
            "Source: not in the trace and not readable here" in text, text[:500])


def test_limits(r, py):
    d = r.mkdtemp()
    app = make_app(d)
    main_py = os.path.join(app, "main.py")
    with open(main_py, "a") as f:
        f.write("# padding\n" * 200)  # over 1 KiB; the zipped module stays under
    db = os.path.join(d, "small.db")
    p = r.rec(["--max-source-bytes", "1k", "-o", db, "--", py, main_py, "1"])
    if not r.check("max-source-bytes: recorded", p.returncode == 0, p.stderr):
        return
    src = stored_sources(db)
    member = os.path.join(app, "lib.pyz", "pkg", "zmod.py")
    r.check("max-source-bytes: a file over the limit is not stored, a small one is",
            main_py not in src and member in src and sum(map(len, src.values())) <= 1024,
            sorted(src))
    r.check("max-source-bytes: the skipped file is counted",
            int(meta(db).get("source_skipped", 0)) >= 1, meta(db))
    p = r.rec(["--max-source-bytes", "lots", "-o", db, "--", py, main_py, "1"])
    r.check("max-source-bytes: a bad size is a usage error",
            p.returncode == 2 and "invalid size" in p.stderr, p.stderr)


def drop_to_nobody():
    os.setgid(65534)
    os.setgroups([])
    os.setuid(65534)


def test_unreadable(r):
    """The target runs as nobody: a root-only file it has code from is not stored."""
    py = "/usr/bin/python3"
    if os.geteuid() != 0 or not os.path.exists(py):
        r.skip("unreadable", "needs root and /usr/bin/python3")
        return
    d = r.mkdtemp()
    os.chmod(d, 0o755)
    os.chmod(r.tmp, 0o755)
    secret = os.path.join(d, "secret.py")
    public = os.path.join(d, "public.py")
    script = os.path.join(d, "as_nobody.py")
    with open(secret, "w") as f:
        f.write("def hidden(n):\n    return sum(i * i for i in range(n))  # SECRET\n")
    os.chmod(secret, 0o600)
    for path, text in ((public, PUBLIC_PY), (script, NOBODY_PY)):
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o644)
    target = subprocess.Popen([py, script, secret, public, "4"], preexec_fn=drop_to_nobody,
                              stderr=subprocess.PIPE, universal_newlines=True)
    try:
        db = os.path.join(d, "nobody.db")
        time.sleep(0.7)
        p = r.rec(["-o", db, "-r", "200", "-d", "2", "-p", str(target.pid)])
        if not r.check("unreadable: recorded a target running as nobody", p.returncode == 0,
                       p.stderr):
            return
    finally:
        target.kill()
        _, err = target.communicate()
    src = stored_sources(db)
    folded = r.rep([db])
    r.check("unreadable: code from the root-only file was sampled", secret in folded,
            folded[:1000])
    r.check("unreadable: the root-only file is not stored", secret not in src, sorted(src))
    r.check("unreadable: files the target may read are stored",
            src.get(public) == PUBLIC_PY.encode() and src.get(script) == NOBODY_PY.encode(),
            sorted(src))
    r.check("unreadable: the skipped file is counted",
            int(meta(db).get("source_skipped", 0)) >= 1, meta(db))


def test_namespace(r):
    """A file that exists only in the target's mount namespace is stored."""
    py = "/usr/bin/python3"
    if os.geteuid() != 0 or not shutil.which("unshare") or not os.path.exists(py):
        r.skip("namespace", "needs root, unshare and /usr/bin/python3")
        return
    d = r.mkdtemp()
    inside = os.path.join(d, "inside")
    os.mkdir(inside)
    script = os.path.join(inside, "only_inside.py")
    text = ("import time\n\ndef spin(n):\n    return sum(i * i for i in range(n))  # INSIDE\n\n"
            "end = time.time() + 1.5\nwhile time.time() < end:\n    spin(20000)\n")
    setup = "mount -t tmpfs none %s && printf '%%s' \"$1\" > %s && exec %s %s" % (
        inside, script, py, script)
    db = os.path.join(d, "ns.db")
    p = r.rec(["-o", db, "--", "unshare", "--mount", "--propagation", "private",
               "sh", "-c", setup, "sh", text])
    if not r.check("namespace: recorded", p.returncode == 0, p.stderr):
        return
    r.check("namespace: the file does not exist outside", not os.path.exists(script))
    src = stored_sources(db)
    r.check("namespace: its text is stored", src.get(script) == text.encode(), sorted(src))


def test_relative(r, label, py):
    """An interpreter that keeps the script's name relative: read from its cwd."""
    d = r.mkdtemp()
    app = make_app(d)
    db = os.path.join(d, "rel.db")
    p = r.rec(["-o", db, "--", py, "main.py", "1"], cwd=app)
    if not r.check("%s relative: recorded" % label, p.returncode == 0, p.stderr):
        return
    files = set(f for f in r.rep([db]).replace(";", "\n").split("\n"))
    relative = any("(main.py:" in f for f in files)
    src = stored_sources(db)
    if not relative:
        r.skip("%s relative" % label, "this interpreter names the script absolutely")
        return
    r.check("%s relative: main.py is stored under its relative name" % label,
            src.get("main.py") == MAIN_PY.encode(), sorted(src))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--only", help="only the interpreter with this label")
    args = ap.parse_args()
    r = Runner(args)
    try:
        pys = [(l, p) for l, p in interpreters() if not args.only or l == args.only]
        if not pys:
            r.skip("all", "no interpreter found")
        for label, py in pys:
            test_travel(r, label, py)
        if pys:
            py = pys[-1][1]
            test_no_source(r, py)
            test_limits(r, py)
        test_unreadable(r)
        test_namespace(r)
        for label, py in pys:
            if label.startswith(("2.", "3.6", "3.7", "3.8")):
                test_relative(r, label, py)
                break
    finally:
        shutil.rmtree(r.tmp, ignore_errors=True)
    print("%d passed, %d failed, %d skipped" % (r.passed, r.failed, r.skipped))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
