"""One acquire call after its checks (``Attempts``, made by ``Lock.acquire`` in lock_calls.py):
its loop of tries and waits for a turn, the token and requests it sends, how long each wait
blocks, and what becomes of a grant that came too late or of a call cut short (given back, so
that nothing is held that the caller does not know of). Written once async, the sync twins
generated (scripts/unasync.py).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from . import metrics, shared
from .backends.base import DRIFT_FACTOR, HANDOFF_GRACE_MS, Attempt, BaseLockBackend, lease_end
from .backends.operations import Operations, Request
from .exceptions import LockError
from .info import holder_metadata
from .signals import lock_contended
from .take_back import atake_back_from_queue, take_back_from_queue
from .tokens import NON_FAIR_MARK, SHARED_MARK, new_token
from .transactions import held_in_transactions_here, waiting_release

# A waiter stays registered this much longer than it blocks, so a release never misses it.
PATIENCE_MARGIN = 1.0


def _new_token(lock: Any, operations: Operations) -> str:
    """Return a new token for one acquire of ``lock``, marked for the scripts when the hold is
    shared or non-fair (distlock.tokens)."""
    if lock.shared:
        return SHARED_MARK + new_token()
    if lock.kind != "lock":  # a semaphore's permit: first come, first served
        return new_token()
    backend = cast(BaseLockBackend, operations.backend)
    fair = lock.fair if lock.fair is not None else backend.fair
    if fair:
        return new_token()
    if backend.no_non_fair:
        raise backend.non_fair_not_supported()
    return NON_FAIR_MARK + new_token()


# How often (s) a task waiting for a lock that another task of its transaction holds looks
# for that task's release (asyncio.gather under async_to_sync): it never reaches the server.
SIBLING_LOOK = 0.05
# An acquire whose reply came too late to leave any lease: treated as not acquired.
TOO_LATE = Attempt(False, holder_pttl_ms=0)


def waiting_in_this_transaction(lock: Any) -> str:
    """Return the token of the exclusive hold of ``lock``'s name whose release waits for a
    transaction the running code is in, '' if none: released in another thread of that
    transaction (async_to_sync), it is this code's own hold, to downgrade, never to wait for."""
    held = waiting_release((lock.kind, lock.using, lock.name))
    return str(held.token) if held is not None and held.token else ""


class Attempts:
    """One acquire() call after its checks: its state, and its loop of tries and waits.

    ``lock`` is the Lock (or Semaphore) that asks: its settings are read (``name``,
    ``shared``, ``ttl``, ...); it is not imported here, since lock.py imports this module.
    """

    def __init__(self, lock: Any, operations: Operations, wait: float | None, began: float) -> None:
        self.lock = lock
        self.operations = operations
        # 128 random bits: unguessable, never reused; a shared holder's marked for the scripts
        self.token = _new_token(lock, operations)
        ttl = lock.ttl if lock.ttl is not None else operations.default_timeout
        self.ttl_ms = operations.lease_ms(ttl)  # also enforces the alias's MAX_TTL
        self.meta = holder_metadata(lock.purpose)
        self.deadline = math.inf if wait is None else time.monotonic() + wait
        self.limit: int = getattr(lock, "limit", 1)  # a Semaphore's
        self.downgrade_from = ""
        if lock.shared and shared.exclusive:  # a downgrade, if this thread holds it exclusively
            owner = shared.current_owner()
            self.downgrade_from = shared.downgrade_from(
                lock.kind, lock.using, lock.name, owner
            ) or waiting_in_this_transaction(lock)
        self.queue = wait != 0
        self.contended = False
        self.waited = False  # an acquire_when_free call was made
        self.started = 0.0
        self.began = began  # metrics.now() when acquire() was called (0.0: nothing recorded)
        # A moment of the server's clock and a local time before it: (monotonic, server ms).
        self.clock: tuple[float, int] | None = None

    def request(self) -> Request:
        """Return the request of the first try_acquire call (no grant yet)."""
        self.started = time.monotonic()
        return self._request()

    def waiting(self) -> Request:
        """Return the request of an acquire_when_free call (its timeout goes beside it)."""
        self.started = time.monotonic()
        self.waited = True
        return self._request()

    def _request(self) -> Request:
        name, token, ttl_ms, meta = self.lock.name, self.token, self.ttl_ms, self.meta
        return Request(name, token, ttl_ms, meta, self._patience(), self.limit, self.downgrade_from)

    def _patience(self) -> int:
        """How long (ms) the server keeps this waiter registered: until the next call can
        renew it, so a release never misses it, and a dead waiter is forgotten soon after."""
        if not self.queue:
            return 0
        block = min(self.deadline - time.monotonic(), self.operations.max_block)
        return round((max(block, 0) + PATIENCE_MARGIN) * 1000)

    def lease_started(self, attempt: Attempt) -> float:
        """Return a local time no later than when the server granted ``attempt``'s lease:
        the request's send time, or later when the server's clock shows it ran later (a wait
        that blocked before it acquired). The server's time since the clock pair is counted
        at 1 - DRIFT_FACTOR on this clock, which may run that much slower than the server's
        (counted at one rate, a 1% slow clock placed a 10 s wait's grant 100 ms late)."""
        started = attempt.sent or self.started
        if self.clock is not None and attempt.acquired_ms:
            local, server_ms = self.clock  # server_ms was read after ``local``
            waited_ms = (attempt.acquired_ms - server_ms) * (1 - DRIFT_FACTOR)
            started = max(started, local + (waited_ms - 1) / 1000)
        return started

    def next_block(self, attempt: Attempt) -> float | None:
        """Return how long to wait for a turn, or None to give up."""
        if attempt.server_ms and self.clock is None:
            self.clock = (self.started, attempt.server_ms)
        if not self.contended:
            self.contended = True
            sender = self.operations.signal_sender
            if lock_contended.has_listeners(sender):
                lock_contended.send(sender, name=self.lock.name, alias=self.lock.using, info=None)
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return None
        # Wake when the holder's lease ends at the latest: a crashed holder never releases.
        holder_left = max(attempt.holder_pttl_ms, 1) / 1000 + 0.002
        block = min(remaining, holder_left, self.operations.max_block)
        if attempt.place == 1:
            # Next in line: look again once a handover's grace is over, in case the lock was
            # handed to a waiter that died while queued (it never claims it).
            block = min(block, HANDOFF_GRACE_MS / 1000)
        return block

    def _late(self) -> bool:
        """Return True if a grant that a wait brought came after the wait had ended: it is
        handed on (released, so the next waiter gets it), never kept, so that acquire(wait=W)
        means "held within W" on every backend and kind. (The first attempt's grant is kept
        however long its reply took: wait=0 tries once.)"""
        return self.waited and time.monotonic() > self.deadline

    def _outlived(self, attempt: Attempt) -> bool:
        """Return True if the grant arrived with no lease left to use: less than the drift
        allowance (DRIFT_FACTOR of the lease + DRIFT_MS), so that acquire() never returns
        True for a lease that ends as it returns."""
        return time.monotonic() >= lease_end(self.lease_started(attempt), self.ttl_ms)

    def errored(self) -> None:
        if metrics.ENABLED:
            metrics.wait_ended(self.lock, self.began, "error")

    # unasync: the async source of the sync code after it
    async def aacquire(self) -> bool:
        """Try, then wait for turns, until the lock is granted (the lock records the grant:
        True) or the wait is over (False). Another task of the running code's transaction
        that holds the lock (asyncio.gather under async_to_sync) is looked for often, never
        waited for: its release waits for the COMMIT, which waits for this task."""
        lock, backend = self.lock, self.operations
        attempt = await self.aguarded(backend.atry_acquire, self.request())
        while not attempt.acquired:
            block = self.next_block(attempt)
            if block is None:
                await self.agive_up(backend.aleave)
                return False
            if held_in_transactions_here(lock._resource()):
                # Another task of this transaction holds it (asyncio.gather): its release
                # waits for the COMMIT, which waits for this task, so look for that release
                # often, and take it back as soon as it is made.
                held = waiting_release(lock._resource())
                if held is not None and await atake_back_from_queue(
                    lock, backend, self.token, held
                ):
                    return True
                block = min(block, SIBLING_LOOK)
            elif lock.shared and held_in_transactions_here((lock.kind, lock.using, lock.name)):
                # Another task of this transaction holds the exclusive lock: once it has
                # released (its release waits for the COMMIT, which waits for this task),
                # downgrade that hold, as the same transaction, instead of waiting for it (a
                # downgrade is a try's, never a waiter's: leave the queue first).
                self.downgrade_from = waiting_in_this_transaction(lock)
                if self.downgrade_from:
                    with contextlib.suppress(LockError):
                        await backend.aleave(lock.name, self.token)
                    attempt = await self.aguarded(backend.atry_acquire, self.request())
                    continue
                block = min(block, SIBLING_LOOK)
            elif (
                not lock.shared
                and shared.holds
                and held_in_transactions_here(("shared", lock.using, lock.name))
            ):
                # Another task of this transaction holds the shared lock: once it has
                # released (its release waits for the COMMIT, which waits for this task), this
                # exclusive request would wait for itself: refused then, as it is at once.
                if waiting_release(("shared", lock.using, lock.name)) is not None:
                    with contextlib.suppress(LockError):
                        await backend.aleave(lock.name, self.token)
                    await shared.arefuse_upgrade(
                        lock.kind, lock.using, lock.name, shared.current_owner()
                    )
                block = min(block, SIBLING_LOOK)
            # Wait to be handed the lock, and claim it, in one call (one round trip on one
            # server); the reply tells whether this object holds it now.
            attempt = await self.aguarded(backend.aacquire_when_free, self.waiting(), block)
        lock._take(self, attempt)
        return True

    async def aguarded(self, call: Callable[..., Awaitable[Attempt]], *args: Any) -> Attempt:
        """Return ``call(*args)``. When it does not return (the server did not answer, or a
        signal, KeyboardInterrupt or task cancellation cut the wait short), the server may
        have granted the lock all the same: give it back before the error goes on."""
        try:
            attempt = await call(*args)
        except BaseException:
            await self._aabandon()
            self.errored()
            raise
        if attempt.acquired and (self._outlived(attempt) or self._late()):
            await self._aforget_maybe_granted()
            return TOO_LATE
        return attempt

    async def _aabandon(self) -> None:
        """An acquire that ends in an error: give back what the server may have granted, and
        leave the queue, where a release may have reserved the lock for this token (release
        answers 0 for a reservation and leaves it; leave_queue hands it on at once rather than
        after the grace). Only when the server answered the release: an unreachable server
        costs no second wait, and the registration ends on its own (docs/protocol.md, "The
        error path")."""
        with contextlib.suppress(LockError):
            await self.operations.arelease(self.lock.name, self.token)
            if self.queue:
                await self.operations.aleave(self.lock.name, self.token)

    async def _aforget_maybe_granted(self) -> None:
        # The server may have granted the lock before the reply was lost: free it if it can
        # be reached; otherwise the lease ends it. Never report it as acquired.
        with contextlib.suppress(LockError):
            await self.operations.arelease(self.lock.name, self.token)

    async def agive_up(self, leave: Callable[[str, str], Awaitable[None]]) -> None:
        if metrics.ENABLED:
            metrics.wait_ended(self.lock, self.began, "not_acquired")
        if self.queue:
            with contextlib.suppress(LockError):  # the registration expires on its own
                await leave(self.lock.name, self.token)

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def acquire(self) -> bool:
        """Try, then wait for turns, until the lock is granted (the lock records the grant:
        True) or the wait is over (False). Another task of the running code's transaction
        that holds the lock (asyncio.gather under async_to_sync) is looked for often, never
        waited for: its release waits for the COMMIT, which waits for this task."""
        lock, backend = self.lock, self.operations
        attempt = self.guarded(backend.try_acquire, self.request())
        while not attempt.acquired:
            block = self.next_block(attempt)
            if block is None:
                self.give_up(backend.leave)
                return False
            if held_in_transactions_here(lock._resource()):
                # Another task of this transaction holds it (asyncio.gather): its release
                # waits for the COMMIT, which waits for this task, so look for that release
                # often, and take it back as soon as it is made.
                held = waiting_release(lock._resource())
                if held is not None and take_back_from_queue(lock, backend, self.token, held):
                    return True
                block = min(block, SIBLING_LOOK)
            elif lock.shared and held_in_transactions_here((lock.kind, lock.using, lock.name)):
                # Another task of this transaction holds the exclusive lock: once it has
                # released (its release waits for the COMMIT, which waits for this task),
                # downgrade that hold, as the same transaction, instead of waiting for it (a
                # downgrade is a try's, never a waiter's: leave the queue first).
                self.downgrade_from = waiting_in_this_transaction(lock)
                if self.downgrade_from:
                    with contextlib.suppress(LockError):
                        backend.leave(lock.name, self.token)
                    attempt = self.guarded(backend.try_acquire, self.request())
                    continue
                block = min(block, SIBLING_LOOK)
            elif (
                not lock.shared
                and shared.holds
                and held_in_transactions_here(("shared", lock.using, lock.name))
            ):
                # Another task of this transaction holds the shared lock: once it has
                # released (its release waits for the COMMIT, which waits for this task), this
                # exclusive request would wait for itself: refused then, as it is at once.
                if waiting_release(("shared", lock.using, lock.name)) is not None:
                    with contextlib.suppress(LockError):
                        backend.leave(lock.name, self.token)
                    shared.refuse_upgrade(lock.kind, lock.using, lock.name, shared.current_owner())
                block = min(block, SIBLING_LOOK)
            # Wait to be handed the lock, and claim it, in one call (one round trip on one
            # server); the reply tells whether this object holds it now.
            attempt = self.guarded(backend.acquire_when_free, self.waiting(), block)
        lock._take(self, attempt)
        return True

    def guarded(self, call: Callable[..., Attempt], *args: Any) -> Attempt:
        """Return ``call(*args)``. When it does not return (the server did not answer, or a
        signal, KeyboardInterrupt or task cancellation cut the wait short), the server may
        have granted the lock all the same: give it back before the error goes on."""
        try:
            attempt = call(*args)
        except BaseException:
            self._abandon()
            self.errored()
            raise
        if attempt.acquired and (self._outlived(attempt) or self._late()):
            self._forget_maybe_granted()
            return TOO_LATE
        return attempt

    def _abandon(self) -> None:
        """An acquire that ends in an error: give back what the server may have granted, and
        leave the queue, where a release may have reserved the lock for this token (release
        answers 0 for a reservation and leaves it; leave_queue hands it on at once rather than
        after the grace). Only when the server answered the release: an unreachable server
        costs no second wait, and the registration ends on its own (docs/protocol.md, "The
        error path")."""
        with contextlib.suppress(LockError):
            self.operations.release(self.lock.name, self.token)
            if self.queue:
                self.operations.leave(self.lock.name, self.token)

    def _forget_maybe_granted(self) -> None:
        # The server may have granted the lock before the reply was lost: free it if it can
        # be reached; otherwise the lease ends it. Never report it as acquired.
        with contextlib.suppress(LockError):
            self.operations.release(self.lock.name, self.token)

    def give_up(self, leave: Callable[[str, str], None]) -> None:
        if metrics.ENABLED:
            metrics.wait_ended(self.lock, self.began, "not_acquired")
        if self.queue:
            with contextlib.suppress(LockError):  # the registration expires on its own
                leave(self.lock.name, self.token)

    # unasync: end
