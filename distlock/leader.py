"""Leader election: of all the processes campaigning for one name, one leads at a time.

    leader = distlock.leader("scheduler", ttl=15, on_elected=start, on_revoked=stop)
    with leader:                      # campaigns in a background thread until the block ends
        while True:
            if leader.is_leader:      # checked against the lease, by this process's clock
                run_once(fence=leader.term)

Leadership is a held distlock Lock whose lease is renewed every third of ``ttl`` (the
lock's auto_renew); ``term`` is its fencing token, so terms only go up. Leadership ends
when the lease is lost (a renewal finds it gone, or the lease ran out by this process's own
clock, e.g. after a pause): ``is_leader`` turns False at once, ``on_revoked`` is called, and
the campaign starts again. ``stop()`` (or leaving the ``with`` block) resigns.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any

from .exceptions import BackendUnavailable, LockError
from .lock import Lock
from .offload import in_thread
from .validation import seconds

logger = logging.getLogger("distlock")
Callback = Callable[["Leader"], Any]
# How long one acquire attempt waits before the campaign checks whether it should stop. A
# waiter is woken at once when the leader resigns, and when its lease ends.
CAMPAIGN_WAIT = 1.0
# Pause after the lock server could not be reached, before campaigning again.
UNAVAILABLE_PAUSE = 0.5


class Leader:
    """Campaign for leadership of ``name``; make one with :func:`distlock.leader`."""

    def __init__(
        self,
        name: str,
        *,
        ttl: float | None = None,
        on_elected: Callback | None = None,
        on_revoked: Callback | None = None,
        using: str = "default",
        purpose: str | None = None,
    ) -> None:
        for label, callback in (("on_elected", on_elected), ("on_revoked", on_revoked)):
            if callback is not None and not callable(callback):
                raise TypeError(f"{label} must be a callable taking the Leader, not {callback!r}.")
        self.name = name
        self.ttl = seconds("ttl", ttl, allow_none=True)
        self.on_elected = on_elected
        self.on_revoked = on_revoked
        self.using = using
        self.purpose = purpose or f"leader of {name}"
        # Made now, so that a bad name, ttl or alias fails here and not in the thread.
        self._lock = self._new_lock()
        self._lock.backend  # noqa: B018 - raises InvalidLockBackendError for a bad alias
        self._term: int | None = None
        self._leading = False
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        state = f"leading, term {self._term}" if self.is_leader else "not leading"
        return f"<Leader {self.name!r}: {state}>"

    # --- state --------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        """Return True while this process leads: elected, and the lease not yet over by this
        process's monotonic clock (no round trip)."""
        return self._leading and self._lock.lease_left() > 0

    @property
    def lease(self) -> float:
        """The lease in seconds: ttl, or the alias's TIMEOUT."""
        return self.ttl if self.ttl is not None else self._lock.backend.default_timeout

    def lease_left(self) -> float:
        """Return the seconds the leadership surely lasts by this process's clock (0.0 when
        not leading): between two thirds of ttl and ttl while renewals succeed."""
        return self._lock.lease_left() if self._leading else 0.0

    @property
    def lock(self) -> Lock | None:
        """The held Lock this process leads under (its ``fencing_token`` is the term;
        ``lease_left()``, ``extend()``), None while not leading."""
        return self._lock if self._leading else None

    @property
    def term(self) -> int | None:
        """The current (or last) term: the lock's fencing token, greater than every earlier
        term's. Pass it to what the leader writes, so that it can refuse an older term."""
        return self._term

    def wait_elected(self, timeout: float | None = None) -> bool:
        """Wait until this process leads; return False if ``timeout`` seconds passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: self.is_leader, timeout)

    async def await_elected(self, timeout: float | None = None) -> bool:
        """Async twin of wait_elected()."""
        return await in_thread(self.wait_elected, timeout)

    # --- start and stop -----------------------------------------------------------------
    def start(self) -> Leader:
        """Start campaigning in a background thread; return self."""
        if self._thread is not None:
            raise LockError(f"This Leader already campaigns for {self.name!r}.", name=self.name)
        self._stopping.clear()
        self._thread = threading.Thread(
            target=self._campaign, daemon=True, name=f"distlock-leader {self.name}"
        )
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop campaigning and resign (release the lock; ``on_revoked`` is called if this
        process led)."""
        self._stopping.set()
        with self._changed:
            self._changed.notify_all()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    async def astart(self) -> Leader:
        """Start campaigning; coroutine callbacks run on the running event loop."""
        self._loop = asyncio.get_running_loop()
        return self.start()

    async def astop(self, timeout: float | None = None) -> None:
        """Async twin of stop()."""
        await in_thread(self.stop, timeout)

    # unasync: the async source of the sync code after it
    async def __aenter__(self) -> Leader:
        return await self.astart()

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def __enter__(self) -> Leader:
        return self.start()

    # unasync: end

    # unasync: the async source of the sync code after it
    async def __aexit__(self, *exc_info: object) -> None:
        await self.astop()

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # unasync: end

    # --- the campaign (background thread) -----------------------------------------------
    def _new_lock(self) -> Lock:
        return Lock(
            self.name,
            ttl=self.ttl,
            wait=CAMPAIGN_WAIT,
            auto_renew=True,
            on_lost=self._lease_lost,
            using=self.using,
            purpose=self.purpose,
        )

    def _campaign(self) -> None:
        while not self._stopping.is_set():
            try:
                if self._win():
                    self._lead()
            except Exception:  # a bug must not end the campaign silently, nor spin
                logger.exception("distlock: the campaign for %r failed", self.name)
                self._stopping.wait(UNAVAILABLE_PAUSE)

    def _win(self) -> bool:
        """Try for the lock once (waiting up to CAMPAIGN_WAIT); return True if elected."""
        try:
            acquired = self._lock.acquire()
        except BackendUnavailable as exc:
            logger.warning("distlock: campaigning for %r: %s", self.name, exc)
            self._stopping.wait(UNAVAILABLE_PAUSE)
            return False
        if acquired and self._stopping.is_set():
            self._resign()
            return False
        return acquired

    def _lead(self) -> None:
        """Hold the leadership until the lease is lost or the campaign stops."""
        with self._changed:
            self._term = self._lock.fencing_token
            self._leading = True
            self._changed.notify_all()
        logger.info("distlock: elected leader of %r, term %s", self.name, self._term)
        self._call(self.on_elected)
        with self._changed:
            # Wake when the lease would end by this process's clock, even if no renewal said
            # so (a pause, an unreachable server): is_leader is False by then already.
            while not self._stopping.is_set() and self._lock.lease_left() > 0:
                self._changed.wait(self._lock.lease_left() + 0.01)
            self._leading = False
            self._changed.notify_all()
        if self._stopping.is_set() and self._lock.lease_left() > 0:
            logger.info("distlock: resigned as leader of %r, term %s", self.name, self._term)
        else:
            logger.warning("distlock: lost the leadership of %r, term %s", self.name, self._term)
        # Before the release: on resigning, the next leader is elected only once this one's
        # on_revoked has finished.
        self._call(self.on_revoked)
        self._resign()

    def _resign(self) -> None:
        with contextlib.suppress(LockError):  # a lost lease: nothing left to release
            self._lock.release()
        self._lock = self._new_lock()

    def _lease_lost(self, lock: Lock) -> None:
        """on_lost of the lock (the renewer thread): wake the campaign."""
        with self._changed:
            self._changed.notify_all()

    def _call(self, callback: Callback | None) -> None:
        if callback is None:
            return
        try:
            result = callback(self)
            if inspect.isawaitable(result):
                if self._loop is None:
                    raise TypeError(
                        "coroutine callbacks need the async API (async with or astart())"
                    )
                asyncio.run_coroutine_threadsafe(result, self._loop).result()  # type: ignore[arg-type]
        except Exception:
            logger.exception(
                "distlock: %s callback of the leader of %r failed",
                getattr(callback, "__name__", "a"),
                self.name,
            )


# distlock.leader(name, ttl=..., ...): the class itself, named like distlock.lock.
leader = Leader
