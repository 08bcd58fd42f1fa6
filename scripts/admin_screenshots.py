"""Take the screenshots of the admin's "Held locks" page in docs/img/ (light and dark).

    python scripts/admin_screenshots.py

Starts a redis-server of its own, holds a few locks the way a project would (views,
commands, workers, in several threads), serves the admin on a local port and photographs it
with Debian's headless Chromium through Playwright (as tests/support/browser.py does).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.settings")
IMAGES = ROOT / "docs" / "img"
VIEWPORT = {"width": 1280, "height": 640}  # the width the table must fit (issue 16)

# (alias, name, ttl, purpose, thread, reentrant depth, renewals)
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
        "newsletter:2024-06",
        120,
        "manage.py send_newsletter --issue 2024-06",
        "MainThread",
        1,
        0,
    ),
    ("billing", "invoices:close-month", 900, "manage.py close_month", "MainThread", 1, 2),
    ("billing", "stripe:webhook:evt_1PQ", 20, "POST /webhooks/stripe/", "Thread-7", 1, 0),
]


def main() -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.staticfiles.handlers import StaticFilesHandler
    from django.db import connections
    from django.test.testcases import LiveServerThread
    from django.test.utils import setup_test_environment
    from playwright.sync_api import sync_playwright

    from distlock.handler import locks
    from tests.support.browser import CHROMIUM_ARGS, find_chromium
    from tests.support.redis_server import RedisServer

    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("no Chromium: apt-get install -y chromium, or set DISTLOCK_CHROMIUM")
    with RedisServer() as server:
        settings.DISTLOCK = {
            alias: {
                "BACKEND": "distlock.backends.redis.RedisBackend",
                "LOCATION": server.url,
                "KEY_PREFIX": alias,
            }
            for alias in ("default", "billing")
        }
        locks.reset()
        held = hold_locks()
        setup_test_environment()
        connection = connections["default"]
        connection.creation.create_test_db(verbosity=0)
        get_user_model().objects.create_superuser("operator", password="operator-pw")
        connection.inc_thread_sharing()  # the in-memory database, shared with the server
        live = LiveServerThread(
            "localhost", StaticFilesHandler, connections_override={"default": connection}, port=0
        )
        live.daemon = True
        live.start()
        live.is_ready.wait()
        if live.error:
            raise live.error
        base = f"http://localhost:{live.port}"
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=chromium, headless=True, args=CHROMIUM_ARGS
                )
                for scheme in ("light", "dark"):
                    photograph(browser, base, scheme)
                browser.close()
        finally:
            live.terminate()
            for lock in held:
                lock.release()


def hold_locks() -> list:
    """Acquire LOCKS, each in a thread of the given name so the holder column shows it."""
    import distlock

    held = []

    def take(alias: str, name: str, ttl: int, purpose: str, depth: int, renewals: int) -> None:
        lock = distlock.lock(name, ttl=ttl, using=alias, purpose=purpose, reentrant=depth > 1)
        for _ in range(depth):
            assert lock.acquire(wait=0)
        for _ in range(renewals):
            lock.backend.extend(name, lock.token, int(ttl * 1000), renewal=True)
        held.append(lock)

    for alias, name, ttl, purpose, thread, depth, renewals in LOCKS:
        worker = threading.Thread(
            target=take, name=thread, args=(alias, name, ttl, purpose, depth, renewals)
        )
        worker.start()
        worker.join()
    return held


def photograph(browser, base: str, scheme: str) -> None:  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport=VIEWPORT, color_scheme=scheme)
    page = context.new_page()
    page.goto(f"{base}/admin/login/?next=/admin/distlock/heldlock/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "operator-pw")
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")
    IMAGES.mkdir(parents=True, exist_ok=True)
    target = IMAGES / f"admin-held-locks-{scheme}.png"
    page.screenshot(path=str(target), full_page=True)
    print(f"wrote {target.relative_to(ROOT)}")
    if scheme == "light":
        page.locator("#result_list tbody tr", has_text="reports:daily").get_by_role(
            "link", name="Force release"
        ).click()
        page.wait_for_selector(".distlock-release-summary")
        target = IMAGES / "admin-force-release.png"
        page.screenshot(path=str(target), full_page=True)
        print(f"wrote {target.relative_to(ROOT)}")
    context.close()


if __name__ == "__main__":
    main()
