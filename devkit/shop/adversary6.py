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
* ``pay-background-loop``: the view charges the order under its lock, then sends the
  follow-up to a long-lived event loop of the process's own (a background loop thread,
  started once per process) with ``asyncio.run_coroutine_threadsafe`` and does not wait for
  it; it works on 1.5 s before its COMMIT. The follow-up runs in a copy of the view's
  context: asking asgiref which thread its ORM calls go to goes to the request's thread,
  busy with the view, and is not answered in time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
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
_loop: list[asyncio.AbstractEventLoop] = []  # the process's background loop, once started
_loop_started = threading.Lock()
_sent: set[concurrent.futures.Future[None]] = set()


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


def _background_loop() -> asyncio.AbstractEventLoop:
    """Return the process's background event loop, starting its thread at the first call
    (as a client bound to one loop is used from sync code)."""
    with _loop_started:
        if not _loop:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="shop-loop", daemon=True).start()
            _loop.append(loop)
        return _loop[0]


@csrf_exempt
@require_POST
def pay_background_loop(request: HttpRequest, order_id: int) -> JsonResponse:
    """The follow-up goes to the background loop, not waited for: it asks for the lock while
    the view works on, longer than distlock.transactions.HOP_TIMEOUT, before its COMMIT."""
    with distlock.lock(f"pay:{order_id}", ttl=30, wait=10):
        result = charge(order_id)
    sent = asyncio.run_coroutine_threadsafe(_follow_up(order_id), _background_loop())
    _sent.add(sent)  # kept until it ends (not waited for)
    sent.add_done_callback(_sent.discard)
    time.sleep(VIEW_WORKS_SLOWLY)  # the view works on before its transaction commits
    return JsonResponse({"result": result})
