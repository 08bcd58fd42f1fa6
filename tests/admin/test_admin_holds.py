"""The kinds with several holders on the admin's "Held locks" page, shared locks and
semaphores, each written once and run for both: one row with its holders, releasing one hold
(confirmed and audited)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse

import distlock
from tests.admin.test_admin import CHANGELIST, message_texts

pytestmark = pytest.mark.django_db
RELEASE_PERMIT = "admin:distlock_heldlock_release_permit"
RELEASE_SHARED = "admin:distlock_heldlock_release_shared"


@dataclass(frozen=True)
class Kind:
    """One kind with several holders, as its row and its release pages show it."""

    name: str  # the lock's name
    take: Callable[[], distlock.Lock]  # a holder, not acquired yet
    rows: str  # the change list's attribute with this kind's rows
    facts: Callable[[Any], tuple[Any, ...]]  # a row -> what it says of the lock
    expected: tuple[Any, ...]  # ... for the two holders the tests take
    holders: Callable[[Any], list[Any]]  # a row -> the rows of its holders
    heading: str  # on the list page, with the rows
    link: str  # on each holder's row, to release that hold
    purpose: str
    release: str  # the release page's URL name
    confirm: bytes  # the release page's question
    done: str  # said and logged once released
    nothing: str  # said when the hold was gone already


# The two records stay alike in shape (duplicates pairs them): each is one kind's words for
# the same fields, the data of the scenarios below, which are written once.
KINDS = {
    "semaphore": Kind(
        name="exports",
        take=lambda: distlock.semaphore("exports", 3, ttl=60, purpose="nightly export"),
        rows="semaphores",
        facts=lambda row: (row.info.name, row.info.limit),
        expected=("exports", 3),
        holders=lambda row: row.permits,
        heading="2 of 3",
        link=">Free permit</a>",
        purpose="nightly export",
        release=RELEASE_PERMIT,
        confirm=b"free this permit",
        done="Freed permit",
        nothing="Nothing was freed",
    ),
    "shared": Kind(
        name="price-list",
        take=lambda: distlock.lock("price-list", shared=True, ttl=60, purpose="render prices"),
        rows="shared_locks",
        facts=lambda row: (
            row.name,
            row.alias,
            row.waiters,
            all(h.info.shared for h in row.holders),
        ),
        expected=("price-list", "default", 0, True),
        holders=lambda row: row.holders,
        heading="Shared locks",
        link=">Release this hold</a>",
        purpose="render prices",
        release=RELEASE_SHARED,
        confirm=b"release this shared hold",
        done="Released the shared hold",
        nothing="Nothing was released",
    ),
}


@pytest.fixture(params=list(KINDS))
def kind(request: pytest.FixtureRequest) -> Kind:
    return KINDS[request.param]


@pytest.fixture
def holds(redis_backend: str, kind: Kind) -> list[distlock.Lock]:
    taken = [kind.take() for _ in range(2)]
    for held in taken:
        assert held.acquire(wait=0)
    return taken


def params(held: distlock.Lock) -> dict[str, Any]:
    return {"alias": "default", "name": held.name, "fencing_token": held.fencing_token}


def test_a_kind_is_one_row_with_its_holders(admin_client: Client, kind: Kind, holds) -> None:
    response = admin_client.get(reverse(CHANGELIST))
    [row] = getattr(response.context["cl"], kind.rows)
    assert kind.facts(row) == kind.expected
    assert {h.info.token for h in kind.holders(row)} == {held.token for held in holds}
    page = response.content.decode()
    assert kind.heading in page and page.count(kind.link) == 2
    assert kind.purpose in page
    assert (
        getattr(admin_client.get(reverse(CHANGELIST), {"q": "zzz"}).context["cl"], kind.rows) == []
    )


def test_releasing_one_hold_confirms_logs_and_keeps_the_others(
    admin_client: Client, kind: Kind, holds
) -> None:
    url = reverse(kind.release)
    confirmation = admin_client.get(url, params(holds[0]))
    assert confirmation.status_code == 200 and kind.confirm in confirmation.content
    assert holds[0].owned()
    response = admin_client.post(url, params(holds[0]), follow=True)
    assert any(kind.done in text for text in message_texts(response))
    assert not holds[0].owned() and holds[1].owned()
    assert kind.done in LogEntry.objects.get().change_message
    again = admin_client.post(url, params(holds[0]), follow=True)
    assert any(kind.nothing in text for text in message_texts(again))


def test_view_only_staff_sees_holders_but_cannot_release(staff, kind: Kind, holds) -> None:
    client = staff("view_heldlock")
    page = client.get(reverse(CHANGELIST)).content.decode()
    assert kind.name in page and kind.link not in page
    assert client.post(reverse(kind.release), params(holds[0])).status_code == 403
    assert holds[0].owned()


@pytest.mark.parametrize("kind", ["semaphore"], indirect=True)
def test_semaphores_that_cannot_be_read_mark_the_alias_unavailable(
    admin_client: Client, holds, monkeypatch
) -> None:
    def unreachable(prefix: str = "") -> None:
        raise distlock.BackendUnavailable("Redis at the test server did not answer.")

    monkeypatch.setattr(distlock.locks["default"].semaphores, "list", unreachable)
    response = admin_client.get(reverse(CHANGELIST))
    assert response.context["cl"].semaphores == []
    assert "default" in response.context["cl"].not_counted
    assert "default (unavailable)" in response.content.decode()
