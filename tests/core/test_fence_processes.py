"""Issue 40, acceptance item 1: a paused holder cannot commit work twice once the fence is on.

``@lock_view(..., fence=True)`` under ``ATOMIC_REQUESTS``, served by gunicorn on a real
PostgreSQL and MariaDB (tests/support/shop/fenced.py). In each trial a request takes the
order's lock (a 1 s lease, no renewal) and its worker stops itself (SIGSTOP) before its first
statement; once the lock is free on Redis (the lease ran out), a second request takes it and
pays; then the first worker resumes. Its transaction must be refused and rolled back (409,
nothing written), the second request's payment stand: one charge per order. Each trial is
shown to have overlapped: the second request held the lock, with a newer token, and answered
while the first was still inside its view.

Without the fence (``fence=False`` in tests/support/shop/fenced.py) every trial charges its
order twice.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.support.databases import DatabaseServer
from tests.support.lock_helpers import free_within
from tests.support.redis_server import HOST, RedisServer, wait_until
from tests.support.shop.load import Shop, serve_shop, shop_locks
from tests.support.shop.stops import stop_file

TRIALS = 20
AT_ONCE = 4  # trials in flight together: each needs two gunicorn workers


@pytest.fixture
def shop(
    real_database: DatabaseServer, redis_server: RedisServer, settings: Any
) -> Iterator[Shop]:
    redis_server.flushall()
    settings.DISTLOCK = shop_locks(redis_server.url)  # to see the shop's locks
    with serve_shop(real_database, redis_server.url, workers=AT_ONCE * 2) as served:
        yield served
    shutil.rmtree(stop_file(served.database, 0).parent, ignore_errors=True)


def post(shop: Shop, path: str) -> tuple[int, dict[str, Any]]:
    assert shop.server is not None
    conn = http.client.HTTPConnection(HOST, shop.server.port, timeout=60)
    try:
        conn.request("POST", path, headers={"Accept": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def trial(shop: Shop, order: int) -> dict[str, Any]:
    """One paused holder and the request that takes over from it; what each saw."""
    with ThreadPoolExecutor(1) as first_thread:
        first = first_thread.submit(post, shop, f"/pay-fenced/{order}?stop=1")
        path = stop_file(shop.database, order)
        wait_until(lambda: len(path.read_text().split()) == 2, 30, "the first request's stop")
        pid, first_token = map(int, path.read_text().split())
        try:
            # Its lease runs out on Redis while it is stopped; then the second one pays.
            lock_key_gone = free_within(f"fenced:{order}", 30)
            second = post(shop, f"/pay-fenced/{order}")
            overlapped = not first.done()  # the first is still inside its view
        finally:
            os.kill(pid, signal.SIGCONT)
        status, body = first.result(timeout=60)
    return {
        "lease_ran_out": lock_key_gone,
        "overlapped": overlapped,
        "first": (status, body, first_token),
        "second": second,
    }


def test_a_paused_holder_is_refused_and_the_order_charged_once(shop: Shop) -> None:
    orders = range(1, TRIALS + 1)
    shop.query(
        "INSERT INTO shop_order (id) VALUES " + ", ".join(f"({order})" for order in orders)
    )
    started = time.monotonic()
    with ThreadPoolExecutor(AT_ONCE) as pool:
        trials = list(pool.map(lambda order: trial(shop, order), orders))
    for order, seen in zip(orders, trials, strict=True):
        first_status, first_body, first_token = seen["first"]
        second_status, second_body = seen["second"]
        assert seen["lease_ran_out"] and seen["overlapped"], (order, seen)
        assert second_status == 200 and second_body["result"] == "charged", (order, seen)
        assert second_body["token"] > first_token, "the second request's token is newer"
        # Refused, rolled back, answered 409 (LockFenced).
        assert first_status == 409, (order, seen)
        assert "nothing was saved" in first_body["detail"]
    charges = shop.charges_per_order()
    twice = {order: n for order, n in charges.items() if n > 1}
    assert not twice, f"{len(twice)} of {TRIALS} orders charged more than once"
    assert sorted(charges) == list(orders), "every order charged (none lost)"
    assert time.monotonic() - started < 120
