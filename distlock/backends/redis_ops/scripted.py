"""Scripted: the operations of one kind on one Redis server (or Cluster), each a generator of
steps (.steps) run on the backend's sync client (``run``) or its async one (``arun``).

A kind (.holds, .shared, .semaphores) names its generators; the runs are written here once.
Each async acquire names the release that gives its token back, for a task cancelled while
part of it runs in a thread (see .threads).
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from ...info import LockInfo
from ..operations import Attempt, Backend, HeldEntry, Operations, Request
from .runner import GiveBack
from .steps import Scope, Steps

T = TypeVar("T")


class Runs(Backend, Scope, Protocol):
    """What a kind's generators run on: a ScriptedBackend (which imports the kinds: a
    protocol here, not an import back)."""

    def run(self, steps: Steps[T]) -> T: ...

    def execute(self, step: Any) -> Any: ...

    async def arun(self, steps: Steps[T], give_back: GiveBack = None) -> T: ...


class Scripted(Operations):
    """Run a kind's generators on ``self.backend`` (a ScriptedBackend)."""

    backend: Runs

    # --- the kind's generators ------------------------------------------------------------
    def acquiring(self, request: Request) -> Steps[Attempt]:
        raise NotImplementedError

    def acquiring_when_free(self, request: Request, timeout: float) -> Steps[Attempt]:
        raise NotImplementedError

    def leaving(self, name: str, token: str) -> Steps[None]:
        raise NotImplementedError

    def releasing(self, name: str, token: str, every_level: bool) -> Steps[int]:
        raise NotImplementedError

    def extending(
        self, name: str, token: str, ttl_ms: int, renewal: bool, reenter: bool
    ) -> Steps[bool]:
        raise NotImplementedError

    def inspecting(self, name: str) -> Steps[tuple[LockInfo, ...]]:
        raise NotImplementedError

    def listing(self, prefix: str) -> Steps[list[HeldEntry]]:
        raise NotImplementedError

    # --- run on the sync client -----------------------------------------------------------
    def try_acquire(self, request: Request, grant: str | None = None) -> Attempt:
        # (No grants on one server: a release hands the hold to a waiter's token.)
        return self.backend.run(self.acquiring(request))

    def acquire_when_free(self, request: Request, timeout: float) -> Attempt:
        return self.backend.run(self.acquiring_when_free(request, timeout))

    def leave(self, name: str, token: str) -> None:
        self.backend.run(self.leaving(name, token))

    def release(self, name: str, token: str, *, every_level: bool = False) -> int:
        return self.backend.run(self.releasing(name, token, every_level))

    def extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        return self.backend.run(self.extending(name, token, ttl_ms, renewal, reenter))

    def inspect(self, name: str) -> tuple[LockInfo, ...]:
        return self.backend.run(self.inspecting(name))

    def list(self, prefix: str = "") -> list[HeldEntry]:
        return self.backend.run(self.listing(prefix))

    # --- run on the async client ----------------------------------------------------------
    async def atry_acquire(self, request: Request, grant: str | None = None) -> Attempt:
        return await self.backend.arun(
            self.acquiring(request),
            give_back=lambda: self.releasing(request.name, request.token, False),
        )

    async def aacquire_when_free(self, request: Request, timeout: float) -> Attempt:
        return await self.backend.arun(
            self.acquiring_when_free(request, timeout),
            give_back=lambda: self.releasing(request.name, request.token, False),
        )

    async def aleave(self, name: str, token: str) -> None:
        await self.backend.arun(self.leaving(name, token))

    async def arelease(self, name: str, token: str, *, every_level: bool = False) -> int:
        return await self.backend.arun(self.releasing(name, token, every_level))

    async def aextend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        return await self.backend.arun(self.extending(name, token, ttl_ms, renewal, reenter))

    async def ainspect(self, name: str) -> tuple[LockInfo, ...]:
        return await self.backend.arun(self.inspecting(name))
