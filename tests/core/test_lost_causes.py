"""Issue 40: a lost lease names its cause, as far as the holder can tell by its own clock,
and gives the advice for that cause (before: "use a longer ttl ... or auto_renew=True"
whatever happened, also after a Redis restart and with auto-renewal on)."""

from __future__ import annotations

import threading
import time

import pytest

import distlock
from devkit.redis_server import RedisServer

pytestmark = pytest.mark.django_db(databases=[])


def test_a_lease_that_ran_out_says_the_work_took_longer_or_paused(redis_backend: str) -> None:
    lk = distlock.lock("slow-work", ttl=0.1)
    assert lk.acquire()
    time.sleep(0.3)
    with pytest.raises(distlock.LockNotOwned) as lost:
        lk.release()
    message = str(lost.value)
    assert "lease had run out" in message and "took longer than the lease" in message
    assert "auto_renew=True" in message and "fence=True" in message


def test_a_redis_restarted_empty_is_named_and_no_longer_ttl_advised(
    private_redis: RedisServer,
) -> None:
    lk = distlock.lock("restarted", ttl=30)
    assert lk.acquire()
    private_redis.restart(empty=True)
    with pytest.raises(distlock.LockNotOwned) as lost:
        lk.release()
    message = str(lost.value)
    assert "lease left by this process's clock, so the lease was not too short" in message
    assert "restarted empty" in message and "longer ttl" not in message


def test_an_auto_renewed_lease_lost_early_never_advises_auto_renew(
    private_redis: RedisServer,
) -> None:
    told = threading.Event()
    reasons: list[str | None] = []

    def on_lost(lock: distlock.Lock) -> None:
        reasons.append(lock.lost_reason)
        told.set()

    lk = distlock.lock("renewed", ttl=1.5, auto_renew=True, on_lost=on_lost)
    assert lk.acquire()
    private_redis.restart(empty=True)
    assert told.wait(10)
    reason = reasons[0] or ""
    assert "a renewal found it gone with" in reason and "restarted empty" in reason
    assert "auto_renew=True" not in reason
    with pytest.raises(distlock.LockLost):
        lk.release()
