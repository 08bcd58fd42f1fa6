"""Issue 39's third adversary on a real database, in a process of its own (``python -m
devkit.shop.adversary3``, run like devkit/shop/holder.py): for
tests/core/test_transactions_adversary3.py. Prints one line of JSON:

* ``pool_siblings``: a request's transaction (ATOMIC_REQUESTS) calls an async service through
  ``async_to_sync``; the service runs two charges of the same order at once in pool threads
  (``sync_to_async(thread_sensitive=False)``), each ``atomic { lock { charge } }`` working on
  after its release before its COMMIT: how many orders were charged twice.
"""

from __future__ import annotations

import asyncio
import json
import time

import django

django.setup()

from asgiref.sync import async_to_sync, sync_to_async  # noqa: E402
from django.db import connections, transaction  # noqa: E402

import distlock  # noqa: E402
from devkit.shop.models import Order  # noqa: E402
from devkit.shop.views import charge  # noqa: E402

ORDERS = 10


def _job(order: int) -> str:
    try:
        with transaction.atomic():
            with distlock.lock(f"siblings:{order}", ttl=30, wait=10):
                result = charge(order)
            time.sleep(0.1)  # works on after the release, then commits
        return result
    finally:
        connections.close_all()  # a pool thread's connections end with its job


async def _service(order: int) -> list[str]:
    job = sync_to_async(_job, thread_sensitive=False)
    return list(await asyncio.gather(job(order), job(order)))


def pool_siblings() -> dict[str, object]:
    Order.objects.bulk_create([Order(pk=n) for n in range(1, ORDERS + 1)])
    results = []
    for order in range(1, ORDERS + 1):
        with transaction.atomic():  # the request's transaction
            results += async_to_sync(_service)(order)
    twice = sum(Order.objects.get(pk=n).charges.count() > 1 for n in range(1, ORDERS + 1))
    return {"twice": twice, "results": sorted(set(results))}


def main() -> None:
    print(json.dumps({"pool_siblings": pool_siblings()}), flush=True)


if __name__ == "__main__":
    main()
