"""Locks across real processes on a real Redis server: exclusion, handoff, crashed holders."""

from __future__ import annotations

import os
import signal
import statistics
import time
from collections.abc import Iterator

import pytest

import distlock
from devkit.processes import child_env
from tests.support.lock_helpers import assert_counted_exactly, read_line, spawner

pytestmark = pytest.mark.django_db(databases=[])


@pytest.fixture
def spawn(shared_backend_kind: str, backend_location: str, redis_url: str) -> Iterator:
    """Start ``python -m tests.support.workers ...`` processes against the same lock servers; their
    shared data (the counter) lives on the standalone server at ``redis_url``."""
    env = child_env(kind=shared_backend_kind, url=backend_location, data_url=redis_url)
    with spawner("tests.support.workers", env) as start:
        yield start


@pytest.mark.slow
def test_mutual_exclusion_eight_processes(spawn, redis_url: str) -> None:
    workers = [spawn("counter", "counted", "500") for _ in range(8)]
    assert_counted_exactly(workers, redis_url, 8 * 500)


def test_waiter_in_another_process_gets_the_lock_quickly(spawn) -> None:
    rounds = 50
    waiter = spawn("waiter", "handoff", str(rounds))
    read_line(waiter, "ready")
    delays = []
    for _ in range(rounds):
        holder = distlock.lock("handoff", ttl=10)
        assert holder.acquire(wait=10)
        time.sleep(0.04)  # the waiter is blocked by now
        released = time.monotonic()
        holder.release()
        acquired = float(read_line(waiter, "acquired").split()[1])
        delays.append(acquired - released)
    assert waiter.wait(timeout=30) == 0
    assert statistics.median(delays) < 0.050, sorted(delays)


def test_sigkilled_holder_lock_is_taken_when_its_lease_ends(spawn) -> None:
    holder = spawn("hold", "crash", "1")
    read_line(holder, "held")
    info = distlock.locks["default"].info("crash")
    lease_end = time.monotonic() + info.ttl_remaining
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    lk = distlock.lock("crash", ttl=5)
    assert lk.acquire(wait=5)
    assert time.monotonic() - lease_end < 0.2
    assert lk.fencing_token > info.fencing_token
    lk.release()
