"""Issue 39's fifth adversary: views of the shop served by a real uvicorn (ASGI), for
tests/core/test_transactions_adversary5.py. Every request is in a transaction
(ATOMIC_REQUESTS).

* ``pay-receipt``: the view charges the order under its lock and registers the receipt
  (an ``on_commit`` hook: send it, slowly, then record it) before the release, so the
  release waits for the COMMIT and that hook. It then starts, through its async service, a
  reconciler that it does not wait for: a pool job (``sync_to_async(thread_sensitive=False)``)
  whose coroutine (``async_to_sync``) sends the receipt unless it is recorded, under the same
  lock. The reconciler's coroutine asks for the lock while the receipt hook runs. A receipt
  is a Sale of the Product whose id is the order's (no model of its own: no migration).
* ``pay-tasks``: the view's async service charges the order from two tasks of an
  ``asyncio.TaskGroup``, each under the order's lock, the charge back in the request's
  thread (``sync_to_async``); the view works on before its COMMIT.
"""

from __future__ import annotations

import asyncio
import time

from asgiref.sync import async_to_sync, sync_to_async
from django.db import connections, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

import distlock

from .models import Sale
from .views import charge, service_view

RECEIPT_SECONDS = 0.5  # the mail server
RECONCILER_DELAY = 0.2  # the reconciler asks after the view has returned: during the hook
_background: set[asyncio.Task[object]] = set()


def send_receipt(order_id: int) -> str:
    """Send the receipt unless it is recorded: read, send (slowly), record."""
    if Sale.objects.filter(product_id=order_id).exists():
        return "already sent"
    time.sleep(RECEIPT_SECONDS)
    Sale.objects.create(product_id=order_id)
    return "sent"


async def _reconcile(order_id: int) -> None:
    await asyncio.sleep(RECONCILER_DELAY)
    async with distlock.lock(f"receipt:{order_id}", ttl=30, wait=10):
        await sync_to_async(send_receipt)(order_id)


def _reconciler_job(order_id: int) -> None:
    try:
        async_to_sync(_reconcile)(order_id)
    finally:
        connections.close_all()  # a pool thread's connections end with its job


async def _start_reconciler(order_id: int) -> None:
    task = asyncio.create_task(sync_to_async(_reconciler_job, thread_sensitive=False)(order_id))
    _background.add(task)
    task.add_done_callback(_background.discard)


@csrf_exempt
@require_POST
def pay_receipt(request: HttpRequest, order_id: int) -> JsonResponse:
    with distlock.lock(f"receipt:{order_id}", ttl=30, wait=10):
        result = charge(order_id)
        transaction.on_commit(lambda: send_receipt(order_id))
    async_to_sync(_start_reconciler)(order_id)
    return JsonResponse({"result": result})


async def _charge_once(order_id: int) -> str:
    async with distlock.lock(f"tasks:{order_id}", ttl=30, wait=10):
        return await sync_to_async(charge)(order_id)


async def _charge_from_tasks(order_id: int) -> str:
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(_charge_once(order_id)) for _ in range(2)]
    return ",".join(sorted(task.result() for task in tasks))


pay_tasks = service_view(_charge_from_tasks)
