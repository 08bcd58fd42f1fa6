"""Ask several Redis servers at once, and stop waiting as soon as the answer is decided.

Redlock asks every node the same question. Asking them one after another would add up
their round trips, and a thread per node would cost more than the round trips themselves
(and a thread switch per reply). So the sync fan-out sends every request first, from the
calling thread, then reads each reply as its socket becomes readable (one ``poll``). Once
the caller's ``decided`` says the outcome cannot change (a majority granted, or too many
refused), stragglers get a short grace and are then abandoned: a paused or partitioned node
costs that grace, not a socket timeout. The async twin does the same with asyncio tasks.

A result is the list of the node's replies (an error reply in it is a ResponseError
object), or the exception that kept the node from answering.
"""
from __future__ import annotations

import asyncio
import os
import select
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis

from .detached import detached
from .lines import line_class

Results = list[Any]
# A connection idle for longer than this (seconds) is checked before reuse: the server may
# have closed it (a restart, a client timeout). One in use moments ago is not: a check costs
# a system call per server, and a connection that fails anyway only fails that one call.
RECHECK_AFTER = 1.0
Decided = Callable[[Results], bool]


class ConnectionShelf:
    """Idle connections to one server, each used by one fan-out at a time.

    Fan-outs bypass the client's pool (whose checkout costs more than a round trip on
    loopback) but use its connection class and options: password, TLS, database, timeouts.
    A new connection is made (connected and greeted) within ``connect_timeout`` seconds, at
    most the configured timeouts: connecting happens before any request is sent, one server
    after the other, so a server that accepts connections but never answers must not hold
    up the others for a whole socket timeout.
    """

    def __init__(self, pool: redis.ConnectionPool, connect_timeout: float) -> None:
        self._pool = pool
        self._line = line_class(pool)
        # (line, when it was put back); list.pop() and list.append() are atomic
        self._idle: list[tuple[Any, float]] = []
        options = pool.connection_kwargs
        self._timeout = options.get("socket_timeout")
        self._connect_options = {**options, **{
            name: connect_timeout if options.get(name) is None else min(options[name],
                                                                        connect_timeout)
            for name in ("socket_timeout", "socket_connect_timeout")
        }}
        _shelves.add(self)

    def take(self) -> Any:
        """Return a line (distlock.backends.lines) on a connected connection; raise
        RedisError or OSError if none can be made."""
        while self._idle:
            try:
                line, since = self._idle.pop()
            except IndexError:  # another thread took the last one
                break
            if time.monotonic() - since < RECHECK_AFTER:
                return line
            try:
                if not line.has_data():  # nothing pending, not closed by the server
                    line.check_health()
                    return line
            except (redis.RedisError, OSError):
                pass
            line.reset()  # the server restarted, or closed it: make a new one
        connection = self._pool.connection_class(**self._connect_options)
        connection.connect()
        connection.socket_timeout = self._timeout  # from now on, the configured timeout
        connection._sock.settimeout(self._timeout)
        return self._line(connection)

    def give_back(self, line: Any) -> None:
        self._idle.append((line, time.monotonic()))

    def close(self) -> None:
        while self._idle:
            self._idle.pop()[0].reset()

    def forget(self) -> None:
        """Drop the connections without closing them (they belong to the parent of a fork)."""
        self._idle = []


_shelves: weakref.WeakSet[ConnectionShelf] = weakref.WeakSet()
os.register_at_fork(after_in_child=lambda: [shelf.forget() for shelf in list(_shelves)])


class NoAnswer(redis.exceptions.TimeoutError):
    """The node did not answer in time (or, after the outcome was decided, within the grace)."""


class Skipped(redis.exceptions.ConnectionError):
    """The node was not asked: it failed moments ago and is left out for a while."""


def fan_out(shelves: Sequence[ConnectionShelf | None], commands: Sequence[Sequence[Any]], *,
            timeout: float | None, decided: Decided, grace: float) -> Results:
    """Send ``commands`` (pipelined) to every server whose shelf is not None; return, per
    server, its replies or the exception that stands for them (Skipped without a shelf)."""
    results: Results = [None] * len(shelves)
    pending: dict[int, tuple[int, ConnectionShelf, Any]] = {}
    packed: dict[type, bytes] = {}  # by kind of line: each packs the same commands once
    for position, shelf in enumerate(shelves):
        if shelf is None:
            results[position] = Skipped("left out after a recent failure")
            continue
        line = None
        try:
            line = shelf.take()
            kind = type(line)
            if kind not in packed:
                packed[kind] = line.pack(commands)
            line.write(packed[kind])
            descriptor = line.fileno()
        except (redis.RedisError, OSError) as exc:
            if line is not None:
                line.reset()
            results[position] = _failure(exc)
            continue
        pending[descriptor] = (position, shelf, line)
    _gather(pending, results, len(commands), timeout, decided, grace)
    return results


def _gather(pending: dict[int, tuple[int, ConnectionShelf, Any]], results: Results,
            replies: int, timeout: float | None, decided: Decided, grace: float) -> None:
    poller = select.poll()
    for descriptor in pending:
        poller.register(descriptor, select.POLLIN)
    deadline = time.monotonic() + timeout if timeout is not None else float("inf")
    graced = False
    while pending:
        if not graced and decided(results):
            graced = True
            deadline = min(deadline, time.monotonic() + grace)
        wait = deadline - time.monotonic()
        events = poller.poll(None if wait == float("inf") else max(wait, 0) * 1000)
        if not events and wait <= 0:
            break
        for descriptor, _ in events:
            position, shelf, line = pending.pop(descriptor)
            poller.unregister(descriptor)
            results[position] = _read(shelf, line, replies)
    for position, _, line in pending.values():
        line.reset()  # its reply may still come: never let it be read as another's
        results[position] = NoAnswer(
            "no answer after the outcome was decided" if graced else "no answer in time"
        )


def _read(shelf: ConnectionShelf, line: Any, replies: int) -> list[Any] | Exception:
    """Read the ``replies`` of a line reported readable; an error reply is kept as its
    ResponseError in the list."""
    answers = []
    try:
        for _ in range(replies):
            answers.append(line.read_reply(ready=True))
    except (redis.RedisError, OSError) as exc:
        line.reset()
        return _failure(exc)
    shelf.give_back(line)
    return answers


def _failure(exc: Exception) -> Exception:
    """A node's failure, kept among the results: as a RedisError, detached (see detached.py)."""
    if isinstance(exc, redis.RedisError):
        return detached(exc)
    return redis.ConnectionError(f"{type(exc).__name__}: {exc}")


async def afan_out(calls: Sequence[Callable[[], Awaitable[Any]] | None], *,
                   timeout: float | None, decided: Decided, grace: float) -> Results:
    """Async twin of fan_out: run each call (one per server, None to skip) as a task; return
    each one's result (the list of replies) or exception, cancelling stragglers."""
    results: Results = [None if call else Skipped("left out after a recent failure")
                        for call in calls]
    tasks = {asyncio.ensure_future(call()): position
             for position, call in enumerate(calls) if call is not None}
    pending = set(tasks)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout if timeout is not None else None
    graced = False
    while pending:
        if not graced and decided(results):
            graced = True
            deadline = loop.time() + grace if deadline is None else min(deadline,
                                                                         loop.time() + grace)
        wait = None if deadline is None else max(deadline - loop.time(), 0)
        done, pending = await asyncio.wait(pending, timeout=wait,
                                           return_when=asyncio.FIRST_COMPLETED)
        if not done:
            break
        for task in done:
            error = task.exception()
            results[tasks[task]] = detached(error) if error is not None else task.result()
    for task in pending:
        task.cancel()
        results[tasks[task]] = NoAnswer("no answer in time")
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
    return results
