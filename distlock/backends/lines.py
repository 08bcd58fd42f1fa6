"""Connections this package drives itself: whole commands written, whole replies read.

redis-py's ``Connection`` wraps every send and read in Python (health checks, error
mapping, event hooks) that costs more than a loopback round trip, and CPython polls before
each send and receive on a socket with a timeout. distlock's hot paths (DirectCalls on one
server, the Redlock fan-out over several) let redis-py connect (AUTH, HELLO, SELECT, TLS,
every client option) and then use a *line*:

* :class:`SocketLine` writes commands packed by hiredis to the socket itself and reads the
  replies with a hiredis reader of its own (when hiredis is installed, replies are RESP2 and
  text is UTF-8, as :func:`line_class` checks);
* :class:`ConnectionLine` does the same through redis-py's ``Connection`` otherwise.

Both write only whole commands and read only whole replies, so a connection handed back to
redis-py's pool is in step. Any failure mid-command resets the line (the caller must not
reuse its socket).
"""
from __future__ import annotations

import codecs
import os
import select
import socket
import time
from collections.abc import Sequence
from typing import Any

from redis.exceptions import ConnectionError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

try:
    import hiredis
except ImportError:  # SocketLine needs it; without it, ConnectionLine does the I/O
    hiredis = None

try:
    from redis._parsers import BaseParser
except ImportError:  # pragma: no cover - a redis-py without it takes ConnectionLine
    BaseParser = None

from .detached import detached

# Bytes read from the socket at a time: every reply on these paths is far smaller.
READ_SIZE = 16384


def line_class(pool: Any) -> type[SocketLine] | type[ConnectionLine]:
    """Return the kind of line that can drive ``pool``'s connections."""
    if hiredis is None or BaseParser is None:
        return ConnectionLine
    options = pool.connection_kwargs
    if str(options.get("protocol") or 2) != "2":
        return ConnectionLine  # RESP3 may push messages between replies
    encoding = options.get("encoding", "utf-8")
    if codecs.lookup(encoding).name != "utf-8" or options.get("encoding_errors",
                                                               "strict") != "strict":
        return ConnectionLine  # hiredis packs text as UTF-8, as redis-py would only then
    return SocketLine


class _Line:
    """What both kinds of line share: one command sent, and its reply read."""

    connection: Any

    def pack_command(self, args: Sequence[Any]) -> bytes:
        raise NotImplementedError

    def write(self, packed: bytes) -> None:
        raise NotImplementedError

    def read_reply(self, ready: bool = False) -> Any:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    def call(self, args: Sequence[Any]) -> Any:
        """Send one command; return its reply, raise an error reply.

        An idle connection can be reset (server restart, idle timeout, a middlebox) just
        after its check. A write that failed with a connection error delivered no whole
        command (the server runs only complete ones, and the peer had already dropped the
        connection), so it is sent once more on a new connection: that cannot run it twice.
        A write that timed out is not retried: part of it may have reached a live server.
        """
        packed = self.pack_command(args)
        try:
            self.write(packed)
        except ConnectionError:
            self.reset()
            self.write(packed)
        return _raised(self.read_reply())


class ConnectionLine(_Line):
    """A connection whose commands go through redis-py's ``Connection``."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def pack_command(self, args: Sequence[Any]) -> bytes:
        return b"".join(self.connection.pack_command(*args))

    def pack(self, commands: Sequence[Sequence[Any]]) -> bytes:
        return b"".join(self.connection.pack_commands(commands))

    def write(self, packed: bytes) -> None:
        self.connection.send_packed_command([packed], check_health=False)

    def read_reply(self, ready: bool = False) -> Any:
        try:
            return self.connection.read_response()
        except ResponseError as error:  # the connection is still in step
            return detached(error)  # kept as a value (a fan-out's list of replies)

    def fileno(self) -> int:
        return self.connection._sock.fileno()  # redis-py keeps no public handle on it

    def has_data(self) -> bool:
        return bool(self.connection.can_read())

    def check_health(self) -> None:
        """redis-py's health check: a PING when ``health_check_interval`` has passed."""
        self.connection.check_health()

    def reset(self) -> None:
        self.connection.disconnect()


class SocketLine(_Line):
    """A connection whose socket this module writes and reads itself."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.buffer = bytearray(READ_SIZE)
        # The socket the reader and poller below belong to: redis-py replaces the socket
        # when it reconnects, and a pool may hand the connection out already connected.
        self.sock: Any = None
        self.reader: Any = None
        self.poller: Any = None
        self.used = time.monotonic()  # when the last reply was read

    def pack_command(self, args: Sequence[Any]) -> bytes:
        return hiredis.pack_command(tuple(args))

    def pack(self, commands: Sequence[Sequence[Any]]) -> bytes:
        return b"".join(map(self.pack_command, commands))

    def write(self, packed: bytes) -> None:
        try:
            _write(self._socket(), packed)
        except TimeoutError:  # the socket's own timeout: part may have reached the server
            raise RedisTimeoutError("Timeout writing to socket") from None
        except OSError as exc:
            raise ConnectionError(f"Error while writing to socket: {exc}") from exc

    def read_reply(self, ready: bool = False) -> Any:
        """Return the next reply; an error reply as its redis-py exception (ResponseError:
        the connection is in step), raised if it means the connection is not (LOADING...).
        ``ready``: the socket was just reported readable, so read without waiting first."""
        reader, buffer = self.reader, self.buffer
        reply = reader.gets()
        while reply is False:
            count = self._receive(buffer, ready)
            if not count:
                raise ConnectionError("Connection closed by server.")
            reader.feed(buffer, 0, count)
            reply = reader.gets()
            ready = False
        if isinstance(reply, hiredis.ReplyError):
            error = BaseParser.parse_error(str(reply))
            if not isinstance(error, ResponseError):
                try:
                    raise error
                finally:
                    del error  # no cycle through this frame (see detached.py)
            reply = error
        self.used = time.monotonic()
        return reply

    def _receive(self, buffer: bytearray, ready: bool) -> int:
        sock = self.sock
        try:
            if ready and type(sock) is socket.socket:
                try:  # one system call: the descriptor is non-blocking
                    return os.readv(sock.fileno(), [buffer])
                except BlockingIOError:
                    pass
            return sock.recv_into(buffer)  # waits, at most the socket's timeout
        except TimeoutError:
            raise RedisTimeoutError("Timeout reading from socket") from None
        except OSError as exc:
            raise ConnectionError(f"Error while reading from socket: {exc}") from exc

    def _socket(self) -> Any:
        sock = self.connection._sock
        if sock is None:
            self.connection.connect()  # redis-py's handshake: AUTH, HELLO, SELECT, ...
            sock = self.connection._sock
        if sock is not self.sock:
            self.sock, self.reader, self.poller = sock, hiredis.Reader(), select.poll()
            self.poller.register(sock, select.POLLIN)
        return sock

    def fileno(self) -> int:
        return self._socket().fileno()

    def has_data(self) -> bool:
        """Return True if data (or the server's close) waits on the idle connection."""
        sock = self.connection._sock
        if sock is None:
            return False  # connects when the command is sent
        if sock is not self.sock:
            return bool(self.connection.can_read())  # a socket redis-py opened: its check
        # A TLS socket may hold decrypted bytes that poll() cannot see.
        pending = getattr(sock, "pending", None)
        return bool(self.poller.poll(0)) or bool(pending and pending())

    def check_health(self) -> None:
        """redis-py's health check (a PING) on a line idle for longer than the client's
        ``health_check_interval``: a connection a NAT or firewall dropped without a word is
        found, and replaced, before a command is lost on it."""
        interval = self.connection.health_check_interval
        if interval and time.monotonic() - self.used > interval:
            self.connection.check_health()  # reads the PONG itself: our reader is empty

    def reset(self) -> None:
        self.connection.disconnect()
        self.sock = self.reader = self.poller = None


def _raised(reply: Any) -> Any:
    if isinstance(reply, ResponseError):
        try:
            raise reply
        finally:
            del reply  # no cycle through this frame (see detached.py)
    return reply


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
