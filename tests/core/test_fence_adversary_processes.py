"""Issue 40 adversary: the fenced pay view (tests/support/shop/fenced.py) under gunicorn on a
real PostgreSQL and MariaDB, its worker stopped (SIGSTOP) after its write and before the
request's COMMIT (``?stop=write``), past its lease, while a second request takes the lock.
The steps before (``before``, ``read``) are tests/core/test_fence_processes.py's."""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor

from tests.core import test_fence_processes as processes
from tests.core.test_fence_processes import newer_holder, post
from tests.support.lock_helpers import free_within
from tests.support.redis_server import wait_until
from tests.support.shop.load import Shop
from tests.support.shop.stops import stop_file

shop = processes.shop  # the fixture: gunicorn workers on each real database
TRIALS = 4


def write_trial(shop: Shop, order: int) -> tuple[object, object]:
    """One request stopped after its write, and the request that takes the lock after it."""
    with ThreadPoolExecutor(2) as threads:
        first = threads.submit(post, shop, f"/pay-fenced/{order}?stop=write")
        path = stop_file(shop.database, order)
        wait_until(lambda: len(path.read_text().split()) == 2, 30, "the first one's stop")
        pid, first_token = map(int, path.read_text().split())
        try:
            assert free_within(f"fenced:{order}", 30)  # its lease ran out on Redis
            second = threads.submit(post, shop, f"/pay-fenced/{order}")
            wait_until(
                lambda: newer_holder(order, first_token) or second.done(), 30, "the second holder"
            )
            assert not first.done()  # overlapped: the first is still in its request
        finally:
            os.kill(pid, signal.SIGCONT)
        return first.result(timeout=60), second.result(timeout=60)


def test_a_request_paused_after_its_write_before_commit_holds_the_next_one_back(
    shop: Shop,
) -> None:
    orders = range(1, TRIALS + 1)
    shop.query("INSERT INTO shop_order (id) VALUES " + ", ".join(f"({order})" for order in orders))
    answers = [write_trial(shop, order) for order in orders]
    charges = shop.charges_per_order()
    twice = {order: n for order, n in charges.items() if n > 1}
    assert not twice, f"{len(twice)} of {TRIALS} orders charged twice: {answers}"
    assert sorted(charges) == list(orders), "every order charged (none lost)"
