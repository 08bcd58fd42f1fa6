"""InMemory: what the in-memory operations of every kind share. The store answers at once,
so the async twins call the sync operations on the loop; only a wait blocks, in a thread."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from ..operations import AtOnce, Attempt, Request
from .store import Held, Store

if TYPE_CHECKING:
    from . import LocMemBackend


class InMemory(AtOnce):
    """Operations on the backend's in-memory store (``self.store``)."""

    backend: LocMemBackend

    @property
    def store(self) -> Store:
        return self.backend.store

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
        await asyncio.to_thread(self.wait_turn, request, timeout)
        sent = time.monotonic()
        return self.try_acquire(request)._replace(sent=sent)

    def extend_hold(self, held: Held, name: str, ttl_ms: int, renewal: bool, reenter: bool) -> bool:
        """Set a hold's lease (the store's condition held), as extend.lua does."""
        max_renewals = self.backend.max_renewals
        if renewal and max_renewals is not None and held.renewals >= max_renewals:
            raise self.backend.renewal_limit_reached(name)
        held.expires = time.monotonic() + ttl_ms / 1000
        held.renewals += renewal
        held.depth += reenter
        return True
