"""The errors distlock raises, rooted at LockError."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

from .info import shorten

if TYPE_CHECKING:
    from .info import LockInfo


class LockError(Exception):
    """Root of every lock error; carries the lock's name when there is one."""

    def __init__(self, message: str, *, name: str | None = None) -> None:
        super().__init__(message)
        self.name = name


class LockNotAcquired(LockError):
    """The lock stayed held by someone else for the whole wait."""

    def __init__(
        self, name: str, *, holder: LockInfo | None = None, wait: float | None = None
    ) -> None:
        waited = "" if wait is None else f" within {wait:g}s"
        by = "" if holder is None else f"; held by {held_by(holder)}"
        super().__init__(f"Lock {name!r} could not be acquired{waited}{by}.", name=name)
        self.holder = holder
        self.wait = wait


class SemaphoreFull(LockNotAcquired):
    """Every permit of a semaphore stayed held for the whole wait (``holder``: the permit
    whose lease ends first)."""

    def __init__(
        self,
        name: str,
        *,
        limit: int,
        held: int,
        holder: LockInfo | None = None,
        wait: float | None = None,
    ) -> None:
        within = f" within {wait:g}s" if wait else ""
        if held >= limit:
            state = f"is full: {held} of {limit} permits held, none free{within}"
        else:
            state = f"was full{within}: its {limit} permits were held (some are free now)"
        first = "" if holder is None else f"; the first to end is held by {held_by(holder)}"
        LockError.__init__(
            self,
            f"Semaphore {name!r} {state}{first}. Wait longer (wait=...), raise its limit, or "
            f"see who holds the permits: manage.py distlock info {shlex.quote(name)}",
            name=name,
        )
        self.holder = holder
        self.wait = wait
        self.limit = limit
        self.held = held


def held_by(holder: LockInfo) -> str:
    """Return "HOST pid PID since TIME UTC (PURPOSE)", for messages that name a holder."""
    since = f"{holder.acquired_at:%Y-%m-%d %H:%M:%S} UTC"
    # The purpose tells the person reading the log what is running; shortened, as in the skip
    # line of a locked command.
    purpose = f" ({shorten(holder.purpose, 60)})" if holder.purpose else ""
    return f"{holder.host} pid {holder.pid} since {since}{purpose}"


class LockNotOwned(LockError):
    """release() or extend() by an object that does not hold the lock (any more)."""


class LockLost(LockError):
    """Automatic renewal found the lease gone: someone else may hold the lock now."""


class RenewalLimitReached(LockError):
    """extend() was refused: the lock was already renewed OPTIONS['MAX_RENEWALS'] times.

    The lock is still held until its lease ends; release it when done. (An auto-renewed lock
    that reaches the limit is reported as lost instead: LockLost, the lock_lost signal.)
    """


class BackendUnavailable(LockError):
    """The lock server could not be reached, or no quorum answered. Nothing was assumed."""


class SemaphoresNotSupported(LockError, NotImplementedError):
    """The alias's backend keeps no semaphores (RedlockBackend): use a RedisBackend alias."""


class SharedLocksNotSupported(LockError, NotImplementedError):
    """The alias's backend keeps no shared locks (RedlockBackend): use a RedisBackend alias."""


class SharedLockUpgrade(LockError):
    """This thread holds the shared lock and asked for the exclusive lock of the same name,
    which would wait for itself: release the shared hold first."""


class InvalidLockName(LockError, ValueError):
    """The lock name is empty, too long or contains control characters."""


class InvalidLockBackendError(ImproperlyConfigured):
    """The DISTLOCK setting names a backend, location or option that cannot work.

    ``check_id`` and ``hint`` let the system check report it as ``distlock.E0xx``.
    """

    def __init__(
        self,
        message: str,
        *,
        check_id: str = "distlock.E002",
        hint: str | None = None,
        problems: list[InvalidLockBackendError] | None = None,
    ) -> None:
        super().__init__(message)
        self.check_id = check_id
        self.hint = hint
        # Every problem found in the alias's settings, this one first: `manage.py check`
        # reports them all at once rather than one per run.
        self.problems: list[InvalidLockBackendError] = problems or [self]


class FencedUpdateRejected(LockError):
    """A fenced write (distlock.fencing) found rows already written under a newer token, or
    a fenced lock's claim (``fence=True``) found a newer token claimed: this holder's
    transaction is rolled back."""

    def __init__(self, message: str, *, token: int, newest: int, name: str | None = None) -> None:
        super().__init__(message, name=name)
        self.token = token
        self.newest = newest


class IsolationLevelWarning(RuntimeWarning):
    """A lock was acquired inside a transaction whose snapshot may predate it (REPEATABLE READ
    or SERIALIZABLE): rows read under the lock may be older than the previous holder's
    commit. Take the lock before the transaction begins (docs/transactions.md)."""
