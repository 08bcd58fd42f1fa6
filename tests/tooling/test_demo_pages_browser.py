"""The demo's capability pages in a real headless Chromium (issue 33, item 9): shared locks,
semaphores, the cache stampede, a leader and the transaction page each do what they tell a
newcomer to try; and the Pay page's Retry-After fits its one-second payment."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from devkit.live_server_process import LiveServerProcess, demo_project
from devkit.redis_server import RedisServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(databases=[])]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServerProcess]:
    """The demo project (testproject) in its own server process, on a Redis of its own."""
    server = RedisServer().start()
    try:
        with demo_project(server.url, tmp_path_factory.mktemp("demo-pages")) as site:
            yield site
    finally:
        server.stop()


def open_from_home(page: Any, demo: LiveServerProcess, link: str) -> None:
    page.goto(f"{demo.url}/")
    page.locator("#capabilities").get_by_role("link", name=link).click()
    page.wait_for_load_state()
    assert page.locator("main").get_by_text("In the admin").count() == 1


def test_shared_locks_many_readers_then_a_refused_update(
    page: Any, demo: LiveServerProcess
) -> None:
    from playwright.sync_api import expect

    # Served by runserver, as scripts/demo serves it: the browser keeps its connection open,
    # so one server thread answers every click (the readers must not be that thread's).
    open_from_home(page, demo, "Shared locks")
    expect(page.locator("main")).not_to_contain_text("waits until every reader")  # refused
    page.get_by_role("button", name="Update the prices").click()
    expect(page.locator("#message")).to_contain_text("Prices updated under the exclusive lock")
    page.get_by_role("button", name="Read the price list").click()
    expect(page.locator("#message")).to_contain_text("Readers now: 1.")
    page.get_by_role("button", name="Read the price list").click()
    expect(page.locator("#message")).to_contain_text("Readers now: 2.")
    page.get_by_role("button", name="Update the prices").click()
    expect(page.locator("#message")).to_contain_text("Update refused: 2 reader(s) hold")
    expect(page.locator("#readers")).to_have_text("2")


def test_semaphore_two_exports_then_a_refusal(page: Any, demo: LiveServerProcess) -> None:
    from playwright.sync_api import expect

    open_from_home(page, demo, "Semaphores")
    for permits in ("1", "2"):
        page.get_by_role("button", name="Start an export").click()
        expect(page.locator("#message")).to_contain_text("Export started")
        expect(page.locator("#permits")).to_have_text(permits)
    page.get_by_role("button", name="Start an export").click()
    expect(page.locator("#message")).to_contain_text("Refused: all 2 permits are taken")
    expect(page.locator("#permits")).to_have_text("2")


def test_cache_two_tabs_at_once_build_once(page: Any, demo: LiveServerProcess) -> None:
    from playwright.sync_api import expect

    open_from_home(page, demo, "Cache stampede")
    page.get_by_role("button", name="Forget the catalog").click()
    page.wait_for_load_state()
    before = int(page.locator("#builds").inner_text())
    tabs = [page, page.context.new_page()]
    tabs[1].goto(page.url)
    for tab in tabs:  # both pressed before either answers (a build takes 3 s)
        tab.get_by_role("button", name="Load the catalog").click(no_wait_after=True)
    for tab in tabs:
        expect(tab.locator("#message")).to_be_visible(timeout=20_000)
    said = {
        re.sub(r"; this request took .*", "", tab.locator("#message").inner_text()) for tab in tabs
    }
    assert len(said) == 1, said  # one build, one value, for both
    assert said.pop().startswith(f"Catalog build #{before + 1}, built at ")
    page.reload()
    expect(page.locator("#builds")).to_have_text(str(before + 1))


def test_leader_this_server_leads(page: Any, demo: LiveServerProcess) -> None:
    from playwright.sync_api import expect

    open_from_home(page, demo, "Leader election")
    expect(page.locator("#this-server")).to_have_text("does not campaign")
    page.get_by_role("button", name="Campaign from this server").click()
    expect(page.locator("#this-server")).to_have_text(re.compile(r"^leads, term \d+$"))
    term = page.locator("#this-server").inner_text().rsplit(" ", 1)[1]
    expect(page.locator("#leader")).to_contain_text(f"term {term} (demo: the web server")


def test_transaction_double_charge_only_without_hold_until_commit(
    page: Any, demo: LiveServerProcess
) -> None:
    from playwright.sync_api import expect

    open_from_home(page, demo, "Locks and transactions")
    page.locator("#hold").click()
    expect(page.locator("#result")).to_have_text(
        "The card was charged 1 time(s); payments recorded: 1.", timeout=20_000
    )
    answers = sorted(page.locator("#answers li").all_inner_texts())
    assert answers == [
        "Already paid: nothing charged.",
        "Charged the card and recorded the payment.",
    ]

    page.get_by_role("link", name="New order").click()
    page.wait_for_load_state()
    page.locator("#no-hold").click()
    expect(page.locator("#result")).to_contain_text(
        "The card was charged 2 time(s)", timeout=20_000
    )
    expect(page.locator("#result")).to_contain_text("Charged twice")


def test_pay_retry_after_fits_the_payment(page: Any, demo: LiveServerProcess) -> None:
    from playwright.sync_api import expect

    page.goto(f"{demo.url}/pay/")
    text = page.locator("main").inner_text()
    work = int(re.search(r"The payment takes (\d+) second", text).group(1))
    lease = int(re.search(r"the lock's (\d+) s lease", text).group(1))
    assert work < lease <= work + 2, text  # the lease covers the work, with a margin only
    page.locator("#pay-button").dblclick()
    expect(page.locator("#answers li.warning")).to_have_count(1)
    refused = page.locator("#answers li.warning").inner_text()
    seconds = int(re.search(r"Retry-After: (\d+) s", refused).group(1))
    assert 1 <= seconds <= lease, refused
