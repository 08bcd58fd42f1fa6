"""The locks compared: distlock and the anchors, each used the way its documentation shows.

Every library gets its own redis-py client with default options, so none shares another's
connections. distlock runs with everything on: holder metadata, the index of held locks,
fencing tokens and the waiters' queue.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

DISTLOCK = "distlock"
DISTLOCK_NON_FAIR = "distlock fair=False"  # the non-fair mode, beside the default
REDIS_PY = "redis-py Lock"
PYTHON_REDIS_LOCK = "python-redis-lock"
POTTERY = "pottery Redlock"
REDLOCK_PY = "redlock-py"
UNCONTENDED_LIBRARIES = (DISTLOCK, REDIS_PY, PYTHON_REDIS_LOCK, POTTERY)
CONTENDED_LIBRARIES = (DISTLOCK, PYTHON_REDIS_LOCK, REDIS_PY, DISTLOCK_NON_FAIR)
# distlock's rows of the contention section: each is compared with every other library.
OURS = (DISTLOCK, DISTLOCK_NON_FAIR)
# Measured in round trips (benchmarks/latency.py) and server time (benchmarks/server_time.py).
LATENCY_LIBRARIES = (*UNCONTENDED_LIBRARIES, REDLOCK_PY)
REDLOCK_LIBRARIES = (DISTLOCK, POTTERY, REDLOCK_PY)
# redis-py's Lock polls a held lock: it sleeps this long between tries (its default is 0.1 s,
# which would make it look far worse than it need be).
REDIS_PY_SLEEP = 0.001
# A waiter of these learns of a release by trying again after a sleep, not by a wake-up.
POLLING = {
    REDIS_PY: f"polls every {REDIS_PY_SLEEP * 1000:g} ms here",
    POTTERY: "polls every 0-200 ms",  # a random sleep up to its _RETRY_DELAY
    REDLOCK_PY: "retries every 200 ms",  # its retry_delay's default
}
TTL = 10  # seconds; every lock here is released long before
# redlock-py gives up after this many tries (each followed by its retry_delay, 0.2 s by
# default); RedlockPyLock.acquire() asks again until it holds the lock.
REDLOCK_PY_RETRIES = 3


def distlock_factory(
    using: str = "default", shared: bool = False, fair: bool | None = None
) -> Callable[[str], Any]:
    """Return ``make(name)`` building an unheld distlock lock on the DISTLOCK alias ``using``
    (held shared if ``shared``; non-fair if ``fair`` is False)."""
    import distlock

    return lambda name: distlock.lock(name, ttl=TTL, using=using, shared=shared, fair=fair)


def lock_factory(library: str, url: str) -> Callable[[str], Any]:
    """Return ``make(name)`` building an unheld lock of ``library`` on its own client.

    The locks have ``acquire()`` (blocking until acquired) and ``release()``.
    """
    if library == REDLOCK_PY:
        return redlock_factory(library, [url])
    if library == DISTLOCK:
        return distlock_factory()
    if library == DISTLOCK_NON_FAIR:
        return distlock_factory(fair=False)
    client = redis.Redis.from_url(url)
    if library == REDIS_PY:
        return lambda name: client.lock(name, timeout=TTL, sleep=REDIS_PY_SLEEP)
    if library == PYTHON_REDIS_LOCK:
        import redis_lock

        return lambda name: redis_lock.Lock(client, name, expire=TTL)
    if library == POTTERY:
        from pottery import Redlock

        masters = {client}
        return lambda name: Redlock(key=name, masters=masters, auto_release_time=TTL)
    raise ValueError(f"unknown library {library!r}")


def redlock_factory(library: str, urls: list[str], using: str = "default") -> Callable[[str], Any]:
    """Like lock_factory, for a lock over every server in ``urls`` (one of
    REDLOCK_LIBRARIES; distlock's is the RedlockBackend alias ``using`` over them)."""
    if library == DISTLOCK:
        return distlock_factory(using)
    if library == POTTERY:
        from pottery import Redlock

        masters = {redis.Redis.from_url(url) for url in urls}
        return lambda name: Redlock(key=name, masters=masters, auto_release_time=TTL)
    if library == REDLOCK_PY:
        from redlock import Redlock as Manager

        manager = Manager(urls, retry_count=REDLOCK_PY_RETRIES)
        return lambda name: RedlockPyLock(manager, name)
    raise ValueError(f"unknown Redlock library {library!r}")


class RedlockPyLock:
    """redlock-py's ``lock()``/``unlock()`` as ``acquire()``/``release()``."""

    def __init__(self, manager: Any, name: str) -> None:
        self.manager = manager
        self.name = name
        self.held: Any = None

    def acquire(self) -> bool:
        """Block until held: redlock-py's own lock() gives up after its retries."""
        while not self.held:
            self.held = self.manager.lock(self.name, TTL * 1000)
        return True

    def release(self) -> None:
        self.manager.unlock(self.held)
        self.held = None


def pair(make: Callable[[str], Any], names: Callable[[], str]) -> Callable[[], None]:
    """Return a call doing one acquire+release on a new lock object named ``names()``."""

    def acquire_release() -> None:
        lock = make(names())
        lock.acquire()
        lock.release()

    return acquire_release
