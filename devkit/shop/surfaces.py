"""The ways distlock locks besides ``distlock.lock``, each charging an order with
:func:`devkit.shop.views.charge` under the lock ``pay:{order}``: for the worker processes of
tests/core/test_transactions_surfaces.py (devkit/shop/surface_worker.py), which call
them inside a ``transaction.atomic()`` block of their own.

Each surface is a function ``order_id -> result``: ``"charged"``, ``"already paid"``, or
:data:`SKIPPED` when the surface gave up because another holder had the lock. All run in the
caller's thread, inside its transaction:

* ``command``: ``call_command("shop_charge", order=N)`` (LockedCommandMixin, lock_wait 10 s);
* ``celery-task``: a ``LockedTask`` run with ``Task.apply()``, Celery's eager call (what
  ``task_always_eager`` makes ``delay()`` do), so no broker is needed; it takes its lock with
  wait=0, so a duplicate is skipped;
* ``django-task``: a ``django.tasks`` task (Django >= 6.0) decorated with
  ``contrib.tasks.locked``, enqueued on Django's ImmediateBackend, which runs it within
  ``enqueue()`` (not deferred to COMMIT); a duplicate is skipped;
* ``semaphore``: ``with distlock.semaphore("pay:N", 1, wait=10)``;
* ``lock-view-limit``: a view under ``@lock_view(limit=1, wait=10)`` called with a
  RequestFactory request (under the shop's ATOMIC_REQUESTS it opens its own atomic block,
  a savepoint of the caller's transaction, inside the lock).

Each takes its default, ``hold_until_commit=True``; ``SHOP_HOLD_UNTIL_COMMIT=0``
(devkit/shop/views.py) gives every one ``hold_until_commit=False`` instead.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from io import StringIO
from typing import Any

import django
from celery import Celery
from django.core.management import call_command
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.test import RequestFactory

import distlock
from distlock import lock_view
from distlock.contrib.celery import LockedTask, was_skipped

from . import views

HOLD = views.HOLD
# No option, the default; or hold_until_commit=False.
HOLD_OPTIONS: dict[str, Any] = {} if HOLD else {"hold_until_commit": False}
SKIPPED = "skipped"
TTL = 30
# Charges made while no transaction of the worker's was open (a surface that deferred the
# call to after COMMIT would prove nothing about the rule): the worker reports them.
charged_outside: list[int] = []
_open: list[transaction.Atomic] = []


@contextlib.contextmanager
def worker_transaction() -> Iterator[None]:
    """The worker's ``transaction.atomic()`` around one order."""
    block = transaction.atomic()
    with block:
        _open.append(block)
        try:
            yield
        finally:
            _open.remove(block)


def charge(order_id: int) -> str:
    """devkit.shop.views.charge, noting a call made outside the worker's transaction."""
    blocks = transaction.get_connection().atomic_blocks
    if not any(block in blocks for block in _open):
        charged_outside.append(order_id)
    return views.charge(order_id)


# --- LockedCommandMixin (devkit/shop/management/commands/shop_charge.py) ------------
def by_command(order_id: int) -> str:
    output = call_command("shop_charge", order=order_id, stdout=StringIO(), stderr=StringIO())
    return output or SKIPPED  # None: lock_wait ran out


# --- Celery's LockedTask ------------------------------------------------------------------
celery_app = Celery("shop", set_as_current=False)


@celery_app.task(
    base=LockedTask,
    lock_name="pay:{order_id}",
    lock_ttl=TTL,
    **{f"lock_{option}": value for option, value in HOLD_OPTIONS.items()},
)
def charge_task(order_id: int) -> str:
    return charge(order_id)


def by_celery_task(order_id: int) -> str:
    # apply(): run here, now, in this thread (and this transaction), as an eager task does.
    value = charge_task.apply(kwargs={"order_id": order_id}, throw=True).get()
    return SKIPPED if was_skipped(value) else str(value)


# --- django.tasks with contrib.tasks.locked (Django >= 6.0) -------------------------------
if django.VERSION >= (6, 0):
    from django.tasks import TaskResultStatus, task

    from distlock.contrib.tasks import locked

    @locked("pay:{order_id}", ttl=TTL, **HOLD_OPTIONS)
    @task
    def charge_django_task(order_id: int) -> str:
        return charge(order_id)

    def by_django_task(order_id: int) -> str:
        result = charge_django_task.enqueue(order_id)  # the ImmediateBackend runs it now
        if result.status != TaskResultStatus.SUCCESSFUL:
            raise RuntimeError(f"the task failed: {result.errors[-1].traceback}")
        value = result.return_value
        return SKIPPED if was_skipped(value) else str(value)


# --- semaphores ---------------------------------------------------------------------------
def by_semaphore(order_id: int) -> str:
    with distlock.semaphore(f"pay:{order_id}", 1, ttl=TTL, wait=10, **HOLD_OPTIONS):
        return charge(order_id)


# --- lock_view(limit=) --------------------------------------------------------------------
@lock_view("pay:{order_id}", limit=1, ttl=TTL, wait=10, **HOLD_OPTIONS)
def pay_view(request: HttpRequest, order_id: int) -> JsonResponse:
    return JsonResponse({"result": charge(order_id)})


def by_lock_view(order_id: int) -> str:
    response = pay_view(RequestFactory().post(f"/pay/{order_id}"), order_id=order_id)
    if response.status_code == 409:  # wait ran out
        return SKIPPED
    if response.status_code != 200:
        raise RuntimeError(f"the view answered {response.status_code}: {response.content!r}")
    return str(json.loads(response.content)["result"])


SURFACES: dict[str, Callable[[int], Any]] = {
    "command": by_command,
    "celery-task": by_celery_task,
    "semaphore": by_semaphore,
    "lock-view-limit": by_lock_view,
}
if django.VERSION >= (6, 0):
    SURFACES["django-task"] = by_django_task
