"""The acquire path, from the public call's checks to the grant: ``Lock.acquire`` and
``Lock.aacquire`` (lock_calls.py) are one call to :func:`acquire` / :func:`aacquire` here.

- The checks before the first attempt: an upgrade refused, a release of the same transaction
  taken back, an ended lease forgotten, reentry, "already held", a snapshot warning.
- Taking back a lock whose release waits for a transaction the running code is in (the same
  transaction asks again): the waiting release is cancelled and the lease renewed, or the
  loss reported. Code of the same transaction that asks for the lock again (an order met
  twice, another task of it under ``asyncio.gather``) holds it again at once, as the
  database's own locks stack within a session, instead of waiting for its own COMMIT
  (docs/transactions.md). Which release waits, and for which transactions: the Lock's ties
  (transactions.LockTies).
- ``Attempts``, the call after its checks: its loop of tries and waits for a turn, the token
  and requests it sends, how long each wait blocks, and what becomes of a grant that came
  too late or of a call cut short (given back, so that nothing is held that the caller does
  not know of). ``Lock._take`` (lock.py) records the grant.

The path is written once, async; its sync twin, after each "Generated from the async source
above" line, is scripts/unasync.py's output (``make generate``), never edited by hand. So
the sync and async halves of this module are one source, not two copies: the duplicates
tool pairs them, and that pair stays. ``lock`` is the Lock (or Semaphore) that asks, and
``held`` a Lock whose release waits (often the same object): neither is imported here,
since lock.py imports this module.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from . import claims, metrics, shared
from .backends.base import DRIFT_FACTOR, HANDOFF_GRACE_MS, Attempt, BaseLockBackend, lease_end
from .backends.operations import Operations, Request
from .exceptions import LockError
from .info import _thread_metadata
from .signals import lock_contended
from .tokens import NON_FAIR_MARK, SHARED_MARK, new_token
from .transactions import (
    anote_loop_thread,
    anote_sync_thread,
    answer_pending,
    awaiting,
    held_in_transactions_here,
    loops_of_async_to_sync,
    note_loop_thread,
    note_sync_thread,
    running_loop,
    tied,
    transactions_entered,
    waiting_release,
)
from .validation import seconds

# acquire()'s ``wait`` when the caller passes none: the Lock's own (``Lock.wait``).
UNSET: Any = object()
# A waiter stays registered this much longer than it blocks, so a release never misses it.
PATIENCE_MARGIN = 1.0


# --- the call: its checks before the first attempt ----------------------------------------
# Each async function and method of this module is the source of the sync twin generated
# after it (make generate): the acquire path is written once, so the pair duplicates finds
# in this module (async ~ sync) stays.
# unasync: the async source of the sync code after it
async def aacquire(lock: Any, wait: float | None) -> bool:
    """Acquire ``lock``, waiting up to ``wait`` seconds (UNSET: its own ``wait``); return
    True if acquired. The whole of the Lock's acquire call (lock_calls.py)."""
    began = time.monotonic() if metrics.ENABLED else 0.0  # metrics.now(), without a call
    if transactions_entered():  # (a builtin: no frame when no transaction was ever entered)
        await anote_sync_thread()  # whether its ORM calls run in the transaction it names
    elif running_loop() in loops_of_async_to_sync:  # (no loop, None: never in it)
        await anote_loop_thread()  # the transactions of the thread its ORM calls go to
    try:
        if shared.holds and not lock.shared:  # a process holding no shared lock skips it
            await shared.arefuse_upgrade(lock.kind, lock.using, lock.name, shared.current_owner())
        if tied or awaiting:  # a hold tied to a transaction, or a release awaiting its answer
            held = lock._ties.waiting_release(lock)
            if held is not None and await atake_back(lock, held):
                return True
        if lock.token is not None or lock.fence:  # a new Lock has nothing to forget
            _forget_an_ended_lease(lock)
        if lock.token is not None:
            if lock.reentrant and await _areenter(lock, _check_reentry(lock)):
                return True
            if not lock.reentrant and lock._is_mine(
                await lock.operations.aholder(lock.name, lock.token)
            ):
                raise _already_held_error(lock)
            lock._forget()  # its hold ended on the server (force release, lease): anew
        lock._ties.warn_if_snapshot_predates(lock)
    except LockError:  # before the first attempt: a wait that ended in an error
        _record_error(lock, began)
        raise
    wait = lock.wait if wait is UNSET else _wait_argument(lock, wait)
    attempts = Attempts(lock, lock.operations, wait, began)
    return await attempts.aacquire()


async def _areenter(lock: Any, backend: Operations) -> bool:
    """Enter once more; return False if the hold has ended on the server."""
    started = time.monotonic()
    extended = await backend.aextend(lock.name, lock.token or "", lock._lease.ttl_ms, reenter=True)
    if extended:
        lock._after_extend(extended, started, reentered=True)
    return extended


# Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
def acquire(lock: Any, wait: float | None) -> bool:
    """Acquire ``lock``, waiting up to ``wait`` seconds (UNSET: its own ``wait``); return
    True if acquired. The whole of the Lock's acquire call (lock_calls.py)."""
    began = time.monotonic() if metrics.ENABLED else 0.0  # metrics.now(), without a call
    if transactions_entered():  # (a builtin: no frame when no transaction was ever entered)
        note_sync_thread()  # whether its ORM calls run in the transaction it names
    elif running_loop() in loops_of_async_to_sync:  # (no loop, None: never in it)
        note_loop_thread()  # the transactions of the thread its ORM calls go to
    try:
        if shared.holds and not lock.shared:  # a process holding no shared lock skips it
            shared.refuse_upgrade(lock.kind, lock.using, lock.name, shared.current_owner())
        if tied or awaiting:  # a hold tied to a transaction, or a release awaiting its answer
            held = lock._ties.waiting_release(lock)
            if held is not None and take_back(lock, held):
                return True
        if lock.token is not None or lock.fence:  # a new Lock has nothing to forget
            _forget_an_ended_lease(lock)
        if lock.token is not None:
            if lock.reentrant and _reenter(lock, _check_reentry(lock)):
                return True
            if not lock.reentrant and lock._is_mine(lock.operations.holder(lock.name, lock.token)):
                raise _already_held_error(lock)
            lock._forget()  # its hold ended on the server (force release, lease): anew
        lock._ties.warn_if_snapshot_predates(lock)
    except LockError:  # before the first attempt: a wait that ended in an error
        _record_error(lock, began)
        raise
    wait = lock.wait if wait is UNSET else _wait_argument(lock, wait)
    attempts = Attempts(lock, lock.operations, wait, began)
    return attempts.acquire()


def _reenter(lock: Any, backend: Operations) -> bool:
    """Enter once more; return False if the hold has ended on the server."""
    started = time.monotonic()
    extended = backend.extend(lock.name, lock.token or "", lock._lease.ttl_ms, reenter=True)
    if extended:
        lock._after_extend(extended, started, reentered=True)
    return extended


# unasync: end


def _record_error(lock: Any, began: float) -> None:
    """Record a LockError raised before or during the attempts (an upgrade refused, the
    server unreachable) as a wait that ended in an error."""
    if metrics.ENABLED:
        metrics.wait_ended(lock, began, "error")


def _wait_argument(lock: Any, wait: Any) -> float | None:
    if wait is UNSET:
        return lock.wait
    return seconds("wait", wait, allow_none=True, allow_zero=True)


def _forget_an_ended_lease(lock: Any) -> None:
    """Drop a non-reentrant hold whose lease has ended (run out, or lost): the Lock then
    competes for the lock like any other contender instead of "already holding" it. Its
    lease is known to have ended: the local deadline is measured from before the acquire was
    sent, so it passes no later than the server's. A fence kept after the lease was found
    gone ends here: the holder starts anew."""
    if lock.token is None:
        if lock.fence:
            claims.forget_fenced(lock)
        return
    if lock.reentrant:
        return
    if lock._lease.lost or time.monotonic() >= lock._lease.deadline:
        lock._forget()


def _already_held_error(lock: Any) -> LockError:
    return LockError(lock._already_held.format(name=lock.name), name=lock.name)


def _check_reentry(lock: Any) -> Operations:
    if lock._owner != shared.current_owner():
        raise LockError(
            f"{lock.name!r} is held through this Lock object by another thread or task; "
            "each thread or task that competes for a lock needs its own Lock object.",
            name=lock.name,
        )
    if lock._lease.lost:
        raise lock._lease.lost_error(lock)
    assert lock._operations is not None
    return lock._operations


# --- taking back a release that waits for this transaction ---------------------------------
# unasync: the async source of the sync code after it
async def atake_back(lock: Any, held: Any) -> bool:
    """Hold again, at once, the lock whose release waits for this thread's transaction
    (an order met twice in one transaction), as the database's own locks stack within a
    session. Return False if that hold has ended meanwhile."""
    ttl_ms = _stop_waiting(lock, held)
    if ttl_ms is None:
        return False
    started = time.monotonic()
    try:
        extended = await held.operations.aextend(lock.name, held.token or "", ttl_ms)
    except BaseException:
        held._forget()
        raise
    return _adopt(lock, held, extended, started, ttl_ms)


async def atake_back_from_queue(lock: Any, operations: Operations, token: str, held: Any) -> bool:
    """Leave the server's queue of waiters (as ``token``), then take ``held``'s waiting
    release back."""
    with contextlib.suppress(LockError):  # the registration expires on its own
        await operations.aleave(lock.name, token)
    return await atake_back(lock, held)


# Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
def take_back(lock: Any, held: Any) -> bool:
    """Hold again, at once, the lock whose release waits for this thread's transaction
    (an order met twice in one transaction), as the database's own locks stack within a
    session. Return False if that hold has ended meanwhile."""
    ttl_ms = _stop_waiting(lock, held)
    if ttl_ms is None:
        return False
    started = time.monotonic()
    try:
        extended = held.operations.extend(lock.name, held.token or "", ttl_ms)
    except BaseException:
        held._forget()
        raise
    return _adopt(lock, held, extended, started, ttl_ms)


def take_back_from_queue(lock: Any, operations: Operations, token: str, held: Any) -> bool:
    """Leave the server's queue of waiters (as ``token``), then take ``held``'s waiting
    release back."""
    with contextlib.suppress(LockError):  # the registration expires on its own
        operations.leave(lock.name, token)
    return take_back(lock, held)


# unasync: end


def _stop_waiting(lock: Any, held: Any) -> int | None:
    """Cancel ``held``'s waiting release; return ``lock``'s lease (ms), or None when the
    release has begun already."""
    if not held._ties.resume():
        return None
    operations = held.operations
    return operations.lease_ms(lock.ttl if lock.ttl is not None else operations.default_timeout)


def _adopt(lock: Any, held: Any, extended: bool, started: float, ttl_ms: int) -> bool:
    """``lock`` holds ``held``'s hold again, its lease renewed to ``ttl_ms`` from ``started``;
    or, when the renewal found it gone, nobody does (return False)."""
    if not extended:  # its lease ended while its release waited for the transaction
        if held._lease.lost_while_waiting(held):  # the renewer's look had not found it
            held._report_lost()
        held._forget()
        return False
    lock._hold_again(held, ttl_ms, lease_end(started, ttl_ms))
    return True


# --- the attempts ----------------------------------------------------------------------------
def _new_token(lock: Any, backend: BaseLockBackend) -> str:
    """Return a new token for one acquire of ``lock`` on ``backend``, marked for the scripts
    when the hold is shared or non-fair (distlock.tokens)."""
    if lock.shared:
        return SHARED_MARK + new_token()
    if lock.kind != "lock":  # a semaphore's permit: first come, first served
        return new_token()
    fair = lock.fair if lock.fair is not None else backend.fair
    if fair:
        return new_token()
    if backend.no_non_fair:
        raise backend.non_fair_not_supported()
    return NON_FAIR_MARK + new_token()


# How often (s) a task waiting for a lock that another task of its transaction holds looks
# for that task's release (asyncio.gather under async_to_sync): it never reaches the server.
SIBLING_LOOK = 0.05
# How often (s) a task whose question to asgiref is not answered yet looks for a release of
# its own transaction to take back (transactions.anote_sync_thread: the answer may come
# late, or never: a coroutine the request's thread waits for, where this bounds the cost of
# the wait to a few calls a second).
ANSWER_LOOK = 0.25
# An acquire whose reply came too late to leave any lease: treated as not acquired.
TOO_LATE = Attempt(False, holder_pttl_ms=0)


def waiting_in_this_transaction(lock: Any) -> str:
    """Return the token of the exclusive hold of ``lock``'s name whose release waits for a
    transaction the running code is in, '' if none: released in another thread of that
    transaction (async_to_sync), it is this code's own hold, to downgrade, never to wait for."""
    held = waiting_release((lock.kind, lock.using, lock.name))
    return str(held.token) if held is not None and held.token else ""


class Attempts:
    """One acquire() call after its checks (made by :func:`aacquire`): its state, and its
    loop of tries and waits. ``lock``'s settings are read (``name``, ``shared``, ``ttl``,
    ...)."""

    def __init__(self, lock: Any, operations: Operations, wait: float | None, began: float) -> None:
        self.lock = lock
        self.operations = operations
        # Its settings read on the backend itself, not through the kind's forwarders (a call
        # each, on every acquire).
        self.backend: BaseLockBackend = operations.backend  # type: ignore[assignment]
        # 128 random bits: unguessable, never reused; a shared holder's marked for the scripts
        self.token = _new_token(lock, self.backend)
        ttl = lock.ttl if lock.ttl is not None else self.backend.default_timeout
        self.ttl_ms = self.backend.lease_ms(ttl)  # also enforces the alias's MAX_TTL
        # The running thread: its name is in the metadata, and the grant notes it as the owner.
        self.thread = threading.current_thread()
        self.meta = _thread_metadata(self.thread, lock.purpose)
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
        self.answer_awaited = False  # a turn found this task's question unanswered
        self.started = 0.0
        self.lease_until = 0.0  # the local end of a granted attempt's lease (_unusable)
        self.began = began  # metrics.now() when acquire() was called (0.0: nothing recorded)
        # A moment of the server's clock and a local time before it: (monotonic, server ms).
        self.clock: tuple[float, int] | None = None

    def request(self) -> Request:
        """Return the request of a try_acquire call, sent now (no grant yet)."""
        self.started = started = time.monotonic()
        # How long (ms) the server keeps this waiter registered: until the next call can
        # renew it, so a release never misses it, and a dead waiter is forgotten soon after.
        patience = 0
        if self.queue:
            block = min(self.deadline - started, self.backend.max_block)  # from the send
            patience = round((max(block, 0) + PATIENCE_MARGIN) * 1000)
        name, token, ttl_ms, meta = self.lock.name, self.token, self.ttl_ms, self.meta
        # tuple.__new__, as Request's own __new__ calls it, without that Python frame (every
        # acquire: it cost 4,000 instructions, this 1,700). Every field given, in order.
        fields = (name, token, ttl_ms, meta, patience, self.limit, self.downgrade_from)
        return tuple.__new__(Request, fields)

    def waiting(self) -> Request:
        """Return the request of an acquire_when_free call (its timeout goes beside it)."""
        self.waited = True
        return self.request()

    def lease_started(self, attempt: Attempt, now: float) -> float:
        """Return a local time no later than when the server granted ``attempt``'s lease:
        the request's send time, or later when the server's clock shows it ran later (a wait
        that blocked before it acquired). The server's time since the clock pair is counted
        at 1 - DRIFT_FACTOR on this clock, which may run that much slower than the server's
        (counted at one rate, a 1% slow clock placed a 10 s wait's grant 100 ms late). A
        projection later than ``now`` (the grant's reply read) means the server's clock, a
        wall clock, stepped forward during the wait (NTP, a VM's clock set after a pause): it
        would place the start that much late, so the send time is the start."""
        sent = attempt.sent or self.started
        if self.clock is None or not attempt.acquired_ms:
            return sent
        local, server_ms = self.clock  # server_ms was read after ``local``
        waited_ms = (attempt.acquired_ms - server_ms) * (1 - DRIFT_FACTOR)
        projected = max(sent, local + (waited_ms - 1) / 1000)
        return sent if projected > now else projected

    def next_block(self, attempt: Attempt) -> float | None:
        """Return how long to wait for a turn, or None to give up."""
        if attempt.server_ms and self.clock is None:
            self.clock = (self.started, attempt.server_ms)
        if not self.contended:
            self.contended = True
            # Nobody connected (the usual case): not even the sender is looked up.
            sender = self.operations.signal_sender if lock_contended.receivers else None
            if sender is not None and lock_contended.has_listeners(sender):
                lock_contended.send(sender, name=self.lock.name, alias=self.lock.using, info=None)
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return None
        # Wake when the holder's lease ends at the latest: a crashed holder never releases.
        holder_left = max(attempt.holder_pttl_ms, 1) / 1000 + 0.002
        block = min(remaining, holder_left, self.backend.max_block)
        if attempt.place == 1:
            # Next in line: look again once a handover's grace is over, in case the lock was
            # handed to a waiter that died while queued (it never claims it).
            block = min(block, HANDOFF_GRACE_MS / 1000)
        return block

    def _unusable(self, attempt: Attempt) -> bool:
        """Return True if a granted ``attempt`` cannot be kept, read on one clock reading:

        - it arrived with no lease left to use: less than the drift allowance (DRIFT_FACTOR
          of the lease + DRIFT_MS), so that acquire() never returns True for a lease that
          ends as it returns;
        - a wait brought it after the wait had ended: it is handed on (released, so the next
          waiter gets it), never kept, so that acquire(wait=W) means "held within W" on
          every backend and kind. (The first attempt's grant is kept however long its reply
          took: wait=0 tries once.)"""
        # Kept for the grant (Lock._take): the lease it records ends at the same time.
        # lease_started() without its call when no server clock was noted (every first try)
        now = time.monotonic()
        started = (
            (attempt.sent or self.started)
            if self.clock is None
            else self.lease_started(attempt, now)
        )
        self.lease_until = lease_end(started, self.ttl_ms)
        return now >= self.lease_until or (self.waited and now > self.deadline)

    # Written once: the sync loop after it is generated (see the module's docstring).
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
            if (tied or awaiting) and (self.answer_awaited or answer_pending()):
                # This task's question (which thread its ORM calls go to) is not answered
                # yet: a release of its own transaction, waiting for the COMMIT that waits
                # for this task, may be its to take back once the answer comes (a question
                # that waited behind other code on its thread, or on the event loop). Look
                # for it each turn while the answer is awaited, and once after it came;
                # also while a release awaits an answer of its own (looked for only once
                # something was tied, an answer that came meanwhile went unnoted: the
                # eleventh adversary's child task and second callback waited for a COMMIT
                # that waited for them).
                self.answer_awaited = answer_pending()
                if running_loop() in loops_of_async_to_sync:
                    await anote_loop_thread()  # a late answer of its thread's transactions
                held = waiting_release(lock._resource())
                if held is not None and await atake_back_from_queue(
                    lock, backend, self.token, held
                ):
                    return True
                if self.answer_awaited:
                    block = min(block, ANSWER_LOOK)
            if awaiting:
                # A release awaiting its answer (a bridged coroutine's, its thread busy) may be
                # this code's to take back: its thread may be busy with this very code.
                held = waiting_release(lock._resource())
                if held is not None and await atake_back_from_queue(
                    lock, backend, self.token, held
                ):
                    return True
                if awaiting.get(lock._resource()):
                    block = min(block, SIBLING_LOOK)
            if not tied:
                pass  # no hold of this process is tied to a transaction: none to look for
            elif held_in_transactions_here(lock._resource()):
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
            _record_error(self.lock, self.began)
            raise
        if attempt.acquired and self._unusable(attempt):
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
            if (tied or awaiting) and (self.answer_awaited or answer_pending()):
                # This task's question (which thread its ORM calls go to) is not answered
                # yet: a release of its own transaction, waiting for the COMMIT that waits
                # for this task, may be its to take back once the answer comes (a question
                # that waited behind other code on its thread, or on the event loop). Look
                # for it each turn while the answer is awaited, and once after it came;
                # also while a release awaits an answer of its own (looked for only once
                # something was tied, an answer that came meanwhile went unnoted: the
                # eleventh adversary's child task and second callback waited for a COMMIT
                # that waited for them).
                self.answer_awaited = answer_pending()
                if running_loop() in loops_of_async_to_sync:
                    note_loop_thread()  # a late answer of its thread's transactions
                held = waiting_release(lock._resource())
                if held is not None and take_back_from_queue(lock, backend, self.token, held):
                    return True
                if self.answer_awaited:
                    block = min(block, ANSWER_LOOK)
            if awaiting:
                # A release awaiting its answer (a bridged coroutine's, its thread busy) may be
                # this code's to take back: its thread may be busy with this very code.
                held = waiting_release(lock._resource())
                if held is not None and take_back_from_queue(lock, backend, self.token, held):
                    return True
                if awaiting.get(lock._resource()):
                    block = min(block, SIBLING_LOOK)
            if not tied:
                pass  # no hold of this process is tied to a transaction: none to look for
            elif held_in_transactions_here(lock._resource()):
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
            _record_error(self.lock, self.began)
            raise
        if attempt.acquired and self._unusable(attempt):
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
