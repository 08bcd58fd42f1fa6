"""Who waits for a lock: LockInfo.waiters (how many) on every backend, and the waiters
themselves (host, pid, thread, purpose, since when), first come first, where the backend
keeps them; the waiters' metadata leaves Redis with them."""

from __future__ import annotations

import threading
import time

import pytest
import redis

import distlock
from distlock.backends.operations import Request
from distlock.info import holder_metadata
from distlock.names import ABOUT_WAITERS
from tests.support.lock_helpers import queued_in_turn

pytestmark = pytest.mark.django_db(databases=[])


def start_waiter(name: str, place: int, acquired: list[int]) -> threading.Thread:
    def wait() -> None:
        lock = distlock.lock(name, ttl=10, wait=20, purpose=f"waiter {place}")
        assert lock.acquire()
        acquired.append(place)
        lock.release()

    thread = threading.Thread(target=wait, name=f"waiter-{place}", daemon=True)
    thread.start()
    return thread


def test_waiters_are_counted_and_listed_first_come_first(backend_kind: str) -> None:
    holder = distlock.lock("reports:daily", ttl=30)
    assert holder.acquire()
    backend = distlock.locks["default"]
    assert backend.info("reports:daily").waiters == 0
    acquired: list[int] = []
    threads = queued_in_turn(
        "reports:daily", 3, lambda place: start_waiter("reports:daily", place, acquired)
    )

    assert backend.info("reports:daily").waiters == 3
    [listed] = [entry for entry in backend.exclusive.list() if entry.name == "reports:daily"]
    assert listed.waiters == 3
    assert [info.waiters for info in backend.info_many(["reports:daily"])] == [3]
    waiters = backend.waiters("reports:daily")
    if backend_kind.startswith("redlock"):
        assert waiters is None  # Redlock's nodes keep how many, not who
    else:
        assert [w.purpose for w in waiters] == ["waiter 0", "waiter 1", "waiter 2"]
        assert [w.thread for w in waiters] == ["waiter-0", "waiter-1", "waiter-2"]
        assert {(w.host, w.pid) for w in waiters} == {(holder_info().host, holder_info().pid)}
        assert waiters[0].waited >= waiters[1].waited >= waiters[2].waited >= 0
        assert waiters[0].since <= waiters[1].since <= waiters[2].since

    holder.release()
    for thread in threads:
        thread.join(20)
    assert sorted(acquired) == [0, 1, 2]
    assert backend.waiters("reports:daily") in ([], None)


def holder_info() -> distlock.LockInfo:
    return distlock.locks["default"].info("reports:daily")


def test_a_waiter_that_gives_up_leaves_the_list(backend_kind: str) -> None:
    holder = distlock.lock("exports", ttl=30)
    assert holder.acquire()
    assert not distlock.lock("exports", wait=0.2).acquire()
    assert distlock.locks["default"].info("exports").waiters == 0
    assert distlock.locks["default"].waiters("exports") in ([], None)


def test_the_waiters_metadata_is_stored_on_the_waiting_path_only(
    redis_backend: str, redis_url: str
) -> None:
    backend = distlock.locks["default"]
    client = redis.Redis.from_url(redis_url)
    about = backend.layout.keys_for("pay:1").waiters + ABOUT_WAITERS
    with distlock.lock("pay:1", ttl=10):
        assert not client.exists(about)  # nobody waited: nothing written
        meta = holder_metadata("gave up")
        # A waiter whose registration lapses (it died): no longer listed nor counted.
        backend.exclusive.try_acquire(Request("pay:1", "lapsing", 10_000, meta, 100))
        assert [w.purpose for w in backend.waiters("pay:1")] == ["gave up"]
        assert client.hexists(about, "lapsing")
        time.sleep(0.2)
        assert backend.waiters("pay:1") == []
        assert backend.info("pay:1").waiters == 0
        # One that leaves takes its metadata with it.
        backend.exclusive.try_acquire(Request("pay:1", "leaving", 10_000, meta, 10_000))
        backend.exclusive.leave("pay:1", "leaving")
        assert not client.hexists(about, "leaving")
        backend.exclusive.try_acquire(Request("pay:1", "claiming", 10_000, meta, 10_000))
    # Released: handed to the first waiter still registered ("lapsing" is dropped on the
    # way), which claims it.
    assert backend.exclusive.try_acquire(Request("pay:1", "claiming", 10_000, meta, 0)).acquired
    assert not client.exists(about)


def test_a_shared_lock_counts_and_lists_its_waiters(backend_kind: str) -> None:
    """A writer and a reader queued behind readers: counted on every holder's LockInfo and
    listed in queue order, their metadata gone once they hold."""
    if backend_kind.startswith("redlock"):  # no shared locks there: refused, nothing queued
        with pytest.raises(distlock.SharedLocksNotSupported):
            distlock.lock("prices", shared=True, ttl=30).acquire()
        return
    reader = distlock.lock("prices", shared=True, ttl=30)
    assert reader.acquire()
    backend = distlock.locks["default"]
    acquired: list[str] = []

    def join(place: int) -> threading.Thread:
        shared = place == 1  # a writer first, then a reader it keeps out
        kind = "reader" if shared else "writer"

        def wait() -> None:
            lock = distlock.lock("prices", shared=shared, ttl=10, wait=20, purpose=kind)
            assert lock.acquire()
            acquired.append(kind)
            lock.release()

        thread = threading.Thread(target=wait, daemon=True)
        thread.start()
        return thread

    threads = queued_in_turn("prices", 2, join)

    [holder] = backend.shared.inspect("prices")
    assert holder.waiters == 2
    assert [w.purpose for w in backend.waiters("prices")] == ["writer", "reader"]
    reader.release()
    for thread in threads:
        thread.join(20)
    assert acquired == ["writer", "reader"]
    assert backend.waiters("prices") == []
