"""Issue 39's thirteenth adversary: a view of the shop served by a real Django threaded
server (one process: a second click on the same order is another thread of it), for
tests/core/test_transactions_adversary13.py.

* ``pay-step-commit/N`` (no request transaction): the view runs its async service through
  ``async_to_sync`` (a loop of its own, in a thread of its own); the service runs the
  payment step in the request's thread (``sync_to_async``). The step opens its block; a
  callback-based client's thread schedules ``authorized`` on the loop
  (``asyncio.run_coroutine_threadsafe``), which takes the order's lock; the step charges
  the order under it; the client's ``captured`` callback releases it (its question to the
  busy request thread unanswered: the release awaits its answer, naming the step's
  block). The step's block then COMMITs (slow where the database runs deferred work at
  COMMIT). Once the lock is taken, the view notes it in Redis (``adv13:acquired:N``), so
  that the test sends the second click only then.
"""

from __future__ import annotations

import asyncio
import threading

import redis
from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

import distlock

from .views import charge


def _note_acquired(order_id: int) -> None:
    client = redis.Redis.from_url(settings.DISTLOCK["default"]["LOCATION"])
    client.set(f"adv13:acquired:{order_id}", 1, ex=60)


def _step(order_id: int, loop: asyncio.AbstractEventLoop) -> str:
    acquired, charged, released = threading.Event(), threading.Event(), threading.Event()
    lk = distlock.lock(f"pay:{order_id}", ttl=30, wait=10)

    async def authorized() -> None:
        assert await lk.aacquire()
        acquired.set()

    async def captured() -> None:
        await lk.arelease()
        released.set()

    def client() -> None:  # the payment client's callbacks, from a thread of its own
        asyncio.run_coroutine_threadsafe(authorized(), loop).result()
        charged.wait(30)
        asyncio.run_coroutine_threadsafe(captured(), loop).result()

    with transaction.atomic():
        threading.Thread(target=client, daemon=True).start()
        if not acquired.wait(30):
            raise RuntimeError("the order's lock was not granted")
        _note_acquired(order_id)
        result = charge(order_id)
        charged.set()
        if not released.wait(30):
            raise RuntimeError("the client's release did not come")
    return result


async def _service(order_id: int) -> str:
    return await sync_to_async(_step)(order_id, asyncio.get_running_loop())


@csrf_exempt
@require_POST
@transaction.non_atomic_requests
def pay_step_commit(request: HttpRequest, order_id: int) -> JsonResponse:
    return JsonResponse({"result": async_to_sync(_service)(order_id)})
