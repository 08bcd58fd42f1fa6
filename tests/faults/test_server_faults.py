"""The Redis server paused (SIGSTOP), killed (SIGKILL) and restarted empty: clear errors in
bounded time, never a lock reported held that is not, and fencing tokens that never go back.

Restarted empty (no persistence), Redis forgets every lease: the lock can be granted again at
once while the old holder still works. That is the Redis distributed-lock page's reason for
"delayed restarts" (keep a crashed server down for at least the longest lease, e.g. the
alias's MAX_TTL) or fsync'ed persistence; distlock's part is that fencing tokens are seeded
from the server's clock in microseconds, so the new holder's token is still the larger one and
a fenced resource rejects the old holder (as long as the server's clock does not step back).
"""

from __future__ import annotations

import time

import pytest
from django.db.models import F

import distlock
from devkit.configs import SOCKET_TIMEOUT
from devkit.fencingapp.models import Account
from distlock import BackendUnavailable, LockLost, LockNotOwned
from distlock.fencing import fenced_update
from tests.faults.helpers import SLACK, lost_locks

pytestmark = pytest.mark.django_db(databases=[])


def elapsed(started: float) -> float:
    return time.monotonic() - started


# --- paused ---------------------------------------------------------------------------
@pytest.mark.parametrize("wait", [0, 2])
def test_acquire_on_a_paused_server_fails_closed_before_its_deadline(
    private_redis, wait, record
) -> None:
    lk = distlock.lock("frozen", ttl=5, wait=wait)
    private_redis.pause()
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match=f"127.0.0.1:{private_redis.port}"):
        lk.acquire()
    took = elapsed(started)
    deadline = wait + 2 * SOCKET_TIMEOUT
    assert took < deadline + SLACK
    assert lk.token is None and lk.fencing_token is None  # never reported acquired
    private_redis.resume()
    assert not lk.locked()  # and nothing was left behind (or it was freed)
    record(
        f"redis-server paused (SIGSTOP), acquire(wait={wait})",
        f"BackendUnavailable after {took:.2f}s (deadline wait + 2 x socket_timeout = "
        f"{deadline:g}s); never reported acquired",
        seconds=round(took, 2),
        deadline_seconds=deadline,
    )


def test_a_holder_sees_a_paused_server_as_unavailable_never_as_held(private_redis, record) -> None:
    lk = distlock.lock("frozen-holder", ttl=1)
    lk.acquire()
    private_redis.pause()
    started = time.monotonic()
    for call in (lk.owned, lk.ttl_remaining, lk.locked, lk.extend, lk.release):
        with pytest.raises(BackendUnavailable):
            call()
    assert elapsed(started) < 5 * SOCKET_TIMEOUT + SLACK
    assert lk.token is not None  # the failed release kept the token
    time.sleep(max(0.0, 1.2 - elapsed(started)))  # the lease ends while the server is frozen
    private_redis.resume()
    assert lk.owned() is False and lk.ttl_remaining() is None
    with pytest.raises(LockNotOwned):
        lk.release()
    record(
        "redis-server paused while a lock is held",
        "owned(), ttl_remaining(), locked(), extend() and release() raised "
        "BackendUnavailable (never 'held'); after the lease ran out and the server came "
        "back: owned() False, release() LockNotOwned",
    )


def test_auto_renewal_against_a_paused_server_reports_the_lease_lost(private_redis, record) -> None:
    with lost_locks() as lost:
        lk = distlock.lock("frozen-renewed", ttl=1.5, auto_renew=True)
        lk.acquire()
        private_redis.pause()
        paused = time.monotonic()
        # Renewals fail (BackendUnavailable) and are retried while the lease may last; then
        # the holder is told, no later than the lease end plus one socket timeout.
        assert lost.first.wait(1.5 + SOCKET_TIMEOUT + SLACK), "the holder was never told"
        told_after = elapsed(paused)
        private_redis.resume()
        with pytest.raises(LockLost):
            lk.release()
        assert not distlock.lock("frozen-renewed").locked()
    record(
        "redis-server paused while an auto-renewed lock is held",
        f"holder told (lock_lost, then LockLost) {told_after:.2f}s after the pause, lease 1.5s",
        seconds=round(told_after, 2),
    )


# --- killed ---------------------------------------------------------------------------
def test_a_killed_server_is_reported_at_once(private_redis, record) -> None:
    lk = distlock.lock("crashed-server", ttl=30)
    lk.acquire()
    private_redis.kill()
    started = time.monotonic()
    for call in (lk.extend, lk.owned, lk.release, distlock.lock("other", wait=5).acquire):
        with pytest.raises(BackendUnavailable, match="did not answer"):
            call()
    took = elapsed(started)
    assert took < 4 * SOCKET_TIMEOUT  # refused connections fail fast
    record(
        "redis-server killed (SIGKILL)",
        f"extend(), owned(), release() and acquire(wait=5) raised BackendUnavailable, "
        f"all four in {took:.2f}s",
        seconds=round(took, 3),
    )


# --- restarted empty ------------------------------------------------------------------
@pytest.mark.django_db
def test_restarted_empty_leases_are_lost_and_tokens_still_go_up(private_redis, record):
    account = Account.objects.create(balance=0)
    rows = Account.objects.filter(pk=account.pk)
    tokens = []
    old = distlock.lock("restarted", ttl=30)
    old.acquire()
    tokens.append(old.fencing_token)
    assert fenced_update(rows, old.fencing_token, balance=F("balance") + 1) == 1
    renewed = distlock.lock("renewed-restarted", ttl=0.6, auto_renew=True)
    renewed.acquire()
    for _ in range(3):
        for _ in range(300):  # a burst of acquisitions: tokens outrun nothing
            with distlock.lock("restarted-burst", ttl=5) as lk:
                tokens.append(lk.fencing_token)
        private_redis.restart(empty=True)
        new = distlock.lock("restarted", ttl=30)
        assert new.acquire(wait=0), "the lease should be gone with the data"
        assert new.fencing_token > max(tokens)
        tokens.append(new.fencing_token)
        new.release()
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    current = distlock.lock("restarted", ttl=30)
    current.acquire()
    assert fenced_update(rows, current.fencing_token, balance=F("balance") + 1) == 1
    assert fenced_update(rows, old.fencing_token, balance=F("balance") + 1) == 0  # fenced out
    with pytest.raises(LockNotOwned):
        old.extend()
    with pytest.raises(LockNotOwned):
        old.release()
    time.sleep(0.4)  # a renewal (every 0.2s) finds the lease gone
    with pytest.raises(LockLost):
        renewed.release()
    assert current.owned()
    current.release()
    account.refresh_from_db()
    assert account.balance == 2
    record(
        "redis-server restarted empty (3 restarts, 900 acquisitions between)",
        "leases are lost with the data (the lock is granted again at once: documented); "
        f"all {len(tokens)} fencing tokens strictly increasing across restarts; the old "
        "holder's fenced write rejected, its extend()/release() LockNotOwned, an "
        "auto-renewed holder told LockLost",
        tokens=len(tokens),
        restarts=3,
    )


def test_restarted_with_its_snapshot_leases_survive(private_redis, record) -> None:
    lk = distlock.lock("persisted", ttl=30)
    lk.acquire()
    before = lk.fencing_token
    private_redis.restart(empty=False)  # SAVE, kill, start from the snapshot
    assert lk.owned()
    assert not distlock.lock("persisted").acquire(wait=0)
    lk.release()
    with distlock.lock("persisted", ttl=5) as again:
        assert again.fencing_token > before
    record(
        "redis-server restarted from a snapshot (RDB)",
        "the lease survived (held by the same token, refused to others), fencing tokens "
        "continued upwards",
    )
