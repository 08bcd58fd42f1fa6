"""benchmarks/server_time.py's COMMANDS_ONLY scripts run the commands distlock's own acquire
and release scripts run, so that the benchmark's "commands only" figure stays the cost of
distlock's features before its Lua logic. Against a real redis-server; nothing is timed."""

from __future__ import annotations

from collections import Counter

import redis

import distlock
from benchmarks import anchors, server_time

# The index's 1-in-10 pruning: left out of COMMANDS_ONLY (see there).
PRUNING = "zrangebyscore"


def scripted(client: redis.Redis, pair: object) -> Counter[str]:
    seen = server_time.sent_commands(client, pair)  # type: ignore[arg-type]
    return Counter({name: count for name, count in seen["scripted"].items() if name != PRUNING})


def test_commands_only_runs_the_commands_of_distlocks_uncontended_pair(redis_backend: str) -> None:
    client = redis.Redis.from_url(redis_backend)
    distlock_pair = anchors.pair(
        lambda name: distlock.lock(name, ttl=anchors.TTL), lambda: "server-time:checked"
    )
    distlock_pair()  # the scripts loaded

    theirs = scripted(client, server_time.commands_only_pair(client))
    ours = scripted(client, distlock_pair)

    assert ours == theirs
    # Both pairs really ran: the clock, the fencing memory, the lock, the index, the queue.
    assert {"time", "set", "zadd", "get", "del", "zrem", "exists"} <= set(ours)


def test_commands_only_leaves_no_lock_behind(redis_backend: str) -> None:
    client = redis.Redis.from_url(redis_backend)
    server_time.commands_only_pair(client)()

    assert not [key for key in client.scan_iter() if b":lock:" in key]
