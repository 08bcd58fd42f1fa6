"""Issue 22, acceptance item 3: a lock released inside the caller's transaction is handed on
only after COMMIT through every way distlock locks, not only ``distlock.lock`` and
``@lock_view``: ``LockedCommandMixin``, Celery's ``LockedTask``, ``contrib.tasks.locked``
(django.tasks), semaphores and ``@lock_view(limit=)`` (devkit/shop/surfaces.py).

For each surface, on a real PostgreSQL and a real MariaDB server, 3 worker processes
(devkit/shop/surface_worker.py) start together and go through the same orders in the same
order, each order inside ``transaction.atomic()``: read the order's charges, and if there is
none, pay (30 ms) and write one; every COMMIT takes 5 ms more (devkit/shop/slow_commit). The
surfaces that skip a duplicate (``LockedTask``, ``locked``: wait=0) have the skipped order
tried again, in a new transaction, until it runs. Every order must end with exactly one
charge, and the workers must have found the lock held often (without contention a run proves
nothing).

``SHOP_HOLD_UNTIL_COMMIT=0`` in the environment runs the workers with every surface's
``hold_until_commit`` off (the lock handed on before COMMIT, as distlock did before the
rule): then orders are charged twice and these tests fail.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from typing import Any

import django
import pytest

from devkit.databases import DatabaseServer
from devkit.processes import child_env
from devkit.redis_server import RedisServer
from devkit.shop.load import SETTINGS, Shop, serve_shop, shop_env
from tests.support.lock_helpers import read_line, spawner

pytest.importorskip("celery", reason="pip install 'django-distlock[celery]'")

ORDERS = 40
WORKERS = 3
HOLD = os.environ.get("SHOP_HOLD_UNTIL_COMMIT", "1") == "1"
SURFACES = ["command", "celery-task", "django-task", "semaphore", "lock-view-limit"]
# The surfaces that take their lock with wait=0: a duplicate is skipped, not made to wait.
SKIPPING = {"celery-task", "django-task"}


@pytest.fixture(scope="module")
def shop(real_database: DatabaseServer, redis_server: RedisServer) -> Iterator[Shop]:
    """A migrated database of the module's own on each real database server."""
    with serve_shop(real_database, redis_server.url, workers=0) as served:
        yield served


def fresh_orders(shop: Shop) -> None:
    shop.query("DELETE FROM shop_charge")
    shop.query("DELETE FROM shop_order")
    values = ", ".join(f"({order})" for order in range(1, ORDERS + 1))
    shop.query(f"INSERT INTO shop_order (id) VALUES {values}")


def report(process: subprocess.Popen[str]) -> dict[str, Any]:
    """Return the JSON a worker printed last; AssertionError if it failed."""
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0, f"worker {process.pid} exited {process.returncode}: {out}"
    return json.loads(out.strip().splitlines()[-1])


def run_workers(
    shop: Shop, database: DatabaseServer, redis_url: str, surface: str
) -> list[dict[str, Any]]:
    env = child_env(settings=SETTINGS, **shop_env(database, shop.database, redis_url, HOLD))
    with spawner("devkit.shop.surface_worker", env, stdin=True) as start:
        workers = [start(surface, str(ORDERS)) for _ in range(WORKERS)]
        for worker in workers:
            read_line(worker, "ready")
        for worker in workers:  # all connected: go
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        return [report(worker) for worker in workers]


@pytest.mark.parametrize("surface", SURFACES)
def test_three_workers_in_transactions_charge_each_order_once(
    shop: Shop, real_database: DatabaseServer, redis_server: RedisServer, surface: str
) -> None:
    if surface == "django-task" and django.VERSION < (6, 0):
        pytest.skip("django.tasks needs Django >= 6.0")
    redis_server.flushall()
    fresh_orders(shop)
    reports = run_workers(shop, real_database, redis_server.url, surface)

    charges = shop.charges_per_order()
    twice = sorted(order for order, n in charges.items() if n > 1)
    assert not twice, f"{len(twice)} of {ORDERS} orders charged more than once: {twice}"
    assert sorted(charges) == list(range(1, ORDERS + 1)), "some orders were never charged"
    results: Counter[str] = sum((Counter(r["results"]) for r in reports), Counter())
    assert results == {"charged": ORDERS, "already paid": ORDERS * (WORKERS - 1)}
    skipped = sum(r["skipped"] for r in reports)
    if surface not in SKIPPING:
        assert skipped == 0, "a wait of 10 s ran out"
    # Every charge ran inside its worker's transaction, not after COMMIT.
    assert [r["charged_outside"] for r in reports] == [0] * WORKERS
    found_held = sum(r["found_held"] for r in reports)
    assert found_held >= ORDERS // 5, f"only {found_held} orders found the lock held"
