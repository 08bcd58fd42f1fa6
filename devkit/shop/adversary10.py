"""Issue 39's tenth adversary: views of the shop served by a real gunicorn (WSGI), for
tests/core/test_transactions_adversary10.py. Every request is in a transaction
(ATOMIC_REQUESTS).

* ``pay-callback-split``: the view runs its async service through ``async_to_sync`` (under
  WSGI a loop of its own, in a thread of its own); the service starts a fraud check in the
  request's thread (``sync_to_async``, longer than
  ``distlock.transactions.LOOP_HOP_TIMEOUT``) and hands the payment to a callback-based
  client, whose thread schedules each callback on the loop
  (``asyncio.run_coroutine_threadsafe``): ``authorized`` takes the order's lock,
  ``captured`` charges the order (``sync_to_async``: the request's thread, inside its
  transaction), starts sending the receipt (``sync_to_async``, not awaited) and releases
  the lock, its first lock call. The view works on before its COMMIT.
"""

from __future__ import annotations

import asyncio
import time

from asgiref.sync import sync_to_async

import distlock

from .bridge import through_a_client_thread
from .views import charge, service_view

VIEW_WORKS_ON = 2.0  # the view's work after its service, before its transaction commits
FRAUD_CHECK = 0.5  # longer than distlock.transactions.LOOP_HOP_TIMEOUT
CLIENT_AFTER = 0.1  # the client's first callback comes once the fraud check runs
RECEIPT_SECONDS = 0.5  # the receipt, sent once the order is charged


def _send_receipt(order_id: int) -> None:
    time.sleep(RECEIPT_SECONDS)  # the mail server; no ORM


async def _authorized(lk: distlock.Lock) -> None:
    if not await lk.aacquire():
        raise RuntimeError("the order's lock was not granted")


async def _captured(lk: distlock.Lock, order_id: int) -> str:
    charged = await sync_to_async(charge)(order_id)
    receipt = asyncio.ensure_future(sync_to_async(_send_receipt)(order_id))
    await lk.arelease()
    await receipt
    return charged


async def _pay_split(order_id: int) -> str:
    lk = distlock.lock(f"pay:{order_id}", ttl=30, wait=10)
    fraud = asyncio.ensure_future(sync_to_async(time.sleep)(FRAUD_CHECK))
    await asyncio.sleep(CLIENT_AFTER)
    await through_a_client_thread(_authorized(lk))
    charged = await through_a_client_thread(_captured(lk, order_id))
    await fraud
    return charged


pay_callback_split = service_view(_pay_split, works_on=VIEW_WORKS_ON)
