"""Workload of pyflame-diff's end-to-end test: four functions called for a
given number of seconds, each call a few microseconds long, in a random
order with random lengths. Their shares of the time follow their mean work
per call (parse 25%, compute 25%, render 17%, query 33%).

The order is pseudo-random on purpose: a loop that calls the same functions in the same order every few
microseconds is periodic, and a sampler ticking every 5 ms sees it
stroboscopically, at a phase that drifts slowly, so that consecutive samples
are alike however short the calls are, and two runs differ by more than
their samples can show.

Usage: bench.py SECONDS [SLOW]   SLOW names a function given twice the work
"""
import sys
import time


def parse(n):
    s = 0
    for i in range(n):
        s += i & 7
    return s


def compute(n):
    s = 0
    for i in range(n):
        s += i & 7
    return s


def render(n):
    s = 0
    for i in range(n):
        s += i & 7
    return s


def query(n):
    s = 0
    for i in range(n):
        s += i & 7
    return s


def main():
    seconds = float(sys.argv[1])
    work = {parse: 150, compute: 150, render: 100, query: 200}
    if len(sys.argv) > 2:
        work[globals()[sys.argv[2]]] *= 2
    # 4 functions x 4 lengths, picked by the top bits of a linear congruential
    # generator: no period at any scale a recording can see, and cheap.
    table = [(f, int(n * k)) for f, n in work.items() for k in (0.5, 0.8, 1.2, 1.5)]
    x = 12345
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(200):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
            f, n = table[x >> 27]
            f(n)


main()
