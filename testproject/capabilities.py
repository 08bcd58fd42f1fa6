"""The demo's capability pages: shared locks, semaphores, the cache stampede, a leader, and
a lock tied to the database transaction. Each holds what it shows for a while (its lease,
without releasing), so that it can be seen on the admin's Held locks page meanwhile."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from typing import Any

from django.core.cache import cache
from django.db import OperationalError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

import distlock
import distlock.cache

from .models import Order, Payment
from .views import held_locks_url

PRICE_LIST = "demo:price-list"
#: Seconds a reader of the price list holds its shared lock (its lease: it never releases).
READ_SECONDS = 20
EXPORTS = "demo:exports"
EXPORT_LIMIT = 2
#: Seconds an export holds its permit (its lease).
EXPORT_SECONDS = 20
CATALOG = "demo:catalog"
#: Seconds building the catalog takes, and how long it stays fresh in the cache.
BUILD_SECONDS = 3
CATALOG_FRESH = 30
SCHEDULER = "demo:scheduler"
LEADER_TTL = 15
#: Seconds the payment provider takes, then the receipt before COMMIT (transaction page).
CHARGE_SECONDS = 1
RECEIPT_SECONDS = 1


def _render(request: HttpRequest, template: str, status: int = 200, **context: Any) -> HttpResponse:
    context.setdefault("message", "")
    context.setdefault("level", "")
    context["held_locks_url"] = held_locks_url()
    return render(request, f"testproject/{template}", context, status=status)


def _unavailable(request: HttpRequest, template: str, **context: Any) -> HttpResponse:
    message = "The lock server (Redis) cannot be reached, so nothing was done."
    return _render(request, template, status=503, message=message, level="error", **context)


# --- shared locks ---------------------------------------------------------------------------
def shared(request: HttpRequest) -> HttpResponse:
    """Readers of the price list share its lock; an update needs it alone."""
    if request.method != "POST":
        return _shared_page(request)
    try:
        if request.POST.get("action") == "update":
            return _update_prices(request)
        return _read_prices(request)
    except distlock.BackendUnavailable:
        return _unavailable(request, "shared.html", holders=(), read_seconds=READ_SECONDS)


def _update_prices(request: HttpRequest) -> HttpResponse:
    lock = distlock.lock(PRICE_LIST, ttl=5, wait=0, purpose="demo: price update")
    if not lock.acquire():
        return _refused(request, update=True)
    try:
        token = lock.fencing_token  # a real update would write the prices here
    finally:
        lock.release()
    message = f"Prices updated under the exclusive lock (fencing token {token})."
    return _shared_page(request, message=message, level="success")


def _read_prices(request: HttpRequest) -> HttpResponse:
    """Start a reader that holds the price list shared for READ_SECONDS, in a thread of its
    own, as a slow request of another visitor would: the request's thread holds nothing
    after it. (Held by the request's thread, a browser's kept-open connection, served again
    by that thread under runserver, would have the next "Update" ask for the exclusive lock
    its own thread holds shared: SharedLockUpgrade, not the refusal this page shows.)"""
    reader = _Reader()
    reader.start()
    reader.started.wait()
    if reader.error is not None:
        raise reader.error
    if not reader.acquired:
        return _refused(request, update=False)
    readers = len(distlock.locks["default"].shared.inspect(PRICE_LIST))
    message = (
        f"You read the price list, holding a shared lock for {READ_SECONDS} s. "
        f"Readers now: {readers}."
    )
    return _shared_page(request, message=message, level="success")


class _Reader(threading.Thread):
    """One reader: holds the price list shared for READ_SECONDS, then releases it."""

    def __init__(self) -> None:
        super().__init__(name="demo price list reader", daemon=True)
        self.started = threading.Event()
        self.acquired = False
        self.error: distlock.BackendUnavailable | None = None

    def run(self) -> None:
        lock = distlock.lock(
            PRICE_LIST,
            shared=True,
            ttl=READ_SECONDS + 5,  # released after READ_SECONDS: the lease outlasts it
            wait=0,
            purpose="demo: price list reader",
        )
        try:
            self.acquired = lock.acquire()
        except distlock.BackendUnavailable as error:
            self.error = error
        finally:
            self.started.set()
        if self.acquired:
            time.sleep(READ_SECONDS)  # reading
            with contextlib.suppress(distlock.LockError):  # a force release from the admin
                lock.release()


def _refused(request: HttpRequest, update: bool) -> HttpResponse:
    if update:
        readers = len(distlock.locks["default"].shared.inspect(PRICE_LIST))
        message = (
            f"Update refused: {readers} reader(s) hold the price list (shared). An update "
            "needs the lock alone; this one tries once (wait=0), so it is refused while any "
            "reader holds it (with wait=N it would wait up to N s for them)."
        )
    else:
        message = "Refused: an update holds the price list; this reader tries once (wait=0)."
    return _shared_page(request, message=message, level="warning", status=409)


def _shared_page(request: HttpRequest, status: int = 200, **context: Any) -> HttpResponse:
    try:
        holders = distlock.locks["default"].shared.inspect(PRICE_LIST)
    except distlock.BackendUnavailable:
        return _unavailable(request, "shared.html", holders=(), read_seconds=READ_SECONDS)
    return _render(
        request,
        "shared.html",
        status=status,
        holders=holders,
        read_seconds=READ_SECONDS,
        lock_name=PRICE_LIST,
        **context,
    )


# --- semaphores -----------------------------------------------------------------------------
def _exports() -> distlock.Semaphore:
    return distlock.semaphore(
        EXPORTS, EXPORT_LIMIT, ttl=EXPORT_SECONDS, wait=0, purpose="demo: report export"
    )


def semaphore(request: HttpRequest) -> HttpResponse:
    """At most EXPORT_LIMIT exports at once: each click takes a permit for its lease."""
    context: dict[str, Any] = {}
    try:
        if request.method == "POST":
            if _exports().acquire():
                context.update(
                    message=f"Export started: it holds a permit for {EXPORT_SECONDS} s.",
                    level="success",
                )
            else:
                context.update(
                    message=f"Refused: all {EXPORT_LIMIT} permits are taken. Try again when "
                    "an export ends.",
                    level="warning",
                    status=409,
                )
        held = _exports().holders()
    except distlock.BackendUnavailable:
        return _unavailable(request, "semaphore.html", holders=(), limit=EXPORT_LIMIT)
    return _render(
        request,
        "semaphore.html",
        holders=held.holders if held else (),
        limit=EXPORT_LIMIT,
        export_seconds=EXPORT_SECONDS,
        lock_name=EXPORTS,
        **context,
    )


# --- the cache stampede ---------------------------------------------------------------------
def _build_catalog() -> dict[str, Any]:
    """The slow part: one build per expiry, however many requests ask at once."""
    cache.add("demo:catalog-builds", 0, timeout=None)
    builds = cache.incr("demo:catalog-builds")
    time.sleep(BUILD_SECONDS)
    return {"built_at": time.strftime("%H:%M:%S"), "build": builds}


def cache_page(request: HttpRequest) -> HttpResponse:
    """``distlock.cache.get_or_set``: the second of two simultaneous requests waits for the
    first one's build instead of building too."""
    context: dict[str, Any] = {}
    if request.method == "POST":
        if request.POST.get("action") == "forget":
            cache.delete(CATALOG)
            return redirect("cache")
        started = time.monotonic()
        try:
            catalog = distlock.cache.get_or_set(
                CATALOG, _build_catalog, CATALOG_FRESH, lock_ttl=BUILD_SECONDS + 5
            )
        except distlock.LockError:
            return _unavailable(request, "cache.html", builds=None)
        took = time.monotonic() - started
        context.update(
            message=f"Catalog build #{catalog['build']}, built at {catalog['built_at']}; "
            f"this request took {took:.1f} s.",
            level="success",
        )
    return _render(
        request,
        "cache.html",
        builds=cache.get("demo:catalog-builds", 0),
        build_seconds=BUILD_SECONDS,
        fresh=CATALOG_FRESH,
        lock_name=f"distlock.cache:default:{CATALOG}",
        **context,
    )


# --- a leader -------------------------------------------------------------------------------
_leader_guard = threading.Lock()
_leader: distlock.Leader | None = None


def leader(request: HttpRequest) -> HttpResponse:
    """This server process campaigns for SCHEDULER on request; the page shows who leads."""
    global _leader
    if request.method == "POST":
        with _leader_guard:
            if _leader is None:
                _leader = distlock.leader(
                    SCHEDULER, ttl=LEADER_TTL, purpose="demo: the web server's scheduler"
                ).start()
        _leader.wait_elected(2)  # elected at once unless another process leads
        return redirect("leader")
    try:
        holder = distlock.locks["default"].info(SCHEDULER)
    except distlock.BackendUnavailable:
        return _unavailable(request, "leader.html", holder=None)
    return _render(
        request,
        "leader.html",
        holder=holder,
        me=f"{socket.gethostname()} pid {os.getpid()}",
        campaigning=_leader is not None,
        leading=_leader is not None and _leader.is_leader,
        term=_leader.term if _leader is not None else None,
        lock_name=SCHEDULER,
        ttl=LEADER_TTL,
    )


# --- a lock and the transaction -------------------------------------------------------------
def transaction_page(request: HttpRequest) -> HttpResponse:
    """A new order, and two buttons that each send two charges of it at once."""
    order = Order.objects.create()
    return _render(
        request,
        "transaction.html",
        order_id=order.pk,
        charge_seconds=CHARGE_SECONDS,
        receipt_seconds=RECEIPT_SECONDS,
    )


def _provider_charges(order_id: int) -> int:
    return cache.get(f"demo:provider-charges:{order_id}", 0)


@transaction.non_atomic_requests  # the view's own atomic(), to answer a failed COMMIT itself
@require_POST
def charge(request: HttpRequest, order_id: int) -> JsonResponse:
    """Charge the order unless it is paid, under a lock, inside a transaction that goes on
    for RECEIPT_SECONDS after the locked part. With ``hold_until_commit=False`` the lock is
    free during that second, before COMMIT: a second charge then reads "not paid yet"."""
    hold = request.POST.get("hold") == "1"
    name = f"demo:charge:{order_id}"
    try:
        with transaction.atomic():
            with distlock.lock(
                name, ttl=10, wait=10, hold_until_commit=hold, purpose="demo: charge an order"
            ):
                if Payment.objects.filter(order_id=order_id).exists():
                    detail = "Already paid: nothing charged."
                else:
                    cache.add(f"demo:provider-charges:{order_id}", 0, timeout=3600)
                    cache.incr(f"demo:provider-charges:{order_id}")  # the card is charged
                    time.sleep(CHARGE_SECONDS)  # the payment provider
                    Payment.objects.create(order_id=order_id)
                    detail = "Charged the card and recorded the payment."
            time.sleep(RECEIPT_SECONDS)  # the receipt, still before COMMIT
    except OperationalError as exc:  # SQLite refused the second write: too late for the card
        detail = f"Charged the card, then the database refused the payment record ({exc})."
    except distlock.LockError as exc:
        return JsonResponse({"detail": str(exc)}, status=503)
    return JsonResponse(
        {
            "detail": detail,
            "charges": _provider_charges(order_id),
            "payments": Payment.objects.filter(order_id=order_id).count(),
        }
    )
