# Splits CPU time between two functions in a ratio of about 3:1, by doing
# three times as many iterations of the same loop in one as in the other,
# and measures the true split as the CPU time each took: what a profile
# shows is checked against what the program did (a CI machine once ran
# the short call a third slower than its share of iterations), and
# preemption on a loaded machine, which stretches whichever call it lands
# in, moves wall time but not CPU time. Written to the file named by the
# second argument: "A_SECONDS B_SECONDS".
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
    # The process's CPU time: it has one thread (2.7 has time.clock for it).
    clock = getattr(time, "process_time", None) or time.clock
    end = time.time() + secs
    in_a = in_b = 0.0
    while time.time() < end:
        t0 = clock()
        work_a()
        t1 = clock()
        work_b()
        t2 = clock()
        in_a += t1 - t0
        in_b += t2 - t1
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            f.write("%.6f %.6f\n" % (in_a, in_b))


if __name__ == "__main__":
    main()
