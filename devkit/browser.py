"""A real headless Chromium (Debian's package) driven by Playwright, for tests of pages.

Tests that take the ``page`` fixture skip, saying why, when no Chromium is installed; CI
installs one (.ci/run) and sets DISTLOCK_REQUIRE_BROWSER, so that there they fail instead.
Playwright never downloads a browser of its own here.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

# Without these, Chromium tries to reach Google's services, which this network refuses.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def find_chromium() -> str | None:
    """Return the Chromium to use: $DISTLOCK_CHROMIUM, /usr/bin/chromium, or one on PATH."""
    configured = os.environ.get("DISTLOCK_CHROMIUM")
    if configured:
        return configured
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    return shutil.which("chromium") or shutil.which("chromium-browser")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the browser tests last: once Playwright's sync API has started, its event loop
    stays "running" in the main thread for the session, and every async test after it would
    fail ("Cannot run the event loop while another loop is running")."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    executable = find_chromium()
    if executable is None and os.environ.get("DISTLOCK_REQUIRE_BROWSER"):
        pytest.fail(
            "DISTLOCK_REQUIRE_BROWSER is set (CI) but no Chromium was found: the "
            "browser tests must run there, so install chromium (apt-get install -y "
            "chromium) or set DISTLOCK_CHROMIUM"
        )
    if executable is None:
        pytest.skip(
            "no Chromium found: install Debian's chromium (apt-get install -y chromium) "
            "or set DISTLOCK_CHROMIUM to run the browser tests"
        )
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running in this thread, which makes Django
    # refuse ORM calls from it ("async unsafe") while the browser is open.
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()
    monkeypatch.undo()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context and page (own cookies) for one test."""
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()
    _wait_for_request_threads()


def _wait_for_request_threads(timeout: float = 5.0) -> None:
    """Let an in-process live server's request threads end before the test does. Closing
    the context closes Chromium's keep-alive connections, and each request thread then ends
    within milliseconds (Django's server makes them daemon threads and never joins them).
    One still running when the session's live server stops (it takes back the sharing of
    its in-memory SQLite connection) fails in ``connections.close_all()`` and leaves its
    socket unclosed: a ResourceWarning, an error under ``filterwarnings = error``, seen once
    at the end of a CI leg."""
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if "process_request_thread" in thread.name:  # socketserver's ThreadingMixIn names it
            thread.join(max(0.0, deadline - time.monotonic()))
