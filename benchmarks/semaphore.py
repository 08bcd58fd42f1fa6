"""Semaphores and the stampede helper: distlock against the redis-py-based semaphores on PyPI,
and ``get_or_set``'s cost on a hit against a plain ``cache.get``, in the same rounds.

Starts its own redis-server (never a Redis already running) and times, interleaved so that
noise on a shared machine hits every case alike, one uncontended acquire plus one release of
a limit-3 semaphore through each library's public API, each used as its documentation shows:

- distlock: ``distlock.semaphore(name, 3, ttl=10, wait=0)``, ``acquire()`` then
  ``release()`` (holder metadata, permit number and the index of held semaphores included),
  also with ``auto_renew=True``; ``distlock.lock`` for reference;
- py-redis-semaphore (``redis_semaphore``, redis-py >= 5, Lua, fencing tokens):
  ``Semaphore(client, SemaphoreConfig(name, limit=3, lock_timeout=10))``, ``acquire()``
  then ``release()`` (its heartbeat thread starts with every acquire: that is its default);
- redis-semaphore-eval (Lua, leases): ``with semaphore(client, key, limit=3, expire_in=10,
  blocking=False)``. Its metadata pins redis-py < 4, which distlock cannot run with:
  install it with ``pip install --no-deps redis-semaphore-eval`` (it runs on redis-py 8).

pottery (a redis-py-based anchor of the lock benchmarks) has no semaphore. A library that is
not installed is reported as such, not measured.

The cache cases read a key that is present: ``cache.get(key)`` against
``distlock.cache.get_or_set(key, build, 3600)`` (django-redis on the same server).

    python benchmarks/semaphore.py [--quick]

Writes benchmarks/results/semaphore.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the clone, for its imports
from benchmarks.harness import (
    FULL,
    QUICK,
    RESULTS,
    environment,
    interleaved,
    log,
    paired_ratio,
    summary,
)
from devkit.paths import ROOT
from devkit.redis_server import RedisServer

OUTPUT = RESULTS / "semaphore.json"
LIMIT, TTL = 3, 10
DISTLOCK_SEMAPHORE = "distlock semaphore"
DISTLOCK_RENEWED = "distlock semaphore (auto_renew)"
DISTLOCK_LOCK = "distlock lock (reference)"
PY_REDIS_SEMAPHORE = "py-redis-semaphore"
SEMAPHORE_EVAL = "redis-semaphore-eval"
CACHE_GET = "cache.get (hit)"
GET_OR_SET = "get_or_set (hit)"


def configure(url: str) -> None:
    from django.conf import settings

    settings.configure(
        DISTLOCK={
            "default": {
                "BACKEND": "distlock.backends.redis.RedisBackend",
                "LOCATION": url,
                "KEY_PREFIX": "bench",
            }
        },
        CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}},
        USE_TZ=True,
    )


def distlock_cases() -> dict[str, Callable[[], object]]:
    import distlock

    def pair(make: Callable[[], Any]) -> Callable[[], None]:
        def acquire_release() -> None:
            held = make()
            held.acquire()
            held.release()

        return acquire_release

    return {
        DISTLOCK_SEMAPHORE: pair(lambda: distlock.semaphore("sem", LIMIT, ttl=TTL, wait=0)),
        DISTLOCK_RENEWED: pair(
            lambda: distlock.semaphore("sem-renewed", LIMIT, ttl=TTL, wait=0, auto_renew=True)
        ),
        DISTLOCK_LOCK: pair(lambda: distlock.lock("lock", ttl=TTL, wait=0)),
    }


def anchor_cases(url: str, missing: dict[str, str]) -> dict[str, Callable[[], object]]:
    """The anchors that are installed; ``missing`` gets why the others are not measured."""
    import redis

    cases: dict[str, Callable[[], object]] = {}
    try:
        from redis_semaphore import Semaphore, SemaphoreConfig
    except ImportError:
        missing[PY_REDIS_SEMAPHORE] = "not installed (pip install py-redis-semaphore)"
    else:
        client = redis.Redis.from_url(url)
        config = SemaphoreConfig(name="anchor", limit=LIMIT, lock_timeout=TTL)

        def py_redis_semaphore() -> None:
            held = Semaphore(client, config)
            held.acquire()
            held.release()

        cases[PY_REDIS_SEMAPHORE] = py_redis_semaphore
    try:
        from redis_semaphore_eval import semaphore
    except ImportError:
        missing[SEMAPHORE_EVAL] = "not installed (pip install --no-deps redis-semaphore-eval)"
    else:
        eval_client = redis.Redis.from_url(url)

        def semaphore_eval() -> None:
            with semaphore(eval_client, "eval-anchor", limit=LIMIT, expire_in=TTL, blocking=False):
                pass

        cases[SEMAPHORE_EVAL] = semaphore_eval
    return cases


def cache_cases() -> dict[str, Callable[[], object]]:
    from django.core.cache import cache

    from distlock.cache import get_or_set

    cache.set("plain", "value", 3600)
    get_or_set("cached", lambda: "value", 3600)
    return {
        CACHE_GET: lambda: cache.get("plain"),
        GET_OR_SET: lambda: get_or_set("cached", lambda: "value", 3600),
    }


def measure(url: str, quick: bool) -> dict[str, Any]:
    profile = QUICK if quick else FULL
    missing: dict[str, str] = {}
    cases = {**distlock_cases(), **anchor_cases(url, missing), **cache_cases()}
    log(f"semaphore: {len(cases)} cases x {profile.repeats} rounds")
    rates = interleaved(cases, profile.repeats, profile.seconds_per_case)
    anchors = [name for name in (PY_REDIS_SEMAPHORE, SEMAPHORE_EVAL) if name in rates]
    results: dict[str, Any] = {
        "title": "Semaphores and get_or_set",
        "benchmark": "uncontended acquire+release of a limit-3 semaphore, and a cache hit; "
        "per_s and us are medians over interleaved rounds",
        "cases": {name: summary(samples) for name, samples in rates.items()},
        "ratios": {
            f"{DISTLOCK_SEMAPHORE} speed vs {anchor}": round(
                paired_ratio(rates[DISTLOCK_SEMAPHORE], rates[anchor]), 3
            )
            for anchor in anchors
        },
        "not_measured": missing,
    }
    results["ratios"][f"{DISTLOCK_SEMAPHORE} speed vs {DISTLOCK_LOCK}"] = round(
        paired_ratio(rates[DISTLOCK_SEMAPHORE], rates[DISTLOCK_LOCK]), 3
    )
    hit, plain = results["cases"][GET_OR_SET]["us"], results["cases"][CACHE_GET]["us"]
    results["get_or_set_overhead"] = {
        "us_over_cache_get": round(hit - plain, 2),
        "time_ratio_vs_cache_get": round(paired_ratio(rates[CACHE_GET], rates[GET_OR_SET]), 3),
    }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    options = parser.parse_args(argv)
    with RedisServer() as server:
        configure(server.url)
        results = measure(server.url, options.quick)
        results["machine"] = environment(server.client().info("server")["redis_version"])
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(json.dumps(results, indent=2) + "\n")
    for name, row in results["cases"].items():
        log(f"{name:36} {row['us']:>9} us  ({row['per_s']}/s)")
    for name, value in {**results["ratios"], **results["get_or_set_overhead"]}.items():
        log(f"{name}: {value}")
    log(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
