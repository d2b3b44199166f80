# Runs until killed, printing a heartbeat line each 100 ms on stdout with the
# number of SIGUSR1 signals the process has received. Signals are counted at
# the C level, one byte per delivery through signal.set_wakeup_fd, because a
# Python-level handler runs once for several signals that arrive before the
# interpreter checks for them (on a loaded machine that happens).
import fcntl
import os
import signal
import sys
import time

rfd, wfd = os.pipe()
for fd in (rfd, wfd):
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
received = [0]


def on_usr1(signum, frame):
    pass


def drain():
    while True:
        try:
            data = os.read(rfd, 4096)
        except OSError:
            return
        if not data:
            return
        received[0] += len(data)


def tick():
    end = time.time() + 0.1
    x = 0
    while time.time() < end:
        x += 1
    return x


signal.signal(signal.SIGUSR1, on_usr1)
signal.set_wakeup_fd(wfd)
sys.stdout.write("ready %d\n" % os.getpid())
sys.stdout.flush()
while True:
    tick()
    drain()
    sys.stdout.write("alive %d\n" % received[0])
    sys.stdout.flush()
