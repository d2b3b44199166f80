# A stack of DEPTH frames (argv[1]) whose leaf burns CPU for SECS (argv[2]):
# deeper than the in-kernel sampler's bound (256 frames) when DEPTH is 300.
import sys
import time

DEPTH = int(sys.argv[1]) if len(sys.argv) > 1 else 300
SECS = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0


def leaf(end):
    x = 0
    while time.time() < end:
        x += 1
    return x


def down(n, end):
    if n <= 1:
        return leaf(end)
    return down(n - 1, end)


down(DEPTH - 1, time.time() + SECS)  # <module> is the last frame
