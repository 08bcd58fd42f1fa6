"""Semaphores in memory (LocMemBackend.semaphores): permits freed while tokens wait are
reserved for them in arrival order (for HANDOFF_GRACE_MS), as semaphore_acquire.lua does."""

from __future__ import annotations

import time

from ...info import SemaphoreInfo
from ...keys import validate_name
from ..operations import Attempt, HeldEntry, Request, SemaphoreKind, entry_of
from .inmemory import InMemory
from .store import Permit, Semaphore


class InMemorySemaphore(InMemory, SemaphoreKind):
    @property
    def semaphores(self) -> dict[str, Semaphore]:
        return self.store.semaphores

    def _tidy(self, name: str, semaphore: Semaphore) -> None:
        if semaphore.empty():
            self.semaphores.pop(name, None)
        self.store.changed.notify_all()

    def take(self, request: Request) -> Attempt:
        name, token, limit = request.name, request.token, request.limit
        semaphore = self.semaphores.setdefault(name, Semaphore())
        semaphore.limit = limit
        now = time.monotonic()
        semaphore.settle(now)
        held = semaphore.holders.get(token)
        if held is not None:
            return Attempt(True, fencing_token=held.fence, acquired_ms=held.acquired_ms)
        reserved = semaphore.reserved.pop(token, None) is not None
        if not reserved and len(semaphore.holders) + len(semaphore.reserved) >= limit:
            if request.patience_ms > 0:  # a token already queued keeps its place
                semaphore.queue[token] = now + request.patience_ms / 1000
            wait_ms = semaphore.next_free_ms(now)
            self._tidy(name, semaphore)
            return Attempt(False, holder_pttl_ms=wait_ms)
        now_us = time.time_ns() // 1000
        semaphore.fence = fence = max(now_us, semaphore.fence + 1)
        semaphore.queue.pop(token, None)
        semaphore.holders[token] = Permit(
            request.meta, now_us // 1000, fence, now + request.ttl_ms / 1000
        )
        self.store.changed.notify_all()  # a grown limit may have reserved permits
        return Attempt(True, fencing_token=fence, acquired_ms=now_us // 1000)

    def wait_turn(self, request: Request, timeout: float) -> None:
        """Wait until a permit is reserved for the token (or ``timeout`` passes)."""
        with self.store.changed:
            semaphore = self.semaphores.get(request.name)
            if semaphore is not None and request.token not in semaphore.reserved:
                self.store.changed.wait(timeout)

    def leave(self, name: str, token: str) -> None:
        with self.store.changed:
            semaphore = self.semaphores.get(name)
            if semaphore is not None:
                semaphore.queue.pop(token, None)
                semaphore.reserved.pop(token, None)
                semaphore.settle(time.monotonic())
                self._tidy(name, semaphore)

    def release(self, name: str, token: str, *, every_level: bool = False) -> int:
        with self.store.changed:
            semaphore = self.semaphores.get(name)
            if semaphore is None:
                return 0
            semaphore.settle(time.monotonic())
            released = semaphore.holders.pop(token, None) is not None
            semaphore.settle(time.monotonic())
            self._tidy(name, semaphore)
            return int(released)

    def extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        with self.store.changed:
            semaphore = self.semaphores.get(name)
            if semaphore is None:
                return False
            semaphore.settle(time.monotonic())
            held = semaphore.holders.get(token)
            return self.extend_hold(held, name, ttl_ms, renewal, reenter)

    def describe(self, name: str) -> SemaphoreInfo | None:
        validate_name(name)
        with self.store.changed:
            semaphore = self.semaphores.get(name)
            if semaphore is None:
                return None
            now = time.monotonic()
            semaphore.settle(now)
            if not (semaphore.holders or semaphore.queue):
                return None
            waiting = len(semaphore.queue) + len(semaphore.reserved)
            holders = tuple(
                self.lock_info(name, token, held, waiting)
                for token, held in sorted(semaphore.holders.items(), key=lambda i: i[1].expires)
            )
            return SemaphoreInfo(
                name=name,
                limit=semaphore.limit,
                holders=holders,
                waiting=waiting,
                alias=self.backend.alias,
            )

    async def adescribe(self, name: str) -> SemaphoreInfo | None:
        return self.describe(name)

    def list(self, prefix: str = "") -> list[HeldEntry]:
        with self.store.changed:
            names = sorted(name for name in self.semaphores if name.startswith(prefix))
        found = (self.describe(name) for name in names)
        return [
            entry_of(i.name, i.holders, i.waiting, i.limit)
            for i in found
            if i is not None and i.holders
        ]
