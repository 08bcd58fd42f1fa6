"""Attacks on the fence on a real database: ``python -m devkit.shop.fence_adversary``
(DJANGO_SETTINGS_MODULE devkit.shop.settings; the database in
DISTLOCK_TEST_DATABASES, migrated; the locks on DISTLOCK_TEST_URL), for
tests/core/test_fence_adversary_databases.py. Prints one line of JSON: for each way a stale
holder reaches the database, "refused" or "accepted", and the charges it left.

The stale holder is made as a paused one is (devkit/shop/fence_claims.py): a short
lease held past its end, a newer holder that took the lock and claimed it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import django

django.setup()

from django.db import connection, transaction  # noqa: E402

import distlock  # noqa: E402
from devkit.shop.fence_claims import stale_and_newer  # noqa: E402
from devkit.shop.models import Charge, Order  # noqa: E402
from distlock.exceptions import FencedUpdateRejected  # noqa: E402
from distlock.fencing import claim  # noqa: E402


def attempt(name: str, order: Order, work: Callable[[distlock.Lock], Any]) -> dict[str, Any]:
    """Run ``work`` as a stale holder of ``name`` (a newer holder claimed first), given the
    stale holder's Lock."""
    before = Charge.objects.filter(order=order).count()
    stale, newer = stale_and_newer(name)
    with transaction.atomic():
        Order.objects.get(pk=order.pk)  # the newer holder claims
    newer.release()
    try:
        work(stale)
        verdict = "accepted"
    except FencedUpdateRejected:
        verdict = "refused"
    finally:
        stale._forget()
    return {"verdict": verdict, "charged": Charge.objects.filter(order=order).count() - before}


def newer_claims(name: str) -> str:
    """In a thread of its own (its own connection): take ``name`` and claim it; return
    "claimed", or the error (a claim that waits on the stale holder's row times out)."""
    seen: list[str] = []

    def run() -> None:
        try:
            with distlock.lock(name, ttl=30, fence=True), transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SET SESSION innodb_lock_wait_timeout = 3")
                Order.objects.exists()
            seen.append("claimed")
        except Exception as exc:
            seen.append(type(exc).__name__)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    return seen[0] if seen else "hung"


def implicit_commit(order: Order) -> dict[str, Any]:
    """MariaDB commits implicitly before DDL (TRUNCATE of a scratch table, here): the
    transaction the holder claimed in ends there, its row lock with it, but Django's atomic
    block (and the fence's marker) go on. The holder is paused past its lease, a newer
    holder claims and commits, and the stale holder's next statement in the same block is
    not claimed again."""
    name = f"implicit-commit:{order.pk}"
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS shop_scratch (id INT)")
    before = Charge.objects.filter(order=order).count()
    stale = distlock.lock(name, ttl=0.3, fence=True, hold_until_commit=False)
    assert stale.acquire(wait=0)
    seen: dict[str, Any] = {}
    try:
        with transaction.atomic():
            Order.objects.get(pk=order.pk)  # claimed: the holder is the newest
            with connection.cursor() as cursor:
                cursor.execute("TRUNCATE TABLE shop_scratch")  # an implicit COMMIT
            time.sleep(0.6)  # paused past its lease
            seen["newer"] = newer_claims(name)
            Charge.objects.create(order=order, worker_pid=0)  # the stale holder charges
        seen["verdict"] = "accepted"
    except FencedUpdateRejected:
        seen["verdict"] = "refused"
    finally:
        stale._forget()
    seen["charged"] = Charge.objects.filter(order=order).count() - before
    return seen


def reconnect(order: Order) -> dict[str, str]:
    """A holder (the newest) whose connection was closed (close_old_connections(), as
    Celery's Django fix-up and long commands call) opens it again under its fenced lock,
    in autocommit and inside atomic(): Django's statements that set the new connection up
    (MariaDB: SET SESSION TRANSACTION ISOLATION LEVEL ...) pass the fence's wrapper too."""
    seen: dict[str, str] = {}
    for how in ("autocommit", "atomic"):
        with distlock.lock(f"reconnect-{how}:{order.pk}", ttl=30, fence=True):
            connection.close()
            try:
                if how == "atomic":
                    with transaction.atomic():
                        Charge.objects.filter(order=order).count()
                else:
                    Charge.objects.filter(order=order).count()
                seen[how] = "ran"
            except Exception as exc:
                seen[how] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return seen


def vacuum() -> str:
    """A fenced holder's maintenance statement that PostgreSQL runs only outside a
    transaction (VACUUM; also CREATE INDEX CONCURRENTLY)."""
    with distlock.lock("vacuum", ttl=30, fence=True):
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"VACUUM {Charge._meta.db_table}")
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return "ran"


def main() -> None:
    report: dict[str, Any] = {"vendor": connection.vendor}
    order = Order.objects.create()
    table = Charge._meta.db_table
    if connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute("DROP PROCEDURE IF EXISTS shop_charge_order")
            cursor.execute(
                "CREATE PROCEDURE shop_charge_order(IN o BIGINT) "
                f"INSERT INTO {table} (order_id, worker_pid) VALUES (o, 0)"
            )

        def callproc(lock: distlock.Lock) -> None:
            # A stored procedure charges: Django's cursor.callproc() bypasses the execute
            # wrappers, so the documented remedy claims first (docs/fencing-and-limits.md).
            with transaction.atomic():
                claim(lock)
                with connection.cursor() as cursor:
                    cursor.callproc("shop_charge_order", [order.pk])

        def compound(lock: distlock.Lock) -> None:  # a MariaDB compound statement, raw SQL
            with connection.cursor() as cursor:
                cursor.execute(
                    f"BEGIN NOT ATOMIC INSERT INTO {table} (order_id, worker_pid) "
                    f"VALUES ({int(order.pk)}, 0); END"
                )

        report["callproc"] = attempt(f"callproc:{order.pk}", order, callproc)
        report["compound"] = attempt(f"compound:{order.pk}", order, compound)
        report["implicit_commit"] = implicit_commit(order)
    report["reconnect"] = reconnect(order)
    if connection.vendor == "postgresql":
        report["vacuum"] = vacuum()

        def copy(lock: distlock.Lock) -> None:
            # A bulk load through psycopg's COPY (cursor.copy()), past Django's execute
            # wrappers: the documented remedy claims first (docs/fencing-and-limits.md).
            with transaction.atomic(), connection.cursor() as cursor:
                claim(lock)
                sql = f"COPY {table} (order_id, worker_pid) FROM STDIN"
                with cursor.copy(sql) as rows:
                    rows.write_row((order.pk, 0))

        report["copy"] = attempt(f"copy:{order.pk}", order, copy)

        def begun(lock: distlock.Lock) -> None:  # raw SQL opening its own transaction
            with connection.cursor() as cursor:
                cursor.execute(
                    f"BEGIN; INSERT INTO {table} (order_id, worker_pid) "
                    f"VALUES ({int(order.pk)}, 0); COMMIT"
                )

        report["begun"] = attempt(f"begun:{order.pk}", order, begun)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
