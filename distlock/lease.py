"""The lease of a lock's hold, as this process knows it: its length, the local time by which it
surely ended, its renewal from the renewer thread (renewal.py), and, once a renewal found it
gone, why (an eviction, MAX_RENEWALS, a pause longer than the lease, a server that restarted).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from . import eviction, renewal
from .backends.base import DRIFT_FACTOR, DRIFT_MS, BaseLockBackend, lease_end
from .exceptions import BackendUnavailable, LockLost, LockNotOwned, RenewalLimitReached

logger = logging.getLogger("distlock")
T = TypeVar("T")
# How often an auto-renewed lease is renewed, as a fraction of the lease.
RENEW_FRACTION = 1 / 3


class Lease:
    """The lease of one Lock's hold (``Lock._lease``) and what is done with it: renewed in the
    background, found lost, its loss explained.

    It keeps no reference to its lock, which is passed to each call: the renewer holds the
    lock by weak reference, so a lock nobody references is freed at once and no longer
    renewed. Its reads of the lock are public attributes (``name``, ``using``, ``token``,
    ``operations``, ``backend``, ``auto_renew``, ``fence``).
    """

    __slots__ = (
        "deadline",
        "evictions_before",
        "lost",
        "lost_because",
        "mutex",
        "release_began",
        "released_in_time",
        "releasing",
        "renewal",
        "ttl_ms",
    )

    def __init__(self) -> None:
        self.ttl_ms = 0
        self.deadline = 0.0  # time.monotonic() by which the lease surely ended
        self.lost = False
        self.lost_because: str | None = None  # why, when it was not a vanished lease
        # Keys each server had evicted at the hold's first renewal (see eviction.loss_reason).
        self.evictions_before: dict[str, int] | None = None
        self.releasing = False
        self.release_began = 0.0
        self.released_in_time = False  # a release went unanswered, sent while the lease ran
        self.renewal: int | None = None
        self.mutex = threading.Lock()  # orders renewals against release

    def start(self, lock: Any, deadline: float) -> None:
        """A hold was granted (``ttl_ms`` set): its lease lasts until ``deadline`` at least."""
        self.deadline = deadline
        self.lost = self.releasing = False
        self.lost_because = None
        self.evictions_before = None
        if lock.auto_renew:
            self.start_renewing(lock)

    def start_renewing(self, lock: Any) -> None:
        """Renew ``lock`` (auto_renew) every RENEW_FRACTION of the lease."""
        self.renewal = renewal.renewer.register(lock, self.ttl_ms / 1000 * RENEW_FRACTION)

    def left(self) -> float:
        """Return the seconds left by this process's clock (0.0 once found lost)."""
        if self.lost:
            return 0.0
        return max(self.deadline - time.monotonic(), 0.0)

    def keep_alive(self, lock: Any, left: float) -> None:
        """Renew the lease while a release waits for a database transaction (``left``: the
        seconds left now), unless it is renewed already."""
        with self.mutex:
            if self.renewal is None:
                interval = min(self.ttl_ms / 1000 * RENEW_FRACTION, left / 2)
                self.renewal = renewal.renewer.register(lock, max(interval, 0.01))

    def stop_renewing(self) -> None:
        if self.renewal is not None:
            renewal.renewer.unregister(self.renewal)
            self.renewal = None

    def begin_release(self, final: bool) -> None:
        """A release is sent (under ``mutex``); ``final``: it ends the hold (not one level of
        a reentrant one), so from here on the renewer leaves this lease alone."""
        self.releasing = final
        self.release_began = time.monotonic()

    def abort_release(self) -> None:
        """The final release went unanswered (an error, an interruption): renew again."""
        with self.mutex:
            self.releasing = False
            # The request may have freed the lock before its answer was lost. It was sent
            # while the lease ran, so a retry that finds the lock gone must not report an
            # expired lease: the holder finished in time either way.
            if self.release_began < self.deadline:
                self.released_in_time = True

    def clear(self) -> None:
        """The hold was dropped."""
        self.releasing = self.lost = self.released_in_time = False

    def mark_lost(self, lock: Any, reason: str) -> bool:
        """Mark the lease lost for ``reason``; return False if it was not held or lost already."""
        with self.mutex:
            if lock.token is None or self.lost:
                return False
            self.lost_because = reason
            self.lost = True
            return True

    def lost_while_waiting(self, lock: Any) -> bool:
        """A take-back found the lease gone while the release waited for the database
        transaction: mark it lost, unless the renewer's look had found it already; return
        True if this did (the loss is then to be reported)."""
        with self.mutex:
            if self.lost:
                return False
            self.lost = True
            self.lost_because = (
                f"The lease on {lock.name!r} was lost while its release waited for the "
                f"database transaction: {self.gone_reason(lock, 'taking it back')} The "
                "transaction's work may overlap with another holder's."
            )
            return True

    def renew(self, lock: Any, report_lost: Callable[[], None]) -> float | None:
        """Renew ``lock``'s lease (from the renewer thread); call ``report_lost`` when it is
        found gone. Return the seconds until the next renewal, None to stop."""
        interval = self.ttl_ms / 1000 * RENEW_FRACTION
        with self.mutex:
            if lock.token is None or self.releasing or self.lost:
                return None
            started = time.monotonic()
            try:
                renewed = lock.operations.extend(lock.name, lock.token, self.ttl_ms, renewal=True)
            except BackendUnavailable:
                left = self.deadline - time.monotonic()
                if left > 0:
                    return min(interval, max(left / 2, 0.01))  # retry while the lease lasts
                renewed = False
            except RenewalLimitReached:
                # MAX_RENEWALS used up: the lease will end, so tell the holder now, while it is
                # still exclusive (the lease is left to run out on the server).
                self.lost_because = (
                    f"Auto-renewal of {lock.name!r} stopped at the MAX_RENEWALS of "
                    f"DISTLOCK[{lock.using!r}]: the lease ends on its own, so the lock is "
                    "reported lost now, while it is still exclusive. Finish sooner or raise "
                    "OPTIONS['MAX_RENEWALS']."
                )
                renewed = False
            if renewed:
                self.deadline = lease_end(started, self.ttl_ms)
            else:
                if self.lost_because is None and time.monotonic() < self.deadline:
                    # The key vanished before its lease ended: say so if it was evicted.
                    self.lost_because = self.eviction_reason(lock)
                if self.lost_because is None:  # the reason reads the clock: now, not later
                    self.lost_because = str(self.lost_error(lock))
                self.lost = True
                self.renewal = None
        if not renewed:
            report_lost()
            return None
        if self.evictions_before is None:  # once per hold, off the acquire's path
            self.evictions_before = self.read_evictions(lock, eviction.evictions_now)
        return interval

    def eviction_reason(self, lock: Any) -> str | None:
        """Why the lease was lost, if its server evicted keys while it was held."""
        before = self.evictions_before
        reason = self.read_evictions(
            lock, lambda store: eviction.loss_reason(lock.name, store, before)
        )
        return reason or None

    def read_evictions(self, lock: Any, read: Callable[[BaseLockBackend], T]) -> T | None:
        """Return ``read(backend)`` (a read of the servers' memory reports); None when the
        backend cannot say."""
        if lock.token is None:  # not held: no hold of which to say why it ended
            return None
        try:
            return read(lock.backend)
        except Exception:  # a reason is a courtesy: it never stops the loss being reported
            logger.debug("distlock: could not read the memory of %r's servers", lock.name)
            return None

    def expired_error(self, lock: Any, action: str) -> LockNotOwned:
        return LockNotOwned(
            f"Cannot {action} {lock.name!r}: {self.gone_reason(lock, f'the {action}')} The "
            "lock may belong to someone else now.",
            name=lock.name,
        )

    def lost_error(self, lock: Any) -> LockLost:
        return LockLost(
            self.lost_because
            or f"The lease on {lock.name!r} was lost while held: "
            f"{self.gone_reason(lock, 'a renewal')} Work done since may have overlapped with "
            "another holder.",
            name=lock.name,
        )

    def gone_reason(self, lock: Any, found_by: str) -> str:
        """Say why the server no longer has this hold, as far as this process can tell (by
        its own clock: whether the lease had run out), and what to do about that cause."""
        left = self.deadline - time.monotonic()
        ttl = f"{self.ttl_ms / 1000:g}s"
        fence = (
            ""
            if lock.fence
            else " fence=True makes the database refuse a stale holder's transactions "
            "(docs/fencing-and-limits.md)."
        )
        if left > (self.ttl_ms * DRIFT_FACTOR + DRIFT_MS) / 1000:
            return (
                f"{found_by} found it gone with {left:.1f}s of its {ttl} lease left by this "
                "process's clock, so the lease was not too short: the lock server restarted "
                "empty or failed over to a replica without it, or the lock was force-released. "
                "Against restarts, run the server with persistence or keep it down for the "
                f"longest lease.{fence}"
            )
        if lock.auto_renew:
            return (
                f"{found_by} found it gone after its {ttl} lease had run out by this process's "
                "clock, although auto-renewal was on: the process was paused (SIGSTOP, a stopped "
                "VM, swapping) or could not reach the lock server for longer than the lease, so "
                f"no renewal came in time.{fence}"
            )
        return (
            f"{found_by} found it gone after its {ttl} lease had run out by this process's "
            "clock: the work took longer than the lease, or the process was paused. Use a "
            f"longer ttl, extend() sooner, or auto_renew=True.{fence}"
        )
