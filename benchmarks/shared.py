"""Shared locks (issue 25): readers per second with one writer and K readers, distlock's
shared lock against a semaphore-based emulation in the same run, and Redis memory per held
shared lock beside an exclusive one's.

Starts its own redis-server. Each case forks 1 writer and K reader processes (K = 2, 4, 8)
that run for the same time, cases interleaved over rounds so noise on a shared machine hits
both alike:

- distlock shared: a reader loops ``with distlock.lock(name, shared=True)``: GET a key; the
  writer loops ``with distlock.lock(name)``: SET the key, then sleeps WRITER_PAUSE_S;
- semaphore emulation (what a project with only locks and semaphores builds, as redis-py's
  pending RWLock design does with a lock and a counter): a reader takes the exclusive "gate"
  lock, a permit of a limit-K semaphore, gives the gate back, GETs, releases the permit; the
  writer holds the gate (so new readers wait) while it takes all K permits, SETs, and gives
  everything back. redis-py's RWLock (pull request #3786) is not released, so not measured.

Memory: INFO used_memory before and after holding N locks with one shared holder each, with
two, and N exclusive locks, in this run.

    python benchmarks/shared.py [--quick]

Writes benchmarks/results/shared.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the clone, for its imports
from benchmarks.harness import RESULTS, environment, log
from devkit.paths import ROOT
from devkit.redis_server import RedisServer

OUTPUT = RESULTS / "shared.json"
TTL = 10
WRITER_PAUSE_S = 0.01  # a writer that writes now and then, as a rebuild job does
KS = (2, 4, 8)
DISTLOCK_SHARED, EMULATION = "distlock shared lock", "semaphore emulation"
MEMORY_LOCKS = 2000


def configure(url: str) -> None:
    from django.conf import settings

    settings.configure(
        DISTLOCK={
            "default": {
                "BACKEND": "distlock.backends.redis.RedisBackend",
                "LOCATION": url,
                "KEY_PREFIX": "bench",
            }
        },
        USE_TZ=True,
    )


# --- the two designs: (read, write) on one name ----------------------------------------
def distlock_shared(name: str, k: int, data: Any) -> tuple[Callable[[], None], Callable[[], None]]:
    import distlock

    def read() -> None:
        with distlock.lock(name, shared=True, ttl=TTL):
            data.get(f"{name}:value")

    def write() -> None:
        with distlock.lock(name, ttl=TTL):
            data.set(f"{name}:value", "v")

    return read, write


def semaphore_emulation(
    name: str, k: int, data: Any
) -> tuple[Callable[[], None], Callable[[], None]]:
    import distlock

    def read() -> None:
        permit = distlock.semaphore(f"{name}:readers", k, ttl=TTL)
        with distlock.lock(f"{name}:gate", ttl=TTL):
            permit.acquire()
        try:
            data.get(f"{name}:value")
        finally:
            permit.release()

    def write() -> None:
        with distlock.lock(f"{name}:gate", ttl=TTL):
            permits = [distlock.semaphore(f"{name}:readers", k, ttl=TTL) for _ in range(k)]
            for permit in permits:
                permit.acquire()
            data.set(f"{name}:value", "v")
            for permit in permits:
                permit.release()

    return read, write


DESIGNS = {DISTLOCK_SHARED: distlock_shared, EMULATION: semaphore_emulation}


def _worker(
    design: str, name: str, k: int, url: str, role: str, start: Any, seconds: float, out: Any
) -> None:
    import redis

    data = redis.Redis.from_url(url)
    read, write = DESIGNS[design](name, k, data)
    call = read if role == "reader" else write
    call()  # connect, load the scripts
    start.wait()
    done = 0
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        call()
        done += 1
        if role == "writer":
            time.sleep(WRITER_PAUSE_S)
    out.put((role, done))


def run_case(design: str, k: int, url: str, seconds: float, round_number: int) -> dict[str, float]:
    """Return reads/s and writes/s with 1 writer and ``k`` readers of ``design``."""
    context = multiprocessing.get_context("fork")
    start, out = context.Event(), context.Queue()
    name = f"rw:{design.split()[0]}:{k}:{round_number}"
    roles = ["writer"] + ["reader"] * k
    processes = [
        context.Process(target=_worker, args=(design, name, k, url, role, start, seconds, out))
        for role in roles
    ]
    for process in processes:
        process.start()
    time.sleep(0.5)  # every process connected and warmed up
    start.set()
    totals = {"reader": 0, "writer": 0}
    for _ in processes:
        role, done = out.get(timeout=seconds + 60)
        totals[role] += done
    for process in processes:
        process.join(10)
    return {"reads_per_s": totals["reader"] / seconds, "writes_per_s": totals["writer"] / seconds}


def throughput(url: str, rounds: int, seconds: float) -> dict[str, Any]:
    samples: dict[str, dict[int, list[dict[str, float]]]] = {
        design: {k: [] for k in KS} for design in DESIGNS
    }
    for round_number in range(rounds):
        for k in KS:
            order = list(DESIGNS) if round_number % 2 == 0 else list(reversed(DESIGNS))
            for design in order:
                samples[design][k].append(run_case(design, k, url, seconds, round_number))
        log(f"shared: throughput round {round_number + 1}/{rounds}")
    table: dict[str, Any] = {}
    for k in KS:
        row = {}
        for design in DESIGNS:
            runs = samples[design][k]
            row[design] = {
                "reads_per_s": round(statistics.median(r["reads_per_s"] for r in runs), 1),
                "writes_per_s": round(statistics.median(r["writes_per_s"] for r in runs), 1),
            }
        row["reads ratio"] = round(
            row[DISTLOCK_SHARED]["reads_per_s"] / max(row[EMULATION]["reads_per_s"], 1e-9), 2
        )
        table[f"K={k}"] = row
    return table


# --- memory ---------------------------------------------------------------------------
def memory(url: str) -> dict[str, Any]:
    import redis

    import distlock

    client = redis.Redis.from_url(url)

    def per_lock(holders: int, shared: bool) -> float:
        client.flushall()
        distlock.lock("memory:warm", shared=shared).acquire()  # the fencing key, scripts
        before = int(client.info("memory")["used_memory"])
        held = []
        for number in range(MEMORY_LOCKS):
            for _ in range(holders):
                lk = distlock.lock(f"memory:{number}", shared=shared, ttl=600)
                assert lk.acquire(wait=0)
                held.append(lk)
        after = int(client.info("memory")["used_memory"])
        for lk in held:
            lk.release()
        return round((after - before) / MEMORY_LOCKS, 1)

    return {
        "locks": MEMORY_LOCKS,
        "bytes per exclusive lock": per_lock(1, shared=False),
        "bytes per shared lock, 1 holder": per_lock(1, shared=True),
        "bytes per shared lock, 2 holders": per_lock(2, shared=True),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    options = parser.parse_args(argv)
    rounds, seconds = (1, 1.5) if options.quick else (3, 4.0)
    with RedisServer() as server:
        configure(server.url)
        results: dict[str, Any] = {
            "title": "Shared locks: readers/s with 1 writer and K readers, memory",
            "benchmark": f"1 writer (pausing {WRITER_PAUSE_S * 1000:g} ms between writes) and "
            f"K readers, processes, {seconds:g} s per case, median of {rounds} interleaved "
            "rounds",
            "throughput": throughput(server.url, rounds, seconds),
            "memory": memory(server.url),
            "machine": environment(server.client().info("server")["redis_version"]),
        }
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(json.dumps(results, indent=2) + "\n")
    for k, row in results["throughput"].items():
        log(f"{k}: {json.dumps(row)}")
    log(f"memory: {json.dumps(results['memory'])}")
    log(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
