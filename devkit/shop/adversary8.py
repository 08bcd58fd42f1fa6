"""Issue 39's eighth adversary: views of the shop served by a real uvicorn (ASGI) or
gunicorn (WSGI), for tests/core/test_transactions_adversary8.py. Every request is in a
transaction (ATOMIC_REQUESTS).

* ``pay-legacy-client``: the view runs its async service through ``async_to_sync``; the
  service first renders the receipt under the order's receipt lock inside
  ``ThreadSensitiveContext(executor=...)`` (asgiref's way to send thread-sensitive calls to
  a thread of the caller's own: here a thread-bound legacy client, one thread per process),
  then, after that block, charges the order under its lock through ``sync_to_async`` (the
  request's thread and transaction, as asgiref sends it there again). The view works on
  before its COMMIT.
* ``pay-items-slow``: the view runs its async service through ``async_to_sync``; the
  service charges the order's two items at once (``asyncio.gather``), each under the
  order's lock; the first item's charge (in the request's thread, ``sync_to_async``) takes
  longer than ``distlock.transactions.HOP_TIMEOUT`` (a slow payment provider), and the
  second item looks its price up (async) once the first is charging, then asks for the lock.
* ``pay-callback-thread``, ``pay-asyncio-run`` (served by gunicorn's sync workers) and
  ``pay-then-loyalty``: see their sections below.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, async_to_sync, sync_to_async
from django.db import connections
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

import distlock

from .bridge import through_a_client_thread
from .views import charge, service_view

VIEW_WORKS_ON = 2.0  # the view's work after its service, before its transaction commits
RECEIPT_SECONDS = 0.005
PROVIDER_SECONDS = 1.5  # longer than distlock.transactions.HOP_TIMEOUT
PRICE_LOOKUP = 0.2  # the second item's async step before it asks for the lock
ITEM_WAIT = 4.0  # each item's wait for the order's lock
# The legacy client's thread: thread-sensitive calls inside the block go there.
_legacy = ThreadPoolExecutor(max_workers=1, thread_name_prefix="legacy-client")


def _render_receipt(order_id: int) -> str:
    time.sleep(RECEIPT_SECONDS)  # no ORM: the legacy client's own work
    return f"receipt {order_id}"


async def _pay_after_receipt(order_id: int) -> str:
    async with (
        ThreadSensitiveContext(executor=_legacy),
        distlock.lock(f"receipt:{order_id}", ttl=30, wait=10),
    ):
        await sync_to_async(_render_receipt)(order_id)
    # Out of the block: thread-sensitive calls go to the request's thread again.
    async with distlock.lock(f"pay:{order_id}", ttl=30, wait=10):
        return await sync_to_async(charge)(order_id)


pay_legacy_client = service_view(_pay_after_receipt, works_on=VIEW_WORKS_ON)


def _charge_slowly(order_id: int) -> str:
    result = charge(order_id)
    time.sleep(PROVIDER_SECONDS)  # the provider confirms, in the request's thread
    return result


async def _item(order_id: int, charging: asyncio.Event, first: bool) -> str:
    if not first:
        # The price, from an async client: it comes once the first item is charging (the
        # race a slower look-up makes likely, pinned here so that a loaded machine runs the
        # same shape).
        await charging.wait()
        await asyncio.sleep(PRICE_LOOKUP)
    async with distlock.lock(f"pay:{order_id}", ttl=30, wait=ITEM_WAIT):
        if first:
            charging.set()
        return await sync_to_async(_charge_slowly)(order_id)


async def _pay_items(order_id: int) -> str:
    charging = asyncio.Event()
    first, _second = await asyncio.gather(
        _item(order_id, charging, True), _item(order_id, charging, False)
    )
    return first


pay_items_slow = service_view(_pay_items, works_on=0.05)


# --- a coroutine scheduled from a thread of the service's own ------------------------------
# ``pay-callback-thread`` (served by gunicorn: WSGI): the view runs its async service through
# async_to_sync (a loop of its own, in a thread of its own); the service hands the charge to
# a callback-based client whose thread schedules the charging coroutine back on that loop
# (``asyncio.run_coroutine_threadsafe``), as bridges to such clients do. The coroutine runs in
# a copy of that thread's context (empty), yet asgiref sends its thread-sensitive calls to the
# request's thread (the loop's executor): its charge is in the request's transaction.
async def _charge_under_lock(order_id: int) -> str:
    async with distlock.lock(f"pay:{order_id}", ttl=30, wait=10):
        return await sync_to_async(charge)(order_id)


async def _pay_through_callback_thread(order_id: int) -> str:
    return await through_a_client_thread(_charge_under_lock(order_id))


pay_callback_thread = service_view(_pay_through_callback_thread, works_on=VIEW_WORKS_ON)


# --- an event loop blocked for longer than HOP_TIMEOUT --------------------------------------
# ``pay-then-loyalty``: the view charges the order under its lock (the release waits for the
# COMMIT), then runs its async loyalty service through ``async_to_sync``: it credits the
# points under the order's lock again (the same transaction: taken back at once), while it
# renders the loyalty badge in a task of its own, CPU work on the event loop (1.5 s: any code
# that holds the loop as long, another request's included, does the same).
LOYALTY_WAIT = 4.0
LOOP_BLOCKED = 1.5  # longer than distlock.transactions.HOP_TIMEOUT


async def _credit_points(order_id: int) -> str:
    async with distlock.lock(f"pay:{order_id}", ttl=30, wait=LOYALTY_WAIT):
        return "points credited"


async def _render_badge() -> None:
    time.sleep(LOOP_BLOCKED)  # CPU work on the loop (an image library, called directly)


async def _loyalty(order_id: int) -> str:
    credited, _badge = await asyncio.gather(_credit_points(order_id), _render_badge())
    return credited


@csrf_exempt
@require_POST
def pay_then_loyalty(request: HttpRequest, order_id: int) -> JsonResponse:
    with distlock.lock(f"pay:{order_id}", ttl=30, wait=10):
        result = charge(order_id)
    async_to_sync(_loyalty)(order_id)
    return JsonResponse({"result": result})


# --- asyncio.run() in the view ----------------------------------------------------------------
# ``pay-asyncio-run`` (served by gunicorn's sync workers): the view charges the order under its
# lock (the release waits for the COMMIT), then runs its async reconciler with
# ``asyncio.run()`` (a loop in the request's own thread, instead of async_to_sync): the
# reconciler retries the charge unless it is paid, under the order's lock, through
# sync_to_async: asgiref sends those calls to its single thread-sensitive executor thread,
# a connection of its own, outside the request's transaction.
def _charge_on_its_thread(order_id: int) -> str:
    try:
        return charge(order_id)
    finally:
        connections.close_all()  # the executor thread's connection ends with its call


async def _reconcile(order_id: int) -> str:
    async with distlock.lock(f"pay:{order_id}", ttl=30, wait=2):
        return await sync_to_async(_charge_on_its_thread)(order_id)


@csrf_exempt
@require_POST
def pay_asyncio_run(request: HttpRequest, order_id: int) -> JsonResponse:
    with distlock.lock(f"pay:{order_id}", ttl=30, wait=10):
        result = charge(order_id)
    try:
        reconciled = asyncio.run(_reconcile(order_id))
    except distlock.LockNotAcquired:
        reconciled = "waited for the COMMIT"
    return JsonResponse({"result": result, "reconciled": reconciled})
