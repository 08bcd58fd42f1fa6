"""Views served by the live test server: slow payments that record, in Redis, how often and
when their body ran; and the same trivial view with and without @lock_view, for the
benchmark."""

from __future__ import annotations

import asyncio
import functools
import os
import time
from typing import Any

import redis
import redis.asyncio
from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.db import connections
from django.http import HttpRequest, HttpResponse, JsonResponse

import distlock
from distlock import lock_view

DEFAULT_SECONDS = 0.3
_clients: dict[str, Any] = {}


def data() -> redis.Redis:
    if "sync" not in _clients:
        _clients["sync"] = redis.Redis.from_url(os.environ["DISTLOCK_TEST_URL"])
    return _clients["sync"]


def adata() -> redis.asyncio.Redis:
    if "async" not in _clients:  # uvicorn serves from one event loop
        _clients["async"] = redis.asyncio.Redis.from_url(os.environ["DISTLOCK_TEST_URL"])
    return _clients["async"]


def seconds(request: HttpRequest) -> float:
    return float(request.GET.get("seconds", DEFAULT_SECONDS))


def span(order_id: str, started: float) -> str:
    """One run of a body: order, start and end on the machine's monotonic clock."""
    return f"{order_id} {started!r} {time.monotonic()!r}"


def _pay(request: HttpRequest, order_id: str) -> HttpResponse:
    data().incr(f"runs:{order_id}")
    started = time.monotonic()
    time.sleep(seconds(request))
    data().rpush("spans", span(order_id, started))
    return HttpResponse(f"paid {order_id}")


pay = lock_view("live:pay:{order_id}", ttl=10)(_pay)
queued_pay = lock_view("live:queued:{order_id}", ttl=10, wait=5)(_pay)
# At most two at once per order (a semaphore): the others refused, or queued.
limited_pay = lock_view("live:limited:{order_id}", ttl=10, limit=2)(_pay)
limited_queued_pay = lock_view("live:limited-queued:{order_id}", ttl=10, limit=2, wait=10)(_pay)


@lock_view("live:apay:{order_id}", ttl=10)
async def apay(request: HttpRequest, order_id: str) -> HttpResponse:
    await adata().incr(f"runs:{order_id}")
    started = time.monotonic()
    await asyncio.sleep(seconds(request))
    await adata().rpush("spans", span(order_id, started))
    return HttpResponse(f"paid {order_id}")


def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


# The port of the server a connection is on, per Django vendor.
SERVER_PORT_SQL = {"postgresql": "SELECT current_setting('port')::int", "mysql": "SELECT @@port"}


def process(request: HttpRequest) -> JsonResponse:
    """Which process served this (its pid), after ``?seconds=`` (default 0); and for each
    database the project has (DISTLOCK_TEST_DATABASES), its vendor and the port of the server
    this process's connection is on."""
    time.sleep(float(request.GET.get("seconds", 0)))
    databases = {}
    for alias in settings.DATABASES:
        with connections[alias].cursor() as cursor:
            cursor.execute(SERVER_PORT_SQL[connections[alias].vendor])
            (port,) = cursor.fetchone()
        databases[alias] = {"vendor": connections[alias].vendor, "port": port}
    return JsonResponse({"pid": os.getpid(), "databases": databases})


# --- benchmark: the same view with and without the decorator ---------------------------------
def timed(view: Any) -> Any:
    """Report the view's own time (decorators included) in the X-View-Seconds header."""
    if iscoroutinefunction(view):

        @functools.wraps(view)
        async def async_inner(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            started = time.perf_counter()
            response = await view(request, *args, **kwargs)
            response["X-View-Seconds"] = repr(time.perf_counter() - started)
            return response

        return async_inner

    @functools.wraps(view)
    def inner(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        started = time.perf_counter()
        response = view(request, *args, **kwargs)
        response["X-View-Seconds"] = repr(time.perf_counter() - started)
        return response

    return inner


def _ok(request: HttpRequest, order_id: str) -> HttpResponse:
    return HttpResponse("ok")


async def _aok(request: HttpRequest, order_id: str) -> HttpResponse:
    return HttpResponse("ok")


plain = timed(_ok)
locked = timed(lock_view("live:bench:{order_id}", ttl=10)(_ok))
aplain = timed(_aok)
alocked = timed(lock_view("live:abench:{order_id}", ttl=10)(_aok))


def raw(request: HttpRequest) -> JsonResponse:
    """Time ``n`` bare acquire()+release() pairs here, in the server process."""
    times = []
    for _ in range(int(request.GET.get("n", 1))):
        lk = distlock.lock("live:raw", ttl=10, wait=0)
        started = time.perf_counter()
        lk.acquire()
        lk.release()
        times.append(time.perf_counter() - started)
    return JsonResponse({"seconds": times})


async def araw(request: HttpRequest) -> JsonResponse:
    """Async twin of raw(): aacquire()+arelease() on the server's event loop."""
    times = []
    for _ in range(int(request.GET.get("n", 1))):
        lk = distlock.lock("live:araw", ttl=10, wait=0)
        started = time.perf_counter()
        await lk.aacquire()
        await lk.arelease()
        times.append(time.perf_counter() - started)
    return JsonResponse({"seconds": times})
