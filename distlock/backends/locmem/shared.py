"""Shared holds in memory (LocMemBackend.shared), by the rules of shared_acquire.lua and its
siblings: one queue per lock for both kinds, first come first served."""

from __future__ import annotations

from ...info import LockInfo
from ...keys import validate_name
from ..operations import Attempt, HeldEntry, Request, SharedKind, entry_of
from .inmemory import InMemory
from .store import pttl, wait_for_turn


class InMemoryShared(InMemory, SharedKind):
    def take(self, request: Request) -> Attempt:
        name, token, downgrade_from = request.name, request.token, request.downgrade_from
        store = self.store
        readers = store.current_readers(name)
        mine = readers.get(token)
        if mine is not None:
            return Attempt(True, fencing_token=mine.fence, acquired_ms=mine.acquired_ms)
        entry = store.current(name)
        # A downgrade: the exclusive holder's own thread joins at once; the exclusive
        # release leaves its shared hold (a writer then waits for it, as for any reader).
        downgrade = entry is not None and bool(downgrade_from) and entry.token == downgrade_from
        if not downgrade and (entry is not None or store.blocked(name, token, shared=True)):
            store.enqueue(name, token, True, request.meta, request.patience_ms)
            wait = [entry] if entry is not None else list(readers.values())
            return Attempt(False, holder_pttl_ms=pttl(wait))
        held = store.readers.setdefault(name, {})[token] = store.admit(
            name, token, request.meta, request.ttl_ms
        )
        store.changed.notify_all()  # shared waiters behind it may come in too
        return Attempt(True, fencing_token=held.fence, acquired_ms=held.acquired_ms)

    def wait_turn(self, request: Request, timeout: float) -> None:
        wait_for_turn(self.store, request.name, request.token, True, timeout)

    # unasync: the async source of the sync code after it
    async def aacquire_when_free(self, request: Request, timeout: float) -> Attempt:
        # A wait is no downgrade (as on Redis: the waiter's acquire carries none).
        return await super().aacquire_when_free(request._replace(downgrade_from=""), timeout)

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def acquire_when_free(self, request: Request, timeout: float) -> Attempt:
        # A wait is no downgrade (as on Redis: the waiter's acquire carries none).
        return super().acquire_when_free(request._replace(downgrade_from=""), timeout)

    # unasync: end

    def leave(self, name: str, token: str) -> None:
        self.backend.exclusive.leave(name, token)  # one queue for both kinds

    def release(self, name: str, token: str, *, every_level: bool = False) -> int:
        with self.store.changed:
            held = self.store.current_readers(name).get(token)
            return self.release_hold(name, held, every_level, shared=True)

    def extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        with self.store.changed:
            held = self.store.current_readers(name).get(token)
            return self.extend_hold(held, name, ttl_ms, renewal, reenter)

    def inspect(self, name: str) -> tuple[LockInfo, ...]:
        validate_name(name)
        with self.store.changed:
            holds = sorted(self.store.current_readers(name).values(), key=lambda h: h.expires)
            waiters = len(self.store.registered(name))
            return tuple(
                self.lock_info(name, held.token, held, waiters, shared=True) for held in holds
            )

    def list(self, prefix: str = "") -> list[HeldEntry]:
        with self.store.changed:
            names = sorted(name for name in self.store.readers if name.startswith(prefix))
        found = ((name, self.inspect(name)) for name in names)
        return [entry_of(name, held, held[0].waiters or 0) for name, held in found if held]
