"""LocMemBackend: locks and semaphores inside this process, for tests and development.

The rules are the Redis scripts' (distlock/backends/redis_ops/lua/), kept in memory: a
semaphore's permits freed while tokens wait are reserved for them in arrival order (for
HANDOFF_GRACE_MS), and waiters are woken through the store's condition, as the scripts do it
through one list per waiter.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..info import LockInfo, SemaphoreInfo, WaiterInfo
from ..keys import validate_name
from .base import HANDOFF_GRACE_MS, Attempt, BaseLockBackend, HeldEntry
from .settings import Problems

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
class _Permit:
    meta: str
    acquired_ms: int
    fence: int
    expires: float  # time.monotonic()
    renewals: int = 0


@dataclass
class _Semaphore:
    limit: int = 0
    fence: int = 0
    holders: dict[str, _Permit] = field(default_factory=dict)
    queue: OrderedDict[str, float] = field(default_factory=OrderedDict)  # token -> patience end
    reserved: dict[str, float] = field(default_factory=dict)  # token -> reservation end

    def settle(self, now: float) -> None:
        """Drop what ended; reserve free permits for the waiters in arrival order."""
        for token in [t for t, held in self.holders.items() if held.expires <= now]:
            del self.holders[token]
        for token in [t for t, end in self.reserved.items() if end <= now]:
            del self.reserved[token]
        for token in [t for t, end in self.queue.items() if end <= now]:
            del self.queue[token]
        while self.queue and len(self.holders) + len(self.reserved) < self.limit:
            token, _ = self.queue.popitem(last=False)
            self.reserved[token] = now + HANDOFF_GRACE_MS / 1000

    def next_free_ms(self, now: float) -> int:
        ends = [*(held.expires for held in self.holders.values()), *self.reserved.values()]
        return max(round((min(ends) - now) * 1000), 1) if ends else 1

    def empty(self) -> bool:
        return not (self.holders or self.queue or self.reserved)


@dataclass
class _Store:
    held: dict[str, _Held] = field(default_factory=dict)
    fences: dict[str, int] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)
    semaphores: dict[str, _Semaphore] = field(default_factory=dict)
    # Shared holds of a lock: name -> token -> hold; and the waiters of each lock, both
    # kinds in one queue (first come, first served): name -> token -> (shared, patience end).
    readers: dict[str, dict[str, _Held]] = field(default_factory=dict)
    queues: dict[str, OrderedDict[str, tuple[bool, float]]] = field(default_factory=dict)
    # Who waits for each lock (either kind), in arrival order, for operators: token ->
    # (metadata, arrival us, patience end by time.monotonic()), as the scripts' queue, live
    # zset and '|about' hash keep it.
    waiting: dict[str, dict[str, tuple[str, int, float]]] = field(default_factory=dict)

    def current(self, name: str) -> _Held | None:
        entry = self.held.get(name)
        if entry is not None and entry.expires <= time.monotonic():
            del self.held[name]
            return None
        return entry

    def current_readers(self, name: str) -> dict[str, _Held]:
        """Return the shared holds of ``name`` whose lease has not ended."""
        holds = self.readers.get(name)
        if not holds:
            return {}
        now = time.monotonic()
        for token in [t for t, held in holds.items() if held.expires <= now]:
            del holds[token]
        if not holds:
            del self.readers[name]
        return holds

    def blocked(self, name: str, token: str, shared: bool) -> bool:
        """Return True if a registered waiter ahead of ``token`` goes first: any waiter for
        an exclusive acquirer, an exclusive waiter for a shared one (as the scripts rule)."""
        queue = self.queues.get(name)
        if not queue:
            return False
        now = time.monotonic()
        for other in [t for t, (_, end) in queue.items() if end <= now]:
            del queue[other]
        for other, (other_shared, _) in queue.items():
            if other == token:
                return False
            if not (shared and other_shared):
                return True
        return False

    def must_wait(self, name: str, token: str, shared: bool) -> bool:
        """Return True while ``token`` may not take ``name`` (of its kind): another holds it
        exclusively, readers hold it (for an exclusive acquirer), or a waiter ahead goes first."""
        entry = self.current(name)
        if entry is not None:
            return entry.token != token
        if not shared and self.current_readers(name):
            return True
        return self.blocked(name, token, shared)

    def enqueue(self, name: str, token: str, shared: bool, patience_ms: int) -> None:
        if patience_ms > 0:
            queue = self.queues.setdefault(name, OrderedDict())
            end = time.monotonic() + patience_ms / 1000
            queue[token] = (shared, max(end, queue.get(token, (shared, 0.0))[1]))

    def dequeue(self, name: str, token: str) -> None:
        queue = self.queues.get(name)
        if queue is not None:
            queue.pop(token, None)
            if not queue:
                del self.queues[name]

    def note_waiter(self, name: str, token: str, meta: str, patience_ms: int) -> None:
        if patience_ms > 0:
            queue = self.waiting.setdefault(name, {})
            meta, arrival, _ = queue.get(token, (meta, time.time_ns() // 1000, 0.0))
            queue[token] = (meta, arrival, time.monotonic() + patience_ms / 1000)

    def forget_waiter(self, name: str, token: str) -> None:
        queue = self.waiting.get(name)
        if queue is not None:
            queue.pop(token, None)
            if not queue:
                del self.waiting[name]

    def registered(self, name: str) -> list[tuple[str, int]]:
        """The metadata and arrival (us) of each waiter still registered, oldest first."""
        now = time.monotonic()
        queue = self.waiting.get(name, {})
        return [(meta, arrival) for meta, arrival, end in queue.values() if end > now]

    def next_fence(self, name: str) -> tuple[int, int]:
        """Return a new fencing token of ``name`` (either kind) and the time (ms)."""
        now_us = time.time_ns() // 1000
        fence = max(now_us, self.fences.get(name, 0) + 1)
        self.fences[name] = fence
        return fence, now_us // 1000


class LocMemBackend(BaseLockBackend):
    """Keep locks in this process's memory: no server, no mutual exclusion across processes.

    A system check warns when it is configured with ``DEBUG = False``.
    """

    def configure(self, params: dict[str, Any], problems: Problems) -> None:
        super().configure(params, problems)
        location = params.get("LOCATION", "")
        with _stores_guard:
            self._store = _stores.setdefault(f"{self.key_prefix}:{location}", _Store())

    def try_acquire(
        self, name: str, token: str, ttl_ms: int, meta: str, grant: str | None, patience_ms: int
    ) -> Attempt:
        store = self._store
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
                return Attempt(False, holder_pttl_ms=_pttl([entry] if entry else readers.values()))
            store.dequeue(name, token)
            store.forget_waiter(name, token)
            fence, acquired_ms = store.next_fence(name)
            store.held[name] = _Held(
                token=token,
                fence=fence,
                meta=meta,
                acquired_ms=acquired_ms,
                expires=time.monotonic() + ttl_ms / 1000,
            )
            return Attempt(True, fencing_token=fence, acquired_ms=acquired_ms)

    def wait_for_turn(self, name: str, timeout: float) -> str | None:
        store = self._store
        with store.changed:
            if store.current(name) is not None or name in store.readers or name in store.queues:
                store.changed.wait(timeout)
        return None

    def _wait_for_turn_of(self, name: str, token: str, shared: bool, timeout: float) -> None:
        """Block until ``token`` may take ``name`` or ``timeout`` passes. Checked under the
        store's condition, with the token: a release between the failed attempt and this
        wait is not missed, and the waiters ahead of it are seen."""
        with self._store.changed:
            if self._store.must_wait(name, token, shared):
                self._store.changed.wait(timeout)

    def wait_and_acquire(
        self, timeout: float, name: str, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        self._wait_for_turn_of(name, token, False, timeout)
        sent = time.monotonic()
        return self.try_acquire(name, token, ttl_ms, meta, None, patience_ms)._replace(sent=sent)

    async def await_and_acquire(
        self, timeout: float, name: str, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        # Wait in a thread (blocking on the condition would stall the event loop), acquire
        # on the loop: a task cancelled while it waits takes nothing.
        await asyncio.to_thread(self._wait_for_turn_of, name, token, False, timeout)
        sent = time.monotonic()
        return self.try_acquire(name, token, ttl_ms, meta, None, patience_ms)._replace(sent=sent)

    def leave_queue(self, name: str, token: str) -> None:
        """Leave the queue of ``name`` (either kind's)."""
        with self._store.changed:
            self._store.dequeue(name, token)
            self._store.forget_waiter(name, token)
            self._store.changed.notify_all()

    def waiters(self, name: str) -> list[WaiterInfo] | None:
        validate_name(name)
        with self._store.changed:
            registered = self._store.registered(name)
        now_ms = time.time_ns() // 1_000_000
        return [
            WaiterInfo.from_stored(meta_json=meta, arrival_us=arrival, now_ms=now_ms)
            for meta, arrival in registered
        ]

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

    def extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        with self._store.changed:
            entry = self._store.current(name)
            if entry is None or entry.token != token:
                return False
            return self._extend_hold(entry, name, ttl_ms, renewal, reenter)

    def _extend_hold(
        self, held: _Held, name: str, ttl_ms: int, renewal: bool, reenter: bool
    ) -> bool:
        """Set a hold's lease (either kind; the store's condition held), as extend.lua does."""
        if renewal and self.max_renewals is not None and held.renewals >= self.max_renewals:
            raise self.renewal_limit_reached(name)
        held.expires = time.monotonic() + ttl_ms / 1000
        held.renewals += renewal
        held.depth += reenter
        return True

    def info(self, name: str) -> LockInfo | None:
        validate_name(name)
        with self._store.changed:
            entry = self._store.current(name)
            if entry is None:  # the first shared holder to end, if any (as on Redis)
                return next(iter(self.shared_holders(name)), None)
            pttl = max(round((entry.expires - time.monotonic()) * 1000), 0)
            return LockInfo.from_stored(
                name=name,
                token=entry.token,
                fence=entry.fence,
                meta_json=entry.meta,
                acquired_ms=entry.acquired_ms,
                now_ms=time.time_ns() // 1_000_000,
                pttl_ms=pttl,
                renewals=entry.renewals,
                depth=entry.depth,
                alias=self.alias,
                waiters=len(self._store.registered(name)),
            )

    def held_names(self, prefix: str = "") -> list[HeldEntry]:
        with self._store.changed:
            names = [name for name in list(self._store.held) if name.startswith(prefix)]
            now, wall = time.monotonic(), time.time()
            found = []
            for name in names:
                entry = self._store.current(name)
                if entry is not None:
                    found.append(
                        HeldEntry(
                            name,
                            wall + entry.expires - now,
                            entry.acquired_ms / 1000,
                            len(self._store.registered(name)),
                        )
                    )
        return sorted(found)

    # --- shared locks -----------------------------------------------------------------
    def shared_acquire(
        self,
        name: str,
        token: str,
        ttl_ms: int,
        meta: str,
        patience_ms: int,
        downgrade_from: str = "",
    ) -> Attempt:
        store = self._store
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
                return Attempt(False, holder_pttl_ms=_pttl(wait))
            store.dequeue(name, token)
            store.forget_waiter(name, token)
            fence, acquired_ms = store.next_fence(name)
            store.readers.setdefault(name, {})[token] = _Held(
                token, fence, meta, acquired_ms, time.monotonic() + ttl_ms / 1000
            )
            store.changed.notify_all()  # shared waiters behind it may come in too
            return Attempt(True, fencing_token=fence, acquired_ms=acquired_ms)

    def shared_wait_and_acquire(
        self, timeout: float, name: str, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        self._wait_for_turn_of(name, token, True, timeout)
        sent = time.monotonic()
        attempt = self.shared_acquire(name, token, ttl_ms, meta, patience_ms)
        return attempt._replace(sent=sent)

    def shared_leave(self, name: str, token: str) -> None:
        self.leave_queue(name, token)

    def shared_release(self, name: str, token: str, *, every_level: bool = False) -> int:
        store = self._store
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

    def shared_extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        with self._store.changed:
            held = self._store.current_readers(name).get(token)
            if held is None:
                return False
            return self._extend_hold(held, name, ttl_ms, renewal, reenter)

    def shared_holders(self, name: str) -> tuple[LockInfo, ...]:
        validate_name(name)
        with self._store.changed:
            holds = sorted(self._store.current_readers(name).values(), key=lambda h: h.expires)
            waiters = len(self._store.registered(name))
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
                    alias=self.alias,
                    shared=True,
                    waiters=waiters,
                )
                for held in holds
            )

    def held_shared(self, prefix: str = "") -> dict[str, tuple[LockInfo, ...]]:
        with self._store.changed:
            names = sorted(name for name in self._store.readers if name.startswith(prefix))
        found = {name: self.shared_holders(name) for name in names}
        return {name: holders for name, holders in found.items() if holders}

    async def ashared_acquire(
        self,
        name: str,
        token: str,
        ttl_ms: int,
        meta: str,
        patience_ms: int,
        downgrade_from: str = "",
    ) -> Attempt:
        return self.shared_acquire(name, token, ttl_ms, meta, patience_ms, downgrade_from)

    async def ashared_wait_and_acquire(
        self, timeout: float, name: str, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        # Wait in a thread, acquire on the loop (as await_and_acquire): acquired in the
        # thread, a cancelled task's hold would outlive it for its whole lease.
        await asyncio.to_thread(self._wait_for_turn_of, name, token, True, timeout)
        sent = time.monotonic()
        attempt = self.shared_acquire(name, token, ttl_ms, meta, patience_ms)
        return attempt._replace(sent=sent)

    async def ashared_leave(self, name: str, token: str) -> None:
        self.shared_leave(name, token)

    async def ashared_release(self, name: str, token: str, *, every_level: bool = False) -> int:
        return self.shared_release(name, token, every_level=every_level)

    async def ashared_extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        return self.shared_extend(name, token, ttl_ms, renewal=renewal, reenter=reenter)

    async def ashared_holders(self, name: str) -> tuple[LockInfo, ...]:
        return self.shared_holders(name)

    # --- semaphores -------------------------------------------------------------------
    def _semaphores(self) -> dict[str, _Semaphore]:
        return self._store.semaphores

    def _tidy(self, name: str, semaphore: _Semaphore) -> None:
        if semaphore.empty():
            self._semaphores().pop(name, None)
        self._store.changed.notify_all()

    def semaphore_acquire(
        self, name: str, limit: int, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        with self._store.changed:
            semaphore = self._semaphores().setdefault(name, _Semaphore())
            semaphore.limit = limit
            now = time.monotonic()
            semaphore.settle(now)
            held = semaphore.holders.get(token)
            if held is not None:
                return Attempt(True, fencing_token=held.fence, acquired_ms=held.acquired_ms)
            reserved = semaphore.reserved.pop(token, None) is not None
            if not reserved and len(semaphore.holders) + len(semaphore.reserved) >= limit:
                if patience_ms > 0:  # a token already queued keeps its place
                    semaphore.queue[token] = now + patience_ms / 1000
                wait_ms = semaphore.next_free_ms(now)
                self._tidy(name, semaphore)
                return Attempt(False, holder_pttl_ms=wait_ms)
            now_us = time.time_ns() // 1000
            semaphore.fence = fence = max(now_us, semaphore.fence + 1)
            semaphore.queue.pop(token, None)
            semaphore.holders[token] = _Permit(meta, now_us // 1000, fence, now + ttl_ms / 1000)
            self._store.changed.notify_all()  # a grown limit may have reserved permits
            return Attempt(True, fencing_token=fence, acquired_ms=now_us // 1000)

    def _semaphore_wait(self, name: str, token: str, timeout: float) -> None:
        with self._store.changed:
            semaphore = self._semaphores().get(name)
            if semaphore is not None and token not in semaphore.reserved:
                self._store.changed.wait(timeout)

    def semaphore_wait_and_acquire(
        self,
        timeout: float,
        name: str,
        limit: int,
        token: str,
        ttl_ms: int,
        meta: str,
        patience_ms: int,
    ) -> Attempt:
        """Wait until a permit is reserved for ``token`` (or ``timeout`` passes), then try
        to take it (no round trip to save in memory)."""
        self._semaphore_wait(name, token, timeout)
        sent = time.monotonic()
        attempt = self.semaphore_acquire(name, limit, token, ttl_ms, meta, patience_ms)
        return attempt._replace(sent=sent)

    def semaphore_leave(self, name: str, token: str) -> None:
        with self._store.changed:
            semaphore = self._semaphores().get(name)
            if semaphore is not None:
                semaphore.queue.pop(token, None)
                semaphore.reserved.pop(token, None)
                semaphore.settle(time.monotonic())
                self._tidy(name, semaphore)

    def semaphore_release(self, name: str, token: str) -> int:
        with self._store.changed:
            semaphore = self._semaphores().get(name)
            if semaphore is None:
                return 0
            semaphore.settle(time.monotonic())
            released = semaphore.holders.pop(token, None) is not None
            semaphore.settle(time.monotonic())
            self._tidy(name, semaphore)
            return int(released)

    def semaphore_extend(self, name: str, token: str, ttl_ms: int, *, renewal: bool) -> int:
        with self._store.changed:
            semaphore = self._semaphores().get(name)
            if semaphore is None:
                return 0
            semaphore.settle(time.monotonic())
            held = semaphore.holders.get(token)
            if held is None:
                return 0
            if renewal and self.max_renewals is not None and held.renewals >= self.max_renewals:
                return 2
            held.expires = time.monotonic() + ttl_ms / 1000
            held.renewals += renewal
            return 1

    def semaphore_info(self, name: str) -> SemaphoreInfo | None:
        validate_name(name)
        with self._store.changed:
            semaphore = self._semaphores().get(name)
            if semaphore is None:
                return None
            now = time.monotonic()
            semaphore.settle(now)
            if not (semaphore.holders or semaphore.queue):
                return None
            now_ms = time.time_ns() // 1_000_000
            holders = tuple(
                LockInfo.from_stored(
                    name=name,
                    token=token,
                    fence=held.fence,
                    meta_json=held.meta,
                    acquired_ms=held.acquired_ms,
                    now_ms=now_ms,
                    pttl_ms=round((held.expires - now) * 1000),
                    renewals=held.renewals,
                    depth=1,
                    alias=self.alias,
                    waiters=len(semaphore.queue) + len(semaphore.reserved),
                )
                for token, held in sorted(semaphore.holders.items(), key=lambda i: i[1].expires)
            )
            return SemaphoreInfo(
                name=name,
                limit=semaphore.limit,
                holders=holders,
                waiting=len(semaphore.queue) + len(semaphore.reserved),
                alias=self.alias,
            )

    def held_semaphores(self, prefix: str = "") -> list[SemaphoreInfo]:
        with self._store.changed:
            names = sorted(name for name in self._semaphores() if name.startswith(prefix))
        found = (self.semaphore_info(name) for name in names)
        return [info for info in found if info is not None and info.holders]

    # The in-memory store answers at once: the async twins call the sync methods directly.
    async def asemaphore_acquire(
        self, name: str, limit: int, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        return self.semaphore_acquire(name, limit, token, ttl_ms, meta, patience_ms)

    async def asemaphore_wait_and_acquire(
        self,
        timeout: float,
        name: str,
        limit: int,
        token: str,
        ttl_ms: int,
        meta: str,
        patience_ms: int,
    ) -> Attempt:
        # Wait in a thread, acquire on the loop (as await_and_acquire): acquired in the
        # thread, a cancelled task's permit would outlive it for its whole lease.
        await asyncio.to_thread(self._semaphore_wait, name, token, timeout)
        sent = time.monotonic()
        attempt = self.semaphore_acquire(name, limit, token, ttl_ms, meta, patience_ms)
        return attempt._replace(sent=sent)

    async def asemaphore_leave(self, name: str, token: str) -> None:
        self.semaphore_leave(name, token)

    async def asemaphore_release(self, name: str, token: str) -> int:
        return self.semaphore_release(name, token)

    async def asemaphore_extend(self, name: str, token: str, ttl_ms: int, *, renewal: bool) -> int:
        return self.semaphore_extend(name, token, ttl_ms, renewal=renewal)

    async def asemaphore_info(self, name: str) -> SemaphoreInfo | None:
        return self.semaphore_info(name)


def _pttl(holds: Iterable[_Held]) -> int:
    """Return ms until the last of ``holds`` ends (1 when there are none)."""
    now = time.monotonic()
    return max((round((h.expires - now) * 1000) for h in holds), default=1) or 1
