"""Shared holds of a lock (``distlock.lock(name, shared=True)``): many readers or one writer.

A shared Lock's backend calls go to the shared-lock operations of the same backend
(``backend.shared``, as a Semaphore's go to ``backend.semaphores``), so waiting, release
and extend by token, ``auto_renew`` with lost-lease notification, reentrancy, signals,
``with``/``async with``, the decorator and ``hold_until_commit`` behave as they do for an
exclusive lock. This module also remembers which threads and tasks hold a shared lock, so
that one of them asking for the exclusive lock of the same name (which would wait for
itself) is refused at once. An owner is a thread and asyncio task (``current_owner()``), as
reentrancy knows the holder too.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from typing import Any

from .exceptions import SharedLockUpgrade
from .info import LockInfo
from .transactions import waiting_release

# The shared Lock objects of this process holding each (kind, alias, name) (Lock.acquire
# reads it first: empty, the upgrade check costs an exclusive acquire nothing more).
holds: dict[tuple[str, str, str], weakref.WeakSet[Any]] = {}
_holds_guard = threading.Lock()
# The exclusive Lock object of this process holding each (kind, alias, name) for each owner
# (a thread and task): a shared acquire by that owner is a downgrade, granted at once
# (Lock.acquire reads it only for shared locks). A plain dict, each change one atomic step:
# this is on every exclusive acquire's path.
exclusive: dict[tuple[str, str, str, tuple[int, int | None]], weakref.ref[Any]] = {}
if hasattr(os, "register_at_fork"):  # a forked child holds nothing of its parent's
    os.register_at_fork(after_in_child=holds.clear)
    os.register_at_fork(after_in_child=exclusive.clear)


def current_owner() -> tuple[int, int | None]:
    """Identify the running thread and asyncio task (the owner of what it acquires)."""
    # Outside an event loop (every sync acquire) asyncio.current_task() raises RuntimeError,
    # which costs more than the rest of this: look for the running loop first.
    loop = asyncio._get_running_loop()  # in asyncio.events.__all__; no exception
    task = None if loop is None else asyncio.current_task(loop)
    return threading.get_ident(), None if task is None else id(task)


def note_hold(lock: Any) -> None:
    with _holds_guard:
        holds.setdefault((lock.kind, lock.using, lock.name), weakref.WeakSet()).add(lock)


def forget_hold(lock: Any) -> None:
    with _holds_guard:
        key = (lock.kind, lock.using, lock.name)
        held = holds.get(key)
        if held is not None:
            held.discard(lock)
            if not held:
                del holds[key]


def note_exclusive(lock: Any, owner: tuple[int, int | None]) -> None:
    """Remember that ``owner`` holds the exclusive ``lock``."""
    exclusive[lock.kind, lock.using, lock.name, owner] = weakref.ref(lock)


def forget_exclusive(lock: Any, owner: tuple[int, int | None]) -> None:
    key = (lock.kind, lock.using, lock.name, owner)
    held = exclusive.get(key)
    if held is not None and held() in (lock, None):
        exclusive.pop(key, None)


def downgrade_from(kind: str, using: str, name: str, owner: tuple[int, int | None]) -> str:
    """Return the token of the exclusive hold of ``name`` that ``owner`` (a thread and task,
    or its thread outside any task) has, '' if none: a hold whose lease has not ended, or
    whose release waits for a database transaction. The server grants the shared lock at once
    only while that token holds the lock (see shared_acquire.lua)."""
    for other in (owner, (owner[0], None)):
        held = exclusive.get((kind, using, name, other))
        lock = held() if held is not None else None
        if lock is not None and lock.token and lock.holds_for(other):
            return str(lock.token)
    return ""


# unasync: the async source of the sync code after it
async def arefuse_upgrade(kind: str, using: str, name: str, owner: tuple[int, int | None]) -> None:
    """Raise SharedLockUpgrade if ``owner`` (a thread and task), or its thread outside any
    task, holds the shared lock ``name`` of ``using`` as the server sees it. (``kind``: a
    semaphore of the same name is another thing.)"""
    mine = _local_holds(kind, using, name, owner)
    if mine and _still_held(mine, await mine[0].operations.ainspect(name)):
        raise _upgrade_error(name, using, mine)


# Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
def refuse_upgrade(kind: str, using: str, name: str, owner: tuple[int, int | None]) -> None:
    """Raise SharedLockUpgrade if ``owner`` (a thread and task), or its thread outside any
    task, holds the shared lock ``name`` of ``using`` as the server sees it. (``kind``: a
    semaphore of the same name is another thing.)"""
    mine = _local_holds(kind, using, name, owner)
    if mine and _still_held(mine, mine[0].operations.inspect(name)):
        raise _upgrade_error(name, using, mine)


# unasync: end


def _local_holds(kind: str, using: str, name: str, owner: tuple[int, int | None]) -> list[Any]:
    """The shared Lock objects by which this process believes ``owner`` holds ``name``: a
    lease not known to have ended, or a release waiting for a database transaction."""
    with _holds_guard:
        held = list(holds.get((kind, using, name), ()))
    # A coroutine run by a thread that holds the lock outside any task (asyncio.run from
    # sync code) is that thread too: it would wait for itself as well.
    owners = {owner, (owner[0], None)}
    mine = [lock for lock in held if any(lock.holds_for(other) for other in owners)]
    # A shared release waiting for a transaction the running code is in (another task of
    # it, under asyncio.gather) is this code's too: the exclusive lock would wait for the
    # COMMIT, which waits for this code.
    waiting = waiting_release(("shared", using, name))
    if waiting is not None and waiting.kind == kind and waiting not in mine:
        mine.append(waiting)
    return mine


def _still_held(mine: list[Any], holders: tuple[LockInfo, ...]) -> bool:
    """Whether the server still lists one of ``mine``: a hold force-released, run out or
    lost does not make the upgrade wait for itself, so it is not refused. (The one round
    trip is paid only on this path: a thread whose local record shows a shared hold.)"""
    tokens = {holder.token for holder in holders}
    return any(lock.token in tokens for lock in mine)


def _upgrade_error(name: str, using: str, mine: list[Any]) -> SharedLockUpgrade:
    if any(lock._ties.pending is not None for lock in mine):
        return SharedLockUpgrade(
            f"The shared lock {name!r} (alias {using!r}) was released in this database "
            "transaction, but its release waits for this transaction's COMMIT "
            "(docs/transactions.md), so the exclusive lock of the same name would wait for "
            "itself. Take the exclusive lock first (it covers the read too), or after the "
            "transaction, or take the shared one with hold_until_commit=False.",
            name=name,
        )
    return SharedLockUpgrade(
        f"This thread holds the shared lock {name!r} (alias {using!r}) and asked for the "
        "exclusive lock of the same name, which would wait for itself. Release the shared "
        "lock first, then acquire the exclusive one (another writer may come in between).",
        name=name,
    )
