"""The operations objects of the three kinds on one Redis server (or Cluster): each names
its generators in .holds, .shared, .semaphores and .listing, which .scripted runs."""

from __future__ import annotations

import time
from typing import ClassVar

from ...info import LockInfo, SemaphoreInfo
from ...keys import validate_name
from ...tokens import NON_FAIR_MARK
from ..base import check_prefix
from ..operations import (
    Attempt,
    ExclusiveKind,
    HeldEntry,
    Request,
    SemaphoreKind,
    SharedKind,
    entry_of,
)
from . import holds, listing, semaphores, shared
from .scripted import Scripted
from .steps import Pop, PopThenEval, Steps


class ScriptedOnLock(Scripted):
    """A kind held on the lock itself, run by the generators of .holds with the kind's calls
    (``calls``: holds.EXCLUSIVE or shared.SHARED): both kinds wait in the lock's one queue."""

    calls: ClassVar[holds.KindCalls]

    def acquiring(self, request: Request) -> Steps[Attempt]:
        return holds.try_acquire(self.backend, self.calls, request)

    def acquiring_when_free(self, request: Request, timeout: float) -> Steps[Attempt]:
        return holds.acquire_when_free(self.backend, self.calls, request, timeout)

    def leaving(self, name: str, token: str) -> Steps[None]:
        return holds.leave(self.backend, self.calls, name, token)

    def releasing(self, name: str, token: str, every_level: bool) -> Steps[int]:
        return holds.release(self.backend, self.calls, name, token, every_level)

    def extending(
        self, name: str, token: str, ttl_ms: int, renewal: bool, reenter: bool
    ) -> Steps[bool]:
        return holds.extend(self.backend, self.calls, name, token, ttl_ms, renewal, reenter)

    # The two calls of every uncontended pair, run straight when no replica must confirm:
    # each is then one Eval step whose reply holds.try_acquire and holds.release read with
    # the same functions, so driving a generator for it (made, sent to, stopped) only costs.
    # A step's BackendUnavailable is raised here as the generator would have raised it.
    def try_acquire(self, request: Request, grant: str | None = None) -> Attempt:
        backend = self.backend
        if backend.wait_replicas:
            return backend.run(self.acquiring(request))
        call = self.calls.acquire_call(backend.layout, request, False)
        return holds.attempt_from(backend.execute(call))

    def release(self, name: str, token: str, *, every_level: bool = False) -> int:
        backend = self.backend
        call = self.calls.release_call(backend.layout, name, token, every_level)
        return int(backend.execute(call))

    # A waiter's turn, run straight the same way (what holds.acquire_when_free does, step by
    # step): a non-fair waiter's Pop, then its acquire; a fair one's PopThenEval, whose rare
    # outcomes (a late reply, an error reply) go on in holds.after_turn. With replicas to
    # confirm, the generator runs it all.
    def acquire_when_free(self, request: Request, timeout: float) -> Attempt:
        backend = self.backend
        if backend.wait_replicas:
            return backend.run(self.acquiring_when_free(request, timeout))
        layout, calls = backend.layout, self.calls
        wake = calls.wake(layout, request.name, request.token)
        if request.token.startswith(NON_FAIR_MARK):
            backend.execute(Pop(wake, timeout))
            sent = time.monotonic()
            reply = backend.execute(calls.acquire_call(layout, request, True))
            return holds.attempt_from(reply, sent)
        call = calls.acquire_call(layout, request, True)
        sent = time.monotonic()
        replies = backend.execute(PopThenEval(wake, timeout, call))
        if (
            replies is None
            or isinstance(replies[0], Exception)
            or isinstance(replies[1], Exception)
        ):
            return backend.run(holds.after_turn(backend, calls, request, replies, sent))
        return holds.attempt_from(replies[1], sent)


class ScriptedExclusive(ScriptedOnLock, ExclusiveKind):
    """The exclusive lock (.holds)."""

    calls = holds.EXCLUSIVE

    def inspecting(self, name: str) -> Steps[tuple[LockInfo, ...]]:
        validate_name(name)
        reply = yield holds.inspect_call(self.backend.layout, name)
        info = holds.lock_info_from(self.backend.alias, name, reply)
        return () if info is None else (info,)

    def listing(self, prefix: str) -> Steps[list[HeldEntry]]:
        return listing.held_names(self.backend, prefix)


class ScriptedShared(ScriptedOnLock, SharedKind):
    """Shared holds of a lock (.shared)."""

    calls = shared.SHARED

    def inspecting(self, name: str) -> Steps[tuple[LockInfo, ...]]:
        return shared.inspect(self.backend, name)

    def listing(self, prefix: str) -> Steps[list[HeldEntry]]:
        check_prefix(prefix)
        held = yield from shared.held_shared(self.backend, prefix)
        return [entry_of(name, holders, holders[0].waiters or 0) for name, holders in held.items()]


class ScriptedSemaphore(Scripted, SemaphoreKind):
    """A semaphore's permits (.semaphores)."""

    def acquiring(self, request: Request) -> Steps[Attempt]:
        return semaphores.try_acquire(self.backend, request)

    def acquiring_when_free(self, request: Request, timeout: float) -> Steps[Attempt]:
        return semaphores.acquire_when_free(self.backend, request, timeout)

    def leaving(self, name: str, token: str) -> Steps[None]:
        return semaphores.leave(self.backend, name, token)

    def releasing(self, name: str, token: str, every_level: bool) -> Steps[int]:
        return semaphores.release(self.backend, name, token)  # a permit has one level

    def extending(
        self, name: str, token: str, ttl_ms: int, renewal: bool, reenter: bool
    ) -> Steps[bool]:
        outcome = yield from semaphores.extend(self.backend, name, token, ttl_ms, renewal)
        if outcome == 2:
            raise self.backend.renewal_limit_reached(name)
        return outcome == 1

    def inspecting(self, name: str) -> Steps[tuple[LockInfo, ...]]:
        info = yield from semaphores.describe(self.backend, name)
        return info.holders if info is not None else ()

    # unasync: the async source of the sync code after it
    async def adescribe(self, name: str) -> SemaphoreInfo | None:
        return await self.backend.arun(semaphores.describe(self.backend, name))

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def describe(self, name: str) -> SemaphoreInfo | None:
        return self.backend.run(semaphores.describe(self.backend, name))

    # unasync: end

    def listing(self, prefix: str) -> Steps[list[HeldEntry]]:
        held = yield from semaphores.held_semaphores(self.backend, prefix)
        return [entry_of(i.name, i.holders, i.waiting, i.limit) for i in held]
