"""The holder of a waiting release is the transaction, on a real database, run in a process of
its own (``python -m devkit.shop.holder``, with DJANGO_SETTINGS_MODULE
devkit.shop.settings, DISTLOCK_TEST_DATABASES and DISTLOCK_TEST_URL set): for
tests/core/test_transactions_holder_databases.py (issue 39). Prints one line of JSON:

* ``pool``: a request's transaction charges order N under a lock, and a ``ThreadPoolExecutor``
  job releases it (the release waits for the request's COMMIT); the same pool thread then runs
  another job for order N, which must wait for that COMMIT: how many orders were charged
  twice (before: every one, the job took the waiting release back as "its thread's");
* ``hooks``: for each ORM call that opens an atomic block of its own (``delete()``,
  ``bulk_create``, ``get_or_create`` that creates, ``update_or_create``, ``atomic()``), an
  ``on_commit`` hook makes it, a later hook "sends the e-mail": whether the lock was still
  held when the e-mail went (both hooks registered before the release), and free after;
* ``gather``: ``async_to_sync`` running ``asyncio.gather`` of two tasks that lock the same
  name inside ``atomic()``: whether both got it, and how long it took.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import django

django.setup()

from asgiref.sync import async_to_sync  # noqa: E402
from django.db import transaction  # noqa: E402

import distlock  # noqa: E402
from devkit.shop.ends import free_for_others, free_within  # noqa: E402
from devkit.shop.models import Order, Product, Sale  # noqa: E402
from devkit.shop.views import charge  # noqa: E402

POOL_ORDERS = 10


def pool() -> dict[str, Any]:
    Order.objects.bulk_create([Order(pk=n) for n in range(1, POOL_ORDERS + 1)])

    def again(order: int) -> str:  # the next job for the same order, on the same thread
        with transaction.atomic(), distlock.lock(f"pool:{order}", ttl=30, wait=10):
            return charge(order)

    results = []
    with ThreadPoolExecutor(1) as jobs:
        for order in range(1, POOL_ORDERS + 1):
            with transaction.atomic():
                lk = distlock.lock(f"pool:{order}", ttl=30)
                lk.acquire()
                results.append(charge(order))
                jobs.submit(lk.release).result()  # waits for this transaction's COMMIT
                later = jobs.submit(again, order)
                time.sleep(0.05)  # the request works on before it commits
            results.append(later.result())
    twice = sum(Order.objects.get(pk=n).charges.count() > 1 for n in range(1, POOL_ORDERS + 1))
    return {"twice": twice, "results": sorted(set(results))}


def _delete() -> None:
    Product.objects.filter(pk=1).delete()  # a collector with a cascade: atomic(savepoint=False)


def _bulk_create() -> None:
    Order.objects.bulk_create([Order(pk=9002)])  # pks of its own: the sequence never moved


def _get_or_create() -> None:
    Order.objects.get_or_create(pk=9001)


def _update_or_create() -> None:
    Product.objects.update_or_create(pk=2, defaults={"units": 1})


def _atomic() -> None:
    with transaction.atomic():
        Order.objects.create(pk=9003)


HOOK_CALLS: dict[str, Callable[[], None]] = {
    "delete": _delete,
    "bulk_create": _bulk_create,
    "get_or_create": _get_or_create,
    "update_or_create": _update_or_create,
    "atomic": _atomic,
}


def mail(name: str, mailed_while_held: list[bool]) -> None:
    """The e-mail hook: note whether the order's lock was still held when it ran."""
    mailed_while_held.append(not free_for_others(name))


def hooks() -> dict[str, Any]:
    report = {}
    for label, call in HOOK_CALLS.items():
        name = f"hooks:{label}"
        Product.objects.create(pk=1, units=1)
        Sale.objects.create(product_id=1)
        mailed_while_held: list[bool] = []
        with transaction.atomic():
            lk = distlock.lock(name, ttl=30)
            lk.acquire()
            transaction.on_commit(call)
            transaction.on_commit(functools.partial(mail, name, mailed_while_held))
            lk.release()  # waits for the hooks registered before it
        report[label] = {"held": mailed_while_held == [True], "freed": free_within(name)}
        Product.objects.all().delete()
        Order.objects.filter(pk__gt=POOL_ORDERS).delete()
    return report


async def _task(name: str, got: list[bool]) -> None:
    async with distlock.lock(name, ttl=30, wait=5):
        got.append(True)
        await asyncio.sleep(0.05)


async def _gather(name: str, got: list[bool]) -> None:
    await asyncio.gather(_task(name, got), _task(name, got))


def gather() -> dict[str, Any]:
    got: list[bool] = []
    started = time.monotonic()
    with contextlib.suppress(distlock.LockNotAcquired), transaction.atomic():
        async_to_sync(_gather)("gather", got)
    return {"got": len(got), "seconds": round(time.monotonic() - started, 2)}


def main() -> None:
    assert threading.current_thread() is threading.main_thread()
    print(json.dumps({"pool": pool(), "hooks": hooks(), "gather": gather()}), flush=True)


if __name__ == "__main__":
    main()
