"""The backend contract: what every lock store offers operators (introspection, force
release), the settings every backend shares, and one operations object per kind of hold
(distlock.backends.operations): ``exclusive``, ``shared`` and ``semaphores``."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar, cast

from .. import metrics
from ..exceptions import (
    InvalidLockBackendError,
    LockError,
    RenewalLimitReached,
    SemaphoresNotSupported,
    SharedLocksNotSupported,
)
from ..info import LockInfo, WaiterInfo
from ..keys import KeyLayout
from ..offload import in_thread
from ..signals import lock_force_released
from ..tokens import SHARED_MARK
from ..validation import lease_milliseconds
from .kinds import definition, words
from .operations import (
    Attempt,  # noqa: F401  # re-exported: distlock.backends.base.Attempt
    HeldEntry,  # noqa: F401  # re-exported: distlock.backends.base.HeldEntry
    Operations,
    SemaphoreKind,
    Unsupported,
)
from .settings import COMMON_OPTIONS, Problems, parse_common

if TYPE_CHECKING:  # redis is not imported for LocMemBackend
    from .redis_ops.memory import MemoryReport
    from .redis_ops.server_info import ServerReport

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


def lease_end(started: float, ttl_ms: int) -> float:
    """Return the local (monotonic) time a lease of ``ttl_ms`` that began no earlier than
    ``started`` lasts at least until: a client clock DRIFT_FACTOR slow sees the server's lease
    end after ``ttl_ms`` x (1 - DRIFT_FACTOR), and Redis' millisecond expiry costs DRIFT_MS."""
    return started + (ttl_ms * (1 - DRIFT_FACTOR) - DRIFT_MS) / 1000


class BaseLockBackend:
    """Parse the settings every backend shares (distlock.backends.settings), keep one
    operations object per kind (``exclusive``, ``shared``, ``semaphores``: see
    distlock.backends.operations), and answer operators (``held``, ``info``,
    ``force_release``, ...).

    Subclasses supply their operations (``kind_classes``) and ``info``; the ``a``-prefixed
    async twins here run the sync ones in a worker thread unless a subclass has a native
    async client. A backend without semaphores or shared locks keeps Unsupported operations
    for them: acquiring raises SemaphoresNotSupported / SharedLocksNotSupported.
    """

    # Option names (upper case) this backend understands besides the client's own.
    own_options: frozenset[str] = COMMON_OPTIONS
    # Why a backend keeps no semaphores, for SemaphoresNotSupported's message.
    no_semaphores = "it does not keep them"
    # Why a backend keeps no shared locks, for SharedLocksNotSupported's message.
    no_shared_locks = "it does not keep them"
    # Why a backend serves every waiter first come, first served (None: it has a non-fair
    # mode), for the error of fair=False and the check of OPTIONS['FAIR'].
    no_non_fair: str | None = None

    # The operations class of each kind this backend keeps, by the word a Lock and the
    # metrics name the kind with; else the class each kind's definition names for this
    # backend's family (distlock.backends.kinds); else the kind is Unsupported.
    kind_classes: ClassVar[dict[str, type[Operations]]] = {"lock": Operations}
    kind_family: ClassVar[str] = ""  # "redis", "locmem": see KindDefinition.classes

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        self.alias = alias
        # Weak: an operations object holds its backend (a Lock holding it keeps the backend),
        # so the backend must not hold it back, or a backend let go would wait for the
        # garbage collector to close its connections (see __del__).
        self._kinds: dict[str, weakref.ref[Operations]] = {}
        problems = Problems()
        self.configure(params, problems)
        problems.raise_any()

    def of_kind(self, kind: str) -> Operations:
        """Return this backend's operations of ``kind`` (a word of distlock.backends.kinds)."""
        ref = self._kinds.get(kind)
        operations = None if ref is None else ref()
        if operations is None:
            operations = self._make_operations(kind)
            self._kinds[kind] = weakref.ref(operations)
        return operations

    def _make_operations(self, kind: str) -> Operations:
        defined = definition(kind)
        made = self.kind_classes.get(kind) or defined.class_for(self.kind_family)
        if made is not None:
            return made(self)
        return defined.unsupported(self, kind, functools.partial(defined.not_supported, self))

    @property
    def exclusive(self) -> Operations:
        """The exclusive lock's operations."""
        return self.of_kind("lock")

    @property
    def shared(self) -> Operations:
        """The shared holds' operations (Unsupported where there are none)."""
        return self.of_kind("shared")

    @property
    def semaphores(self) -> SemaphoreKind:
        """The semaphores' operations (Unsupported where there are none)."""
        return cast(SemaphoreKind, self.of_kind("semaphore"))

    def kinds(self) -> tuple[Operations, ...]:
        """The operations of every kind, for a surface that shows or counts each."""
        return tuple(map(self.of_kind, words()))

    def configure(self, params: dict[str, Any], problems: Problems) -> None:
        """Parse the settings; note every problem in ``problems`` rather than stop at the first.

        Subclasses extend it (calling super().configure() first) for their own settings.
        """
        common = parse_common(self.alias, params, self.own_options, type(self).__name__, problems)
        self.key_prefix = common.key_prefix
        self.default_timeout = common.default_timeout
        self.options = common.options
        self.max_ttl, self.max_renewals = common.max_ttl, common.max_renewals
        self.fair = common.fair  # OPTIONS['FAIR']: how a Lock with fair=None serves waiters
        if not self.fair and self.no_non_fair:
            problems.add(
                InvalidLockBackendError(
                    f"DISTLOCK[{self.alias!r}]['OPTIONS']['FAIR'] is False, but "
                    f"{type(self).__name__} has no non-fair mode: {self.no_non_fair}.",
                    check_id="distlock.E006",
                    hint="Drop FAIR (its locks are fair), or use "
                    "distlock.backends.redis.RedisBackend for non-fair locks.",
                )
            )
        self.layout = KeyLayout(self.key_prefix)

    # The last lease lease_ms() converted, (seconds, milliseconds): the locks of an alias
    # mostly ask for one or two, and every acquire asks (read and replaced in one step each).
    _last_lease: tuple[float, int] = (0.0, 0)

    def lease_ms(self, ttl: float) -> int:
        """Return the lease of ``ttl`` seconds in milliseconds; ValueError above MAX_TTL."""
        last_ttl, last_ms = self._last_lease
        if ttl == last_ttl:  # checked and converted already
            return last_ms
        if self.max_ttl is not None and ttl > self.max_ttl:
            raise ValueError(
                f"ttl={ttl:g} is longer than the MAX_TTL of DISTLOCK[{self.alias!r}] "
                f"({self.max_ttl:g} seconds). Use a shorter ttl (with auto_renew=True for long "
                "work), or raise OPTIONS['MAX_TTL']."
            )
        milliseconds = lease_milliseconds("ttl", ttl)
        self._last_lease = (ttl, milliseconds)
        return milliseconds

    def renewal_limit_reached(self, name: str) -> RenewalLimitReached:
        """The error for a renewal refused because the lock had MAX_RENEWALS renewals."""
        return RenewalLimitReached(
            f"{name!r} was already renewed {self.max_renewals} times, the MAX_RENEWALS of "
            f"DISTLOCK[{self.alias!r}]: its lease was not extended and ends on its own. Release "
            "it when done, or raise OPTIONS['MAX_RENEWALS'].",
            name=name,
        )

    def semaphores_not_supported(self) -> SemaphoresNotSupported:
        """The error of every semaphore operation on a backend that has none."""
        return SemaphoresNotSupported(
            f"DISTLOCK[{self.alias!r}] uses {type(self).__name__}, which has no semaphores: "
            f"{self.no_semaphores}. Add an alias with distlock.backends.redis.RedisBackend "
            "(one server, Sentinel or Cluster) and pass using=<that alias>.",
        )

    def non_fair_not_supported(self) -> LockError:
        """The error of an acquire with fair=False on a backend without a non-fair mode."""
        return LockError(
            f"DISTLOCK[{self.alias!r}] uses {type(self).__name__}, which has no non-fair "
            f"mode: {self.no_non_fair}. Make the lock with fair=True (or leave fair out), or "
            "add an alias with distlock.backends.redis.RedisBackend and pass using=<that alias>."
        )

    def shared_locks_not_supported(self) -> SharedLocksNotSupported:
        """The error of every shared-lock operation on a backend that has none."""
        return SharedLocksNotSupported(
            f"DISTLOCK[{self.alias!r}] uses {type(self).__name__}, which has no shared locks: "
            f"{self.no_shared_locks}. Add an alias with distlock.backends.redis.RedisBackend "
            "(one server, Sentinel or Cluster) and pass using=<that alias>, or take the "
            "exclusive lock (shared=False).",
        )

    # How long one blocking wait may last (a blocking read must end before the socket times out).
    max_block = FALLBACK_RETRY

    @property
    def signal_sender(self) -> type:
        """The sender of the signals about this backend's locks (distlock.signals)."""
        return type(self)

    # --- introspection (docs: CONTRACT "Introspection") -----------------------------------
    def info(self, name: str) -> LockInfo | None:
        """Return the LockInfo of ``name`` if it is held (exclusively, or else by its first
        shared holder to end), else None."""
        raise NotImplementedError("subclasses of BaseLockBackend must provide an info() method")

    def info_many(self, names: list[str]) -> list[LockInfo]:
        """Return the LockInfo of each name still held, in order."""
        return [info for info in map(self.info, names) if info is not None]

    def waiters(self, name: str) -> list[WaiterInfo] | None:
        """Return who waits for lock ``name``, first come first; None when this backend
        does not keep who waits (only how many: LockInfo.waiters)."""
        return None

    def held(self, prefix: str = "", limit: int = 100, offset: int = 0) -> list[LockInfo]:
        """Return the held locks whose name starts with ``prefix``, sorted by name."""
        check_prefix(prefix)
        _check_page(limit, offset)
        names = [entry.name for entry in self.exclusive.list(prefix)[offset : offset + limit]]
        return self.info_many(names)

    def iter_held(self, prefix: str = "") -> Iterator[LockInfo]:
        """Yield the LockInfo of every held lock whose name starts with ``prefix``, in no
        particular order. A lock held for the whole walk is yielded exactly once, however
        many others come and go meanwhile, at a cost of about one read per held lock.

        This default reads the index once (``exclusive.list``: each name lives in one place,
        read once) and the locks in batches.
        """
        check_prefix(prefix)
        return self._read_in_batches([entry.name for entry in self.exclusive.list(prefix)])

    def _read_in_batches(self, names: list[str]) -> Iterator[LockInfo]:
        for start in range(0, len(names), HELD_BATCH):
            yield from self.info_many(names[start : start + HELD_BATCH])

    def count(self, prefix: str = "") -> int:
        """Return how many locks whose name starts with ``prefix`` are held."""
        check_prefix(prefix)
        return len(self.exclusive.list(prefix))

    def locked(self, name: str) -> bool:
        return self.info(name) is not None

    def force_release(self, name: str, token: str | None = None) -> bool:
        """Release ``name`` whoever holds it (only ``token``, when given). Return True if
        something was released; waiters are handed the lock as after a normal release."""
        _check_token(token)
        if token is not None and not could_hold(token):
            return False  # no holder has it: nothing of it to release
        if token is not None and token.startswith(SHARED_MARK):
            # A shared holder's token, as info() shows once readers hold the lock: release
            # that hold (the exclusive kind knows exclusive holds only: "not held"). A backend
            # without shared locks says so, as every shared-lock operation does.
            operations = self.shared
            if isinstance(operations, Unsupported):
                raise operations.error()
            return operations.force_release(name, token)
        return self.exclusive.force_release(name, token or "")

    def _force_released(self, kind: str, name: str, info: LockInfo | None) -> None:
        """Tell of a force release, whoever asked for it (the admin, the CLI, code) and of
        whichever kind: counted here once, and sent as ``lock_force_released``."""
        if metrics.ENABLED:
            metrics.force_released(self.alias, kind, name)
        lock_force_released.send(type(self), name=name, alias=self.alias, info=info)

    def memory_reports(self) -> list[MemoryReport]:
        """Return what each Redis server keeping this alias's locks says of its memory
        (maxmemory, maxmemory-policy, keys evicted); empty for a store that is no server."""
        return []

    def server_reports(self) -> list[ServerReport]:
        """Return what each Redis server keeping this alias's locks says of itself (Redis or
        Valkey, version, role, maxmemory-policy, latency) or why it did not answer; empty for
        a store that is no server."""
        return []

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
    async def ainfo(self, name: str) -> LockInfo | None:
        return await in_thread(self.info, name)

    async def aheld(self, prefix: str = "", limit: int = 100, offset: int = 0) -> list[LockInfo]:
        return await in_thread(self.held, prefix, limit, offset)

    async def aforce_release(self, name: str, token: str | None = None) -> bool:
        return await in_thread(self.force_release, name, token)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} alias={self.alias!r} prefix={self.key_prefix!r}>"


def check_prefix(prefix: object) -> None:
    if not isinstance(prefix, str):
        raise TypeError(f'prefix must be a str ("" for every lock), not {type(prefix).__name__}.')


def could_hold(token: str) -> bool:
    """Whether ``token`` could be a holder's: none has a space (it separates the lock value's
    fields) or starts with "=" (the form of a lock reserved for a waiter). A script given such
    a token could read a reservation as a hold (docs/protocol.md, "Tokens"), so it is never
    sent."""
    return " " not in token and not token.startswith("=")


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
