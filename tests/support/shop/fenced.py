"""The shop's fenced payment (issue 40), served by gunicorn in tests/faults/test_fence_processes.py:
``pay-fenced/N`` is ``@lock_view(..., fence=True)`` under ``ATOMIC_REQUESTS``, with a short
lease (SHOP_FENCED_LEASE seconds, default 1) and no renewal.

``?stop=1`` makes the request stop its own worker (SIGSTOP) once it holds the lock, before
its first statement, after writing ``PID TOKEN`` to :func:`stop_file` (the test resumes it
with SIGCONT): a holder paused past its lease, at the point where a pause does the most harm.
Each answer says what happened and the request's fencing token (``request.distlock``).
"""

from __future__ import annotations

import os
import signal

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from distlock import lock_view

from .stops import stop_file
from .views import charge

LEASE = float(os.environ.get("SHOP_FENCED_LEASE", "1"))


@csrf_exempt
@require_POST
@lock_view("fenced:{order_id}", ttl=LEASE, wait=10, fence=True)
def pay_fenced(request: HttpRequest, order_id: int) -> JsonResponse:
    token = request.distlock.fencing_token  # type: ignore[attr-defined]
    if request.GET.get("stop") == "1":
        path = stop_file(str(settings.DATABASES["default"]["NAME"]), order_id)
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"{os.getpid()} {token}")
        os.kill(os.getpid(), signal.SIGSTOP)  # resumed by the test, past the lease
    return JsonResponse({"result": charge(order_id), "token": token})
