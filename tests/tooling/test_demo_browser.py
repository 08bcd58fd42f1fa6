"""The demo's home page in a real headless Chromium: what it tells a newcomer to try works
(issue 23)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devkit.live_server_process import LiveServerProcess, demo_project

pytestmark = [pytest.mark.browser, pytest.mark.django_db(databases=[])]


@pytest.fixture
def demo(redis_url: str, tmp_path: Path) -> Iterator[LiveServerProcess]:
    """The demo project (testproject) in its own server process, on the test's Redis."""
    with demo_project(redis_url, tmp_path) as server:
        yield server


def test_rebuilding_in_two_tabs_at_once_turns_the_second_away(
    page: Any, demo: LiveServerProcess
) -> None:
    from playwright.sync_api import expect

    tabs = [page, page.context.new_page()]  # two tabs of one browser profile
    for tab in tabs:
        tab.goto(f"{demo.url}/")
    # Both pressed before either answers (a rebuild takes 2 s); no_wait_after: the click
    # returns without waiting for its page to load, as a person moves on to the next tab.
    for tab in tabs:
        tab.get_by_role("button", name="Rebuild the cache").click(no_wait_after=True)
    for tab in tabs:
        expect(tab.locator("#message")).to_be_visible(timeout=15_000)
    said = sorted(tab.locator("#message").inner_text() for tab in tabs)
    assert said[0].startswith("A rebuild is already running"), said
    assert said[1].startswith("Cache rebuilt in 2 s under the lock"), said


@pytest.mark.parametrize("width", [1100, 1280])
def test_the_send_digest_commands_are_not_cut(
    page: Any, demo: LiveServerProcess, width: int
) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{demo.url}/")
    block = page.locator("#cron-demo pre")
    sizes = block.evaluate("""pre => ({scroll: pre.scrollWidth, client: pre.clientWidth,
        right: pre.getBoundingClientRect().right, whiteSpace: getComputedStyle(pre).whiteSpace,
        page: document.documentElement.scrollWidth})""")
    assert sizes["scroll"] <= sizes["client"], f"the code block hides text: {sizes}"
    assert sizes["right"] <= width and sizes["page"] <= width, sizes
