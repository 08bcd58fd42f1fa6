"""in_thread: the one way distlock runs a blocking call in a worker thread for a coroutine (a
backend's sync operation, a wait on a condition, a leader's stop), and gives back what it
took when the coroutine is cancelled before the thread ends.

The context is copied into the thread, as ``asyncio.to_thread`` does; the call runs in the
loop's default executor. Nothing here is thread-sensitive: Django's ORM calls go through
``sync_to_async`` (its own policy), never through this.

A thread cannot be stopped: cancelling the task that awaits it leaves it blocked on Redis
(BLPOP, WAIT) until it returns, and a grant it receives then lands after the lock's
clean-up (``attempts.Attempts.aguarded``) has already released the token; nobody would hold
it for its whole lease. So a cancelled caller marks the call abandoned, and the thread, once the
call returns (or fails: the outcome may be a grant all the same), runs ``give_back``: the
release the clean-up sent, once more, now after the grant. The cancellation is not held
up. A thread that ended before the mark needs nothing: its grant came before the mark, and
the clean-up's release comes after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .exceptions import LockError

T = TypeVar("T")


async def in_thread(
    call: Callable[..., T],
    *args: Any,
    give_back: Callable[[], object] | None = None,
    **kwargs: Any,
) -> T:
    """Return ``call(*args, **kwargs)``, run in the event loop's default executor."""
    abandoned = threading.Event()
    work = functools.partial(_run, abandoned, give_back, functools.partial(call, *args, **kwargs))
    context = contextvars.copy_context()  # as asyncio.to_thread
    future = asyncio.get_running_loop().run_in_executor(None, context.run, work)
    try:
        return await asyncio.shield(future)  # a cancellation leaves the thread its reply
    except asyncio.CancelledError:
        abandoned.set()
        raise


def _run(
    abandoned: threading.Event,
    give_back: Callable[[], object] | None,
    call: Callable[[], T],
) -> T:
    try:
        return call()
    finally:
        if give_back is not None and abandoned.is_set():
            with contextlib.suppress(LockError):  # unreachable: the lease ends it
                give_back()
