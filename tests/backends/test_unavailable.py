"""Redis down, paused or slow: fail closed, fast, with a clear message."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import distlock
from devkit.configs import SOCKET_TIMEOUT, distlock_settings
from devkit.redis_server import RedisServer
from devkit.tcp_proxy import TcpProxy
from distlock import BackendUnavailable
from distlock.backends.redis_ops import grants
from distlock.handler import locks

pytestmark = pytest.mark.django_db(databases=[])


def test_stopped_server_raises_backend_unavailable_within_the_socket_timeout(private_redis) -> None:
    private_redis.stop()
    started = time.monotonic()
    with pytest.raises(BackendUnavailable) as caught:
        distlock.lock("down", wait=30).acquire()
    assert time.monotonic() - started < SOCKET_TIMEOUT
    assert f"127.0.0.1:{private_redis.port}" in str(caught.value)


def test_paused_server_raises_instead_of_hanging(private_redis) -> None:
    lk = distlock.lock("paused", ttl=5, wait=30)
    private_redis.pause()
    started = time.monotonic()
    with pytest.raises(BackendUnavailable):
        lk.acquire()
    # one socket timeout for the acquire, at most one more for freeing what it may have taken
    assert time.monotonic() - started < 2 * SOCKET_TIMEOUT + 0.5
    assert lk.token is None  # never reported as acquired
    private_redis.resume()


def test_password_is_never_in_the_message(settings, private_redis) -> None:
    settings.DISTLOCK = {
        "default": {
            "BACKEND": "distlock.backends.redis.RedisBackend",
            "LOCATION": f"redis://:hunter2@127.0.0.1:{private_redis.port}/0",
            "OPTIONS": {"socket_timeout": SOCKET_TIMEOUT},
        }
    }
    private_redis.stop()
    with pytest.raises(BackendUnavailable) as caught:
        distlock.lock("secret").acquire()
    assert "hunter2" not in str(caught.value) and "***" in str(caught.value)


def test_release_that_failed_on_the_network_can_be_retried(private_redis) -> None:
    lk = distlock.lock("retry-release", ttl=30)
    lk.acquire()
    token = lk.token
    private_redis.pause()
    with pytest.raises(BackendUnavailable):
        lk.release()
    assert lk.token == token  # kept, so the release can be retried
    private_redis.resume()
    lk.release()
    assert not lk.locked()


def test_extend_and_info_fail_closed(private_redis) -> None:
    lk = distlock.lock("extend-down", ttl=30)
    lk.acquire()
    private_redis.stop()
    with pytest.raises(BackendUnavailable):
        lk.extend()
    with pytest.raises(BackendUnavailable):
        locks["default"].held()
    with pytest.raises(BackendUnavailable):
        lk.locked()


async def test_async_acquire_fails_closed(private_redis) -> None:
    private_redis.stop()
    started = time.monotonic()
    with pytest.raises(BackendUnavailable):
        await distlock.lock("adown", wait=30).aacquire()
    assert time.monotonic() - started < SOCKET_TIMEOUT


def test_server_back_after_outage_works_again(private_redis) -> None:
    private_redis.stop()
    with pytest.raises(BackendUnavailable):
        distlock.lock("back").acquire()
    private_redis.restart()
    with distlock.lock("back", ttl=5) as lk:
        assert lk.owned()


def test_a_late_wakeup_is_no_signal_but_a_dead_server_still_fails(private_redis) -> None:
    # A BLPOP answered after the socket timeout (a loaded server or client) changes no lock
    # state: the waiter must retry, not report an outage. Blocking longer than the socket
    # timeout makes the reply late on purpose.
    backend = locks["default"]
    distlock.lock("late-wakeup", ttl=30).acquire()
    assert (
        backend.run(grants.wait_for_grant(backend.layout, "late-wakeup", SOCKET_TIMEOUT * 1.5))
        is None
    )
    assert distlock.lock("late-wakeup").acquire(wait=0) is False  # the server still answers
    private_redis.stop()
    with pytest.raises(BackendUnavailable):
        backend.run(grants.wait_for_grant(backend.layout, "late-wakeup", 0.1))


async def test_a_late_wakeup_is_no_signal_in_async_code_either(private_redis) -> None:
    backend = locks["default"]
    await distlock.lock("late-wakeup-async", ttl=30).aacquire()
    assert (
        await backend.arun(
            grants.wait_for_grant(backend.layout, "late-wakeup-async", SOCKET_TIMEOUT * 1.5)
        )
        is None
    )
    private_redis.stop()
    with pytest.raises(BackendUnavailable):
        await backend.arun(grants.wait_for_grant(backend.layout, "late-wakeup-async", 0.1))


# --- a pooled connection dropped between calls: resent only when that is safe -----------------
@pytest.fixture
def proxied(settings: Any, redis_server: RedisServer, redis_url: str) -> Iterator[TcpProxy]:
    """DISTLOCK reaches the server through a proxy that can cut a connection."""
    with TcpProxy(("127.0.0.1", redis_server.port)) as proxy:
        settings.DISTLOCK, settings.CACHES = distlock_settings("redis", proxy.url)
        locks.reset()
        yield proxy
        locks.reset()


def test_an_idempotent_call_is_sent_again_after_a_dropped_connection(proxied: TcpProxy) -> None:
    warm = distlock.lock("resent", ttl=5)
    assert warm.acquire(wait=0)  # the pool keeps the connection
    warm.release()
    proxied.cut_next_request()
    lk = distlock.lock("resent", ttl=5)
    assert lk.acquire(wait=0)  # the acquire lost its connection and was sent again
    assert proxied.cuts_pending() == 0
    lk.release()


def test_a_release_is_not_sent_again_after_a_dropped_connection(proxied: TcpProxy) -> None:
    lk = distlock.lock("not-resent", ttl=5)
    assert lk.acquire(wait=0)
    proxied.cut_next_request()
    with pytest.raises(BackendUnavailable):
        lk.release()  # its outcome is unknown to the client: never sent twice
    assert proxied.cuts_pending() == 0
    assert lk.locked()  # the release never reached the server, and was not sent again
    lk.release()


async def test_an_idempotent_async_call_is_sent_again_after_a_dropped_connection(
    proxied: TcpProxy,
) -> None:
    warm = distlock.lock("resent-async", ttl=5)
    assert await warm.aacquire(wait=0)  # this event loop's client keeps the connection
    await warm.arelease()
    proxied.cut_next_request()
    lk = distlock.lock("resent-async", ttl=5)
    assert await lk.aacquire(wait=0)  # as in sync code: sent again on a new connection
    assert proxied.cuts_pending() == 0
    await lk.arelease()


async def test_an_async_release_is_not_sent_again_after_a_dropped_connection(
    proxied: TcpProxy,
) -> None:
    lk = distlock.lock("not-resent-async", ttl=5)
    assert await lk.aacquire(wait=0)
    proxied.cut_next_request()
    with pytest.raises(BackendUnavailable):
        await lk.arelease()
    assert proxied.cuts_pending() == 0
    assert await lk.alocked()
    await lk.arelease()
