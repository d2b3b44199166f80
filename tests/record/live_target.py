# live_target.py - the process test_pywalk_live.c walks from outside.
# Runs on 2.7 and 3.6+ (no f-strings, no async syntax in this file).
#
# Builds a known stack in the main thread - <module> -> run -> Starter.__init__
# (called often enough for 3.13's __init__ shim to appear) -> drive -> a
# coroutine (3.5+, from live_target_async.py) -> a generator ->
# Widget.method -> spin - and a second thread, "worker-A", sleeping in
# worker(). Before spinning forever on one line it prints what CPython itself
# reports about these frames (names, qualnames, files, f_lineno, thread ids),
# then READY. SIGUSR1 starts one more thread, "worker-B", which prints
# "TID worker-B <tid>".
import os
import signal
import sys
import threading
import time

PY3 = sys.version_info[0] >= 3


def gettid():
    try:
        return threading.get_native_id()
    except AttributeError:
        import ctypes
        return ctypes.CDLL(None).syscall(186)  # SYS_gettid on x86_64


worker_tid = []
worker_up = threading.Event()


def worker():
    worker_tid.append(gettid())
    worker_up.set()
    while True:
        time.sleep(0.05)


def worker_b():
    sys.stdout.write("TID worker-B %d\n" % gettid())
    sys.stdout.flush()
    while True:
        time.sleep(0.05)


def start_worker_b(signum, frame):
    b = threading.Thread(target=worker_b, name="worker-B")
    b.daemon = True
    b.start()


def is_shim(code):
    return code.co_name == "__init__" and code.co_filename == "__init__"


def report(leaf_line):
    out = ["PID %d" % os.getpid(), "TID main %d" % gettid(),
           "TID worker %d" % worker_tid[0]]
    f = sys._getframe(1)
    first = True
    while f is not None:
        c = f.f_code
        if not is_shim(c):
            qual = getattr(c, "co_qualname", "-")
            line = leaf_line if first else f.f_lineno
            out.append("F %s\t%s\t%s\t%d\t%d" % (c.co_name, qual, c.co_filename, line,
                                              c.co_firstlineno))
            first = False
        f = f.f_back
    out.append("THREADS %d" % threading.active_count())
    out.append("READY")
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.flush()


def spin(n):
    report(sys._getframe().f_lineno + 1)
    while True: n += 1  # noqa: E701 - the whole loop on one line


class Widget(object):
    def method(self, n):
        return spin(n)


def gen():
    yield Widget().method(0)


def drive():
    if sys.version_info >= (3, 5):
        import live_target_async
        coro = live_target_async.coro(gen)
        coro.send(None)
    else:
        next(gen())


class Starter(object):
    def __init__(self, go):
        if go:
            drive()


def run():
    for i in range(300):
        Starter(i == 299)


signal.signal(signal.SIGUSR1, start_worker_b)
t = threading.Thread(target=worker, name="worker-A")
t.daemon = True
t.start()
worker_up.wait()
run()
