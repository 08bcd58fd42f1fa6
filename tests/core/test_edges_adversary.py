"""An adversarial review of issue 32's edges (downgrade, the wait bound, queue order after a
crash), on real redis-server processes. Each test names the defect it found, or the
property it guards when the review found none.

The wait bound: a waiter whose BLPOP outlives its timeout ends it itself (Runner.blocking).
It did so by pushing an element to its wake-up list from a second connection of the pool,
which (1) made every waiter need two connections at once, so waiters that filled a bounded
pool raised BackendUnavailable ("Too many connections") or, on a BlockingConnectionPool,
stalled for the pool's whole timeout; and (2) on Redlock, whose waiters all block on one
signal list, woke another waiter instead. The waiter now ends it on its own connection.

A downgrade's shared place that outlived its exclusive lease (lapsed.lua) was in no index:
listings (the admin, ``distlock list``) missed that shared hold. And
``backend.force_release(name, token)`` with a shared holder's token released nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import distlock
from devkit.configs import distlock_settings
from distlock.backends import redlock_ops
from distlock.handler import locks
from tests.support.lock_helpers import elsewhere

pytestmark = pytest.mark.django_db(databases=[])

WAITERS = 3


def use(settings: Any, aliases: dict[str, Any], caches: dict[str, Any]) -> None:
    settings.DISTLOCK, settings.CACHES = aliases, caches
    locks.reset()


def wait_in_threads(name: str, wait: float) -> list[Any]:
    """Let WAITERS threads each try ``name`` for ``wait`` seconds; return each one's
    (acquired, seconds taken), or the exception it raised."""
    outcomes: list[Any] = []

    def wait_for_it() -> None:
        began = time.monotonic()
        try:
            acquired = distlock.lock(name, ttl=30).acquire(wait=wait)
        except Exception as exc:  # reported in the assertion
            outcomes.append(exc)
        else:
            outcomes.append((acquired, time.monotonic() - began))

    threads = [threading.Thread(target=wait_for_it) for _ in range(WAITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return outcomes


def use_a_bounded_pool(settings: Any, redis_url: str) -> None:
    """Point DISTLOCK at Redis with a pool of WAITERS connections, one for each waiter."""
    aliases, caches = distlock_settings("redis", redis_url)
    aliases["default"]["OPTIONS"] = {
        **aliases["default"]["OPTIONS"],
        "max_connections": WAITERS,
    }
    use(settings, aliases, caches)


def while_held(name: str, waiters: Callable[[], Any]) -> Any:
    """Return what ``waiters()`` returns, run while ``name`` is held (taken on the sync client,
    in another thread: an async pool stays the waiters')."""
    holder = distlock.lock(name, ttl=30)
    assert elsewhere(holder.acquire)
    try:
        return waiters()
    finally:
        holder.release()


def all_timed_out(outcomes: list[Any], within: float) -> bool:
    return len(outcomes) == WAITERS and all(
        isinstance(outcome, tuple) and outcome[0] is False and outcome[1] < within
        for outcome in outcomes
    )


# --- defect: a waiter needed a second connection to end its own wait --------------------------
def test_waiters_that_fill_a_bounded_pool_each_report_not_acquired(
    settings: Any, redis_url: str
) -> None:
    # Before: 2 of 3 raised BackendUnavailable (MaxConnectionsError: Too many connections).
    use_a_bounded_pool(settings, redis_url)
    outcomes = while_held("bounded", lambda: wait_in_threads("bounded", 0.3))
    assert all_timed_out(outcomes, within=2), outcomes


def test_waiters_on_a_django_redis_blocking_pool_return_within_the_wait(
    settings: Any, redis_url: str
) -> None:
    # django-redis's usual bounded pool: CONNECTION_POOL_CLASS BlockingConnectionPool.
    # Before: every waiter, each holding one connection and asking for a second, stalled for
    # the pool's timeout (5 s here, 20 s by default), and one raised BackendUnavailable.
    aliases, caches = distlock_settings("django_redis", redis_url)
    caches["default"]["OPTIONS"] = {
        **caches["default"]["OPTIONS"],
        "CONNECTION_POOL_CLASS": "redis.BlockingConnectionPool",
        "CONNECTION_POOL_KWARGS": {"max_connections": WAITERS, "timeout": 5},
    }
    use(settings, aliases, caches)
    outcomes = while_held("blocking-pool", lambda: wait_in_threads("blocking-pool", 0.3))
    assert all_timed_out(outcomes, within=2), outcomes


def test_async_waiters_that_fill_a_bounded_pool_each_report_not_acquired(
    settings: Any, redis_url: str
) -> None:
    use_a_bounded_pool(settings, redis_url)

    async def waiters() -> list[Any]:
        async def one() -> tuple[bool, float]:
            began = time.monotonic()
            acquired = await distlock.lock("abounded", ttl=30).aacquire(wait=0.3)
            return acquired, time.monotonic() - began

        return await asyncio.gather(*(one() for _ in range(WAITERS)), return_exceptions=True)

    outcomes = while_held("abounded", lambda: asyncio.run(waiters()))
    assert all_timed_out(outcomes, within=2), outcomes


# --- defect: on Redlock, a wait that ended woke another waiter --------------------------------
def test_redlock_a_short_wait_ending_does_not_wake_a_longer_one(nodes: list[Any]) -> None:
    # Redlock's waiters all block on the lock's signal list on one node. Before: the short
    # waiter's "unblocked" element went to the longest-blocked waiter, whose wait returned at
    # once (0.26 s into a 0.6 s wait), with no grant, and lost its place in the BLPOP order.
    backend = locks["default"]
    holder = distlock.lock("signal", ttl=30)
    assert holder.acquire()
    ended: list[float] = []

    def wait_long() -> None:
        began = time.monotonic()
        assert backend.run(redlock_ops.turn(backend, "signal", 0.6)) is None
        ended.append(time.monotonic() - began)

    thread = threading.Thread(target=wait_long)
    thread.start()
    time.sleep(0.2)
    try:
        assert backend.run(redlock_ops.turn(backend, "signal", 0.05)) is None
    finally:
        thread.join(10)
        holder.release()
    assert ended and ended[0] >= 0.59, ended


# --- guards: the connection a wait used goes back to the pool clean -------------------------
def test_async_waits_cancelled_at_any_moment_leave_the_pool_answering_right(
    settings: Any, redis_url: str
) -> None:
    # Every pooled connection, after waits cancelled at moments around the client's own end
    # of the BLPOP, answers the next command with its own reply (no reply left unread).
    aliases, caches = distlock_settings("redis", redis_url)
    use(settings, aliases, caches)
    holder = distlock.lock("cancelled", ttl=30)
    assert elsewhere(holder.acquire)

    async def scenario() -> None:
        client = await locks["default"].async_client()
        for delay in (0.0, 0.005, 0.02, 0.049, 0.0505, 0.051, 0.053, 0.06):
            task = asyncio.ensure_future(distlock.lock("cancelled", ttl=30).aacquire(wait=0.05))
            await asyncio.sleep(delay)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                assert not await task  # it may have ended before the cancel
        for i in range(20):
            await client.set(f"probe:{i}", i)
        answers = await asyncio.gather(*(client.get(f"probe:{i}") for i in range(20)))
        assert answers == [str(i).encode() for i in range(20)]

    try:
        asyncio.run(scenario())
    finally:
        holder.release()
    assert locks["default"].info("cancelled") is None


def test_sync_waits_leave_the_pool_answering_right(settings: Any, redis_url: str) -> None:
    aliases, caches = distlock_settings("redis", redis_url)
    use(settings, aliases, caches)
    holder = distlock.lock("sync-pool", ttl=30)
    assert elsewhere(holder.acquire)
    try:
        for wait in (0.001, 0.01, 0.05):
            assert not distlock.lock("sync-pool", ttl=30).acquire(wait=wait)
    finally:
        holder.release()
    client: redis.Redis = locks["default"].client
    with client.pipeline(transaction=False) as pipe:
        for i in range(20):
            pipe.set(f"probe:{i}", i)
        pipe.execute()
    assert [client.get(f"probe:{i}") for i in range(20)] == [str(i).encode() for i in range(20)]


# --- defect: a downgrade that outlived a lapsed exclusive lease was listed nowhere ----------
@pytest.mark.parametrize("newcomer_shared", [False, True], ids=["writer", "reader"])
def test_a_downgrade_left_by_a_lapsed_lease_is_listed(
    redis_backend: str, newcomer_shared: bool
) -> None:
    # The exclusive lease runs out (no release) beside its thread's shared place; the next
    # acquire script turns the lock over to that place (lapsed.lua). Before: the shared hold
    # was in no index, so backend.shared.list(), the admin and `distlock list` showed
    # nothing for its whole lease, while info() named it.
    exclusive = distlock.lock("lapsed-listed", ttl=0.3)
    assert exclusive.acquire()
    reader = distlock.lock("lapsed-listed", ttl=10, shared=True)
    assert reader.acquire(wait=0)
    time.sleep(0.5)
    newcomer = distlock.lock("lapsed-listed", ttl=5, shared=newcomer_shared)
    assert elsewhere(newcomer.acquire, 0) is newcomer_shared  # a writer stays out
    backend = locks["default"]
    try:
        listed = {entry.name: entry.holders for entry in backend.shared.list()}
        assert reader.token in {holder.token for holder in listed.get("lapsed-listed", ())}
    finally:
        reader.release()
        if newcomer_shared:
            elsewhere(newcomer.release)


# --- defect: force_release(name, token) with a shared holder's token released nothing -------
@pytest.mark.parametrize("kind", ["redis", "locmem"])
def test_force_release_with_a_downgraded_readers_token_releases_that_hold(
    settings: Any, redis_url: str, kind: str
) -> None:
    # backend.force_release(name, token) "releases only that token": code that read a
    # holder's token from backend.info() (a shared holder's, once the exclusive hold it was
    # downgraded from ended) got False and the hold stayed. The admin and the CLI call
    # shared.force_release() themselves; code calling the backend did not know to.
    use(settings, *distlock_settings(kind, redis_url))
    exclusive = distlock.lock("operator", ttl=10)
    assert exclusive.acquire()
    reader = distlock.lock("operator", ttl=10, shared=True)
    assert reader.acquire(wait=0)
    exclusive.release()  # the lock is the reader's now
    backend = locks["default"]
    shown = backend.info("operator")
    assert shown is not None and shown.token == reader.token
    assert backend.force_release("operator", shown.token)
    assert backend.info("operator") is None
    writer = distlock.lock("operator", ttl=5)
    assert elsewhere(writer.acquire, 0)
    elsewhere(writer.release)
