"""The browser test bed itself: Chromium renders a page served by a live Django server."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_browser_renders_the_admin_login(page, live_server) -> None:
    page.goto(f"{live_server.url}/admin/login/")
    assert page.locator("#id_username").is_visible()
    assert "Log in" in page.title()
