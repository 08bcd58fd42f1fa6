"""An acquire that ends in an error while it waits (here: its task is cancelled) leaves
nothing behind: no hold, no place in the queue, and no reservation a release made for it
(docs/protocol.md, "The error path": release.lua, then leave_queue.lua)."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

import distlock
from distlock.handler import locks

pytestmark = pytest.mark.django_db(databases=[])


async def cancel_while_queued(name: str) -> None:
    task = asyncio.create_task(distlock.lock(name, ttl=10).aacquire(wait=30))
    await asyncio.sleep(0.3)  # queued, blocked on its wake-up list
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_cancelled_waiter_leaves_the_queue(redis_backend: str) -> None:
    keys = locks["default"].layout.keys_for("abandoned")
    data = redis.Redis.from_url(redis_backend)
    holder = distlock.lock("abandoned", ttl=10)
    assert holder.acquire(wait=0)
    asyncio.run(cancel_while_queued("abandoned"))
    assert data.zcard(keys.waiters) == 0, "the cancelled waiter is still queued"
    assert data.zcard(keys.live) == 0
    # So the release frees the lock for anyone at once, not reserved for a waiter that left
    holder.release()
    started = time.monotonic()
    assert distlock.lock("abandoned", ttl=10).acquire(wait=0)
    assert time.monotonic() - started < 0.2
