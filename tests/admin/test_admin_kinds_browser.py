"""Acceptance for the "Held locks" page, in a real headless Chromium (issue 33, items 3 to 7):
every kind (locks, shared locks, semaphores) is counted, searched and has a page with its
waiters; the page looks like the admin's own (styled breadcrumbs, the navigation sidebar,
dark mode) from 1,100 to 1,920 px, its buttons whole on one line and its names wrapped
between their parts. The test takes the README's screenshots (docs/img/) as it goes, so they
show the page as it is.

On the Django the README shows (6.1 and later) the screenshots replace docs/img/'s; on an
older one (the oldest leg, scripts/test-legs) they go to a temporary directory.
DISTLOCK_SCREENSHOT_DIR keeps every width and theme taken, to look at.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import django
import pytest

import distlock
from devkit.paths import ROOT
from distlock.handler import locks

README_IMAGES = ROOT / "docs" / "img"
README_DJANGO = (6, 1)  # the version the README's screenshots show
README_WIDTH = 1366
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# (alias, name, ttl, purpose, thread, depth, renewals), as a project holds them
LOCKS = [
    ("default", "orders:1842:pay", 30, "POST /orders/1842/pay", "Thread-12", 1, 0),
    ("default", "reports:daily", 600, "manage.py build_daily_report", "MainThread", 1, 4),
    (
        "default",
        "search:reindex",
        300,
        "celery task search.rebuild_index",
        "ForkPoolWorker-3",
        2,
        1,
    ),
    (
        "default",
        "reports:daily:tenant-4242:eu-west-1:warehouse/stock-levels",
        3600,
        "manage.py send_digest --list weekly --tenant 4242 (cron)",
        "MainThread",
        1,
        3,
    ),
    ("billing", "invoices:close-month", 900, "manage.py close_month", "MainThread", 1, 2),
    ("billing", "stripe:webhook:evt_1PQ", 20, "POST /webhooks/stripe/", "Thread-7", 1, 0),
]


@dataclass
class Scene:
    held: list[Any] = field(default_factory=list)
    waiters: list[threading.Thread] = field(default_factory=list)

    def in_thread(self, thread: str, call: Callable[[], Any]) -> None:
        """Run ``call`` in a thread named ``thread`` (the Holder column shows it)."""
        worker = threading.Thread(target=call, name=thread)
        worker.start()
        worker.join()

    def queue(self, lock: Any, queued: Callable[[], bool]) -> None:
        """Queue ``lock`` in a thread of its own (it takes its turn, then lets go)."""
        worker = threading.Thread(
            target=lambda: lock.acquire(wait=120) and lock.release(),
            name=f"Thread-{31 + len(self.waiters)}",
            daemon=True,
        )
        worker.start()
        self.waiters.append(worker)
        while not queued():
            threading.Event().wait(0.01)


@pytest.fixture
def scene(settings: Any, redis_backend: str) -> Iterator[Scene]:
    """Locks of two aliases, a lock with two waiters, a shared lock with three readers and a
    writer queued, a semaphore with its two permits held and one more waiting."""
    settings.DISTLOCK = {
        **settings.DISTLOCK,
        "billing": {**settings.DISTLOCK["default"], "KEY_PREFIX": "billing"},
    }
    locks.reset()
    made = Scene()
    for alias, name, ttl, purpose, thread, depth, renewals in LOCKS:
        lock = distlock.lock(name, ttl=ttl, using=alias, purpose=purpose, reentrant=depth > 1)

        def take(lock: Any = lock, depth: int = depth, renewals: int = renewals) -> None:
            for _ in range(depth):
                assert lock.acquire(wait=0)
            for _ in range(renewals):
                lock.extend()

        made.in_thread(thread, take)
        made.held.append(lock)
    backend = locks["default"]
    for n, purpose in enumerate(["manage.py build_daily_report --retry", "POST /reports/run"]):
        made.queue(
            distlock.lock("reports:daily", ttl=60, purpose=purpose),
            lambda n=n: backend.info("reports:daily").waiters == n + 1,
        )
    for n in range(3):
        reader = distlock.lock("price-list", shared=True, ttl=120, purpose=f"GET /prices?page={n}")
        made.in_thread(f"Thread-{20 + n}", lambda reader=reader: reader.acquire(wait=0))
        made.held.append(reader)
    made.queue(
        distlock.lock("price-list", ttl=60, purpose="manage.py import_prices"),
        lambda: backend.info("price-list").waiters == 1,
    )
    for n in range(2):
        permit = distlock.semaphore("exports:pdf", 2, ttl=300, purpose=f"celery task export {n}")
        made.in_thread(f"ForkPoolWorker-{n + 1}", lambda permit=permit: permit.acquire(wait=0))
        made.held.append(permit)
    made.queue(
        distlock.semaphore("exports:pdf", 2, ttl=300, purpose="celery task export 2"),
        lambda: backend.semaphores.describe("exports:pdf").waiting == 1,
    )
    yield made
    for held in made.held:
        if held.owned():
            held.release()
    for worker in made.waiters:
        worker.join(30)
    assert not any(worker.is_alive() for worker in made.waiters)


def test_every_kind_is_counted_searched_and_has_its_waiters_page(
    page: Any, log_in: Callable[[str], None], scene: Scene
) -> None:
    from playwright.sync_api import expect

    log_in("/admin/distlock/heldlock/")
    page.wait_for_selector("#result_list")
    # 6 locks, 1 shared lock, 1 semaphore; the default alias has 6 of them.
    expect(page.locator(".paginator")).to_contain_text("8 held locks")
    expect(page.get_by_role("link", name="default (6)")).to_be_visible()
    expect(page.get_by_role("link", name="billing (2)")).to_be_visible()
    expect(
        page.locator("#changelist-filter li.selected", has_text="Most waiters first")
    ).to_be_visible()
    first = page.locator("#result_list tbody tr").first
    expect(first.locator(".field-name")).to_have_text("reports:daily")
    expect(first.locator(".field-waiters")).to_have_text("2")

    # A search that matches a shared lock or a semaphore finds it.
    for query, table, name in (
        ("price", "#shared_list", "price-list"),
        ("exp", "#semaphore_list", "exports:pdf"),
    ):
        page.fill("#searchbar", query)
        page.press("#searchbar", "Enter")
        expect(page.locator("#toolbar")).to_contain_text("1 result")
        expect(page.locator(".distlock-empty")).to_have_count(0)
        expect(page.locator(f"{table} .field-name")).to_have_text(name)
    page.get_by_role("link", name="Show all").click()

    # Each kind's name opens its page with its holders and who waits: (the list, the name,
    # the page's heading, and what the page shows: a selector, an expectation, its value).
    waiters, holders = "#distlock-waiters", "#distlock-holders tbody tr"
    pages = [
        (
            "#result_list",
            "reports:daily",
            "Lock “reports:daily”",
            [
                (f"{waiters} tbody tr", "to_have_count", 2),
                (
                    f"{waiters} .field-purpose >> nth=0",
                    "to_have_text",
                    "manage.py build_daily_report --retry",
                ),
            ],
        ),
        (
            "#shared_list",
            "price-list",
            "Shared lock “price-list”",
            [
                (".field-kind", "to_contain_text", "Shared lock"),
                (holders, "to_have_count", 3),
                (f"{waiters} .field-purpose", "to_have_text", "manage.py import_prices"),
                (".distlock-empty", "to_have_count", 0),
            ],
        ),
        (
            "#semaphore_list",
            "exports:pdf",
            "Semaphore “exports:pdf”",
            [
                (".field-permits", "to_have_text", "2 of 2"),
                (holders, "to_have_count", 2),
                (".field-waiters", "to_have_text", "1"),
                ("#content", "not_to_contain_text", "not held any more"),
            ],
        ),
    ]
    for table, name, heading, shown in pages:
        page.locator(table).get_by_role("link", name=name, exact=True).click()
        expect(page.locator("#content h1")).to_have_text(heading)
        for selector, expectation, value in shown:
            getattr(expect(page.locator(selector)), expectation)(value)
        page.go_back()


def breadcrumbs_style(page: Any) -> dict[str, Any]:
    return page.evaluate("""() => {
        const crumbs = document.querySelector('.breadcrumbs');
        const style = getComputedStyle(crumbs);
        const probe = document.createElement('div');
        probe.style.background = 'var(--breadcrumbs-bg)';
        document.body.append(probe);
        const expected = getComputedStyle(probe).backgroundColor;
        probe.remove();
        const items = [...crumbs.querySelectorAll('li')].map(li => getComputedStyle(li).display);
        return {tag: crumbs.tagName, background: style.backgroundColor, expected,
                paddingLeft: style.paddingLeft, items, height: crumbs.offsetHeight,
                sidebar: !!document.querySelector('#nav-sidebar')
                    && document.querySelector('#nav-sidebar').offsetWidth > 0};
    }""")


def layout_problems(page: Any) -> list[str]:
    """Return what is wrong with the page's layout: a button wrapped or out of its cell, a
    name broken inside a part, the page or a table scrolling sideways."""
    return page.evaluate("""() => {
        const problems = [];
        const root = document.documentElement;
        if (root.scrollWidth > root.clientWidth) problems.push(`page scrolls: ${root.scrollWidth}`);
        for (const results of document.querySelectorAll('#changelist .results')) {
            if (results.scrollWidth > results.clientWidth) {
                const widths = [...results.querySelectorAll('thead th')].map(
                    th => `${th.textContent.trim()}=${th.getBoundingClientRect().width}`);
                problems.push(
                    `a table scrolls: ${results.scrollWidth} > ${results.clientWidth}: ${widths}`);
            }
        }
        for (const button of document.querySelectorAll('.distlock-held .button')) {
            const box = button.getBoundingClientRect();
            const cell = button.closest('td, th').getBoundingClientRect();
            const line = parseFloat(getComputedStyle(button).lineHeight) || 20;
            if (box.height > line * 1.6 + 10) problems.push(`button wraps: ${button.textContent}`);
            if (box.left < cell.left - 0.5 || box.right > cell.right + 0.5)
                problems.push(`button out of its cell: ${button.textContent}`);
        }
        // Each part of a name stays on one line: the text between two <wbr> (after ":",
        // "/", ".", "_", "@"), cut again after each hyphen, where lines break anyway.
        for (const name of document.querySelectorAll('.distlock-held .field-name a')) {
            for (const node of name.childNodes) {
                if (node.nodeType !== Node.TEXT_NODE) continue;
                let start = 0;
                for (const part of node.textContent.match(/[^-]+-?|-/g) || []) {
                    const range = document.createRange();
                    range.setStart(node, start);
                    range.setEnd(node, start + part.length);
                    start += part.length;
                    const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
                    if (tops.size > 1) problems.push(`name broken inside "${part}"`);
                }
            }
        }
        return problems;
    }""")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_native_look_at_every_width_and_the_readme_screenshots(
    page: Any,
    log_in: Callable[[str], None],
    scene: Scene,
    scheme: str,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    page.emulate_media(color_scheme=scheme)
    log_in("/admin/distlock/heldlock/")
    page.wait_for_selector("#result_list")
    kept = os.environ.get("DISTLOCK_SCREENSHOT_DIR")
    for width in (1100, 1366, 1920):
        page.set_viewport_size({"width": width, "height": 900})
        expect(page.locator("#semaphore_list")).to_be_visible()
        expect(page.locator("#shared_list")).to_be_visible()
        style = breadcrumbs_style(page)
        assert style["background"] == style["expected"] != "rgba(0, 0, 0, 0)", style
        assert style["paddingLeft"] == "40px" and style["sidebar"], style
        if django.VERSION[:2] >= (6, 1):
            assert style["tag"] == "OL" and set(style["items"]) == {"inline-block"}, style
        assert style["height"] < 60, f"the breadcrumbs are one line: {style}"
        if kept:
            page.screenshot(path=f"{kept}/held-locks-{width}-{scheme}.png", full_page=True)
        assert layout_problems(page) == [], width
        if width == README_WIDTH:
            where = README_IMAGES if django.VERSION[:2] >= README_DJANGO else tmp_path
            page.screenshot(path=str(where / f"admin-held-locks-{scheme}.png"), full_page=True)
    # The pages below the list look native too.
    page.set_viewport_size({"width": README_WIDTH, "height": 700})
    page.locator("#shared_list").get_by_role("link", name="price-list").click()
    # The click only starts the navigation: read the new page once it is there (on a loaded
    # machine the evaluate below once ran between the two pages, with no .breadcrumbs).
    expect(page.locator("#content h1")).to_have_text("Shared lock “price-list”")
    style = breadcrumbs_style(page)
    assert style["background"] == style["expected"] and style["sidebar"], style
    assert layout_problems(page) == []
    if kept:
        page.screenshot(path=f"{kept}/shared-lock-{scheme}.png", full_page=True)
    page.go_back()
    expect(page.locator("#shared_list")).to_be_visible()
    page.locator("#result_list tbody tr", has_text="search:reindex").get_by_role(
        "link", name="Force release"
    ).click()
    expect(page.locator(".distlock-release-summary")).to_be_visible()
    style = breadcrumbs_style(page)
    assert style["background"] == style["expected"] and style["sidebar"], style
    if scheme == "light":
        where = README_IMAGES if django.VERSION[:2] >= README_DJANGO else tmp_path
        page.screenshot(path=str(where / "admin-force-release.png"), full_page=True)
