"""The held locks table fits a 1,100 px and a 1,280 px wide window in a real headless
Chromium: every column, the Force release button included, without scrolling sideways, with
production-like locks and with what the demo holds (issue 41: runserver's thread names)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import distlock

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def held_locks(redis_backend: str) -> list[distlock.Lock]:
    """Locks as production holds them: long names, hosts, threads and purposes."""
    held = [
        distlock.lock(
            "reports:daily:tenant-4242:eu-west-1",
            ttl=3600,
            purpose="manage.py send_digest --list weekly --tenant 4242 (cron)",
        ),
        distlock.lock(
            "demo:pay:123456", ttl=30, purpose="testproject.views.pay_with_a_rather_long_view_name"
        ),
        distlock.lock(
            "rebuild:search-index:products",
            ttl=86_400,
            reentrant=True,
            purpose="celery task shop.tasks.rebuild_search_index",
        ),
    ]
    for lock in held:
        assert lock.acquire(wait=0)
    held[2].acquire(wait=0)  # depth 2
    for _ in range(3):
        held[0].extend()  # renewals 3
    return held


def in_a_runserver_thread(hold: Callable[[], object]) -> None:
    """Run ``hold`` in a thread named as runserver names the thread serving a request."""
    thread = threading.Thread(target=hold, name="Thread-12 (process_request_thread)")
    thread.start()
    thread.join()


@pytest.fixture
def demo_locks(redis_backend: str) -> list[distlock.Lock]:
    """What the demo (scripts/demo) holds when a newcomer follows its pages: its names and
    purposes, held by runserver's request threads, and its semaphore and shared lock."""
    held = [
        distlock.lock("demo:pay:482913", ttl=60, purpose="testproject.views.pay"),
        distlock.lock("demo:rebuild-cache", ttl=60, purpose="demo cache rebuild"),
        distlock.lock("demo:charge:17", ttl=60, purpose="demo: charge an order"),
        distlock.lock("send_digest:weekly", ttl=60, purpose="manage.py send_digest --seconds 20"),
    ]
    for lock in held:
        in_a_runserver_thread(lambda lock=lock: lock.acquire(wait=0))
    export = distlock.semaphore("demo:exports", 2, ttl=60, purpose="demo: report export")
    reader = distlock.lock(
        "demo:price-list", shared=True, ttl=60, purpose="demo: price list reader"
    )
    in_a_runserver_thread(export.acquire)
    in_a_runserver_thread(reader.acquire)
    assert all(lock.locked() for lock in held) and export.owned() and reader.owned()
    return held


@pytest.mark.parametrize("data", ["held_locks", "demo_locks"])
@pytest.mark.parametrize("width", [1100, 1280])
def test_the_table_fits_the_window_with_its_release_buttons(
    page: Any,
    log_in: Callable[[str], None],
    request: pytest.FixtureRequest,
    data: str,
    width: int,
) -> None:
    held_locks: list[distlock.Lock] = request.getfixturevalue(data)
    from playwright.sync_api import expect

    page.set_viewport_size({"width": width, "height": 900})
    log_in("/admin/distlock/heldlock/")

    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(len(held_locks))
    for index in range(len(held_locks)):
        button = rows.nth(index).get_by_role("link", name="Force release")
        expect(button).to_be_visible()
        box = button.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, box
    # Every button of the page (Free permit, Release this hold too) whole inside the list.
    cut = page.evaluate("""() => {
        const right = document.querySelector('#changelist .results')
            .getBoundingClientRect().right;
        return [...document.querySelectorAll('#changelist .button')]
            .filter(button => button.getBoundingClientRect().right > right
                || button.scrollWidth > button.clientWidth)
            .map(button => button.innerText);
    }""")
    assert cut == [], f"cut off at {width} px: {cut}"
    sizes = page.evaluate("""() => {
        const results = document.querySelector('#changelist .results');
        const table = document.querySelector('#result_list');
        return {resultsScroll: results.scrollWidth, resultsClient: results.clientWidth,
                resultsRight: results.getBoundingClientRect().right,
                buttonsRight: Math.max(...[...document.querySelectorAll('.field-release a')]
                    .map(button => button.getBoundingClientRect().right)),
                tableRight: table.getBoundingClientRect().right,
                pageScroll: document.documentElement.scrollWidth,
                pageClient: document.documentElement.clientWidth};
    }""")
    assert sizes["resultsScroll"] <= sizes["resultsClient"], f"the table scrolls: {sizes}"
    assert sizes["pageScroll"] <= sizes["pageClient"], f"the page scrolls sideways: {sizes}"
    assert sizes["tableRight"] <= width, sizes
    assert sizes["buttonsRight"] <= sizes["resultsRight"], f"a button is cut off: {sizes}"
    # Nothing was dropped to make it fit.
    headers = page.locator("#result_list thead th").all_inner_texts()
    assert [" ".join(header.split()).lower() for header in headers] == [
        "name",
        "alias",
        "holder",
        "purpose",
        "acquired at",
        "expires in",
        "fencing token",
        "renewals",
        "depth",
        "waiters",
        "release",
    ]
    expect(page.get_by_role("link", name="Expiring first")).to_be_visible()  # the filters too
