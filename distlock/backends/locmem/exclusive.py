"""The exclusive lock in memory (LocMemBackend.exclusive), by the rules of acquire.lua,
release.lua and extend.lua."""

from __future__ import annotations

import time

from ...info import LockInfo
from ...keys import validate_name
from ..operations import Attempt, ExclusiveKind, HeldEntry, Request
from .inmemory import InMemory
from .store import pttl, wait_for_turn


class InMemoryExclusive(InMemory, ExclusiveKind):
    def take(self, request: Request) -> Attempt:
        name, token = request.name, request.token
        store = self.store
        entry = store.current(name)
        if entry is not None and entry.token == token:
            return Attempt(True, fencing_token=entry.fence, acquired_ms=entry.acquired_ms)
        readers = store.current_readers(name)
        if entry is not None or readers or store.blocked(name, token, shared=False):
            # Every waiter queues, whatever kind holds now: a reader arriving later
            # must not pass it (first come, first served across kinds).
            store.enqueue(name, token, False, request.meta, request.patience_ms)
            return Attempt(False, holder_pttl_ms=pttl([entry] if entry else readers.values()))
        held = store.held[name] = store.admit(name, token, request.meta, request.ttl_ms)
        return Attempt(True, fencing_token=held.fence, acquired_ms=held.acquired_ms)

    def wait_turn(self, request: Request, timeout: float) -> None:
        wait_for_turn(self.store, request.name, request.token, False, timeout)

    def leave(self, name: str, token: str) -> None:
        """Leave the queue of ``name`` (either kind's: they wait in one)."""
        with self.store.changed:
            self.store.dequeue(name, token)
            self.store.changed.notify_all()

    def release(self, name: str, token: str, *, every_level: bool = False) -> int:
        with self.store.changed:
            entry = self.store.current(name)
            if entry is not None and token and entry.token != token:
                entry = None  # another token's ("" releases whoever holds)
            return self.release_hold(name, entry, every_level, shared=False)

    def extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        with self.store.changed:
            entry = self.store.current(name)
            mine = entry if entry is not None and entry.token == token else None
            return self.extend_hold(mine, name, ttl_ms, renewal, reenter)

    def inspect(self, name: str) -> tuple[LockInfo, ...]:
        validate_name(name)
        with self.store.changed:
            entry = self.store.current(name)
            if entry is None:
                return ()
            return (self.lock_info(name, entry.token, entry, len(self.store.registered(name))),)

    def list(self, prefix: str = "") -> list[HeldEntry]:
        store = self.store
        with store.changed:
            names = [name for name in list(store.held) if name.startswith(prefix)]
            now, wall = time.monotonic(), time.time()
            found = []
            for name in names:
                entry = store.current(name)
                if entry is not None:
                    found.append(
                        HeldEntry(
                            name,
                            wall + entry.expires - now,
                            entry.acquired_ms / 1000,
                            len(store.registered(name)),
                        )
                    )
        return sorted(found)
