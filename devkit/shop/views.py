"""The patterns of docs/transactions.md, served by gunicorn against PostgreSQL or MariaDB:

* ``pay/N``: ``@lock_view`` under ``ATOMIC_REQUESTS``;
* ``pay-atomic/N``: ``with transaction.atomic(): with distlock.lock(...)``;
* ``buy``: a stock decrement, ``atomic { lock { if units > 0: units -= 1 } }``;
* ``pay-batch/N``: a batch under ``ATOMIC_REQUESTS`` that meets order N twice, one savepoint
  per item, ``with atomic(): with distlock.lock(...)``; the repeat finds the order paid and
  its savepoint rolls back (issue 31: that rollback freed the lock before the COMMIT);
* ``pay-hook-fails/N``: ``@lock_view`` under ``ATOMIC_REQUESTS`` whose transaction has a
  failing ``on_commit`` hook, with a lock taken and released inside the view;
* ``pay-service/N``: a sync view under ``ATOMIC_REQUESTS`` that calls an async service
  through ``async_to_sync``: ``async with distlock.lock(...)``, the charge through
  ``sync_to_async``; the view works on and commits (issue 39: served by uvicorn, every
  request's coroutine runs on the event loop's thread).

Each answers what it did and whether its request waited for the lock (``lock_contended``).
``SHOP_HOLD_UNTIL_COMMIT=0`` makes every lock release at once, as distlock did before
``hold_until_commit`` (the benchmark's control runs).
"""

from __future__ import annotations

import contextvars
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

import distlock
from distlock import lock_view
from distlock.signals import lock_contended

from .models import Charge, Order, Product, Sale

HOLD = os.environ.get("SHOP_HOLD_UNTIL_COMMIT", "1") == "1"
BATCH_REPEATS = 2  # how often a batch meets its order
CHARGE_SECONDS = float(os.environ.get("SHOP_CHARGE_SECONDS", "0.03"))
# The request's "waited" box: a context variable, so that a lock contended in a coroutine
# that async_to_sync runs on the event loop's thread (a copy of the request's context) marks
# its own request, never another one the same thread serves.
_waited: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "shop_waited", default=None
)


def _contended(sender: Any, **kwargs: Any) -> None:
    box = _waited.get()
    if box is not None:
        box[0] = True


lock_contended.connect(_contended)


def contention(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[..., Any]:
    """Middleware: answer ``X-Waited: 1`` when the request's lock was held by another."""

    def middleware(request: HttpRequest) -> HttpResponse:
        box = [False]
        token = _waited.set(box)
        try:
            response = get_response(request)
        finally:
            _waited.reset(token)
        response["X-Waited"] = "1" if box[0] else "0"
        return response

    return middleware


def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


def charge(order_id: int) -> str:
    """Charge the order unless it is paid: read, pay (slowly), write."""
    order = Order.objects.get(pk=order_id)
    if order.charges.exists():
        return "already paid"
    time.sleep(CHARGE_SECONDS)  # the payment provider
    Charge.objects.create(order=order, worker_pid=os.getpid())
    return "charged"


@csrf_exempt
@require_POST
@lock_view("pay:{order_id}", ttl=30, wait=10, hold_until_commit=HOLD)
def pay(request: HttpRequest, order_id: int) -> JsonResponse:
    return JsonResponse({"result": charge(order_id)})


@csrf_exempt
@require_POST
@transaction.non_atomic_requests
@transaction.atomic
@lock_view("pay:{order_id}", ttl=30, wait=10, hold_until_commit=HOLD)
def pay_inside(request: HttpRequest, order_id: int) -> JsonResponse:
    """``@lock_view`` inside the request's transaction: what ``ATOMIC_REQUESTS`` did to it
    before lock_view opened that transaction itself (its release came before COMMIT)."""
    return JsonResponse({"result": charge(order_id)})


@csrf_exempt
@require_POST
@transaction.non_atomic_requests
def pay_atomic(request: HttpRequest, order_id: int) -> JsonResponse:
    with (
        transaction.atomic(),
        distlock.lock(f"pay:{order_id}", ttl=30, wait=10, hold_until_commit=HOLD),
    ):
        result = charge(order_id)
    return JsonResponse({"result": result})


@csrf_exempt
@require_POST
@transaction.non_atomic_requests
def pay_outside(request: HttpRequest, order_id: int) -> JsonResponse:
    """The lock around the transaction: ``lock { atomic { ... } }``."""
    with distlock.lock(f"pay:{order_id}", ttl=30, wait=10), transaction.atomic():
        result = charge(order_id)
    return JsonResponse({"result": result})


@csrf_exempt
@require_POST
@transaction.non_atomic_requests
def pay_for_update(request: HttpRequest, order_id: int) -> JsonResponse:
    """The database's own lock: ``SELECT ... FOR UPDATE`` on the order, in the transaction."""
    with transaction.atomic():
        Order.objects.select_for_update().get(pk=order_id)
        result = charge(order_id)
    return JsonResponse({"result": result})


@csrf_exempt
@require_POST
@transaction.non_atomic_requests
def pay_python_redis_lock(request: HttpRequest, order_id: int) -> JsonResponse:
    """python-redis-lock (the benchmarks' anchor, when installed) in ``atomic { lock }``."""
    import redis
    import redis_lock

    client = redis.Redis.from_url(os.environ["DISTLOCK_TEST_URL"])
    with transaction.atomic():
        lock = redis_lock.Lock(client, f"prl:pay:{order_id}", expire=30)
        lock.acquire(blocking=True, timeout=10)
        try:
            result = charge(order_id)
        finally:
            lock.release()
    client.close()
    return JsonResponse({"result": result})


@csrf_exempt
@require_POST
@transaction.non_atomic_requests
def buy(request: HttpRequest) -> JsonResponse:
    with transaction.atomic(), distlock.lock("stock", ttl=30, wait=30, hold_until_commit=HOLD):
        product = Product.objects.get(pk=1)
        if product.units <= 0:
            return JsonResponse({"result": "sold out"})
        time.sleep(CHARGE_SECONDS / 3)
        product.units -= 1
        product.save(update_fields=["units"])
        Sale.objects.create(product=product)
    return JsonResponse({"result": "sold"})


class AlreadyPaid(Exception):
    """A batch item whose order is paid: its savepoint rolls back."""


@csrf_exempt
@require_POST
def pay_batch(request: HttpRequest, order_id: int) -> JsonResponse:
    """Charge a batch of items in the request's transaction (ATOMIC_REQUESTS), one savepoint
    per item; the batch meets order ``order_id`` BATCH_REPEATS times."""
    results = []
    for _ in range(BATCH_REPEATS):
        try:
            with (
                transaction.atomic(),
                distlock.lock(f"pay:{order_id}", ttl=30, wait=10, hold_until_commit=HOLD),
            ):
                result = charge(order_id)
                if result == "already paid":
                    raise AlreadyPaid  # e.g. a refusal row written, then undone
        except AlreadyPaid:
            pass
        results.append(result)
    return JsonResponse({"result": results[0], "items": results})


class HookFailed(Exception):
    """Raised by an on_commit hook, out of the request's COMMIT."""


def _failing_hook() -> None:
    raise HookFailed("the on_commit hook failed")


@csrf_exempt
@require_POST
@lock_view("hook:{order_id}", ttl=30, wait=0)
def pay_hook_fails(request: HttpRequest, order_id: int) -> JsonResponse:
    transaction.on_commit(_failing_hook)
    with distlock.lock(f"hook-inside:{order_id}", ttl=30):
        result = charge(order_id)
    return JsonResponse({"result": result})


async def charge_service(order_id: int) -> str:
    """An async payment service: the lock in the coroutine, the charge in the caller's
    thread (and transaction) through sync_to_async."""
    async with distlock.lock(f"svc:{order_id}", ttl=30, wait=10, hold_until_commit=HOLD):
        return await sync_to_async(charge)(order_id)


def service_view(
    service: Callable[[int], Awaitable[str]], works_on: float | None = None
) -> Callable[..., JsonResponse]:
    """A sync view (in its request's transaction under ATOMIC_REQUESTS) that runs the async
    ``service`` through async_to_sync, then works on before its transaction commits
    (``works_on`` seconds; CHARGE_SECONDS when None)."""

    @csrf_exempt
    @require_POST
    def pay(request: HttpRequest, order_id: int) -> JsonResponse:
        result = async_to_sync(service)(order_id)
        time.sleep(CHARGE_SECONDS if works_on is None else works_on)
        return JsonResponse({"result": result})

    return pay


pay_service = service_view(charge_service)
