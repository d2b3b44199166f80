"""Workload of pyflame-diff's end-to-end test: two phases of SECONDS each,
first load() then crunch(), each doing its own work (self time), with
helper() called from both for a smaller share.

Usage: phases.py SECONDS
"""
import sys
import time


def helper(n):
    s = 0
    for i in range(n):
        s += i
    return s


def load(seconds):
    end = time.monotonic() + seconds
    s = 0
    while time.monotonic() < end:
        for i in range(400):
            s += i ^ 3
        helper(100)
    return s


def crunch(seconds):
    end = time.monotonic() + seconds
    s = 0
    while time.monotonic() < end:
        for i in range(400):
            s += i * 3
        helper(100)
    return s


seconds = float(sys.argv[1])
load(seconds)
crunch(seconds)
