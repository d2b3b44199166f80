# live_target_async.py - the coroutine of live_target.py (3.5+ syntax kept
# out of the file 2.7 must parse).


async def coro(gen):
    return next(gen())
