"""Lock names: what is allowed, and how a name becomes Redis keys.

Every key of one lock shares a Redis Cluster hash tag, so each Lua script touches one slot.
The tag is not the name itself but one of ``BUCKETS`` buckets picked by a hash of the name:
the bucket also holds the index of held locks, which the scripts must update atomically with
the lock. Names are percent-encoded, so nothing a user puts in a name (braces, ``*``, ``:``,
spaces, newlines, any Unicode) can move the hash tag or change the key structure, and two
different names never share a key.
"""

from __future__ import annotations

import re
import zlib
from functools import lru_cache
from typing import NamedTuple
from urllib.parse import quote

from .exceptions import InvalidLockName

MAX_NAME_LENGTH = 1024
# Fixed for every client of an alias: changing it would give one name two different keys.
# 1024 hash tags spread the locks over every master of a Cluster (each master's share of
# the buckets, so of the locks, is within a few percent of the mean up to ~100 masters).
BUCKETS = 1024
# The key layout's version, visible in the width of the bucket tag: version 1 had 16 buckets
# (``{b07}``), version 2 has 1024 (``{b0007}``), so keys of the two never coincide. Processes
# on different versions do not exclude each other: see docs/deployments.md, "Upgrading".
LAYOUT_VERSION = 2
# Characters kept as they are in keys; everything else is percent-encoded as UTF-8.
SAFE_CHARACTERS = "-._~:/@+=,"
# Names quote() leaves as they are: its always-safe ASCII characters and SAFE_CHARACTERS.
PLAIN = re.compile(r"[A-Za-z0-9_.~:/@+=,-]*")
# Control characters (Unicode category Cc), lone surrogates (Cs), line and paragraph separators.
FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029]")


def validate_name(name: object) -> str:
    """Return ``name`` if it can name a lock, else raise InvalidLockName saying why."""
    if not isinstance(name, str):
        raise TypeError(f"A lock name must be a str, not {type(name).__name__}.")
    if not name:
        raise InvalidLockName("A lock name cannot be empty.", name=name)
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidLockName(
            f"A lock name is at most {MAX_NAME_LENGTH} characters; this one has {len(name)}. "
            "Hash long values (lock_view does this for you).",
            name=name[:80],
        )
    forbidden = FORBIDDEN.search(name)
    if forbidden:
        raise InvalidLockName(
            f"Lock name {name[:80]!r} contains the control character {forbidden.group()!r} at "
            f"position {forbidden.start()}; use printable text.",
            name=name,
        )
    return name


# What quote(name, safe=SAFE_CHARACTERS) makes of each ASCII character, by its code: the
# character itself or its escape. Every code has its entry: str.translate() looks a missing
# one up through a LookupError, which made a name of 50 characters cost more than quote().
ENCODED_ASCII = tuple(
    chr(code) if PLAIN.fullmatch(chr(code)) else f"%{code:02X}" for code in range(128)
)


def encode_name(name: str) -> str:
    """Return the name percent-encoded so it is safe as the tail of a key."""
    if PLAIN.fullmatch(name):  # most names (order:42): quote() would return them as they are
        return name
    if name.isascii():  # quote()'s result in one C call, not a Python call per byte
        return name.translate(ENCODED_ASCII)
    return quote(name, safe=SAFE_CHARACTERS)


def bucket_of(name: str) -> int:
    return zlib.crc32(name.encode("utf-8")) % BUCKETS


class LockKeys(NamedTuple):
    """The Redis keys of one lock, all in the same hash slot.

    A NamedTuple rather than a frozen dataclass: built once per new name on the acquire path,
    and a frozen dataclass's __init__ (object.__setattr__ per field) costs several times more.
    """

    lock: str  # string: token, fence, metadata (backends/redis_ops/lua/acquire.lua); TTL: lease
    fence: str  # last fencing token issued in the bucket (one key per bucket, never expires)
    waiters: str  # zset of waiting tokens: by arrival (one server), or by when they stop (Redlock)
    live: str  # zset of waiting tokens, by when their registration ends (one server)
    signal: str  # list a Redlock release pushes a grant to; waiters BLPOP it
    index: str  # type: ignore[assignment]  # zset of held names in the bucket, by lease end


class EncodedKeys(NamedTuple):
    """The keys of the exclusive lock's acquire and release calls, in their scripts' order,
    encoded once per name: redis-py encodes every str argument of every call, and these are
    the same for every acquire and release of a name (the uncontended pair's hot path). The
    name in their ARGV goes as a str, which the client encodes as in its other calls."""

    acquire: tuple[bytes, ...]  # KEYS of acquire.lua: lock, fence, waiters, live, index
    release: tuple[bytes, ...]  # KEYS of release.lua: lock, waiters, live, index


# The hash of the waiters' metadata is the queue's key followed by this ('|' is escaped in
# every encoded name, so no lock's key ends so): backends/redis_ops/lua/acquire.lua.
ABOUT_WAITERS = "|about"


class SemaphoreKeys(NamedTuple):
    """The Redis keys of one semaphore, in the order its scripts take them, all in the hash
    slot of the lock of the same name (backends/redis_ops/lua/semaphore_acquire.lua)."""

    holders: str  # zset: holder token -> lease end
    state: str  # hash: the limit, the last permit number, and each holder's fields
    queue: str  # zset: waiting token -> arrival
    patience: str  # zset: waiting token -> when it stops waiting
    reserved: str  # zset: token a freed permit is kept for -> until when
    signal_prefix: str  # + a waiting token: the list that waiter blocks on
    index: str  # type: ignore[assignment]  # zset of held semaphore names in the bucket


class SharedKeys(NamedTuple):
    """The Redis keys of one lock's shared holds, in the order shared_acquire.lua takes them:
    the lock's own keys, plus two whose names extend the queue's (so a release of either kind
    finds them), all in the lock's hash slot (backends/redis_ops/lua/shared_acquire.lua)."""

    lock: str  # the lock's string: "=~" while shared holders hold it
    fence: str  # the bucket's last fencing token, as for the lock
    queue: str  # the lock's queue, shared by both kinds (a shared waiter's token starts '~')
    live: str  # the lock's waiter liveness zset
    index: str  # type: ignore[assignment]  # zset of shared-held names in the bucket, by lease end
    readers: str  # zset: shared holder token -> lease end (queue + '|readers')
    holders: str  # hash: shared holder token -> its fields (queue + '|rmeta')


class KeyLayout:
    """Build the keys of an alias: ``<prefix>:{b<bucket>}:<kind>:<encoded name>``, the
    bucket written with four digits (layout version 2). A semaphore's kinds start with
    ``sem:``, so a lock and a semaphore of one name never share a key."""

    version = LAYOUT_VERSION

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.index_keys = self.bucket_keys("held")
        self.fence_keys = self.bucket_keys("fence")
        self.semaphore_index_keys = self.bucket_keys("semheld")
        self.shared_index_keys = self.bucket_keys("shheld")
        # Per bucket, what every new name's keys are built from (the exclusive lock's pair
        # on a new name each time builds them once per name).
        self.tags = [self._tag(bucket) for bucket in range(BUCKETS)]
        self.encoded_index_keys = [key.encode() for key in self.index_keys]
        self.encoded_fence_keys = [key.encode() for key in self.fence_keys]
        # Hot names (a cron job's, a view's) are locked again and again: build their keys once.
        self.keys_for = lru_cache(maxsize=4096)(self._keys_for)
        self.semaphore_keys_for = lru_cache(maxsize=4096)(self._semaphore_keys_for)
        self.shared_keys_for = lru_cache(maxsize=4096)(self._shared_keys_for)
        self.encoded_keys_for = lru_cache(maxsize=4096)(self._encoded_keys_for)

    def _tag(self, bucket: int) -> str:
        return f"{self.prefix}:{{b{bucket:04d}}}"

    def base_of(self, kind: str, name: str) -> str:
        """Return ``<prefix>:{b<bucket>}:<kind>:<encoded name>``: where a kind's keys of
        ``name`` start (a kind's own module spells the rest, as _semaphore_keys_for does), in
        the hash slot of every key of that name; ``bucket_keys`` gives its index's."""
        return f"{self._tag(bucket_of(name))}:{kind}:{encode_name(name)}"

    def _bucket_key(self, bucket: int, kind: str) -> str:
        return f"{self._tag(bucket)}:{kind}"

    def bucket_keys(self, kind: str) -> list[str]:
        """Return the key ``kind`` of every bucket (an index kept per bucket)."""
        return [self._bucket_key(bucket, kind) for bucket in range(BUCKETS)]

    def _keys_for(self, name: str) -> LockKeys:
        bucket = bucket_of(name)
        encoded = encode_name(name)
        base = self.tags[bucket]
        # Positional: keyword arguments cost a NamedTuple's __new__ a dict per call.
        return LockKeys(
            f"{base}:lock:{encoded}",  # lock
            self.fence_keys[bucket],  # fence
            f"{base}:wait:{encoded}",  # waiters
            f"{base}:live:{encoded}",  # live
            f"{base}:signal:{encoded}",  # signal
            self.index_keys[bucket],  # index
        )

    def _encoded_keys_for(self, name: str) -> EncodedKeys:
        # Spelled as _keys_for spells them (test_names checks they agree), not read from
        # keys_for: a new name then builds and caches only the keys its pair sends.
        bucket = bucket_of(name)
        encoded = encode_name(name)
        base = self.tags[bucket]
        lock = f"{base}:lock:{encoded}".encode()
        waiters = f"{base}:wait:{encoded}".encode()
        live = f"{base}:live:{encoded}".encode()
        index = self.encoded_index_keys[bucket]
        return EncodedKeys(
            (lock, self.encoded_fence_keys[bucket], waiters, live, index),
            (lock, waiters, live, index),
        )

    # Alike in shape to _keys_for (duplicates pairs them): each spells one kind's key layout,
    # field by field, the names the Lua headers use; a loop over names would hide them.
    def _semaphore_keys_for(self, name: str) -> SemaphoreKeys:
        bucket = bucket_of(name)
        base = f"{self._tag(bucket)}:sem:{encode_name(name)}"
        return SemaphoreKeys(
            holders=f"{base}:holders",
            state=f"{base}:state",
            queue=f"{base}:queue",
            patience=f"{base}:patience",
            reserved=f"{base}:reserved",
            signal_prefix=f"{base}:signal:",
            index=self.semaphore_index_keys[bucket],
        )

    def _shared_keys_for(self, name: str) -> SharedKeys:
        k = self.keys_for(name)
        return SharedKeys(
            lock=k.lock,
            fence=k.fence,
            queue=k.waiters,
            live=k.live,
            index=self.shared_index_keys[bucket_of(name)],
            readers=f"{k.waiters}|readers",  # hand_to_readers.lua derives it so
            holders=f"{k.waiters}|rmeta",
        )
