"""Network faults between the client and Redis, injected by devkit/tcp_proxy.py: latency,
dropped traffic, lost replies and reset connections.

The default alias goes through the proxy; the alias "direct" reaches the same server without
it, to see what the server really holds."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator

import pytest

import distlock
from devkit.configs import SOCKET_TIMEOUT, distlock_settings
from devkit.tcp_proxy import TcpProxy
from distlock import BackendUnavailable
from distlock.handler import locks
from tests.faults.conftest import scaled, scaled_timeout
from tests.faults.helpers import SLACK

pytestmark = [pytest.mark.django_db(databases=[]), scaled_timeout]


@pytest.fixture
def proxy(settings, redis_server) -> Iterator[TcpProxy]:
    redis_server.flushall()
    with TcpProxy(redis_server.address) as proxy:
        proxied, settings.CACHES = distlock_settings("redis", proxy.url)
        direct, _ = distlock_settings("redis", redis_server.url)
        settings.DISTLOCK = {"default": proxied["default"], "direct": direct["default"]}
        yield proxy
        proxy.latency, proxy.blackhole = 0.0, False


def held_on_server(name: str):
    return locks["direct"].info(name)


def warm_up() -> None:
    """Open the pooled connection and load the scripts, so the next command is the one a
    fault hits (not the connection's handshake)."""
    with distlock.lock("warm-up", ttl=5):
        pass


def spy_on_releases(monkeypatch) -> list[str]:
    """Record the tokens the default alias's backend is asked to release."""
    backend = locks["default"].exclusive  # kept by the patch: every Lock gets this one
    released: list[str] = []
    real = backend.release

    def release(name, token, **kwargs):
        released.append(token)
        return real(name, token, **kwargs)

    monkeypatch.setattr(backend, "release", release)
    return released


# --- latency --------------------------------------------------------------------------
def test_an_acquire_slower_than_its_lease_is_given_up_and_released(
    proxy, monkeypatch, record
) -> None:
    warm_up()
    released = spy_on_releases(monkeypatch)
    proxy.latency = 0.15  # each way: the grant arrives after its 0.2 s lease ended
    lk = distlock.lock("slow", ttl=0.2)
    started = time.monotonic()
    assert lk.acquire(wait=0) is False
    took = time.monotonic() - started
    assert lk.token is None and lk.fencing_token is None
    assert len(released) == 1  # the grant it could not use was given back at once
    proxy.latency = 0.0
    assert held_on_server("slow") is None
    record(
        "Network latency above the lease (0.15 s each way, lease 0.2 s)",
        f"acquire() gave up the grant that arrived too late, released it and returned "
        f"False after {took:.2f}s; never reported held",
        seconds=round(took, 2),
    )


def test_under_random_latency_an_acquired_lock_always_has_validity_left(proxy, record) -> None:
    """Whatever the delay, acquire() returns True only while the lease still runs, as the
    server itself confirms."""
    warm_up()
    attempts = scaled(ci=30, full=200)
    lease = 0.25
    granted = refused = 0
    # Round trips from 0 to 0.4 s, spread evenly and shuffled (seeded): grants in time and
    # grants too late both occur on every run, by construction rather than by luck.
    latencies = [0.2 * step / (attempts - 1) for step in range(attempts)]
    random.Random(attempts).shuffle(latencies)
    for latency in latencies:
        proxy.latency = latency
        lk = distlock.lock("jittery", ttl=lease)
        if lk.acquire(wait=0):
            returned = time.monotonic()
            server_view = held_on_server("jittery")  # no proxy on this path
            # validity left, as the client computes it (from when the request was sent)...
            assert lk._lease.deadline - returned > 0
            # ...and as the server sees it: still held, by this token
            assert server_view is not None and server_view.token == lk.token
            assert server_view.ttl_remaining > 0
            granted += 1
        else:
            refused += 1
        proxy.latency = 0.0
        locks["direct"].force_release("jittery")
    assert granted and refused, (granted, refused)
    record(
        "Network latency from 0 to 0.2 s each way, shuffled (lease 0.25 s)",
        f"{attempts} acquires: {granted} granted, each with validity left (checked on the "
        f"server); {refused} given up because the grant came too late",
        attempts=attempts,
        granted=granted,
        given_up=refused,
    )


# --- drops ----------------------------------------------------------------------------
def test_a_blackholed_network_fails_closed_and_a_failed_release_is_retried(proxy, record) -> None:
    warm_up()
    holder = distlock.lock("cut-off", ttl=30)
    holder.acquire()
    token = holder.token
    proxy.blackhole = True
    started = time.monotonic()
    with pytest.raises(BackendUnavailable):
        distlock.lock("other", ttl=5).acquire(wait=1)
    took = time.monotonic() - started
    assert took < 1 + 2 * SOCKET_TIMEOUT + SLACK
    with pytest.raises(BackendUnavailable):
        holder.extend()
    with pytest.raises(BackendUnavailable):
        holder.release()
    assert holder.token == token  # kept for a retry
    proxy.blackhole = False
    holder.release()  # the same token, a new connection
    assert held_on_server("cut-off") is None and held_on_server("other") is None
    record(
        "Network drops every packet (blackhole)",
        f"acquire(wait=1) raised BackendUnavailable after {took:.2f}s; extend() and "
        "release() too, keeping the token; once the network healed the same release() "
        "succeeded",
        seconds=round(took, 2),
    )


def test_a_grant_whose_reply_was_lost_is_freed_at_once(proxy, record) -> None:
    warm_up()
    proxy.drop_next_reply()  # the server grants the lock; the client never hears it
    lk = distlock.lock("lost-reply", ttl=30)
    started = time.monotonic()
    with pytest.raises(BackendUnavailable):
        lk.acquire(wait=0)
    assert lk.token is None
    assert held_on_server("lost-reply") is None  # freed, not left to its 30 s lease
    took = time.monotonic() - started
    assert took < 2 * SOCKET_TIMEOUT + SLACK
    record(
        "Acquire reply lost on the network (the server granted it)",
        f"BackendUnavailable after {took:.2f}s, and the grant was released at once "
        "instead of blocking others for its 30 s lease",
        seconds=round(took, 2),
    )


# --- resets ---------------------------------------------------------------------------
def test_a_reset_connection_fails_closed_and_the_release_is_retried(proxy, record) -> None:
    warm_up()
    holder = distlock.lock("reset", ttl=30)
    holder.acquire()
    # Reset while idle: the client sees the dead pooled connection before sending anything
    # and opens another (safe: nothing was sent).
    proxy.reset()
    holder.extend()
    # Reset while the release is on its way: the request never reaches the server. (The
    # margin lets a loaded client send first: a reset before the send is retried and works.)
    proxy.latency = 0.6
    threading.Timer(0.3, proxy.reset).start()
    with pytest.raises(BackendUnavailable, match="Connection"):
        holder.release()
    proxy.latency = 0.0
    assert holder.token is not None
    assert held_on_server("reset").token == holder.token  # the release never arrived
    holder.release()  # retried with the same token, on a new connection
    assert held_on_server("reset") is None
    record(
        "Connection reset (RST) while idle and during release()",
        "idle: the client reconnected before sending, unnoticed; during release(): "
        "BackendUnavailable, the token kept, and the retry with the same token released "
        "the lock",
    )


def test_a_reset_the_idle_check_missed_is_sent_again_once(proxy, monkeypatch) -> None:
    # The reset lands after the pooled connection was checked (here: the check is blinded):
    # the write fails, nothing reached the server, so the command goes again on a new
    # connection instead of failing the caller.
    import redis.connection

    warm_up()
    holder = distlock.lock("reset-after-check", ttl=30)
    holder.acquire()
    monkeypatch.setattr(redis.connection.Connection, "can_read", lambda self, timeout=0: False)
    proxy.reset()
    time.sleep(0.05)  # the RST has arrived: the next write on that socket fails
    holder.extend(ttl=60)  # would raise BackendUnavailable if the reset were not retried
    held = held_on_server("reset-after-check")
    assert held.token == holder.token and held.ttl_remaining > 30
    holder.release()
    assert held_on_server("reset-after-check") is None


def test_a_release_whose_reply_was_lost_can_be_retried(proxy, record) -> None:
    """The release reached the server and freed the lock, but its answer was lost: the retry
    must not report the lease as ended (the holder released in time)."""
    warm_up()
    lk = distlock.lock("lost-release-reply", ttl=30)
    lk.acquire()
    proxy.drop_next_reply()
    with pytest.raises(BackendUnavailable):
        lk.release()
    assert held_on_server("lost-release-reply") is None  # it did arrive
    lk.release()  # the retry: no LockNotOwned, the release was in time
    assert lk.token is None
    record(
        "Release reply lost on the network (the server released it)",
        "release() raised BackendUnavailable; the retry with the same token completed "
        "without error (the lock had been released in time)",
    )
