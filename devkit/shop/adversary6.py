"""Issue 39's sixth adversary: a view of the shop served by a real uvicorn (ASGI), for
tests/core/test_transactions_adversary6.py. Every request is in a transaction
(ATOMIC_REQUESTS).

* ``pay-follow-up``: the view charges the order under its lock (the release waits for the
  COMMIT), then its async service starts a follow-up task that it does not wait for
  (``asyncio.create_task``: "retry the charge unless it is paid"), and the view works on
  before its COMMIT. The follow-up outlives the ``async_to_sync`` call that started it: its
  thread-sensitive ``sync_to_async`` calls have no thread left (asgiref refuses them), so
  it charges through a pool job (``thread_sensitive=False``), on a connection of its own.
* ``pay-follow-up-slow``: the same, the view working on 1.5 s (longer than
  ``distlock.transactions.HOP_TIMEOUT``).
"""

from __future__ import annotations

import asyncio
import time

from asgiref.sync import async_to_sync, sync_to_async
from django.db import connections
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

import distlock

from .views import charge

FOLLOW_UP_DELAY = 0.1  # the follow-up asks after the service returned, before the COMMIT
VIEW_WORKS_ON = 0.6  # the view's work after its service, before its transaction commits
VIEW_WORKS_SLOWLY = 1.5  # the same, longer than distlock.transactions.HOP_TIMEOUT
_background: set[asyncio.Task[object]] = set()


def _charge_in_a_job(order_id: int) -> str:
    try:
        return charge(order_id)
    finally:
        connections.close_all()  # a pool thread's connections end with its job


async def _follow_up(order_id: int) -> None:
    await asyncio.sleep(FOLLOW_UP_DELAY)
    async with distlock.lock(f"pay:{order_id}", ttl=30, wait=10):
        await sync_to_async(_charge_in_a_job, thread_sensitive=False)(order_id)


async def _start_follow_up(order_id: int) -> None:
    task = asyncio.create_task(_follow_up(order_id))
    _background.add(task)
    task.add_done_callback(_background.discard)


def _pay_follow_up(order_id: int, works_on: float) -> JsonResponse:
    with distlock.lock(f"pay:{order_id}", ttl=30, wait=10):
        result = charge(order_id)
    async_to_sync(_start_follow_up)(order_id)
    time.sleep(works_on)  # the view works on before its transaction commits
    return JsonResponse({"result": result})


@csrf_exempt
@require_POST
def pay_follow_up(request: HttpRequest, order_id: int) -> JsonResponse:
    return _pay_follow_up(order_id, VIEW_WORKS_ON)


@csrf_exempt
@require_POST
def pay_follow_up_slow(request: HttpRequest, order_id: int) -> JsonResponse:
    """The view works on longer than distlock.transactions.HOP_TIMEOUT: under a sync-only
    middleware (its async_to_sync runs the view in its thread), the follow-up's question
    waits for that thread, busy with the view, and is not answered in time."""
    return _pay_follow_up(order_id, VIEW_WORKS_SLOWLY)
