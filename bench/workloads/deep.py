# CPU-bound workload with a stack of a chosen depth, for the recorder
# benchmark. Usage: deep.py DEPTH SECONDS [THREADS [distinct|sleeping]]
#                                              run for a time (0: forever), in
#                                              THREADS threads (default 1) alike;
#                                              "distinct": a chain of DEPTH different
#                                              functions, not one recursing;
#                                              "sleeping": only the main thread
#                                              busy, the others asleep at that depth
#                   deep.py DEPTH -N ITERS     do a fixed amount of work, print seconds taken
#                   deep.py DEPTH -T SECONDS   run for a time, printing "MONOTONIC_TIME COUNT"
#                                              every ~50 ms: units of work done since the last line
import os
import sys
import time


def leaf(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


def recurse(depth, fn):
    if depth <= 1:
        return fn()
    return recurse(depth - 1, fn)


def main():
    depth = int(sys.argv[1])
    if sys.argv[2] == "-N":
        iters = int(sys.argv[3])
        t0 = time.time()
        recurse(depth - 2, lambda: [leaf(1000) for _ in range(iters)])
        sys.stdout.write("%.6f\n" % (time.time() - t0))
        return
    if sys.argv[2] == "-T":
        end = time.monotonic() + float(sys.argv[3])
        sys.stdout.write("ready\n")
        sys.stdout.flush()

        def report():
            n, mark = 0, time.monotonic() + 0.05
            while True:
                leaf(1000)
                n += 1
                if n % 16 == 0:
                    now = time.monotonic()
                    if now >= mark:
                        sys.stdout.write("%.6f %d\n" % (now, n))
                        sys.stdout.flush()
                        n, mark = 0, now + 0.05
                        if now >= end:
                            return

        recurse(depth - 2, report)
        return
    secs = float(sys.argv[2])
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    end = time.time() + secs if secs > 0 else float("inf")

    def spin():
        while time.time() < end:
            leaf(1000)

    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    run = recurse
    if len(sys.argv) > 4 and sys.argv[4] == "distinct":
        # f0 calls f1 ... calls fN-1 calls fn(): every frame its own code object.
        ns = {}
        src = "".join("def f%d(n, fn):\n    return f%d(n, fn)\n" % (i, i + 1)
                      for i in range(depth - 3))
        src += "def f%d(n, fn):\n    return fn()\n" % (depth - 3)
        # (Under a file name, as a module's functions are: code compiled from
        # "<string>" is taken for short-lived, and checked more often.)
        exec(compile(src, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                       "deep_chain.py"), "exec"), ns)
        run = ns["f0"]
    def nap():
        while time.time() < end:
            time.sleep(0.5)

    sleeping = len(sys.argv) > 4 and sys.argv[4] == "sleeping"
    if threads > 1:
        import threading
        for _ in range(threads - 1):
            t = threading.Thread(target=run, args=(depth - 2, nap if sleeping else spin))
            t.daemon = True
            t.start()
    run(depth - 2, spin)


if __name__ == "__main__":
    main()
