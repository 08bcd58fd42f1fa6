"""Server time per uncontended acquire+release: INFO commandstats, library by library.

For each library, MONITOR first shows which commands its acquire+release sends (the ones
the server runs for a client, not those a Lua script runs: a script's time already counts
them). Then, after CONFIG RESETSTAT, it does ``server_time_pairs`` pairs; the ``usec`` of
those commands in INFO commandstats, divided by the pairs, is its server time per pair.
That is the time the server spends executing them, without reading and parsing requests
or writing replies (which cost about the same for every library).

One more case shows how much of distlock's figure its features cost before any of its Lua
runs: two scripts that run the same commands as distlock's uncontended acquire and release
(COMMANDS_ONLY), with distlock's keys and arguments but constant values and no logic.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis

from . import anchors
from .harness import Profile

NAME = "server-time"
SAMPLE_PAIRS = 3  # pairs watched with MONITOR to learn which commands a library sends

# The commands distlock's acquire and release scripts run for an uncontended pair, in order
# (the clock, one look at the lock, the queue and readers (nothing there: the lock is free and
# nobody waits, so no lapsed lease, lapsed.lua), the fencing token, the lock, the index; the
# token check, the delete, the index, the look at the queue and readers (a handoff, a
# downgrade)), with constant values instead of the scripts' string work (the lock's value is
# the holder's metadata alone, its largest part). The index's 1-in-10 pruning is left out.
# tests/tooling/test_benchmark_server_time.py checks that these are the commands MONITOR sees
# the real scripts run.
COMMANDS_ONLY = {
    "acquire": """
redis.call('TIME')
redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[3] .. '|readers')
redis.call('SET', KEYS[2], '1795000000000000', 'GET')
redis.call('PSETEX', KEYS[1], ARGV[2], ARGV[3])
redis.call('ZADD', KEYS[5], '1795000010000', ARGV[4])
return '1795000000000000 1795000000000'
""",
    "release": """
redis.call('GET', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[4], ARGV[2])
redis.call('EXISTS', KEYS[2], KEYS[2] .. '|readers')
return 1
""",
}


def sent_commands(client: redis.Redis, pair: Callable[[], None]) -> dict[str, Counter[str]]:
    """How often a few pairs made the server run each command, by who asked: ``sent`` by a
    client, ``scripted`` by a Lua script."""
    marker = f"server-time-marker-{uuid.uuid4().hex}"
    found: dict[str, Counter[str]] = {"sent": Counter(), "scripted": Counter()}
    with client.monitor() as monitor:
        for _ in range(SAMPLE_PAIRS):
            pair()
        client.echo(marker)  # on another connection: the end of what the pairs sent
        while True:
            seen = monitor.next_command()
            words = seen["command"].split()
            if marker in words:
                return found
            if words:
                found["scripted" if seen["client_type"] == "lua" else "sent"][words[0].lower()] += 1


def measure(client: redis.Redis, pair: Callable[[], None], pairs: int) -> dict[str, Any]:
    pair()  # scripts loaded, connections open
    commands = sent_commands(client, pair)
    client.config_resetstat()
    for _ in range(pairs):
        pair()
    stats = client.info("commandstats")
    usec, calls = 0.0, {}
    for name, count in sorted(commands["sent"].items()):
        stat = stats.get(f"cmdstat_{name}")
        if not stat:  # sent while MONITOR watched only (a new connection's HELLO)
            continue
        # A name that scripts run too (python-redis-lock's GET): only the share the client
        # sent, as MONITOR counted them, at the command's mean time per call.
        share = count / (count + commands["scripted"][name])
        usec += stat["usec"] * share
        calls[name] = round(stat["calls"] * share / pairs, 2)
    return {
        "us_per_pair": round(usec / pairs, 2),
        "calls_per_pair": calls,
        "scripted_commands": sorted(commands["scripted"]),
        "pairs": pairs,
    }


def commands_only_pair(client: redis.Redis) -> Callable[[], None]:
    """Return a pair of COMMANDS_ONLY calls, with the keys and arguments distlock's own
    acquire and release of one free lock would send."""
    from .uncontended import script_calls

    found = script_calls(f"{NAME}:commands-only")
    shas = {script: client.script_load(source) for script, source in COMMANDS_ONLY.items()}

    def pair() -> None:
        for script, call in found.items():
            client.evalsha(shas[script], len(call.keys), *call.keys, *call.args)

    return pair


def run(profile: Profile, url: str) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    libraries = {}
    for library in anchors.LATENCY_LIBRARIES:
        name = f"{NAME}:{library.split()[0]}"
        pair = anchors.pair(anchors.lock_factory(library, url), lambda name=name: name)
        libraries[library] = measure(client, pair, profile.server_time_pairs)
    commands_only = measure(client, commands_only_pair(client), profile.server_time_pairs)
    theirs = libraries[anchors.REDIS_PY]["us_per_pair"]
    return {
        "libraries": libraries,
        "distlock_vs_redis_py": _ratio(libraries[anchors.DISTLOCK]["us_per_pair"], theirs),
        # What distlock's features cost before any of its Lua logic (see COMMANDS_ONLY).
        "commands_only": {
            "us_per_pair": commands_only["us_per_pair"],
            "vs_redis_py": _ratio(commands_only["us_per_pair"], theirs),
            "scripted_commands": commands_only["scripted_commands"],
        },
    }


def _ratio(ours: float, theirs: float) -> float:
    return round(ours / theirs, 2) if theirs else float("nan")
