"""@lock_view's metrics (distlock.metrics), through the real OpenTelemetry SDK: the template,
never the name made from a request, is the ``distlock.name``; a 409 is a wait whose outcome
is not_acquired."""

from __future__ import annotations

import pytest
from django.http import HttpResponse

import distlock
from distlock import lock_view, metrics
from tests.support.otel import collect, reader

pytestmark = pytest.mark.django_db(databases=[])


@lock_view("pay:{order_id}", ttl=10)
def pay(request, order_id):
    return HttpResponse(f"paid {order_id}")


@lock_view("exports:{region}", ttl=10, limit=2)
def export(request, region):
    return HttpResponse("exported")


@pytest.fixture(autouse=True)
def _reader(redis_backend: str) -> None:
    reader()
    collect()


def test_200_and_409_are_recorded_under_the_template(rf) -> None:
    assert pay(rf.post("/pay/7/"), order_id=7).status_code == 200
    with distlock.lock("pay:7", ttl=5, metric_name="held by the test"):
        collect()
        assert pay(rf.post("/pay/7/"), order_id=7).status_code == 409
        contended = collect()
    waits = [p for p in contended if p.instrument == metrics.WAIT_DURATION]
    assert [p.attributes for p in waits] == [
        {
            "distlock.alias": "default",
            "distlock.kind": "lock",
            "distlock.name": "pay:{order_id}",
            "distlock.outcome": "not_acquired",
        }
    ]
    assert waits[0].unit == "s" and waits[0].count == 1


def test_a_thousand_order_ids_make_one_name(rf) -> None:
    for order_id in range(1000):
        assert pay(rf.post(f"/pay/{order_id}/"), order_id=order_id).status_code == 200
    found = collect()
    names = {p.attributes["distlock.name"] for p in found}
    assert names == {"pay:{order_id}"}  # one template: one value
    waits = [p for p in found if p.instrument == metrics.WAIT_DURATION]
    holds = [p for p in found if p.instrument == metrics.HOLD_DURATION]
    assert sum(p.count for p in waits) == sum(p.count for p in holds) == 1000
    assert {p.attributes["distlock.outcome"] for p in waits} == {"acquired"}


def test_a_semaphore_view_reports_its_kind(rf) -> None:
    assert export(rf.post("/export/eu/"), region="eu").status_code == 200
    kinds = {
        (p.instrument, p.attributes["distlock.kind"], p.attributes["distlock.name"])
        for p in collect()
    }
    assert kinds == {
        (metrics.WAIT_DURATION, "semaphore", "exports:{region}"),
        (metrics.HOLD_DURATION, "semaphore", "exports:{region}"),
    }


@lock_view(ttl=10)
def unnamed(request):
    return HttpResponse("ok")


def test_a_view_locked_without_a_name_is_reported_under_the_template_lock_view_made(rf) -> None:
    from django.contrib.auth.models import AnonymousUser

    request = rf.post("/unnamed/")
    request.user = AnonymousUser()
    assert unnamed(request).status_code == 200
    names = {
        p.attributes["distlock.name"] for p in collect() if p.instrument == metrics.WAIT_DURATION
    }
    assert names == {f"{__name__}.unnamed:{{user}}"}  # as docs/observing.md says
