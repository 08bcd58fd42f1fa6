"""ScriptedBackend: the backend operations of one Redis server (or Cluster) that a redis-py
client reaches, locks and semaphores kept by the Lua scripts.

A subclass supplies the client: RedisBackend builds its own (and an async one per event
loop), DjangoRedisBackend borrows a django-redis cache's. Each operation is one generator in
.locks, .semaphores or .listing; here each is run on the sync client and, beside it, on the
async one (``run``/``arun``, from .runner). Each async acquire names the release that gives
its token back, for a task cancelled while part of it runs in a thread (see .threads).
"""

from __future__ import annotations

from collections.abc import Iterator

from ...exceptions import BackendUnavailable
from ...info import LockInfo, SemaphoreInfo, WaiterInfo
from ..base import Attempt, BaseLockBackend, HeldEntry, check_prefix
from . import grants, listing, locks, semaphores, shared
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

    # --- locks (no grants on one server: a release hands the lock to a waiter's token) ---
    def try_acquire(
        self, name: str, token: str, ttl_ms: int, meta: str, grant: str | None, patience_ms: int
    ) -> Attempt:
        return self.run(locks.try_acquire(self, name, token, ttl_ms, meta, patience_ms))

    async def atry_acquire(
        self, name: str, token: str, ttl_ms: int, meta: str, grant: str | None, patience_ms: int
    ) -> Attempt:
        return await self.arun(
            locks.try_acquire(self, name, token, ttl_ms, meta, patience_ms),
            give_back=lambda: locks.release(self, name, token, False),
        )

    def wait_and_acquire(
        self, timeout: float, name: str, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        return self.run(
            locks.wait_and_acquire(self, timeout, name, token, ttl_ms, meta, patience_ms)
        )

    async def await_and_acquire(
        self, timeout: float, name: str, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        return await self.arun(
            locks.wait_and_acquire(self, timeout, name, token, ttl_ms, meta, patience_ms),
            give_back=lambda: locks.release(self, name, token, False),
        )

    def wait_for_turn(self, name: str, timeout: float) -> str | None:
        # Redlock's waiters block on one node (on one server, wait_and_acquire does it all).
        return self.run(grants.wait_for_grant(self.layout, name, timeout))

    async def await_for_turn(self, name: str, timeout: float) -> str | None:
        return await self.arun(grants.wait_for_grant(self.layout, name, timeout))

    def leave_queue(self, name: str, token: str) -> None:
        self.run(locks.leave_queue(self, name, token))

    async def aleave_queue(self, name: str, token: str) -> None:
        await self.arun(locks.leave_queue(self, name, token))

    def release(self, name: str, token: str, *, every_level: bool = False) -> int:
        return self.run(locks.release(self, name, token, every_level))

    async def arelease(self, name: str, token: str, *, every_level: bool = False) -> int:
        return await self.arun(locks.release(self, name, token, every_level))

    def extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        return self.run(locks.extend(self, name, token, ttl_ms, renewal, reenter))

    async def aextend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        return await self.arun(locks.extend(self, name, token, ttl_ms, renewal, reenter))

    def info(self, name: str) -> LockInfo | None:
        # The exclusive holder, or one of the shared holders (shared.info).
        return self.run(shared.info(self, name))

    async def ainfo(self, name: str) -> LockInfo | None:
        return await self.arun(shared.info(self, name))

    def waiters(self, name: str) -> list[WaiterInfo] | None:
        return self.run(locks.waiters(self, name))

    # --- listing (sync only: operators' calls) --------------------------------------------
    def info_many(self, names: list[str]) -> list[LockInfo]:
        return self.run(listing.info_many(self, names))

    def held_names(self, prefix: str = "") -> list[HeldEntry]:
        return self.run(listing.held_names(self, prefix))

    def iter_held(self, prefix: str = "") -> Iterator[LockInfo]:
        """Yield the LockInfo of every held lock whose name starts with ``prefix``, in no
        particular order, at a cost of about one read per held lock (see listing.walk)."""
        check_prefix(prefix)
        return listing.walk(self, self, prefix)

    # --- semaphores -----------------------------------------------------------------------
    def semaphore_acquire(
        self, name: str, limit: int, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        return self.run(semaphores.acquire(self, name, limit, token, ttl_ms, meta, patience_ms))

    async def asemaphore_acquire(
        self, name: str, limit: int, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        return await self.arun(
            semaphores.acquire(self, name, limit, token, ttl_ms, meta, patience_ms),
            give_back=lambda: semaphores.release(self, name, token),
        )

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
        return self.run(
            semaphores.wait_and_acquire(
                self, timeout, name, limit, token, ttl_ms, meta, patience_ms
            )
        )

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
        return await self.arun(
            semaphores.wait_and_acquire(
                self, timeout, name, limit, token, ttl_ms, meta, patience_ms
            ),
            give_back=lambda: semaphores.release(self, name, token),
        )

    def semaphore_leave(self, name: str, token: str) -> None:
        self.run(semaphores.leave(self, name, token))

    async def asemaphore_leave(self, name: str, token: str) -> None:
        await self.arun(semaphores.leave(self, name, token))

    def semaphore_release(self, name: str, token: str) -> int:
        return self.run(semaphores.release(self, name, token))

    async def asemaphore_release(self, name: str, token: str) -> int:
        return await self.arun(semaphores.release(self, name, token))

    def semaphore_extend(self, name: str, token: str, ttl_ms: int, *, renewal: bool) -> int:
        return self.run(semaphores.extend(self, name, token, ttl_ms, renewal))

    async def asemaphore_extend(self, name: str, token: str, ttl_ms: int, *, renewal: bool) -> int:
        return await self.arun(semaphores.extend(self, name, token, ttl_ms, renewal))

    def semaphore_info(self, name: str) -> SemaphoreInfo | None:
        return self.run(semaphores.info(self, name))

    async def asemaphore_info(self, name: str) -> SemaphoreInfo | None:
        return await self.arun(semaphores.info(self, name))

    def held_semaphores(self, prefix: str = "") -> list[SemaphoreInfo]:
        return self.run(semaphores.held_semaphores(self, prefix))

    # --- shared locks ---------------------------------------------------------------------
    def shared_acquire(
        self,
        name: str,
        token: str,
        ttl_ms: int,
        meta: str,
        patience_ms: int,
        downgrade_from: str = "",
    ) -> Attempt:
        steps = shared.try_acquire(self, name, token, ttl_ms, meta, patience_ms, downgrade_from)
        return self.run(steps)

    async def ashared_acquire(
        self,
        name: str,
        token: str,
        ttl_ms: int,
        meta: str,
        patience_ms: int,
        downgrade_from: str = "",
    ) -> Attempt:
        return await self.arun(
            shared.try_acquire(self, name, token, ttl_ms, meta, patience_ms, downgrade_from),
            give_back=lambda: shared.release(self, name, token, False),
        )

    def shared_wait_and_acquire(
        self, timeout: float, name: str, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        return self.run(
            shared.wait_and_acquire(self, timeout, name, token, ttl_ms, meta, patience_ms)
        )

    async def ashared_wait_and_acquire(
        self, timeout: float, name: str, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        return await self.arun(
            shared.wait_and_acquire(self, timeout, name, token, ttl_ms, meta, patience_ms),
            give_back=lambda: shared.release(self, name, token, False),
        )

    def shared_leave(self, name: str, token: str) -> None:
        self.run(shared.leave(self, name, token))

    async def ashared_leave(self, name: str, token: str) -> None:
        await self.arun(shared.leave(self, name, token))

    def shared_release(self, name: str, token: str, *, every_level: bool = False) -> int:
        return self.run(shared.release(self, name, token, every_level))

    async def ashared_release(self, name: str, token: str, *, every_level: bool = False) -> int:
        return await self.arun(shared.release(self, name, token, every_level))

    def shared_extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        return self.run(shared.extend(self, name, token, ttl_ms, renewal, reenter))

    async def ashared_extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        return await self.arun(shared.extend(self, name, token, ttl_ms, renewal, reenter))

    def shared_holders(self, name: str) -> tuple[LockInfo, ...]:
        return self.run(shared.holders(self, name))

    async def ashared_holders(self, name: str) -> tuple[LockInfo, ...]:
        return await self.arun(shared.holders(self, name))

    def held_shared(self, prefix: str = "") -> dict[str, tuple[LockInfo, ...]]:
        check_prefix(prefix)
        return self.run(shared.held_shared(self, prefix))
