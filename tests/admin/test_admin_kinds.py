"""The "Held locks" page treats every kind alike (issue 33, items 3, 4 and 5): locks, shared
locks and semaphores are counted, searched, filtered and ordered together, and each has a
page with its holders and its waiters."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import django
import pytest
from django.test import Client
from django.urls import reverse

import distlock
from distlock.handler import locks
from tests.admin.test_admin import CHANGELIST

pytestmark = pytest.mark.django_db
DETAIL = "admin:distlock_heldlock_detail"


class Waiting:
    """Acquires queued in other threads; each returns once the holders let it in."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def join(self, acquire: Callable[[], Any], queued: Callable[[], bool]) -> None:
        """Start ``acquire`` in a thread and return once ``queued()`` says it waits."""
        thread = threading.Thread(target=acquire, daemon=True)
        thread.start()
        self.threads.append(thread)
        deadline = time.monotonic() + 20
        while not queued():
            assert time.monotonic() < deadline, "the waiter never queued"
            time.sleep(0.01)


@pytest.fixture
def waiting() -> Iterator[Waiting]:
    queue = Waiting()
    yield queue
    for thread in queue.threads:
        thread.join(30)


@pytest.fixture
def every_kind(redis_backend: str, waiting: Waiting) -> Iterator[dict[str, list[Any]]]:
    """An exclusive lock, a shared lock with two readers and a writer queued, a semaphore
    with two of three permits held... and its third taken, with one more queued."""
    lock = distlock.lock("orders:1842:pay", ttl=60, purpose="POST /orders/1842/pay")
    readers = [
        distlock.lock("price-list", shared=True, ttl=60, purpose=f"render prices {n}")
        for n in range(2)
    ]
    permits = [
        distlock.semaphore("exports", 3, ttl=90, purpose=f"nightly export {n}") for n in range(3)
    ]
    for held in [lock, *readers, *permits]:
        assert held.acquire(wait=0)
    backend = locks["default"]
    writer = distlock.lock("price-list", ttl=60, purpose="update prices")
    waiting.join(
        lambda: writer.acquire(wait=30) and writer.release(),
        lambda: backend.info("price-list").waiters == 1,
    )
    extra = distlock.semaphore("exports", 3, ttl=60, purpose="one export too many")
    waiting.join(
        lambda: extra.acquire(wait=30) and extra.release(),
        lambda: backend.semaphores.describe("exports").waiting == 1,
    )
    yield {"lock": [lock], "shared": readers, "semaphore": permits}
    for held in [lock, *readers, *permits]:
        if held.owned():
            held.release()


def test_counts_search_and_alias_filter_take_every_kind(admin_client: Client, every_kind) -> None:
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert '<a href="?alias=default">default (3)</a>' in page
    assert "3 held locks" in page  # the footer: one of each kind
    # A search that matches a shared lock or a semaphore finds it, and says so.
    for query, table in (("price", "shared_list"), ("exp", "semaphore_list")):
        found = admin_client.get(reverse(CHANGELIST), {"q": query})
        page = found.content.decode()
        assert found.context["cl"].result_count == 1, query
        assert "1 result" in page and "No held lock" not in page, query
        assert f'id="{table}"' in page and 'id="result_list"' not in page, query
    nothing = admin_client.get(reverse(CHANGELIST), {"q": "zzz"}).content.decode()
    assert "No held lock has a name that starts with “zzz”." in nothing


def test_every_kind_follows_the_order(admin_client: Client, redis_backend: str) -> None:
    names = ("b-semaphore", "a-semaphore", "c-semaphore")
    held = [distlock.semaphore(name, 2, ttl=30 + 10 * n) for n, name in enumerate(names)]
    readers = [distlock.lock(name, shared=True, ttl=60 - 10 * n) for n, name in enumerate(names)]
    for one in [*held, *readers]:
        assert one.acquire(wait=0)
        time.sleep(0.005)  # acquisition times are in ms: none the same, for "newest"
    try:

        def shown(order: str) -> tuple[list[str], list[str]]:
            cl = admin_client.get(reverse(CHANGELIST), {"o": order}).context["cl"]
            return [r.info.name for r in cl.semaphores], [r.name for r in cl.shared_locks]

        assert shown("name") == (sorted(names), sorted(names))
        assert shown("expiry") == (list(names), list(reversed(names)))
        assert shown("newest") == (list(reversed(names)), list(reversed(names)))
    finally:
        for one in [*held, *readers]:
            one.release()


def detail_page(client: Client, name: str, kind: str = "") -> str:
    params = {"alias": "default", "name": name, **({"kind": kind} if kind else {})}
    response = client.get(reverse(DETAIL), params)
    assert response.status_code == 200
    return response.content.decode()


def test_each_name_links_to_its_page(admin_client: Client, every_kind) -> None:
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    base = reverse(DETAIL)
    for name, kind in (("price-list", "shared"), ("exports", "semaphore")):
        assert f'<a href="{base}?alias=default&amp;name={name}&amp;kind={kind}&amp;f=">' in page


# Each kind with several holders: its name, its page's heading, what the page says of the
# whole lock, each holder's purpose, and the link on each holder's row.
SEVERAL_HOLDERS = {
    "shared": (
        "price-list",
        "Shared lock",
        [
            "Shared lock: every holder below holds it at once",
            '<td class="field-purpose">update prices</td>',  # the writer waits
        ],
        "render prices {n}",
        ">Release this hold</a>",
    ),
    "semaphore": (
        "exports",
        "Semaphore",
        ['<td class="field-permits">3 of 3</td>', "keeps how many wait (1), not who"],
        "nightly export {n}",
        ">Free permit</a>",
    ),
}


@pytest.mark.parametrize("kind", list(SEVERAL_HOLDERS))
def test_the_page_of_a_kind_lists_every_holder_and_the_waiter(
    admin_client: Client, every_kind, kind: str
) -> None:
    name, title, facts, purpose, link = SEVERAL_HOLDERS[kind]
    page = detail_page(admin_client, name, kind)
    assert f"<h1>{title} “{name}”</h1>" in page
    for fact in facts:
        assert fact in page
    for n, held in enumerate(every_kind[kind]):
        assert f'<td class="field-fencing_token">{held.fencing_token}</td>' in page
        assert purpose.format(n=n) in page
    assert page.count(link) == len(every_kind[kind])
    assert '<td class="field-waiters">1</td>' in page
    assert "not held any more" not in page
    # Typed by hand, without the kind, the page finds the lock of that kind.
    assert f"<h1>{title} “{name}”</h1>" in detail_page(admin_client, name)


def test_the_page_of_a_lock_says_it_is_exclusive(admin_client: Client, every_kind) -> None:
    page = detail_page(admin_client, "orders:1842:pay", "lock")
    assert "<h1>Lock “orders:1842:pay”</h1>" in page
    assert '<td class="field-kind">Exclusive lock</td>' in page
    every_kind["lock"][0].release()
    assert "is not held any more" in detail_page(admin_client, "orders:1842:pay", "lock")
    bad_kind = {"alias": "default", "name": "x", "kind": "y"}
    assert admin_client.get(reverse(DETAIL), bad_kind).status_code == 400


def test_native_breadcrumbs_and_sidebar(admin_client: Client, every_kind) -> None:
    """The markup of this Django's own pages: a list of breadcrumbs on 6.1, a div before;
    the navigation sidebar on the list as on any changelist."""
    as_list = django.VERSION[:2] >= (6, 1)
    crumbs = '<ol class="breadcrumbs">' if as_list else '<div class="breadcrumbs">'
    listing = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert crumbs in listing and 'id="nav-sidebar"' in listing
    detail = detail_page(admin_client, "exports")
    assert crumbs in detail and 'id="nav-sidebar"' in detail
    if as_list:
        assert '<li aria-current="page">exports</li>' in detail
    lock = every_kind["lock"][0]
    release = admin_client.get(
        reverse("admin:distlock_heldlock_release"),
        {"alias": "default", "name": lock.name, "fencing_token": lock.fencing_token},
    ).content.decode()
    assert crumbs in release
