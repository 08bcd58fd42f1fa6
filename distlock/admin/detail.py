"""One held lock in full on the "Held locks" page, of any kind: the exclusive holder, every
shared holder, or every permit of a semaphore with its limit; and who waits for it, oldest
first (the waiters' metadata is stored by the acquire script when they queue)."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.utils.safestring import SafeString

from ..backends.base import BaseLockBackend
from ..exceptions import SemaphoresNotSupported
from ..handler import locks
from ..info import LockInfo, SemaphoreInfo, WaiterInfo
from .display import breakable, describe_holder, format_remaining
from .semaphores import PermitRow, permit_rows

KINDS = ("lock", "shared", "semaphore")


@dataclass(frozen=True)
class LockDetail:
    """What the detail page shows. ``kind`` is "" when nothing of that name is held any
    more; ``info`` is the exclusive holder (kind "lock"); ``holders`` the shared holders or
    the semaphore's permits; ``waiters`` None when the backend keeps how many wait, not
    who."""

    alias: str
    name: str
    kind: str = ""
    info: LockInfo | None = None
    holders: list[PermitRow] = field(default_factory=list)
    limit: int | None = None  # a semaphore's
    waiting: int | None = None  # how many wait (None: the backend cannot say)
    waiters: list[WaiterInfo] | None = field(default_factory=list)

    @property
    def name_html(self) -> SafeString:
        return breakable(self.name)

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


def read_detail(
    alias: str, name: str, kind: str, release_bases: dict[str, str], filters: str
) -> LockDetail:
    """Read ``name`` of ``alias`` as ``kind`` (any kind held under that name when "") with
    its waiters; ``release_bases`` are the release pages of a shared hold ("shared") and a
    permit ("semaphore"). Raise what the backend raises."""
    backend = locks[alias]
    info = backend.info(name) if kind != "semaphore" else None
    if info is None:
        semaphore = _semaphore(backend, name) if kind in ("", "semaphore") else None
        if semaphore is None:
            return LockDetail(alias, name)
        return LockDetail(
            alias,
            name,
            "semaphore",
            holders=permit_rows(semaphore.holders, release_bases["semaphore"], filters),
            limit=semaphore.limit,
            waiting=semaphore.waiting,
            # A semaphore's queue keeps tokens, not who they are: how many, then.
            waiters=None if semaphore.waiting else [],
        )
    queued = backend.waiters(name)
    if not info.shared:
        return LockDetail(alias, name, "lock", info, waiting=info.waiters, waiters=queued)
    return LockDetail(
        alias,
        name,
        "shared",
        holders=permit_rows(backend.shared.inspect(name), release_bases["shared"], filters),
        waiting=info.waiters,
        waiters=queued,
    )


def _semaphore(backend: BaseLockBackend, name: str) -> SemaphoreInfo | None:
    try:
        semaphore = backend.semaphores.describe(name)
    except SemaphoresNotSupported:
        return None
    return semaphore if semaphore is not None and semaphore.holders else None
