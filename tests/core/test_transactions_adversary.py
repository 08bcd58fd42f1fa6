"""Issue 31, attacked as a Django site would use it: a lock taken in a transaction is released
when the transaction or savepoint that took it ends, however it ends, and nothing waits for
itself or grows per transaction.

SQLite, where the database does not matter.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connections, transaction

import distlock
from distlock.signals import lock_released
from tests.support.lock_helpers import elsewhere, free_within, is_held

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "fencing"]),
    pytest.mark.usefixtures("redis_backend"),
]


class Declined(Exception):
    """A payment refused: its block rolls back."""


async def pay_async(name: str) -> None:
    async with distlock.lock(name, ttl=5, wait=1):
        pass


def test_an_async_repeat_through_async_to_sync_takes_back_its_own_waiting_release() -> None:
    """A batch charges each order through an async service (async_to_sync), and meets
    order 1 twice: the repeat must not wait for its own transaction."""
    with transaction.atomic():
        async_to_sync(pay_async)("a2s:repeat")
        async_to_sync(pay_async)("a2s:repeat")  # LockNotAcquired after 1 s: waits on itself
        assert is_held("a2s:repeat")
    assert free_within("a2s:repeat")


def test_a_sync_repeat_after_an_async_release_takes_it_back() -> None:
    with transaction.atomic():
        async_to_sync(pay_async)("a2s:then-sync")
        with distlock.lock("a2s:then-sync", ttl=5, wait=1):
            pass
        assert is_held("a2s:then-sync")
    assert free_within("a2s:then-sync")


def test_an_async_repeat_after_a_sync_release_takes_it_back() -> None:
    with transaction.atomic():
        with distlock.lock("sync:then-a2s", ttl=5, wait=1):
            pass
        async_to_sync(pay_async)("sync:then-a2s")
        assert is_held("sync:then-a2s")
    assert free_within("sync:then-a2s")


def test_a_pool_thread_releasing_a_request_lock_waits_for_the_request_transaction() -> None:
    with ThreadPoolExecutor(2) as pool:
        with transaction.atomic():
            lk = distlock.lock("pool", ttl=5)
            assert lk.acquire()
            pool.submit(lk.release).result()
            assert is_held("pool")
        assert free_within("pool")


def test_set_rollback_in_a_savepoint_frees_what_it_took() -> None:
    with transaction.atomic():
        with transaction.atomic(), distlock.lock("set-rollback", ttl=5):
            transaction.set_rollback(True)
        assert free_within("set-rollback")


def test_a_savepoint_free_block_raising_keeps_the_lock_until_the_rollback() -> None:
    with pytest.raises(Declined), transaction.atomic():
        try:
            with transaction.atomic(savepoint=False), distlock.lock("nosp", ttl=5):
                raise Declined
        except Declined:
            assert is_held("nosp"), "freed while the transaction that must roll back is open"
            raise
    assert free_within("nosp")


def test_durable_outermost_block_frees_at_commit() -> None:
    with transaction.atomic(durable=True), distlock.lock("durable", ttl=5):
        pass
    assert free_within("durable")


def test_interleaved_exits_on_two_aliases_wait_for_the_last() -> None:
    a = transaction.atomic()
    b = transaction.atomic(using="fencing")
    a.__enter__()
    b.__enter__()
    with distlock.lock("interleaved", ttl=5):
        pass
    a.__exit__(None, None, None)  # default commits first, fencing still open
    assert is_held("interleaved")
    b.__exit__(None, None, None)
    assert free_within("interleaved")


@transaction.atomic
def recurse(level: int) -> None:
    with distlock.lock(f"recurse:{level}", ttl=5):
        if level:
            recurse(level - 1)


def test_a_recursive_atomic_decorator_frees_every_level_at_the_outer_commit() -> None:
    recurse(3)
    assert all(free_within(f"recurse:{level}") for level in range(4))


def test_reentrant_lock_inside_a_rolled_back_savepoint_keeps_the_outer_take() -> None:
    lk = distlock.lock("reentrant", ttl=5, reentrant=True)
    with transaction.atomic():
        assert lk.acquire()
        with pytest.raises(Declined), transaction.atomic():
            assert lk.acquire()
            lk.release()
            lk.release()
            raise Declined
        assert is_held("reentrant")
    assert free_within("reentrant")


def test_redis_gone_at_the_commit_does_not_raise_into_django(
    private_redis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    lk = distlock.lock("gone", ttl=5)
    with caplog.at_level(logging.WARNING, logger="distlock"):
        with transaction.atomic():
            assert lk.acquire()
            lk.release()
            private_redis.stop()
        assert lk._lease.renewal is None, "still renewing a lock given up to its lease"
    assert any("gone" in record.getMessage() for record in caplog.records)


def test_nothing_grows_per_transaction() -> None:
    conn = connections["default"]
    from distlock import transactions

    for _ in range(200):
        with transaction.atomic(), distlock.lock("grow", ttl=5), transaction.atomic():
            pass
    assert not transactions._tied
    assert len(list(transactions._pairs(transactions._entered.get()))) <= 2
    assert not hasattr(transactions, "_here")  # nothing is kept per thread
    assert conn.in_atomic_block is False


def test_a_connection_closed_in_a_nested_block_frees_at_the_outer_end() -> None:
    with transaction.atomic(using="fencing"):
        with distlock.lock("closed:outer", ttl=30):
            pass
        with pytest.raises(Declined), transaction.atomic(using="fencing"):
            with distlock.lock("closed:inner", ttl=30):
                pass
            connections["fencing"].close()
            raise Declined
        assert is_held("closed:outer") and is_held("closed:inner")
    assert free_within("closed:outer") and free_within("closed:inner")


def test_an_on_commit_hook_finds_the_lock_free_for_others() -> None:
    """The lock is handed on right after COMMIT: a hook that hands the order to another
    thread (and waits for it) must not find the lock still held for the hooks."""
    seen: list[bool] = []

    def take() -> bool:
        lk = distlock.lock("hook:handed", ttl=5, wait=0)
        got = lk.acquire()
        if got:
            lk.release()
        return got

    def hand_on() -> None:
        seen.append(elsewhere(take))

    with transaction.atomic():
        with distlock.lock("hook:handed", ttl=5):
            pass
        transaction.on_commit(hand_on)
    assert seen == [True], "the lock was still held while the on_commit hooks ran"


async def read_async(name: str) -> None:
    async with distlock.lock(name, ttl=5, wait=2, shared=True):
        pass


def test_a_shared_lock_after_an_async_exclusive_release_is_answered_at_once() -> None:
    with transaction.atomic():
        async_to_sync(pay_async)("a2s:downgrade")
        started = time.monotonic()
        with distlock.lock("a2s:downgrade", ttl=5, wait=2, shared=True):  # a downgrade
            pass
        assert time.monotonic() - started < 1, "waited for its own release"
    assert free_within("a2s:downgrade")


def test_an_async_shared_lock_after_a_sync_exclusive_release_is_answered_at_once() -> None:
    with transaction.atomic():
        with distlock.lock("sync:downgrade:a2s", ttl=5, wait=1):
            pass
        started = time.monotonic()
        async_to_sync(read_async)("sync:downgrade:a2s")  # a downgrade
        assert time.monotonic() - started < 1, "waited for its own release"
    assert free_within("sync:downgrade:a2s")


def test_a_frozen_redis_at_the_commit_holds_up_django_once_not_once_per_lock(
    private_redis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch of 8 locks released in one transaction, Redis frozen (it accepts, never
    answers) when it commits: the first release waits out its timeout, the others are left
    to their leases at once instead of each holding up the COMMIT again."""
    batch = [distlock.lock(f"frozen:{i}", ttl=30) for i in range(8)]
    with caplog.at_level(logging.WARNING, logger="distlock"):
        with transaction.atomic():
            for lk in batch:
                assert lk.acquire()
                lk.release()
            single = time.monotonic()
            with pytest.raises(distlock.BackendUnavailable):
                private_redis.pause()
                distlock.lock("frozen:probe", ttl=30).acquire()  # one timeout, measured
            single = time.monotonic() - single
            started = time.monotonic()
        took = time.monotonic() - started
    private_redis.resume()
    assert took < 2 * single, f"the COMMIT took {took:.1f}s, one timeout is {single:.1f}s"
    assert all(lk._lease.renewal is None and lk.token is None for lk in batch)
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert all(f"frozen:{i}" in logged for i in range(8)), "each lock left to its lease is said"


def test_a_lock_released_receiver_freed_at_the_commit_runs_outside_any_transaction() -> None:
    """Freed before the on_commit hooks, a lock's ``lock_released`` receivers still run with
    autocommit on, as after the block: a receiver that queries is not inside a COMMIT."""
    seen: list[bool] = []

    def on_released(sender: Any, name: str, **kwargs: Any) -> None:
        if name == "receiver":
            seen.append(connections["default"].get_autocommit())

    lock_released.connect(on_released)
    try:
        with transaction.atomic():
            with distlock.lock("receiver", ttl=5):
                pass
            transaction.on_commit(lambda: seen.append(is_held("receiver")))
    finally:
        lock_released.disconnect(on_released)
    assert seen == [True, False], "receiver inside the COMMIT, or freed after the hooks"
