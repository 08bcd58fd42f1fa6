"""Listing 50,000 held locks: one walk of the index (``iter_held()``, what ``held()`` and
``manage.py distlock list`` read) and the whole ``manage.py distlock list --json``.

The locks are taken with the backend's own acquire script (benchmarks/held.py). Each
listing is timed whole, ``listing_repeats`` times in turn; the medians are reported and
checked against benchmarks/targets.py. That the listing is complete and consistent while
other locks come and go is tests/faults/test_listing_scale.py's business, not timed there.
"""

from __future__ import annotations

import json
import time
from io import StringIO
from typing import Any

import redis
from django.core.management import call_command

from distlock.handler import locks
from distlock.management.commands.distlock import Command

from . import held
from .harness import Profile, log, median

HELD = 50_000
HOLD_MS = 3_600_000  # the held locks outlive the run


def walk() -> tuple[float, int]:
    """Time one walk of the index; return the seconds and how many locks it listed."""
    started = time.perf_counter()
    names = [info.name for info in locks["default"].iter_held()]
    return time.perf_counter() - started, len(names)


def command() -> tuple[float, int]:
    """Time ``manage.py distlock list --json``; return the seconds and how many it listed."""
    out = StringIO()
    started = time.perf_counter()
    # The command object itself: the benchmark's settings install no apps to find it by name.
    call_command(Command(), "list", "--json", stdout=out)
    took = time.perf_counter() - started
    return took, len(json.loads(out.getvalue()))


def run(profile: Profile, url: str) -> dict[str, Any]:
    redis.Redis.from_url(url).flushall()
    held.acquire_all([f"held:{number}" for number in range(HELD)], HOLD_MS)
    seconds: dict[str, list[float]] = {"iter_held": [], "command": []}
    for _ in range(profile.listing_repeats):
        for name, call in (("iter_held", walk), ("command", command)):
            took, listed = call()
            if listed != HELD:
                raise RuntimeError(f"{name} listed {listed} locks, not {HELD}")
            seconds[name].append(took)
    result = {
        "locks": HELD,
        "repeats": profile.listing_repeats,
        **{f"{name}_s": round(median(values), 3) for name, values in seconds.items()},
        **{f"{name}_max_s": round(max(values), 3) for name, values in seconds.items()},
    }
    log(
        f"listing: {HELD:,} locks, iter_held {result['iter_held_s']} s, "
        f"distlock list --json {result['command_s']} s"
    )
    return result
