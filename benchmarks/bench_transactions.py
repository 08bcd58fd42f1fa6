"""The table of docs/transactions.md: how often a lock taken inside a database transaction lets
an order be charged twice, or a stock be oversold, with and without ``hold_until_commit``.

On a real PostgreSQL and a real MariaDB server of its own (devkit/databases.py), the shop of
devkit/shop is served by 6 gunicorn worker processes; each order gets 3 POSTs at once (a
double click plus a retry), and 200 buyers compete for 100 units. ``hold_until_commit=False``
is distlock's behaviour before locks followed the transaction (a release hands the lock on at
once, before COMMIT); ``True`` is today's default. Commits are made 5 ms slower than the
servers' (devkit/shop/slow_commit), as a commit that waits for a disk is.

    python benchmarks/bench_transactions.py [--quick] [--runs N]

Writes benchmarks/results/transactions.json and prints the table.

    python benchmarks/bench_transactions.py --cost [--quick] [--rounds N] [--generations N]
        [--tree PATH ...]

measures what distlock's hooks into Django cost an ``atomic()`` block with no lock in it,
against plain Django, in wall and CPU time (benchmarks/transactions_cost.py says how).
Writes benchmarks/results/transactions_cost.json (docs/transactions.md quotes it).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the clone, for its imports
from devkit.databases import DatabaseServer, MariaDBServer, PostgresServer
from devkit.paths import ROOT
from devkit.redis_server import RedisServer
from devkit.shop.load import Shop, serve_shop

RESULTS = ROOT / "benchmarks" / "results" / "transactions.json"
COST_RESULTS = ROOT / "benchmarks" / "results" / "transactions_cost.json"
# Each row of the table: its pattern as distlock ran it before hold_until_commit (the lock
# released at once, before COMMIT: under ATOMIC_REQUESTS, @lock_view ran inside the request's
# transaction), and as it runs now.
PATTERNS = {
    "@lock_view under ATOMIC_REQUESTS": ("pay-inside", "pay"),
    "atomic { lock { ... } }": ("pay-atomic", "pay-atomic"),
    "stock: atomic { lock { if units > 0: units -= 1 } }": ("buy", "buy"),
    "batch: atomic { per item: atomic { lock { ... } } }, a repeat rolled back": (
        "pay-batch",
        "pay-batch",
    ),
}
# For comparison, in the same runs: patterns that hold their lock until the transaction ends
# by construction (python-redis-lock's row when it is installed: the bench extra).
COMPARISONS = {
    "lock { atomic { ... } } (distlock)": "pay-outside",
    "SELECT ... FOR UPDATE in the transaction": "pay-for-update",
    "python-redis-lock: atomic { lock { ... } }": "pay-python-redis-lock",
}
WORKERS = 6
CLICKS = 3


def run_pattern(shop: Shop, pattern: str, orders: int, units: int) -> dict[str, int]:
    """Return the damage of one run: orders charged twice (or units oversold)."""
    if pattern == "buy":
        shop.stock(units)
        answers = shop.buy(2 * units)
        damage = shop.sales() - units
    else:
        answers = shop.click_orders(pattern, orders, CLICKS)
        damage = sum(1 for n in shop.charges_per_order().values() if n > 1)
    return {
        "damage": damage,
        "waited": sum(a.waited for a in answers),
        "requests": len(answers),
        "errors": sum(
            n for status, n in Counter(a.status for a in answers).items() if status != 200
        ),
    }


def measure(
    database: DatabaseServer, redis: RedisServer, runs: int, orders: int, units: int
) -> list[dict[str, Any]]:
    rows = []
    for hold in (False, True):
        for label, paths in PATTERNS.items():
            pattern = paths[hold]
            for run in range(runs):
                redis.flushall()
                with serve_shop(
                    database, redis.url, workers=WORKERS, hold_until_commit=hold
                ) as shop:
                    result = run_pattern(shop, pattern, orders, units)
                rows.append(
                    {
                        "database": database.vendor,
                        "hold_until_commit": hold,
                        "row": label,
                        "pattern": pattern,
                        "run": run,
                        **result,
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    for label, pattern in COMPARISONS.items():
        if pattern.endswith("python-redis-lock") and importlib.util.find_spec("redis_lock") is None:
            continue
        for run in range(runs):
            redis.flushall()
            with serve_shop(database, redis.url, workers=WORKERS) as shop:
                result = run_pattern(shop, pattern, orders, units)
            rows.append(
                {
                    "database": database.vendor,
                    "hold_until_commit": None,
                    "row": label,
                    "pattern": pattern,
                    "run": run,
                    **result,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def table(rows: list[dict[str, Any]], orders: int, units: int) -> str:
    lines = [
        "| pattern | PostgreSQL before | PostgreSQL now | MariaDB before | MariaDB now |",
        "|---|---|---|---|---|",
    ]
    for label, paths in PATTERNS.items():
        whole = f"of {units} oversold" if paths[1] == "buy" else f"of {orders}"
        cells = []
        for vendor in ("postgresql", "mysql"):
            for hold in (False, True):
                damage = [
                    r["damage"]
                    for r in rows
                    if (r["row"], r["hold_until_commit"], r["database"]) == (label, hold, vendor)
                ]
                low, high = min(damage), max(damage)
                cells.append(f"{low}{'' if low == high else f'-{high}'} {whole}")
        lines.append(f"| {label} | {' | '.join(cells)} |")
    lines += [
        "",
        "For comparison, in the same runs:",
        "",
        "| pattern | PostgreSQL | MariaDB |",
        "|---|---|---|",
    ]
    for label in COMPARISONS:
        cells = []
        for vendor in ("postgresql", "mysql"):
            damage = [r["damage"] for r in rows if (r["row"], r["database"]) == (label, vendor)]
            low, high = (min(damage), max(damage)) if damage else (None, None)
            cells.append(
                "not installed"
                if low is None
                else f"{low}{'' if low == high else f'-{high}'} of {orders}"
            )
        lines.append(f"| {label} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="30 orders, 20 units, 1 run")
    parser.add_argument("--runs", type=int, default=None, help="runs of each case (default 3)")
    parser.add_argument(
        "--cost", action="store_true", help="an atomic() block's cost against plain Django"
    )
    parser.add_argument("--rounds", type=int, default=None, help="--cost: rounds (default 400)")
    parser.add_argument(
        "--generations", type=int, default=None, help="--cost: sets of processes (default 20)"
    )
    parser.add_argument(
        "--tree", action="append", type=Path, help="--cost: a clone to run distlock from too"
    )
    args = parser.parse_args(argv)
    if args.cost:
        from benchmarks.transactions_cost import cost

        load_before = os.getloadavg()[0]
        rounds = args.rounds or (60 if args.quick else 400)
        generations = args.generations or (3 if args.quick else 20)
        figures = cost(rounds, generations, args.tree or [ROOT])
        figures["machine"] = platform.platform()
        # The machine may be shared: its 1-minute load average before and after the run.
        figures["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        COST_RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
        print(json.dumps(figures, indent=2))
        return 0
    orders, units = (30, 20) if args.quick else (150, 100)
    runs = args.runs or (1 if args.quick else 3)
    started = time.time()
    rows: list[dict[str, Any]] = []
    with RedisServer() as redis:
        for server_class in (PostgresServer, MariaDBServer):
            with server_class() as database:
                rows += measure(database, redis, runs, orders, units)
    result = {
        "title": "Locks and database transactions: orders charged twice, units oversold",
        "orders": orders,
        "units": units,
        "runs": runs,
        "workers": WORKERS,
        "clicks": CLICKS,
        "rows": rows,
        "table": table(rows, orders, units),
        "machine": platform.platform(),
        "seconds": round(time.time() - started, 1),
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(result["table"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
