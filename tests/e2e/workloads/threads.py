# Three busy threads, each in its own function, and one sleeping thread.
# Prints the OS thread id of each (when the version can tell) then runs.
import sys
import threading
import time

DEADLINE = time.time() + (float(sys.argv[1]) if len(sys.argv) > 1 else 3.0)


def busy(n):
    x = 0
    while time.time() < DEADLINE:
        x += n
    return x


def worker_one():
    busy(1)


def worker_two():
    busy(2)


def worker_three():
    busy(3)


def sleeper():
    while time.time() < DEADLINE:
        time.sleep(min(0.25, max(0.0, DEADLINE - time.time())))


def main():
    threads = [threading.Thread(target=f, name=f.__name__)
               for f in (worker_one, worker_two, worker_three, sleeper)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
