"""Issue 39's ninth adversary: views of the shop served by a real gunicorn (WSGI), for
tests/core/test_transactions_adversary9.py. Every request is in a transaction
(ATOMIC_REQUESTS).

* ``pay-callback-busy``: the view runs its async service through ``async_to_sync`` (a loop
  of its own, in a thread of its own); the service starts a slow sync step in the request's
  thread (a fraud check through ``sync_to_async``, longer than
  ``distlock.transactions.HOP_TIMEOUT``), and meanwhile hands the charge to a
  callback-based client whose thread schedules the charging coroutine back on the loop
  (``asyncio.run_coroutine_threadsafe``). The coroutine's question to the request's thread
  (which transactions are open there) waits behind the fraud check; its charge then runs
  in the request's thread, inside the request's transaction. The view works on before its
  COMMIT.
"""

from __future__ import annotations

import asyncio
import threading
import time

from asgiref.sync import async_to_sync, sync_to_async
from django.db import connections
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

import distlock

from .bridge import through_a_client_thread
from .views import charge, service_view

VIEW_WORKS_ON = 2.0  # the view's work after its service, before its transaction commits
FRAUD_CHECK = 1.5  # longer than distlock.transactions.HOP_TIMEOUT
CLIENT_AFTER = 0.1  # the client's callback comes once the fraud check runs


async def _charge_under_lock(order_id: int) -> str:
    async with distlock.lock(f"pay:{order_id}", ttl=30, wait=10):
        return await sync_to_async(charge)(order_id)


async def _pay_busy(order_id: int) -> str:
    fraud = asyncio.ensure_future(sync_to_async(time.sleep)(FRAUD_CHECK))
    await asyncio.sleep(CLIENT_AFTER)
    charged = await through_a_client_thread(_charge_under_lock(order_id))
    await fraud
    return charged


pay_callback_busy = service_view(_pay_busy, works_on=VIEW_WORKS_ON)


# --- a bridged task that outlives its loop's call --------------------------------------------
# ``pay-shutdown-reconcile`` (served by gunicorn: WSGI): the view charges the order under its
# lock (the release waits for the COMMIT), then runs its async service through async_to_sync;
# the service hands a reconciler to a callback-based client whose thread schedules it on the
# loop (run_coroutine_threadsafe) and does not wait for it. The reconciler takes the
# customer's lock (its question answered: the request's thread), then waits for the
# provider's webhook; when the loop shuts down (the service returned: asyncio.run cancels
# it) it makes sure the order is paid, under the order's lock, through sync_to_async: the
# loop no longer in asgiref's loop_thread_executors, that call runs on asgiref's single
# executor thread, a connection of its own, outside the request's transaction.
async def _reconcile(order_id: int, started: asyncio.Event) -> None:
    async with distlock.lock(f"customer:{order_id}", ttl=30, wait=10):
        pass
    started.set()
    try:
        await asyncio.sleep(30)  # the provider's webhook
    except asyncio.CancelledError:
        lk = distlock.lock(f"pay:{order_id}", ttl=30, wait=0)
        if await lk.aacquire():
            try:
                await sync_to_async(_charge_on_its_thread)(order_id)
            finally:
                await lk.arelease()
        raise


def _charge_on_its_thread(order_id: int) -> str:
    try:
        return charge(order_id)
    finally:
        connections.close_all()  # the executor thread's connection ends with its call


async def _hand_to_reconciler(order_id: int) -> str:
    loop = asyncio.get_running_loop()
    started = asyncio.Event()

    def client_thread() -> None:  # the client's callback: fire and forget
        asyncio.run_coroutine_threadsafe(_reconcile(order_id, started), loop)

    threading.Thread(target=client_thread, daemon=True).start()
    await started.wait()
    return "handed on"


@csrf_exempt
@require_POST
def pay_shutdown_reconcile(request: HttpRequest, order_id: int) -> JsonResponse:
    with distlock.lock(f"pay:{order_id}", ttl=30, wait=10):
        result = charge(order_id)
    async_to_sync(_hand_to_reconciler)(order_id)
    time.sleep(0.5)  # the view works on before its COMMIT
    return JsonResponse({"result": result})
