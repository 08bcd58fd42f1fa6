"""Where an uncontended acquire+release spends its time: ``python benchmarks/profile_hot_path.py``.

Two views of the same hot path, on a redis-server of its own:

* **Layers** (always): the pair is timed with one layer added at a time, interleaved in
  shuffled rounds: distlock's two scripts pre-packed on a bare socket (the server's work and
  the wire), then through redis-py's client (``execute``: one EVALSHA step), then the backend
  (``try_acquire``/``release``), then a whole ``distlock.lock()``. Wall time and the client
  process's CPU time per pair show what each layer adds.
* **py-spy** (``--py-spy``, needs py-spy on PATH or in the venv): samples a loop of pairs,
  idle time included, and prints the functions where most samples fall, so the socket
  waits appear beside the Python.

``make profile`` runs both. Numbers move with the machine's load; compare layers within one
run.
"""

from __future__ import annotations

import argparse
import collections
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the clone, for its imports

import redis

from benchmarks.harness import configure_distlock
from devkit.processes import run_process
from devkit.redis_server import RedisServer
from distlock.backends.operations import Request

NAME = "profile:hot"


def layers(url: str) -> dict[str, Callable[[], object]]:
    """The pair at each layer, from the bare wire up to the public API."""
    configure_distlock(url)
    import django

    django.setup()
    import distlock
    from benchmarks.uncontended import (
        SCRIPT_PATIENCE_MS,
        SCRIPT_TOKEN,
        SCRIPT_TTL_MS,
        script_calls,
        script_commands,
    )
    from distlock.handler import locks
    from distlock.info import holder_metadata

    backend = locks["default"]
    meta = holder_metadata(None)
    calls = script_calls(NAME)
    connection = redis.Redis.from_url(url).connection_pool.get_connection()
    packed = [
        connection.pack_command(*command)
        for command in script_commands(redis.Redis.from_url(url), NAME)
    ]

    def bare() -> None:
        for command in packed:
            connection.send_packed_command(command, check_health=False)
            connection.read_response()

    def through_client() -> None:
        for call in calls.values():
            backend.execute(call)

    def through_backend() -> None:
        backend.exclusive.try_acquire(
            Request(NAME, SCRIPT_TOKEN, SCRIPT_TTL_MS, meta, SCRIPT_PATIENCE_MS)
        )
        backend.exclusive.release(NAME, SCRIPT_TOKEN, every_level=True)  # as a Lock's last release

    def public_api() -> None:
        lock = distlock.lock(NAME, ttl=SCRIPT_TTL_MS / 1000)
        lock.acquire()
        lock.release()

    return {
        "scripts, pre-packed, bare socket": bare,
        "+ redis-py client": through_client,
        "+ backend": through_backend,
        "+ Lock (distlock.lock)": public_api,
    }


def time_layers(
    cases: dict[str, Callable[[], object]], rounds: int, seconds: float
) -> dict[str, tuple[float, float]]:
    """Return each case's median wall and client-CPU microseconds per pair."""
    wall: dict[str, list[float]] = collections.defaultdict(list)
    cpu: dict[str, list[float]] = collections.defaultdict(list)
    order = list(cases)
    shuffle = random.Random(3).shuffle
    for _ in range(rounds):
        shuffle(order)
        for name in order:
            call, count = cases[name], 0
            started, cpu_started = time.perf_counter(), time.process_time()
            while time.perf_counter() - started < seconds:
                call()
                count += 1
            wall[name].append((time.perf_counter() - started) / count * 1e6)
            cpu[name].append((time.process_time() - cpu_started) / count * 1e6)
    return {name: (statistics.median(wall[name]), statistics.median(cpu[name])) for name in cases}


def py_spy_top(url: str, pairs: int, shown: int) -> list[tuple[float, str]]:
    """Run a loop of pairs under py-spy (idle included); return the top self-time shares."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    with tempfile.TemporaryDirectory() as folder:
        raw = Path(folder) / "samples.txt"
        run_process(
            [
                py_spy,
                "record",
                "--idle",
                "--rate",
                "1000",
                "--format",
                "raw",
                "--output",
                str(raw),
                "--",
                sys.executable,
                __file__,
                "--loop",
                str(pairs),
                "--url",
                url,
            ],
            check=True,
            capture_output=True,
        )
        return _self_shares(raw.read_text(), shown)


def _self_shares(samples: str, shown: int) -> list[tuple[float, str]]:
    """Self-time share of each function, counting only samples inside the pair loop."""
    counts: collections.Counter[str] = collections.Counter()
    for line in samples.splitlines():
        stack, _, number = line.rpartition(" ")
        if "public_api" not in stack:
            continue  # start-up and imports
        counts[stack.split(";")[-1]] += int(number)
    total = sum(counts.values()) or 1
    return [(count / total, frame) for frame, count in counts.most_common(shown)]


def loop(url: str, pairs: int) -> None:
    public_api = layers(url)["+ Lock (distlock.lock)"]
    for _ in range(pairs):
        public_api()


def report(url: str, options: Any) -> None:
    results = time_layers(layers(url), options.rounds, options.seconds)
    print(f"{'layer':34} {'wall us/pair':>12} {'client CPU us/pair':>19}")
    previous = None
    for name, (wall, cpu) in results.items():
        added = ""
        if previous is not None:
            added = f"  (+{wall - previous[0]:.1f} / +{cpu - previous[1]:.1f})"
        print(f"{name:34} {wall:12.1f} {cpu:19.1f}{added}")
        previous = (wall, cpu)
    if options.py_spy:
        print("\npy-spy, share of samples in the pair loop (self time, idle included):")
        for share, frame in py_spy_top(url, options.pairs, options.shown):
            print(f"{share:6.1%}  {frame}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=0.2, help="per layer per round")
    parser.add_argument("--py-spy", action="store_true", help="also sample with py-spy")
    parser.add_argument("--pairs", type=int, default=50_000, help="pairs py-spy samples")
    parser.add_argument("--shown", type=int, default=15)
    parser.add_argument("--loop", type=int, help=argparse.SUPPRESS)  # the py-spy child
    parser.add_argument("--url", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.loop:
        loop(options.url, options.loop)
        return
    server = RedisServer().start()
    try:
        report(server.url, options)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
