"""Issue 39, adversary 39b: a view of the shop served by a real uvicorn (ASGI), for
tests/core/test_transactions_adversary39b.py. Every request is in a transaction
(ATOMIC_REQUESTS).

* ``pay-nested-follow-up``: the view runs its async service through ``async_to_sync`` (the
  outer call); the service runs sync code in the request's thread (``sync_to_async``) that
  starts the charge as a task through a nested ``async_to_sync`` (the inner call, which
  returns at once) and then prepares the receipt, longer than
  ``distlock.transactions.HOP_TIMEOUT``; the service then waits for the charge, and the
  view works on before its COMMIT. The charge (under the order's lock) runs its ORM calls
  thread-sensitively: through the outer call, still running, in the request's thread and
  transaction.
"""

from __future__ import annotations

import asyncio
import time

from asgiref.sync import async_to_sync, sync_to_async

import distlock

from .views import charge, service_view

RECEIPT_SECONDS = 1.5  # longer than distlock.transactions.HOP_TIMEOUT
VIEW_WORKS_ON = 0.6  # the view's work after its service, before its transaction commits


async def _charge(order_id: int) -> str:
    async with distlock.lock(f"pay:{order_id}", ttl=30, wait=10):
        return await sync_to_async(charge)(order_id)  # the request's thread and transaction


def _start_and_prepare(order_id: int, started: list[asyncio.Task[str]]) -> None:
    async def start() -> None:
        started.append(asyncio.create_task(_charge(order_id)))

    async_to_sync(start)()  # the inner call: returns once the charge is started
    time.sleep(RECEIPT_SECONDS)  # the receipt, in the request's thread


async def _service(order_id: int) -> str:
    started: list[asyncio.Task[str]] = []
    await sync_to_async(_start_and_prepare)(order_id, started)
    return await started[0]


pay_nested_follow_up = service_view(_service, works_on=VIEW_WORKS_ON)
