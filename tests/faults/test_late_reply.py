"""The error path's MUST (docs/protocol.md, "The error path"): after a read timeout the
connection is dropped, so the late "acquired" reply of a call that timed out is never read as
the answer to a later command, and no Lock believes it holds what the server gives another.

The server is kept busy by a Lua loop (a script runs alone: every other command waits behind
it), longer than the alias's socket timeout: the acquire's script runs late, grants its token,
and answers on a connection the client gave up."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import distlock
from devkit.configs import distlock_settings
from devkit.redis_server import RedisServer
from distlock import BackendUnavailable
from distlock.handler import locks

pytestmark = pytest.mark.django_db(databases=[])

READ_TIMEOUT = 0.2  # the alias's socket_timeout, s
BUSY_MS = 700  # the server runs nothing else this long: past the acquire's read timeout
# Spin on the server's clock for ARGV[1] ms (no write: any server version runs it).
BUSY = """
local function now() local t = redis.call('TIME') return t[1] * 1000 + t[2] / 1000 end
local stop = now() + tonumber(ARGV[1])
while now() < stop do end
return 1
"""


@pytest.fixture
def impatient(settings: Any, redis_server: RedisServer) -> Iterator[RedisServer]:
    """The default alias on the tests' server, with a short read timeout."""
    redis_server.flushall()
    settings.DISTLOCK, settings.CACHES = distlock_settings("redis", redis_server.url)
    settings.DISTLOCK["default"]["OPTIONS"]["socket_timeout"] = READ_TIMEOUT
    locks.reset()
    yield redis_server
    locks.reset()


def keep_busy(server: RedisServer) -> redis.Connection:
    """Start the busy loop on a connection of its own; return it (its reply is read later)."""
    busy = redis.Connection(host=server.host, port=server.port)
    busy.send_command("EVAL", BUSY, 0, BUSY_MS)
    probe = redis.Connection(host=server.host, port=server.port, socket_timeout=0.05)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # until a PING goes unanswered: the loop runs
            probe.send_command("PING")
            probe.read_response()
    except redis.TimeoutError:
        return busy
    finally:
        probe.disconnect()
    raise AssertionError("the server never started the busy loop")


def test_a_late_grant_after_a_read_timeout_is_never_believed(impatient: RedisServer) -> None:
    with distlock.lock("warm-up", ttl=5):  # the pooled connection open, the scripts loaded
        pass
    busy = keep_busy(impatient)
    late = distlock.lock("late", ttl=3)
    with pytest.raises(BackendUnavailable):
        late.acquire(wait=0)  # its script runs after the loop, past the read timeout
    assert busy.read_response() == 1  # the server is free again
    busy.disconnect()
    assert late.token is None and late.fencing_token is None

    # The next acquires of the name go through the same client and pool: had the timed-out
    # connection been kept, one of them would read the abandoned token's "acquired" reply as
    # its own answer. Each Lock that says it holds must be the server's holder.
    for _ in range(3):
        contender = distlock.lock("late", ttl=3)
        believed = contender.acquire(wait=0)
        holder = locks["default"].info("late")
        if believed:
            assert holder is not None and holder.token == contender.token
            contender.release()
        else:
            assert holder is None or holder.token != contender.token
    assert late.token is None
