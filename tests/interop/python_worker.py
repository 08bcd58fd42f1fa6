"""The Python side of the interop tests, the twin of node_worker.mjs:
``python -m tests.interop.python_worker counter NAME ITERATIONS LOG``, configured like
tests.support.workers (DISTLOCK_TEST_KIND, DISTLOCK_TEST_URL)."""

from __future__ import annotations

import os
import sys
from typing import Any

from tests.conformance.runner import first_live_waiter
from tests.support.workers import say, setup


def data_client() -> Any:
    import redis

    url = os.environ["DISTLOCK_TEST_URL"]
    if os.environ["DISTLOCK_TEST_KIND"] == "cluster":
        return redis.RedisCluster.from_url(url)
    return redis.Redis.from_url(url)


def counter(name: str, iterations: str, log_path: str) -> None:
    """Take the lock ``iterations`` times, doing inside what node_worker.mjs's counter does,
    and log "SEQ FENCE TOKEN HEAD python" lines (HEAD as node_worker.mjs finds it)."""
    import distlock
    from distlock.handler import locks

    data = data_client()
    keys = locks["default"].layout.keys_for(name)
    say("ready")
    sys.stdin.readline()  # everyone starts together
    with open(log_path, "a", buffering=1) as log:
        for _ in range(int(iterations)):
            with distlock.lock(name, ttl=10, wait=None) as lk:
                if data.incr("interop:inside") != 1:
                    data.incr("interop:overlaps")
                value = int(data.get("interop:counter") or 0)
                data.set("interop:counter", value + 1)
                seq = data.incr("interop:seq")
                head = first_live_waiter(data, keys.waiters, keys.live)
                data.decr("interop:inside")
                log.write(f"{seq} {lk.fencing_token} {lk.token} {head or '-'} python\n")
    say("done")


if __name__ == "__main__":
    setup()
    command, *arguments = sys.argv[1:]
    {"counter": counter}[command](*arguments)
