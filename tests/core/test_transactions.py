"""Locks and database transactions: a release inside ``transaction.atomic()`` waits for the
transaction to end (handed on after COMMIT, at once after ROLLBACK).

These run on SQLite with real transactions (``transaction=True``); the same rule against
PostgreSQL and MariaDB, with worker processes, is in test_transactions_databases.py.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections, transaction

import distlock
from devkit.redis_server import RedisServer
from devkit.servers import wait_until
from distlock import LockNotOwned
from distlock.handler import locks
from distlock.signals import lock_lost, lock_released
from tests.support.lock_helpers import free_within, is_held

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "fencing"]),
    pytest.mark.usefixtures("lock_backend"),
]


def test_a_release_inside_atomic_waits_for_commit() -> None:
    released: list[str] = []

    def on_released(sender: Any, name: str, **kwargs: Any) -> None:
        released.append(name)

    lock_released.connect(on_released)
    try:
        with transaction.atomic():
            transaction.on_commit(lambda: released.append("committed"))
            with distlock.lock("pay:1", ttl=5) as lk:
                pass
            assert is_held("pay:1") and lk.owned(), "released before COMMIT"
            assert released == []
        assert not is_held("pay:1") and not lk.owned()
        assert released == ["committed", "pay:1"]  # freed right after COMMIT, signal then
    finally:
        lock_released.disconnect(on_released)


def test_a_waiter_is_handed_the_lock_only_after_commit() -> None:
    order: list[str] = []
    waiting = threading.Event()

    def contender() -> None:
        waiting.set()
        with distlock.lock("pay:2", ttl=5, wait=10):
            order.append("waiter got it")

    with transaction.atomic():
        transaction.on_commit(lambda: order.append("commit"))
        with distlock.lock("pay:2", ttl=5):
            thread = threading.Thread(target=contender)
            thread.start()
            waiting.wait(5)
        time.sleep(0.2)  # the waiter had time to take a lock released too early
    thread.join(10)
    assert order == ["commit", "waiter got it"]


@pytest.mark.parametrize(
    "how",
    [
        "exception out of atomic",
        "exception after the lock",
        "set_rollback",
        "savepoint rolled back",
    ],
)
def test_every_kind_of_rollback_frees_the_lock_at_once(how: str) -> None:
    class Boom(Exception):
        pass

    def release_then_fail() -> None:
        with distlock.lock("stock", ttl=30):
            pass
        assert is_held("stock")
        raise Boom

    if how == "exception out of atomic":
        with pytest.raises(Boom), transaction.atomic(), distlock.lock("stock", ttl=30):
            raise Boom
    elif how == "exception after the lock":
        with pytest.raises(Boom), transaction.atomic():
            release_then_fail()
    elif how == "set_rollback":
        with transaction.atomic():
            with distlock.lock("stock", ttl=30):
                pass
            transaction.set_rollback(True)
            assert is_held("stock")
    else:
        with transaction.atomic():
            with pytest.raises(Boom), transaction.atomic():
                release_then_fail()
            assert free_within("stock"), "still held after its savepoint was rolled back"
            return
    assert free_within("stock"), f"still held after rollback ({how})"


def test_a_savepoint_rolled_back_after_the_release_does_not_free_it() -> None:
    with transaction.atomic():
        with distlock.lock("order:3", ttl=5):
            pass
        with pytest.raises(ZeroDivisionError), transaction.atomic():
            1 / 0  # noqa: B018  # an unrelated inner block, not the one of the release
        assert is_held("order:3")
    assert not is_held("order:3")


def test_hold_until_commit_false_and_autocommit_release_at_once() -> None:
    with transaction.atomic():
        with distlock.lock("cache-only", ttl=5, hold_until_commit=False):
            pass
        assert not is_held("cache-only")
    with distlock.lock("autocommit", ttl=5):
        pass
    assert not is_held("autocommit")


def test_every_alias_in_a_transaction_counts() -> None:
    with transaction.atomic(using="fencing"):
        with transaction.atomic(), distlock.lock("two-dbs", ttl=5):
            pass
        assert is_held("two-dbs"), "released while the 'fencing' transaction was still open"
    assert not is_held("two-dbs")


def test_the_same_thread_takes_its_waiting_lock_again_at_once() -> None:
    with transaction.atomic():
        first = distlock.lock("order:7", ttl=5, wait=0)
        with first:
            token = first.fencing_token
        # A loop that meets the same order twice: another Lock object, same thread.
        second = distlock.lock("order:7", ttl=5, wait=0)
        assert second.acquire(), "waited on its own pending release"
        assert second.fencing_token == token and second.owned() and not first.owned()
        second.release()
        assert first.acquire(), "the first object could not take it back either"
        first.release()
        assert is_held("order:7")
    assert not is_held("order:7")


def test_another_thread_does_not_take_a_waiting_lock() -> None:
    got: list[bool] = []
    with transaction.atomic():
        with distlock.lock("order:8", ttl=5):
            pass
        thread = threading.Thread(
            target=lambda: got.append(distlock.lock("order:8", wait=0).acquire())
        )
        thread.start()
        thread.join(5)
    assert got == [False]


def test_a_lease_kept_alive_while_waiting_for_commit() -> None:
    with transaction.atomic():
        with distlock.lock("slow-commit", ttl=0.3) as lk:
            pass
        time.sleep(0.7)  # more than twice the lease: renewals keep it
        assert is_held("slow-commit") and lk.owned()
    assert not is_held("slow-commit")


def test_a_lease_lost_while_waiting_for_commit_is_reported() -> None:
    lost: list[str] = []
    released: list[str] = []
    on_lost_calls: list[distlock.Lock] = []

    def on_lock_lost(sender: Any, name: str, **kwargs: Any) -> None:
        lost.append(name)

    def on_released(sender: Any, name: str, **kwargs: Any) -> None:
        released.append(name)

    lock_lost.connect(on_lock_lost)
    lock_released.connect(on_released)
    try:
        with transaction.atomic():
            lk = distlock.lock("lost-in-tx", ttl=0.3, on_lost=on_lost_calls.append)
            with lk:
                pass
            assert locks["default"].force_release("lost-in-tx")
            wait_until(lambda: lost, 5, "the renewal to find the lease gone")
            assert not lk.owned()
        assert lost == ["lost-in-tx"] and on_lost_calls == [lk]
        assert released == []  # never freed by this holder
        with pytest.raises(LockNotOwned):
            lk.release()
    finally:
        lock_lost.disconnect(on_lock_lost)
        lock_released.disconnect(on_released)


def test_a_second_release_of_a_waiting_lock_is_refused() -> None:
    with transaction.atomic():
        lk = distlock.lock("twice", ttl=5)
        lk.acquire()
        lk.release()
        with pytest.raises(LockNotOwned, match="waits for the database transaction"):
            lk.release()
    assert not is_held("twice")


def test_semaphores_follow_the_rule(lock_backend: str) -> None:
    with transaction.atomic():
        with distlock.semaphore("exports", 1, ttl=5):
            pass
        other: list[bool] = []
        thread = threading.Thread(
            target=lambda: other.append(distlock.semaphore("exports", 1, wait=0).acquire())
        )
        thread.start()
        thread.join(5)
        assert other == [False]
    assert distlock.semaphore("exports", 1, wait=0).acquire()


def test_decorated_function_follows_the_rule() -> None:
    @distlock.lock("decorated", ttl=5, wait=0)
    def work() -> None:
        pass

    with transaction.atomic():
        work()
        assert is_held("decorated")
        work()  # the same thread again, in the same transaction
    assert not is_held("decorated")


async def test_async_code_runs_its_transaction_inside_sync_to_async() -> None:
    def pay() -> None:
        with transaction.atomic():
            with distlock.lock("async-pay", ttl=5):  # the sync lock, inside the transaction
                pass
            assert is_held("async-pay")

    await sync_to_async(pay)()
    assert not is_held("async-pay")
    async with distlock.lock("async-pay", ttl=5):
        await sync_to_async(pay_in_transaction)()
    assert not is_held("async-pay")


def pay_in_transaction() -> None:
    with transaction.atomic():
        connections["default"].cursor().execute("SELECT 1")


@pytest.mark.parametrize("lock_backend", ["redis"], indirect=True)  # counts a server's scripts
def test_an_uncontended_lock_in_a_transaction_costs_no_extra_round_trip(
    lock_backend: str, private_redis: RedisServer
) -> None:
    import redis

    # A server of this test's own: nothing else (another test's renewer) sends it commands.
    server = redis.Redis.from_url(private_redis.url)

    def commands_for(block: Any) -> int:
        """Count the scripts distlock sent while ``block`` ran: one per round trip."""

        def sent() -> int:
            stats = server.info("commandstats")
            return sum(
                stats.get(f"cmdstat_{name}", {}).get("calls", 0)
                for name in ("evalsha", "eval", "evalsha_ro", "fcall")
            )

        before = sent()
        block()
        return sent() - before

    def pair() -> None:
        with distlock.lock("counted", ttl=5):
            pass

    def pair_in_transaction() -> None:
        with transaction.atomic():
            pair()

    pair()  # scripts loaded, connections made
    assert commands_for(pair_in_transaction) == commands_for(pair) == 2  # acquire, release
    with transaction.atomic():
        pair()
        assert is_held("counted"), "the release did not wait for the transaction"
    assert not is_held("counted")
    server.close()
