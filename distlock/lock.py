"""The lock: acquire with a lease, token-checked release and extend, sync and async.

``Lock`` is the hold and its bookkeeping: the grant the server made (token, fencing token,
owner), its lease (lease.py), its ties to database transactions (transactions.py), the
signals it sends. Its calls to the lock server are its base class's (lock_calls.py), each
written once async with its generated sync twin; an acquire's path is attempts.py's.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar, cast

from . import claims, handler, metrics, shared
from .attempts import Attempts
from .backends.base import Attempt, BaseLockBackend
from .backends.operations import Operations
from .exceptions import LockNotAcquired, LockNotOwned
from .factory import factory_of
from .info import LockInfo, from_milliseconds
from .keys import validate_name
from .lease import Lease
from .lock_calls import LockCalls
from .signals import lock_acquired, lock_lost
from .transactions import LockTies
from .validation import check_options, lease_seconds, seconds

logger = logging.getLogger("distlock")
F = TypeVar("F", bound=Callable[..., Any])


class Lock(LockCalls):
    """A named lock with a lease, held by this object (never by a thread or task).

    Make one with :func:`distlock.lock`. Use it as a context manager (``with``/``async
    with``), a decorator, or through ``acquire()``/``release()`` and their async twins.
    """

    kind = "lock"  # what the name names: a lock and a semaphore of one name are unrelated
    # The metrics' (alias, kind, name) of this lock, looked up at its first record (metrics.py).
    _metric_form: tuple[str, str, str] | None = None
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
        self.ttl = lease_seconds("ttl", ttl)
        # (None, the default, needs no check.)
        self.wait = None if wait is None else seconds("wait", wait, allow_zero=True)
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
        key = ("shared" if shared else self.kind, using, self.name)  # as _resource() says
        self._ties = LockTies(key, self._lease)  # to transactions (transactions.py)
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
        return handler.locks.operations(self.using, "shared" if self.shared else self.kind)

    # --- the grant ----------------------------------------------------------------------
    def _take(self, attempts: Attempts, attempt: Attempt) -> None:
        """Record a granted lock (only after the server said so)."""
        self._operations = attempts.operations
        self.token = attempts.token
        self.fencing_token = attempt.fencing_token
        self._lease.ttl_ms = attempts.ttl_ms
        self._acquired_ms = attempt.acquired_ms
        self._meta = attempts.meta
        self._note_owner(attempts.thread)
        self._lease.start(self, attempts.lease_until)  # lease_end(), as guarded() found it
        self._ties.tie(self)
        if self.fence:
            claims.note_fenced(self)
        if metrics.ENABLED:  # the wait ends where the hold begins: one clock reading
            self._held_since = now = time.monotonic()  # metrics.now(), without its call
            metrics.wait_ended(self, attempts.began, "acquired", now)
        if lock_acquired.receivers:  # nobody connected (the usual case): no call
            self._send(lock_acquired)

    def _note_owner(self, thread: threading.Thread | None = None) -> None:
        """The running thread (``thread``, when the caller has it) and task hold it now, one
        level deep: the downgrade, reentrancy and the upgrade check read the owner."""
        self._depth = 1
        self._owner = shared.current_owner()
        self._owner_thread = weakref.ref(thread or threading.current_thread())
        if self.shared:
            shared.note_hold(self)
        else:
            shared.note_exclusive(self, self._owner)

    # --- database transactions (the ties and the waiting release: transactions.LockTies) ---
    def _resource(self) -> tuple[str, str, str]:
        # A shared hold is not the exclusive lock: a transaction takes back only its own kind.
        return "shared" if self.shared else self.kind, self.using, self.name

    def _hold_again(self, held: Lock, ttl_ms: int, deadline: float) -> None:
        """Hold ``held``'s hold, whose waiting release was taken back (attempts.py): this
        object's own, or another's of the same transaction, whose grant becomes this one's.
        Its lease was renewed to ``ttl_ms``, until ``deadline``."""
        if held is not self:
            self._operations, self.token = held._operations, held.token
            self.fencing_token, self._acquired_ms = held.fencing_token, held._acquired_ms
            self._meta = held._meta
            self._held_since, held._held_since = held._held_since, 0.0  # one hold, not two
            self._ties.adopt(held._ties, self)  # its ties to transactions too
            held._forget()
        elif not self.auto_renew:  # no more keep-alive
            self._lease.stop_renewing()
        self._lease.ttl_ms, self._lease.lost = ttl_ms, False
        self._note_owner()
        self._lease.deadline = deadline
        if self.auto_renew and self._lease.renewal is None:
            self._lease.start_renewing(self)
        self._ties.tie(self)  # stacks: a tie made earlier keeps its shallower block
        if self.fence:
            claims.note_fenced(self)

    # --- state --------------------------------------------------------------------------
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
        if self._ties.hold is not None:  # tied to a transaction (else nothing to drop)
            self._ties.drop()
        if self.fence and fence_ends:
            claims.forget_fenced(self)
        if self._lease.renewal is not None:  # renewed (else nothing to stop)
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

    def _report_lost(self, operations: Operations | None = None) -> None:
        """Report the lease lost (log, metrics, ``lock_lost``, ``on_lost``). ``operations``:
        those the hold had, when it was forgotten already (its release found it lost; its
        alias may have left the settings meanwhile)."""
        reason = str(self._lease.lost_error(self))
        logger.warning("distlock: lost the lease on %r: %s", self.name, reason)
        if metrics.ENABLED:
            metrics.lost(self)
        lock_lost.send(
            _sender(operations or self.operations),
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
        sender = _sender(self.operations)
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

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def __enter__(self) -> Lock:
        if not self.acquire():
            raise LockNotAcquired(self.name, holder=self.holder(), wait=self.wait)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

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


def _sender(backend: Any) -> type:
    """Return the sender of a lock's signals: the backend's class (an operations object
    names its backend's)."""
    sender: type = backend.signal_sender
    return sender


@factory_of(Lock)
def lock(*args: Any, **kwargs: Any) -> Lock:
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
    ``fair``: True serves waiters first come, first served; False lets whoever asks first
    take a free lock (waiters may be overtaken, for throughput; they are still woken when it
    is released); None (the default): the alias's ``OPTIONS['FAIR']``, True unless set.
    """
    return Lock(*args, **kwargs)  # what a call does: factory_of makes the Lock itself
