"""Redlock's scripts on each of its nodes: a release pushes one grant to a list every waiter
blocks on, and the waiter that pops it presents it to every node.

Redlock's operations (distlock.backends.redlock_ops) send these calls to all its nodes at
once and count a majority; the replies read as the one-server scripts' do (holds.attempt_from,
holds.took_lock). Extend, inspect and listing are the one-server calls (.holds, .listing).
"""

from __future__ import annotations

from ...keys import KeyLayout
from ..base import HANDOFF_GRACE_MS
from ..operations import Request
from .scripts import load
from .steps import Eval, Pop, Steps, flag

GRANT_ACQUIRE = load("grant_acquire")
GRANT_RELEASE = load("grant_release")
GRANT_LEAVE_QUEUE = load("grant_leave_queue")
UNDO_ACQUIRE = load("undo_acquire")


def acquire_call(layout: KeyLayout, request: Request, grant: str | None) -> Eval:
    k = layout.keys_for(request.name)
    return Eval(
        GRANT_ACQUIRE,
        [k.lock, k.fence, k.waiters, k.signal, k.index],
        [
            request.token,
            request.ttl_ms,
            request.meta,
            request.name,
            grant or "",
            request.patience_ms,
        ],
    )


def release_call(
    layout: KeyLayout, name: str, token: str, every_level: bool, suffix: str, vacant: bool
) -> Eval:
    k = layout.keys_for(name)
    return Eval(
        GRANT_RELEASE,
        [k.lock, k.waiters, k.signal, k.index],
        [token, name, flag(every_level), HANDOFF_GRACE_MS, suffix, flag(vacant)],
    )


def leave_call(layout: KeyLayout, name: str, token: str) -> Eval:
    return Eval(GRANT_LEAVE_QUEUE, [layout.keys_for(name).waiters], [token])


def undo_call(layout: KeyLayout, name: str, token: str, patience_ms: int) -> Eval:
    k = layout.keys_for(name)
    return Eval(UNDO_ACQUIRE, [k.lock, k.index, k.waiters], [token, name, patience_ms])


def wait_for_grant(layout: KeyLayout, name: str, timeout: float) -> Steps[str | None]:
    """Block on one node until a release pushes a grant to the lock's signal list, or
    ``timeout`` passes; return the grant, or None. (A grant popped by a reply that came too
    late is not lost for good: the nodes take it back after HANDOFF_GRACE_MS.)"""
    return (yield Pop(layout.keys_for(name).signal, timeout))
