"""What every section shares: the run's profile, interleaved timing, statistics, settings."""

from __future__ import annotations

import contextlib
import gc
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from devkit.paths import ROOT
from devkit.processes import run_process

RESULTS = ROOT / "benchmarks" / "results"
KEY_PREFIX = "bench"


@dataclass(frozen=True)
class Profile:
    """How long and how often each section measures."""

    name: str
    repeats: int  # interleaved rounds of the uncontended cases
    seconds_per_case: float  # time each case runs in one round
    contention_repeats: int
    contention_seconds: float
    contention_ks: tuple[int, ...]
    memory_locks: int
    scale_levels: tuple[int, ...]
    scale_pairs: int  # acquire+release pairs timed per round at each level
    scale_repeats: int
    latency_delays_ms: tuple[float, ...]  # one-way delays the proxies add
    latency_large_ms: float  # the bias check fits the delays from this one up only
    latency_rounds: int  # interleaved rounds over every delay and case
    latency_batch: int  # timed calls per case, delay and round
    latency_handoffs: int  # timed handoffs per library, delay and round
    server_time_pairs: int  # acquire+release pairs per library under INFO commandstats
    listing_repeats: int  # timed listings of 50,000 held locks (benchmarks/listing.py)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


QUICK = Profile(
    name="quick",
    repeats=5,
    seconds_per_case=0.1,
    contention_repeats=2,
    contention_seconds=0.8,
    contention_ks=(2, 4, 8),
    memory_locks=20_000,
    scale_levels=(1, 1_000, 10_000, 100_000),
    scale_pairs=200,
    scale_repeats=5,
    latency_delays_ms=(0, 1, 2),
    latency_large_ms=1,
    latency_rounds=3,
    latency_batch=4,
    latency_handoffs=2,
    server_time_pairs=300,
    listing_repeats=3,
)
FULL = Profile(
    name="full",
    repeats=7,
    seconds_per_case=0.35,
    contention_repeats=5,
    contention_seconds=3.0,
    contention_ks=(2, 4, 8),
    memory_locks=100_000,
    scale_levels=(1, 1_000, 10_000, 100_000, 1_000_000),
    scale_pairs=1000,
    scale_repeats=5,
    latency_delays_ms=(0, 0.5, 1, 2, 4, 8),
    latency_large_ms=2,
    latency_rounds=5,
    latency_batch=5,
    latency_handoffs=3,
    server_time_pairs=2000,
    listing_repeats=5,
)


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- timing -------------------------------------------------------------------------------
def rate(call: Callable[[], object], seconds: float) -> float:
    """Call ``call`` back to back for ``seconds``; return calls per second."""
    gc.collect()
    count = 0
    clock = time.perf_counter
    started = clock()
    deadline = started + seconds
    while True:
        call()
        count += 1
        now = clock()
        if now >= deadline:
            return count / (now - started)


def interleaved(
    cases: dict[str, Callable[[], object]], repeats: int, seconds: float, seed: int = 7
) -> dict[str, list[float]]:
    """Rate every case once per round, in a shuffled order each round; return the rates.

    Interleaving spreads the machine's background noise over all cases alike, and the
    per-round rates let ratios be taken between cases measured seconds apart.
    """
    shuffle = random.Random(seed).shuffle
    for call in cases.values():  # warm up: connections, scripts loaded, caches filled
        rate(call, min(seconds, 0.05))
    samples: dict[str, list[float]] = {name: [] for name in cases}
    order = list(cases)
    for _ in range(repeats):
        shuffle(order)
        for name in order:
            samples[name].append(rate(cases[name], seconds))
    return samples


# --- statistics ---------------------------------------------------------------------------
def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` in 0..1) of ``values``."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = math.ceil(fraction * len(ordered))  # 1-based: the smallest value >= that share
    return ordered[min(len(ordered), max(rank, 1)) - 1]


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
    """Median over rounds of numerator/denominator, each pair measured in the same round."""
    return median([a / b for a, b in zip(numerator, denominator, strict=True) if b])


def summary(rates: list[float]) -> dict[str, Any]:
    """Median rate, its time per operation, and the spread over rounds."""
    middle = median(rates)
    return {
        "per_s": round(middle, 1),
        "us": round(1e6 / middle, 2) if middle else None,
        "min_per_s": round(min(rates), 1),
        "max_per_s": round(max(rates), 1),
        "rounds": len(rates),
    }


# --- distlock's settings ------------------------------------------------------------------
def configure_distlock(url: str) -> None:
    """Point distlock's default alias at ``url`` (a process of its own: settings once)."""
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            DISTLOCK={
                "default": {
                    "BACKEND": "distlock.backends.redis.RedisBackend",
                    "LOCATION": url,
                    "KEY_PREFIX": KEY_PREFIX,
                }
            },
            USE_TZ=True,
        )
        return
    from distlock.handler import locks

    settings.DISTLOCK["default"]["LOCATION"] = url
    locks.reset()


@contextlib.contextmanager
def distlock_aliases(aliases: dict[str, dict[str, Any]]) -> Iterator[None]:
    """Add (or replace) these DISTLOCK aliases for a while; every alias is back as it was
    afterwards. configure_distlock must have run."""
    from django.conf import settings

    from distlock.handler import locks

    saved = {name: dict(params) for name, params in settings.DISTLOCK.items()}
    settings.DISTLOCK.update(aliases)
    locks.reset()
    try:
        yield
    finally:
        settings.DISTLOCK.clear()
        settings.DISTLOCK.update(saved)
        locks.reset()


# --- the machine --------------------------------------------------------------------------
def environment(redis_version: str) -> dict[str, Any]:
    """What the figures depend on: machine, load, versions."""
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "machine": _cpu_model(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "redis_server": redis_version,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "git_commit": _git_commit(),
        "packages": {
            name: _version(name)
            for name in (
                "django-distlock",
                "redis",
                "hiredis",
                "python-redis-lock",
                "pottery",
                "Django",
            )
        },
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str:
    try:
        return run_process(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            text=True,
            capture_output=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
