# linetable_dump.py - ground truth for test_linetable.c, run by every
# installed interpreter (2.7 and 3.6+, so no f-strings).
#
# Compiles standard-library modules plus a few synthetic sources with large and
# negative line jumps, walks every code object, and prints for each one its
# raw line table, co_firstlineno and, at every instruction offset, the line
# that CPython itself reports: PyCode_Addr2Line (what frame.f_lineno uses),
# called through ctypes. On 3.10+ co_lines() is checked against it too.
#
# Output (text, one record per line):
#   V <major> <minor>
#   C <first_line> <table hex or -> <step> <n>      a code object; n offsets follow
#   L <line at offset 0> <line at offset step> ...  one line, n numbers
#   A <line at offset -1>
#   M <count>   offsets where co_lines() disagreed with PyCode_Addr2Line (3.10+)
#   E           end
import ctypes
import os
import sys

MAX_OFFSETS = int(os.environ.get("LT_MAX_OFFSETS", "150000"))

addr2line = ctypes.pythonapi.PyCode_Addr2Line
addr2line.argtypes = [ctypes.py_object, ctypes.c_int]
addr2line.restype = ctypes.c_int

PY3 = sys.version_info[0] >= 3
STEP = 2 if sys.version_info[:2] >= (3, 6) else 1


def table_of(co):
    if sys.version_info[:2] >= (3, 10):
        return co.co_linetable
    return co.co_lnotab


def hexs(b):
    if not b:
        return "-"
    if PY3:
        return b.hex()
    return b.encode("hex")


def synthetic_sources():
    # Big forward jumps (beyond one lnotab byte), backward jumps, lines
    # without code, long straight-line bodies (address deltas > 255).
    out = []
    body = ["def far_lines(x):"]
    ln = 1
    for gap in (1, 2, 127, 128, 129, 255, 256, 300, 1000, 70000):
        body.append("\n" * (gap - 1) + "    x = x + %d" % gap)
    body.append("    return x")
    out.append(("<far>", "\n".join(body) + "\n"))
    big = ["def long_body(a):"]
    for i in range(400):
        big.append("    a = (a * %d + %d) %% 7919" % (i + 3, i))
    big.append("    return [a for a in range(3) if a]")
    out.append(("<long>", "\n".join(big) + "\n"))
    back = ("def backwards(a):\n"
            "    return (a +\n"
            "            a *\n"
            "            (a if a else\n"
            "             2))\n"
            "x = [backwards(i) for i in\n"
            "     range(3)]\n"
            "class K(object):\n"
            "    def m(self):\n"
            "        try:\n"
            "            return 1\n"
            "        finally:\n"
            "            pass\n"
            "lam = lambda q: (q,\n"
            "                 q)\n")
    out.append(("<back>", back))
    return out


def stdlib_sources():
    import os.path
    lib = os.path.dirname(os.__file__)
    names = sorted(n for n in os.listdir(lib) if n.endswith(".py"))
    for n in names:
        p = os.path.join(lib, n)
        try:
            with open(p, "rb") as f:
                src = f.read()
        except (IOError, OSError):
            continue
        yield p, src


def walk(co, seen):
    stack = [co]
    while stack:
        c = stack.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        yield c
        for k in c.co_consts:
            if type(k) is type(c):
                stack.append(k)


def dump_code(w, c):
    tab = table_of(c)
    ncode = len(c.co_code)
    n = (ncode + STEP - 1) // STEP
    w("C %d %s %d %d\n" % (c.co_firstlineno, hexs(tab), STEP, n))
    lines = [addr2line(c, i * STEP) for i in range(n)]
    w("L " + " ".join(str(x) for x in lines) + "\n")
    w("A %d\n" % addr2line(c, -1))
    if sys.version_info[:2] >= (3, 10):
        bad = 0
        ref = {}
        for start, end, line in c.co_lines():
            for a in range(start, end, STEP):
                ref[a] = -1 if line is None else line
        for i in range(n):
            if ref.get(i * STEP, -1) != lines[i]:
                bad += 1
        w("M %d\n" % bad)
    return n


def main():
    w = sys.stdout.write
    w("V %d %d\n" % sys.version_info[:2])
    total = 0
    seen = set()
    sources = synthetic_sources()
    for name, src in sources:
        for c in walk(compile(src, name, "exec"), seen):
            total += dump_code(w, c)
    keep = []
    for path, src in stdlib_sources():
        if total >= MAX_OFFSETS:
            break
        try:
            top = compile(src, path, "exec")
        except (SyntaxError, ValueError, TypeError):
            continue
        keep.append(top)
        for c in walk(top, seen):
            total += dump_code(w, c)
    w("E\n")


main()
