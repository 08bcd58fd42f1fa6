"""Semaphores on the admin's "Held locks" page: one row with its holders, freeing one permit."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse

import distlock
from tests.admin.test_admin import CHANGELIST, message_texts

pytestmark = pytest.mark.django_db
RELEASE_PERMIT = "admin:distlock_heldlock_release_permit"


@pytest.fixture
def permits(redis_backend: str) -> list[distlock.Semaphore]:
    taken = [distlock.semaphore("exports", 3, ttl=60, purpose="nightly export") for _ in range(2)]
    for permit in taken:
        assert permit.acquire(wait=0)
    return taken


def params(permit: distlock.Semaphore) -> dict[str, Any]:
    return {"alias": "default", "name": permit.name, "fencing_token": permit.fencing_token}


def test_a_semaphore_is_one_row_with_its_holders(admin_client: Client, permits) -> None:
    response = admin_client.get(reverse(CHANGELIST))
    [row] = response.context["cl"].semaphores
    assert row.info.name == "exports" and row.info.limit == 3
    assert {p.info.token for p in row.permits} == {p.token for p in permits}
    page = response.content.decode()
    assert "2 of 3" in page and page.count(">Free permit</a>") == 2
    assert "nightly export" in page
    assert admin_client.get(reverse(CHANGELIST), {"q": "zzz"}).context["cl"].semaphores == []


def test_freeing_one_permit_confirms_logs_and_keeps_the_others(
    admin_client: Client, permits
) -> None:
    url = reverse(RELEASE_PERMIT)
    confirmation = admin_client.get(url, params(permits[0]))
    assert confirmation.status_code == 200 and b"free this permit" in confirmation.content
    assert permits[0].owned()
    response = admin_client.post(url, params(permits[0]), follow=True)
    assert any("Freed permit" in text for text in message_texts(response))
    assert not permits[0].owned() and permits[1].owned()
    assert "Freed permit" in LogEntry.objects.get().change_message
    again = admin_client.post(url, params(permits[0]), follow=True)
    assert any("Nothing was freed" in text for text in message_texts(again))


def test_view_only_staff_sees_holders_but_cannot_free(staff, permits) -> None:
    client = staff("view_heldlock")
    page = client.get(reverse(CHANGELIST)).content.decode()
    assert "exports" in page and ">Free permit</a>" not in page
    assert client.post(reverse(RELEASE_PERMIT), params(permits[0])).status_code == 403
    assert permits[0].owned()


def test_semaphores_that_cannot_be_read_mark_the_alias_unavailable(
    admin_client: Client, permits, monkeypatch
) -> None:
    def unreachable(prefix: str = "") -> None:
        raise distlock.BackendUnavailable("Redis at the test server did not answer.")

    monkeypatch.setattr(distlock.locks["default"].semaphores, "list", unreachable)
    response = admin_client.get(reverse(CHANGELIST))
    assert response.context["cl"].semaphores == []
    assert "default" in response.context["cl"].not_counted
    assert "default (unavailable)" in response.content.decode()
