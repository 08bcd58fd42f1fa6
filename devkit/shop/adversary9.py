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
import concurrent.futures
import threading
import time

from asgiref.sync import sync_to_async

import distlock

from .views import charge, service_view

VIEW_WORKS_ON = 2.0  # the view's work after its service, before its transaction commits
FRAUD_CHECK = 1.5  # longer than distlock.transactions.HOP_TIMEOUT
CLIENT_AFTER = 0.1  # the client's callback comes once the fraud check runs


async def _charge_under_lock(order_id: int) -> str:
    async with distlock.lock(f"pay:{order_id}", ttl=30, wait=10):
        return await sync_to_async(charge)(order_id)


async def _pay_busy(order_id: int) -> str:
    loop = asyncio.get_running_loop()
    fraud = asyncio.ensure_future(sync_to_async(time.sleep)(FRAUD_CHECK))
    await asyncio.sleep(CLIENT_AFTER)
    result: concurrent.futures.Future[str] = concurrent.futures.Future()

    def client_thread() -> None:  # the client's callback, on a thread of its own
        sent = asyncio.run_coroutine_threadsafe(_charge_under_lock(order_id), loop)
        try:
            result.set_result(sent.result())
        except BaseException as exc:
            result.set_exception(exc)

    threading.Thread(target=client_thread, daemon=True).start()
    charged = await asyncio.wrap_future(result)
    await fraud
    return charged


pay_callback_busy = service_view(_pay_busy, works_on=VIEW_WORKS_ON)
