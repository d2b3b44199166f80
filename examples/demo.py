"""A small program to profile: a pretend request handler that parses,
computes and renders, with a background thread that compresses logs.

    pyflame-record -o demo.db -- python3 examples/demo.py
    pyflame-report --by-function demo.db
"""
import json
import threading
import time
import zlib


def parse_request(i):
    return json.loads(json.dumps({"id": i, "items": list(range(50))}))


def is_prime(n):
    if n < 2:
        return False
    f = 2
    while f * f <= n:
        if n % f == 0:
            return False
        f += 1
    return True


def compute(req):
    # The hot spot: a naive prime count over the request's items.
    return sum(1 for k in range(2000 + req["id"] % 500) if is_prime(k))


def render(req, result):
    return "<li>%d: %d primes</li>" % (req["id"], result)


def handle(i):
    req = parse_request(i)
    return render(req, compute(req))


def compress_logs(stop):
    data = b"GET /index.html 200\n" * 2000
    while not stop.is_set():
        zlib.compress(data, 9)
        time.sleep(0.01)


def main(seconds=3.0):
    stop = threading.Event()
    bg = threading.Thread(target=compress_logs, args=(stop,), name="log-compressor")
    bg.start()
    end = time.time() + seconds
    i = 0
    while time.time() < end:
        handle(i)
        i += 1
    stop.set()
    bg.join()
    print("handled %d requests" % i)


if __name__ == "__main__":
    main()
