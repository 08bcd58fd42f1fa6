"""The foundation's promises at full length, on one real redis-server (issue 2: acceptance
5, 6 and "waiting without polling"). The contract suite runs shorter versions of some of
these on every backend; here they run at the length the promise names."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis

import distlock
from distlock import LockLost, LockNotOwned
from distlock.handler import locks
from distlock.renewal import renewer
from distlock.signals import lock_lost
from tests.support.lock_helpers import renewer_threads

pytestmark = pytest.mark.django_db(databases=[])


def test_auto_renew_keeps_a_one_second_lease_for_five_seconds_then_reports_a_deleted_key(
    redis_backend,
) -> None:
    told, signalled = [], []

    def receiver(sender, **kwargs):
        signalled.append(kwargs["name"])

    lock_lost.connect(receiver)
    try:
        lk = distlock.lock("five-seconds", ttl=1, auto_renew=True, on_lost=told.append)
        lk.acquire()
        started = time.monotonic()
        while time.monotonic() - started < 5:  # another holder never gets in meanwhile
            assert distlock.lock("five-seconds").acquire(wait=0) is False
            time.sleep(0.5)
        assert lk.owned()
        assert locks["default"].info("five-seconds").renewals >= 10

        # Deleting the key by hand (an operator, a FLUSHDB, an eviction) ends the hold.
        raw = redis.Redis.from_url(redis_backend)
        assert raw.delete(locks["default"].layout.keys_for("five-seconds").lock) == 1
        deadline = time.monotonic() + 2
        while not told and time.monotonic() < deadline:
            time.sleep(0.02)
        assert told == [lk] and signalled == ["five-seconds"]
        with pytest.raises(LockLost):
            lk.release()
    finally:
        lock_lost.disconnect(receiver)


def test_another_thread_cannot_release_a_live_lock(redis_backend) -> None:
    mine = distlock.lock("live-threads", ttl=30)
    mine.acquire()
    outcome = {}

    def intrude() -> None:
        theirs = distlock.lock("live-threads", ttl=30)
        outcome["acquired"] = theirs.acquire(wait=0)
        try:
            theirs.release()
        except LockNotOwned as exc:
            outcome["refused"] = exc
        # A forged token fares no better: release checks it on the server.
        theirs.token = "0" * 32
        try:
            theirs.release()
        except LockNotOwned as exc:
            outcome["forged"] = exc

    thread = threading.Thread(target=intrude)
    thread.start()
    thread.join()
    assert outcome["acquired"] is False
    assert "refused" in outcome and "forged" in outcome
    assert mine.owned()
    mine.release()


async def test_another_task_cannot_release_a_live_lock(redis_backend) -> None:
    mine = distlock.lock("live-tasks", ttl=30)
    await mine.aacquire()

    async def intrude() -> bool:
        theirs = distlock.lock("live-tasks", ttl=30)
        acquired = await theirs.aacquire(wait=0.2)
        theirs.token = "0" * 32
        with pytest.raises(LockNotOwned):
            await theirs.arelease()
        return acquired

    assert await asyncio.gather(intrude(), intrude()) == [False, False]
    assert await mine.aowned()
    await mine.arelease()


def test_many_auto_renewed_locks_share_one_renewal_thread(redis_backend) -> None:
    held = [distlock.lock(f"many-{i}", ttl=0.6, auto_renew=True) for i in range(50)]
    for lk in held:
        lk.acquire()
    time.sleep(0.8)  # past the first lease: every one was renewed
    assert renewer_threads() == 1
    assert all(locks["default"].info(lk.name).renewals >= 1 for lk in held)
    for lk in held:
        lk.release()
    assert renewer.active() == 0


def test_a_waiter_does_not_poll(redis_backend) -> None:
    # While a lock is held for 2 s, a waiter sends a handful of commands (one attempt per
    # bounded fallback wake-up), not one per poll interval; then the release wakes it at once.
    holder = distlock.lock("no-poll", ttl=30)
    holder.acquire()
    raw = redis.Redis.from_url(redis_backend)
    raw.config_resetstat()
    threading.Timer(2.0, holder.release).start()
    waiter = distlock.lock("no-poll", ttl=5)
    started = time.monotonic()
    assert waiter.acquire(wait=10)
    waited = time.monotonic() - started
    stats = raw.info("commandstats")
    calls = sum(
        stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval", "blpop")
    )
    assert 1.9 < waited < 2.5
    # max_block is socket_timeout / 2 = 0.5 s: about 4 BLPOPs and 5 attempts, plus the
    # holder's release. A 10 ms poll would be some 200.
    assert calls <= 14, stats
    waiter.release()


def test_a_grant_with_less_lease_left_than_the_drift_allowance_is_given_back(
    redis_backend, monkeypatch
) -> None:
    """acquire() never returns True for a lease that ends as it returns: a reply that arrives
    with less than 1% of the lease + 2 ms left (here about 1 ms of a 0.1 s lease) gives the
    grant back and reports the lock as not acquired."""
    backend = locks["default"]
    real = backend.exclusive.try_acquire

    def slow_reply(*args, **kwargs):
        sent = time.monotonic()
        attempt = real(*args, **kwargs)
        # The reply "arrives" when about 1 ms of the 0.1 s lease is left (counted from send).
        time.sleep(max(0.099 - (time.monotonic() - sent), 0))
        return attempt

    monkeypatch.setattr(backend.exclusive, "try_acquire", slow_reply)
    late = distlock.lock("late-grant", ttl=0.1)
    assert late.acquire(wait=0) is False
    monkeypatch.undo()
    assert distlock.lock("late-grant", ttl=1).acquire(wait=0)  # given back, not left to run out
