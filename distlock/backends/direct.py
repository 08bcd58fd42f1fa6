"""Call Redis (the Lua scripts by SHA, BLPOP) with as little Python per call as possible.

``redis.Redis.execute_command`` serves every command and feature: retries, observability
hooks, event dispatch, client-side caching, connection pool bookkeeping. On a lock's hot path
that costs more than the round trip itself, and so does the per-call Python of a redis-py
``Connection``. For a plain ``redis.Redis`` client (standalone or Sentinel-managed),
:class:`DirectCalls` takes connections from the client's pool (which connects them, with
AUTH, SELECT, TLS and every other option) and then drives each one itself: it packs the
command with hiredis, writes it to the socket and reads the one reply with a hiredis reader
of its own. It keeps the connections it used checked out of the pool, one per concurrent
caller, and checks each one before reuse as the pool would.

Without hiredis, or with options the fast path does not speak (RESP3, a text encoding other
than UTF-8), it sends through the redis-py ``Connection`` instead; any other client (Redis
Cluster, a single-connection client) goes through the client's own methods.
"""
from __future__ import annotations

import codecs
import hashlib
import os
import select
import socket
import weakref
from collections import deque
from typing import Any

import redis
from redis.exceptions import ConnectionError, NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

try:
    import hiredis
except ImportError:  # the fast path needs it; without it, redis-py's Connection does the I/O
    hiredis = None

try:
    from redis._parsers import BaseParser
except ImportError:  # pragma: no cover - a redis-py without it takes the Connection path
    BaseParser = None

_CALLERS: weakref.WeakSet[DirectCalls] = weakref.WeakSet()
# Bytes read from the socket at a time: every reply on this path is far smaller.
READ_SIZE = 16384


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
        line = _SocketLine if direct and _speaks_plain_resp2(pool) else _ConnectionLine
        self._line = line
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


def _speaks_plain_resp2(pool: Any) -> bool:
    """Return True if ``pool``'s connections can be driven by _SocketLine: hiredis is there,
    replies are RESP2 (no pushes between replies) and text is sent as UTF-8, as redis-py
    would send it."""
    if hiredis is None or BaseParser is None:
        return False
    options = pool.connection_kwargs
    if str(options.get("protocol") or 2) != "2":
        return False
    encoding = options.get("encoding", "utf-8")
    return (codecs.lookup(encoding).name == "utf-8"
            and options.get("encoding_errors", "strict") == "strict")


class _ConnectionLine:
    """A pooled connection, its commands sent and read through redis-py's Connection."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def call(self, args: tuple[Any, ...]) -> Any:
        _send(self.connection, self.connection.pack_command(*args))
        return self.connection.read_response()

    def has_data(self) -> bool:
        return bool(self.connection.can_read())

    def reset(self) -> None:
        self.connection.disconnect()


class _SocketLine:
    """A pooled connection whose socket this module writes and reads itself.

    redis-py opened the socket (and reopens it after ``reset``); only whole commands are
    written and only whole replies read, so when the connection goes back to the pool it is
    in step, with nothing left in either reader.
    """

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.buffer = bytearray(READ_SIZE)
        # The socket the reader and poller below belong to: redis-py replaces the socket
        # when it reconnects, and the pool may hand this connection out already connected.
        self.sock: Any = None
        self.reader: Any = None
        self.poller: Any = None

    def call(self, args: tuple[Any, ...]) -> Any:
        packed = hiredis.pack_command(args)
        sock = self._socket()
        try:
            _write(sock, packed)
        except TimeoutError:  # the socket's own timeout
            raise RedisTimeoutError("Timeout writing to socket") from None
        except OSError:
            # Reset after the idle check: no whole command got through, so one more try on
            # a new connection cannot run it twice (see _send).
            self.reset()
            sock = self._socket()
            _write_or_raise(sock, packed)
        reply = self._read(sock)
        if isinstance(reply, hiredis.ReplyError):
            raise BaseParser.parse_error(str(reply))
        return reply

    def _socket(self) -> Any:
        sock = self.connection._sock
        if sock is None:
            self.connection.connect()  # redis-py's handshake: AUTH, HELLO, SELECT, ...
            sock = self.connection._sock
        if sock is not self.sock:
            self.sock, self.reader, self.poller = sock, hiredis.Reader(), select.poll()
            self.poller.register(sock, select.POLLIN)
        return sock

    def _read(self, sock: Any) -> Any:
        reader, buffer = self.reader, self.buffer
        reply = reader.gets()
        while reply is False:
            try:
                count = sock.recv_into(buffer)
            except TimeoutError:  # the socket's own timeout
                raise RedisTimeoutError("Timeout reading from socket") from None
            except OSError as exc:
                raise ConnectionError(f"Error while reading from socket: {exc}") from exc
            if not count:
                raise ConnectionError("Connection closed by server.")
            reader.feed(buffer, 0, count)
            reply = reader.gets()
        return reply

    def has_data(self) -> bool:
        sock = self.connection._sock
        if sock is None:
            return False  # connects when the command is sent
        if sock is not self.sock:
            return bool(self.connection.can_read())  # a socket redis-py opened: its check
        # A TLS socket may hold decrypted bytes that poll() cannot see.
        pending = getattr(sock, "pending", None)
        return bool(self.poller.poll(0)) or bool(pending and pending())

    def reset(self) -> None:
        self.connection.disconnect()
        self.sock = self.reader = self.poller = None


def _write(sock: Any, packed: bytes) -> None:
    """Write ``packed`` to ``sock``, waiting at most the socket's timeout.

    A socket with a timeout polls before every send; a command fits the send buffer of an
    idle connection, so it is first written straight to the (non-blocking) descriptor, one
    system call instead of two. TLS sockets must encrypt, and always take sendall().
    """
    if type(sock) is socket.socket:
        try:
            written = os.write(sock.fileno(), packed)
        except BlockingIOError:
            written = 0
        if written == len(packed):
            return
        packed = packed[written:]
    sock.sendall(packed)


def _write_or_raise(sock: Any, packed: bytes) -> None:
    try:
        _write(sock, packed)
    except TimeoutError:  # the socket's own timeout
        raise RedisTimeoutError("Timeout writing to socket") from None
    except OSError as exc:
        raise ConnectionError(f"Error while writing to socket: {exc}") from exc


def _send(connection: Any, packed: Any) -> None:
    """Send a command, once more on a new connection if the socket was found reset.

    An idle connection can be reset (server restart, idle timeout, a middlebox) just after
    the check in ``_checkout``. A write that fails with a connection error delivered no whole
    command (the server executes only complete commands, and the peer had already dropped
    the connection), so sending it again cannot run it twice. A write that timed out is not
    retried: part of it may have reached a live server.
    """
    try:
        connection.send_packed_command(packed)
    except ConnectionError:  # redis-py has disconnected it: the next send reconnects
        connection.send_packed_command(packed)


def _after_fork_in_child() -> None:
    for caller in list(_CALLERS):
        caller._forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
