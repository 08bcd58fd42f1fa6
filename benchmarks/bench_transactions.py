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

    python benchmarks/bench_transactions.py --cost [--quick]

measures, in this process, what distlock's hooks into Django cost an ``atomic()`` block with
no lock in it, against plain Django in the same run (distlock's two wrappers and the fence's
execute wrapper taken off): an outermost block, one with ten nested ``savepoint=False``
blocks, and an outermost block running one query, on an SQLite file and a PostgreSQL server
of its own; also while another thread's release waits for its COMMIT, and while another
thread holds a fenced lock (``fence=True``: its execute wrapper is on every connection).
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


CASES = (
    "outermost atomic()",
    "outermost + ten nested atomic(savepoint=False)",
    "outermost atomic() running one query",
)
MODES = (
    "plain Django",
    "distlock",
    "distlock, a release waiting in another thread",
    "distlock, a fenced lock held in another thread",
)


def cost(rounds: int = 300, calls: int = 50) -> dict[str, Any]:
    """Return what distlock's hooks cost an atomic() block with no lock in it, against plain
    Django in the same run and process: each case timed with distlock's wrappers (the two
    around Django's methods, and the fence's execute wrapper wherever distlock put it) taken
    off (plain Django), on as distlock leaves them (nothing tied, nothing fenced), on while
    another thread's release waits for its COMMIT (the wrappers' slow path is armed), and on
    while another thread holds a fenced lock, interleaved with plain Django, the best of
    ``rounds`` rounds of ``calls`` blocks each (the machine is shared: the best is the least
    disturbed; each mode's ratio is to the plain Django batches of its own pass); on an
    SQLite file and on a PostgreSQL server of its own."""
    import tempfile
    import threading

    import django
    from django.conf import settings

    with PostgresServer() as postgres, tempfile.TemporaryDirectory() as directory:
        settings.configure(
            DATABASES={
                "default": {
                    "ENGINE": "django.db.backends.sqlite3",
                    "NAME": str(Path(directory) / "cost.sqlite3"),
                },
                "postgresql": postgres.django_settings(),
            },
            INSTALLED_APPS=["distlock"],
            DISTLOCK={"default": {"BACKEND": "distlock.backends.locmem.LocMemBackend"}},
            USE_TZ=True,
        )
        django.setup()
        from django.db import connections, transaction

        import distlock
        from distlock import claims, transactions

        def outermost(alias: str) -> None:
            with transaction.atomic(using=alias):
                pass

        def nested(alias: str) -> None:
            def inner() -> Any:
                return transaction.atomic(using=alias, savepoint=False)

            with transaction.atomic(using=alias):  # noqa: SIM117 - nested, as measured
                with inner(), inner(), inner(), inner(), inner():
                    with inner(), inner(), inner(), inner(), inner():
                        pass

        def one_query(alias: str) -> None:
            with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
                cursor.execute("SELECT 1")

        wrapped = {(cls, name): getattr(cls, name) for cls, name, _ in transactions.TARGETS}
        fenced_off: list[Any] = []  # the connections the fence's wrapper was taken off

        def wrappers(on: bool, alias: str) -> None:
            for (cls, name), method in wrapped.items():
                setattr(cls, name, method if on else method.__wrapped__)
            execute_wrappers = connections[alias].execute_wrappers
            if on:
                while fenced_off:
                    execute_wrappers.insert(0, fenced_off.pop())
            elif claims.claim_first in execute_wrappers:  # as distlock left it
                execute_wrappers.remove(claims.claim_first)
                fenced_off.append(claims.claim_first)

        waiting, done = threading.Event(), threading.Event()

        def hold_in_another_thread(fence: bool) -> None:  # another request's
            if fence:  # held outside any transaction: the fence's wrapper is what it costs
                with distlock.lock("cost:fenced", ttl=600, fence=True):
                    waiting.set()
                    done.wait()
            else:  # released inside its transaction: the release waits for its COMMIT
                with transaction.atomic():
                    lk = distlock.lock("cost:waiting", ttl=600)
                    lk.acquire()
                    lk.release()
                    waiting.set()
                    done.wait()
            connections.close_all()

        def in_another_thread(fence: bool) -> threading.Thread:
            done.clear()
            waiting.clear()
            thread = threading.Thread(target=hold_in_another_thread, args=(fence,))
            thread.start()
            waiting.wait()
            return thread

        def end_in_other_thread(thread: threading.Thread | None) -> None:
            if thread is not None:
                done.set()
                thread.join()

        blocks = (outermost, nested, one_query)
        results: dict[str, Any] = {}
        for alias in ("default", "postgresql"):
            connections[alias].ensure_connection()
            one_query(alias)  # as distlock leaves the connection after its first statement
            # (case, mode, distlock's hooks on): each mode against the plain Django batches
            # interleaved with it (the machine's load drifts between the modes' passes).
            best = {
                (case, mode, on): float("inf")
                for case in CASES
                for mode in MODES[1:]
                for on in (False, True)
            }
            for mode in MODES[1:]:
                # Each mode interleaved with plain Django, batch by batch; the last two while
                # another thread has a release waiting for its COMMIT, or holds a fenced lock.
                other = None
                if mode == MODES[2]:
                    other = in_another_thread(fence=False)
                    assert transactions._tied
                elif mode == MODES[3]:
                    other = in_another_thread(fence=True)
                    assert claims.claim_first in connections[alias].execute_wrappers
                for _ in range(rounds):
                    for on in (False, True):
                        wrappers(on, alias)
                        for case, block in zip(CASES, blocks, strict=True):
                            started = time.perf_counter()
                            for _ in range(calls):
                                block(alias)
                            spent = (time.perf_counter() - started) / calls * 1e6
                            best[case, mode, on] = min(best[case, mode, on], spent)
                wrappers(True, alias)
                end_in_other_thread(other)
            vendor = connections[alias].vendor

            results[vendor] = {
                case: {
                    "plain_us": round(best[case, MODES[1], False], 2),
                    "distlock_us": round(best[case, MODES[1], True], 2),
                    "ratio": _ratio(best, case, MODES[1]),
                    "ratio_while_waiting": _ratio(best, case, MODES[2]),
                    "ratio_while_fenced": _ratio(best, case, MODES[3]),
                }
                for case in CASES
            }
        connections.close_all()
    return results


def _ratio(best: dict[tuple[str, str, bool], float], case: str, mode: str) -> float:
    """Return ``case``'s time with distlock's hooks on over plain Django's, in ``mode``."""
    return round(best[case, mode, True] / best[case, mode, False], 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="30 orders, 20 units, 1 run")
    parser.add_argument("--runs", type=int, default=None, help="runs of each case (default 3)")
    parser.add_argument(
        "--cost", action="store_true", help="an atomic() block's cost against plain Django"
    )
    args = parser.parse_args(argv)
    if args.cost:
        load_before = os.getloadavg()[0]
        figures = cost(rounds=60) if args.quick else cost()
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
