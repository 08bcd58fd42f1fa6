"""An operator, in a real headless Chromium, frees a lock that another process holds."""

from __future__ import annotations

import subprocess
import sys

import pytest

import distlock
from devkit.processes import Start, child_env

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def holder(redis_backend: str, processes: Start) -> subprocess.Popen:
    """Another process holding 'reports:nightly' until told to extend() (on its stdin)."""
    return processes(
        [
            sys.executable,
            "-m",
            "tests.support.workers",
            "hold_then_extend",
            "reports:nightly",
            "120",
            "nightly sales report",
        ],
        child_env(kind="redis", url=redis_backend),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def said(process: subprocess.Popen) -> list[str]:
    return process.stdout.readline().split()


def test_operator_releases_a_lock_held_by_another_process(
    page, log_in, holder: subprocess.Popen
) -> None:
    from playwright.sync_api import expect

    word, fencing_token = said(holder)
    assert word == "held"
    unrelated = distlock.lock("emails:digest", ttl=120, purpose="newsletter")
    assert unrelated.acquire(wait=0)

    log_in("/admin/")
    page.get_by_role("link", name="Held locks").click()

    # Both locks, the other process's with its holder and purpose.
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(2)
    row = rows.filter(has_text="reports:nightly")
    expect(row.locator(".field-holder")).to_contain_text(f"pid {holder.pid}, thread MainThread")
    expect(row.locator(".field-purpose")).to_have_text("nightly sales report")
    expect(row.locator(".field-fencing_token")).to_have_text(fencing_token)
    # The remaining time counts down in the page.
    countdown = row.locator(".field-expires_in time")
    shown = countdown.inner_text()
    expect(countdown).not_to_have_text(shown, timeout=5_000)

    page.fill("#searchbar", "reports:")
    page.press("#searchbar", "Enter")
    expect(rows).to_have_count(1)
    expect(rows.first.locator(".field-name")).to_have_text("reports:nightly")

    rows.first.get_by_role("link", name="Force release").click()
    expect(page.locator("#content h1")).to_have_text("Force release a held lock")
    expect(page.locator(".field-fencing_token")).to_have_text(fencing_token)
    expect(page.locator(".field-holder")).to_contain_text(f"pid {holder.pid}")
    expect(page.locator(".field-alias")).to_have_text("default")
    page.get_by_role("button", name="Yes, release it").click()

    expect(page.locator(".messagelist .success")).to_contain_text(
        f"Released lock “reports:nightly” (alias default, fencing token {fencing_token})"
    )
    expect(page.locator("#searchbar")).to_have_value("reports:")
    expect(page.locator("#result_list")).to_have_count(0)
    expect(page.locator(".distlock-empty")).to_be_visible()
    assert unrelated.owned()

    # The holder finds out at its next extend().
    holder.stdin.write("extend\n")
    holder.stdin.flush()
    assert said(holder) == ["extend", "LockNotOwned"]
    assert holder.wait(timeout=10) == 0
    unrelated.release()
