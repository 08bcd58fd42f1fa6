"""Shared-lock operations on one Redis server (RedisBackend, DjangoRedisBackend), on the
conventions of .holds: each a generator of steps, read top to bottom.

A shared hold is kept beside the lock of the same name (names.SharedKeys): while shared
holders hold it, the lock's own key holds the marker "=~", so an exclusive acquire queues as
it does behind any holder, at no new cost to exclusive locks. The queue is the lock's own,
for both kinds; a shared waiter's token starts with "~" (tokens.py), which is how a release
knows to let in the whole run of shared waiters at its head (lua/include/hand_to_readers.lua).
"""

from __future__ import annotations

from typing import Any

from ...info import LockInfo
from ...keys import KeyLayout, validate_name
from ..base import HANDOFF_GRACE_MS
from ..operations import Request
from . import holds
from .scripts import load
from .semaphores import names_in
from .steps import Eval, EvalMany, Scope, Steps, flag, text

ACQUIRE = load("shared_acquire")
RELEASE = load("shared_release")
EXTEND = load("shared_extend")
LEAVE = load("shared_leave")
INSPECT = load("shared_inspect")


def acquire_call(layout: KeyLayout, request: Request, waited: bool = False) -> Eval:
    k = layout.shared_keys_for(request.name)
    # Idempotent: sent again, it tells the token that already holds its place so. A wait is
    # no downgrade: a waiter's acquire carries none (only a try may, at once).
    return Eval(
        ACQUIRE,
        [k.lock, k.fence, k.queue, k.live, k.index, k.readers, k.holders],
        [
            request.token,
            request.ttl_ms,
            request.meta,
            request.name,
            request.patience_ms,
            flag(waited),
            HANDOFF_GRACE_MS,
            "" if waited else request.downgrade_from,
        ],
        idempotent=True,
    )


def leave_call(layout: KeyLayout, name: str, token: str) -> Eval:
    k = layout.shared_keys_for(name)
    return Eval(
        LEAVE,
        [k.lock, k.queue, k.live, k.index, k.readers, k.holders],
        [token, HANDOFF_GRACE_MS, name],
        idempotent=True,
    )


def release_call(layout: KeyLayout, name: str, token: str, every_level: bool) -> Eval:
    k = layout.shared_keys_for(name)
    # Never sent twice (as holds.release_call).
    return Eval(
        RELEASE,
        [k.lock, k.queue, k.live, k.index, k.readers, k.holders],
        [token, name, flag(every_level), HANDOFF_GRACE_MS],
    )


def extend_keys(layout: KeyLayout, name: str) -> list[str]:
    k = layout.shared_keys_for(name)
    return [k.lock, k.index, k.readers, k.holders]


def wake(layout: KeyLayout, name: str, token: str) -> str:
    return f"{layout.shared_keys_for(name).queue}:{token}"  # what hand_to_readers.lua pushes to


# The shared kind's calls: acquired, waited for, left, released and extended by the
# generators of .holds.
SHARED = holds.KindCalls(acquire_call, release_call, leave_call, wake, EXTEND, extend_keys)


def info(scope: Scope, name: str) -> Steps[LockInfo | None]:
    """Return who holds ``name``: its exclusive holder, or its first shared holder to end
    (``shared`` True), or None. Readers are read only when inspect.lua says they hold it."""
    validate_name(name)  # operators pass names by hand: a clear error, not an AttributeError
    reply = yield holds.inspect_call(scope.layout, name)
    if len(reply) == 1:  # {'~'}: shared holders hold it
        found = holders_from(scope.alias, name, (yield inspect_call(scope.layout, name)))
        return found[0] if found else None
    return holds.lock_info_from(scope.alias, name, reply)


def inspect(scope: Scope, name: str) -> Steps[tuple[LockInfo, ...]]:
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
    names = yield from names_in(scope.layout.shared_index_keys, prefix)
    read = yield EvalMany([inspect_call(scope.layout, name) for name in names], reads=True)
    found = {
        name: holders_from(scope.alias, name, reply)
        for name, reply in zip(names, read, strict=True)
    }
    return {name: held for name, held in found.items() if held}
