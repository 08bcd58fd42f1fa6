"""Acquire+release latency while more and more other locks are held (1 up to 1,000,000).

The held locks are taken with the backend's own acquire script (benchmarks/held.py), so
the index of held locks grows with them. At each level, acquire+release pairs on 64 probe
names (spread over every bucket) are timed one by one; redis-py's Lock is timed in the same
rounds as a reference for the machine's noise (its cost cannot depend on distlock's keys).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis

from . import anchors, held
from .harness import Profile, log, median, paired_ratio

PROBES = [f"probe:{number}" for number in range(64)]
HOLD_MS = 3_600_000  # the held locks outlive the run


def latencies_us(make: Callable[[str], Any], pairs: int) -> list[float]:
    clock = time.perf_counter
    measured = []
    for number in range(pairs):
        lock = make(PROBES[number % len(PROBES)])
        started = clock()
        lock.acquire()
        lock.release()
        measured.append((clock() - started) * 1e6)
    return measured


def run(profile: Profile, url: str) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    client.flushall()
    makers = {
        library: anchors.lock_factory(library, url)
        for library in (anchors.DISTLOCK, anchors.REDIS_PY)
    }
    for make in makers.values():
        latencies_us(make, 50)  # warm up
    levels: dict[str, Any] = {}
    held_count = 0
    for level in profile.scale_levels:
        started = time.perf_counter()
        held.acquire_all([f"held:{number}" for number in range(held_count, level)], HOLD_MS)
        filled_s = time.perf_counter() - started
        held_count = level
        rounds: dict[str, list[float]] = {library: [] for library in makers}
        for repeat in range(profile.scale_repeats):
            for library in makers if repeat % 2 == 0 else reversed(list(makers)):
                rounds[library].append(median(latencies_us(makers[library], profile.scale_pairs)))
        levels[str(level)] = {
            **{
                f"{library} median_us": round(median(values), 2)
                for library, values in rounds.items()
            },
            # distlock over the reference, round by round: what the machine did meanwhile
            # cancels out
            "distlock / reference": round(
                paired_ratio(rounds[anchors.DISTLOCK], rounds[anchors.REDIS_PY]), 3
            ),
            "populate_s": round(filled_s, 2),
            "used_memory_mb": round(int(client.info("memory")["used_memory"]) / 2**20, 1),
        }
        log(
            f"scale: {level} held locks, distlock "
            f"{levels[str(level)][f'{anchors.DISTLOCK} median_us']} us per pair"
        )
    # No FLUSHALL: freeing a million locks takes longer than a socket timeout, and run.py
    # stops this server next anyway.
    first, last = levels[str(profile.scale_levels[0])], levels[str(profile.scale_levels[-1])]
    ours = last[f"{anchors.DISTLOCK} median_us"] / first[f"{anchors.DISTLOCK} median_us"]
    reference = last[f"{anchors.REDIS_PY} median_us"] / first[f"{anchors.REDIS_PY} median_us"]
    return {
        "levels": levels,
        "largest_level": profile.scale_levels[-1],
        "distlock_growth": round(ours, 3),  # latency at the largest level / at 1 held lock
        "reference_growth": round(reference, 3),
        "distlock_growth_vs_reference": round(
            last["distlock / reference"] / first["distlock / reference"], 3
        ),
    }
