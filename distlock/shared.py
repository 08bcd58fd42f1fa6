"""Shared holds of a lock (``distlock.lock(name, shared=True)``): many readers or one writer.

A shared Lock's backend calls go, through :class:`SharedHolds`, to the shared-lock
operations of the same backend (as a Semaphore's go through its Permits), so waiting, release
and extend by token, ``auto_renew`` with lost-lease notification, reentrancy, signals,
``with``/``async with``, the decorator and ``hold_until_commit`` behave as they do for an
exclusive lock. This module also remembers which threads and tasks hold a shared lock, so
that one of them asking for the exclusive lock of the same name (which would wait for
itself) is refused at once.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from .backends.base import Attempt
from .exceptions import SharedLockUpgrade
from .info import LockInfo

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
    if mine and _still_held(mine, await mine[0].backend.aholders(name)):
        raise _upgrade_error(name, using)


# Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
def refuse_upgrade(kind: str, using: str, name: str, owner: tuple[int, int | None]) -> None:
    """Raise SharedLockUpgrade if ``owner`` (a thread and task), or its thread outside any
    task, holds the shared lock ``name`` of ``using`` as the server sees it. (``kind``: a
    semaphore of the same name is another thing.)"""
    mine = _local_holds(kind, using, name, owner)
    if mine and _still_held(mine, mine[0].backend.holders(name)):
        raise _upgrade_error(name, using)


# unasync: end


def _local_holds(kind: str, using: str, name: str, owner: tuple[int, int | None]) -> list[Any]:
    """The shared Lock objects by which this process believes ``owner`` holds ``name``: a
    lease not known to have ended, or a release waiting for a database transaction."""
    with _holds_guard:
        held = list(holds.get((kind, using, name), ()))
    # A coroutine run by a thread that holds the lock outside any task (asyncio.run from
    # sync code) is that thread too: it would wait for itself as well.
    owners = {owner, (owner[0], None)}
    return [lock for lock in held if any(lock.holds_for(other) for other in owners)]


def _still_held(mine: list[Any], holders: tuple[LockInfo, ...]) -> bool:
    """Whether the server still lists one of ``mine``: a hold force-released, run out or
    lost does not make the upgrade wait for itself, so it is not refused. (The one round
    trip is paid only on this path: a thread whose local record shows a shared hold.)"""
    tokens = {holder.token for holder in holders}
    return any(lock.token in tokens for lock in mine)


def _upgrade_error(name: str, using: str) -> SharedLockUpgrade:
    return SharedLockUpgrade(
        f"This thread holds the shared lock {name!r} (alias {using!r}) and asked for the "
        "exclusive lock of the same name, which would wait for itself. Release the shared "
        "lock first, then acquire the exclusive one (another writer may come in between).",
        name=name,
    )


class SharedHolds:
    """One shared Lock's view of its backend as the primitives a Lock's acquire loop calls.

    Made afresh for each acquire (and kept while held): it remembers the token of the
    attempt, so that info() shows this holder's own hold.
    """

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.signal_sender = type(backend)
        self.default_timeout = backend.default_timeout
        self.max_block = backend.max_block
        self.lease_ms = backend.lease_ms
        self._token = ""
        self.downgrade_from = ""  # this thread's exclusive token of the name (Lock.acquire)

    def try_acquire(
        self, name: str, token: str, ttl_ms: int, meta: str, grant: str | None, patience_ms: int
    ) -> Attempt:
        self._token = token
        return self.backend.shared_acquire(
            name, token, ttl_ms, meta, patience_ms, self.downgrade_from
        )

    async def atry_acquire(
        self, name: str, token: str, ttl_ms: int, meta: str, grant: str | None, patience_ms: int
    ) -> Attempt:
        self._token = token
        return await self.backend.ashared_acquire(
            name, token, ttl_ms, meta, patience_ms, self.downgrade_from
        )

    def wait_and_acquire(
        self, timeout: float, name: str, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        return self.backend.shared_wait_and_acquire(timeout, name, token, ttl_ms, meta, patience_ms)

    async def await_and_acquire(
        self, timeout: float, name: str, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        return await self.backend.ashared_wait_and_acquire(
            timeout, name, token, ttl_ms, meta, patience_ms
        )

    def leave_queue(self, name: str, token: str) -> None:
        self.backend.shared_leave(name, token)

    async def aleave_queue(self, name: str, token: str) -> None:
        await self.backend.ashared_leave(name, token)

    def release(self, name: str, token: str, *, every_level: bool = False) -> int:
        return self.backend.shared_release(name, token, every_level=every_level)

    async def arelease(self, name: str, token: str, *, every_level: bool = False) -> int:
        return await self.backend.ashared_release(name, token, every_level=every_level)

    def extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        return self.backend.shared_extend(name, token, ttl_ms, renewal=renewal, reenter=reenter)

    async def aextend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        return await self.backend.ashared_extend(
            name, token, ttl_ms, renewal=renewal, reenter=reenter
        )

    def info(self, name: str) -> LockInfo | None:
        """Return this holder's hold if it has one, else another shared holder's, else the
        exclusive holder (who keeps this acquire out), else None."""
        return self._pick(self.backend.shared_holders(name)) or self.backend.info(name)

    async def ainfo(self, name: str) -> LockInfo | None:
        return self._pick(await self.backend.ashared_holders(name)) or await self.backend.ainfo(
            name
        )

    def holders(self, name: str) -> tuple[LockInfo, ...]:
        return tuple(self.backend.shared_holders(name))

    async def aholders(self, name: str) -> tuple[LockInfo, ...]:
        return tuple(await self.backend.ashared_holders(name))

    def _pick(self, holders: tuple[LockInfo, ...]) -> LockInfo | None:
        if not holders:
            return None
        mine = [holder for holder in holders if holder.token == self._token]
        return (mine or list(holders))[0]
