"""One held lock in full on the "Held locks" page: its holder and who waits for it, oldest
first (the waiters' metadata is stored by the acquire script when they queue)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from ..handler import locks
from ..info import LockInfo, WaiterInfo
from .display import describe_holder, format_remaining


@dataclass(frozen=True)
class LockDetail:
    """What the detail page shows: the hold (None when it ended) and its waiters (None when
    the backend keeps only how many)."""

    alias: str
    name: str
    info: LockInfo | None
    waiters: list[WaiterInfo] | None

    @property
    def holder(self) -> str:
        return describe_holder(self.info) if self.info is not None else ""

    @property
    def expires_in(self) -> str:
        return format_remaining(self.info.ttl_remaining) if self.info is not None else ""

    @property
    def waiting_for(self) -> list[tuple[int, WaiterInfo, str]]:
        """Each waiter with its place in the queue (1: next) and how long it has waited."""
        return [
            (place, waiter, format_remaining(waiter.waited))
            for place, waiter in enumerate(self.waiters or [], start=1)
        ]


def read_detail(alias: str, name: str) -> LockDetail:
    """Read lock ``name`` of ``alias`` and its waiters (raise what the backend raises)."""
    backend = locks[alias]
    info = backend.info(name)
    return LockDetail(alias, name, info, backend.waiters(name) if info is not None else [])


def detail_url(base: str, info: LockInfo, filters: str) -> str:
    """Return the URL of the detail page of ``info``'s lock; ``filters`` is the list's query,
    for the way back."""
    return f"{base}?{urlencode({'alias': info.alias, 'name': info.name, 'f': filters})}"
