"""A lock on a Redis shared with a cache: the issue's scenario, measured (docs/deployments.md).

One lock alias and the cache on the same servers, ``maxmemory 8mb`` on each master: A holds
``pay:42`` (ttl 30 s; 600 in the issue: LRU does not look at TTLs), the site writes 20,000
cache entries of 2 KB (no TTL), and B then tries ``pay:42``. Printed per deployment (one
server, Sentinel, Cluster) and policy: the keys the servers evicted, whether the lock's key
went, whether B got the lock while A holds it, what the deploy check says, and what A is
told. Under ``noeviction``: how many writes were refused (OOM) and what an acquire raises.

    python -m benchmarks.eviction
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "devkit.settings")
django.setup()

from django.test.utils import override_settings  # noqa: E402

import distlock  # noqa: E402
from devkit.configs import distlock_settings  # noqa: E402
from devkit.memory import write_entries  # noqa: E402
from devkit.redis_server import RedisCluster, RedisSentinelGroup, RedisServer  # noqa: E402
from distlock import BackendUnavailable  # noqa: E402
from distlock.checks import check_eviction  # noqa: E402
from distlock.handler import locks  # noqa: E402

ENTRIES = 20_000
POLICIES = ["allkeys-lru", "volatile-lru", "noeviction"]


@contextmanager
def deployment(kind: str) -> Iterator[tuple[str, list[RedisServer], Any]]:
    """Yield (the location distlock_settings takes, the master servers, a cache client)."""
    if kind == "redis":
        with RedisServer() as server:
            yield server.url, [server], server.client()
    elif kind == "sentinel":
        with RedisSentinelGroup() as group:
            where = ",".join(f"{host}:{port}" for host, port in group.sentinels)
            yield where, [group.master], group.master.client()
    else:
        with RedisCluster() as cluster:
            yield cluster.urls[0], cluster.masters(), cluster.client()


def measure(kind: str, policy: str) -> dict[str, Any]:
    with deployment(kind) as (location, masters, cache):
        for server in masters:
            server.client().config_set("maxmemory", "8mb")
            server.client().config_set("maxmemory-policy", policy)
        setting, caches = distlock_settings(kind, location)
        with override_settings(DISTLOCK=setting, CACHES=caches):
            locks.reset()
            try:
                return scenario(kind, masters, cache)
            finally:
                locks.reset()


def scenario(kind: str, masters: list[RedisServer], cache: Any) -> dict[str, Any]:
    lost = threading.Event()
    told: list[str] = []

    def on_lost(lock: distlock.Lock) -> None:
        told.append(lock.lost_reason or "")
        lost.set()

    # ttl 30, not 600: the renewal that finds the key gone comes after 10 s (LRU eviction
    # does not look at TTLs).
    a = distlock.lock("pay:42", ttl=30, auto_renew=True, on_lost=on_lost)
    assert a.acquire()
    written = write_entries(cache, ENTRIES)
    evicted = sum(int(s.client().info("stats")["evicted_keys"]) for s in masters)
    gone = not a.locked()
    b = distlock.lock("pay:42", ttl=60)
    try:
        b_got = b.acquire(wait=0)
        acquire_error = ""
    except BackendUnavailable as exc:
        b_got, acquire_error = False, str(exc)
    if gone:
        lost.wait(30 / 3 + 5)  # the next renewal finds the key gone
    return {
        "deployment": kind,
        "written": written,
        "evicted": evicted,
        "lock key evicted": gone,
        "B acquired while A holds": b_got,
        "check": [w.id for w in check_eviction()],
        "A told": told[0] if told else "",
        "acquire error": acquire_error,
    }


def main() -> None:
    for kind in ("redis", "sentinel", "cluster"):
        for policy in POLICIES:
            result = measure(kind, policy)
            print(policy, result, flush=True)


if __name__ == "__main__":
    main()
