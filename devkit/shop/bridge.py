"""A callback-based client's bridge back to asyncio, as the adversaries of issue 39 use it:
a plain thread schedules a coroutine on a running loop (``run_coroutine_threadsafe``), so
the coroutine runs in that thread's context, not in the caller's."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


async def through_a_client_thread(coro: Coroutine[Any, Any, T]) -> T:
    """Schedule ``coro`` on the running loop from a plain thread of its own, and wait for
    its result (or exception)."""
    loop = asyncio.get_running_loop()
    result: concurrent.futures.Future[T] = concurrent.futures.Future()

    def client_thread() -> None:  # the client's callback, on a thread of its own
        sent = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            result.set_result(sent.result())
        except BaseException as exc:
            result.set_exception(exc)

    threading.Thread(target=client_thread, daemon=True).start()
    return await asyncio.wrap_future(result)
