"""Shared locks on the admin's "Held locks" page: one row with its holders, releasing one
shared hold (audited)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse

import distlock
from tests.admin.test_admin import CHANGELIST, message_texts

pytestmark = pytest.mark.django_db
RELEASE_SHARED = "admin:distlock_heldlock_release_shared"


@pytest.fixture
def readers(redis_backend: str) -> list[distlock.Lock]:
    taken = [
        distlock.lock("price-list", shared=True, ttl=60, purpose="render prices") for _ in range(2)
    ]
    for lk in taken:
        assert lk.acquire(wait=0)
    return taken


def params(lk: distlock.Lock) -> dict[str, Any]:
    return {"alias": "default", "name": lk.name, "fencing_token": lk.fencing_token}


def test_a_shared_lock_is_one_row_with_its_holders(admin_client: Client, readers) -> None:
    response = admin_client.get(reverse(CHANGELIST))
    [row] = response.context["cl"].shared_locks
    assert row.name == "price-list" and row.alias == "default"
    assert {h.info.token for h in row.holders} == {lk.token for lk in readers}
    assert all(h.info.shared for h in row.holders)
    assert row.waiters == 0
    page = response.content.decode()
    assert "Shared locks" in page and page.count(">Release this hold</a>") == 2
    assert "render prices" in page
    assert admin_client.get(reverse(CHANGELIST), {"q": "zzz"}).context["cl"].shared_locks == []


def test_releasing_one_hold_confirms_logs_and_keeps_the_others(
    admin_client: Client, readers
) -> None:
    url = reverse(RELEASE_SHARED)
    confirmation = admin_client.get(url, params(readers[0]))
    assert confirmation.status_code == 200
    assert b"release this shared hold" in confirmation.content
    assert readers[0].owned()
    response = admin_client.post(url, params(readers[0]), follow=True)
    assert any("Released the shared hold" in text for text in message_texts(response))
    assert not readers[0].owned() and readers[1].owned()
    assert "Released the shared hold" in LogEntry.objects.get().change_message
    again = admin_client.post(url, params(readers[0]), follow=True)
    assert any("Nothing was released" in text for text in message_texts(again))


def test_view_only_staff_sees_holders_but_cannot_release(staff, readers) -> None:
    client = staff("view_heldlock")
    page = client.get(reverse(CHANGELIST)).content.decode()
    assert "price-list" in page and ">Release this hold</a>" not in page
    assert client.post(reverse(RELEASE_SHARED), params(readers[0])).status_code == 403
    assert readers[0].owned()
