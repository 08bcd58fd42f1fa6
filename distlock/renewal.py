"""Automatic lease renewal: one background thread per process renews every held lock.

The thread starts when the first auto-renewing lock is acquired and ends when none is left,
so a process that renews nothing runs no extra thread. Locks are held by weak reference: a
lock that is garbage-collected is simply no longer renewed, and its lease runs out.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
import weakref
from typing import Protocol

logger = logging.getLogger("distlock")


class Renewable(Protocol):
    def _renew(self) -> float | None:
        """Renew the lease; return seconds until the next renewal, or None to stop."""


class Renewer:
    """Renew registered locks on schedule, from one daemon thread."""

    def __init__(self) -> None:
        self._wakeup = threading.Condition()
        self._schedule: list[tuple[float, int, int]] = []  # (due, order, registration id)
        self._registered: dict[int, weakref.ref[Renewable]] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def register(self, lock: Renewable, interval: float) -> int:
        """Renew ``lock`` every ``interval`` seconds; return an id for unregister()."""
        with self._wakeup:
            registration = next(self._ids)
            self._registered[registration] = weakref.ref(lock)
            self._push(time.monotonic() + interval, registration)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="distlock-renewer", daemon=True
                )
                self._thread.start()
            self._wakeup.notify()
            return registration

    def unregister(self, registration: int) -> None:
        with self._wakeup:
            self._registered.pop(registration, None)
            self._wakeup.notify()

    def active(self) -> int:
        """Return how many locks are being renewed."""
        with self._wakeup:
            return len(self._registered)

    def _push(self, due: float, registration: int) -> None:
        heapq.heappush(self._schedule, (due, next(self._ids), registration))

    def _run(self) -> None:
        while True:
            due_now = self._next_due()
            if due_now is None:
                return
            for registration, lock in due_now:
                try:
                    interval = lock._renew()
                except Exception:  # never let one lock's failure stop the others' renewals
                    logger.exception("distlock: renewing %r failed", lock)
                    interval = None
                with self._wakeup:
                    if interval is None:
                        self._registered.pop(registration, None)
                    elif registration in self._registered:
                        self._push(time.monotonic() + interval, registration)
            # No reference of this thread's may outlive the round: the locks are held weakly,
            # so that one dropped without release() stops being renewed; these locals would
            # keep it alive while the next due time is awaited, then renew it again.
            due_now = lock = None  # type: ignore[assignment]

    def _next_due(self) -> list[tuple[int, Renewable]] | None:
        """Wait for the next renewals that are due; None when nothing is left to renew."""
        with self._wakeup:
            while True:
                while self._schedule and self._schedule[0][2] not in self._registered:
                    heapq.heappop(self._schedule)
                if not self._schedule:
                    self._thread = None
                    return None
                delay = self._schedule[0][0] - time.monotonic()
                if delay <= 0:
                    break
                self._wakeup.wait(delay)
            due = []
            while self._schedule and self._schedule[0][0] <= time.monotonic():
                registration = heapq.heappop(self._schedule)[2]
                lock = self._registered.get(registration, lambda: None)()
                if lock is None:
                    self._registered.pop(registration, None)
                else:
                    due.append((registration, lock))
            return due


renewer = Renewer()


def _forget_after_fork() -> None:
    # A forked child has none of the parent's threads, and its parent's locks are not its own.
    renewer.__init__()  # type: ignore[misc]  # the same instance, started afresh


if hasattr(os, "register_at_fork"):  # POSIX only
    os.register_at_fork(after_in_child=_forget_after_fork)
