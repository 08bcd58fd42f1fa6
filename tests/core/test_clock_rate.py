"""A waiter's clock that runs slower than the server's, within the protocol's 1% budget: the
lease it counts on (lease_left()) must end no later than the server's, however long it waited
(docs/protocol.md, "The drift allowance"; the contract's "Time"); nor when the server's clock,
a wall clock, stepped forward during the wait."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import pytest

import distlock

pytestmark = [pytest.mark.slow]

WAIT = 10  # seconds the waiter waits: 1% of it is 100 ms, the error a one-rate projection made


# Every module whose monotonic clock an acquire or lease_left() reads: a send time read on the
# real clock (redis_ops.holds, ahead of the slow one) would make a START counted from it late.
CLOCK_READERS = (
    "distlock.attempts",
    "distlock.lock_calls",
    "distlock.lock",
    "distlock.lease",
    "distlock.backends.redis_ops.holds",
    "distlock.backends.redis_ops.kinds",
)


class SlowClock:
    """The ``time`` module as an acquire and lease_left() use it (CLOCK_READERS), with a
    monotonic clock running at ``rate`` of the real one from now on (the server's clock is
    the real one). stall(ms) stops it that long, then it runs on from where it stood: as
    this process sees it, the server's clock stepped forward by ``ms``."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.base = time.monotonic()
        self.stalled_at, self.stall_s = float("inf"), 0.0

    def stall(self, ms: float) -> None:
        self.stalled_at, self.stall_s = time.monotonic(), ms / 1000

    def monotonic(self) -> float:
        real = time.monotonic()
        stood = min(max(real - self.stalled_at, 0.0), self.stall_s)
        return self.base + (real - stood - self.base) * self.rate

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def test_a_waiter_whose_clock_runs_one_percent_slow_counts_no_lease_past_the_servers(
    redis_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The waiter waits WAIT s for the holder's release, then holds a 1 s lease: once the
    server's key is gone, lease_left() is 0. (Projecting the wait at one rate, it believed it
    held about 1% of the wait + the lease, ~110 ms, after the key was gone.)"""
    assert waits_then_counts(monkeypatch, "slow-clock", WAIT, stall_ms=0) == 0.0


def test_a_waiter_counts_no_lease_past_the_servers_after_the_servers_clock_steps_forward(
    redis_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same 1% slow waiter, whose clock stands still 500 ms during a 1 s wait: the server's
    clock stepped 500 ms forward, as it sees it. Once the key is gone, lease_left() is 0: a
    START projected past the grant's reply counts from the send. (Without that, lease_left()
    was still 0.49 s.) The step is larger than any delay of the grant's reply: a step smaller
    than that delay is not seen, and costs up to that delay (docs/protocol.md)."""
    assert waits_then_counts(monkeypatch, "stepped-clock", 1, stall_ms=500) == 0.0


def waits_then_counts(
    monkeypatch: pytest.MonkeyPatch, name: str, wait: float, stall_ms: float
) -> float:
    """Queue a 1% slow waiter for a 1 s lease of ``name`` behind a holder, stall its clock by
    ``stall_ms`` once queued, release after ``wait`` s: return its lease_left() once the
    server's key is gone."""
    holder = distlock.lock(name, ttl=60)
    assert holder.acquire(wait=0)
    clock = SlowClock(rate=0.99)
    for module in CLOCK_READERS:
        monkeypatch.setattr(sys.modules[module], "time", clock)
    waiter = distlock.lock(name, ttl=1)
    acquired: list[bool] = []
    thread = threading.Thread(target=lambda: acquired.append(waiter.acquire(wait=3 * WAIT)))
    thread.start()
    deadline = time.monotonic() + 10
    while (info := holder.holder()) is None or info.waiters < 1:  # queued: the clock pair is taken
        assert time.monotonic() < deadline, "the waiter never queued"
        time.sleep(0.01)
    if stall_ms:
        clock.stall(stall_ms)
    time.sleep(wait)
    holder.release()
    thread.join(timeout=30)
    assert acquired == [True]
    while waiter.ttl_remaining() is not None:  # the server's lease runs out (no renewal)
        time.sleep(0.005)
    return waiter.lease_left()
