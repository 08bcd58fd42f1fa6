"""The client's wall clock jumps an hour (NTP step, a VM restored, an operator): leases,
waits and renewals do not notice. They run on time.monotonic() on the client and on the
server's own clock in Redis; only displayed timestamps come from a wall clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

import distlock

pytestmark = pytest.mark.django_db(databases=[])
HOUR = 3600.0


@pytest.fixture
def jump(monkeypatch) -> Callable[[float], None]:
    """Return a function that moves this process's wall clock (time.time, time.time_ns)."""
    real_time, real_time_ns = time.time, time.time_ns
    offset = [0.0]
    monkeypatch.setattr(time, "time", lambda: real_time() + offset[0])
    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + int(offset[0] * 1e9))

    def move(seconds: float) -> None:
        offset[0] += seconds

    return move


@pytest.mark.parametrize("direction", [HOUR, -HOUR], ids=["forward", "backward"])
def test_a_lease_ends_on_time_whatever_the_wall_clock_says(
    backend_kind, jump, direction, record
) -> None:
    holder = distlock.lock("clock", ttl=0.5)
    holder.acquire()
    acquired = time.monotonic()
    jump(direction)
    assert 0.3 < holder.ttl_remaining() <= 0.5
    assert distlock.lock("clock").acquire(wait=0) is False  # not expired by the jump
    successor = distlock.lock("clock", ttl=5)
    assert successor.acquire(wait=3)
    lasted = time.monotonic() - acquired
    assert 0.45 < lasted < 1.2  # the 0.5 s lease, not 0 and not an hour
    assert successor.fencing_token > holder.fencing_token
    successor.release()
    if backend_kind == "redis":
        record(
            f"Client wall clock jumps an hour {'forward' if direction > 0 else 'backward'}",
            f"a 0.5 s lease ended after {lasted:.2f}s; ttl_remaining() unaffected; fencing "
            "tokens still increasing",
            lease_lasted_seconds=round(lasted, 2),
        )


def test_a_wait_lasts_as_long_as_asked_across_jumps(backend_kind, jump) -> None:
    holder = distlock.lock("clock-wait", ttl=30)
    holder.acquire()
    threading.Timer(0.1, jump, args=(HOUR,)).start()
    threading.Timer(0.2, jump, args=(-2 * HOUR,)).start()
    started = time.monotonic()
    assert distlock.lock("clock-wait").acquire(wait=0.6) is False
    # at least the wait asked for, and nowhere near the hour the clock jumped (the upper
    # bound is loose: a loaded 2-core machine may add a second to a Redlock fan-out)
    assert 0.55 < time.monotonic() - started < 3.0
    holder.release()


def test_auto_renewal_keeps_going_across_jumps(backend_kind, jump) -> None:
    lk = distlock.lock("clock-renewed", ttl=0.3, auto_renew=True)
    lk.acquire()
    for step in (HOUR, -2 * HOUR, HOUR):
        jump(step)
        time.sleep(0.3)
        assert lk.owned()
    lk.release()


def test_fencing_tokens_of_the_in_process_backend_survive_a_backward_jump(settings, jump):
    from devkit.configs import distlock_settings

    settings.DISTLOCK, settings.CACHES = distlock_settings("locmem", "unused")
    with distlock.lock("clock-fence") as first:
        pass
    jump(-HOUR)  # its tokens are seeded from this process's wall clock
    with distlock.lock("clock-fence") as second:
        assert second.fencing_token > first.fencing_token
