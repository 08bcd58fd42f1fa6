"""InMemory: what the in-memory operations of every kind share. The store answers at once,
so the async twins call the sync operations on the loop; only a wait blocks, in a thread."""

from __future__ import annotations

import time
from typing import Protocol

from ...exceptions import RenewalLimitReached
from ...info import LockInfo
from ...offload import in_thread
from ..operations import AtOnce, Attempt, Backend, Operations, Request
from .store import Held, Permit, Store


class Keeps(Backend, Protocol):
    """What the in-memory operations read of a LocMemBackend (which imports them: a
    protocol here, not an import back)."""

    store: Store
    max_renewals: int | None

    @property
    def exclusive(self) -> Operations: ...

    def renewal_limit_reached(self, name: str) -> RenewalLimitReached: ...


class InMemory(AtOnce):
    """Operations on the backend's in-memory store (``self.store``)."""

    backend: Keeps

    @property
    def store(self) -> Store:
        return self.backend.store

    def try_acquire(self, request: Request, grant: str | None = None) -> Attempt:
        with self.store.changed:
            return self.take(request)

    def take(self, request: Request) -> Attempt:
        """Take a hold for ``request.token``, or queue it, by the rules of the kind's
        scripts (the store's condition held: one attempt is one step, as a script is)."""
        raise NotImplementedError

    def wait_turn(self, request: Request, timeout: float) -> None:
        """Block until ``request.token`` may be let in, or ``timeout`` passes."""
        raise NotImplementedError

    def acquire_when_free(self, request: Request, timeout: float) -> Attempt:
        # No round trip to save in memory: wait, then try.
        self.wait_turn(request, timeout)
        sent = time.monotonic()
        return self.try_acquire(request)._replace(sent=sent)

    async def aacquire_when_free(self, request: Request, timeout: float) -> Attempt:
        # Wait in a thread (blocking on the condition would stall the event loop), acquire
        # on the loop: acquired in the thread, a cancelled task's hold would outlive it for
        # its whole lease; this way a task cancelled while it waits takes nothing.
        await in_thread(self.wait_turn, request, timeout)
        sent = time.monotonic()
        return self.try_acquire(request)._replace(sent=sent)

    def extend_hold(
        self, held: Held | Permit | None, name: str, ttl_ms: int, renewal: bool, reenter: bool
    ) -> bool:
        """Set a hold's lease (the store's condition held), as extend.lua does; False when
        the token holds none (``held`` None)."""
        if held is None:
            return False
        max_renewals = self.backend.max_renewals
        if renewal and max_renewals is not None and held.renewals >= max_renewals:
            raise self.backend.renewal_limit_reached(name)
        held.expires = time.monotonic() + ttl_ms / 1000
        held.renewals += renewal
        if isinstance(held, Held):  # a permit has one level
            held.depth += reenter
        return True

    def release_hold(self, name: str, held: Held | None, every_level: bool, shared: bool) -> int:
        """Release a lock's hold of either kind (the store's condition held), as release.lua
        and shared_release.lua do: 0 when the token holds none (``held`` None), 2 when one
        reentrant level of several went (not ``every_level``), else 1."""
        if held is None:
            return 0
        if held.depth > 1 and not every_level:
            held.depth -= 1
            return 2
        self.store.drop(name, held.token, shared)
        return 1

    def lock_info(
        self, name: str, token: str, held: Held | Permit, waiters: int, shared: bool = False
    ) -> LockInfo:
        """Return the LockInfo of one hold of any kind (the store's condition held)."""
        return LockInfo.from_stored(
            name=name,
            token=token,
            fence=held.fence,
            meta_json=held.meta,
            acquired_ms=held.acquired_ms,
            now_ms=time.time_ns() // 1_000_000,
            pttl_ms=round((held.expires - time.monotonic()) * 1000),
            renewals=held.renewals,
            depth=held.depth if isinstance(held, Held) else 1,
            alias=self.backend.alias,
            shared=shared,
            waiters=waiters,
        )
