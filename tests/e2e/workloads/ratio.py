# Splits CPU time between two functions in a known ratio, 3:1, by wall
# clock slices, so a uniform slowdown from the profiler keeps the ratio.
import sys
import time


def spin(seconds):
    end = time.time() + seconds
    x = 0
    while time.time() < end:
        x += 1
    return x


def work_a():
    spin(0.030)


def work_b():
    spin(0.010)


def main():
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    end = time.time() + secs
    while time.time() < end:
        work_a()
        work_b()


if __name__ == "__main__":
    main()
