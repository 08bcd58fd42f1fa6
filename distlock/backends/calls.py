"""The Lua scripts' calls and replies: which keys and arguments each script takes, and what
its reply means. Shared by every backend that runs the scripts (RedisBackend,
DjangoRedisBackend, and each node of RedlockBackend), so the layout is written once.

A call is ``(keys, args)``; see distlock.backends.scripts for what each position means.
"""
from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Any

from ..info import LockInfo
from ..names import KeyLayout
from . import scripts, semaphore_scripts
from .base import HANDOFF_GRACE_MS, Attempt, HeldEntry

Call = tuple[list[str], list[Any]]
# Locks one INSPECT_MANY call reads at most (a bucket rarely holds more).
INSPECT_MANY_KEYS = 500

SCRIPT_SOURCES = {
    "acquire": scripts.ACQUIRE,
    "release": scripts.RELEASE,
    "leave_queue": scripts.LEAVE_QUEUE,
    "extend": scripts.EXTEND,
    "inspect": scripts.INSPECT,
    "inspect_many": scripts.INSPECT_MANY,
    "held_names": scripts.HELD_NAMES,
    # Redlock's: a grant pushed to one list all waiters block on (see RedlockBackend).
    "grant_acquire": scripts.GRANT_ACQUIRE,
    "grant_release": scripts.GRANT_RELEASE,
    "grant_leave_queue": scripts.GRANT_LEAVE_QUEUE,
    "undo_acquire": scripts.UNDO_ACQUIRE,
    # Semaphores' (see distlock.backends.semaphores).
    **semaphore_scripts.SCRIPT_SOURCES,
}
# The SHA1 digest Redis knows a script by (EVALSHA): the same on every server.
SCRIPT_SHAS = {name: hashlib.sha1(source.encode()).hexdigest()
               for name, source in SCRIPT_SOURCES.items()}


def text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


# --- calls ------------------------------------------------------------------------------
def acquire_call(layout: KeyLayout, name: str, token: str, ttl_ms: int, meta: str,
                 patience_ms: int, waited: bool = False) -> Call:
    """``waited``: the token may be in the queue (it waited), so leave it once acquired."""
    k = layout.keys_for(name)
    return ([k.lock, k.fence, k.waiters, k.live, k.index],
            [token, ttl_ms, meta, name, patience_ms, "1" if waited else "0"])


def wake_key(layout: KeyLayout, name: str, token: str) -> str:
    """The list a release pushes to when it hands the lock to waiter ``token``."""
    return f"{layout.keys_for(name).waiters}:{token}"


def release_call(layout: KeyLayout, name: str, token: str, every_level: bool) -> Call:
    k = layout.keys_for(name)
    return ([k.lock, k.waiters, k.live, k.index],
            [token, name, "1" if every_level else "0", HANDOFF_GRACE_MS])


def leave_call(layout: KeyLayout, name: str, token: str) -> Call:
    k = layout.keys_for(name)
    return [k.lock, k.waiters, k.live], [token, HANDOFF_GRACE_MS]


def grant_acquire_call(layout: KeyLayout, name: str, token: str, ttl_ms: int, meta: str,
                       grant: str | None, patience_ms: int) -> Call:
    k = layout.keys_for(name)
    return ([k.lock, k.fence, k.waiters, k.signal, k.index],
            [token, ttl_ms, meta, name, grant or "", patience_ms])


def grant_release_call(layout: KeyLayout, name: str, token: str, every_level: bool) -> Call:
    k = layout.keys_for(name)
    return ([k.lock, k.waiters, k.signal, k.index],
            [token, name, "1" if every_level else "0", HANDOFF_GRACE_MS])


def extend_call(layout: KeyLayout, name: str, token: str, ttl_ms: int, renewal: bool,
                reenter: bool, max_renewals: int | None) -> Call:
    k = layout.keys_for(name)
    return ([k.lock, k.index],
            [token, ttl_ms, name, "1" if renewal else "0", "1" if reenter else "0",
             "" if max_renewals is None else max_renewals])


def grant_leave_call(layout: KeyLayout, name: str, token: str) -> Call:
    return [layout.keys_for(name).waiters], [token]


def undo_call(layout: KeyLayout, name: str, token: str, patience_ms: int) -> Call:
    k = layout.keys_for(name)
    return [k.lock, k.index, k.waiters], [token, name, patience_ms]


def inspect_call(layout: KeyLayout, name: str) -> Call:
    return [layout.keys_for(name).lock], []


def inspect_many_calls(layout: KeyLayout, names: list[str]) -> list[tuple[list[str], Call]]:
    """Group ``names`` by bucket, at most INSPECT_MANY_KEYS a call; return each call with
    the names it reads."""
    by_bucket: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for name in names:
        keys = layout.keys_for(name)
        by_bucket[keys.index].append((name, keys.lock))
    grouped: list[tuple[list[str], Call]] = []
    for bucket in by_bucket.values():
        for start in range(0, len(bucket), INSPECT_MANY_KEYS):
            chunk = bucket[start : start + INSPECT_MANY_KEYS]
            grouped.append(([name for name, _ in chunk], ([lock for _, lock in chunk], [])))
    return grouped


def held_names_calls(layout: KeyLayout) -> list[Call]:
    """One call per bucket: each lists the names held in it."""
    return [([index], []) for index in layout.index_keys]


# --- replies ----------------------------------------------------------------------------
def took_lock(reply: Any) -> bool:
    """Whether an ACQUIRE or GRANT_ACQUIRE reply says the lock was taken: only then is it a
    string, "FENCE ACQUIRED_MS" (an error or a table otherwise)."""
    return isinstance(reply, (bytes, str))


def attempt_from(reply: Any) -> Attempt:
    """Return the Attempt in an ACQUIRE or GRANT_ACQUIRE reply."""
    if took_lock(reply):
        fence, acquired = text(reply).split(" ")
        return Attempt(True, fencing_token=int(fence), acquired_ms=int(acquired))
    if len(reply) > 2:  # one server: the place in the queue and the server's clock
        return Attempt(False, holder_pttl_ms=int(reply[1]), place=int(reply[2]),
                       server_ms=int(reply[3]))
    return Attempt(False, holder_pttl_ms=int(reply[1]))


def lock_info_from(alias: str, name: str, reply: list[Any]) -> LockInfo | None:
    """Return the LockInfo in INSPECT's reply, None when the lock is not held."""
    if not reply:
        return None
    value, pttl, now = reply
    # TOKEN FENCE ACQUIRED_MS RENEWALS DEPTH METADATA (see distlock.backends.scripts)
    token, fence, acquired, renewals, depth, meta = text(value).split(" ", 5)
    return LockInfo.from_stored(
        name=name, token=token, fence=int(fence), meta_json=meta, acquired_ms=int(acquired),
        now_ms=int(now), pttl_ms=int(pttl), renewals=int(renewals), depth=int(depth),
        alias=alias,
    )


def lock_infos_from(alias: str, names: list[str], reply: list[Any]) -> list[LockInfo]:
    """Return the LockInfo of each of ``names`` still held, from INSPECT_MANY's reply."""
    now, *entries = reply
    return [info for info in (lock_info_from(alias, name, [*entry, now] if entry else entry)
                              for name, entry in zip(names, entries, strict=True))
            if info is not None]


def held_entries(reply: list[Any]) -> list[HeldEntry]:
    """Return the entries of one bucket from HELD_NAMES's reply: name, lease end (ms),
    acquired (ms), ..."""
    return [HeldEntry(text(reply[i]), float(reply[i + 1]) / 1000, float(reply[i + 2]) / 1000)
            for i in range(0, len(reply), 3)]


def block_seconds(timeout: float) -> float:
    """BLPOP's timeout: seconds with millisecond resolution; 0 would mean "forever"."""
    return max(round(timeout, 3), 0.001)
