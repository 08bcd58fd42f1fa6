"""Operations as steps: each operation is written once, and runs on a sync or an async client.

An operation (distlock.backends.redis_ops.holds, .semaphores, .listing) is a generator. It
yields the steps it needs the server to take (run a script, or block on a list and then run
one), receives each step's reply at its ``yield`` (or has the step's BackendUnavailable
raised there), and returns its outcome. :func:`drive` runs it with a sync executor and
:func:`adrive` with an async one: what an operation sends, in which order, and what it makes
of the replies is the same code both ways, so the sync and async versions cannot drift.
How each step runs, both ways, is in distlock.backends.redis_ops.runner.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

from ...exceptions import BackendUnavailable, RenewalLimitReached
from ...keys import KeyLayout
from .scripts import Script

T = TypeVar("T")
# An operation: yields steps, is sent their replies, returns its outcome.
Steps = Generator[Any, Any, T]
# (Steps are slotted dataclasses: one is built per call on the hot path, and a NamedTuple
# built with a keyword argument costs twice as much.)


@dataclass(slots=True)
class Eval:
    """Run one script (EVALSHA; EVAL when the server forgot it). Reply: the script's."""

    script: Script
    # str, or bytes already encoded (the hot calls: redis-py then leaves them as they are)
    keys: Sequence[Any]
    args: list[Any]
    # Running it twice does what running it once does: after a dropped connection it is
    # sent once more, on a fresh one (see Runner.execute).
    idempotent: bool = False

    def command(self, *, by_source: bool = False) -> tuple[Any, ...]:
        """Return the command as redis-py packs it (EVAL with the source if ``by_source``)."""
        if by_source:
            return ("EVAL", self.script.source, len(self.keys), *self.keys, *self.args)
        # The digest and the key count encoded (ASCII), as Runner.eval sends them: redis-py
        # passes bytes on as they are (a waiter's pipelined acquire, Redlock's fan-out).
        return ("EVALSHA", self.script.encoded_sha, b"%d" % len(self.keys), *self.keys, *self.args)


@dataclass(slots=True)
class EvalMany:
    """Run many scripts pipelined, one round trip per server. Reply: the list of their
    replies, in order (an error reply raises)."""

    calls: list[Eval]
    # Only reads (or drops of ended index entries): on a Cluster, routed again after a node
    # failed (see Runner.eval_many).
    reads: bool = False
    idempotent: ClassVar[bool] = False  # the outcome of a failed call is for the operation


@dataclass(slots=True)
class Confirmed:
    """Run one script, then WAIT until the replicas confirmed it, on the same connection in
    one round trip (OPTIONS['WAIT_REPLICAS']). Reply: (the script's reply, how many
    replicas confirmed)."""

    call: Eval
    idempotent: ClassVar[bool] = False


@dataclass(slots=True)
class Pop:
    """Block up to ``timeout`` seconds on a list (BLPOP). Reply: the element popped, as a
    str; None when none came in time, or when the reply came later than the socket timeout
    (a loaded server or client: that is "no signal", not an outage)."""

    key: str | bytes
    timeout: float
    idempotent: ClassVar[bool] = False


@dataclass(slots=True)
class PopThenEval:
    """Block up to ``timeout`` seconds on list ``wake`` (BLPOP), then run ``call``, and WAIT
    for replicas if ``confirm``: pipelined, in one round trip. Reply: the list of replies,
    errors among them as values; None when the reply came later than the socket timeout (the
    script may have run)."""

    wake: str | bytes
    timeout: float
    call: Eval
    confirm: bool = False
    idempotent: ClassVar[bool] = False


class Scope(Protocol):
    """What an operation reads of the backend it runs for."""

    alias: str
    layout: KeyLayout
    max_renewals: int | None
    wait_replicas: int

    def renewal_limit_reached(self, name: str) -> RenewalLimitReached: ...

    def unconfirmed(self, name: str, confirmed: int) -> BackendUnavailable: ...


# unasync: the async source of the sync code after it
async def adrive(steps: Steps[T], execute: Callable[[Any], Awaitable[Any]]) -> T:
    """Run the operation ``steps`` with ``execute`` (a step -> its reply); return its outcome.

    A step's BackendUnavailable is raised in the operation, where it yielded the step.
    """
    # One loop for both colours, generated (no helper per step: a call more on every step of
    # the hot path); in adrive, ``execute`` returns an awaitable of the step's reply.
    try:
        step = steps.send(None)
        while True:
            try:
                reply = await execute(step)
            except BackendUnavailable as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(reply)
    except StopIteration as done:
        return done.value
    except BaseException:
        reply = None  # a reply may hold errors: no cycle through this frame (see detached.py)
        raise


# Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
def drive(steps: Steps[T], execute: Callable[[Any], Any]) -> T:
    """Run the operation ``steps`` with ``execute`` (a step -> its reply); return its outcome.

    A step's BackendUnavailable is raised in the operation, where it yielded the step.
    """
    # One loop for both colours, generated (no helper per step: a call more on every step of
    # the hot path); in adrive, ``execute`` returns an awaitable of the step's reply.
    try:
        step = steps.send(None)
        while True:
            try:
                reply = execute(step)
            except BackendUnavailable as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(reply)
    except StopIteration as done:
        return done.value
    except BaseException:
        reply = None  # a reply may hold errors: no cycle through this frame (see detached.py)
        raise


# unasync: end


def text(value: Any) -> str:
    """Return a reply's string (bytes decoded: a client may or may not decode responses)."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def flag(value: bool) -> str:
    """Return a yes/no argument as the scripts read it: '1' or '0'."""
    return "1" if value else "0"


# flag(), encoded, for the hot calls: ENCODED_FLAG[value].
ENCODED_FLAG = (b"0", b"1")


def block_seconds(timeout: float) -> float:
    """BLPOP's timeout: seconds with millisecond resolution; 0 would mean "forever"."""
    return max(round(timeout, 3), 0.001)
