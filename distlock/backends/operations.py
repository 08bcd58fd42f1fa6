"""The operations of one kind of hold (an exclusive lock, a shared hold, a semaphore's
permit), one name each and one return convention for every kind and backend.

A backend (distlock.backends.base) keeps one Operations object per kind: ``backend.exclusive``,
``backend.shared``, ``backend.semaphores`` (``backend.kinds()`` yields the three). A Lock
calls the object of its kind; the admin, the command and the metrics loop over the kinds.

Each kind has its base here (ExclusiveKind, SharedKind, SemaphoreKind); a backend family's
class of a kind is named by the family's base and the kind: ScriptedExclusive (redis_ops),
InMemoryExclusive (locmem), RedlockExclusive, UnsupportedShared, and so on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, NamedTuple, Protocol

from ..info import LockInfo, SemaphoreInfo
from ..offload import in_thread


class Attempt(NamedTuple):
    """What one acquire attempt found. (A NamedTuple: one is built per acquire, and a frozen
    dataclass's __init__ costs several times more.)"""

    acquired: bool
    fencing_token: int = 0
    acquired_ms: int = 0  # server time of the acquisition
    holder_pttl_ms: int = 0  # when not acquired: the holder's remaining lease
    place: int = -1  # when not acquired: the place in the queue (0 first), -1 not queued
    server_ms: int = 0  # when not acquired: the server's clock, if it told
    sent: float = 0.0  # time.monotonic() when the request that acquired was sent, if known


class Request(NamedTuple):
    """One acquire attempt: who asks for which name, for how long. (A NamedTuple: one is
    built per attempt, on the hot path.)"""

    name: str
    token: str
    ttl_ms: int
    meta: str  # the holder's metadata, JSON
    patience_ms: int  # how long the server keeps the token queued (0: not queued)
    limit: int = 1  # a semaphore's: at most this many holders
    # A shared hold's: the token of this thread's exclusive hold of the name, if any: while
    # it holds the lock, the shared hold is granted at once (a downgrade).
    downgrade_from: str = ""


class HeldEntry(NamedTuple):
    """One held name of a kind, as ``Operations.list`` finds it: enough to list, sort and
    page through held names without reading each one.

    The exclusive kind reads only its index (``holders`` empty: read a page of them with
    ``backend.info_many``); the shared and semaphore kinds keep no lease ends in theirs, so
    they read the holders in the same round trip and give them here.
    """

    name: str
    lease_end: float  # POSIX timestamp
    acquired: float  # POSIX timestamp; 0.0 when the index does not know it
    waiters: int = 0  # how many are queued for it (what LockInfo.waiters says)
    holders: tuple[LockInfo, ...] = ()  # first lease to end first, when read (see above)
    limit: int = 1  # how many may hold it at once (a semaphore's limit)


Listing = list[HeldEntry]  # (``list`` is a method name inside Operations)


def pick(holders: tuple[LockInfo, ...], token: str | None) -> LockInfo | None:
    """Return the holder with ``token`` among ``holders``, else the first (the lease that
    ends first), else None: what a Lock shows as "its" holder, of every kind."""
    for holder in holders:
        if holder.token == token:
            return holder
    return holders[0] if holders else None


def entry_of(name: str, holders: tuple[LockInfo, ...], waiters: int, limit: int = 1) -> HeldEntry:
    """Return the HeldEntry of ``name`` held by ``holders``, sorted as the exclusive index
    sorts: its lease ends with the first holder's, and it was taken when its newest came."""
    return HeldEntry(
        name,
        min(h.expires_at.timestamp() for h in holders),
        max(h.acquired_at.timestamp() for h in holders),
        waiters,
        holders,
        limit,
    )


class Backend(Protocol):
    """What an operations object reads of its backend (a BaseLockBackend, which imports
    this module: a protocol here, not an import back)."""

    alias: str
    default_timeout: float
    max_block: float

    @property
    def signal_sender(self) -> type: ...

    def lease_ms(self, ttl: float) -> int: ...

    def info(self, name: str) -> LockInfo | None: ...

    async def ainfo(self, name: str) -> LockInfo | None: ...

    def _force_released(self, kind: str, name: str, info: LockInfo | None) -> None: ...


class Operations:
    """The operations of one kind on one backend (``self.backend``).

    Subclasses implement the sync operations; the ``a``-prefixed async twins here run them in
    a worker thread, unless a subclass has a native async client (redis_ops) or answers at
    once (locmem).
    """

    kind: ClassVar[str] = "lock"  # "lock" | "shared" | "semaphore": the metrics' distlock.kind
    # Whose token force_release() needs, in its error ("" : None or "" means whoever holds).
    holder_token = ""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.kind} of {self.backend!r}>"

    # --- what a Lock reads of its backend, seen through its kind ------------------------
    @property
    def signal_sender(self) -> type:
        return self.backend.signal_sender

    @property
    def default_timeout(self) -> float:
        return self.backend.default_timeout

    @property
    def max_block(self) -> float:
        return self.backend.max_block

    def lease_ms(self, ttl: float) -> int:
        return self.backend.lease_ms(ttl)

    # --- the operations -----------------------------------------------------------------
    def try_acquire(self, request: Request, grant: str | None = None) -> Attempt:
        """Take a hold for ``request.token``, or queue it for ``request.patience_ms``;
        ``grant``: what a wait was handed (Redlock), if anything."""
        raise NotImplementedError(f"{type(self).__name__} must provide try_acquire()")

    def acquire_when_free(self, request: Request, timeout: float) -> Attempt:
        """Wait up to ``timeout`` to be handed the hold or let in, then try to take it (in
        one round trip where the backend can)."""
        raise NotImplementedError(f"{type(self).__name__} must provide acquire_when_free()")

    def leave(self, name: str, token: str) -> None:
        """Stop waiting (a hold handed to ``token`` meanwhile passes on)."""
        raise NotImplementedError(f"{type(self).__name__} must provide leave()")

    def release(self, name: str, token: str, *, every_level: bool = False) -> int:
        """Return 0 if ``token`` holds none, 1 if released, 2 if one reentrant level was.
        ``every_level``: every reentrant level at once (the last level, or a force release);
        the exclusive kind's ``token`` "" releases whoever holds it."""
        raise NotImplementedError(f"{type(self).__name__} must provide release()")

    def extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        """Set ``token``'s lease to ``ttl_ms`` from now; False if it holds none.
        RenewalLimitReached for a renewal past MAX_RENEWALS."""
        raise NotImplementedError(f"{type(self).__name__} must provide extend()")

    def inspect(self, name: str) -> tuple[LockInfo, ...]:
        """Return the holders of ``name``, first lease to end first (empty: none)."""
        raise NotImplementedError(f"{type(self).__name__} must provide inspect()")

    def holder(self, name: str, token: str | None = None) -> LockInfo | None:
        """Return ``token``'s hold of ``name`` if it has one, else who holds it, else None."""
        return pick(self.inspect(name), token)

    def info(self, name: str) -> LockInfo | None:
        """Return who holds ``name`` (see holder()): what ``lock.backend.info(name)`` has
        always answered."""
        return self.holder(name)

    async def ainfo(self, name: str) -> LockInfo | None:
        return await self.aholder(name)

    def force_release(self, name: str, token: str) -> bool:
        """Release ``token``'s hold of ``name`` (an operator's call); return True if it did.
        Counted in the metrics and sent as ``lock_force_released``, once, with the holder's
        LockInfo."""
        if self.holder_token and (not isinstance(token, str) or not token):
            raise ValueError(f"token must be a {self.holder_token} token, not {token!r}.")
        info = pick(self.inspect(name), token or None)
        released = self.release(name, token, every_level=True) == 1
        if released:
            self.backend._force_released(self.kind, name, info)
        return released

    def list(self, prefix: str = "") -> Listing:
        """Return the entry of every held name of this kind starting with ``prefix``, by
        name (see HeldEntry)."""
        raise NotImplementedError(f"{type(self).__name__} must provide list()")

    def entry(self, name: str) -> HeldEntry | None:
        """Return the HeldEntry of ``name`` if it is held, else None: what operators are
        shown of one name of a kind with several holders (the admin's page, ``distlock
        info``)."""
        holders = self.inspect(name)
        return entry_of(name, holders, holders[0].waiters or 0) if holders else None

    # --- async twins --------------------------------------------------------------------
    async def atry_acquire(self, request: Request, grant: str | None = None) -> Attempt:
        return await in_thread(self.try_acquire, request, grant)

    async def aacquire_when_free(self, request: Request, timeout: float) -> Attempt:
        return await in_thread(self.acquire_when_free, request, timeout)

    async def aleave(self, name: str, token: str) -> None:
        await in_thread(self.leave, name, token)

    async def arelease(self, name: str, token: str, *, every_level: bool = False) -> int:
        return await in_thread(self.release, name, token, every_level=every_level)

    async def aextend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        return await in_thread(self.extend, name, token, ttl_ms, renewal=renewal, reenter=reenter)

    async def ainspect(self, name: str) -> tuple[LockInfo, ...]:
        return await in_thread(self.inspect, name)

    async def aholder(self, name: str, token: str | None = None) -> LockInfo | None:
        return pick(await self.ainspect(name), token)

    async def aforce_release(self, name: str, token: str) -> bool:
        return await in_thread(self.force_release, name, token)

    async def alist(self, prefix: str = "") -> Listing:
        return await in_thread(self.list, prefix)


class ExclusiveKind(Operations):
    """The exclusive lock's operations."""

    kind = "lock"

    def holder(self, name: str, token: str | None = None) -> LockInfo | None:
        # Whoever holds the name: its exclusive holder, or the first shared holder to end.
        return self.backend.info(name)

    async def aholder(self, name: str, token: str | None = None) -> LockInfo | None:
        return await self.backend.ainfo(name)


class SharedKind(Operations):
    """A shared hold's operations (``distlock.lock(shared=True)``): the same lock as the
    exclusive kind's, held by many readers."""

    kind = "shared"
    holder_token = "shared holder's"

    def holder(self, name: str, token: str | None = None) -> LockInfo | None:
        # Else the exclusive holder, who keeps this acquire out.
        return pick(self.inspect(name), token) or self.backend.info(name)

    async def aholder(self, name: str, token: str | None = None) -> LockInfo | None:
        return pick(await self.ainspect(name), token) or await self.backend.ainfo(name)


class SemaphoreKind(Operations):
    """A semaphore's permits: up to ``request.limit`` holders at once, each depth 1 (a
    release's ``every_level`` changes nothing)."""

    kind = "semaphore"
    holder_token = "permit holder's"

    def describe(self, name: str) -> SemaphoreInfo | None:
        """Return the semaphore's limit, holders and waiters; None if nobody holds or waits
        (what the semaphore's own display needs beside inspect())."""
        raise NotImplementedError(f"{type(self).__name__} must provide describe()")

    async def adescribe(self, name: str) -> SemaphoreInfo | None:
        return await in_thread(self.describe, name)

    def held_one(self, name: str) -> SemaphoreInfo | None:
        """Return semaphore ``name`` if someone holds a permit, else None (what operators
        are shown; None too where there are no semaphores)."""
        info = self.describe(name)
        return info if info is not None and info.holders else None

    def entry(self, name: str) -> HeldEntry | None:
        info = self.held_one(name)
        return None if info is None else entry_of(name, info.holders, info.waiting, info.limit)

    def inspect(self, name: str) -> tuple[LockInfo, ...]:
        info = self.describe(name)
        return info.holders if info is not None else ()

    async def ainspect(self, name: str) -> tuple[LockInfo, ...]:
        info = await self.adescribe(name)
        return info.holders if info is not None else ()


class AtOnce(Operations):
    """Operations that answer at once (in memory): the async twins call the sync ones on the
    loop, never in a thread, so a cancelled task leaves nothing held behind it."""

    async def atry_acquire(self, request: Request, grant: str | None = None) -> Attempt:
        return self.try_acquire(request, grant)

    async def aleave(self, name: str, token: str) -> None:
        self.leave(name, token)

    async def arelease(self, name: str, token: str, *, every_level: bool = False) -> int:
        return self.release(name, token, every_level=every_level)

    async def aextend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        return self.extend(name, token, ttl_ms, renewal=renewal, reenter=reenter)

    async def ainspect(self, name: str) -> tuple[LockInfo, ...]:
        return self.inspect(name)


class Unsupported(Operations):
    """The operations of a kind a backend does not keep (Redlock: shared locks, semaphores).

    Acquiring raises ``error_factory()`` (SharedLocksNotSupported, SemaphoresNotSupported);
    what operators read finds nothing held, as nothing can be.
    """

    def __init__(self, backend: Backend, kind: str, error_factory: Callable[[], Exception]) -> None:
        super().__init__(backend)
        self.kind = kind  # type: ignore[misc]  # per object: one class for every kind
        self.error = error_factory

    def try_acquire(self, request: Request, grant: str | None = None) -> Attempt:
        raise self.error()

    def acquire_when_free(self, request: Request, timeout: float) -> Attempt:
        raise self.error()

    def leave(self, name: str, token: str) -> None:
        raise self.error()

    def release(self, name: str, token: str, *, every_level: bool = False) -> int:
        raise self.error()

    def extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        raise self.error()

    def inspect(self, name: str) -> tuple[LockInfo, ...]:
        return ()

    def force_release(self, name: str, token: str) -> bool:
        return False  # nothing is held

    def list(self, prefix: str = "") -> Listing:
        return []

    # Nothing to wait for: no thread.
    async def atry_acquire(self, request: Request, grant: str | None = None) -> Attempt:
        raise self.error()

    async def aacquire_when_free(self, request: Request, timeout: float) -> Attempt:
        raise self.error()

    async def ainspect(self, name: str) -> tuple[LockInfo, ...]:
        return ()

    async def alist(self, prefix: str = "") -> Listing:
        return []


class UnsupportedShared(Unsupported, SharedKind):
    """Shared locks on a backend that keeps none: asking who holds one raises, as acquiring
    does (a shared Lock's locked(): never a False that the exclusive holder would belie)."""

    def holder(self, name: str, token: str | None = None) -> LockInfo | None:
        raise self.error()

    async def aholder(self, name: str, token: str | None = None) -> LockInfo | None:
        raise self.error()


class UnsupportedSemaphore(Unsupported, SemaphoreKind):
    """Semaphores on a backend that keeps none: their own display raises, as acquiring does
    (Semaphore.holders(), locked())."""

    def describe(self, name: str) -> SemaphoreInfo | None:
        raise self.error()

    def held_one(self, name: str) -> SemaphoreInfo | None:
        return None  # nothing is held

    async def adescribe(self, name: str) -> SemaphoreInfo | None:
        raise self.error()

    def inspect(self, name: str) -> tuple[LockInfo, ...]:
        return ()

    async def ainspect(self, name: str) -> tuple[LockInfo, ...]:
        return ()
