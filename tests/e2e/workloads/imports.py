# Import-time work, as a program's startup does: argv[1] modules, generated
# into a temporary directory and imported one after the other, each of
# whose bodies spins for argv[2] ms at module level (the module's body is
# the innermost frame: its code object is freed right after the import);
# between two imports, spin() spins as long. Half the CPU time is in module
# bodies, half in spin(), by construction; the times each measured with the
# thread's CPU clock are printed on stderr.
import os
import shutil
import sys
import tempfile
import time

try:
    clock = time.thread_time
except AttributeError:  # 2.7, 3.6
    clock = time.clock if sys.version_info[0] == 2 else time.process_time

N = int(sys.argv[1])
MS = float(sys.argv[2])
BODY = """import time
try:
    _clock = time.thread_time
except AttributeError:
    _clock = time.clock if str is bytes else time.process_time
_t = _clock() + %f
while _clock() < _t:
    pass
"""


def spin(secs):
    t = clock() + secs
    while clock() < t:
        pass


def main():
    d = tempfile.mkdtemp(prefix="pyflame-imports-")
    try:
        for i in range(N):
            with open(os.path.join(d, "gen_mod_%d.py" % i), "w") as f:
                f.write(BODY % (MS / 1000.0))
        sys.path.insert(0, d)
        in_bodies = in_spin = 0.0
        for i in range(N):
            t0 = clock()
            __import__("gen_mod_%d" % i)
            t1 = clock()
            spin(MS / 1000.0)
            t2 = clock()
            in_bodies += t1 - t0
            in_spin += t2 - t1
            sys.modules.pop("gen_mod_%d" % i, None)
        sys.stderr.write("bodies %.6f spin %.6f\n" % (in_bodies, in_spin))
    finally:
        shutil.rmtree(d, ignore_errors=True)


main()
