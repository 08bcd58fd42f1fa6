"""Issue 39's twelfth adversary: views of the shop served by a real gunicorn (WSGI), for
tests/core/test_transactions_adversary12.py. ``export`` runs its batch in a thread pool of
its own (shut down with the request: its thread ends, and the next thread started in the
process gets the same identity).

* ``export``: a batch job turns autocommit off by hand, a query fails, and the job returns
  an error without rollback() (the bug: its connection is left in that transaction when its
  thread ends);
* ``pay-pooled/N``: the payment runs in the payments pool (a module's executor, its one
  thread started at its first job and kept: a provider call with a timeout):
  ``with atomic(), distlock.lock("pay:N")``, charged and committed there.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from django.db import DatabaseError, connection, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

import distlock

from .views import HOLD, charge


def _export_batch() -> str:
    transaction.set_autocommit(False)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM shop_no_such_table")
    except DatabaseError:
        return "export failed"  # no rollback(): autocommit left off, the transaction open
    transaction.commit()
    transaction.set_autocommit(True)
    return "exported"


@csrf_exempt
@require_POST
def export(request: HttpRequest) -> JsonResponse:
    with ThreadPoolExecutor(1) as batch:
        result = batch.submit(_export_batch).result()
    return JsonResponse({"result": result})


def _charge_locked(order_id: int) -> str:
    with (
        transaction.atomic(),
        distlock.lock(f"pay:{order_id}", ttl=30, wait=10, hold_until_commit=HOLD),
    ):
        return charge(order_id)


PAYMENTS = ThreadPoolExecutor(1, thread_name_prefix="payments")  # its thread made at first use


@csrf_exempt
@require_POST
@transaction.non_atomic_requests
def pay_pooled(request: HttpRequest, order_id: int) -> JsonResponse:
    result = PAYMENTS.submit(_charge_locked, order_id).result(timeout=30)
    return JsonResponse({"result": result})
