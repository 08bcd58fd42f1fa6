"""Issue 39's fourth adversary on a real database, in a process of its own (``python -m
devkit.shop.adversary4``, run like devkit/shop/adversary3.py): for
tests/core/test_transactions_adversary4.py. Prints one line of JSON:

* ``pool_after_request``: a request's transaction (ATOMIC_REQUESTS) charges an order under
  its lock (the release waits for the COMMIT), then calls an async service through
  ``async_to_sync`` that charges the same order again in a pool thread
  (``sync_to_async(thread_sensitive=False)``, a connection of its own), under the same lock
  with ``wait=1``: how many orders were charged twice.
* ``redundant_begin``: a job manages its transaction by hand; it charges an order under a
  lock of ``ttl=1`` (the release waits for its commit()), then a helper makes sure
  autocommit is off (``set_autocommit(False)`` again: nothing for Django or the database),
  and the job works on for 1.5 s before its commit(). Another worker charges the same order
  meanwhile: how many orders were charged twice. (psycopg refuses the second
  set_autocommit(False) inside a transaction: PostgreSQL never meets it.)
"""

from __future__ import annotations

import contextlib
import json
import threading
import time

import django

django.setup()

from asgiref.sync import async_to_sync, sync_to_async  # noqa: E402
from django.db import DatabaseError, connections, transaction  # noqa: E402

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


def _job_by_hand(order: int, released: threading.Event) -> str:
    try:
        transaction.set_autocommit(False)
        try:
            with distlock.lock(f"by-hand:{order}", ttl=1):
                result = charge(order)
            released.set()
            # A helper makes sure: the same transaction goes on (psycopg refuses it in a
            # transaction: PostgreSQL never meets this).
            with contextlib.suppress(DatabaseError):
                transaction.set_autocommit(False)
            time.sleep(1.5)  # works on, then commits
            transaction.commit()
            return result
        finally:
            transaction.set_autocommit(True)
    finally:
        released.set()
        connections.close_all()


def _other_worker(order: int, released: threading.Event, results: list[str]) -> None:
    try:
        released.wait(10)
        with distlock.lock(f"by-hand:{order}", ttl=5, wait=10):
            results.append(charge(order))
    finally:
        connections.close_all()


def redundant_begin() -> dict[str, object]:
    orders = range(ORDERS + 1, ORDERS + 6)
    Order.objects.bulk_create([Order(pk=n) for n in orders])
    results: list[str] = []
    for order in orders:
        released = threading.Event()
        other = threading.Thread(target=_other_worker, args=(order, released, results))
        other.start()
        results.append(_run_in_thread(_job_by_hand, order, released))
        other.join()
    twice = sum(Order.objects.get(pk=n).charges.count() > 1 for n in orders)
    return {"twice": twice, "results": sorted(set(results))}


def _run_in_thread(job: object, *args: object) -> str:
    """Run ``job(*args)`` in a thread of its own (its own connection); return its result."""
    out: list[str] = []
    thread = threading.Thread(target=lambda: out.append(job(*args)))  # type: ignore[operator]
    thread.start()
    thread.join()
    return out[0]


def main() -> None:
    report = {"pool_after_request": pool_after_request(), "redundant_begin": redundant_begin()}
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
