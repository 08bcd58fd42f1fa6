"""ScriptedBackend: the backend operations of one Redis server (or Cluster) that a redis-py
client reaches, locks and semaphores kept by the Lua scripts.

A subclass supplies the client: RedisBackend builds its own (and an async one per event
loop), DjangoRedisBackend borrows a django-redis cache's. Each operation is one generator in
.holds, .shared, .semaphores or .listing, run on the sync client or the async one (``run``/
``arun``, from .runner) by the operations object of its kind (.kinds, .scripted).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from ...exceptions import BackendUnavailable
from ...info import LockInfo, WaiterInfo
from ..base import BaseLockBackend, check_prefix
from ..operations import Operations
from . import holds, listing, shared
from .runner import Runner


class ScriptedBackend(Runner, BaseLockBackend):
    """Run the lock and semaphore operations on ``self.client`` (a subclass provides it)."""

    def unconfirmed(self, name: str, confirmed: int) -> BackendUnavailable:
        """The error of a write fewer replicas confirmed than WAIT_REPLICAS asks."""
        return BackendUnavailable(
            f"Only {confirmed} of the {self.wait_replicas} replicas required by WAIT_REPLICAS "
            f"confirmed the lease on {name!r} within {self.wait_timeout_ms} ms at "
            f"{self.address}; a failover could lose it, so it is not reported as held.",
            name=name,
        )

    # Each kind's operations class on Redis, as its definition names it (redis_ops.kinds for
    # the first three; a kind's own module for a new one).
    kind_family: ClassVar[str] = "redis"
    kind_classes: ClassVar[dict[str, type[Operations]]] = {}

    # unasync: the async source of the sync code after it
    async def ainfo(self, name: str) -> LockInfo | None:
        # The exclusive holder, or one of the shared holders (shared.info).
        return await self.arun(shared.info(self, name))

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def info(self, name: str) -> LockInfo | None:
        # The exclusive holder, or one of the shared holders (shared.info).
        return self.run(shared.info(self, name))

    # unasync: end

    def waiters(self, name: str) -> list[WaiterInfo] | None:
        return self.run(holds.waiters(self, name))

    # --- listing (sync only: operators' calls) --------------------------------------------
    def info_many(self, names: list[str]) -> list[LockInfo]:
        return self.run(listing.info_many(self, names))

    def iter_held(self, prefix: str = "") -> Iterator[LockInfo]:
        """Yield the LockInfo of every held lock whose name starts with ``prefix``, in no
        particular order, at a cost of about one read per held lock (see listing.walk)."""
        check_prefix(prefix)
        return listing.walk(self, self, prefix)
