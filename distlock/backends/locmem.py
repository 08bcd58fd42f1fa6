"""LocMemBackend: locks inside this process, for tests and development."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..info import LockInfo
from ..names import validate_name
from .base import Attempt, BaseLockBackend, HeldEntry
from .locmem_semaphores import LocMemSemaphores
from .problems import Problems

# One store per LOCATION, shared by every backend instance that names it (as locmem caches).
_stores: dict[str, _Store] = {}
_stores_guard = threading.Lock()


@dataclass
class _Held:
    token: str
    fence: int
    meta: str
    acquired_ms: int
    expires: float  # time.monotonic()
    renewals: int = 0
    depth: int = 1


@dataclass
class _Store:
    held: dict[str, _Held] = field(default_factory=dict)
    fences: dict[str, int] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)
    semaphores: dict[str, Any] = field(default_factory=dict)  # see locmem_semaphores

    def current(self, name: str) -> _Held | None:
        entry = self.held.get(name)
        if entry is not None and entry.expires <= time.monotonic():
            del self.held[name]
            return None
        return entry


class LocMemBackend(LocMemSemaphores, BaseLockBackend):
    """Keep locks in this process's memory: no server, no mutual exclusion across processes.

    A system check warns when it is configured with ``DEBUG = False``.
    """

    def configure(self, params: dict[str, Any], problems: Problems) -> None:
        super().configure(params, problems)
        location = params.get("LOCATION", "")
        with _stores_guard:
            self._store = _stores.setdefault(f"{self.key_prefix}:{location}", _Store())

    def try_acquire(self, name: str, token: str, ttl_ms: int, meta: str, grant: str | None,
                    patience_ms: int) -> Attempt:
        store = self._store
        with store.changed:
            entry = store.current(name)
            if entry is not None:
                if entry.token == token:
                    return Attempt(True, fencing_token=entry.fence, acquired_ms=entry.acquired_ms)
                remaining = max(round((entry.expires - time.monotonic()) * 1000), 1)
                return Attempt(False, holder_pttl_ms=remaining)
            now_us = time.time_ns() // 1000
            fence = max(now_us, store.fences.get(name, 0) + 1)
            store.fences[name] = fence
            store.held[name] = _Held(
                token=token, fence=fence, meta=meta, acquired_ms=now_us // 1000,
                expires=time.monotonic() + ttl_ms / 1000,
            )
            return Attempt(True, fencing_token=fence, acquired_ms=now_us // 1000)

    def wait_for_turn(self, name: str, timeout: float) -> str | None:
        store = self._store
        with store.changed:
            if store.current(name) is not None:
                store.changed.wait(timeout)
        return None

    def leave_queue(self, name: str, token: str) -> None:
        """Waiters are not queued in memory: nothing to leave."""

    def release(self, name: str, token: str, *, every_level: bool = False) -> int:
        store = self._store
        with store.changed:
            entry = store.current(name)
            if entry is None or (token and entry.token != token):
                return 0
            if entry.depth > 1 and not every_level:
                entry.depth -= 1
                return 2
            del store.held[name]
            store.changed.notify_all()
            return 1

    def extend(self, name: str, token: str, ttl_ms: int, *, renewal: bool = False,
               reenter: bool = False) -> bool:
        with self._store.changed:
            entry = self._store.current(name)
            if entry is None or entry.token != token:
                return False
            if renewal and self.max_renewals is not None and entry.renewals >= self.max_renewals:
                raise self.renewal_limit_reached(name)
            entry.expires = time.monotonic() + ttl_ms / 1000
            entry.renewals += renewal
            entry.depth += reenter
            return True

    def info(self, name: str) -> LockInfo | None:
        validate_name(name)
        with self._store.changed:
            entry = self._store.current(name)
            if entry is None:
                return None
            pttl = max(round((entry.expires - time.monotonic()) * 1000), 0)
            return LockInfo.from_stored(
                name=name, token=entry.token, fence=entry.fence, meta_json=entry.meta,
                acquired_ms=entry.acquired_ms, now_ms=time.time_ns() // 1_000_000, pttl_ms=pttl,
                renewals=entry.renewals, depth=entry.depth, alias=self.alias,
            )

    def held_names(self, prefix: str = "") -> list[HeldEntry]:
        with self._store.changed:
            names = [name for name in list(self._store.held) if name.startswith(prefix)]
            now, wall = time.monotonic(), time.time()
            found = []
            for name in names:
                entry = self._store.current(name)
                if entry is not None:
                    found.append(HeldEntry(name, wall + entry.expires - now,
                                           entry.acquired_ms / 1000))
        return sorted(found)
