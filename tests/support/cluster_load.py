"""A locking and listing load to run while a Cluster fails over or reshards: which calls
worked when, whether two holders ever overlapped, and any error other than the documented
ones (BackendUnavailable, LockNotAcquired)."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import distlock
from distlock import BackendUnavailable, LockNotAcquired


class Samples:
    """What a thread saw, call after call: (when, succeeded)."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, bool]] = []

    def note(self, ok: bool) -> None:
        self.seen.append((time.monotonic(), ok))

    def first_success_after(self, moment: float) -> float | None:
        return next((at for at, ok in self.seen if ok and at > moment), None)


class ClusterLoad:
    """Threads that take ``work:<n>`` locks on the default alias (checking that no two hold
    one at once) and a thread that lists the ``held`` locks (all named ``held:<n>``) through
    ``lister``, a backend that does nothing else; used as a context manager."""

    def __init__(self, lister: Any, held: int, lockers: int = 4) -> None:
        self.lister, self.held = lister, held
        self.listings, self.lockings = Samples(), Samples()
        self.overlaps: list[str] = []
        self.incomplete: list[tuple[int, int]] = []
        self.unexpected: list[BaseException] = []
        self._inside: set[str] = set()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._keep_listing)] + [
            threading.Thread(target=self._keep_locking, args=(n,)) for n in range(lockers)
        ]

    def __enter__(self) -> ClusterLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _keep_listing(self) -> None:
        while not self._stop.is_set():
            try:
                listed = [info.name for info in self.lister.iter_held("held:")]
                counted = self.lister.count("held:")
            except BackendUnavailable:
                self.listings.note(False)
                time.sleep(0.05)
                continue
            except Exception as exc:
                self.unexpected.append(exc)
                continue
            self.listings.note(True)
            if len(listed) != self.held or counted != self.held or len(set(listed)) != self.held:
                self.incomplete.append((len(listed), counted))

    def _keep_locking(self, worker: int) -> None:
        for attempt in itertools.count():
            if self._stop.is_set():
                return
            name = f"work:{(worker + attempt) % 12}"
            try:
                with distlock.lock(name, ttl=5, wait=0.5):
                    if name in self._inside:
                        self.overlaps.append(name)
                    self._inside.add(name)
                    time.sleep(0.002)
                    self._inside.discard(name)
                self.lockings.note(True)
            except BackendUnavailable:
                self.lockings.note(False)
                time.sleep(0.05)
            except LockNotAcquired:
                pass
            except Exception as exc:
                self.unexpected.append(exc)
