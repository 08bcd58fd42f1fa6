"""A waiter's clock that runs slower than the server's, within the protocol's 1% budget: the
lease it counts on (lease_left()) must end no later than the server's, however long it waited
(docs/protocol.md, "The drift allowance"; the contract's "Time")."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import pytest

import distlock

pytestmark = [pytest.mark.slow]

WAIT = 10  # seconds the waiter waits: 1% of it is 100 ms, the error a one-rate projection made


class SlowClock:
    """The ``time`` module as an acquire uses it (distlock.attempts, distlock.lock_calls,
    distlock.lock), with a monotonic clock running at ``rate`` of the real one from now on
    (the server's clock is the real one)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.base = time.monotonic()

    def monotonic(self) -> float:
        return self.base + (time.monotonic() - self.base) * self.rate

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def test_a_waiter_whose_clock_runs_one_percent_slow_counts_no_lease_past_the_servers(
    redis_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The waiter waits WAIT s for the holder's release, then holds a 1 s lease: once the
    server's key is gone, lease_left() is 0. (Projecting the wait at one rate, it believed it
    held about 1% of the wait + the lease, ~110 ms, after the key was gone.)"""
    holder = distlock.lock("slow-clock", ttl=60)
    assert holder.acquire(wait=0)
    clock = SlowClock(rate=0.99)
    for module in ("distlock.attempts", "distlock.lock_calls", "distlock.lock"):
        monkeypatch.setattr(sys.modules[module], "time", clock)
    waiter = distlock.lock("slow-clock", ttl=1)
    acquired: list[bool] = []
    thread = threading.Thread(target=lambda: acquired.append(waiter.acquire(wait=3 * WAIT)))
    thread.start()
    deadline = time.monotonic() + 10
    while (info := holder.holder()) is None or info.waiters < 1:  # queued: the clock pair is taken
        assert time.monotonic() < deadline, "the waiter never queued"
        time.sleep(0.01)
    time.sleep(WAIT)
    holder.release()
    thread.join(timeout=30)
    assert acquired == [True]
    while waiter.ttl_remaining() is not None:  # the server's lease runs out (no renewal)
        time.sleep(0.005)
    assert waiter.lease_left() == 0.0
