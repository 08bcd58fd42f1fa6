"""The admin's force releases are counted on ``distlock.lock.force_released`` (through the
real OpenTelemetry SDK); a release that finds the hold gone counts nothing."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

import distlock
from distlock import metrics
from tests.admin.test_admin import RELEASE
from tests.admin.test_admin_holds import RELEASE_PERMIT
from tests.support.otel import collect, fresh

pytestmark = pytest.mark.django_db


def counted() -> list[tuple[str, str, float]]:
    return sorted(
        (p.attributes["distlock.kind"], p.attributes["distlock.name"], p.total)
        for p in collect()
        if p.instrument == metrics.FORCE_RELEASED
    )


def test_force_releases_from_the_admin_are_counted(
    redis_backend: str, admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh(monkeypatch)
    lock = distlock.lock("invoice:9", ttl=60)
    assert lock.acquire()
    permit = distlock.semaphore("exports:eu", 2, ttl=60)
    assert permit.acquire()
    collect()
    shown = {"alias": "default", "name": lock.name, "fencing_token": lock.fencing_token}
    admin_client.post(reverse(RELEASE), shown)
    admin_client.post(
        reverse(RELEASE_PERMIT),
        {"alias": "default", "name": permit.name, "fencing_token": permit.fencing_token},
    )
    assert counted() == [("lock", "invoice:*", 1), ("semaphore", "exports:*", 1)]
    admin_client.post(reverse(RELEASE), shown)  # gone already: nothing released
    assert counted() == []
