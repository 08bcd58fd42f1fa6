"""Acceptance, in a real headless Chromium: a lock with five processes queued for it comes
first on the "Held locks" page with its waiter count, and its detail page lists the five in
queue order with their pids."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import distlock
from devkit.processes import child_env
from tests.support.lock_helpers import queued_in_turn, read_line, spawner

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def spawn(redis_backend: str, redis_url: str) -> Iterator[Any]:
    env = child_env(kind="redis", url=redis_url)
    with spawner("tests.support.workers", env) as start:
        yield start


def test_waiters_in_the_list_and_in_queue_order_on_the_detail_page(page, log_in, spawn) -> None:
    from playwright.sync_api import expect

    contended = distlock.lock("reports:monthly", ttl=120, purpose="monthly report")
    assert contended.acquire()
    quiet = distlock.lock("emails:digest", ttl=120, purpose="newsletter")
    assert quiet.acquire()  # newer: first by age, second once waiters come first

    def join(place: int) -> Any:
        process = spawn("waiter", "reports:monthly", "1")
        read_line(process, "ready")
        return process

    waiters = queued_in_turn("reports:monthly", 5, join)

    log_in("/admin/")
    page.get_by_role("link", name="Held locks").click()

    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0).locator(".field-name")).to_have_text("reports:monthly")
    expect(rows.nth(0).locator(".field-waiters")).to_have_text("5")
    expect(rows.nth(1).locator(".field-waiters")).to_have_text("0")

    rows.nth(0).get_by_role("link", name="reports:monthly").click()
    expect(page.locator(".field-waiters")).to_have_text("5")
    expect(page.locator(".field-purpose").first).to_have_text("monthly report")
    listed = page.locator("#distlock-waiters tbody tr")
    expect(listed).to_have_count(5)
    for place, process in enumerate(waiters):
        expect(listed.nth(place).locator(".field-place")).to_have_text(str(place + 1))
        expect(listed.nth(place).locator(".field-pid")).to_have_text(str(process.pid))

    contended.release()
    for process in waiters:
        read_line(process, "acquired")
        read_line(process, "done")  # released
    page.reload()
    expect(page.locator(".distlock-empty")).to_contain_text("not held any more")
    page.get_by_role("link", name="Back to the held locks").click()
    expect(rows).to_have_count(1)
    quiet.release()
