# Generator and coroutine frames: the CPU is burnt inside a generator body
# and inside a coroutine body, each driven by a named caller.
import sys
import time


def numbers(deadline):
    x = 0
    while time.time() < deadline:
        for i in range(100):
            x += i * i  # GEN
        yield x


def consume_generator(deadline):
    total = 0
    for v in numbers(deadline):
        total += v
    return total


def coroutine_body(deadline):
    x = 0
    while True:
        _ = yield x
        for i in range(300):
            x += i  # CORO
        if time.time() > deadline:
            return


def drive_coroutine(deadline):
    c = coroutine_body(deadline)
    next(c)
    try:
        while True:
            c.send(None)
    except StopIteration:
        pass


def main():
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    end = time.time() + secs
    while time.time() < end:
        consume_generator(time.time() + 0.05)
        drive_coroutine(time.time() + 0.05)


if __name__ == "__main__":
    main()
