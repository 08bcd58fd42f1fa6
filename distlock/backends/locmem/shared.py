"""Shared holds in memory (LocMemBackend.shared), by the rules of shared_acquire.lua and its
siblings: one queue per lock for both kinds, first come first served."""

from __future__ import annotations

import time

from ...info import LockInfo
from ...names import validate_name
from ..operations import Attempt, HeldEntry, Request, SharedKind, entry_of
from .inmemory import InMemory
from .store import Held, pttl, wait_for_turn


class SharedLocks(InMemory, SharedKind):
    def try_acquire(self, request: Request, grant: str | None = None) -> Attempt:
        name, token, ttl_ms, meta, patience_ms, _, downgrade_from = request
        store = self.store
        with store.changed:
            readers = store.current_readers(name)
            mine = readers.get(token)
            if mine is not None:
                return Attempt(True, fencing_token=mine.fence, acquired_ms=mine.acquired_ms)
            entry = store.current(name)
            # A downgrade: the exclusive holder's own thread joins at once; the exclusive
            # release leaves its shared hold (a writer then waits for it, as for any reader).
            downgrade = entry is not None and bool(downgrade_from) and entry.token == downgrade_from
            if not downgrade and (entry is not None or store.blocked(name, token, shared=True)):
                store.note_waiter(name, token, meta, patience_ms)
                store.enqueue(name, token, True, patience_ms)
                wait = [entry] if entry is not None else list(readers.values())
                return Attempt(False, holder_pttl_ms=pttl(wait))
            store.dequeue(name, token)
            store.forget_waiter(name, token)
            fence, acquired_ms = store.next_fence(name)
            store.readers.setdefault(name, {})[token] = Held(
                token, fence, meta, acquired_ms, time.monotonic() + ttl_ms / 1000
            )
            store.changed.notify_all()  # shared waiters behind it may come in too
            return Attempt(True, fencing_token=fence, acquired_ms=acquired_ms)

    def wait_turn(self, request: Request, timeout: float) -> None:
        wait_for_turn(self.store, request.name, request.token, True, timeout)

    def acquire_when_free(self, request: Request, timeout: float) -> Attempt:
        # A wait is no downgrade (as on Redis: the waiter's acquire carries none).
        return super().acquire_when_free(request._replace(downgrade_from=""), timeout)

    async def aacquire_when_free(self, request: Request, timeout: float) -> Attempt:
        return await super().aacquire_when_free(request._replace(downgrade_from=""), timeout)

    def leave(self, name: str, token: str) -> None:
        self.backend.exclusive.leave(name, token)  # one queue for both kinds

    def release(self, name: str, token: str, *, every_level: bool = False) -> int:
        store = self.store
        with store.changed:
            held = store.current_readers(name).get(token)
            if held is None:
                return 0
            if held.depth > 1 and not every_level:
                held.depth -= 1
                return 2
            del store.readers[name][token]
            store.current_readers(name)  # drops the name when nobody is left
            store.changed.notify_all()
            return 1

    def extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        with self.store.changed:
            held = self.store.current_readers(name).get(token)
            if held is None:
                return False
            return self.extend_hold(held, name, ttl_ms, renewal, reenter)

    def inspect(self, name: str) -> tuple[LockInfo, ...]:
        validate_name(name)
        with self.store.changed:
            holds = sorted(self.store.current_readers(name).values(), key=lambda h: h.expires)
            waiters = len(self.store.registered(name))
            now, now_ms = time.monotonic(), time.time_ns() // 1_000_000
            return tuple(
                LockInfo.from_stored(
                    name=name,
                    token=held.token,
                    fence=held.fence,
                    meta_json=held.meta,
                    acquired_ms=held.acquired_ms,
                    now_ms=now_ms,
                    pttl_ms=round((held.expires - now) * 1000),
                    renewals=held.renewals,
                    depth=held.depth,
                    alias=self.backend.alias,
                    shared=True,
                    waiters=waiters,
                )
                for held in holds
            )

    def list(self, prefix: str = "") -> list[HeldEntry]:
        with self.store.changed:
            names = sorted(name for name in self.store.readers if name.startswith(prefix))
        found = ((name, self.inspect(name)) for name in names)
        return [entry_of(name, held, held[0].waiters or 0) for name, held in found if held]
