"""asyncio tasks of a known structure, for tests/e2e/test_async.py.

Usage: async_tasks.py SECONDS [READY_FILE]

One event loop (the main thread) runs:
- 8 tasks "user-0".."user-7" (names from 3.8): handle -> fetch_user ->
  db_query -> asyncio.sleep: waiting on the slow "database";
- 2 tasks "cache-0", "cache-1": handle_cached -> cache_get -> asyncio.sleep;
- "gatherer": gather_parent awaits asyncio.gather of 3 tasks "gchild-N"
  (gather_child -> asyncio.sleep);
- 3.11+: "grouper": group_parent, in a TaskGroup of 2 tasks "tgchild-N"
  (group_child -> asyncio.sleep);
- "cpu": burn, CPU-bound, yielding to the loop now and then;
- the main task "main", awaiting asyncio.sleep;
- "spawner": creates a short-lived task every millisecond or so, named
  "churn" and unnamed in turn (CPython names those "Task-<counter>");
- an unnamed task ("Task-<counter>") waiting in unnamed_wait.
A second thread "side-loop" runs a loop of its own with 4 tasks "side-N"
(side_wait -> asyncio.sleep).
Lines are marked with comments the test looks for (AWAIT-xxx).
With PYFLAME_PURE_TASKS=1 in the environment, _asyncio cannot be imported:
asyncio's pure-Python Task and Future are used, as where that module is
missing.
"""
import os
import sys

if os.environ.get("PYFLAME_PURE_TASKS") == "1":
    sys.modules["_asyncio"] = None
import asyncio
import threading

NAMES = sys.version_info >= (3, 8)


def spawn(coro, name):
    if NAMES:
        return asyncio.get_event_loop().create_task(coro, name=name)
    return asyncio.get_event_loop().create_task(coro)


async def db_query(n):
    await asyncio.sleep(3600)  # AWAIT-DB


async def fetch_user(n):
    await db_query(n)  # AWAIT-FETCH


async def handle(n):
    await fetch_user(n)  # AWAIT-HANDLE


async def cache_get(n):
    await asyncio.sleep(3600)  # AWAIT-CACHE


async def handle_cached(n):
    await cache_get(n)  # AWAIT-HCACHE


async def gather_child(n):
    await asyncio.sleep(3600)  # AWAIT-GCHILD


async def gather_parent():
    kids = [spawn(gather_child(i), "gchild-%d" % i) for i in range(3)]
    await asyncio.gather(*kids)  # AWAIT-GATHER


async def group_child(n):
    await asyncio.sleep(3600)  # AWAIT-TGCHILD


async def group_parent():
    async with asyncio.TaskGroup() as tg:  # AWAIT-GROUP
        for i in range(2):
            tg.create_task(group_child(i), name="tgchild-%d" % i)


def spin(n):
    s = 0
    for i in range(n):
        s += i % 7  # HOT-CPU
    return s


async def burn():
    while True:
        spin(200000)
        await asyncio.sleep(0)  # AWAIT-BURN


async def churn_one():
    await asyncio.sleep(0)


async def unnamed_wait():
    await asyncio.sleep(3600)  # AWAIT-UNNAMED


async def spawner():
    n = 0
    while True:
        # Every other one unnamed: CPython names it "Task-<counter>".
        spawn(churn_one(), "churn" if n % 2 else None)
        n += 1
        await asyncio.sleep(0.001)  # AWAIT-SPAWN


async def side_wait(n):
    await asyncio.sleep(3600)  # AWAIT-SIDE


async def side_main(started):
    for i in range(4):
        spawn(side_wait(i), "side-%d" % i)
    await asyncio.sleep(0.1)
    started.set()
    await asyncio.sleep(3600)  # AWAIT-SIDEMAIN


def side_thread(started):
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    if NAMES:
        loop.run_until_complete(loop.create_task(side_main(started), name="side-main"))
    else:
        loop.run_until_complete(side_main(started))


async def main(secs, ready):
    started = threading.Event()
    threading.Thread(target=side_thread, args=(started,), name="side-loop", daemon=True).start()
    started.wait()
    spawn(spawner(), "spawner")
    for i in range(8):
        spawn(handle(i), "user-%d" % i)
    for i in range(2):
        spawn(handle_cached(i), "cache-%d" % i)
    spawn(gather_parent(), "gatherer")
    if sys.version_info >= (3, 11):
        spawn(group_parent(), "grouper")
    spawn(burn(), "cpu")
    spawn(unnamed_wait(), None)
    await asyncio.sleep(0.2)
    if ready:
        with open(ready, "w") as f:
            f.write("ready\n")
    await asyncio.sleep(secs)  # AWAIT-MAIN
    sys.stdout.flush()
    import os
    os._exit(0)


if __name__ == "__main__":
    secs = float(sys.argv[1])
    ready = sys.argv[2] if len(sys.argv) > 2 else None
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    if NAMES:
        loop.run_until_complete(loop.create_task(main(secs, ready), name="main"))
    else:
        loop.run_until_complete(main(secs, ready))
