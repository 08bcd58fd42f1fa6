"""The shop's fenced payment (issue 40), served by gunicorn in tests/core/test_fence_processes.py:
``pay-fenced/N`` is ``@lock_view(..., fence=True)`` under ``ATOMIC_REQUESTS``, with a short
lease (SHOP_FENCED_LEASE seconds, default 1) and no renewal: read the order's charges, and if
there is none, pay and write one.

``?stop=before`` makes the request stop its own worker (SIGSTOP) once it holds the lock,
before its first statement; ``?stop=read`` once it has read that the order is unpaid, before
it pays. Either way it first writes ``PID TOKEN`` to :func:`stop_file` (the test resumes it
with SIGCONT): a holder paused past its lease, at the two points where a pause does harm.
Each answer says what happened and the request's fencing token (``request.distlock``).
``SHOP_UNFENCED=1`` turns the fence off (the control run).
"""

from __future__ import annotations

import os
import signal

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from distlock import lock_view

from .models import Charge, Order
from .stops import stop_file

LEASE = float(os.environ.get("SHOP_FENCED_LEASE", "1"))
FENCE = os.environ.get("SHOP_UNFENCED") != "1"


def _stop_here(order_id: int, token: int) -> None:
    path = stop_file(str(settings.DATABASES["default"]["NAME"]), order_id)
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"{os.getpid()} {token}")
    os.kill(os.getpid(), signal.SIGSTOP)  # resumed by the test, past the lease


@csrf_exempt
@require_POST
@lock_view("fenced:{order_id}", ttl=LEASE, wait=10, fence=FENCE)
def pay_fenced(request: HttpRequest, order_id: int) -> JsonResponse:
    token = request.distlock.fencing_token  # type: ignore[attr-defined]
    stop = request.GET.get("stop")
    if stop == "before":
        _stop_here(order_id, token)
    order = Order.objects.get(pk=order_id)  # the fence's claim runs before this read
    if order.charges.exists():
        return JsonResponse({"result": "already paid", "token": token})
    if stop == "read":
        _stop_here(order_id, token)
    Charge.objects.create(order=order, worker_pid=os.getpid())
    if stop == "write":  # written, not yet committed (ATOMIC_REQUESTS commits after the view)
        _stop_here(order_id, token)
    return JsonResponse({"result": "charged", "token": token})
