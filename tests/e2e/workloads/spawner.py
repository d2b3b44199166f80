# A thread per job, as a server's accepting thread or a pool without reuse
# does: the main thread starts five threads that sleep a moment, waits for
# them, and again, for argv[1] seconds. Threads start and end all the time.
import sys
import threading
import time


def job():
    time.sleep(0.002)


end = time.time() + float(sys.argv[1])
n = 0
while time.time() < end:
    ts = [threading.Thread(target=job) for _ in range(5)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    n += 5
print("threads %d" % n)
