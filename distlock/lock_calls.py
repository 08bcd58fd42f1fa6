"""The Lock's calls to the lock server: acquire, release, extend and the reads (``locked``,
``owned``, ``holder``), and what each changes of the hold around its call. An acquire is
one call to attempts.py, the module of the acquire path from its checks to the grant.

``LockCalls`` is a base class of :class:`distlock.Lock`: each method is written once, async,
and its sync twin generated after it by scripts/unasync.py (``make generate``). The hold's
own state and bookkeeping (the grant, the lease, the ties to transactions, the signals) are
the Lock's, in lock.py; what these methods use of it is ``LockState``, a protocol, since
lock.py imports this module.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from . import attempts, claims
from .attempts import UNSET
from .backends.base import lease_end
from .backends.operations import Operations
from .exceptions import LockError
from .info import LockInfo
from .lease import Lease
from .signals import lock_released
from .transactions import (
    LockTies,
    anote_loop_thread,
    anote_sync_thread,
    loops_of_async_to_sync,
    note_loop_thread,
    note_sync_thread,
    running_loop,
    transactions_entered,
)
from .validation import seconds


class LockState(Protocol):
    """What the calls read and change of the Lock they are methods of (lock.py)."""

    name: str
    using: str
    fence: bool
    hold_until_commit: bool
    metric_name: str | None
    token: str | None
    fencing_token: int | None
    _depth: int
    _lease: Lease
    _ties: LockTies

    @property
    def operations(self) -> Operations: ...

    def lease_left(self) -> float: ...

    def _is_mine(self, info: LockInfo | None) -> bool: ...

    def _holding(self) -> tuple[Operations, str]: ...

    def _forget(self, *, fence_ends: bool = True) -> None: ...

    def _local_info(self) -> LockInfo | None: ...

    def _report_lost(self, operations: Any = None) -> None: ...


# Type checkers read the calls as methods of a LockState; at run time the base is object.
if TYPE_CHECKING:
    _Base = LockState
else:
    _Base = object


class LockCalls(_Base):
    """The methods of a Lock that call the lock server, async and (generated) sync."""

    # --- acquire ------------------------------------------------------------------------
    # The acquire path, from these checks to the grant, is attempts.py's: one call, no more.
    # unasync: the async source of the sync code after it
    async def aacquire(self, wait: float | None = UNSET) -> bool:
        """Acquire the lock, waiting up to ``wait`` seconds; return True if acquired."""
        return await attempts.aacquire(self, wait)

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def acquire(self, wait: float | None = UNSET) -> bool:
        """Acquire the lock, waiting up to ``wait`` seconds; return True if acquired."""
        return attempts.acquire(self, wait)

    # unasync: end

    # --- release ------------------------------------------------------------------------
    # unasync: the async source of the sync code after it
    async def arelease(self) -> None:
        """Release the lock (one level of a reentrant hold).

        Raise LockNotOwned if this object does not hold it (any more), LockLost if automatic
        renewal found the lease gone. If the server cannot be reached, raise
        BackendUnavailable and keep the token, so release() can be called again.

        Inside a database transaction (``hold_until_commit``), the lock stays held, its lease
        kept alive, until the transaction ends: see docs/transactions.md.
        """
        bridged = False
        if transactions_entered():  # (a builtin: no frame when none was ever entered)
            await anote_sync_thread()
        elif running_loop() in loops_of_async_to_sync:  # (no loop, None: never in it)
            await anote_loop_thread()  # a late answer of its thread's transactions, noted
            bridged = True
        # Its thread's answer not in yet: tied to what is open there, and to what the answer
        # finds (first: its own task takes such a release back, even after a take-back).
        if bridged and self._ties.settle_on_answer(self, self._depth):
            return
        if self._ties.wait(self, self._depth):
            return
        await self._arelease_now()

    async def _arelease_now(self) -> None:
        backend, token, final = self._begin_release()
        try:
            outcome = await backend.arelease(self.name, token, every_level=final)
        except BaseException:
            self._abort_release(final)
            raise
        self._end_release(outcome)

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def release(self) -> None:
        """Release the lock (one level of a reentrant hold).

        Raise LockNotOwned if this object does not hold it (any more), LockLost if automatic
        renewal found the lease gone. If the server cannot be reached, raise
        BackendUnavailable and keep the token, so release() can be called again.

        Inside a database transaction (``hold_until_commit``), the lock stays held, its lease
        kept alive, until the transaction ends: see docs/transactions.md.
        """
        bridged = False
        if transactions_entered():  # (a builtin: no frame when none was ever entered)
            note_sync_thread()
        elif running_loop() in loops_of_async_to_sync:  # (no loop, None: never in it)
            note_loop_thread()  # a late answer of its thread's transactions, noted
            bridged = True
        # Its thread's answer not in yet: tied to what is open there, and to what the answer
        # finds (first: its own task takes such a release back, even after a take-back).
        if bridged and self._ties.settle_on_answer(self, self._depth):
            return
        if self._ties.wait(self, self._depth):
            return
        self._release_now()

    def _release_now(self) -> None:
        backend, token, final = self._begin_release()
        try:
            outcome = backend.release(self.name, token, every_level=final)
        except BaseException:
            self._abort_release(final)
            raise
        self._end_release(outcome)

    # unasync: end

    def _begin_release(self) -> tuple[Operations, str, bool]:
        # acquire() and release() in a finally, not ``with``: the statement cost every release
        # more than the rest of this method (two bound methods made, __exit__'s arguments).
        mutex = self._lease.mutex
        mutex.acquire()
        try:
            if self.fence and (self.token is None or self._lease.lost):
                claims.forget_fenced(self)  # the holder ends its hold: its fence too
            backend, token = self._holding()
            final = self._depth <= 1
            self._lease.begin_release(final)
            return backend, token, final
        finally:
            mutex.release()

    def _abort_release(self, final: bool) -> None:
        if final:
            self._lease.abort_release()

    def _end_release(self, outcome: int) -> None:
        if outcome == 2:
            self._depth -= 1
            return
        # Nobody connected (the usual case): no sender, no LockInfo, no send, and not even
        # has_listeners(), which looks the sender up in the signal's cache.
        sender = self.operations.signal_sender if lock_released.receivers else None
        info = (
            self._local_info()
            if sender is not None and lock_released.has_listeners(sender)
            else None
        )
        in_time = self._lease.released_in_time
        self._forget()
        if outcome == 0 and not in_time:
            raise self._lease.expired_error(self, "release")
        if sender is not None:
            lock_released.send(sender, name=self.name, alias=self.using, info=info)

    # --- extend -------------------------------------------------------------------------
    # unasync: the async source of the sync code after it
    async def aextend(self, ttl: float | None = None) -> None:
        """Set the lease back to ``ttl`` (default: the lock's ttl) seconds from now.

        Raise RenewalLimitReached (the lock stays held) once the alias's MAX_RENEWALS is used.
        """
        ttl_ms = self._extend_ttl(ttl)
        backend, token = self._holding()
        started = time.monotonic()
        # renewal=True: an explicit extend counts against MAX_RENEWALS like an auto-renewal.
        extended = await backend.aextend(self.name, token, ttl_ms, renewal=True)
        self._after_extend(extended, started, ttl_ms=ttl_ms)

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def extend(self, ttl: float | None = None) -> None:
        """Set the lease back to ``ttl`` (default: the lock's ttl) seconds from now.

        Raise RenewalLimitReached (the lock stays held) once the alias's MAX_RENEWALS is used.
        """
        ttl_ms = self._extend_ttl(ttl)
        backend, token = self._holding()
        started = time.monotonic()
        # renewal=True: an explicit extend counts against MAX_RENEWALS like an auto-renewal.
        extended = backend.extend(self.name, token, ttl_ms, renewal=True)
        self._after_extend(extended, started, ttl_ms=ttl_ms)

    # unasync: end

    def _extend_ttl(self, ttl: float | None) -> int:
        value = seconds("ttl", ttl, allow_none=True)
        return self._lease.ttl_ms if value is None else self.operations.lease_ms(value)

    def _after_extend(
        self, extended: bool, started: float, *, ttl_ms: int | None = None, reentered: bool = False
    ) -> None:
        if not extended:
            self._forget(fence_ends=False)  # a loop that catches this is still fenced
            raise self._lease.expired_error(self, "extend")
        self._lease.deadline = lease_end(started, ttl_ms or self._lease.ttl_ms)
        self._depth += reentered

    # --- reads ---------------------------------------------------------------------------
    # unasync: the async source of the sync code after it
    async def alocked(self) -> bool:
        """Return True if anyone holds the lock."""
        return await self.operations.aholder(self.name, self.token) is not None

    async def aowned(self) -> bool:
        """Return True if this object holds the lock, as the server sees it."""
        return self.token is not None and self._is_mine(
            await self.operations.aholder(self.name, self.token)
        )

    async def aholder(self) -> LockInfo | None:
        """Return who holds this lock now, or None if nobody does or the server cannot say.

        For messages that name the holder (a contended lock); never decide with it whether
        the lock is free: that is what acquire() does, atomically.
        """
        try:
            return await self.operations.aholder(self.name, self.token)
        except LockError:
            return None

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def locked(self) -> bool:
        """Return True if anyone holds the lock."""
        return self.operations.holder(self.name, self.token) is not None

    def owned(self) -> bool:
        """Return True if this object holds the lock, as the server sees it."""
        return self.token is not None and self._is_mine(
            self.operations.holder(self.name, self.token)
        )

    def holder(self) -> LockInfo | None:
        """Return who holds this lock now, or None if nobody does or the server cannot say.

        For messages that name the holder (a contended lock); never decide with it whether
        the lock is free: that is what acquire() does, atomically.
        """
        try:
            return self.operations.holder(self.name, self.token)
        except LockError:
            return None

    # unasync: end
