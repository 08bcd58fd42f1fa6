"""Semaphores: up to ``limit`` holders of one name at once, each with its own lease and token.

A :class:`Semaphore` is a :class:`distlock.Lock` whose backend calls go to the semaphore
operations of the same backend (``backend.semaphores``, its ``kind``), so acquiring with ``wait``,
release and extend by token, ``auto_renew`` with lost-lease notification, signals, ``with``/
``async with`` and the decorator all behave as they do for locks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import handler
from .backends.operations import SemaphoreKind
from .exceptions import LockError, SemaphoreFull
from .factory import factory_of
from .info import SemaphoreInfo
from .lock import Lock


def _permits(using: str) -> SemaphoreKind:
    """The semaphore operations of alias ``using`` (they raise SemaphoresNotSupported when
    its backend keeps none)."""
    return handler.locks[using].semaphores


class Semaphore(Lock):
    """Up to ``limit`` holders of ``name`` at once; this object holds at most one permit.

    Make one with :func:`distlock.semaphore`. ``fencing_token`` is the permit's number:
    rising per semaphore, unique among its holders (not a proof of exclusivity: ``limit``
    holders run at once).
    """

    kind = "semaphore"
    _copied = tuple(
        name for name in Lock._copied if name not in ("reentrant", "shared", "fence", "fair")
    )
    _already_held = (
        "This Semaphore object already holds a permit of {name!r}: release it first, or use "
        "another Semaphore object (one per concurrent holder)."
    )

    def __init__(
        self,
        name: str,
        limit: int,
        *,
        ttl: float | None = None,
        wait: float | None = None,
        auto_renew: bool = False,
        on_lost: Callable[[Lock], Any] | None = None,
        using: str = "default",
        purpose: str | None = None,
        hold_until_commit: bool = True,
        metric_name: str | None = None,
    ) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"limit must be a whole number of permits, not {limit!r}.")
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}.")
        super().__init__(
            name,
            ttl=ttl,
            wait=wait,
            auto_renew=auto_renew,
            on_lost=on_lost,
            using=using,
            purpose=purpose,
            hold_until_commit=hold_until_commit,
            metric_name=metric_name,
        )
        self.limit = limit

    def __repr__(self) -> str:
        state = f"holds permit {self.fencing_token}" if self.token else "holds no permit"
        return f"<Semaphore {self.name!r} limit {self.limit} using {self.using!r}: {state}>"

    def _full(self, info: SemaphoreInfo | None) -> bool:
        return info is not None and len(info.holders) >= self.limit

    # unasync: the async source of the sync code after it
    async def alocked(self) -> bool:
        """Return True if no permit is free right now (all ``limit`` are held)."""
        backend = _permits(self.using)
        return self._full(await backend.adescribe(self.name))

    # As a Lock's, but the error speaks of permits.
    async def __aenter__(self) -> Semaphore:
        if not await self.aacquire():
            try:
                info = await _permits(self.using).adescribe(self.name)
            except LockError:
                info = None
            raise self._full_error(info)
        return self

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def locked(self) -> bool:
        """Return True if no permit is free right now (all ``limit`` are held)."""
        backend = _permits(self.using)
        return self._full(backend.describe(self.name))

    # As a Lock's, but the error speaks of permits.
    def __enter__(self) -> Semaphore:
        if not self.acquire():
            try:
                info = _permits(self.using).describe(self.name)
            except LockError:
                info = None
            raise self._full_error(info)
        return self

    # unasync: end

    def _full_error(self, info: SemaphoreInfo | None) -> SemaphoreFull:
        holders = info.holders if info is not None else ()
        return SemaphoreFull(
            self.name,
            limit=self.limit,
            held=len(holders),
            holder=holders[0] if holders else None,
            wait=self.wait,
        )

    def holders(self) -> SemaphoreInfo | None:
        """Return the semaphore's holders and waiters, or None if nobody holds or waits."""
        return _permits(self.using).describe(self.name)

    def copy(self, **changes: Any) -> Semaphore:
        """Return a new Semaphore holding nothing, with the same settings (and ``changes``)."""
        name = changes.pop("name", self.name)
        limit = changes.pop("limit", self.limit)
        return Semaphore(name, limit, **{**self._settings(), **changes})


@factory_of(Semaphore)
def semaphore(*args: Any, **kwargs: Any) -> Semaphore:
    """Return a Semaphore: at most ``limit`` holders of ``name`` at once, on alias ``using``.

    ``ttl``, ``wait``, ``auto_renew``, ``on_lost`` and ``purpose`` mean what they mean for
    :func:`distlock.lock`; each holder has its own lease. ``hold_until_commit``: a release
    inside a database transaction waits for it to end, as a lock's does. ``metric_name``: as
    for :func:`distlock.lock`.
    """
    return Semaphore(*args, **kwargs)  # what a call does: factory_of makes the Semaphore itself
