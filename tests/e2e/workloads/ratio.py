# Splits CPU time between two functions in a known ratio, 3:1, by doing
# three times as many iterations of the same loop in one as in the other.
# Work is counted in iterations, not in wall-clock time, so that preemption
# on a loaded machine (which stretches whichever call it lands in) cannot
# move the true ratio.
import sys
import time

N = 20000


def spin(n):
    x = 0
    for i in range(n):
        x += i
    return x


def work_a():
    spin(3 * N)


def work_b():
    spin(N)


def main():
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    end = time.time() + secs
    while time.time() < end:
        work_a()
        work_b()


if __name__ == "__main__":
    main()
