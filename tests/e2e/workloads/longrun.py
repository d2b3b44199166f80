# Runs until killed, printing a heartbeat line each 100 ms on stdout and
# counting SIGUSR1 signals it receives (reported in the heartbeat).
import os
import signal
import sys
import time

received = [0]


def on_usr1(signum, frame):
    received[0] += 1


def tick():
    end = time.time() + 0.1
    x = 0
    while time.time() < end:
        x += 1
    return x


signal.signal(signal.SIGUSR1, on_usr1)
sys.stdout.write("ready %d\n" % os.getpid())
sys.stdout.flush()
while True:
    tick()
    sys.stdout.write("alive %d\n" % received[0])
    sys.stdout.flush()
