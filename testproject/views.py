"""Views of the distlock demo project."""

from __future__ import annotations

import secrets
import time

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from distlock import lock_view
from distlock.views import wants_json

from .models import Order, Payment

#: Seconds the demo "rebuild" holds its lock, long enough to click the link twice.
REBUILD_SECONDS = 2
#: Seconds the demo payment takes (a call to a payment provider), long enough to double-click.
PAY_SECONDS = 1
#: The Pay lock's lease: the payment's time and a margin. A refused click is told to retry
#: when the lease ends (Retry-After), so a lease far longer than the work misleads it.
PAY_TTL = PAY_SECONDS + 2


def held_locks_url() -> str:
    """The admin's "Held locks" page, or the admin index while that page does not exist."""
    try:
        return reverse("admin:distlock_heldlock_changelist")
    except NoReverseMatch:
        return reverse("admin:index")


def _page(
    request: HttpRequest, *, message: str = "", level: str = "", status: int = 200
) -> HttpResponse:
    context = {
        "held_locks_url": held_locks_url(),
        "message": message,
        "level": level,
        "rebuild_seconds": REBUILD_SECONDS,
    }
    return render(request, "testproject/home.html", context, status=status)


def home(request: HttpRequest) -> HttpResponse:
    return _page(request)


def rebuild(request: HttpRequest) -> HttpResponse:
    """Rebuild a (pretend) cache under a lock: a second click meanwhile is turned away.

    A POST (the home page's form): browsers send identical GETs of one URL one after the
    other (Chromium waits for the first answer to cache it), so two tabs opening a link would
    never rebuild at once.
    """
    import distlock

    if request.method != "POST":
        return redirect("home")

    try:
        with distlock.lock(
            "demo:rebuild-cache", ttl=10, wait=0, purpose="demo cache rebuild"
        ) as lk:
            time.sleep(REBUILD_SECONDS)
            token = lk.fencing_token
    except distlock.LockNotAcquired:
        return _page(
            request,
            message="A rebuild is already running; try again in a moment.",
            level="warning",
            status=409,
        )
    except distlock.BackendUnavailable:
        return _page(
            request,
            message="The lock server (Redis) cannot be reached, so nothing was rebuilt.",
            level="error",
            status=503,
        )
    return _page(
        request,
        message=f"Cache rebuilt in {REBUILD_SECONDS} s under the lock (fencing token {token}).",
        level="success",
    )


# --- @lock_view: the Pay button ---------------------------------------------------------------
def _payments(order_id: int) -> int:
    return Payment.objects.filter(order_id=order_id).count()


def _charge(order_id: int) -> tuple[str, int]:
    """Charge an order unless it is paid: a check-then-act that must never run twice at once.

    It runs in the request's transaction (ATOMIC_REQUESTS), inside the lock: the lock is
    handed to a second click only after this transaction has committed, so that click reads
    this payment. Return what happened and the number of payments recorded for the order.
    """
    order, _ = Order.objects.get_or_create(pk=order_id)
    payments = order.payments.count()
    if payments:
        return f"Order {order_id} is already paid; nothing was charged.", payments
    time.sleep(PAY_SECONDS)  # the payment provider
    Payment.objects.create(order=order)
    return f"Payment recorded for order {order_id}.", payments + 1


def pay_page(request: HttpRequest) -> HttpResponse:
    """A page with a Pay button for one order (a new order unless ?order= names one)."""
    order = request.GET.get("order", "")
    order_id = int(order) if order.isdigit() else secrets.randbelow(900_000) + 100_000
    return _pay_page(request, order_id)


def _pay_page(
    request: HttpRequest, order_id: int, message: str = "", level: str = "", status: int = 200
) -> HttpResponse:
    context = {
        "order_id": order_id,
        "payments": _payments(order_id),
        "message": message,
        "level": level,
        "pay_seconds": PAY_SECONDS,
        "pay_ttl": PAY_TTL,
    }
    return render(request, "testproject/pay.html", context, status=status)


@require_POST
@lock_view("demo:pay:{order_id}", ttl=PAY_TTL)
def pay(request: HttpRequest, order_id: int) -> HttpResponse:
    """The form's target: a second click while the first is charging gets 409 Conflict."""
    detail, payments = _charge(order_id)
    if wants_json(request):  # the page's script
        return JsonResponse({"detail": detail, "payments": payments})
    return _pay_page(request, order_id, message=detail, level="success")


@csrf_exempt  # an API for scripts (curl); a real one would authenticate its clients
@require_POST
@lock_view("demo:pay:{order_id}", ttl=PAY_TTL)
def api_pay(request: HttpRequest, order_id: int) -> JsonResponse:
    """The same payment as JSON: ``curl -X POST -H 'Accept: application/json' .../api/pay/1/``."""
    detail, payments = _charge(order_id)
    return JsonResponse({"detail": detail, "payments": payments})
