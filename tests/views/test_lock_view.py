"""@lock_view on real Redis, through RequestFactory: what is locked, what is answered, when it
is released, and every kind of view (sync, async, class-based both ways, DRF)."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import threading
import time

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils.decorators import method_decorator
from django.views import View
from rest_framework import viewsets
from rest_framework.authentication import BaseAuthentication
from rest_framework.decorators import api_view, authentication_classes, renderer_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

import distlock
from distlock import lock_view
from distlock.views import LockContended

pytestmark = pytest.mark.django_db(databases=[])


@pytest.fixture(autouse=True)
def _redis(redis_backend: str) -> str:
    return redis_backend


def backend():
    return distlock.locks["default"]


class Recorder:
    """What a view saw while it ran: whether its lock was held, and by whom."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def saw(self, name: str) -> None:
        info = backend().info(name)
        self.calls.append({"held": info is not None, "purpose": info and info.purpose})

    async def asaw(self, name: str) -> None:
        info = await backend().ainfo(name)
        self.calls.append({"held": info is not None, "purpose": info and info.purpose})


seen = Recorder()


@pytest.fixture(autouse=True)
def _fresh_recorder() -> None:
    seen.calls.clear()


@lock_view("pay:{order_id}", ttl=5)
def pay(request, order_id):
    seen.saw(f"pay:{order_id}")
    return HttpResponse(f"paid {order_id}")


@lock_view("apay:{order_id}", ttl=5)
async def apay(request, order_id):
    await seen.asaw(f"apay:{order_id}")
    return HttpResponse(f"paid {order_id}")


# --- contention: 409, Retry-After, JSON or text ---------------------------------------------
def test_free_lock_runs_the_view_under_the_lock_and_releases_it(rf) -> None:
    response = pay(rf.post("/pay/7/"), order_id=7)
    assert response.status_code == 200 and response.content == b"paid 7"
    assert seen.calls == [{"held": True, "purpose": "tests.views.test_lock_view.pay"}]
    assert backend().info("pay:7") is None


def test_held_lock_answers_409_with_retry_after_and_text(rf) -> None:
    with distlock.lock("pay:7", ttl=4.2):
        response = pay(rf.post("/pay/7/"), order_id=7)
    assert seen.calls == []
    assert response.status_code == 409
    assert response["Retry-After"] == "5"  # whole seconds, rounded up
    assert response["Content-Type"].startswith("text/plain")
    assert b"already in progress" in response.content


def test_retry_after_is_at_least_one_second(rf) -> None:
    with distlock.lock("pay:8", ttl=0.2):
        response = pay(rf.post("/pay/8/"), order_id=8)
    assert response.status_code == 409 and response["Retry-After"] == "1"


@pytest.mark.parametrize(
    "accept",
    [
        "application/json",
        "text/html, application/json;q=0.9",
        "application/problem+json",
        "application/vnd.api+json",
    ],
)
def test_json_body_when_json_is_accepted_explicitly(rf, accept: str) -> None:
    with distlock.lock("pay:9", ttl=3):
        response = pay(rf.post("/pay/9/", HTTP_ACCEPT=accept), order_id=9)
    assert response.status_code == 409 and response["Content-Type"] == "application/json"
    body = json.loads(response.content)
    assert set(body) == {"detail", "lock"}
    assert "already in progress" in body["detail"]
    assert body["lock"]["name"] == "pay:9"
    assert body["lock"]["retry_after"] == int(response["Retry-After"]) == 3
    assert "host" not in body["lock"] and "pid" not in body["lock"]  # never who holds it


@pytest.mark.parametrize(
    "accept",
    [
        None,
        "*/*",
        "text/html",
        "application/*",
        "text/html,application/xhtml+xml,*/*;q=0.8",
        "application/json;q=0",
    ],
)
def test_text_body_otherwise(rf, accept: str | None) -> None:
    headers = {} if accept is None else {"HTTP_ACCEPT": accept}
    with distlock.lock("pay:10", ttl=3):
        response = pay(rf.post("/pay/10/", **headers), order_id=10)
    assert response.status_code == 409
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response.content.decode().startswith("This request is already in progress")


def test_on_locked_replaces_the_answer(rf) -> None:
    answers = []

    def on_locked(request, exc):
        answers.append(exc)
        return JsonResponse({"busy": exc.name}, status=423)

    view = lock_view("custom:{0}", on_locked=on_locked)(lambda request, order: HttpResponse())
    with distlock.lock("custom:1", ttl=3, purpose="holder"):
        response = view(rf.post("/"), "1")
    assert response.status_code == 423 and json.loads(response.content) == {"busy": "custom:1"}
    assert isinstance(answers[0], distlock.LockNotAcquired)
    assert answers[0].holder.purpose == "holder"


def test_on_locked_may_be_a_configured_response_class(rf) -> None:
    view = lock_view("custom:{0}", on_locked=LockContended("Payment already in progress."))(
        lambda request, order: HttpResponse()
    )
    with distlock.lock("custom:2", ttl=3):
        response = view(rf.post("/"), "2")
    assert response.status_code == 409 and "Retry-After" in response
    assert response.content == b"Payment already in progress.\n"


def test_wait_queues_instead_of_refusing(rf) -> None:
    view = lock_view("queued:{0}", wait=5)(lambda request, n: HttpResponse("ran"))
    holder = distlock.lock("queued:1", ttl=10)
    holder.acquire()
    threading.Timer(0.3, holder.release).start()
    started = time.monotonic()
    response = view(rf.post("/"), "1")
    assert response.status_code == 200 and response.content == b"ran"
    assert time.monotonic() - started >= 0.25


# --- what is locked, and when it is released ------------------------------------------------
@pytest.mark.parametrize("method", ["get", "head", "options"])
def test_safe_methods_are_never_locked(rf, method: str) -> None:
    with distlock.lock("pay:11", ttl=3):
        response = pay(getattr(rf, method)("/pay/11/"), order_id=11)
    assert response.status_code == 200 and len(seen.calls) == 1  # ran beside the holder


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_unsafe_methods_are_locked(rf, method: str) -> None:
    with distlock.lock("pay:12", ttl=3):
        response = pay(getattr(rf, method)("/pay/12/"), order_id=12)
    assert response.status_code == 409 and seen.calls == []


def test_methods_choose_what_is_locked(rf) -> None:
    view = lock_view("report", methods=["get"])(lambda request: HttpResponse("ok"))
    with distlock.lock("report", ttl=3):
        assert view(rf.get("/")).status_code == 409
        assert view(rf.post("/")).status_code == 200


def test_an_exception_in_the_view_releases_the_lock(rf) -> None:
    @lock_view("boom:{0}")
    def boom(request, key):
        assert backend().info("boom:1") is not None
        raise RuntimeError("view failed")

    with pytest.raises(RuntimeError, match="view failed"):
        boom(rf.post("/"), "1")
    assert backend().info("boom:1") is None


def test_lease_lost_while_the_view_ran_is_logged_not_raised(rf, caplog) -> None:
    @lock_view("short", ttl=0.05)
    def slow(request):
        time.sleep(0.15)
        return HttpResponse("done")

    with caplog.at_level(logging.WARNING, logger="distlock"):
        response = slow(rf.post("/"))
    assert response.status_code == 200
    assert "longer ttl" in caplog.text


# --- streaming responses hold the lock until the stream ends ---------------------------------
def test_streaming_response_holds_the_lock_until_consumed(rf) -> None:
    @lock_view("stream")
    def stream(request):
        return StreamingHttpResponse(iter([b"a", b"b"]))

    response = stream(rf.post("/"))
    assert backend().info("stream") is not None
    assert b"".join(response) == b"ab"
    assert backend().info("stream") is None
    response.close()  # what servers do next: harmless


def test_streaming_response_closed_early_releases_the_lock(rf) -> None:
    @lock_view("stream-closed")
    def stream(request):
        return StreamingHttpResponse(iter([b"a", b"b"]))

    response = stream(rf.post("/"))
    next(iter(response))
    assert backend().info("stream-closed") is not None
    response.close()  # the server does this when the client went away
    assert backend().info("stream-closed") is None


def test_streaming_response_dropped_unclosed_releases_when_collected(rf) -> None:
    """A sync view under ASGI whose client left before it returned: Django drops the response."""

    @lock_view("stream-dropped")
    def stream(request):
        return StreamingHttpResponse(iter([b"a"]))

    response = stream(rf.post("/"))
    assert backend().info("stream-dropped") is not None
    del response
    gc.collect()
    assert backend().info("stream-dropped") is None


async def test_async_streaming_response_holds_the_lock_until_consumed(async_rf) -> None:
    async def chunks():
        yield b"a"
        yield b"b"

    @lock_view("astream")
    async def stream(request):
        return StreamingHttpResponse(chunks())

    response = await stream(async_rf.post("/"))
    assert await backend().ainfo("astream") is not None
    assert b"".join([part async for part in response]) == b"ab"
    assert await backend().ainfo("astream") is None


# --- async views --------------------------------------------------------------------------
async def test_async_view_runs_under_the_lock(async_rf) -> None:
    response = await apay(async_rf.post("/apay/3/"), order_id=3)
    assert response.status_code == 200
    assert seen.calls == [{"held": True, "purpose": "tests.views.test_lock_view.apay"}]
    assert await backend().ainfo("apay:3") is None


async def test_async_view_answers_409(async_rf) -> None:
    holder = distlock.lock("apay:4", ttl=3)
    await holder.aacquire()
    response = await apay(
        async_rf.post("/apay/4/", headers={"Accept": "application/json"}), order_id=4
    )
    await holder.arelease()
    assert response.status_code == 409 and response["Retry-After"] == "3"
    assert json.loads(response.content)["lock"]["name"] == "apay:4"
    assert seen.calls == []


async def test_async_exception_releases_the_lock(async_rf) -> None:
    @lock_view("aboom")
    async def boom(request):
        raise ValueError("nope")

    with pytest.raises(ValueError, match="nope"):
        await boom(async_rf.post("/"))
    assert await backend().ainfo("aboom") is None


async def test_cancelled_async_view_releases_the_lock(async_rf) -> None:
    """Django cancels an async view whose client disconnected."""
    started = asyncio.Event()

    @lock_view("acancel")
    async def slow(request):
        started.set()
        await asyncio.sleep(30)

    task = asyncio.ensure_future(slow(async_rf.post("/")))
    await started.wait()
    assert await backend().ainfo("acancel") is not None
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await backend().ainfo("acancel") is None


async def test_async_view_default_name_uses_the_client_address(async_rf) -> None:
    @lock_view()
    async def view(request):
        return JsonResponse({"held": [i.name for i in await backend().aheld()]})

    response = await view(async_rf.post("/"))  # from 127.0.0.1
    assert json.loads(response.content)["held"] == [
        "tests.views.test_lock_view.test_async_view_default_name_uses_the_client_address.<locals>"
        ".view:ip127.0.0.1"
    ]


async def test_async_view_user_comes_from_auser(async_rf) -> None:
    @lock_view("{user}")
    async def view(request):
        return JsonResponse({"held": [i.name for i in await backend().aheld()]})

    async def auser():
        return Visitor(21)

    request = async_rf.post("/")
    request.auser = auser
    response = await view(request)
    assert json.loads(response.content)["held"] == ["user21"]


async def test_async_view_user_without_auser_is_looked_up_in_a_thread(async_rf) -> None:
    """Django 4.2 has no request.auser(): request.user may only be evaluated off the loop."""
    from django.utils.functional import SimpleLazyObject

    @lock_view("{user}")
    async def view(request):
        return JsonResponse({"held": [i.name for i in await backend().aheld()]})

    def load_user():
        with pytest.raises(RuntimeError):  # would be a SynchronousOnlyOperation on the loop
            asyncio.get_running_loop()
        return Visitor(22)

    request = async_rf.post("/")
    request.user = SimpleLazyObject(load_user)
    response = await view(request)
    assert json.loads(response.content)["held"] == ["user22"]


# --- class-based views --------------------------------------------------------------------
@lock_view("cbv:{order_id}", ttl=5)
class PayView(View):
    def get(self, request, order_id):
        return HttpResponse("get")

    def post(self, request, order_id):
        seen.saw(f"cbv:{order_id}")
        return HttpResponse("posted")


class MethodDecoratedView(View):
    @method_decorator(lock_view("md:{order_id}", ttl=5))
    def post(self, request, order_id):
        seen.saw(f"md:{order_id}")
        return HttpResponse("posted")


@method_decorator(lock_view("mdd:{order_id}", ttl=5), name="dispatch")
class DispatchDecoratedView(View):
    def post(self, request, order_id):
        seen.saw(f"mdd:{order_id}")
        return HttpResponse("posted")


@lock_view("acbv:{order_id}", ttl=5)
class AsyncPayView(View):
    async def post(self, request, order_id):
        await seen.asaw(f"acbv:{order_id}")
        return HttpResponse("posted")


@method_decorator(lock_view("amdd:{order_id}", ttl=5), name="dispatch")
class AsyncDispatchDecoratedView(View):
    async def post(self, request, order_id):
        await seen.asaw(f"amdd:{order_id}")
        return HttpResponse("posted")


@pytest.mark.parametrize(
    ("view_class", "prefix", "purpose"),
    [
        (PayView, "cbv", "tests.views.test_lock_view.PayView"),
        (MethodDecoratedView, "md", "tests.views.test_lock_view.MethodDecoratedView.post"),
        (DispatchDecoratedView, "mdd", "tests.views.test_lock_view.DispatchDecoratedView.dispatch"),
    ],
)
def test_class_based_views(rf, view_class, prefix: str, purpose: str) -> None:
    view = view_class.as_view()
    assert view(rf.post("/"), order_id=5).status_code == 200
    assert seen.calls == [{"held": True, "purpose": purpose}]
    with distlock.lock(f"{prefix}:5", ttl=2):
        response = view(rf.post("/"), order_id=5)
    assert response.status_code == 409 and response["Retry-After"] == "2"
    assert len(seen.calls) == 1
    assert backend().info(f"{prefix}:5") is None


def test_class_decoration_leaves_other_methods_unlocked(rf) -> None:
    with distlock.lock("cbv:6", ttl=2):
        assert PayView.as_view()(rf.get("/"), order_id=6).content == b"get"


@pytest.mark.parametrize(
    ("view_class", "prefix"), [(AsyncPayView, "acbv"), (AsyncDispatchDecoratedView, "amdd")]
)
async def test_async_class_based_views(async_rf, view_class, prefix: str) -> None:
    view = view_class.as_view()
    assert (await view(async_rf.post("/"), order_id=5)).status_code == 200
    assert seen.calls[0]["held"] is True
    holder = distlock.lock(f"{prefix}:5", ttl=2)
    await holder.aacquire()
    response = await view(async_rf.post("/"), order_id=5)
    await holder.arelease()
    assert response.status_code == 409 and len(seen.calls) == 1


def test_forgotten_parentheses_say_so(rf) -> None:
    @lock_view
    def view(request):
        return HttpResponse()

    with pytest.raises(TypeError, match=r"@lock_view\(\) with parentheses"):
        view(rf.post("/"))


def test_decorating_a_class_without_dispatch_fails() -> None:
    with pytest.raises(TypeError, match="dispatch"):
        lock_view("x")(type("NotAView", (), {}))


# --- Django REST framework ------------------------------------------------------------------
class Visitor:
    is_authenticated = True

    def __init__(self, pk: int) -> None:
        self.pk = pk


class HeaderAuthentication(BaseAuthentication):
    """Authenticates the user named in X-User: DRF's own authentication, not Django's."""

    def authenticate(self, request):
        pk = request.headers.get("X-User")
        return (Visitor(int(pk)), None) if pk else None


@lock_view(ttl=5)
class DrfPayView(APIView):
    authentication_classes = [HeaderAuthentication]
    renderer_classes = [JSONRenderer]

    def post(self, request, order_id):
        return Response({"held": [info.name for info in backend().held()]})


@api_view(["POST"])
@authentication_classes([HeaderAuthentication])
@renderer_classes([JSONRenderer])
@lock_view("drf-fn:{order_id}:{user}", ttl=5)
def drf_pay(request, order_id):
    return Response({"held": [info.name for info in backend().held()]})


@lock_view("drf-viewset:{pk}", ttl=5)
class OrderViewSet(viewsets.ViewSet):
    authentication_classes = [HeaderAuthentication]
    renderer_classes = [JSONRenderer]

    def update(self, request, pk):
        return Response({"held": [info.name for info in backend().held()]})

    def retrieve(self, request, pk):
        return Response({"held": [info.name for info in backend().held()]})


def test_drf_class_view_locks_per_authenticated_user(rf) -> None:
    view = DrfPayView.as_view()
    response = view(rf.post("/", HTTP_X_USER="7"), order_id=1)
    response.render()
    assert json.loads(response.content) == {"held": ["tests.views.test_lock_view.DrfPayView:user7"]}
    with distlock.lock("tests.views.test_lock_view.DrfPayView:user7", ttl=2):
        assert view(rf.post("/", HTTP_X_USER="7"), order_id=1).status_code == 409
        assert view(rf.post("/", HTTP_X_USER="8"), order_id=1).status_code == 200


def test_drf_request_refused_by_permissions_never_takes_the_lock(rf) -> None:
    @lock_view("denied")
    class Guarded(APIView):
        permission_classes = [IsAuthenticated]
        renderer_classes = [JSONRenderer]

        def post(self, request):
            return Response({})

    with distlock.lock("denied", ttl=2):  # a request that took the lock would get 409
        assert Guarded.as_view()(rf.post("/")).status_code == 403


def test_drf_function_view(rf) -> None:
    response = drf_pay(rf.post("/", HTTP_X_USER="3"), order_id=2)
    response.render()
    assert json.loads(response.content) == {"held": ["drf-fn:2:user3"]}
    with distlock.lock("drf-fn:2:user3", ttl=2):
        response = drf_pay(
            rf.post("/", HTTP_X_USER="3", HTTP_ACCEPT="application/json"), order_id=2
        )
    assert response.status_code == 409
    assert json.loads(response.content)["lock"]["name"] == "drf-fn:2:user3"


def test_drf_viewset_actions(rf) -> None:
    view = OrderViewSet.as_view({"put": "update", "get": "retrieve"})
    response = view(rf.put("/"), pk="4")
    response.render()
    assert json.loads(response.content) == {"held": ["drf-viewset:4"]}
    with distlock.lock("drf-viewset:4", ttl=2):
        assert view(rf.put("/"), pk="4").status_code == 409
        assert view(rf.get("/"), pk="4").status_code == 200


# --- names at decoration and at the first call -----------------------------------------------
def test_unknown_keyword_field_fails_at_decoration() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"\{order\}"):

        @lock_view("pay:{order}")
        def view(request, order_id): ...


def test_missing_field_fails_at_first_call_naming_it(rf) -> None:
    view = lock_view("pay:{order_id}")(lambda request, **kwargs: HttpResponse())
    with pytest.raises(ImproperlyConfigured, match=r"\{order_id\}"):
        view(rf.post("/"), pk=1)
    positional = lock_view("pay:{1}")(lambda request, *args: HttpResponse())
    with pytest.raises(ImproperlyConfigured, match=r"\{1\}"):
        positional(rf.post("/"), "only one")


def test_missing_request_attribute_fails_naming_it(rf) -> None:
    view = lock_view("x:{request.nothing_here}")(lambda request: HttpResponse())
    with pytest.raises(ImproperlyConfigured, match="nothing_here"):
        view(rf.post("/"))


def test_request_attributes_positional_arguments_and_formats(rf) -> None:
    names = []

    @lock_view("{request.path}:{0}:{1!r}:{n:03d}")
    def view(request, first, second, n):
        names.extend(info.name for info in backend().held())
        return HttpResponse()

    view(rf.post("/a b/"), "x/y", "z", n=7)
    assert names == ["%2Fa%20b%2F:x%2Fy:%27z%27:007"]


def test_callable_name(rf) -> None:
    names = []

    def name(request, order_id):
        return f"cart:{request.POST['cart']}:{order_id}"

    @lock_view(name)
    def view(request, order_id):
        names.extend(info.name for info in backend().held())
        return HttpResponse()

    view(rf.post("/", {"cart": "c1"}), order_id=3)
    view(rf.post("/", {"cart": "x" * 2000}), order_id=3)  # too long: digested, never raises
    assert names[0] == "cart:c1:3"
    assert names[1].startswith("%%") and len(names[1]) == 66


def test_user_value_prefers_user_then_session_then_address(rf) -> None:
    from django.contrib.auth.models import AnonymousUser

    names = []
    view = lock_view("{user}")(
        lambda request: names.append(backend().held()[0].name) or HttpResponse()
    )
    request = rf.post("/", REMOTE_ADDR="192.0.2.1")
    request.user = Visitor(12)
    view(request)
    request.user = AnonymousUser()
    request.session = type("Session", (), {"session_key": "secret-session-key"})()
    view(request)
    del request.session
    view(request)
    assert names[0] == "user12"
    assert names[1].startswith("session") and "secret" not in names[1]
    assert names[2] == "ip192.0.2.1"


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"ttl": 0}, ValueError),
        ({"ttl": "5"}, TypeError),
        ({"wait": -1}, ValueError),
        ({"wait": True}, TypeError),
        ({"methods": "POST"}, TypeError),
        ({"methods": []}, ValueError),
        ({"methods": ["PO ST"]}, ValueError),
        ({"using": 3}, TypeError),
        ({"on_locked": "409"}, TypeError),
        ({"fail_open": 1}, TypeError),
        ({"name": 5}, TypeError),
        ({"name": "a{b}{c}"}, ValueError),
        ({"name": "{b[0]}"}, ValueError),
        ({"limit": 0}, ValueError),
        ({"limit": "2"}, TypeError),
        ({"limit": True}, TypeError),
    ],
)
def test_bad_arguments_fail_at_decoration(arguments: dict, error: type) -> None:
    with pytest.raises(error):
        lock_view(**arguments)


def test_limit_lets_that_many_run_and_answers_the_next_with_409(rf) -> None:
    view = lock_view("limited:{0}", ttl=5, limit=2)(lambda request, key: HttpResponse("ran"))
    running = [distlock.semaphore("limited:k", 2, ttl=5) for _ in range(2)]
    assert running[0].acquire(wait=0)
    assert view(rf.post("/"), "k").status_code == 200  # one of two permits was free
    assert running[1].acquire(wait=0)
    refused = view(rf.post("/", HTTP_ACCEPT="application/json"), "k")
    assert refused.status_code == 409 and int(refused["Retry-After"]) >= 1
    assert json.loads(refused.content)["lock"]["name"] == "limited:k"
    running[0].release()
    assert view(rf.post("/"), "k").status_code == 200
    running[1].release()


async def test_limit_on_an_async_view(async_rf) -> None:
    @lock_view("alimited:{0}", ttl=5, limit=1)
    async def view(request, key):
        return HttpResponse("ran")

    holder = distlock.semaphore("alimited:k", 1, ttl=5)
    assert await holder.aacquire(wait=0)
    assert (await view(async_rf.post("/"), "k")).status_code == 409
    await holder.arelease()
    assert (await view(async_rf.post("/"), "k")).status_code == 200


# --- Redis unreachable (acceptance 5) -------------------------------------------------------
def test_redis_stopped_answers_503_by_default(rf, private_redis, caplog) -> None:
    ran = []
    view = lock_view("down:{0}")(lambda request, key: ran.append(key) or HttpResponse())
    private_redis.stop()
    with caplog.at_level(logging.ERROR, logger="distlock"):
        response = view(rf.post("/", HTTP_ACCEPT="application/json"), "1")
    assert response.status_code == 503 and ran == []
    body = json.loads(response.content)
    assert "lock service is unavailable" in body["detail"] and body["lock"]["name"] == "down:1"
    assert response["Retry-After"] == "5" and body["lock"]["retry_after"] == 5  # issue 40
    assert "503" in caplog.text
    assert view(rf.post("/"), "1").content.startswith(b"The lock service is unavailable")


def test_redis_stopped_runs_the_view_with_fail_open(rf, private_redis, caplog) -> None:
    ran = []
    view = lock_view("down:{0}", fail_open=True)(
        lambda request, key: ran.append(key) or HttpResponse("ran")
    )
    private_redis.stop()
    with caplog.at_level(logging.WARNING, logger="distlock"):
        response = view(rf.post("/"), "2")
    assert response.status_code == 200 and ran == ["2"]
    assert "WITHOUT its lock 'down:2'" in caplog.text


async def test_redis_stopped_async(async_rf, private_redis) -> None:
    ran = []

    @lock_view("adown")
    async def closed(request):
        ran.append("closed")
        return HttpResponse()

    @lock_view("adown", fail_open=True)
    async def opened(request):
        ran.append("open")
        return HttpResponse()

    private_redis.stop()
    assert (await closed(async_rf.post("/"))).status_code == 503
    assert (await opened(async_rf.post("/"))).status_code == 200
    assert ran == ["open"]


def test_redis_gone_after_the_view_ran_keeps_the_response(rf, private_redis, caplog) -> None:
    @lock_view("gone")
    def view(request):
        private_redis.stop()
        return HttpResponse("charged")

    with caplog.at_level(logging.WARNING, logger="distlock"):
        response = view(rf.post("/"))
    assert response.status_code == 200 and response.content == b"charged"
    assert "ends with its lease" in caplog.text
