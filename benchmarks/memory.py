"""Redis memory per held lock: INFO memory used_memory before and after holding N locks.

distlock stores, per lock, what its acquire script writes (holder, fencing token, metadata,
index entry). The anchors store one string each (their token); they are held by pipelining
exactly the SET each one's acquire() sends, and one lock taken through each library checks
that: its keys and values must be as long as the pipelined ones. The figure after
release is what distlock keeps per name once every lock is released: its share of the
fencing memory, one key per bucket of names (1,024 in all), kept for good.
"""

from __future__ import annotations

import os
import uuid
from base64 import b64encode
from collections.abc import Callable
from typing import Any

import redis

from . import held
from .anchors import DISTLOCK, POTTERY, PYTHON_REDIS_LOCK, REDIS_PY, TTL, lock_factory
from .harness import Profile

LEASE_MS = TTL * 1000 * 60  # no lock expires while the memory is measured
CHECK_NAME = "memory:0"

# What each anchor's acquire() sends for ``name``: its key, token and lease (see its source).
ANCHOR_ACQUIRES: dict[str, Callable[[Any, str], object]] = {
    REDIS_PY: lambda pipe, name: pipe.set(name, uuid.uuid1().hex, nx=True, px=LEASE_MS),
    PYTHON_REDIS_LOCK: lambda pipe, name: pipe.set(
        f"lock:{name}", b64encode(os.urandom(18)).decode(), nx=True, ex=LEASE_MS // 1000
    ),
    POTTERY: lambda pipe, name: pipe.set(
        f"redlock:{name}", str(uuid.uuid4()), nx=True, px=LEASE_MS
    ),
}


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def key_shapes(client: redis.Redis) -> list[list[int]]:
    """[key length, value length] of every (string) key in the otherwise empty server. Not
    MEMORY USAGE: with the libc allocator it varies with where malloc put the value."""
    return sorted([len(key), client.strlen(key)] for key in client.scan_iter())


def real_lock_shapes(client: redis.Redis, url: str, library: str) -> dict[str, Any]:
    """The keys of one lock taken through ``library`` and of its pipelined copy."""
    client.flushall()
    lock = lock_factory(library, url)(CHECK_NAME)
    lock.acquire()
    real = key_shapes(client)
    lock.release()
    client.flushall()
    pipe = client.pipeline(transaction=False)
    ANCHOR_ACQUIRES[library](pipe, CHECK_NAME)
    pipe.execute()
    pipelined = key_shapes(client)
    return {"real_lock": real, "pipelined": pipelined, "same": real == pipelined}


def anchor_bytes(client: redis.Redis, names: list[str], library: str) -> int:
    client.flushall()
    before = used_memory(client)
    for start in range(0, len(names), held.BATCH):
        pipe = client.pipeline(transaction=False)
        for name in names[start : start + held.BATCH]:
            ANCHOR_ACQUIRES[library](pipe, name)
        pipe.execute()
    return used_memory(client) - before


def run(profile: Profile, url: str) -> dict[str, Any]:
    client = redis.Redis.from_url(url, socket_timeout=60)  # FLUSHALL of many keys is slow
    count = profile.memory_locks
    names = [f"memory:{number}" for number in range(count)]

    client.flushall()
    before = used_memory(client)
    tokens = held.acquire_all(names, LEASE_MS)
    held_bytes = used_memory(client) - before
    held.release_all(tokens)
    released_bytes = used_memory(client) - before

    theirs = {library: anchor_bytes(client, names, library) for library in ANCHOR_ACQUIRES}
    checks = {library: real_lock_shapes(client, url, library) for library in ANCHOR_ACQUIRES}
    client.flushall()
    return {
        "locks": count,
        "bytes_per_lock": {DISTLOCK: round(held_bytes / count, 1)}
        | {library: round(used / count, 1) for library, used in theirs.items()},
        "distlock_bytes_per_released_name": round(released_bytes / count, 1),
        "distlock_vs_redis_py": round(held_bytes / theirs[REDIS_PY], 2),
        "anchor_key_checks": checks,
    }
