"""A backend that is let go (``locks.reset()``, a changed setting) closes its sockets at once.

Reference counting frees it only if no error distlock raised or kept is in a reference cycle
with the frames that held the backend (distlock/backends/redis_ops/detached.py). A backend
left to the garbage collector may have a socket finalised before the connection that would
have closed it: "unclosed socket" ResourceWarnings, errors under ``-W error``, at random
later moments.

Each test turns the collector off, takes an error path, lets the backend go, and checks
that it is gone, with its sockets closed.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import distlock
from devkit.configs import distlock_settings
from distlock.backends.redis_ops import grants
from distlock.backends.redis_ops.detached import detached
from distlock.exceptions import BackendUnavailable
from distlock.handler import locks

pytestmark = pytest.mark.django_db(databases=[])


@pytest.fixture
def no_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def pools_of(backend: Any) -> list[Any]:
    """The connection pools of the backend (one server, or every Redlock node)."""
    nodes = getattr(backend, "nodes", None) or [backend]
    return [node.client.connection_pool for node in nodes]


def open_sockets(backend: Any) -> list[socket.socket]:
    """The sockets of the idle connections in the backend's pools (the test may look inside
    redis-py; distlock may not)."""
    return [
        connection._sock
        for pool in pools_of(backend)
        for connection in pool._available_connections
        if connection._sock is not None
    ]


def let_go_and_check_freed() -> None:
    backend = locks["default"]
    sockets = open_sockets(backend)
    assert sockets, "the test should leave idle connections to check"
    # Only the backend: redis-py 8's pools sit in cycles of their own (with their
    # maintenance-notification handlers), which is why the backend closes its sockets itself.
    gone = [weakref.ref(backend)]
    del backend
    locks.reset()
    alive = [ref() for ref in gone if ref() is not None]
    assert not alive, f"in a reference cycle, only the collector would free {alive}"
    assert all(sock.fileno() == -1 for sock in sockets), "a socket was left open"


def use_redis(settings: Any, url: str, **options: Any) -> None:
    settings.DISTLOCK, settings.CACHES = distlock_settings("redis", url)
    settings.DISTLOCK["default"]["OPTIONS"].update(options)
    locks.reset()


@pytest.mark.parametrize("options", [{"protocol": 2}, {"protocol": 3}], ids=["resp2", "resp3"])
def test_scripts_the_server_forgot_leave_no_cycle(
    settings, redis_url, no_collector, options
) -> None:
    use_redis(settings, redis_url, **options)
    with distlock.lock("cycles", ttl=5):
        pass
    redis.Redis.from_url(redis_url).script_flush()  # NOSCRIPT, an error reply, then EVAL
    with distlock.lock("cycles", ttl=5):
        pass
    let_go_and_check_freed()


def test_an_error_reply_leaves_no_cycle(settings, redis_url, no_collector) -> None:
    use_redis(settings, redis_url)
    backend = locks["default"]
    redis.Redis.from_url(redis_url).set(backend.layout.keys_for("cycles").signal, "x")
    with pytest.raises(BackendUnavailable, match="WRONGTYPE"):
        backend.run(
            grants.wait_for_grant(backend.layout, "cycles", 0.01)
        )  # BLPOP answers with an error
    del backend
    let_go_and_check_freed()


def test_a_redlock_node_failing_leaves_no_cycle(nodes, no_collector) -> None:
    with distlock.lock("cycles", ttl=5):
        pass
    nodes[0].kill()  # its failure is kept among the fan-out's results
    with distlock.lock("cycles", ttl=5):
        pass
    let_go_and_check_freed()


def test_a_redlock_without_a_majority_leaves_no_cycle(nodes, no_collector) -> None:
    with distlock.lock("cycles", ttl=5):
        pass
    nodes[0].kill()
    nodes[1].kill()
    with pytest.raises(BackendUnavailable):
        distlock.lock("cycles", ttl=5).acquire(wait=0)
    let_go_and_check_freed()


def test_an_async_redlock_node_failing_leaves_no_cycle(nodes, no_collector) -> None:
    async def use() -> None:
        async with distlock.lock("cycles", ttl=5):
            pass

    nodes[0].kill()
    asyncio.run(use())
    with distlock.lock("cycles", ttl=5):  # the sync lines, to have sockets to check
        pass
    let_go_and_check_freed()


def test_detached_drops_the_tracebacks_of_an_error_and_its_causes() -> None:
    def fail() -> None:
        try:
            raise OSError("reset")
        except OSError as exc:
            raise redis.ConnectionError("lost") from exc

    with pytest.raises(redis.ConnectionError) as caught:
        fail()
    error = detached(caught.value)
    assert error is caught.value and str(error) == "lost"
    assert error.__traceback__ is None
    assert isinstance(error.__cause__, OSError) and error.__cause__.__traceback__ is None
