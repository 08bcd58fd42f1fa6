"""Queue order after a crash: when a holder's lease runs out without a release (SIGKILL),
the first live waiter in the queue gets the lock, not whichever waiter's timer fires first
(lua/include/lapsed.lua)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

import distlock
from distlock.info import holder_metadata
from distlock.tokens import new_token
from tests.support.lock_helpers import queued_in_turn, read_line, spawner

pytestmark = pytest.mark.django_db(databases=[])

TRIALS = 20
WAITERS = 4


@pytest.fixture
def spawn(redis_backend: str) -> Iterator:
    env = {**os.environ, "DISTLOCK_TEST_KIND": "redis", "DISTLOCK_TEST_URL": redis_backend}
    with spawner("tests.support.workers", env) as start:
        yield start


def grant_order(name: str, holder_pid: int) -> list[int]:
    """Queue WAITERS waiters for ``name`` in turn, SIGKILL its holder, and return the order
    in which the waiters were granted the lock (their places in the queue)."""
    granted: list[int] = []
    guard = threading.Lock()
    threads: list[threading.Thread] = []

    def wait_for_it(place: int) -> None:
        lk = distlock.lock(name, ttl=5, wait=20)
        assert lk.acquire()
        with guard:
            granted.append(place)
        time.sleep(0.02)  # held: the next grant comes after this one
        lk.release()

    def join(place: int) -> None:
        thread = threading.Thread(target=wait_for_it, args=(place,))
        thread.start()
        threads.append(thread)

    queued_in_turn(name, WAITERS, join)
    os.kill(holder_pid, signal.SIGKILL)
    for thread in threads:
        thread.join(timeout=30)
    return granted


@pytest.mark.slow
def test_waiters_behind_a_sigkilled_holder_are_served_in_queue_order(spawn) -> None:
    # Every holder at once (each process takes a while to start), renewed while it lives:
    # each lease runs out a second after its process is killed.
    holders = [spawn("hold", f"order:{trial}", "1", "renewed") for trial in range(TRIALS)]
    for holder in holders:
        read_line(holder, "held")
    orders = []
    for trial, holder in enumerate(holders):
        orders.append(grant_order(f"order:{trial}", holder.pid))
        holder.wait()
    out_of_order = [order for order in orders if order != list(range(WAITERS))]
    assert not out_of_order, f"{len(out_of_order)} of {TRIALS} trials out of order: {orders}"


def test_a_newcomer_after_a_lapsed_lease_queues_behind_the_waiter(redis_backend: str) -> None:
    # The holder's lease runs out without a release while a waiter is registered (its own
    # timer has not fired yet): a newcomer that asks first queues behind it, and the lock is
    # reserved for the waiter, who claims it.
    backend = distlock.locks["default"]
    meta = holder_metadata(None)
    assert backend.try_acquire("lapse", new_token(), 100, meta, None, 0).acquired
    waiter = new_token()
    assert not backend.try_acquire("lapse", waiter, 5000, meta, None, 10_000).acquired
    time.sleep(0.15)  # the holder's lease has run out: nobody released
    newcomer = backend.try_acquire("lapse", new_token(), 5000, meta, None, 0)
    assert not newcomer.acquired
    claimed = backend.try_acquire("lapse", waiter, 5000, meta, None, 10_000)
    assert claimed.acquired
