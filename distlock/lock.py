"""The lock: acquire with a lease, token-checked release and extend, sync and async."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import logging
import math
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from . import claims, handler, metrics, shared
from .backends.base import DRIFT_FACTOR, HANDOFF_GRACE_MS, Attempt, BaseLockBackend, lease_end
from .backends.operations import Operations, Request
from .exceptions import LockError, LockNotAcquired, LockNotOwned
from .info import LockInfo, from_milliseconds, holder_metadata
from .keys import validate_name
from .lease import Lease
from .signals import lock_acquired, lock_contended, lock_lost, lock_released
from .tokens import NON_FAIR_MARK, SHARED_MARK, new_token
from .transactions import LockTies, held_in_transactions_here, waiting_release
from .validation import check_options, lease_milliseconds, seconds

logger = logging.getLogger("distlock")
F = TypeVar("F", bound=Callable[..., Any])
_UNSET: Any = object()
# A waiter stays registered this much longer than it blocks, so a release never misses it.
PATIENCE_MARGIN = 1.0


class Lock:
    """A named lock with a lease, held by this object (never by a thread or task).

    Make one with :func:`distlock.lock`. Use it as a context manager (``with``/``async
    with``), a decorator, or through ``acquire()``/``release()`` and their async twins.
    """

    kind = "lock"  # what the name names: a lock and a semaphore of one name are unrelated
    # What acquiring again through the object that holds it says (.format(name=...)).
    # The settings copy() carries over: the keyword arguments of __init__.
    _copied: tuple[str, ...] = (
        "ttl",
        "wait",
        "auto_renew",
        "reentrant",
        "on_lost",
        "using",
        "purpose",
        "hold_until_commit",
        "shared",
        "metric_name",
        "fence",
        "fair",
    )
    _already_held = (
        "This Lock object already holds {name!r}. Release it first, make it with "
        "reentrant=True, or use another Lock object."
    )

    def __init__(
        self,
        name: str,
        *,
        ttl: float | None = None,
        wait: float | None = None,
        auto_renew: bool = False,
        reentrant: bool = False,
        on_lost: Callable[[Lock], Any] | None = None,
        using: str = "default",
        purpose: str | None = None,
        hold_until_commit: bool = True,
        shared: bool = False,
        metric_name: str | None = None,
        fence: bool = False,
        fair: bool | None = None,
    ) -> None:
        self.name = validate_name(name)
        self.ttl = seconds("ttl", ttl, allow_none=True)
        if self.ttl is not None:
            lease_milliseconds("ttl", self.ttl)
        self.wait = seconds("wait", wait, allow_none=True, allow_zero=True)
        check_options(
            auto_renew, reentrant, on_lost, using, purpose, hold_until_commit, shared,
            metric_name, fence, fair,
        )  # fmt: skip
        self.auto_renew = auto_renew
        self.reentrant = reentrant
        self.on_lost = on_lost
        self.using = using
        self.purpose = purpose
        self.hold_until_commit = hold_until_commit
        self.shared = shared  # a shared hold (one of many readers), else exclusive
        self.metric_name = metric_name  # distlock.name in the metrics (distlock.metrics)
        # Claim the fencing token in each database transaction of the holder (claims.py).
        self.fence = fence
        # True: first come, first served; False: a free lock goes to whoever asks first;
        # None: the alias's OPTIONS['FAIR'] (True unless set). Exclusive locks only.
        self.fair = fair
        self.token: str | None = None
        self.fencing_token: int | None = None
        self._operations: Operations | None = None
        self._acquired_ms = 0
        self._meta = ""
        self._depth = 0
        self._owner: tuple[int, int | None] | None = None
        # A shared holder's thread: its ident may be reused by a new thread once it ended.
        self._owner_thread: weakref.ref[threading.Thread] | None = None
        self._lease = Lease()  # its length, deadline, renewal, loss (lease.py)
        self._ties = LockTies(self._resource(), self._lease)  # to transactions (transactions.py)
        self._held_since = 0.0  # metrics.now() at the grant, when metrics are recorded

    def __repr__(self) -> str:
        state = f"held, fencing token {self.fencing_token}" if self.token else "not held"
        kind = " shared" if self.shared else ""
        return f"<Lock {self.name!r}{kind} using {self.using!r}: {state}>"

    @property
    def backend(self) -> BaseLockBackend:
        """The backend holding this lock, or the one the next acquire will use
        (``distlock.locks[using]``)."""
        if self._operations is not None:  # its operations name it by a protocol (no import back)
            return cast(BaseLockBackend, self._operations.backend)
        return handler.locks[self.using]

    @property
    def operations(self) -> Operations:
        """The operations of this lock's kind on that backend (``backend.exclusive``,
        ``.shared`` or ``.semaphores``): what acquire, release and extend call."""
        if self._operations is not None:
            return self._operations
        return handler.locks[self.using].of_kind("shared" if self.shared else self.kind)

    # --- acquire ------------------------------------------------------------------------
    # unasync: the async source of the sync code after it
    async def aacquire(self, wait: float | None = _UNSET) -> bool:
        """Acquire the lock, waiting up to ``wait`` seconds; return True if acquired."""
        began = metrics.now()
        try:
            if shared.holds and not self.shared:  # a process holding no shared lock skips it
                await shared.arefuse_upgrade(self.kind, self.using, self.name, _current_owner())
            held = self._ties.waiting_release(self)
            if held is not None and await self._atake_back(held):
                return True
            self._forget_an_ended_lease()
            if self.token is not None:
                if self.reentrant and await self._areenter(self._check_reentry()):
                    return True
                if not self.reentrant and self._is_mine(
                    await self.operations.aholder(self.name, self.token)
                ):
                    raise self._already_held_error()
                self._forget()  # its hold ended on the server (force release, lease): anew
            self._ties.warn_if_snapshot_predates(self)
        except LockError:  # before the first attempt: a wait that ended in an error
            self._record_error(began)
            raise
        attempts = _Attempts(self, self.operations, self._wait_argument(wait), began)
        backend = attempts.operations
        attempt = await attempts.aguarded(backend.atry_acquire, attempts.request())
        while not attempt.acquired:
            block = attempts.next_block(attempt)
            if block is None:
                await attempts.agive_up(backend.aleave)
                return False
            if held_in_transactions_here(self._resource()):
                # Another task of this transaction holds it (asyncio.gather): its release
                # waits for the COMMIT, which waits for this task, so look for that release
                # often, and take it back as soon as it is made.
                held = waiting_release(self._resource())
                if held is not None and await self._atake_back_from_queue(
                    backend, attempts.token, held
                ):
                    return True
                block = min(block, SIBLING_LOOK)
            elif self.shared and held_in_transactions_here((self.kind, self.using, self.name)):
                # Another task of this transaction holds the exclusive lock: once it has
                # released (its release waits for the COMMIT, which waits for this task),
                # downgrade that hold, as the same transaction, instead of waiting for it (a
                # downgrade is a try's, never a waiter's: leave the queue first).
                attempts.downgrade_from = _waiting_in_this_transaction(self)
                if attempts.downgrade_from:
                    with contextlib.suppress(LockError):
                        await backend.aleave(self.name, attempts.token)
                    attempt = await attempts.aguarded(backend.atry_acquire, attempts.request())
                    continue
                block = min(block, SIBLING_LOOK)
            elif (
                not self.shared
                and shared.holds
                and held_in_transactions_here(("shared", self.using, self.name))
            ):
                # Another task of this transaction holds the shared lock: once it has
                # released (its release waits for the COMMIT, which waits for this task), this
                # exclusive request would wait for itself: refused then, as it is at once.
                if waiting_release(("shared", self.using, self.name)) is not None:
                    with contextlib.suppress(LockError):
                        await backend.aleave(self.name, attempts.token)
                    await shared.arefuse_upgrade(self.kind, self.using, self.name, _current_owner())
                block = min(block, SIBLING_LOOK)
            # Wait to be handed the lock, and claim it, in one call (one round trip on one
            # server); the reply tells whether this object holds it now.
            attempt = await attempts.aguarded(backend.aacquire_when_free, attempts.waiting(), block)
        self._take(attempts, attempt)
        return True

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def acquire(self, wait: float | None = _UNSET) -> bool:
        """Acquire the lock, waiting up to ``wait`` seconds; return True if acquired."""
        began = metrics.now()
        try:
            if shared.holds and not self.shared:  # a process holding no shared lock skips it
                shared.refuse_upgrade(self.kind, self.using, self.name, _current_owner())
            held = self._ties.waiting_release(self)
            if held is not None and self._take_back(held):
                return True
            self._forget_an_ended_lease()
            if self.token is not None:
                if self.reentrant and self._reenter(self._check_reentry()):
                    return True
                if not self.reentrant and self._is_mine(
                    self.operations.holder(self.name, self.token)
                ):
                    raise self._already_held_error()
                self._forget()  # its hold ended on the server (force release, lease): anew
            self._ties.warn_if_snapshot_predates(self)
        except LockError:  # before the first attempt: a wait that ended in an error
            self._record_error(began)
            raise
        attempts = _Attempts(self, self.operations, self._wait_argument(wait), began)
        backend = attempts.operations
        attempt = attempts.guarded(backend.try_acquire, attempts.request())
        while not attempt.acquired:
            block = attempts.next_block(attempt)
            if block is None:
                attempts.give_up(backend.leave)
                return False
            if held_in_transactions_here(self._resource()):
                # Another task of this transaction holds it (asyncio.gather): its release
                # waits for the COMMIT, which waits for this task, so look for that release
                # often, and take it back as soon as it is made.
                held = waiting_release(self._resource())
                if held is not None and self._take_back_from_queue(backend, attempts.token, held):
                    return True
                block = min(block, SIBLING_LOOK)
            elif self.shared and held_in_transactions_here((self.kind, self.using, self.name)):
                # Another task of this transaction holds the exclusive lock: once it has
                # released (its release waits for the COMMIT, which waits for this task),
                # downgrade that hold, as the same transaction, instead of waiting for it (a
                # downgrade is a try's, never a waiter's: leave the queue first).
                attempts.downgrade_from = _waiting_in_this_transaction(self)
                if attempts.downgrade_from:
                    with contextlib.suppress(LockError):
                        backend.leave(self.name, attempts.token)
                    attempt = attempts.guarded(backend.try_acquire, attempts.request())
                    continue
                block = min(block, SIBLING_LOOK)
            elif (
                not self.shared
                and shared.holds
                and held_in_transactions_here(("shared", self.using, self.name))
            ):
                # Another task of this transaction holds the shared lock: once it has
                # released (its release waits for the COMMIT, which waits for this task), this
                # exclusive request would wait for itself: refused then, as it is at once.
                if waiting_release(("shared", self.using, self.name)) is not None:
                    with contextlib.suppress(LockError):
                        backend.leave(self.name, attempts.token)
                    shared.refuse_upgrade(self.kind, self.using, self.name, _current_owner())
                block = min(block, SIBLING_LOOK)
            # Wait to be handed the lock, and claim it, in one call (one round trip on one
            # server); the reply tells whether this object holds it now.
            attempt = attempts.guarded(backend.acquire_when_free, attempts.waiting(), block)
        self._take(attempts, attempt)
        return True

    # unasync: end

    def _record_error(self, began: float) -> None:
        """Record a LockError raised before the first attempt (an upgrade refused, the
        server unreachable) as a wait that ended in an error, as the attempts' own are."""
        if metrics.ENABLED:
            metrics.wait_ended(self, began, "error")

    def _wait_argument(self, wait: Any) -> float | None:
        if wait is _UNSET:
            return self.wait
        return seconds("wait", wait, allow_none=True, allow_zero=True)

    def _take(self, attempts: _Attempts, attempt: Attempt) -> None:
        """Record a granted lock (only after the server said so)."""
        self._operations = attempts.operations
        self.token = attempts.token
        self.fencing_token = attempt.fencing_token
        self._lease.ttl_ms = attempts.ttl_ms
        self._acquired_ms = attempt.acquired_ms
        self._meta = attempts.meta
        self._depth = 1
        self._owner = _current_owner()  # the downgrade, reentrancy and the upgrade check read it
        self._owner_thread = weakref.ref(threading.current_thread())
        if self.shared:
            shared.note_hold(self)
        else:
            shared.note_exclusive(self, self._owner)
        self._lease.start(self, lease_end(attempts.lease_started(attempt), attempts.ttl_ms))
        self._ties.tie(self)
        if self.fence:
            claims.note_fenced(self)
        if metrics.ENABLED:
            self._held_since = metrics.now()
            metrics.wait_ended(self, attempts.began, "acquired")
        self._send(lock_acquired)

    def _forget_an_ended_lease(self) -> None:
        """Drop a non-reentrant hold whose lease has ended (run out, or lost): this object
        then competes for the lock like any other contender instead of "already holding" it.
        Its lease is known to have ended: the local deadline is measured from before the
        acquire was sent, so it passes no later than the server's. A fence kept after the
        lease was found gone ends here: the holder starts anew."""
        if self.token is None:
            if self.fence:
                claims.forget_fenced(self)
            return
        if self.reentrant:
            return
        if self._lease.lost or time.monotonic() >= self._lease.deadline:
            self._forget()

    def _already_held_error(self) -> LockError:
        return LockError(self._already_held.format(name=self.name), name=self.name)

    def _check_reentry(self) -> Operations:
        if self._owner != _current_owner():
            raise LockError(
                f"{self.name!r} is held through this Lock object by another thread or task; "
                "each thread or task that competes for a lock needs its own Lock object.",
                name=self.name,
            )
        if self._lease.lost:
            raise self._lease.lost_error(self)
        assert self._operations is not None
        return self._operations

    # unasync: the async source of the sync code after it
    async def _areenter(self, backend: Operations) -> bool:
        """Enter once more; return False if the hold has ended on the server."""
        started = time.monotonic()
        extended = await backend.aextend(
            self.name, self.token or "", self._lease.ttl_ms, reenter=True
        )
        if extended:
            self._after_extend(extended, started, reentered=True)
        return extended

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def _reenter(self, backend: Operations) -> bool:
        """Enter once more; return False if the hold has ended on the server."""
        started = time.monotonic()
        extended = backend.extend(self.name, self.token or "", self._lease.ttl_ms, reenter=True)
        if extended:
            self._after_extend(extended, started, reentered=True)
        return extended

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
        with self._lease.mutex:
            if self.fence and (self.token is None or self._lease.lost):
                claims.forget_fenced(self)  # the holder ends its hold: its fence too
            backend, token = self._holding()
            final = self._depth <= 1
            self._lease.releasing = final  # from here on, the renewer leaves this lock alone
            self._lease.release_began = time.monotonic()
            return backend, token, final

    def _abort_release(self, final: bool) -> None:
        if final:
            with self._lease.mutex:
                self._lease.releasing = False
                # The request may have freed the lock before its answer was lost. It was sent
                # while the lease ran, so a retry that finds the lock gone must not report an
                # expired lease: the holder finished in time either way.
                if self._lease.release_began < self._lease.deadline:
                    self._lease.released_in_time = True

    def _end_release(self, outcome: int) -> None:
        if outcome == 2:
            self._depth -= 1
            return
        # Nobody connected (the usual case): no sender, no LockInfo, no send.
        sender = _sender(self._operations) if lock_released.receivers else None
        info = self._local_info() if lock_released.has_listeners(sender) else None
        in_time = self._lease.released_in_time
        self._forget()
        if outcome == 0 and not in_time:
            raise self._lease.expired_error(self, "release")
        if sender is not None:
            lock_released.send(sender, name=self.name, alias=self.using, info=info)

    # --- database transactions (the ties and the waiting release: transactions.LockTies) ---
    def _resource(self) -> tuple[str, str, str]:
        # A shared hold is not the exclusive lock: a transaction takes back only its own kind.
        return "shared" if self.shared else self.kind, self.using, self.name

    # unasync: the async source of the sync code after it
    async def _atake_back(self, held: Lock) -> bool:
        """Hold again, at once, the lock whose release waits for this thread's transaction
        (an order met twice in one transaction), as the database's own locks stack within a
        session. Return False if that hold has ended meanwhile."""
        ttl_ms = self._stop_waiting(held)
        if ttl_ms is None:
            return False
        started = time.monotonic()
        try:
            extended = await held.operations.aextend(self.name, held.token or "", ttl_ms)
        except BaseException:
            held._forget()
            raise
        return self._adopt(held, extended, started, ttl_ms)

    async def _atake_back_from_queue(self, backend: Operations, token: str, held: Lock) -> bool:
        """Leave the server's queue of waiters (as ``token``), then take ``held``'s waiting
        release back."""
        with contextlib.suppress(LockError):  # the registration expires on its own
            await backend.aleave(self.name, token)
        return await self._atake_back(held)

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def _take_back(self, held: Lock) -> bool:
        """Hold again, at once, the lock whose release waits for this thread's transaction
        (an order met twice in one transaction), as the database's own locks stack within a
        session. Return False if that hold has ended meanwhile."""
        ttl_ms = self._stop_waiting(held)
        if ttl_ms is None:
            return False
        started = time.monotonic()
        try:
            extended = held.operations.extend(self.name, held.token or "", ttl_ms)
        except BaseException:
            held._forget()
            raise
        return self._adopt(held, extended, started, ttl_ms)

    def _take_back_from_queue(self, backend: Operations, token: str, held: Lock) -> bool:
        """Leave the server's queue of waiters (as ``token``), then take ``held``'s waiting
        release back."""
        with contextlib.suppress(LockError):  # the registration expires on its own
            backend.leave(self.name, token)
        return self._take_back(held)

    # unasync: end

    def _stop_waiting(self, held: Lock) -> int | None:
        """Cancel ``held``'s waiting release; return this lock's lease (ms), or None when the
        release has begun already."""
        if not held._ties.resume():
            return None
        backend = held.operations
        return backend.lease_ms(self.ttl if self.ttl is not None else backend.default_timeout)

    def _adopt(self, held: Lock, extended: bool, started: float, ttl_ms: int) -> bool:
        if not extended:  # its lease ended while its release waited for the transaction
            if held._lease.lost_while_waiting(held):  # the renewer's look had not found it
                held._report_lost()
            held._forget()
            return False
        if held is not self:
            self._operations, self.token = held._operations, held.token
            self.fencing_token, self._acquired_ms = held.fencing_token, held._acquired_ms
            self._meta = held._meta
            self._held_since, held._held_since = held._held_since, 0.0  # one hold, not two
            self._ties.adopt(held._ties, self)  # its ties to transactions too
            held._forget()
        elif not self.auto_renew:  # no more keep-alive
            self._lease.stop_renewing()
        self._lease.ttl_ms, self._depth, self._lease.lost = ttl_ms, 1, False
        self._owner = _current_owner()
        self._owner_thread = weakref.ref(threading.current_thread())
        if self.shared:
            shared.note_hold(self)
        else:
            shared.note_exclusive(self, self._owner)
        self._lease.deadline = lease_end(started, ttl_ms)
        if self.auto_renew and self._lease.renewal is None:
            self._lease.start_renewing(self)
        self._ties.tie(self)  # stacks: a tie made earlier keeps its shallower block
        if self.fence:
            claims.note_fenced(self)
        return True

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

    # --- state --------------------------------------------------------------------------
    # unasync: the async source of the sync code after it
    async def alocked(self) -> bool:
        """Return True if anyone holds the lock."""
        return await self.operations.aholder(self.name, self.token) is not None

    async def aowned(self) -> bool:
        """Return True if this object holds the lock, as the server sees it."""
        return self.token is not None and self._is_mine(
            await self.operations.aholder(self.name, self.token)
        )

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def locked(self) -> bool:
        """Return True if anyone holds the lock."""
        return self.operations.holder(self.name, self.token) is not None

    def owned(self) -> bool:
        """Return True if this object holds the lock, as the server sees it."""
        return self.token is not None and self._is_mine(
            self.operations.holder(self.name, self.token)
        )

    # unasync: end

    def ttl_remaining(self) -> float | None:
        """Return the seconds left on this object's lease, or None if it does not hold it."""
        if self.token is None:
            return None
        info = self.operations.holder(self.name, self.token)
        return info.ttl_remaining if info is not None and self._is_mine(info) else None

    def lease_left(self) -> float:
        """Return the seconds this object can count on its lease, by this process's
        monotonic clock and without a round trip: 0.0 when it does not hold the lock or a
        renewal found the lease gone.

        The count starts before each acquire or renewal was sent and runs 1% short of the
        lease, so the server's lease never ends before it (unless the lock is
        force-released) while this clock runs within 1% of the server's, however long the
        acquire waited; after a pause longer than the lease (SIGSTOP, a stopped VM) it is 0.0
        as soon as the process runs again.
        """
        return 0.0 if self.token is None else self._lease.left()

    def holds_for(self, owner: tuple[int, int | None]) -> bool:
        """Return True if this lock (either kind) is held, by ``owner`` (a thread and task),
        with a lease not known to have ended or a release waiting for a transaction."""
        if self._owner != owner or self._owner_thread is None:
            return False
        thread = self._owner_thread()  # the owner's, not a new thread given its ident
        alive = thread is not None and thread.is_alive()
        return alive and (self._ties.pending is not None or self.lease_left() > 0)

    def _is_mine(self, info: LockInfo | None) -> bool:
        return info is not None and info.token == self.token

    def _holding(self) -> tuple[Operations, str]:
        if self._lease.lost:
            self._forget(fence_ends=False)  # the code that catches this is still fenced
            raise self._lease.lost_error(self)
        if self.token is None or self._operations is None:
            raise LockNotOwned(f"This Lock object does not hold {self.name!r}.", name=self.name)
        return self._operations, self.token

    def _forget(self, *, fence_ends: bool = True) -> None:
        """Drop the hold. ``fence_ends=False``: the hold ended without its holder ending it
        (the lease was found gone): a fenced lock goes on fencing the holder's transactions
        until release() or a new acquire (claims.py)."""
        if self._held_since:  # however the hold ended: released, lost, run out, given up
            # A lease that ran out (or was lost) ended by its deadline at the latest.
            metrics.hold_ended(self, self._held_since, min(time.monotonic(), self._lease.deadline))
            self._held_since = 0.0
        self._ties.drop()
        if self.fence and fence_ends:
            claims.forget_fenced(self)
        self._lease.stop_renewing()
        if self.shared:
            shared.forget_hold(self)
        elif self._owner is not None:
            shared.forget_exclusive(self, self._owner)
        self.token = None
        self._operations = None
        self._depth = 0
        self._owner = None
        self._owner_thread = None
        self._lease.clear()

    # --- renewal (lease.Lease) ----------------------------------------------------------
    def _renew(self) -> float | None:
        """Called by the renewer thread: free a release whose transaction ended unseen, or
        renew the lease, reporting a lost one (renewal.Renewable)."""
        if self._ties.ended_unseen(self):
            return None
        return self._lease.renew(self, self._report_lost)

    @property
    def lost_reason(self) -> str | None:
        """Return why the lease was lost (LockLost's message), None while it is not lost."""
        return str(self._lease.lost_error(self)) if self._lease.lost else None

    def _report_lost(self) -> None:
        reason = str(self._lease.lost_error(self))
        logger.warning("distlock: lost the lease on %r: %s", self.name, reason)
        if metrics.ENABLED:
            metrics.lost(self)
        lock_lost.send(
            _sender(self._operations),
            name=self.name,
            alias=self.using,
            info=self._local_info(),
            reason=reason,
        )
        if self.on_lost is not None:
            try:
                self.on_lost(self)
            except Exception:
                logger.exception("distlock: on_lost callback for %r failed", self.name)

    # --- signals ------------------------------------------------------------------------
    def _send(self, signal: Any) -> None:
        if not signal.receivers:  # nobody connected: not even the sender is looked up
            return
        sender = _sender(self._operations)
        if signal.has_listeners(sender):
            signal.send(sender, name=self.name, alias=self.using, info=self._local_info())

    def _local_info(self) -> LockInfo | None:
        """The LockInfo of this object's hold, from what it knows (no round trip)."""
        if self.token is None or self.fencing_token is None:
            return None
        meta = json.loads(self._meta)
        remaining = max(self._lease.deadline - time.monotonic(), 0.0)
        return LockInfo(
            name=self.name,
            token=self.token,
            fencing_token=self.fencing_token,
            host=meta["host"],
            pid=meta["pid"],
            thread=meta["thread"],
            purpose=meta["purpose"],
            acquired_at=from_milliseconds(self._acquired_ms),
            expires_at=from_milliseconds(self._acquired_ms + self._lease.ttl_ms),
            ttl_remaining=remaining,
            renewals=0,
            depth=self._depth,
            alias=self.using,
            shared=self.shared,
        )

    # --- with, async with, decorator ----------------------------------------------------
    # unasync: the async source of the sync code after it
    async def __aenter__(self) -> Lock:
        if not await self.aacquire():
            raise LockNotAcquired(self.name, holder=await self.aholder(), wait=self.wait)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.arelease()

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
    def __enter__(self) -> Lock:
        if not self.acquire():
            raise LockNotAcquired(self.name, holder=self.holder(), wait=self.wait)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

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

    def __call__(self, func: F) -> F:
        """Decorate ``func`` so that each call holds its own copy of this lock."""
        purpose = self.purpose or f"{func.__module__}.{func.__qualname__}"
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_inner(*args: Any, **kwargs: Any) -> Any:
                async with self.copy(purpose=purpose):
                    return await func(*args, **kwargs)

            return async_inner  # type: ignore[return-value]

        @functools.wraps(func)
        def inner(*args: Any, **kwargs: Any) -> Any:
            with self.copy(purpose=purpose):
                return func(*args, **kwargs)

        return inner  # type: ignore[return-value]

    def copy(self, **changes: Any) -> Lock:
        """Return a new, unheld Lock with the same settings (and ``changes``)."""
        return Lock(changes.pop("name", self.name), **{**self._settings(), **changes})

    def _settings(self) -> dict[str, Any]:
        """The keyword arguments that make an object like this one (for copy())."""
        return {name: getattr(self, name) for name in self._copied}


def _new_token(lock: Lock, operations: Operations) -> str:
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


def _waiting_in_this_transaction(lock: Lock) -> str:
    """Return the token of the exclusive hold of ``lock``'s name whose release waits for a
    transaction the running code is in, '' if none: released in another thread of that
    transaction (async_to_sync), it is this code's own hold, to downgrade, never to wait for."""
    held = waiting_release((lock.kind, lock.using, lock.name))
    return str(held.token) if held is not None and held.token else ""


class _Attempts:
    """The state of one acquire() call, shared by the sync and async loops."""

    def __init__(
        self, lock: Lock, operations: Operations, wait: float | None, began: float
    ) -> None:
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
            owner = _current_owner()
            self.downgrade_from = shared.downgrade_from(
                lock.kind, lock.using, lock.name, owner
            ) or _waiting_in_this_transaction(lock)
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
            sender = _sender(self.operations)
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


def _sender(backend: Any) -> type:
    """Return the sender of a lock's signals: the backend's class (an operations object
    names its backend's)."""
    sender: type = backend.signal_sender
    return sender


def _current_owner() -> tuple[int, int | None]:
    """Identify the running thread and asyncio task, for reentrancy."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    return threading.get_ident(), None if task is None else id(task)


# lock() repeats Lock.__init__'s parameters on purpose: both signatures are public API
# (tests/tooling/test_public_api.py) and spelled out for help() and IDEs, so neither may become
# ``**kwargs``. (The other runs `duplicates` pairs in this file are the sync twins that
# scripts/unasync.py generates from the async source.)
def lock(
    name: str,
    *,
    ttl: float | None = None,
    wait: float | None = None,
    auto_renew: bool = False,
    reentrant: bool = False,
    on_lost: Callable[[Lock], Any] | None = None,
    using: str = "default",
    purpose: str | None = None,
    hold_until_commit: bool = True,
    shared: bool = False,
    metric_name: str | None = None,
    fence: bool = False,
    fair: bool | None = None,
) -> Lock:
    """Return a Lock on ``name`` for the DISTLOCK alias ``using``.

    ``ttl`` is the lease in seconds (None: the alias's TIMEOUT); ``wait`` how long acquire()
    waits (0: try once, None: until acquired). ``hold_until_commit``: a release inside a
    database transaction waits for it to end (False: release at once). ``shared``: hold it
    shared (one of any number of readers; an exclusive holder waits for them all, and they
    for it), first come first served with the exclusive acquirers of the same name.
    ``metric_name``: the bounded name the metrics report for it (default: the name up to
    its first ``:``, then ``:*``; see docs/observing.md). ``fence``: claim the fencing token
    in each database transaction the holder runs, so that a holder whose lease ended (a
    pause, a lock server that restarted empty) is refused (``FencedUpdateRejected``) and its
    transaction rolled back once a newer holder has claimed it (docs/fencing-and-limits.md).
    its first ``:``, then ``:*``; see docs/observing.md). ``fair``: True serves waiters first
    come, first served; False lets whoever asks first take a free lock (waiters may be
    overtaken, for throughput; they are still woken when it is released); None (the
    default): the alias's ``OPTIONS['FAIR']``, True unless set.
    """
    return Lock(
        name,
        ttl=ttl,
        wait=wait,
        auto_renew=auto_renew,
        reentrant=reentrant,
        on_lost=on_lost,
        using=using,
        purpose=purpose,
        hold_until_commit=hold_until_commit,
        shared=shared,
        metric_name=metric_name,
        fence=fence,
        fair=fair,
    )
