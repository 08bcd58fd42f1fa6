"""``@lock_view`` under ``ATOMIC_REQUESTS``: the lock is taken before the request's transaction
begins and released after it ends; a 409 opens no transaction; views marked
``non_atomic_requests`` and streaming responses keep working. Through Django's real request
handler (the test client), which is what wraps views in ``atomic()``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections, transaction
from django.http import HttpResponse, StreamingHttpResponse
from django.test import override_settings
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View
from rest_framework.response import Response
from rest_framework.views import APIView

import distlock
from distlock import lock_view
from distlock.handler import locks

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_backend")]
seen: list[dict[str, Any]] = []


def look(where: str, name: str) -> None:
    conn = connections["default"]
    backend: Any = locks["default"]
    info = backend.semaphores.describe(name) if name.startswith("limited") else backend.info(name)
    seen.append({"where": where, "atomic": conn.in_atomic_block, "held": info is not None})


def record_commit(name: str) -> None:
    transaction.on_commit(lambda: look("commit", name))


@lock_view("pay:{order_id}", ttl=5)
def pay(request: Any, order_id: int) -> HttpResponse:
    look("view", f"pay:{order_id}")
    record_commit(f"pay:{order_id}")
    return HttpResponse("paid")


@lock_view("limited:{order_id}", ttl=5, limit=2)
def limited(request: Any, order_id: int) -> HttpResponse:
    look("view", f"limited:{order_id}")
    return HttpResponse("ok")


@lock_view("stream:{order_id}", ttl=5)
def stream(request: Any, order_id: int) -> StreamingHttpResponse:
    def body() -> Iterator[bytes]:
        look("stream", f"stream:{order_id}")
        yield b"streamed"

    return StreamingHttpResponse(body())


@lock_view("plain:{order_id}", ttl=5)
@transaction.non_atomic_requests
def not_atomic(request: Any, order_id: int) -> HttpResponse:
    look("view", f"plain:{order_id}")
    return HttpResponse("ok")


@method_decorator(lock_view("cbv:{order_id}", ttl=5), name="dispatch")
class PayView(View):
    def post(self, request: Any, order_id: int) -> HttpResponse:
        look("view", f"cbv:{order_id}")
        return HttpResponse("paid")

    def get(self, request: Any, order_id: int) -> HttpResponse:
        look("get", f"cbv:{order_id}")
        return HttpResponse("page")


# PayView, LockedClassView and DrfPayView stay alike in shape (duplicates pairs them): each is
# one way a user decorates a class-based view (method_decorator on dispatch, the class itself,
# a DRF APIView), and the ways are what the tests compare; the views do one thing each.
@lock_view("klass:{order_id}", ttl=5)
class LockedClassView(View):
    def post(self, request: Any, order_id: int) -> HttpResponse:
        look("view", f"klass:{order_id}")
        record_commit(f"klass:{order_id}")
        return HttpResponse("paid")

    def get(self, request: Any, order_id: int) -> HttpResponse:
        look("get", f"klass:{order_id}")
        return HttpResponse("page")


@lock_view("drf:{order_id}", ttl=5)
class DrfPayView(APIView):
    def post(self, request: Any, order_id: int) -> Response:
        look("view", f"drf:{order_id}")
        record_commit(f"drf:{order_id}")
        return Response({"paid": True})


def refuse(request: Any, exc: Exception) -> HttpResponse:
    seen.append({"where": "409", "atomic": connections["default"].in_atomic_block})
    return HttpResponse("busy", status=409)


@lock_view("busy:{order_id}", ttl=5, on_locked=refuse)
def busy(request: Any, order_id: int) -> HttpResponse:
    return HttpResponse("ok")


urlpatterns = [
    path("pay/<int:order_id>", pay),
    path("limited/<int:order_id>", limited),
    path("stream/<int:order_id>", stream),
    path("plain/<int:order_id>", not_atomic),
    path("cbv/<int:order_id>", PayView.as_view()),
    path("klass/<int:order_id>", LockedClassView.as_view()),
    path("busy/<int:order_id>", busy),
    path("drf/<int:order_id>", DrfPayView.as_view()),
]


@pytest.fixture(autouse=True)
def atomic_requests(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(connections.settings["default"], "ATOMIC_REQUESTS", True)
    seen.clear()
    with override_settings(ROOT_URLCONF=__name__):
        yield


@pytest.mark.parametrize("url", ["/pay/1", "/klass/1", "/drf/1"])
def test_the_lock_is_taken_before_the_transaction_and_released_after_it(
    client: Any, url: str
) -> None:
    assert client.post(url).status_code == 200
    assert seen == [
        {"where": "view", "atomic": True, "held": True},
        {"where": "commit", "atomic": False, "held": True},
    ]
    assert locks["default"].info(url.strip("/").replace("/", ":")) is None


def test_semaphore_views_follow_the_same_rule(client: Any) -> None:
    assert client.post("/limited/1").status_code == 200
    assert seen == [{"where": "view", "atomic": True, "held": True}]


def test_a_409_opens_no_transaction(client: Any) -> None:
    with distlock.lock("busy:1", ttl=5, wait=0):
        assert client.post("/busy/1").status_code == 409
    assert seen == [{"where": "409", "atomic": False}]
    assert locks["default"].info("busy:1") is None


def test_views_marked_non_atomic_open_no_transaction(client: Any) -> None:
    assert client.post("/plain/1").status_code == 200
    assert seen == [{"where": "view", "atomic": False, "held": True}]


def test_unlocked_methods_keep_their_request_transaction(client: Any) -> None:
    assert client.get("/cbv/1").status_code == 200
    assert client.get("/klass/1").status_code == 200
    assert [s["atomic"] for s in seen] == [True, True]
    assert client.post("/cbv/1").status_code == 200
    assert seen[-1] == {"where": "view", "atomic": True, "held": True}


def test_streaming_responses_hold_the_lock_until_streamed(client: Any) -> None:
    response = client.post("/stream/1")
    assert b"".join(response.streaming_content) == b"streamed"
    assert seen == [{"where": "stream", "atomic": False, "held": True}]
    assert locks["default"].info("stream:1") is None
