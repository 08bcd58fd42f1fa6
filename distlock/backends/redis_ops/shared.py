"""Shared-lock operations on one Redis server (RedisBackend, DjangoRedisBackend), on the
conventions of .locks: each a generator of steps, read top to bottom.

A shared hold is kept beside the lock of the same name (names.SharedKeys): while shared
holders hold it, the lock's own key holds the marker "=~", so an exclusive acquire queues as
it does behind any holder, at no new cost to exclusive locks. The queue is the lock's own,
for both kinds; a shared waiter's token starts with "~" (tokens.py), which is how a release
knows to let in the whole run of shared waiters at its head (lua/include/hand_to_readers.lua).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from ...exceptions import BackendUnavailable
from ...info import LockInfo
from ...keys import KeyLayout, validate_name
from ..base import HANDOFF_GRACE_MS, Attempt
from . import locks
from .locks import attempt_from
from .scripts import load
from .semaphores import HELD_NAMES
from .steps import Confirmed, Eval, EvalMany, PopThenEval, Scope, Steps, flag, text

ACQUIRE = load("shared_acquire")
RELEASE = load("shared_release")
EXTEND = load("shared_extend")
LEAVE = load("shared_leave")
INSPECT = load("shared_inspect")


def acquire_call(
    layout: KeyLayout,
    name: str,
    token: str,
    ttl_ms: int,
    meta: str,
    patience_ms: int,
    waited: bool,
    downgrade_from: str = "",
) -> Eval:
    k = layout.shared_keys_for(name)
    # Idempotent: sent again, it tells the token that already holds its place so.
    return Eval(
        ACQUIRE,
        [k.lock, k.fence, k.queue, k.live, k.index, k.readers, k.holders],
        [token, ttl_ms, meta, name, patience_ms, flag(waited), HANDOFF_GRACE_MS, downgrade_from],
        idempotent=True,
    )


def try_acquire(
    scope: Scope,
    name: str,
    token: str,
    ttl_ms: int,
    meta: str,
    patience_ms: int,
    downgrade_from: str = "",
    waited: bool = False,
) -> Steps[Attempt]:
    """Take a shared hold for ``token``, or queue it for ``patience_ms``; at once while
    ``downgrade_from`` (this thread's exclusive token) holds the lock."""
    call = acquire_call(
        scope.layout, name, token, ttl_ms, meta, patience_ms, waited, downgrade_from
    )
    if not scope.wait_replicas:
        return attempt_from((yield call))
    reply, confirmed = yield Confirmed(call)
    return (yield from replicated(scope, name, token, reply, confirmed))


def wait_and_acquire(
    scope: Scope, timeout: float, name: str, token: str, ttl_ms: int, meta: str, patience_ms: int
) -> Steps[Attempt]:
    """As locks.wait_and_acquire: BLPOP on this waiter's own list with the acquire pipelined
    behind it, so a release that lets a batch of readers in has each learn it holds from the
    reply that woke it."""
    call = acquire_call(scope.layout, name, token, ttl_ms, meta, patience_ms, waited=True)
    wake = f"{scope.layout.shared_keys_for(name).queue}:{token}"  # hand_to_readers.lua pushes
    sent = time.monotonic()
    replies = yield PopThenEval(wake, timeout, call, confirm=bool(scope.wait_replicas))
    if replies is None:
        # A reply later than the socket timeout: give back what the acquire may have taken.
        yield release_call(scope.layout, name, token, every_level=False)
        return Attempt(False)
    if any(isinstance(reply, Exception) for reply in replies):
        del replies  # no cycle through this frame (see detached.py)
        attempt = yield from try_acquire(scope, name, token, ttl_ms, meta, patience_ms, waited=True)
    elif scope.wait_replicas:
        attempt = yield from replicated(scope, name, token, replies[1], int(replies[2]))
    else:
        attempt = attempt_from(replies[1])
    return attempt._replace(sent=sent)


def replicated(scope: Scope, name: str, token: str, reply: Any, confirmed: int) -> Steps[Attempt]:
    """As locks.replicated, for a shared hold."""
    attempt = attempt_from(reply)
    if attempt.acquired and confirmed < scope.wait_replicas:
        with contextlib.suppress(BackendUnavailable):
            yield release_call(scope.layout, name, token, every_level=False)
        raise scope.unconfirmed(name, confirmed)
    return attempt


def leave(scope: Scope, name: str, token: str) -> Steps[None]:
    """Stop waiting; a place reserved for ``token`` meanwhile is given back."""
    k = scope.layout.shared_keys_for(name)
    yield Eval(
        LEAVE,
        [k.lock, k.queue, k.live, k.index, k.readers, k.holders],
        [token, HANDOFF_GRACE_MS, name],
        idempotent=True,
    )


def release(scope: Scope, name: str, token: str, every_level: bool) -> Steps[int]:
    """Return 0 if ``token`` holds no shared place, 1 if released (the last one out hands
    the lock on), 2 if one reentrant level was."""
    return int((yield release_call(scope.layout, name, token, every_level)))


def release_call(layout: KeyLayout, name: str, token: str, every_level: bool) -> Eval:
    k = layout.shared_keys_for(name)
    # Never sent twice (as locks.release_call).
    return Eval(
        RELEASE,
        [k.lock, k.queue, k.live, k.index, k.readers, k.holders],
        [token, name, flag(every_level), HANDOFF_GRACE_MS],
    )


def extend(
    scope: Scope, name: str, token: str, ttl_ms: int, renewal: bool, reenter: bool
) -> Steps[bool]:
    """As locks.extend, for a shared holder."""
    call = extend_call(scope.layout, name, token, ttl_ms, renewal, reenter, scope.max_renewals)
    return (yield from locks.extend_by(scope, name, call))


def extend_call(
    layout: KeyLayout,
    name: str,
    token: str,
    ttl_ms: int,
    renewal: bool,
    reenter: bool,
    max_renewals: int | None,
) -> Eval:
    k = layout.shared_keys_for(name)
    return Eval(
        EXTEND,
        [k.lock, k.index, k.readers, k.holders],
        locks.extend_args(name, token, ttl_ms, renewal, reenter, max_renewals),
        idempotent=not reenter,  # as locks.extend_call
    )


def info(scope: Scope, name: str) -> Steps[LockInfo | None]:
    """Return who holds ``name``: its exclusive holder, or its first shared holder to end
    (``shared`` True), or None. Readers are read only when inspect.lua says they hold it."""
    validate_name(name)  # operators pass names by hand: a clear error, not an AttributeError
    reply = yield locks.inspect_call(scope.layout, name)
    if len(reply) == 1:  # {'~'}: shared holders hold it
        found = holders_from(scope.alias, name, (yield inspect_call(scope.layout, name)))
        return found[0] if found else None
    return locks.lock_info_from(scope.alias, name, reply)


def holders(scope: Scope, name: str) -> Steps[tuple[LockInfo, ...]]:
    """Return the shared holders of ``name``, first lease to end first (empty if none)."""
    validate_name(name)
    return holders_from(scope.alias, name, (yield inspect_call(scope.layout, name)))


def inspect_call(layout: KeyLayout, name: str) -> Eval:
    k = layout.shared_keys_for(name)
    return Eval(INSPECT, [k.lock, k.readers, k.holders, k.live], [], idempotent=True)


def holders_from(alias: str, name: str, reply: list[Any]) -> tuple[LockInfo, ...]:
    """Return the holders in shared_inspect.lua's reply."""
    if not reply:
        return ()
    now_ms, waiters, entries = int(reply[0]), int(reply[1]), reply[2:]
    found = []
    for i in range(0, len(entries), 3):
        token, fields, lease_end = text(entries[i]), text(entries[i + 1]), int(entries[i + 2])
        fence, acquired, renewals, depth, meta = fields.split(" ", 4)
        info = LockInfo.from_stored(
            shared=True,
            name=name,
            token=token,
            fence=int(fence),
            meta_json=meta,
            acquired_ms=int(acquired),
            now_ms=now_ms,
            pttl_ms=lease_end - now_ms,
            renewals=int(renewals),
            depth=int(depth),
            alias=alias,
            waiters=waiters,
        )
        found.append(info)
    return tuple(found)


def held_shared(scope: Scope, prefix: str) -> Steps[dict[str, tuple[LockInfo, ...]]]:
    """Return the holders of every shared-held lock whose name starts with ``prefix``, by
    name (one round trip per server to list the names, one more to read them)."""
    replies = yield EvalMany(
        [
            Eval(HELD_NAMES, [index], [], idempotent=True)
            for index in scope.layout.shared_index_keys
        ],
        reads=True,
    )
    names = sorted(
        text(name) for reply in replies for name in reply if text(name).startswith(prefix)
    )
    read = yield EvalMany([inspect_call(scope.layout, name) for name in names], reads=True)
    found = {
        name: holders_from(scope.alias, name, reply)
        for name, reply in zip(names, read, strict=True)
    }
    return {name: held for name, held in found.items() if held}
