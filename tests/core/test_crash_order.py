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
from devkit.processes import child_env
from distlock.backends.operations import Request
from distlock.info import holder_metadata
from distlock.tokens import new_token
from tests.support.lock_helpers import queued_in_turn, read_line, spawner

pytestmark = pytest.mark.django_db(databases=[])

TRIALS = 20
WAITERS = 4


@pytest.fixture
def spawn(redis_backend: str) -> Iterator:
    env = child_env(kind="redis", url=redis_backend)
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
    assert backend.exclusive.try_acquire(Request("lapse", new_token(), 100, meta, 0)).acquired
    waiter = new_token()
    assert not backend.exclusive.try_acquire(Request("lapse", waiter, 5000, meta, 10_000)).acquired
    time.sleep(0.15)  # the holder's lease has run out: nobody released
    newcomer = backend.exclusive.try_acquire(Request("lapse", new_token(), 5000, meta, 0))
    assert not newcomer.acquired
    claimed = backend.exclusive.try_acquire(Request("lapse", waiter, 5000, meta, 10_000))
    assert claimed.acquired


def test_a_dead_waiter_at_the_head_is_skipped_within_the_grace(spawn) -> None:
    # A holder and the first waiter both SIGKILLed: the lapsed lease is handed to the dead
    # waiter (still registered), whose reservation ends after the grace; then the next live
    # waiter gets it.
    holder = spawn("hold", "dead-head", "1", "renewed")
    read_line(holder, "held")
    dead = spawn("waiter", "dead-head", "1")
    read_line(dead, "ready")
    deadline = time.monotonic() + 20
    while (distlock.locks["default"].info("dead-head").waiters or 0) < 1:
        assert time.monotonic() < deadline, "the doomed waiter never queued"
        time.sleep(0.01)
    granted: list[tuple[int, float]] = []

    def wait_for_it(place: int) -> None:
        lk = distlock.lock("dead-head", ttl=5, wait=20)
        assert lk.acquire()
        granted.append((place, time.monotonic()))
        lk.release()

    threads = []

    def join(place: int) -> None:
        threads.append(threading.Thread(target=wait_for_it, args=(place,)))
        threads[-1].start()

    # Both live waiters behind the doomed one (it counts as the first waiter).
    for place in (1, 2):
        join(place)
        while (distlock.locks["default"].info("dead-head").waiters or 0) < place + 1:
            assert time.monotonic() < deadline, f"waiter {place} never queued"
            time.sleep(0.01)
    os.kill(dead.pid, signal.SIGKILL)
    info = distlock.locks["default"].info("dead-head")
    os.kill(holder.pid, signal.SIGKILL)
    lease_end = time.monotonic() + 1.0  # the renewed lease runs out a second after the kill
    for thread in threads:
        thread.join(timeout=30)
    assert [place for place, _ in granted] == [1, 2]
    late = granted[0][1] - lease_end
    print(f"first live waiter granted {late:+.3f}s after the lease's end")
    # The grace (0.25 s) for the dead waiter's reservation, plus a loaded machine's slack.
    assert late < 0.25 + 0.5, info
