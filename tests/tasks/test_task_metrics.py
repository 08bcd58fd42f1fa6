"""A django.tasks task under distlock.contrib.tasks.locked reports its lock name template as
``distlock.name`` (through the real OpenTelemetry SDK)."""

from __future__ import annotations

import django
import pytest

from distlock import metrics
from tests.support.otel import collect, reader

if django.VERSION < (6, 0):
    pytest.skip("django.tasks needs Django >= 6.0", allow_module_level=True)

from django.tasks import task

from distlock.contrib.tasks import locked

pytestmark = pytest.mark.django_db(databases=[])


@locked("invoice:{number}", ttl=5)
@task
def send_invoice(number: int) -> str:
    return f"sent {number}"


def test_a_task_reports_its_template(redis_backend: str) -> None:
    reader()
    collect()
    for number in range(20):
        assert send_invoice.enqueue(number).return_value == f"sent {number}"
    found = collect()
    assert {p.attributes["distlock.name"] for p in found} == {"invoice:{number}"}
    waits = [p for p in found if p.instrument == metrics.WAIT_DURATION]
    assert sum(p.count for p in waits) == 20
