# A multiprocessing pool whose workers run a known function, work_item.
import multiprocessing
import sys
import time


def work_item(n):
    end = time.time() + 0.05
    x = 0
    while time.time() < end:
        x += n
    return x


def main():
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    pool = multiprocessing.Pool(2)
    end = time.time() + secs
    while time.time() < end:
        pool.map(work_item, range(8))
    pool.close()
    pool.join()


if __name__ == "__main__":
    main()
