"""Semaphore operations on one Redis server (RedisBackend, DjangoRedisBackend), each read top
to bottom, on the conventions of the lock operations (.holds): the keys come from the
alias's KeyLayout, every script takes all seven of them (semaphore_acquire.lua says what
each holds), and a waiter's wake-up and its next acquire are one round trip."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from ...info import LockInfo, SemaphoreInfo
from ...keys import KeyLayout, validate_name
from ..base import HANDOFF_GRACE_MS, Attempt
from ..operations import Request
from .scripts import load
from .steps import Eval, EvalMany, PopThenEval, Scope, Steps, flag, text

# The scripts this module runs. The list has the shape of .holds's (and .shared's, .grants'),
# and stays: each module names the scripts it runs where its reader looks (scripts.py).
ACQUIRE = load("semaphore_acquire")
RELEASE = load("semaphore_release")
EXTEND = load("semaphore_extend")
LEAVE = load("semaphore_leave")
INSPECT = load("semaphore_inspect")
HELD_NAMES = load("semaphore_held_names")


# --- acquire, wait, leave -----------------------------------------------------------------
def try_acquire(scope: Scope, request: Request) -> Steps[Attempt]:
    """Take a permit of ``request.name`` for ``request.token``, or queue it for
    ``request.patience_ms``."""
    return attempt_from((yield acquire_call(scope.layout, request)))


def acquire_call(layout: KeyLayout, request: Request) -> Eval:
    # Idempotent: a token already holding a permit is told so, and keeps its place.
    return Eval(
        ACQUIRE,
        list(layout.semaphore_keys_for(request.name)),
        [
            request.token,
            request.ttl_ms,
            request.meta,
            request.name,
            request.limit,
            request.patience_ms,
            HANDOFF_GRACE_MS,
        ],
        idempotent=True,
    )


def acquire_when_free(scope: Scope, request: Request, timeout: float) -> Steps[Attempt]:
    """Block until a permit is reserved for ``request.token`` (or ``timeout`` seconds pass)
    and try to take it, in one round trip: the acquire script runs as soon as the BLPOP on
    the waiter's own list returns."""
    name, token = request.name, request.token
    call = acquire_call(scope.layout, request)
    wake = scope.layout.semaphore_keys_for(name).signal_prefix + token
    sent = time.monotonic()
    replies = yield PopThenEval(wake, timeout, call)
    if replies is None:  # a late reply: the acquire may have run (see holds.acquire_when_free)
        yield release_call(scope.layout, name, token)
        return Attempt(False)
    if any(isinstance(reply, Exception) for reply in replies):
        del replies  # the script was forgotten, or the slot moved: ask the usual way
        attempt = attempt_from((yield call))
    else:
        attempt = attempt_from(replies[1])
    return attempt._replace(sent=sent)


def attempt_from(reply: list[Any]) -> Attempt:
    """Return the Attempt in semaphore_acquire.lua's reply."""
    if int(reply[0]) == 1:
        return Attempt(True, fencing_token=int(reply[1]), acquired_ms=int(reply[2]))
    return Attempt(False, holder_pttl_ms=int(reply[1]))


def leave(scope: Scope, name: str, token: str) -> Steps[None]:
    """Stop waiting (a permit reserved for ``token`` meanwhile passes on)."""
    yield Eval(
        LEAVE,
        list(scope.layout.semaphore_keys_for(name)),
        [token, HANDOFF_GRACE_MS, name],
        idempotent=True,
    )


# --- release, extend ----------------------------------------------------------------------
def release(scope: Scope, name: str, token: str) -> Steps[int]:
    """Give back ``token``'s permit; return 1 if it held one, else 0."""
    return int((yield release_call(scope.layout, name, token)))


def release_call(layout: KeyLayout, name: str, token: str) -> Eval:
    return Eval(RELEASE, list(layout.semaphore_keys_for(name)), [token, HANDOFF_GRACE_MS, name])


def extend(scope: Scope, name: str, token: str, ttl_ms: int, renewal: bool) -> Steps[int]:
    """Return 1 if extended, 0 if ``token`` holds no permit, 2 at MAX_RENEWALS."""
    most = "" if scope.max_renewals is None else scope.max_renewals
    return int(
        (
            yield Eval(
                EXTEND,
                list(scope.layout.semaphore_keys_for(name)),
                [token, ttl_ms, flag(renewal), most, HANDOFF_GRACE_MS, name],
            )
        )
    )


# --- operators ----------------------------------------------------------------------------
def describe(scope: Scope, name: str) -> Steps[SemaphoreInfo | None]:
    """Return the holders of semaphore ``name``, or None if nobody holds or waits."""
    validate_name(name)
    return semaphore_info(scope.alias, name, (yield inspect_call(scope.layout, name)))


def inspect_call(layout: KeyLayout, name: str) -> Eval:
    return Eval(INSPECT, list(layout.semaphore_keys_for(name)), [], idempotent=True)


def held_semaphores(scope: Scope, prefix: str) -> Steps[list[SemaphoreInfo]]:
    """Return every held semaphore whose name starts with ``prefix``, by name (one round
    trip per server to list the names, one more to read them)."""
    names = yield from names_in(scope.layout.semaphore_index_keys, prefix)
    read = yield EvalMany([inspect_call(scope.layout, name) for name in names], reads=True)
    found = (
        semaphore_info(scope.alias, name, reply) for name, reply in zip(names, read, strict=True)
    )
    return [info for info in found if info is not None and info.holders]


def names_in(index_keys: Iterable[str], prefix: str) -> Steps[list[str]]:
    """Return the names in the index zsets ``index_keys`` (a semaphore bucket's or a shared
    one's: HELD_NAMES reads either) that start with ``prefix``, sorted: one round trip per
    server."""
    replies = yield EvalMany(
        [Eval(HELD_NAMES, [index], [], idempotent=True) for index in index_keys], reads=True
    )
    return sorted(
        text(name) for reply in replies for name in reply if text(name).startswith(prefix)
    )


def semaphore_info(alias: str, name: str, reply: list[Any]) -> SemaphoreInfo | None:
    """Return the SemaphoreInfo in semaphore_inspect.lua's reply (None when it is empty)."""
    if not reply:
        return None
    limit, now_ms, waiting, reserved = (int(value) for value in reply[:4])
    holders = []
    fields = reply[4:]
    for i in range(0, len(fields), 6):
        token, lease_end, meta, acquired, fence, renewals = fields[i : i + 6]
        holders.append(
            LockInfo.from_stored(
                name=name,
                token=text(token),
                fence=int(fence),
                meta_json=text(meta),
                acquired_ms=int(acquired),
                now_ms=now_ms,
                pttl_ms=int(lease_end) - now_ms,
                renewals=int(renewals),
                depth=1,
                alias=alias,
                waiters=waiting + reserved,  # a permit's waiters are the semaphore's
            )
        )
    return SemaphoreInfo(
        name=name, limit=limit, holders=tuple(holders), waiting=waiting + reserved, alias=alias
    )
