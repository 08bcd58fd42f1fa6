"""Redlock acquire+release: distlock against redlock-py and pottery, on the same servers.

Starts its own redis-server processes (5, on free loopback ports) and times one uncontended
acquire plus one release through each library's public API, interleaved so that a burst of
noise on the shared machine hits every library alike:

- distlock: ``distlock.lock(name, ttl=10, wait=0)``, ``acquire()`` then ``release()``, on a
  RedlockBackend over the first 3 or all 5 servers (fencing token, holder metadata, the
  index of held locks and waiter hand-over included);
- redlock-py: ``Redlock(urls).lock(name, 10000)`` then ``unlock()``;
- pottery: ``Redlock(key=name, masters=..., auto_release_time=10)``, ``acquire(blocking=False)``
  then ``release()``.

Targets (medians, same run): over 5 nodes distlock <= 0.5 x redlock-py and <= 0.3 x pottery;
over 3 nodes distlock <= 0.6 x redlock-py.

    python benchmarks/bench_redlock.py [--quick] [--rounds N] [--batch N]

Writes benchmarks/results/redlock.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the clone, for its imports
from devkit.paths import ROOT
from devkit.redis_server import RedisServer

RESULTS = ROOT / "benchmarks" / "results" / "redlock.json"
TARGETS = {  # (nodes, other library): the largest allowed ratio of medians
    (5, "redlock-py"): 0.5,
    (5, "pottery"): 0.3,
    (3, "redlock-py"): 0.6,
}


def setup_django(urls: dict[int, list[str]]) -> None:
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["distlock"],
        DISTLOCK={
            f"redlock{count}": {
                "BACKEND": "distlock.backends.redlock.RedlockBackend",
                "LOCATION": node_urls,
            }
            for count, node_urls in urls.items()
        }
        | {"default": {"BACKEND": "distlock.backends.locmem.LocMemBackend"}},
        USE_TZ=True,
    )
    django.setup()


def contenders(urls: dict[int, list[str]]) -> dict[str, Callable[[], None]]:
    """One acquire+release of each library, by name "<library>/<nodes>"."""
    import redis
    from pottery import Redlock as PotteryRedlock
    from redlock import Redlock as RedlockPy

    import distlock

    def distlock_cycle(count: int) -> Callable[[], None]:
        alias = f"redlock{count}"

        def cycle() -> None:
            lk = distlock.lock(f"bench-distlock-{count}", ttl=10, wait=0, using=alias)
            if not lk.acquire():
                raise RuntimeError("distlock did not acquire an uncontended lock")
            lk.release()

        return cycle

    def redlock_py_cycle(count: int) -> Callable[[], None]:
        manager = RedlockPy(urls[count])

        def cycle() -> None:
            held = manager.lock(f"bench-redlock-py-{count}", 10_000)
            if not held:
                raise RuntimeError("redlock-py did not acquire an uncontended lock")
            manager.unlock(held)

        return cycle

    def pottery_cycle(count: int) -> Callable[[], None]:
        masters = {redis.Redis.from_url(url) for url in urls[count]}

        def cycle() -> None:
            lock = PotteryRedlock(
                key=f"bench-pottery-{count}", masters=masters, auto_release_time=10
            )
            if not lock.acquire(blocking=False):
                raise RuntimeError("pottery did not acquire an uncontended lock")
            lock.release()

        return cycle

    cycles = {}
    for count in urls:
        cycles[f"distlock/{count}"] = distlock_cycle(count)
        cycles[f"redlock-py/{count}"] = redlock_py_cycle(count)
        cycles[f"pottery/{count}"] = pottery_cycle(count)
    return cycles


def measure(
    cycles: dict[str, Callable[[], None]], rounds: int, batch: int, warmup: int
) -> dict[str, list[float]]:
    names = list(cycles)
    for name in names:
        for _ in range(warmup):
            cycles[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    clock = time.perf_counter
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:  # rotate who goes first
            cycle, timings = cycles[name], samples[name]
            gc.collect()
            for _ in range(batch // 5 if name.startswith("pottery") else batch):
                started = clock()
                cycle()
                timings.append(clock() - started)
    return samples


def summary(timings: list[float]) -> dict[str, float]:
    ordered = sorted(timings)
    return {
        "median_us": round(statistics.median(ordered) * 1e6, 1),
        "p10_us": round(ordered[len(ordered) // 10] * 1e6, 1),
        "p90_us": round(ordered[len(ordered) * 9 // 10] * 1e6, 1),
        "samples": len(ordered),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run, for a smoke test")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batch", type=int, default=250, help="cycles per library per round")
    args = parser.parse_args()
    rounds, batch = (3, 50) if args.quick else (args.rounds, args.batch)

    servers = [RedisServer() for _ in range(5)]
    try:
        for server in servers:
            server.start()
        urls = {3: [s.url for s in servers[:3]], 5: [s.url for s in servers]}
        setup_django(urls)
        load_before = os.getloadavg()
        started = time.monotonic()
        samples = measure(contenders(urls), rounds, batch, warmup=batch)
        elapsed = time.monotonic() - started
        load_after = os.getloadavg()
    finally:
        for server in servers:
            server.stop()

    results = {name: summary(timings) for name, timings in samples.items()}
    ratios = {}
    for (count, other), target in TARGETS.items():
        ratio = results[f"distlock/{count}"]["median_us"] / results[f"{other}/{count}"]["median_us"]
        ratios[f"distlock/{other} over {count} nodes"] = {
            "ratio": round(ratio, 3),
            "target": target,
            "met": ratio <= target,
        }
    report = {
        "benchmark": "Redlock uncontended acquire+release, medians of interleaved rounds",
        "rounds": rounds,
        "batch": batch,
        "seconds": round(elapsed, 1),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in load_after],
            "note": "a shared machine; other jobs ran at the same time",
        },
        "results": results,
        "ratios": ratios,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    width = max(map(len, results))
    for name, result in results.items():
        print(
            f"{name:<{width}}  median {result['median_us']:8.1f} us   "
            f"p10 {result['p10_us']:8.1f}   p90 {result['p90_us']:8.1f}   "
            f"n={result['samples']}"
        )
    for label, ratio in ratios.items():
        verdict = "met" if ratio["met"] else "NOT met"
        print(f"{label}: {ratio['ratio']:.3f} (target <= {ratio['target']}): {verdict}")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
