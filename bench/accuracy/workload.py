# Workloads whose true shares are known by construction, for bench/accuracy.py.
# Each runs for DURATION seconds and writes what it measured of itself (the
# truth) as one JSON object to OUT. Runs on Python 2.7 and 3.6+.
#
#   workload.py split DURATION OUT A_S B_S [random]
#       hot_a for A_S seconds, then hot_b for B_S, over and over (periodic);
#       with "random", each length is drawn uniformly from 0 to twice its mean.
#   workload.py depth DURATION OUT MEAN_S
#       deep_leaf at the bottom of a 100-deep chain and shallow_leaf called
#       directly, in turn, for random lengths of mean MEAN_S each.
#   workload.py faststack DURATION OUT MEAN_S
#       fast_loop (calling a 20-deep recursion over and over: a stack that
#       changes every few tens of nanoseconds) and flat (a loop), in turn,
#       for random lengths of mean MEAN_S each.
#   workload.py twoproc DURATION OUT A_S B_S
#       split (periodic) in this process and in a child it forks, each
#       measuring its own shares: for recordings of several processes at
#       once (-s), where each pass reads them in some order.
#   workload.py oncpu DURATION OUT MEAN_S [cpu]
#       a thread named "worker" busy (spin: running, or runnable when
#       preempted) and asleep (idle_sleep) in turn, for random lengths: busy
#       40% of the time on average. Also writes each sleeping call's window
#       (CLOCK_MONOTONIC) and the thread's id, for the bench to add the time
#       the thread ran inside those calls (from the kernel's switch records);
#       with "cpu", also what its own CPU clock says it ran in them.
#   workload.py threads DURATION OUT A_S B_S
#       split (periodic) in eight threads (thr-1..thr-8) at once, each
#       measuring its own shares: they take turns with the GIL, and each
#       waits for it inside hot_a or hot_b (for the order in which a sample
#       reads, or with --blocking stops, the threads of one process).
#   workload.py gil DURATION OUT
#       three threads (gil-1..gil-3) running pure Python without pause, so they
#       contend for the GIL. A thread that only runs Python runs only while it
#       holds the GIL: its CPU time is its time holding it, and its share of
#       the three threads' CPU time its share of the holding.
#
# --blocking at high rates changes what it measures: it holds the threads for
# ~100 us at each sample, a tenth of the time at 1 kHz, and on a loaded
# machine oncpu's shares move by 1-1.5 points there (see the README's
# Accuracy section).
from __future__ import division, print_function

import json
import os
import random
import sys
import threading
import time

clock = getattr(time, "perf_counter", time.time)


# Time spent inside each measured function, by the function itself: what a
# sample finds at the top of the stack (or under it, for fast_loop), not the
# calls and returns around it. Wall-clock time (what the default mode and
# --blocking sample), and the thread's CPU time (what --bpf samples: it finds
# a thread only on a CPU, and a phase preempted for a while lasts longer on
# the wall clock than on the CPU).
# Kept per thread (the threads case runs split in eight threads at once).
# hot_a and hot_b time themselves from their first statement to their last
# call (their CPU clock, on 2.7 and 3.6 through ctypes, which lets the GIL
# go, is read inside the window) and leave the accounting to their caller:
# with threads contending for the GIL, a thread can wait for it at any
# statement, and a wait in the function's own frame after the window would
# be sampled in the function but not be in the truth (on 3.6, with eight
# threads, most of hot_a's samples were such waits).
_mine = threading.local()


def accounts():
    """This thread's (wall, cpu) time inside each function."""
    if not hasattr(_mine, "wall"):
        _mine.wall, _mine.cpu = {}, {}
    return _mine.wall, _mine.cpu


def add(name, wall, cpu):
    inside, cpu_inside = accounts()
    inside[name] = inside.get(name, 0.0) + wall
    cpu_inside[name] = cpu_inside.get(name, 0.0) + cpu


def hot_a(until):
    start = clock()
    cpu0 = thread_cpu()
    while clock() < until:
        pass
    cpu = thread_cpu() - cpu0
    return clock() - start, cpu


def hot_b(until):
    start = clock()
    cpu0 = thread_cpu()
    while clock() < until:
        pass
    cpu = thread_cpu() - cpu0
    return clock() - start, cpu


def shares(a, b):
    inside, cpu_inside = accounts()
    ta, tb = inside.get(a, 0.0), inside.get(b, 0.0)
    ca, cb = cpu_inside.get(a, 0.0), cpu_inside.get(b, 0.0)
    res = {a: ta / (ta + tb), b: tb / (ta + tb)}
    if ca + cb > 0:
        res["cpu"] = {a: ca / (ca + cb), b: cb / (ca + cb)}
    return res


def split(duration, a, b, rand):
    t = clock()
    end = t + duration
    while t < end:
        add("hot_a", *hot_a(t + (a * 2 * random.random() if rand else a)))
        t = clock()
        add("hot_b", *hot_b(t + (b * 2 * random.random() if rand else b)))
        t = clock()
    return shares("hot_a", "hot_b")


def deep_leaf(until):
    start = clock()
    cpu0 = thread_cpu()
    while clock() < until:
        pass
    add("deep_leaf", clock() - start, thread_cpu() - cpu0)


def shallow_leaf(until):
    start = clock()
    cpu0 = thread_cpu()
    while clock() < until:
        pass
    add("shallow_leaf", clock() - start, thread_cpu() - cpu0)


def descend(n, until):
    if n:
        return descend(n - 1, until)
    return deep_leaf(until)


def depth(duration, mean):
    t = clock()
    end = t + duration
    while t < end:
        descend(99, clock() + 2 * mean * random.random())
        shallow_leaf(clock() + 2 * mean * random.random())
        t = clock()
    return shares("deep_leaf", "shallow_leaf")


def rec(n):
    if n:
        return rec(n - 1)
    return 0


def fast_loop(until):
    start = clock()
    cpu0 = thread_cpu()
    while clock() < until:
        rec(20)
    add("fast_loop", clock() - start, thread_cpu() - cpu0)


def flat(until):
    start = clock()
    cpu0 = thread_cpu()
    while clock() < until:
        pass
    add("flat", clock() - start, thread_cpu() - cpu0)


def faststack(duration, mean):
    t = clock()
    end = t + duration
    while t < end:
        fast_loop(clock() + 2 * mean * random.random())
        flat(clock() + 2 * mean * random.random())
        t = clock()
    return shares("fast_loop", "flat")


_libc = []


def libc():
    """The C library, through ctypes (loaded once), for what the time and threading
    modules of older interpreters lack."""
    if not _libc:
        import ctypes

        _libc.append(ctypes.CDLL(None))
    return _libc[0]


def clock_gettime(clock_id):
    import ctypes

    ts = (ctypes.c_long * 2)()
    libc().clock_gettime(clock_id, ts)
    return ts[0] + ts[1] / 1e9


def thread_cpu():
    """This thread's CPU time, in seconds: time it ran, not time it was stopped."""
    if hasattr(time, "thread_time"):
        return time.thread_time()
    return clock_gettime(3)  # CLOCK_THREAD_CPUTIME_ID


def monotonic():
    """CLOCK_MONOTONIC, in seconds: the clock perf's records are stamped with (-k)."""
    if hasattr(time, "monotonic"):
        return time.monotonic()
    return clock_gettime(1)  # CLOCK_MONOTONIC


def spin(until, now=clock):
    while now() < until:
        pass


def idle_sleep(seconds):
    time.sleep(seconds)


def native_tid():
    if hasattr(threading, "get_native_id"):
        return threading.get_native_id()
    return libc().syscall(186)  # SYS_gettid (x86-64)


def oncpu(duration, mean, cpu_clock=False):
    res = {}

    def worker():
        w0 = monotonic()
        end = w0 + duration
        slept = cpu_in_calls = 0.0
        t = w0
        windows = []
        while t < end:
            spin(t + 2 * 0.8 * mean * random.random(), monotonic)
            c = thread_cpu() if cpu_clock else 0.0
            s = monotonic()
            idle_sleep(2 * 1.2 * mean * random.random())
            t = monotonic()
            if cpu_clock:
                cpu_in_calls += thread_cpu() - c
            windows.append((s, t))
            slept += t - s
        wall = t - w0
        # The time outside the sleeping calls is on CPU (running, or preempted
        # and ready to run); inside them it is in idle_sleep. The thread also
        # runs for a while inside each sleeping call (going to sleep, and from
        # its wake-up to the return), which it cannot see: the bench adds that
        # from the kernel's context-switch records of its thread, in these
        # windows (CLOCK_MONOTONIC).
        res["on_cpu"] = 1 - slept / wall
        res["idle_sleep"] = slept / wall
        res["wall"] = wall
        res["tid"] = native_tid()
        res["windows"] = windows
        if cpu_clock:
            # What the thread's own CPU clock says it ran in those calls (and
            # the clock reads around them), for bench/oncpu_instants.py to set
            # beside the switch records: on these VMs it charges about twice as
            # much.
            res["cpu_in_calls"] = cpu_in_calls

    th = threading.Thread(target=worker, name="worker")
    th.start()
    th.join()
    return res


def gil(duration):
    res = {}
    if not hasattr(sys, "setswitchinterval"):
        # 2.7 offers the GIL every 100 bytecodes, and threads on other CPUs
        # spend CPU time fighting for it without holding it (a third of the
        # time nobody held it, here): offer it every few milliseconds, as 3.x.
        sys.setcheckinterval(20000)

    def worker(name):
        c0, w0 = thread_cpu(), clock()
        n = 0
        while clock() < w0 + duration:
            for i in range(200):
                n += i
        res[name] = thread_cpu() - c0

    threads = [threading.Thread(target=worker, args=("gil-%d" % i,), name="gil-%d" % i)
               for i in (1, 2, 3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    total = sum(res.values())
    return dict((name, cpu / total) for name, cpu in res.items())


def threads(duration, a, b):
    """split (periodic) in eight threads of this process at once, each with its
    own truth: they take turns with the GIL, and a thread waiting for it waits
    inside hot_a or hot_b, where a sample finds it."""
    res = {}

    def worker(name):
        res[name] = split(duration, a, b, False)

    ths = [threading.Thread(target=worker, args=("thr-%d" % i,), name="thr-%d" % i)
           for i in range(1, 9)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    return res


def main():
    case, duration, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    args = sys.argv[4:]
    if case == "split":
        truth = split(duration, float(args[0]), float(args[1]), args[2:] == ["random"])
    elif case == "depth":
        truth = depth(duration, float(args[0]))
    elif case == "faststack":
        truth = faststack(duration, float(args[0]))
    elif case == "twoproc":
        child = os.fork()
        if child == 0:
            mine = split(duration, float(args[0]), float(args[1]), False)
            with open(out + ".child", "w") as f:
                json.dump(mine, f)
            os._exit(0)
        mine = split(duration, float(args[0]), float(args[1]), False)
        os.waitpid(child, 0)
        with open(out + ".child") as f:
            theirs = json.load(f)
        truth = {str(os.getpid()): mine, str(child): theirs}
    elif case == "oncpu":
        truth = oncpu(duration, float(args[0]), args[1:] == ["cpu"])
    elif case == "gil":
        truth = gil(duration)
    elif case == "threads":
        truth = threads(duration, float(args[0]), float(args[1]))
    else:
        raise SystemExit("unknown case " + case)
    with open(out, "w") as f:
        json.dump(truth, f)


if __name__ == "__main__":
    main()
