"""What the fence costs (``fence=True``, docs/fencing-and-limits.md): the time of one
acquisition of ``distlock.lock`` with one database transaction under it (read an order, write
a charge), fenced and unfenced, in the same run, alternating, on SQLite (in memory), a real
PostgreSQL and a real MariaDB server of its own (devkit/databases.py) and a real
redis-server. The fenced one adds one statement to the transaction: the claim, an upsert on
the lock's row of ``distlock_fence``.

    python benchmarks/bench_fence.py [--quick]

Writes benchmarks/results/fence.json and prints the table. Each database is measured in a
process of its own (``--child``: the shop's settings, devkit/shop), commits at the
server's own speed (SHOP_COMMIT_DELAY=0).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the clone, for its imports
from devkit.paths import ROOT

RESULTS = ROOT / "benchmarks" / "results" / "fence.json"
NAMES = 20  # lock names used in turn (each one's fence row exists after the warm-up)


def child(iterations: int, rounds: int) -> None:
    """Measure in this process (DJANGO_SETTINGS_MODULE devkit.shop.settings)."""
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    import distlock
    from devkit.shop.models import Charge, Order

    if connection.vendor == "sqlite":
        call_command("migrate", verbosity=0)
    order = Order.objects.create()

    def once(index: int, fence: bool) -> None:
        with (
            distlock.lock(f"bench-fence:{index % NAMES}", ttl=10, fence=fence),
            transaction.atomic(),
        ):
            Order.objects.get(pk=order.pk)
            Charge.objects.create(order=order, worker_pid=0)

    for index in range(NAMES * 2):  # warm up: connections, and every fence row made
        once(index, True)
        once(index, False)
    # Each call timed on its own, fenced and unfenced in turn, so that both see the machine
    # as it is at that moment (a shared machine's load comes and goes): medians of each.
    per_call: dict[str, list[float]] = {"unfenced": [], "fenced": []}
    for index in range(iterations * rounds):
        for label, fence in (("unfenced", False), ("fenced", True)):
            started = time.perf_counter()
            once(index, fence)
            per_call[label].append((time.perf_counter() - started) * 1e6)
    unfenced = statistics.median(per_call["unfenced"])
    fenced = statistics.median(per_call["fenced"])
    print(
        json.dumps(
            {
                "vendor": connection.vendor,
                "unfenced_us": round(unfenced, 1),
                "fenced_us": round(fenced, 1),
                "added_us": round(fenced - unfenced, 1),
                "ratio": round(fenced / unfenced, 3),
                "calls": len(per_call["fenced"]),
            }
        )
    )


def run_child(env: dict[str, str], iterations: int, rounds: int) -> dict[str, Any]:
    from devkit.processes import child_env, run_process
    from devkit.shop.load import SETTINGS

    done = run_process(
        [sys.executable, str(Path(__file__)), "--child", str(iterations), str(rounds)],
        {**child_env(settings=SETTINGS), **env, "SHOP_COMMIT_DELAY": "0"},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(iterations: int, rounds: int) -> list[dict[str, Any]]:
    from devkit.databases import MariaDBServer, PostgresServer
    from devkit.processes import distlock_variables
    from devkit.redis_server import RedisServer
    from devkit.shop.load import serve_shop, shop_env

    rows = []
    with RedisServer() as redis:
        rows.append(run_child(distlock_variables(url=redis.url), iterations, rounds))
        for server_class in (PostgresServer, MariaDBServer):
            with server_class() as database, serve_shop(database, redis.url, workers=0) as shop:
                env = shop_env(database, shop.database, redis.url)
                rows.append(run_child(env, iterations, rounds))
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| database | unfenced, µs per acquisition | fenced | added by the fence | ratio |",
        "|---|---|---|---|---|",
    ]
    names = {"sqlite": "SQLite (in memory)", "postgresql": "PostgreSQL", "mysql": "MariaDB"}
    for row in rows:
        lines.append(
            f"| {names[row['vendor']]} | {row['unfenced_us']:.0f} | {row['fenced_us']:.0f} | "
            f"{row['added_us']:+.0f} µs | {row['ratio']:.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        child(*arguments.child)
        return
    iterations, rounds = (50, 3) if arguments.quick else (300, 7)
    rows = measure(iterations, rounds)
    RESULTS.write_text(
        json.dumps(
            {
                "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                "iterations": iterations,
                "rounds": rounds,
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
