# Does a little work, then exits with the status given as argv[1].
import sys
import time


def work(seconds):
    end = time.time() + seconds
    while time.time() < end:
        pass


work(0.5)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
