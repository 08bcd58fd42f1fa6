"""Server time per uncontended acquire+release: INFO commandstats, library by library.

For each library, MONITOR first shows which commands its acquire+release sends (the ones
the server runs for a client, not those a Lua script runs: a script's time already counts
them). Then, after CONFIG RESETSTAT, it does ``server_time_pairs`` pairs; the ``usec`` of
those commands in INFO commandstats, divided by the pairs, is its server time per pair.
That is the time the server spends executing them, without reading and parsing requests
or writing replies (which cost about the same for every library).
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


def run(profile: Profile, url: str) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    libraries = {}
    for library in anchors.LATENCY_LIBRARIES:
        name = f"{NAME}:{library.split()[0]}"
        pair = anchors.pair(anchors.lock_factory(library, url), lambda name=name: name)
        libraries[library] = measure(client, pair, profile.server_time_pairs)
    theirs = libraries[anchors.REDIS_PY]["us_per_pair"]
    return {
        "libraries": libraries,
        "distlock_vs_redis_py": round(libraries[anchors.DISTLOCK]["us_per_pair"] / theirs, 2)
        if theirs else float("nan"),
    }
