# tasks_target.py - asyncio tasks of a known shape for test_pytasks_live.c
# (3.6+): tasks awaiting a chain of coroutines, a task awaiting another task,
# a gather, a TaskGroup (3.11+). Once they are all suspended it prints what
# CPython itself says of each task (its id, name, the task awaiting it, and
# its await chain through cr_await: function and line, outermost first),
# then READY, and sleeps. A second thread, named, sleeps 6 calls deep
# (fuzz_pytasks.c walks captures of this program: two threads, their names).
# With PYFLAME_PURE_TASKS=1 in the environment, _asyncio cannot be imported:
# asyncio's pure-Python Task and Future are used, as where that module is
# missing.
import os
import sys

if os.environ.get("PYFLAME_PURE_TASKS") == "1":
    sys.modules["_asyncio"] = None
import asyncio
import threading
import time

NAMES = sys.version_info >= (3, 8)
PARENT = {}


def spawn(coro, name):
    loop = asyncio.get_event_loop()
    return loop.create_task(coro, name=name) if NAMES else loop.create_task(coro)


async def leaf():
    await asyncio.sleep(3600)


async def middle():
    await leaf()


async def top():
    await middle()


async def awaiter(task):
    await task


async def gathering(kids):
    await asyncio.gather(*kids)


async def grouping():
    async with asyncio.TaskGroup() as tg:
        for i in range(2):
            PARENT[tg.create_task(leaf(), name="member-%d" % i)] = asyncio.current_task()


def chain(task):
    """The coroutines and generators (a pure-Python Future's __await__) it is suspended in."""
    out = []
    coro = task.get_coro() if hasattr(task, "get_coro") else task._coro
    while coro is not None:
        coroutine = hasattr(coro, "cr_frame")
        frame = coro.cr_frame if coroutine else getattr(coro, "gi_frame", None)
        if frame is None:
            break
        out.append("%s:%d" % (frame.f_code.co_name, frame.f_lineno))
        coro = coro.cr_await if coroutine else coro.gi_yieldfrom
    return ",".join(out)


async def reporter():
    tops = [spawn(top(), "top-%d" % i) for i in range(3)]
    awaited = spawn(middle(), "awaited")
    waiting = spawn(awaiter(awaited), "awaiter")
    PARENT[awaited] = waiting
    kids = [spawn(leaf(), "kid-%d" % i) for i in range(3)]
    gatherer = spawn(gathering(kids), "gatherer")
    for k in kids:
        PARENT[k] = gatherer
    if sys.version_info >= (3, 11):
        spawn(grouping(), "grouper")
    await asyncio.sleep(0.2)
    me = asyncio.current_task() if hasattr(asyncio, "current_task") else asyncio.Task.current_task()
    all_tasks = asyncio.all_tasks() if hasattr(asyncio, "all_tasks") else asyncio.Task.all_tasks()
    print("PID %d" % os.getpid())
    for t in all_tasks:
        if t is me:
            print("SKIP %x" % id(t))
            continue
        name = t.get_name() if NAMES else "Task"
        print("T %x %s %x %s" % (id(t), name, id(PARENT[t]) if t in PARENT else 0, chain(t)))
    print("READY")
    sys.stdout.flush()
    await asyncio.sleep(3600)


def nap(n):
    if n:
        return nap(n - 1)
    time.sleep(3600)


threading.Thread(target=nap, args=(5,), name="napper", daemon=True).start()
loop = asyncio.new_event_loop()
asyncio.set_event_loop(loop)
loop.run_until_complete(reporter())
