"""The physical floor and uncontended acquire+release, measured in the same interleaved rounds.

Floor cases: PING and SET NX PX + DEL (the least a lock can do: two round trips) through
redis-py's client, and the same commands written straight to one redis-py Connection
(pre-packed, no client layer) to show what the client layer itself costs. One more case
writes distlock's own acquire and release scripts, pre-packed, to such a bare connection:
the most any client could get out of them, which shows what the server-side work (metadata,
index, fencing token, queue) costs over the bare floor.

Lock cases: one acquire+release of a new lock object per call, on the same name every time
(a hot lock: a cron job's, a view's) and on a new name every time.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import redis

from . import anchors, commands, otel_overhead
from .harness import Profile, interleaved, paired_ratio, summary

PING = "PING"
PING_BARE = "PING (bare connection)"
FLOOR = "SET NX PX + DEL"
FLOOR_BARE = "SET NX PX + DEL (bare connection)"
SCRIPTS_BARE = "distlock's scripts, pre-packed (bare connection)"
SAME, DISTINCT = "same name", "distinct names"
# The holder token, lease and patience of the pre-packed scripts (script_calls).
SCRIPT_TOKEN, SCRIPT_TTL_MS, SCRIPT_PATIENCE_MS = "0" * 32, anchors.TTL * 1000, 2000


def floor_cases(url: str) -> dict[str, Callable[[], object]]:
    client = redis.Redis.from_url(url)
    connection = redis.Redis.from_url(url).connection_pool.get_connection()
    ping = connection.pack_command("PING")
    set_nx = connection.pack_command("SET", "floor:bare", "token", "NX", "PX", 10_000)
    delete = connection.pack_command("DEL", "floor:bare")

    def bare(*commands: Any) -> Callable[[], None]:
        def call() -> None:
            for command in commands:
                connection.send_packed_command(command, check_health=False)
                connection.read_response()

        return call

    def set_and_delete() -> None:
        client.set("floor:client", "token", nx=True, px=10_000)
        client.delete("floor:client")

    packed = [
        connection.pack_command(*command) for command in script_commands(client, "floor:scripts")
    ]
    return {
        PING: client.ping,
        PING_BARE: bare(ping),
        FLOOR: set_and_delete,
        FLOOR_BARE: bare(set_nx, delete),
        SCRIPTS_BARE: bare(*packed),
    }


def script_calls(name: str) -> dict[str, Any]:
    """The script calls (``Eval`` steps: script, keys, arguments) of distlock's acquire and
    release of the free lock ``name``, built by its Redis backend (DISTLOCK['default'])
    exactly as a Lock sends them (its last release releases every level)."""
    from distlock.backends.operations import Request
    from distlock.backends.redis_ops import holds as lock_ops
    from distlock.handler import locks
    from distlock.info import holder_metadata

    layout = locks["default"].layout
    return {
        "acquire": lock_ops.acquire_call(
            layout,
            Request(name, SCRIPT_TOKEN, SCRIPT_TTL_MS, holder_metadata(None), SCRIPT_PATIENCE_MS),
        ),
        "release": lock_ops.release_call(layout, name, SCRIPT_TOKEN, every_level=True),
    }


def script_commands(client: redis.Redis, name: str) -> list[tuple[Any, ...]]:
    """The EVALSHA commands of script_calls(name), their scripts loaded through ``client``."""
    commands = []
    for call in script_calls(name).values():
        client.script_load(call.script.source)
        commands.append(call.command())
    return commands


def lock_cases(url: str) -> dict[str, Callable[[], object]]:
    cases = {}
    for library in anchors.UNCONTENDED_LIBRARIES:
        make = anchors.lock_factory(library, url)
        counter = itertools.count()
        prefix = f"{library.split()[0]}:distinct:"
        cases[f"{library} | {SAME}"] = anchors.pair(make, lambda: "same-name")
        cases[f"{library} | {DISTINCT}"] = anchors.pair(
            make, lambda prefix=prefix, counter=counter: f"{prefix}{next(counter)}"
        )
    return cases


def run(profile: Profile, url: str) -> dict[str, Any]:
    cases = {**floor_cases(url), **lock_cases(url), **otel_overhead.cases(url)}
    rates = interleaved(cases, profile.repeats, profile.seconds_per_case)
    floor = {
        name: summary(rates[name]) for name in (PING, PING_BARE, FLOOR, FLOOR_BARE, SCRIPTS_BARE)
    }
    locks: dict[str, dict[str, Any]] = {SAME: {}, DISTINCT: {}}
    ratios: dict[str, dict[str, float]] = {SAME: {}, DISTINCT: {}}
    for mode in (SAME, DISTINCT):
        ours = rates[f"{anchors.DISTLOCK} | {mode}"]
        for library in anchors.UNCONTENDED_LIBRARIES:
            locks[mode][library] = summary(rates[f"{library} | {mode}"])
            if library != anchors.DISTLOCK:
                ratios[mode][f"vs {library}"] = round(
                    paired_ratio(ours, rates[f"{library} | {mode}"]), 3
                )
        ratios[mode][f"vs {FLOOR}"] = round(paired_ratio(ours, rates[FLOOR]), 3)
        ratios[mode][f"vs {FLOOR_BARE}"] = round(paired_ratio(ours, rates[FLOOR_BARE]), 3)
    # The bare floor is out of reach of anything that runs these scripts: their own ratio.
    scripts_vs_floor = round(paired_ratio(rates[SCRIPTS_BARE], rates[FLOOR_BARE]), 3)
    return {
        "floor": floor,
        "locks": locks,
        "distlock_ratios": ratios,
        "scripts_bare_vs_bare_floor": scripts_vs_floor,
        "otel": otel_overhead.result(rates),
        # Client calls, arguments per call and server commands per pair, from MONITOR.
        "commands": commands.run(url),
    }
