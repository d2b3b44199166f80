# A CPU-bound workload whose time goes to one line of one function.
# Runs for the number of seconds given as argv[1] (default 3).
import sys
import time


def hot_loop(deadline):
    n = 0
    while time.time() < deadline:
        n += sum(i * i for i in range(200))  # HOT
    return n


def main():
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    hot_loop(time.time() + secs)


if __name__ == "__main__":
    main()
