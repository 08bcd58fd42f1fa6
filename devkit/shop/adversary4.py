"""Issue 39's fourth adversary on a real database, in a process of its own (``python -m
devkit.shop.adversary4``, run like devkit/shop/adversary3.py): for
tests/core/test_transactions_adversary4.py. Prints one line of JSON:

* ``pool_after_request``: a request's transaction (ATOMIC_REQUESTS) charges an order under
  its lock (the release waits for the COMMIT), then calls an async service through
  ``async_to_sync`` that charges the same order again in a pool thread
  (``sync_to_async(thread_sensitive=False)``, a connection of its own), under the same lock
  with ``wait=1``: how many orders were charged twice.
"""

from __future__ import annotations

import json

import django

django.setup()

from asgiref.sync import async_to_sync, sync_to_async  # noqa: E402
from django.db import connections, transaction  # noqa: E402

import distlock  # noqa: E402
from devkit.shop.models import Order  # noqa: E402
from devkit.shop.views import charge  # noqa: E402

ORDERS = 10


def _pay(order: int) -> str:
    with distlock.lock(f"pool-after:{order}", ttl=30, wait=1):
        return charge(order)


def _job(order: int) -> str:
    try:
        return _pay(order)
    except distlock.LockNotAcquired:  # waits for the request's COMMIT, which waits for it
        return "waited"
    finally:
        connections.close_all()  # a pool thread's connections end with its job


async def _service(order: int) -> str:
    return await sync_to_async(_job, thread_sensitive=False)(order)


def pool_after_request() -> dict[str, object]:
    Order.objects.bulk_create([Order(pk=n) for n in range(1, ORDERS + 1)])
    results = []
    for order in range(1, ORDERS + 1):
        with transaction.atomic():  # the request's transaction
            results.append(_pay(order))
            results.append(async_to_sync(_service)(order))
    twice = sum(Order.objects.get(pk=n).charges.count() > 1 for n in range(1, ORDERS + 1))
    return {"twice": twice, "results": sorted(set(results))}


def main() -> None:
    print(json.dumps({"pool_after_request": pool_after_request()}), flush=True)


if __name__ == "__main__":
    main()
