"""How long ``acquire(wait=W)`` takes against a held lock, at the server's default ``hz`` (10):
the contract promises W + 10 ms at p99, whatever ``hz``. Prints, per W and kind, the
distribution of the time past W (ms, the monotonic clock around each call).

    python -m benchmarks.wait_bound [CALLS]   (default 200 per W, sync, then async)

It starts a redis-server of its own (devkit.redis_server) and points DISTLOCK at it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

WAITS = (0.01, 0.05, 0.1, 0.25)


def contenders(kind: str) -> tuple[Any, Callable[[], Any]]:
    import distlock

    if kind == "semaphore":
        return distlock.semaphore("bound", 1, ttl=600), lambda: distlock.semaphore(
            "bound", 1, ttl=600
        )
    holder = distlock.lock("bound", ttl=600)
    return holder, lambda: distlock.lock("bound", ttl=600, shared=kind == "shared")


def timed(contender: Callable[[], Any], wait: float, calls: int) -> list[float]:
    late = []
    for _ in range(calls):
        lk = contender()
        began = time.monotonic()
        assert not lk.acquire(wait=wait)
        late.append((time.monotonic() - began - wait) * 1000)
    return late


async def atimed(contender: Callable[[], Any], wait: float, calls: int) -> list[float]:
    await contender().aacquire(wait=0)  # this loop's client, made once
    late = []
    for _ in range(calls):
        lk = contender()
        began = time.monotonic()
        assert not await lk.aacquire(wait=wait)
        late.append((time.monotonic() - began - wait) * 1000)
    return late


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(kind: str, mode: str, wait: float, late: list[float]) -> None:
    figures = [quantile(late, q) for q in (0.5, 0.9, 0.99)] + [max(late)]
    print(f"{kind:<10} {mode:<6} {wait:>5} " + " ".join(f"{value:>6.1f}" for value in figures))


def main(calls: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "devkit.settings")
    import django
    from django.conf import settings

    django.setup()
    from devkit.configs import distlock_settings
    from devkit.redis_server import RedisServer
    from distlock.handler import locks

    server = RedisServer().start()
    try:
        settings.DISTLOCK, settings.CACHES = distlock_settings("redis", server.url)
        locks.reset()
        server.client().config_set("hz", 10)
        print(
            f"{'kind':<10} {'mode':<6} {'W s':>5} {'p50':>6} {'p90':>6} {'p99':>6} {'max':>6}",
            " (ms past W)",
        )
        # What the machine alone gives: time.sleep(W)'s own lateness (a loaded machine's
        # scheduler), the floor under every figure below.
        for wait in WAITS:
            late = []
            for _ in range(calls):
                began = time.monotonic()
                time.sleep(wait)
                late.append((time.monotonic() - began - wait) * 1000)
            report("sleep", "sync", wait, late)
        for kind in ("exclusive", "shared", "semaphore"):
            holder, contender = contenders(kind)
            # Held by another thread: a reader of this one's would be a downgrade.
            held = threading.Thread(target=holder.acquire)
            held.start()
            held.join()
            for mode in ("sync", "async"):
                for wait in WAITS:
                    if mode == "sync":
                        late = timed(contender, wait, calls)
                    else:
                        late = asyncio.run(atimed(contender, wait, calls))
                    report(kind, mode, wait, late)
            holder.release()
    finally:
        server.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
