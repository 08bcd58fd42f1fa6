"""``acquire(wait=W)`` against a held lock returns within about W, whatever the server's
``hz``: the server ends a blocking wait's timeout on its own timer (hz times a second, 10 by
default: 100 ms late at worst), so the client ends it itself (Runner.blocking). Figures for
the contract's W + 10 ms at p99, measured quiet and loaded: benchmarks/wait_bound.py."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

import pytest

import distlock
from distlock.handler import locks
from tests.support.lock_helpers import elsewhere

pytestmark = pytest.mark.django_db(databases=[])

WAITS = (0.01, 0.05)
CALLS = 8


def held(kind: str) -> tuple[Any, Callable[[], Any]]:
    """Hold the lock (or the one permit) of ``kind``; return the holder and a factory of
    contenders."""
    if kind == "semaphore":
        holder = distlock.semaphore("bound", 1, ttl=30)
        return holder, lambda: distlock.semaphore("bound", 1, ttl=30)
    holder = distlock.lock("bound", ttl=30)
    return holder, lambda: distlock.lock("bound", ttl=30, shared=kind == "shared")


def overshoots(contender: Callable[[], Any], asynchronous: bool) -> dict[float, list[float]]:
    """Time CALLS acquires for each W in WAITS (ms past W, by the monotonic clock around
    each call; the async ones on one event loop, whose client is made before)."""
    if asynchronous:
        return asyncio.run(aovershoots(contender))
    found: dict[float, list[float]] = {}
    for wait in WAITS:
        for _ in range(CALLS):
            lk = contender()
            began = time.monotonic()
            assert not lk.acquire(wait=wait)
            found.setdefault(wait, []).append((time.monotonic() - began - wait) * 1000)
    return found


async def aovershoots(contender: Callable[[], Any]) -> dict[float, list[float]]:
    await contender().aacquire(wait=0)  # this loop's client and connection, made once
    found: dict[float, list[float]] = {}
    for wait in WAITS:
        for _ in range(CALLS):
            lk = contender()
            began = time.monotonic()
            assert not await lk.aacquire(wait=wait)
            found.setdefault(wait, []).append((time.monotonic() - began - wait) * 1000)
    return found


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", ["exclusive", "shared", "semaphore"])
def test_a_wait_ends_on_time_at_the_default_hz(
    redis_backend: str, kind: str, asynchronous: bool
) -> None:
    server = locks["default"].client
    server.config_set("hz", 10)
    holder, contender = held(kind)
    assert elsewhere(holder.acquire)  # another thread's: this one's reader would downgrade
    try:
        found = overshoots(contender, asynchronous)
    finally:
        holder.release()
    for wait, late in found.items():
        print(f"wait={wait}: ms past the wait {sorted(round(ms, 1) for ms in late)}")
        assert min(late) >= -1, "a wait never ends before W"
        # Before the fix: 50-100 ms late (the server's 100 ms timer). The contract's p99
        # bound (W + 10 ms) is a benchmark figure; a loaded test machine gets room here.
        assert statistics.median(late) < 25, sorted(late)


def test_a_grant_that_lands_after_the_wait_is_handed_on(redis_backend: str) -> None:
    # pottery's test_enqueued: acquire(timeout=0.1) behind a holder that releases at about
    # 0.2 s is not granted at 0.196 s. Here: a waiter with wait=0.1 and a holder releasing
    # at 0.2 s, with a second waiter queued behind the first that waits longer. (Whether the
    # old client kept such a grant depended on when the server's timer fired: this one checks
    # the outcome, test_a_wait_ends_on_time_at_the_default_hz the timing.)
    holder = distlock.lock("enqueued", ttl=30)
    assert elsewhere(holder.acquire)
    outcome: dict[str, Any] = {}

    async def timed(lk: distlock.Lock, wait: float, began: float) -> tuple[bool, float]:
        return await lk.aacquire(wait=wait), time.monotonic() - began

    async def scenario() -> None:
        first = distlock.lock("enqueued", ttl=30)
        second = distlock.lock("enqueued", ttl=30)
        short = asyncio.ensure_future(timed(first, 0.1, time.monotonic()))
        await asyncio.sleep(0.03)
        long = asyncio.ensure_future(second.aacquire(wait=5))
        await asyncio.sleep(0.17)
        await holder.arelease()
        outcome["short"] = await short
        outcome["long"] = await long
        await second.arelease()

    asyncio.run(scenario())
    granted, elapsed = outcome["short"]
    assert not granted, outcome
    assert elapsed < 1, outcome
    assert outcome["long"], "the lock went on to the next waiter"
