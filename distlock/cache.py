"""One rebuild per expired cache key, across every process: ``get_or_set``.

    from distlock.cache import get_or_set

    report = get_or_set("report", build_report, 300, stale=60)

The value lives in a Django cache (``caches[cache]``), wrapped with the moment it stops
being fresh and how long its build took; the rebuild is guarded by a distlock lock named
after the cache alias and key, so among all processes one caller builds at a time:

- **missing** (never built, evicted, or past ``timeout + stale``): one caller builds it;
  the others wait, in the lock's queue (no polling), up to ``wait`` seconds, then read what
  it stored. A caller that waited in vain builds the value itself, so that a hung builder
  delays callers by ``wait`` at most and never fails them.
- **stale** (past ``timeout`` but within ``stale`` more seconds): every caller gets the old
  value at once; the first to find it stale takes the lock and rebuilds it in a background
  thread started from its own request (the thread closes its database connections when
  done). No caller waits for that build.
- **fresh**: returned as it is, except that, with ``early > 0``, a caller may rebuild it
  before it expires with a probability that rises as expiry nears and with the build's
  duration (XFetch: Vattani, Chierichetti and Lowenstein, "Optimal Probabilistic Cache
  Stampede Prevention", VLDB 2015). That caller takes the lock without waiting (if it is
  held, someone is rebuilding already), rebuilds, and returns the new value: it is the one
  caller that waits for the build; the others keep getting the fresh value.

Whoever takes the rebuild lock reads the key again before building: another caller may
have rebuilt it between this caller's first read and its lock attempt (a descheduled thread,
a slow request), and the lock alone would then let a second build through.

``aget_or_set`` is the async twin (the cache's async methods, the lock's async ones; a
stale value is rebuilt in a task of the running event loop; ``build`` may be a coroutine
function).

One build across processes needs a cache the processes share (Redis, Memcached, the
database). On a per-process cache (``LocMemCache``) each process builds and keeps its own
value, and on ``DummyCache`` every call builds: it still works, but the first use of such an
alias warns with ``PerProcessCacheWarning``.

``xfetch_random`` is the source of XFetch's uniform draws: a module-level ``random.Random``
that tests replace (with a seeded one, or one whose ``random()`` returns a chosen value) to
decide the draw.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import math
import random
import threading
import time
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, TypedDict, TypeVar, Unpack, cast

from django.core.cache import BaseCache, caches
from django.core.cache.backends.dummy import DummyCache
from django.core.cache.backends.locmem import LocMemCache
from django.db import connections

from .exceptions import InvalidLockName
from .keys import validate_name
from .lock import Lock
from .validation import seconds

logger = logging.getLogger("distlock")
# What a background rebuild logs when it fails (the caller got the stale value already).
REBUILD_FAILED = "the background rebuild of %r failed; the stale value is served until it expires"
RELEASE_FAILED = "releasing the rebuild lock of %r failed"
T = TypeVar("T")
# What the cache holds: (TAG, value, fresh until (POSIX time), build duration (seconds)).
# A plain tuple: every cache backend can store it, and an old entry of another shape is
# simply treated as missing.
TAG = "distlock.cache/1"
DEFAULT_LOCK_TTL = 30.0
_MISSING = object()
# What a read found: judged by _Plan.judge, acted on by get_or_set and aget_or_set.
MISSING, STALE, EARLY, FRESH = "missing", "stale", "early", "fresh"
# Background rebuilds of aget_or_set: the loop keeps only weak references to its tasks.
_TASKS: set[asyncio.Task[None]] = set()
# XFetch's draws; the seam tests replace to decide them (see the module's docstring).
xfetch_random = random.Random()
# The cache aliases already warned about (PerProcessCacheWarning): once per alias and process.
_WARNED: set[str] = set()


class PerProcessCacheWarning(RuntimeWarning):
    """get_or_set() on a cache that processes do not share (LocMemCache: each process keeps
    its own; DummyCache: nothing is kept). The rebuild lock spans processes, the value does
    not: each process builds its own (with DummyCache, every call builds). Use a shared
    cache (Redis, Memcached, the database) for one build across processes."""


class Options(TypedDict, total=False):
    """The keyword arguments of get_or_set() and aget_or_set()."""

    cache: str  # the Django cache alias (default "default")
    lock_ttl: float  # the rebuild lock's lease (default 30 s), renewed while the build runs
    stale: float | None  # seconds a value is kept and served past its freshness (None: not)
    wait: float | None  # the most a caller waits for another's build (default: lock_ttl)
    early: float | None  # XFetch's beta; None: 1.0 without stale, 0 with it
    using: str  # the DISTLOCK alias of the lock (default "default")
    version: int | None  # the cache key's version


def get_or_set(key: str, build: Callable[[], T], timeout: float, **options: Unpack[Options]) -> T:
    """Return the value cached under ``key``, built by ``build()`` when it must be.

    ``timeout``: seconds the value is fresh. ``stale``: seconds it is kept past that and
    served while one caller rebuilds it in the background (None: not kept). ``lock_ttl``:
    the lease of the rebuild lock (renewed while the build runs, so it only bounds how long
    a crashed builder holds others up). ``wait``: how long a caller waits for someone
    else's build of a missing value (default: ``lock_ttl``). ``early``: XFetch's beta
    (0: no early rebuild; None: 1.0 without ``stale``, 0 with it, since serving stale values
    already hides the rebuild). ``cache``/``version``: the Django cache and key version;
    ``using``: the DISTLOCK alias of the lock.
    """
    plan = _Plan(key, build, timeout, options)
    _warn_if_per_process(plan.cache_alias, plan.cache)
    state, value = plan.judge(plan.read())
    if state == MISSING:
        return plan.build_missing()
    if state == STALE:
        plan.refresh_in_background()
    elif state == EARLY:
        return plan.build_now(value)
    return value


async def aget_or_set(
    key: str,
    build: Callable[[], T] | Callable[[], Awaitable[T]],
    timeout: float,
    **options: Unpack[Options],
) -> T:
    """Async twin of get_or_set(); ``build`` may be a plain or a coroutine function."""
    plan = _Plan(key, build, timeout, options)
    _warn_if_per_process(plan.cache_alias, plan.cache)
    state, value = plan.judge(await plan.aread())
    if state == MISSING:
        return await plan.abuild_missing()
    if state == STALE:
        await plan.arefresh_in_background()
    elif state == EARLY:
        return await plan.abuild_now(value)
    return value


class _Plan:
    """One get_or_set call: its checked arguments, its cache and its lock."""

    def __init__(
        self, key: str, build: Callable[[], Any], timeout: float, options: Options
    ) -> None:
        unknown = sorted(set(options) - Options.__optional_keys__)
        if unknown:
            raise TypeError(
                f"get_or_set() takes no option {unknown[0]!r}: its options are "
                f"{', '.join(sorted(Options.__optional_keys__))}."
            )
        if not isinstance(key, str) or not key:
            raise TypeError(f"key must be a non-empty str, not {key!r}.")
        if not callable(build):
            raise TypeError(f"build must be a callable returning the value, not {build!r}.")
        self.key, self.build, self.version = key, build, options.get("version")
        # Without allow_none, seconds() returns a float or raises.
        self.timeout = cast(float, seconds("timeout", timeout))
        stale = options.get("stale")
        self.stale = seconds("stale", stale, allow_none=True, allow_zero=True) or 0.0
        self.lock_ttl = cast(float, seconds("lock_ttl", options.get("lock_ttl", DEFAULT_LOCK_TTL)))
        self.wait = seconds("wait", options.get("wait"), allow_none=True, allow_zero=True)
        if self.wait is None:
            self.wait = self.lock_ttl
        beta = seconds("early", options.get("early"), allow_none=True, allow_zero=True)
        self.beta = (0.0 if self.stale else 1.0) if beta is None else beta
        cache = options.get("cache", "default")
        self.cache = caches[cache]
        self.cache_alias, self.using = cache, options.get("using", "default")
        self._lock: Lock | None = None
        self.judged_until: float | None = None  # the freshness of the entry judge() saw

    @property
    def lock(self) -> Lock:
        """The rebuild lock, made only when needed (a fresh hit needs none)."""
        if self._lock is None:
            self._lock = Lock(
                _lock_name(self.cache_alias, self.key),
                ttl=self.lock_ttl,
                auto_renew=True,
                using=self.using,
                purpose=f"distlock.cache rebuild of {self.key[:80]!r}",
                # It guards the build, not database work: callers that missed the key wait
                # for the value, never for the builder's transaction
                # (docs/semaphores-and-caching.md).
                hold_until_commit=False,
            )
        return self._lock

    def judge(self, entry: Any) -> tuple[str, Any]:
        """Return what to do with what the cache held, and the value it held."""
        if not _is_entry(entry):
            return MISSING, None  # absent, or written by someone else
        _, value, fresh_until, duration = entry
        self.judged_until = fresh_until
        now = time.time()
        if now >= fresh_until:
            # Past its freshness but still there: served if meant to be, else (clocks of
            # two hosts differ) treated as missing.
            return (STALE, value) if self.stale else (MISSING, None)
        if self.rebuild_early(now, fresh_until, duration):
            return EARLY, value
        return FRESH, value

    def newer_value(self, entry: Any) -> Any:
        """Return the value of ``entry`` if it is fresh and is not the entry judge() saw
        (someone stored it since), else _MISSING. No random draw: a value just rebuilt by
        another caller is used, however near its expiry."""
        if not _is_entry(entry) or entry[2] == self.judged_until or time.time() >= entry[2]:
            return _MISSING
        return entry[1]

    # unasync: the async source of the sync code after it
    async def arebuild(self) -> Any:
        """Under the rebuild lock: read the key again and return what another caller stored
        since this one judged it, else build and store the value. The lock alone would let
        a second build through: a caller descheduled between its read and its lock attempt
        finds the lock free once the other caller's rebuild is stored."""
        value = self.newer_value(await self.aread())
        return await self.astore() if value is _MISSING else value

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def rebuild(self) -> Any:
        """Under the rebuild lock: read the key again and return what another caller stored
        since this one judged it, else build and store the value. The lock alone would let
        a second build through: a caller descheduled between its read and its lock attempt
        finds the lock free once the other caller's rebuild is stored."""
        value = self.newer_value(self.read())
        return self.store() if value is _MISSING else value

    # unasync: end

    # unasync: the async source of the sync code after it
    async def aread(self) -> Any:
        return await self.cache.aget(self.key, _MISSING, version=self.version)

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def read(self) -> Any:
        return self.cache.get(self.key, _MISSING, version=self.version)

    # unasync: end

    def _entry(self, value: Any, started: float) -> tuple[Any, ...]:
        return (TAG, value, time.time() + self.timeout, time.monotonic() - started)

    def store(self) -> Any:
        """Build the value and cache it; return it."""
        started = time.monotonic()
        value = self.build()
        self.cache.set(
            self.key, self._entry(value, started), self.timeout + self.stale, version=self.version
        )
        return value

    async def astore(self) -> Any:
        started = time.monotonic()
        value = self.build()
        if inspect.isawaitable(value):
            value = await value
        await self.cache.aset(
            self.key, self._entry(value, started), self.timeout + self.stale, version=self.version
        )
        return value

    # unasync: the async source of the sync code after it
    async def abuild_missing(self) -> Any:
        """Build a missing value, or wait for whoever is building it and read theirs."""
        if not await self.lock.aacquire(wait=self.wait):
            logger.warning(
                "distlock.cache: waited %.1fs for the rebuild of %r; building it here as well",
                self.wait,
                self.key,
            )
            return await self.astore()
        try:
            return await self.arebuild()  # built by the caller it waited for?
        finally:
            await self.lock.arelease()

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def build_missing(self) -> Any:
        """Build a missing value, or wait for whoever is building it and read theirs."""
        if not self.lock.acquire(wait=self.wait):
            logger.warning(
                "distlock.cache: waited %.1fs for the rebuild of %r; building it here as well",
                self.wait,
                self.key,
            )
            return self.store()
        try:
            return self.rebuild()  # built by the caller it waited for?
        finally:
            self.lock.release()

    # unasync: end

    # unasync: the async source of the sync code after it
    async def abuild_now(self, current: Any) -> Any:
        """Rebuild a fresh value early (XFetch), unless someone else is at it."""
        if not await self.lock.aacquire(wait=0):
            return current
        try:
            return await self.arebuild()
        finally:
            await self.lock.arelease()

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def build_now(self, current: Any) -> Any:
        """Rebuild a fresh value early (XFetch), unless someone else is at it."""
        if not self.lock.acquire(wait=0):
            return current
        try:
            return self.rebuild()
        finally:
            self.lock.release()

    # unasync: end

    def refresh_in_background(self) -> None:
        """Rebuild a stale value in a thread, unless someone else is at it."""
        if not self.lock.acquire(wait=0):
            return
        threading.Thread(
            target=self._refresh, name=f"distlock-cache {self.key[:40]}", daemon=True
        ).start()

    def _refresh(self) -> None:
        try:
            self.rebuild()  # the re-read runs here, in the thread: the caller never waits
        except Exception:
            self._log_failed(REBUILD_FAILED)
        finally:
            try:
                self.lock.release()
            except Exception:  # its lease ends on its own
                self._log_failed(RELEASE_FAILED)
            connections.close_all()  # this thread's own: nobody else would close them

    def _log_failed(self, what: str) -> None:
        logger.exception("distlock.cache: " + what, self.key)

    async def arefresh_in_background(self) -> None:
        """Rebuild a stale value in a task of the running loop, unless someone else is at it."""
        if not await self.lock.aacquire(wait=0):
            return
        task = asyncio.get_running_loop().create_task(self._arefresh())
        _TASKS.add(task)
        task.add_done_callback(_TASKS.discard)

    async def _arefresh(self) -> None:
        try:
            await self.arebuild()
        except Exception:
            self._log_failed(REBUILD_FAILED)
        finally:
            try:
                await self.lock.arelease()
            except Exception:
                self._log_failed(RELEASE_FAILED)

    def rebuild_early(self, now: float, fresh_until: float, duration: float) -> bool:
        """XFetch: True with a probability that rises as expiry nears, scaled by the build's
        duration (``now - duration * beta * ln(rand) >= expiry``)."""
        if self.beta <= 0 or duration <= 0:
            return False
        return now - duration * self.beta * math.log(1.0 - xfetch_random.random()) >= fresh_until


def _is_entry(entry: Any) -> bool:
    """True if ``entry`` was written by get_or_set (any other shape counts as missing)."""
    return isinstance(entry, tuple) and len(entry) == 4 and entry[0] == TAG


def _warn_if_per_process(alias: str, cache: BaseCache) -> None:
    """Warn, once per alias, that a cache the processes do not share gives no single build
    across processes (it still works: each process builds its own)."""
    if alias in _WARNED or not isinstance(cache, (LocMemCache, DummyCache)):
        return
    _WARNED.add(alias)  # a race of two threads at most warns twice: harmless
    if isinstance(cache, DummyCache):
        effect = "keeps nothing, so every call builds the value"
    else:
        effect = "is kept by each process apart, so each process builds the value itself"
    warnings.warn(
        f"distlock.cache: the cache {alias!r} ({type(cache).__name__}) {effect}; the "
        "rebuild lock cannot make one build across processes. Use a shared cache (Redis, "
        "Memcached, the database cache).",
        PerProcessCacheWarning,
        stacklevel=3,
    )


def _lock_name(cache: str, key: str) -> str:
    name = f"distlock.cache:{cache}:{key}"
    try:
        return validate_name(name)
    except InvalidLockName:  # too long, or control characters: one name per key all the same
        return f"distlock.cache:{cache}:sha256:{hashlib.sha256(key.encode()).hexdigest()}"
