"""Issue 40 adversary: the fenced pay view (devkit/shop/fenced.py) under gunicorn on a
real PostgreSQL and MariaDB, its worker stopped (SIGSTOP) after its write and before the
request's COMMIT (``?stop=write``), past its lease, while a second request takes the lock.
The steps before (``before``, ``read``) are tests/core/test_fence_processes.py's."""

from __future__ import annotations

from devkit.shop.load import Shop
from tests.core import test_fence_processes as processes

TRIALS = 4


def test_a_request_paused_after_its_write_before_commit_holds_the_next_one_back(
    shop: Shop,
) -> None:
    """The same trials as the steps before it (test_fence_processes.paused_trials: each
    overlapped, 0 orders charged twice, none lost, the second token newer)."""
    for seen in processes.paused_trials(shop, "write", TRIALS):
        assert seen["first"][:2] == (200, {"result": "charged", "token": seen["first"][2]})
        assert seen["second"][0] == 200 and seen["second"][1]["result"] == "already paid"
