"""Semaphore operations for the Redis backends: a mixin over ScriptedBackend's script runner.

:class:`RedisSemaphores` needs from its host class only what ScriptedBackend offers every
operation: ``run_script(script, keys, args)``/``await arun_script(...)`` (the scripts of
distlock.backends.semaphore_scripts are in distlock.backends.calls.SCRIPT_SOURCES),
``pop_then_run``/``await apop_then_run`` (a BLPOP and a script in one round trip),
``layout``, ``alias`` and ``max_renewals``. Each operation is one script call (see
semaphore_scripts for the keys); a waiter's wake-up and its next acquire are one round trip.
"""
from __future__ import annotations

import time
from functools import lru_cache
from typing import Any, NamedTuple

from ..info import LockInfo, SemaphoreInfo
from ..names import KeyLayout, encode_name, validate_name
from ..signals import lock_force_released
from .base import HANDOFF_GRACE_MS, Attempt

SEMAPHORE_INDEX = "semheld"  # the kind of each bucket's index of held semaphore names


class SemaphoreKeys(NamedTuple):
    """The keys of one semaphore, in the order the scripts take them (all in one slot)."""

    holders: str
    state: str
    queue: str
    patience: str
    reserved: str
    signal_prefix: str  # + a waiting token: the list that waiter blocks on
    index: str  # type: ignore[assignment]  # the bucket's index of held semaphores


@lru_cache(maxsize=4096)
def semaphore_keys(layout: KeyLayout, name: str) -> SemaphoreKeys:
    """Return the keys of semaphore ``name``: ``<prefix>:{b<bucket>}:sem:...``.

    The bucket's hash tag is the one a lock of the same name uses (so a semaphore is listed
    with the locks of its bucket), but every key kind differs from a lock's.
    """
    tag = layout.tag_of(name)
    base = f"{tag}:sem:{encode_name(name)}"
    return SemaphoreKeys(
        holders=f"{base}:holders", state=f"{base}:state", queue=f"{base}:queue",
        patience=f"{base}:patience", reserved=f"{base}:reserved", signal_prefix=f"{base}:signal:",
        index=f"{tag}:{SEMAPHORE_INDEX}",
    )


def semaphore_index_keys(layout: KeyLayout) -> list[str]:
    """Return the key of each bucket's index of held semaphores."""
    return layout.bucket_keys(SEMAPHORE_INDEX)


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def attempt_from(reply: list[Any]) -> Attempt:
    if int(reply[0]) == 1:
        return Attempt(True, fencing_token=int(reply[1]), acquired_ms=int(reply[2]))
    return Attempt(False, holder_pttl_ms=int(reply[1]))


def semaphore_info(name: str, alias: str, reply: list[Any]) -> SemaphoreInfo | None:
    """Build a SemaphoreInfo from INSPECT's reply (None when it is empty)."""
    if not reply:
        return None
    limit, now_ms, waiting, reserved = (int(value) for value in reply[:4])
    holders = []
    fields = reply[4:]
    for i in range(0, len(fields), 6):
        token, lease_end, meta, acquired, fence, renewals = fields[i:i + 6]
        holders.append(LockInfo.from_stored(
            name=name, token=_text(token), fence=int(fence), meta_json=_text(meta),
            acquired_ms=int(acquired), now_ms=now_ms, pttl_ms=int(lease_end) - now_ms,
            renewals=int(renewals), depth=1, alias=alias,
        ))
    return SemaphoreInfo(name=name, limit=limit, holders=tuple(holders),
                         waiting=waiting + reserved, alias=alias)


class PermitOperators:
    """What operators do to a semaphore, on top of a backend's semaphore operations."""

    alias: str
    semaphore_info: Any
    semaphore_release: Any

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
            lock_force_released.send(type(self), name=name, alias=self.alias, info=holder)
        return released


class RedisSemaphores(PermitOperators):
    """Semaphores for ScriptedBackend (RedisBackend, DjangoRedisBackend); see
    distlock.semaphore."""

    layout: KeyLayout
    alias: str
    max_renewals: int | None
    run_script: Any
    arun_script: Any
    pop_then_run: Any
    run_pipelined: Any
    apop_then_run: Any

    def _sem_keys(self, name: str) -> list[str]:
        return list(semaphore_keys(self.layout, name))

    # --- acquire, wait, leave -----------------------------------------------------------
    def _sem_acquire_args(self, name: str, limit: int, token: str, ttl_ms: int, meta: str,
                          patience_ms: int) -> list[Any]:
        return [token, ttl_ms, meta, name, limit, patience_ms, HANDOFF_GRACE_MS]

    def semaphore_acquire(self, name: str, limit: int, token: str, ttl_ms: int, meta: str,
                          patience_ms: int) -> Attempt:
        """Take a permit of ``name`` for ``token``, or queue it for ``patience_ms``."""
        args = self._sem_acquire_args(name, limit, token, ttl_ms, meta, patience_ms)
        # Idempotent: a token already holding a permit is told so, and keeps its place.
        return attempt_from(self.run_script("semaphore_acquire", self._sem_keys(name), args,
                                            idempotent=True))

    async def asemaphore_acquire(self, name: str, limit: int, token: str, ttl_ms: int,
                                 meta: str, patience_ms: int) -> Attempt:
        args = self._sem_acquire_args(name, limit, token, ttl_ms, meta, patience_ms)
        return attempt_from(await self.arun_script("semaphore_acquire", self._sem_keys(name),
                                                   args))

    def _wake_key(self, name: str, token: str) -> str:
        return semaphore_keys(self.layout, name).signal_prefix + token

    def semaphore_wait_and_acquire(self, timeout: float, name: str, limit: int, token: str,
                                   ttl_ms: int, meta: str, patience_ms: int) -> Attempt:
        """Block until a permit is reserved for ``token`` (or ``timeout`` seconds pass) and
        try to take it, in one round trip: the acquire script runs as soon as the BLPOP on
        the waiter's own list returns."""
        call = (self._sem_keys(name),
                self._sem_acquire_args(name, limit, token, ttl_ms, meta, patience_ms))
        sent = time.monotonic()
        replies = self.pop_then_run(self._wake_key(name, token), timeout,
                                    "semaphore_acquire", call)
        if replies is None:  # a late reply: the acquire may have run (see ScriptedBackend)
            self.semaphore_release(name, token)
            return Attempt(False)
        if any(isinstance(reply, Exception) for reply in replies):
            del replies  # the script was forgotten, or the slot moved: ask the usual way
            return self.semaphore_acquire(name, limit, token, ttl_ms, meta,
                                          patience_ms)._replace(sent=sent)
        return attempt_from(replies[1])._replace(sent=sent)

    async def asemaphore_wait_and_acquire(self, timeout: float, name: str, limit: int,
                                          token: str, ttl_ms: int, meta: str,
                                          patience_ms: int) -> Attempt:
        call = (self._sem_keys(name),
                self._sem_acquire_args(name, limit, token, ttl_ms, meta, patience_ms))
        sent = time.monotonic()
        replies = await self.apop_then_run(self._wake_key(name, token), timeout,
                                           "semaphore_acquire", call)
        if replies is None:
            await self.asemaphore_release(name, token)
            return Attempt(False)
        if any(isinstance(reply, Exception) for reply in replies):
            del replies
            attempt = await self.asemaphore_acquire(name, limit, token, ttl_ms, meta,
                                                    patience_ms)
            return attempt._replace(sent=sent)
        return attempt_from(replies[1])._replace(sent=sent)

    def semaphore_leave(self, name: str, token: str) -> None:
        """Stop waiting (a permit reserved for ``token`` meanwhile passes on)."""
        self.run_script("semaphore_leave", self._sem_keys(name), [token, HANDOFF_GRACE_MS, name],
                        idempotent=True)

    async def asemaphore_leave(self, name: str, token: str) -> None:
        await self.arun_script("semaphore_leave", self._sem_keys(name),
                               [token, HANDOFF_GRACE_MS, name])

    # --- release, extend ----------------------------------------------------------------
    def semaphore_release(self, name: str, token: str) -> int:
        """Give back ``token``'s permit; return 1 if it held one, else 0."""
        return int(self.run_script("semaphore_release", self._sem_keys(name),
                                   [token, HANDOFF_GRACE_MS, name]))

    async def asemaphore_release(self, name: str, token: str) -> int:
        return int(await self.arun_script("semaphore_release", self._sem_keys(name),
                                          [token, HANDOFF_GRACE_MS, name]))

    def _sem_extend_args(self, name: str, token: str, ttl_ms: int, renewal: bool) -> list[Any]:
        limit = "" if self.max_renewals is None else self.max_renewals
        return [token, ttl_ms, "1" if renewal else "0", limit, HANDOFF_GRACE_MS, name]

    def semaphore_extend(self, name: str, token: str, ttl_ms: int, *, renewal: bool) -> int:
        """Return 1 if extended, 0 if ``token`` holds no permit, 2 at MAX_RENEWALS."""
        args = self._sem_extend_args(name, token, ttl_ms, renewal)
        return int(self.run_script("semaphore_extend", self._sem_keys(name), args))

    async def asemaphore_extend(self, name: str, token: str, ttl_ms: int, *,
                                renewal: bool) -> int:
        args = self._sem_extend_args(name, token, ttl_ms, renewal)
        return int(await self.arun_script("semaphore_extend", self._sem_keys(name), args))

    # --- operators ----------------------------------------------------------------------
    def semaphore_info(self, name: str) -> SemaphoreInfo | None:
        """Return the holders of semaphore ``name``, or None if nobody holds or waits."""
        validate_name(name)
        return semaphore_info(name, self.alias, self.run_script(
            "semaphore_inspect", self._sem_keys(name), [], idempotent=True))

    async def asemaphore_info(self, name: str) -> SemaphoreInfo | None:
        validate_name(name)
        reply = await self.arun_script("semaphore_inspect", self._sem_keys(name), [])
        return semaphore_info(name, self.alias, reply)

    def held_semaphores(self, prefix: str = "") -> list[SemaphoreInfo]:
        """Return every held semaphore whose name starts with ``prefix``, by name (one round
        trip per server to list the names, one more to read them)."""
        replies = self.run_pipelined("semaphore_held_names",
                                     [([key], []) for key in semaphore_index_keys(self.layout)])
        names = sorted(_text(name) for reply in replies for name in reply
                       if _text(name).startswith(prefix))
        read = self.run_pipelined("semaphore_inspect",
                                  [(self._sem_keys(name), []) for name in names])
        found = (semaphore_info(name, self.alias, reply)
                 for name, reply in zip(names, read, strict=True))
        return [info for info in found if info is not None and info.holders]
