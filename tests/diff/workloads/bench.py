"""Workload of pyflame-diff's end-to-end test: four functions called in turn
for a given number of seconds, each call a few microseconds long, so that
samples 5 ms apart are nearly independent. Their shares of the time follow
their work per call (parse 25%, compute 25%, render 17%, query 33%).

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
    work = {"parse": 150, "compute": 150, "render": 100, "query": 200}
    if len(sys.argv) > 2:
        work[sys.argv[2]] *= 2
    p, c, r, q = work["parse"], work["compute"], work["render"], work["query"]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(20):
            parse(p)
            compute(c)
            render(r)
            query(q)


main()
