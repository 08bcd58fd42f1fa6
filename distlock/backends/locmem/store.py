"""The in-memory store of LocMemBackend: one per LOCATION, shared by every backend instance
that names it (as locmem caches), with the rules of the Redis scripts
(distlock/backends/redis_ops/lua/) kept in memory."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...tokens import NON_FAIR_MARK
from ..base import HANDOFF_GRACE_MS

# One store per LOCATION, shared by every backend instance that names it (as locmem caches).
stores: dict[str, Store] = {}
stores_guard = threading.Lock()


@dataclass
class Held:
    token: str
    fence: int
    meta: str
    acquired_ms: int
    expires: float  # time.monotonic()
    renewals: int = 0
    depth: int = 1


@dataclass
class Permit:
    meta: str
    acquired_ms: int
    fence: int
    expires: float  # time.monotonic()
    renewals: int = 0


@dataclass
class Semaphore:
    limit: int = 0
    fence: int = 0
    holders: dict[str, Permit] = field(default_factory=dict)
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
class Store:
    held: dict[str, Held] = field(default_factory=dict)
    fences: dict[str, int] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)
    semaphores: dict[str, Semaphore] = field(default_factory=dict)
    # Shared holds of a lock: name -> token -> hold; and the waiters of each lock, both
    # kinds in one queue (first come, first served): name -> token -> (shared, patience end).
    readers: dict[str, dict[str, Held]] = field(default_factory=dict)
    queues: dict[str, OrderedDict[str, tuple[bool, float]]] = field(default_factory=dict)
    # Who waits for each lock (either kind), in arrival order, for operators: token ->
    # (metadata, arrival us, patience end by time.monotonic()), as the scripts' queue, live
    # zset and '|about' hash keep it.
    waiting: dict[str, dict[str, tuple[str, int, float]]] = field(default_factory=dict)
    # What a kind defined later keeps, by its word (the kinds above have their own fields):
    # its module reads and writes ``kept[word]`` as it likes, under ``changed``.
    kept: dict[str, dict[str, Any]] = field(default_factory=dict)

    def current(self, name: str) -> Held | None:
        entry = self.held.get(name)
        if entry is not None and entry.expires <= time.monotonic():
            del self.held[name]
            return None
        return entry

    def current_readers(self, name: str) -> dict[str, Held]:
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

    def admit(self, name: str, token: str, meta: str, ttl_ms: int) -> Held:
        """Return ``token``'s new hold of ``name`` (either kind: a new fence), out of the
        queue; the caller keeps it where its kind's holds are kept."""
        self.dequeue(name, token)
        fence, acquired_ms = self.next_fence(name)
        return Held(token, fence, meta, acquired_ms, time.monotonic() + ttl_ms / 1000)

    def drop(self, name: str, token: str, shared: bool) -> None:
        """End ``token``'s hold of ``name`` (a shared one if ``shared``) and wake the
        waiters."""
        if shared:
            del self.readers[name][token]
            self.current_readers(name)  # drops the name when nobody is left
        else:
            del self.held[name]
        self.changed.notify_all()

    def blocked(self, name: str, token: str, shared: bool) -> bool:
        """Return True if a registered waiter ahead of ``token`` goes first: any waiter for
        a fair exclusive acquirer, an exclusive waiter for a shared one, none for a non-fair
        acquirer (as the scripts rule)."""
        queue = self.queues.get(name)
        if not queue or token.startswith(NON_FAIR_MARK):
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

    def enqueue(self, name: str, token: str, shared: bool, meta: str, patience_ms: int) -> None:
        """Queue ``token`` for ``patience_ms`` (0: not at all) and register it for operators:
        its queue end is the later of its patiences, its arrival and metadata its first."""
        if patience_ms > 0:
            end = time.monotonic() + patience_ms / 1000
            queue = self.queues.setdefault(name, OrderedDict())
            queue[token] = (shared, max(end, queue.get(token, (shared, 0.0))[1]))
            register = self.waiting.setdefault(name, {})
            meta, arrival, _ = register.get(token, (meta, time.time_ns() // 1000, 0.0))
            register[token] = (meta, arrival, end)

    def dequeue(self, name: str, token: str) -> None:
        """Take ``token`` out of the queue of ``name`` and out of its register."""
        for table in (self.queues, self.waiting):
            _drop(table, name, token)

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


def wait_for_turn(store: Store, name: str, token: str, shared: bool, timeout: float) -> None:
    """Block until ``token`` may take ``name`` (of its kind) or ``timeout`` passes. Checked
    under the store's condition, with the token: a release between the failed attempt and
    this wait is not missed, and the waiters ahead of it are seen."""
    with store.changed:
        if store.must_wait(name, token, shared):
            store.changed.wait(timeout)


def pttl(holds: Iterable[Held]) -> int:
    """Return ms until the last of ``holds`` ends (1 when there are none)."""
    now = time.monotonic()
    return max((round((h.expires - now) * 1000) for h in holds), default=1) or 1


def _drop(table: dict[str, Any], name: str, token: str) -> None:
    """Drop ``token`` from ``table[name]``, and ``name`` when nothing is left."""
    entries = table.get(name)
    if entries is not None:
        entries.pop(token, None)
        if not entries:
            del table[name]
