"""The exclusive lock in memory (LocMemBackend.exclusive), by the rules of acquire.lua,
release.lua and extend.lua."""

from __future__ import annotations

import time

from ...info import LockInfo
from ...names import validate_name
from ..operations import Attempt, ExclusiveKind, HeldEntry, Request
from .inmemory import InMemory
from .store import Held, pttl, wait_for_turn


class Locks(InMemory, ExclusiveKind):
    def try_acquire(self, request: Request, grant: str | None = None) -> Attempt:
        name, token, ttl_ms, meta, patience_ms, _, _ = request
        store = self.store
        with store.changed:
            entry = store.current(name)
            if entry is not None and entry.token == token:
                return Attempt(True, fencing_token=entry.fence, acquired_ms=entry.acquired_ms)
            readers = store.current_readers(name)
            if entry is not None or readers or store.blocked(name, token, shared=False):
                # Every waiter queues, whatever kind holds now: a reader arriving later
                # must not pass it (first come, first served across kinds).
                store.note_waiter(name, token, meta, patience_ms)
                store.enqueue(name, token, False, patience_ms)
                return Attempt(False, holder_pttl_ms=pttl([entry] if entry else readers.values()))
            store.dequeue(name, token)
            store.forget_waiter(name, token)
            fence, acquired_ms = store.next_fence(name)
            store.held[name] = Held(
                token=token,
                fence=fence,
                meta=meta,
                acquired_ms=acquired_ms,
                expires=time.monotonic() + ttl_ms / 1000,
            )
            return Attempt(True, fencing_token=fence, acquired_ms=acquired_ms)

    def wait_turn(self, request: Request, timeout: float) -> None:
        wait_for_turn(self.store, request.name, request.token, False, timeout)

    def leave(self, name: str, token: str) -> None:
        """Leave the queue of ``name`` (either kind's: they wait in one)."""
        with self.store.changed:
            self.store.dequeue(name, token)
            self.store.forget_waiter(name, token)
            self.store.changed.notify_all()

    def release(self, name: str, token: str, *, every_level: bool = False) -> int:
        store = self.store
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

    def extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        with self.store.changed:
            entry = self.store.current(name)
            if entry is None or entry.token != token:
                return False
            return self.extend_hold(entry, name, ttl_ms, renewal, reenter)

    def inspect(self, name: str) -> tuple[LockInfo, ...]:
        validate_name(name)
        with self.store.changed:
            entry = self.store.current(name)
            if entry is None:
                return ()
            pttl_ms = max(round((entry.expires - time.monotonic()) * 1000), 0)
            info = LockInfo.from_stored(
                name=name,
                token=entry.token,
                fence=entry.fence,
                meta_json=entry.meta,
                acquired_ms=entry.acquired_ms,
                now_ms=time.time_ns() // 1_000_000,
                pttl_ms=pttl_ms,
                renewals=entry.renewals,
                depth=entry.depth,
                alias=self.backend.alias,
                waiters=len(self.store.registered(name)),
            )
            return (info,)

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
