"""Ask several Redis servers at once, and stop waiting as soon as the answer is decided.

Redlock asks every node the same question. Asking them one after another would add up their
round trips, and a thread per node would cost more than the round trips themselves. So the
sync fan-out takes one connection from each node's pool (``get_connection``), sends the
commands on each (``send_packed_command``), and only then reads the replies
(``read_response``), checking which node has answered with ``can_read``: redis-py's public
connection API, no socket of our own. Every connection goes back to its pool (``release``)
before the fan-out returns. Once the caller's ``decided`` says the outcome cannot change (a
majority granted, or too many refused), stragglers get a short grace and are then abandoned
(disconnected, so that their late reply can never be read as another's): a paused or
partitioned node costs that grace, not a socket timeout. The async twin does the same with
asyncio tasks over each node's async client.

A result is the list of the node's replies (an error reply in it is a ResponseError
object), or the exception that kept the node from answering.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis

from .detached import detached

Results = list[Any]
Decided = Callable[[Results], bool]
# While no node has answered, wait on one of them at most this long (seconds) before looking
# at the others again: the most a reply can wait unseen. It starts at FIRST_SLICE and doubles.
FIRST_SLICE = 0.0002
MAX_SLICE = 0.002


class NoAnswer(redis.exceptions.TimeoutError):
    """The node did not answer in time (or, after the outcome was decided, within the grace)."""


class Skipped(redis.exceptions.ConnectionError):
    """The node was not asked: it failed moments ago and is left out for a while."""


# Per pool class: whether its get_connection needs a command name. Reading a signature costs
# more than a round trip on loopback, so it is read once per class, not once per call.
_TAKES_COMMAND_NAME: dict[type, bool] = {}


def _takes_command_name(pool: Any) -> bool:
    """redis-py before 5.1 requires get_connection(command_name); later ones deprecate it."""
    takes = _TAKES_COMMAND_NAME.get(type(pool))
    if takes is None:
        parameter = inspect.signature(pool.get_connection).parameters.get("command_name")
        takes = parameter is not None and parameter.default is inspect.Parameter.empty
        _TAKES_COMMAND_NAME[type(pool)] = takes
    return takes


def checkout(pool: Any) -> Any:
    """Take a connected connection from ``pool`` (give it back with ``pool.release``)."""
    if _takes_command_name(pool):
        return pool.get_connection("EVALSHA")
    return pool.get_connection()


class _Asked:
    """One node's connection while its replies are awaited."""

    def __init__(self, position: int, pool: Any, connection: Any) -> None:
        self.position, self.pool, self.connection = position, pool, connection

    def give_back(self, in_step: bool) -> None:
        if not in_step:
            self.connection.disconnect()  # a reply may still come: never read it as another's
        self.pool.release(self.connection)


def fan_out(
    pools: Sequence[Any | None],
    commands: Sequence[Sequence[Any]],
    *,
    timeout: float | None,
    decided: Decided,
    grace: float,
) -> Results:
    """Send ``commands`` (pipelined) to every server whose pool is not None; return, per
    server, its replies or the exception that stands for them (Skipped without a pool)."""
    results: Results = [None] * len(pools)
    pending: list[_Asked] = []
    packed: dict[tuple[Any, ...], Any] = {}
    try:
        for position, pool in enumerate(pools):
            if pool is None:
                results[position] = Skipped("left out after a recent failure")
                continue
            asked = _send(position, pool, commands, packed, results)
            if asked is not None:
                pending.append(asked)
        _gather(pending, results, len(commands), timeout, decided, grace)
    finally:
        for asked in pending:  # only if interrupted (KeyboardInterrupt...)
            asked.give_back(in_step=False)
    return results


def _send(
    position: int,
    pool: Any,
    commands: Sequence[Sequence[Any]],
    packed: dict[tuple[Any, ...], Any],
    results: Results,
) -> _Asked | None:
    try:
        connection = checkout(pool)
    except (redis.RedisError, OSError) as exc:
        results[position] = _failure(exc)
        return None
    asked = _Asked(position, pool, connection)
    try:
        connection.send_packed_command(_packed(connection, commands, packed), check_health=False)
    except BaseException as exc:
        asked.give_back(in_step=False)
        if not isinstance(exc, (redis.RedisError, OSError)):
            raise
        results[position] = _failure(exc)
        return None
    return asked


def _packed(
    connection: Any, commands: Sequence[Sequence[Any]], packed: dict[tuple[Any, ...], Any]
) -> Any:
    """The bytes of ``commands`` for ``connection``: packed once per fan-out for every node
    that encodes alike (every node of a Redlock has the same options), not once per node."""
    encoder = connection.encoder
    key = (type(connection), encoder.encoding, encoder.encoding_errors)
    chunks = packed.get(key)
    if chunks is None:
        chunks = packed[key] = connection.pack_commands(commands)
    return chunks


def _gather(
    pending: list[_Asked],
    results: Results,
    replies: int,
    timeout: float | None,
    decided: Decided,
    grace: float,
) -> None:
    deadline = time.monotonic() + timeout if timeout is not None else float("inf")
    graced = False
    slice_ = FIRST_SLICE
    while pending:
        if not graced and decided(results):
            graced = True
            deadline = min(deadline, time.monotonic() + grace)
        answered = [asked for asked in pending if _ready(asked, 0)]
        if not answered:
            wait = deadline - time.monotonic()
            if wait <= 0:
                break
            # Wait on the first node for a moment; a reply of another is seen one slice late
            # at most.
            if not _ready(pending[0], min(wait, slice_)):
                slice_ = min(slice_ * 2, MAX_SLICE)
                continue
            answered = [pending[0]]
        for asked in answered:
            pending.remove(asked)
            results[asked.position] = _read(asked, replies)
    for asked in pending:
        results[asked.position] = NoAnswer(
            "no answer after the outcome was decided" if graced else "no answer in time"
        )
    while pending:
        pending.pop().give_back(in_step=False)


def _ready(asked: _Asked, timeout: float) -> bool:
    """Return True if the node's reply (or its error) can be read now."""
    try:
        return bool(asked.connection.can_read(timeout=timeout))
    except (redis.RedisError, OSError):
        return True  # read_response() raises it


def _read(asked: _Asked, replies: int) -> list[Any] | Exception:
    """Read the ``replies`` of a node reported readable; an error reply is kept as its
    ResponseError in the list."""
    answers: list[Any] = []
    try:
        for _ in range(replies):
            try:
                answers.append(asked.connection.read_response())
            except redis.exceptions.ResponseError as error:  # the connection is in step
                answers.append(detached(error))
    except (redis.RedisError, OSError) as exc:
        asked.give_back(in_step=False)
        return _failure(exc)
    except BaseException:
        asked.give_back(in_step=False)
        raise
    asked.give_back(in_step=True)
    return answers


def _failure(exc: BaseException) -> Exception:
    """A node's failure, kept among the results: as a RedisError, detached (see detached.py)."""
    if isinstance(exc, redis.RedisError):
        return detached(exc)
    return redis.ConnectionError(f"{type(exc).__name__}: {exc}")


async def afan_out(
    calls: Sequence[Callable[[], Awaitable[Any]] | None],
    *,
    timeout: float | None,
    decided: Decided,
    grace: float,
) -> Results:
    """Async twin of fan_out: run each call (one per server, None to skip) as a task; return
    each one's result (the list of replies) or exception, cancelling stragglers."""
    results: Results = [
        None if call else Skipped("left out after a recent failure") for call in calls
    ]
    tasks = {
        asyncio.ensure_future(call()): position
        for position, call in enumerate(calls)
        if call is not None
    }
    pending = set(tasks)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout if timeout is not None else None
    graced = False
    while pending:
        if not graced and decided(results):
            graced = True
            deadline = (
                loop.time() + grace if deadline is None else min(deadline, loop.time() + grace)
            )
        wait = None if deadline is None else max(deadline - loop.time(), 0)
        done, pending = await asyncio.wait(
            pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED
        )
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
