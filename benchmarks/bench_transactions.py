"""The table of docs/transactions.md: how often a lock taken inside a database transaction lets
an order be charged twice, or a stock be oversold, with and without ``hold_until_commit``.

On a real PostgreSQL and a real MariaDB server of its own (tests/support/databases.py), the shop of
tests/support/shop is served by 6 gunicorn worker processes; each order gets 3 POSTs at once (a
double click plus a retry), and 200 buyers compete for 100 units. ``hold_until_commit=False``
is distlock's behaviour before locks followed the transaction (a release hands the lock on at
once, before COMMIT); ``True`` is today's default. Commits are made 5 ms slower than the
servers' (tests/support/shop/slow_commit), as a commit that waits for a disk is.

    python benchmarks/bench_transactions.py [--quick] [--runs N]

Writes benchmarks/results/transactions.json and prints the table.

    python benchmarks/bench_transactions.py --bookkeeping

measures, in this process (in-memory SQLite, the locmem backend: no server), what watching the
transactions costs: the time added to each ``atomic()`` block by distlock's wrappers of
``Atomic.__enter__``/``__exit__`` with no lock tied, and the release's own bookkeeping inside
a transaction (a release that waits makes no round trip: all of its time is bookkeeping).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the clone, for its imports
from tests.support.databases import DatabaseServer, MariaDBServer, PostgresServer
from tests.support.paths import ROOT
from tests.support.redis_server import RedisServer
from tests.support.shop.load import Shop, serve_shop

RESULTS = ROOT / "benchmarks" / "results" / "transactions.json"
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


def bookkeeping(rounds: int = 50000) -> dict[str, float]:
    """Return microseconds per call of what watching transactions costs (see the docstring):
    each wrapper's own time, around a do-nothing method in place of Django's, and a whole
    release() inside a transaction (the best of 7 runs: the machine is shared)."""
    import django
    from django.conf import settings

    settings.configure(
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        INSTALLED_APPS=["distlock"],
        DISTLOCK={"default": {"BACKEND": "distlock.backends.locmem.LocMemBackend"}},
        USE_TZ=True,
    )
    django.setup()
    from django.db import connection, transaction

    import distlock
    from distlock import transactions

    def best(call: Any, times: int = rounds) -> float:
        fastest = float("inf")
        for _ in range(7):
            started = time.perf_counter()
            for _ in range(times):
                call()
            fastest = min(fastest, (time.perf_counter() - started) / times * 1e6)
        return fastest

    def nothing(*args: Any) -> None:
        return None

    block = transaction.atomic()
    enter, exit_ = transactions._wrap_enter(nothing), transactions._wrap_exit(nothing)
    base = best(lambda: nothing(block, None, None, None))
    figures = {"Atomic.__exit__ with no lock tied": best(lambda: exit_(block, None, None, None))}
    connection.ensure_connection()
    with transaction.atomic():  # Atomic.__enter__ of an outermost block (the most work)
        figures["Atomic.__enter__ (outermost block)"] = best(lambda: enter(block))
    figures = {label: micros - base for label, micros in figures.items()}
    figures["acquire outside any transaction (finding none)"] = best(transactions.transactions_here)
    lk = distlock.lock("bookkeeping", ttl=60)
    keep = distlock.lock("renewer-running", ttl=60, auto_renew=True)
    keep.acquire()  # the renewer thread runs anyway (else each release would start it)

    def release_in_transaction() -> float:
        with transaction.atomic():
            lk.acquire()
            started = time.perf_counter()
            lk.release()  # waits for the block: no round trip, bookkeeping only
            return time.perf_counter() - started

    spent = sorted(release_in_transaction() for _ in range(rounds // 10))
    figures["release inside a transaction (median)"] = spent[len(spent) // 2] * 1e6
    figures["release inside a transaction (10th percentile)"] = spent[len(spent) // 10] * 1e6
    keep.release()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="30 orders, 20 units, 1 run")
    parser.add_argument("--runs", type=int, default=None, help="runs of each case (default 3)")
    parser.add_argument(
        "--bookkeeping", action="store_true", help="the cost of watching transactions (us)"
    )
    args = parser.parse_args(argv)
    if args.bookkeeping:
        for label, micros in bookkeeping().items():
            print(f"{label}: {micros:.2f} us")
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
