"""The demo's Pay button in a real headless Chromium (acceptance 6 of issue 3): a double click
is charged once and answered "already in progress" once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.live_server_process import LiveServerProcess, demo_project

pytestmark = [pytest.mark.browser, pytest.mark.django_db(databases=[])]


@pytest.fixture
def demo(redis_url: str, tmp_path: Path) -> Iterator[LiveServerProcess]:
    """The demo project (testproject) in its own server process, on the test's Redis."""
    with demo_project(redis_url, tmp_path) as server:
        yield server


def test_double_clicking_pay_charges_once(page, demo: LiveServerProcess) -> None:
    from playwright.sync_api import expect

    page.goto(f"{demo.url}/")
    page.get_by_role("link", name="Pay button demo").click()
    page.wait_for_url("**/pay/")
    order_url = page.url + "?order=" + page.locator("h1").inner_text().split("#")[1]

    page.locator("#pay-button").dblclick()

    expect(page.locator("#answers li.success")).to_have_count(1)
    expect(page.locator("#answers li.warning")).to_have_count(1)
    expect(page.locator("#answers li")).to_have_count(2)
    success = page.locator("#answers li.success").inner_text()
    refused = page.locator("#answers li.warning").inner_text()
    assert success.startswith("200") and "Payment recorded" in success
    assert refused.startswith("409") and "already in progress" in refused
    assert "Retry-After" in refused
    expect(page.locator("#payments")).to_have_text("1")

    page.goto(order_url)  # the order, as stored: paid once
    expect(page.locator("#payments")).to_have_text("1")
