"""Call Redis (the Lua scripts by SHA, BLPOP) with as little Python per call as possible.

``redis.Redis.execute_command`` serves every command and feature: retries, observability
hooks, event dispatch, client-side caching, connection pool bookkeeping. On a lock's hot path
that costs more than the round trip itself. For a plain ``redis.Redis`` client (standalone
or Sentinel-managed), :class:`DirectCalls` takes connections from the client's pool (which
connects them, with AUTH, SELECT, TLS and every other option) and drives each one as a line
(distlock.backends.lines: its own socket I/O where it can). It keeps the connections it used
checked out of the pool, one per concurrent caller, and checks each one before reuse as the
pool would. Any other client (Redis Cluster, a single-connection client) goes through the
client's own methods.
"""
from __future__ import annotations

import hashlib
import os
import weakref
from collections import deque
from typing import Any

import redis
from redis.exceptions import ConnectionError, NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .lines import ConnectionLine, line_class

_CALLERS: weakref.WeakSet[DirectCalls] = weakref.WeakSet()


class DirectCalls:
    """Run the scripts of ``sources`` (``script(name, keys, args)``) and plain commands
    (``command(*args)``) on ``client``."""

    def __init__(self, client: Any, sources: dict[str, str]) -> None:
        self.client = client
        self.sources = sources
        self.shas = {name: hashlib.sha1(source.encode()).hexdigest()
                     for name, source in sources.items()}
        pool = getattr(client, "connection_pool", None)
        direct = (type(client) is redis.Redis and client.connection is None
                  and isinstance(pool, redis.ConnectionPool))
        self._pool: redis.ConnectionPool | None = pool if direct else None
        self._line = line_class(pool) if direct else ConnectionLine
        # Lines this caller checked out and is not using: pop and append are atomic, so
        # each thread takes one of its own.
        self._idle: deque[Any] = deque()
        _CALLERS.add(self)

    def script(self, name: str, keys: list[str], args: list[Any]) -> Any:
        if self._pool is None:
            try:
                return self.client.evalsha(self.shas[name], len(keys), *keys, *args)
            except NoScriptError:
                return self.client.eval(self.sources[name], len(keys), *keys, *args)
        try:
            return self._round_trip("EVALSHA", self.shas[name], len(keys), *keys, *args)
        except NoScriptError:  # the server restarted or flushed its scripts
            return self._round_trip("EVAL", self.sources[name], len(keys), *keys, *args)

    def command(self, *args: Any) -> Any:
        """Run one command; the reply as the connection parsed it (no response callback)."""
        if self._pool is None:
            return self.client.execute_command(*args)
        return self._round_trip(*args)

    def _round_trip(self, *args: Any) -> Any:
        line = self._checkout()
        try:
            reply = line.call(args)
        except ResponseError:  # an error reply: the connection is in step, keep it
            self._idle.append(line)
            raise
        except BaseException:  # cut off mid-command: the connection may be out of step
            self._discard(line)
            raise
        self._idle.append(line)
        return reply

    def _checkout(self) -> Any:
        try:
            line = self._idle.pop()
        except IndexError:
            return self._line(self._pool.get_connection())  # type: ignore[union-attr]
        try:
            # Data waiting on an idle connection means it is out of step or the server
            # closed it (restart, idle timeout): start it afresh, as the pool would.
            if line.has_data():
                raise ConnectionError("Connection has data")
            line.check_health()
        except (ConnectionError, RedisTimeoutError, OSError):
            line.reset()  # reconnects when the command is sent
        return line

    def _discard(self, line: Any) -> None:
        line.reset()
        self._pool.release(line.connection)  # type: ignore[union-attr]

    def close(self) -> None:
        """Give the idle connections back to the pool."""
        while self._idle:
            self._pool.release(self._idle.pop().connection)  # type: ignore[union-attr]

    def _forget_after_fork(self) -> None:
        # The parent's sockets: a child must neither use nor close them (the pool resets too).
        self._idle = deque()


def _after_fork_in_child() -> None:
    for caller in list(_CALLERS):
        caller._forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
