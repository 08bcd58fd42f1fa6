"""Issue 40: every kind of view under ``@lock_view`` reaches the lock it runs under as
``request.distlock`` (its fencing token, ``lease_left()``, ``extend()``): sync and async
functions, class-based views decorated both ways (sync and async), Django REST framework's
APIView and ``@api_view``; a method that is not locked sees None. ``fence=True`` reaches the
Lock (the fence itself: tests/core/test_fence_claims.py, tests/core/test_fence_processes.py)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import transaction
from django.http import HttpResponse, JsonResponse
from django.utils.decorators import method_decorator
from django.views import View
from rest_framework.decorators import api_view
from rest_framework.response import Response
from rest_framework.views import APIView

import distlock
from distlock import lock_view
from distlock.models import Fence
from tests.support.lock_helpers import seen_from_inside

pytestmark = pytest.mark.django_db(databases=[])


@pytest.fixture(autouse=True)
def _redis(redis_backend: str) -> str:
    return redis_backend


@lock_view("fn:{order_id}", ttl=5, fence=True)
def function_view(request, order_id):
    return JsonResponse(seen_from_inside(request.distlock, f"fn:{order_id}"))


@lock_view("afn:{order_id}", ttl=5)
async def async_function_view(request, order_id):
    return JsonResponse(seen_from_inside(request.distlock, f"afn:{order_id}"))


@lock_view("cls:{order_id}", ttl=5)
class ClassView(View):
    def post(self, request, order_id):
        return JsonResponse(seen_from_inside(request.distlock, f"cls:{order_id}"))

    def get(self, request, order_id):
        return HttpResponse(repr(request.distlock))


@method_decorator(lock_view("md:{order_id}", ttl=5), name="post")
class MethodDecoratedView(View):
    def post(self, request, order_id):
        return JsonResponse(seen_from_inside(request.distlock, f"md:{order_id}"))


@lock_view("acls:{order_id}", ttl=5)
class AsyncClassView(View):
    async def post(self, request, order_id):
        return JsonResponse(seen_from_inside(request.distlock, f"acls:{order_id}"))


@lock_view("drf:{order_id}", ttl=5)
class DrfView(APIView):
    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []

    def post(self, request, order_id):
        return Response(seen_from_inside(request.distlock, f"drf:{order_id}"))


@api_view(["POST"])
@lock_view("apiview:{order_id}", ttl=5)
def drf_function_view(request, order_id):
    return Response(seen_from_inside(request.distlock, f"apiview:{order_id}"))


def check(response: Any, fence: bool = False) -> None:
    assert response.status_code == 200
    body = response.data if hasattr(response, "data") else json.loads(response.content)
    assert body["token"] == body["server_token"] and body["token"] > 0
    assert 4 < body["lease_left"] <= 5 and body["fence"] is fence


@pytest.mark.parametrize(
    "view",
    [ClassView.as_view(), MethodDecoratedView.as_view(), DrfView.as_view(), drf_function_view],
    ids=["class", "method_decorator", "drf-apiview", "drf-api_view"],
)
def test_a_view_reaches_its_lock(rf, view) -> None:
    check(view(rf.post("/", content_type="application/json"), order_id=1))


def test_a_fenced_function_view_reaches_its_lock(rf) -> None:
    check(function_view(rf.post("/"), order_id=1), fence=True)


@pytest.mark.parametrize("view", [async_function_view, AsyncClassView.as_view()])
async def test_an_async_view_reaches_its_lock(async_rf, view) -> None:
    check(await view(async_rf.post("/"), order_id=1))


def test_a_method_that_is_not_locked_sees_none(rf) -> None:
    assert ClassView.as_view()(rf.get("/"), order_id=1).content == b"None"


def test_fence_with_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="fence=True fences one holder"):
        lock_view("x", fence=True, limit=2)
    with pytest.raises(TypeError, match="fence must be True or False"):
        lock_view("x", fence="yes")


# --- a stale request is refused: 409, nothing saved ------------------------------------------
FENCED_DB = "fencing"  # a file: the async ORM's worker thread sees the same database


def newer_holder_claims(name: str) -> None:
    """Take the lock the stale view held (its lease ran out) and claim it on the database."""
    with distlock.lock(name, ttl=5, fence=True), transaction.atomic(using=FENCED_DB):
        Fence.objects.using(FENCED_DB).count()


@lock_view("stale:{order_id}", ttl=0.2, fence=True)
def stale_view(request, order_id):
    time.sleep(0.5)  # paused past its lease
    newer_holder_claims(f"stale:{order_id}")  # meanwhile, a newer request took over
    Fence.objects.using(FENCED_DB).count()  # refused here
    return HttpResponse("saved")


@lock_view("astale:{order_id}", ttl=0.2, fence=True)
async def async_stale_view(request, order_id):
    await asyncio.sleep(0.5)
    await asyncio.create_task(sync_to_async(newer_holder_claims)(f"astale:{order_id}"))
    await Fence.objects.using(FENCED_DB).acount()
    return HttpResponse("saved")


@pytest.mark.django_db(transaction=True, databases=[FENCED_DB])
def test_a_stale_sync_request_is_answered_409_and_saves_nothing(rf, caplog) -> None:
    response = stale_view(rf.post("/", HTTP_ACCEPT="application/json"), order_id=1)
    assert response.status_code == 409
    body = json.loads(response.content)
    assert "nothing was saved" in body["detail"] and body["lock"]["name"] == "stale:1"
    assert "did not take effect" in caplog.text


@pytest.mark.django_db(transaction=True, databases=[FENCED_DB])
async def test_a_stale_async_request_is_answered_409(async_rf) -> None:
    response = await async_stale_view(async_rf.post("/"), order_id=1)
    assert response.status_code == 409
    assert response.content.startswith(b"This request took too long")
