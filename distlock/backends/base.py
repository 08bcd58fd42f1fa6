"""The backend contract: the operations every lock store implements (and, for a store without
semaphores, the ones it refuses), with their async twins."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from asgiref.sync import sync_to_async

from .. import metrics
from ..exceptions import RenewalLimitReached, SemaphoresNotSupported, SharedLocksNotSupported
from ..info import LockInfo, SemaphoreInfo, WaiterInfo
from ..keys import KeyLayout
from ..signals import lock_force_released
from ..tokens import SHARED_MARK
from ..validation import lease_milliseconds
from .settings import LIMIT_OPTIONS, Problems, parse_common

if TYPE_CHECKING:  # redis is not imported for LocMemBackend
    from .redis_ops.memory import MemoryReport

# The longest a waiter blocks before trying again on its own. Releases wake waiters at once;
# this bounds the cost of a missed notification.
FALLBACK_RETRY = 1.0
# How long a waiter handed a released lock has to claim it before anyone may take it.
HANDOFF_GRACE_MS = 250
# What a grant must have left of its lease to count as acquired, as Redlock counts its drift:
# a share of the lease for the client's and the server's clocks running at different rates,
# and 2 ms for Redis' millisecond expiry. A grant with less left is given back.
DRIFT_FACTOR = 0.01
DRIFT_MS = 2
# Locks read per batch (one round trip) while walking the held locks.
HELD_BATCH = 2000


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


class HeldEntry(NamedTuple):
    """One held lock as a backend's index knows it: enough to list, sort and page through
    held locks without reading each one."""

    name: str
    lease_end: float  # POSIX timestamp
    acquired: float  # POSIX timestamp; 0.0 when the index does not know it
    waiters: int = 0  # how many are queued for it (what LockInfo.waiters says)


class BaseLockBackend:
    """Parse the settings every backend shares (distlock.backends.settings) and define the
    operations locks and semaphores rely on.

    Subclasses implement the primitives; the ``a``-prefixed async twins run the sync ones in
    a worker thread unless a subclass has a native async client. A backend without
    semaphores leaves their operations as they are here: they raise SemaphoresNotSupported.
    """

    # Option names (upper case) this backend understands besides the client's own.
    own_options: frozenset[str] = LIMIT_OPTIONS
    # Why a backend keeps no semaphores, for SemaphoresNotSupported's message.
    no_semaphores = "it does not keep them"
    # Why a backend keeps no shared locks, for SharedLocksNotSupported's message.
    no_shared_locks = "it does not keep them"

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        self.alias = alias
        problems = Problems()
        self.configure(params, problems)
        problems.raise_any()

    def configure(self, params: dict[str, Any], problems: Problems) -> None:
        """Parse the settings; note every problem in ``problems`` rather than stop at the first.

        Subclasses extend it (calling super().configure() first) for their own settings.
        """
        common = parse_common(self.alias, params, self.own_options, type(self).__name__, problems)
        self.key_prefix = common.key_prefix
        self.default_timeout = common.default_timeout
        self.options = common.options
        self.max_ttl, self.max_renewals = common.max_ttl, common.max_renewals
        self.layout = KeyLayout(self.key_prefix)

    def lease_ms(self, ttl: float) -> int:
        """Return the lease of ``ttl`` seconds in milliseconds; ValueError above MAX_TTL."""
        if self.max_ttl is not None and ttl > self.max_ttl:
            raise ValueError(
                f"ttl={ttl:g} is longer than the MAX_TTL of DISTLOCK[{self.alias!r}] "
                f"({self.max_ttl:g} seconds). Use a shorter ttl (with auto_renew=True for long "
                "work), or raise OPTIONS['MAX_TTL']."
            )
        return lease_milliseconds("ttl", ttl)

    def renewal_limit_reached(self, name: str) -> RenewalLimitReached:
        """The error for a renewal refused because the lock had MAX_RENEWALS renewals."""
        return RenewalLimitReached(
            f"{name!r} was already renewed {self.max_renewals} times, the MAX_RENEWALS of "
            f"DISTLOCK[{self.alias!r}]: its lease was not extended and ends on its own. Release "
            "it when done, or raise OPTIONS['MAX_RENEWALS'].",
            name=name,
        )

    # How long one blocking wait may last (a blocking read must end before the socket times out).
    max_block = FALLBACK_RETRY

    @property
    def signal_sender(self) -> type:
        """The sender of the signals about this backend's locks (distlock.signals)."""
        return type(self)

    # --- primitives -------------------------------------------------------------------
    def try_acquire(
        self, name: str, token: str, ttl_ms: int, meta: str, grant: str | None, patience_ms: int
    ) -> Attempt:
        raise NotImplementedError(
            "subclasses of BaseLockBackend must provide a try_acquire() method"
        )

    def wait_for_turn(self, name: str, timeout: float) -> str | None:
        """Block until the lock may be free or ``timeout`` passes; return a grant if handed one."""
        raise NotImplementedError(
            "subclasses of BaseLockBackend must provide a wait_for_turn() method"
        )

    def wait_and_acquire(
        self, timeout: float, name: str, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        """Wait up to ``timeout`` for the lock to be handed over or freed, then try to acquire
        it (with the grant the wait brought, if any). A backend that can do both in one round
        trip does."""
        grant = self.wait_for_turn(name, timeout)
        sent = time.monotonic()
        return self.try_acquire(name, token, ttl_ms, meta, grant, patience_ms)._replace(sent=sent)

    def leave_queue(self, name: str, token: str) -> None:
        raise NotImplementedError(
            "subclasses of BaseLockBackend must provide a leave_queue() method"
        )

    def release(self, name: str, token: str, *, every_level: bool = False) -> int:
        """Return 0 if ``token`` does not hold ``name``, 1 if released, 2 if one reentrant
        level was. ``every_level``: release every reentrant level at once (the holder's last
        level, or an operator's force release); ``token`` "" releases whoever holds it."""
        raise NotImplementedError("subclasses of BaseLockBackend must provide a release() method")

    def extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        raise NotImplementedError("subclasses of BaseLockBackend must provide an extend() method")

    def info(self, name: str) -> LockInfo | None:
        """Return the LockInfo of ``name`` if it is held, else None."""
        raise NotImplementedError("subclasses of BaseLockBackend must provide an info() method")

    def held_names(self, prefix: str = "") -> list[HeldEntry]:
        """Return the index entry of every held lock whose name starts with ``prefix``, by
        name."""
        raise NotImplementedError(
            "subclasses of BaseLockBackend must provide a held_names() method"
        )

    def info_many(self, names: list[str]) -> list[LockInfo]:
        """Return the LockInfo of each name still held, in order."""
        return [info for info in map(self.info, names) if info is not None]

    def waiters(self, name: str) -> list[WaiterInfo] | None:
        """Return who waits for lock ``name``, first come first; None when this backend
        does not keep who waits (only how many: LockInfo.waiters)."""
        return None

    # --- operators ----------------------------------------------------------------------
    def held(self, prefix: str = "", limit: int = 100, offset: int = 0) -> list[LockInfo]:
        """Return the held locks whose name starts with ``prefix``, sorted by name."""
        check_prefix(prefix)
        _check_page(limit, offset)
        names = [entry.name for entry in self.held_names(prefix)[offset : offset + limit]]
        return self.info_many(names)

    def iter_held(self, prefix: str = "") -> Iterator[LockInfo]:
        """Yield the LockInfo of every held lock whose name starts with ``prefix``, in no
        particular order. A lock held for the whole walk is yielded exactly once, however
        many others come and go meanwhile, at a cost of about one read per held lock.

        This default reads the index once (``held_names``: each name lives in one place,
        read once) and the locks in batches.
        """
        check_prefix(prefix)
        return self._read_in_batches([entry.name for entry in self.held_names(prefix)])

    def _read_in_batches(self, names: list[str]) -> Iterator[LockInfo]:
        for start in range(0, len(names), HELD_BATCH):
            yield from self.info_many(names[start : start + HELD_BATCH])

    def count(self, prefix: str = "") -> int:
        """Return how many locks whose name starts with ``prefix`` are held."""
        check_prefix(prefix)
        return len(self.held_names(prefix))

    def locked(self, name: str) -> bool:
        return self.info(name) is not None

    def force_release(self, name: str, token: str | None = None) -> bool:
        """Release ``name`` whoever holds it (only ``token``, when given). Return True if
        something was released; waiters are handed the lock as after a normal release."""
        _check_token(token)

        if token is not None and token.startswith(SHARED_MARK):
            # A shared holder's token, as info() shows once readers hold the lock: release
            # that hold (release() knows exclusive holds only, and would answer "not held").
            return self.force_release_shared(name, token)
        info = self.info(name)
        released = self.release(name, token or "", every_level=True) == 1
        if released:
            self._force_released("lock", name, info)
        return released

    def _force_released(self, kind: str, name: str, info: LockInfo | None) -> None:
        """Tell of a force release, whoever asked for it (the admin, the CLI, code): counted
        here once, and sent as ``lock_force_released``."""
        if metrics.ENABLED:
            metrics.force_released(self.alias, kind, name)
        lock_force_released.send(type(self), name=name, alias=self.alias, info=info)

    def memory_reports(self) -> list[MemoryReport]:
        """Return what each Redis server keeping this alias's locks says of its memory
        (maxmemory, maxmemory-policy, keys evicted); empty for a store that is no server."""
        return []

    # --- semaphores (distlock.semaphore) ---------------------------------------------
    def semaphores_not_supported(self) -> SemaphoresNotSupported:
        """The error of every semaphore operation on a backend that has none."""
        return SemaphoresNotSupported(
            f"DISTLOCK[{self.alias!r}] uses {type(self).__name__}, which has no semaphores: "
            f"{self.no_semaphores}. Add an alias with distlock.backends.redis.RedisBackend "
            "(one server, Sentinel or Cluster) and pass using=<that alias>.",
        )

    def semaphore_acquire(
        self, name: str, limit: int, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        """Take a permit of ``name`` (at most ``limit`` holders) for ``token``, or queue it
        for ``patience_ms``."""
        raise self.semaphores_not_supported()

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
        """Wait up to ``timeout`` for a permit to be handed to ``token``, then try to take
        it, as wait_and_acquire() does for a lock."""
        raise self.semaphores_not_supported()

    def semaphore_leave(self, name: str, token: str) -> None:
        """Stop waiting (a permit handed to ``token`` meanwhile passes on)."""
        raise self.semaphores_not_supported()

    def semaphore_release(self, name: str, token: str) -> int:
        """Give back ``token``'s permit; return 1 if it held one, else 0."""
        raise self.semaphores_not_supported()

    def semaphore_extend(self, name: str, token: str, ttl_ms: int, *, renewal: bool) -> int:
        """Return 1 if extended, 0 if ``token`` holds no permit, 2 at MAX_RENEWALS."""
        raise self.semaphores_not_supported()

    def semaphore_info(self, name: str) -> SemaphoreInfo | None:
        """Return the holders of semaphore ``name``, or None if nobody holds or waits."""
        raise self.semaphores_not_supported()

    def held_semaphores(self, prefix: str = "") -> list[SemaphoreInfo]:
        """Return every held semaphore whose name starts with ``prefix``, by name."""
        raise self.semaphores_not_supported()

    def force_release_permit(self, name: str, token: str) -> bool:
        """Free the permit ``token`` holds (an operator's call); return True if it did.

        Sends ``lock_force_released`` with the holder's LockInfo, as force_release() does.
        """
        if not isinstance(token, str) or not token:
            raise ValueError(f"token must be a permit holder's token, not {token!r}.")
        info = self.semaphore_info(name)
        holder = next((h for h in info.holders if h.token == token), None) if info else None
        released = self.semaphore_release(name, token) == 1
        if released:
            self._force_released("semaphore", name, holder)
        return released

    # --- shared locks (distlock.lock(shared=True)) --------------------------------------
    # The same operations as a lock's, for a shared hold of the lock of the same name: a
    # shared acquire waits while an exclusive holder holds, and an exclusive one while any
    # shared holder does; both kinds wait in one queue, first come first served.
    def shared_locks_not_supported(self) -> SharedLocksNotSupported:
        """The error of every shared-lock operation on a backend that has none."""
        return SharedLocksNotSupported(
            f"DISTLOCK[{self.alias!r}] uses {type(self).__name__}, which has no shared locks: "
            f"{self.no_shared_locks}. Add an alias with distlock.backends.redis.RedisBackend "
            "(one server, Sentinel or Cluster) and pass using=<that alias>, or take the "
            "exclusive lock (shared=False).",
        )

    def shared_acquire(
        self,
        name: str,
        token: str,
        ttl_ms: int,
        meta: str,
        patience_ms: int,
        downgrade_from: str = "",
    ) -> Attempt:
        """Take a shared hold of ``name`` for ``token``, or queue it for ``patience_ms``.
        ``downgrade_from``: the token of this thread's exclusive hold of ``name``, if it has
        one: while that token holds the lock, the shared hold is granted at once (a downgrade),
        and it stays when the exclusive hold is released, with no writer in between."""
        raise self.shared_locks_not_supported()

    def shared_wait_and_acquire(
        self, timeout: float, name: str, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        """Wait up to ``timeout`` for a release to let ``token`` in, then take the shared
        hold, as wait_and_acquire() does for an exclusive one."""
        raise self.shared_locks_not_supported()

    def shared_leave(self, name: str, token: str) -> None:
        """Stop waiting (a place reserved for ``token`` meanwhile is given back)."""
        raise self.shared_locks_not_supported()

    def shared_release(self, name: str, token: str, *, every_level: bool = False) -> int:
        """Release ``token``'s shared hold: 0 if it holds none, 1 if released, 2 if one
        reentrant level was."""
        raise self.shared_locks_not_supported()

    def shared_extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        """Set ``token``'s shared lease to ``ttl_ms`` from now; False if it holds none."""
        raise self.shared_locks_not_supported()

    def shared_holders(self, name: str) -> tuple[LockInfo, ...]:
        """Return the shared holders of ``name``, first lease to end first (empty: none)."""
        raise self.shared_locks_not_supported()

    def held_shared(self, prefix: str = "") -> dict[str, tuple[LockInfo, ...]]:
        """Return the holders of every shared-held lock whose name starts with ``prefix``,
        by name."""
        raise self.shared_locks_not_supported()

    def force_release_shared(self, name: str, token: str) -> bool:
        """Release the shared hold ``token`` has (an operator's call); return True if it
        did. Sends ``lock_force_released`` with the holder's LockInfo."""
        if not isinstance(token, str) or not token:
            raise ValueError(f"token must be a shared holder's token, not {token!r}.")
        holder = next((h for h in self.shared_holders(name) if h.token == token), None)
        released = self.shared_release(name, token, every_level=True) == 1
        if released:
            self._force_released("shared", name, holder)
        return released

    async def ashared_acquire(
        self,
        name: str,
        token: str,
        ttl_ms: int,
        meta: str,
        patience_ms: int,
        downgrade_from: str = "",
    ) -> Attempt:
        acquire = sync_to_async(self.shared_acquire, thread_sensitive=False)
        return await acquire(name, token, ttl_ms, meta, patience_ms, downgrade_from)

    async def ashared_wait_and_acquire(
        self, timeout: float, name: str, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        wait = sync_to_async(self.shared_wait_and_acquire, thread_sensitive=False)
        return await wait(timeout, name, token, ttl_ms, meta, patience_ms)

    async def ashared_leave(self, name: str, token: str) -> None:
        await sync_to_async(self.shared_leave, thread_sensitive=False)(name, token)

    async def ashared_release(self, name: str, token: str, *, every_level: bool = False) -> int:
        release = sync_to_async(self.shared_release, thread_sensitive=False)
        return await release(name, token, every_level=every_level)

    async def ashared_extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        extend = sync_to_async(self.shared_extend, thread_sensitive=False)
        return await extend(name, token, ttl_ms, renewal=renewal, reenter=reenter)

    async def ashared_holders(self, name: str) -> tuple[LockInfo, ...]:
        return await sync_to_async(self.shared_holders, thread_sensitive=False)(name)

    def close(self) -> None:
        """Close connections this backend opened."""

    def __del__(self) -> None:
        # A backend let go (its setting changed, and no lock holds it any more) closes its
        # connections at once. Left to the garbage collector (redis-py's connections sit in
        # reference cycles), a socket may be finalised before the connection that would have
        # closed it: an "unclosed socket" ResourceWarning at some random later moment.
        # Not contextlib.suppress: at interpreter shutdown module globals may be gone.
        try:  # noqa: SIM105
            self.close()
        except Exception:  # interpreter shutdown, or a backend whose __init__ failed
            pass

    # --- async twins --------------------------------------------------------------------
    async def atry_acquire(self, *args: Any) -> Attempt:
        return await sync_to_async(self.try_acquire, thread_sensitive=False)(*args)

    async def await_for_turn(self, name: str, timeout: float) -> str | None:
        return await sync_to_async(self.wait_for_turn, thread_sensitive=False)(name, timeout)

    async def await_and_acquire(
        self, timeout: float, name: str, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        grant = await self.await_for_turn(name, timeout)
        sent = time.monotonic()
        attempt = await self.atry_acquire(name, token, ttl_ms, meta, grant, patience_ms)
        return attempt._replace(sent=sent)

    async def aleave_queue(self, name: str, token: str) -> None:
        await sync_to_async(self.leave_queue, thread_sensitive=False)(name, token)

    async def arelease(self, name: str, token: str, *, every_level: bool = False) -> int:
        release = sync_to_async(self.release, thread_sensitive=False)
        return await release(name, token, every_level=every_level)

    async def aextend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        extend = sync_to_async(self.extend, thread_sensitive=False)
        return await extend(name, token, ttl_ms, renewal=renewal, reenter=reenter)

    async def ainfo(self, name: str) -> LockInfo | None:
        return await sync_to_async(self.info, thread_sensitive=False)(name)

    async def aheld(self, prefix: str = "", limit: int = 100, offset: int = 0) -> list[LockInfo]:
        return await sync_to_async(self.held, thread_sensitive=False)(prefix, limit, offset)

    async def aforce_release(self, name: str, token: str | None = None) -> bool:
        return await sync_to_async(self.force_release, thread_sensitive=False)(name, token)

    async def asemaphore_acquire(
        self, name: str, limit: int, token: str, ttl_ms: int, meta: str, patience_ms: int
    ) -> Attempt:
        acquire = sync_to_async(self.semaphore_acquire, thread_sensitive=False)
        return await acquire(name, limit, token, ttl_ms, meta, patience_ms)

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
        wait = sync_to_async(self.semaphore_wait_and_acquire, thread_sensitive=False)
        return await wait(timeout, name, limit, token, ttl_ms, meta, patience_ms)

    async def asemaphore_leave(self, name: str, token: str) -> None:
        await sync_to_async(self.semaphore_leave, thread_sensitive=False)(name, token)

    async def asemaphore_release(self, name: str, token: str) -> int:
        return await sync_to_async(self.semaphore_release, thread_sensitive=False)(name, token)

    async def asemaphore_extend(self, name: str, token: str, ttl_ms: int, *, renewal: bool) -> int:
        extend = sync_to_async(self.semaphore_extend, thread_sensitive=False)
        return await extend(name, token, ttl_ms, renewal=renewal)

    async def asemaphore_info(self, name: str) -> SemaphoreInfo | None:
        return await sync_to_async(self.semaphore_info, thread_sensitive=False)(name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} alias={self.alias!r} prefix={self.key_prefix!r}>"


def check_prefix(prefix: object) -> None:
    if not isinstance(prefix, str):
        raise TypeError(f'prefix must be a str ("" for every lock), not {type(prefix).__name__}.')


def _check_token(token: object) -> None:
    # An empty token used to mean "whoever holds it": a blank form field or an unset variable
    # then released someone else's lock. Only None means that now.
    if token is None:
        return
    if not isinstance(token, str):
        kind = type(token).__name__
        raise TypeError(f"token must be a holder's token (str) or None, not {kind}.")
    if not token:
        raise ValueError(
            "token must be a holder's token, not an empty string; pass token=None to release "
            "whoever holds the lock."
        )


def _check_page(limit: object, offset: object) -> None:
    for label, value, low in (("limit", limit, 1), ("offset", offset, 0)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{label} must be an int, not {type(value).__name__}.")
        if value < low:
            raise ValueError(f"{label} must be >= {low}, not {value}.")
