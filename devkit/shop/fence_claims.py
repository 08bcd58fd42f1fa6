"""The fence's claim on one database, step by step: ``python -m devkit.shop.fence_claims``
(DJANGO_SETTINGS_MODULE devkit.shop.settings; the database in DISTLOCK_TEST_DATABASES,
or SQLite in memory, migrated here; the locks on DISTLOCK_TEST_URL), for
tests/core/test_fence_claims.py. Prints one line of JSON: what each step saw.

A stale holder is made as a paused one is: a fenced lock with a short lease (no renewal) is
held past it, a newer holder takes the lock and writes, then the stale one works.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import django
from asgiref.sync import sync_to_async

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

import distlock  # noqa: E402
from devkit.shop.models import Charge, Order  # noqa: E402
from distlock.claims import digest  # noqa: E402
from distlock.models import Fence  # noqa: E402

LEASE = 0.3


def fence_row(name: str) -> tuple[int, int] | None:
    """The lock's Fence row (token, claims), read past Django's cursor (and so past the
    fence's wrapper: reading it must not claim)."""
    connection.ensure_connection()
    mark = "?" if connection.vendor == "sqlite" else "%s"
    cursor = connection.connection.cursor()
    try:
        cursor.execute(
            f"SELECT token, claims FROM {Fence._meta.db_table} WHERE digest = {mark}",
            [digest("default", name)],
        )
        found = cursor.fetchone()
    finally:
        cursor.close()
    return None if found is None else (int(found[0]), int(found[1]))


def charge(order: Order) -> None:
    Charge.objects.create(order=order, worker_pid=0)


def refused(work: Any) -> str:
    """Run ``work``; return the name of the exception it raised ('' when none)."""
    try:
        work()
    except Exception as exc:
        return type(exc).__name__
    return ""


def stale_and_newer(name: str) -> tuple[distlock.Lock, distlock.Lock]:
    """A holder whose lease ran out, and the newer holder that took the lock after it."""
    stale = distlock.lock(name, ttl=LEASE, fence=True, hold_until_commit=False)
    assert stale.acquire(wait=0)
    time.sleep(LEASE * 2)
    newer = distlock.lock(name, ttl=30, fence=True)
    assert newer.acquire(wait=0)
    return stale, newer


async def stale_async(name: str, order: Order) -> dict[str, Any]:
    """A fenced lock acquired in a coroutine: its ORM calls claim (accepted while it is the
    newest holder), and once a newer holder claimed, an older one is refused."""
    seen: dict[str, Any] = {}
    stale = distlock.lock(name, ttl=LEASE, fence=True, hold_until_commit=False)
    assert await stale.aacquire(wait=0)
    await Order.objects.aget(pk=order.pk)  # claimed in its own (autocommit) transaction
    row = await sync_to_async(fence_row)(name)
    seen["claimed"] = row is not None and row[0] == stale.fencing_token
    await asyncio.sleep(LEASE * 2)
    newer = distlock.lock(name, ttl=30, fence=True)
    assert await newer.aacquire(wait=0)
    await Order.objects.aget(pk=order.pk)
    await newer.arelease()
    try:
        await Charge.objects.acreate(order=order, worker_pid=0)
        seen["stale"] = ""
    except Exception as exc:
        seen["stale"] = type(exc).__name__
    stale._forget()
    seen["charges"] = await Charge.objects.filter(order=order).acount()
    return seen


def main() -> None:
    if connection.vendor == "sqlite":
        call_command("migrate", verbosity=0)
    report: dict[str, Any] = {"vendor": connection.vendor}
    order = Order.objects.create()
    name = f"fence-check:{order.pk}"

    # Accepted: the first claim stores the token; the same holder claims again (equal).
    with distlock.lock(name, ttl=30, fence=True) as lk:
        report["token"] = lk.fencing_token
        with transaction.atomic():
            charge(order)
        report["after_first"] = fence_row(name)
        with transaction.atomic():
            Order.objects.get(pk=order.pk)
        with transaction.atomic():
            Order.objects.get(pk=order.pk)
        report["after_three"] = fence_row(name)  # the equal token accepted twice more

    # Older refused and rolled back, in an atomic block and in autocommit.
    stale, newer = stale_and_newer(name)
    report["tokens_rise"] = newer.fencing_token > stale.fencing_token  # type: ignore[operator]
    with transaction.atomic():
        charge(order)
    newer.release()

    def stale_atomic() -> None:
        with transaction.atomic():
            Order.objects.get(pk=order.pk)  # the claim runs before this read
            charge(order)

    report["stale_atomic"] = refused(stale_atomic)
    report["stale_autocommit"] = refused(lambda: charge(order))
    report["stale_read"] = refused(lambda: Charge.objects.filter(order=order).count())
    stale._forget()  # its lease ended long ago: drop it (release would say so)
    report["charges"] = Charge.objects.filter(order=order).count()
    report["newest_is_newer"] = fence_row(name)[0] == newer.fencing_token  # type: ignore[index]

    # A savepoint that rolls back takes its claim with it: the next statement claims again.
    with distlock.lock(name, ttl=30, fence=True) as lk:
        before = fence_row(name)
        with transaction.atomic():
            try:
                with transaction.atomic():
                    Order.objects.get(pk=order.pk)
                    raise RuntimeError("roll the savepoint back")
            except RuntimeError:
                pass
            Order.objects.get(pk=order.pk)
        after = fence_row(name)
        report["savepoint_claims"] = None if before is None else after[1] - before[1]  # type: ignore[index]
        report["savepoint_token"] = after == (lk.fencing_token, after[1]) if after else False

    # Async code: the ORM's calls run in a worker thread, which carries the fenced hold.
    if connection.vendor != "sqlite":  # SQLite in memory is one connection per thread
        report["async"] = asyncio.run(stale_async(name, order))

    # No fenced lock held: statements claim nothing.
    claims_before = fence_row(name)
    with transaction.atomic():
        Order.objects.get(pk=order.pk)
    report["unfenced_claims"] = fence_row(name) == claims_before
    print(json.dumps(report))


if __name__ == "__main__":
    main()
