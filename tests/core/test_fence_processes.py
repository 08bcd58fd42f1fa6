"""Issue 40, acceptance item 1: a paused holder, or one whose lock server restarted empty,
cannot commit work twice once the fence is on.

``@lock_view(..., fence=True)`` under ``ATOMIC_REQUESTS``, served by gunicorn on a real
PostgreSQL and MariaDB (devkit/shop/fenced.py). In each trial a request takes the
order's lock (a 1 s lease, no renewal) and its worker stops itself (SIGSTOP); once the lock
is free on Redis (the lease ran out), a second request takes it; then the first worker
resumes. Each trial is shown to have overlapped: the second request held the lock, with a
newer token, while the first was still inside its view. Every order ends charged once:

- stopped before its first statement (20 trials): the second request claims and pays; the
  resumed request's transaction is refused and rolled back (409, nothing written);
- stopped after reading the order unpaid (8 trials): its claim came first, so the second
  request's claim waits for its transaction; it pays, and the second finds the order paid.

- Redis restarted empty while a request works (4 trials, one at a time): as the second kind.

Without the fence (``SHOP_UNFENCED=1``) up to every trial of the last two kinds charges
twice.

The same for ``LockedCommandMixin`` (``lock_fence = True``): ``manage.py shop_invoices``
charges every unpaid order, one transaction each. Redis restarts empty while a copy runs (a
60 s lease, renewed every third of it: the copy runs on, unaware, until the next renewal 20 s
away, and commits a row after the restart) and a second copy starts; or the running copy is
stopped (SIGSTOP) with a row in flight past its 2 s lease and a second copy starts, then it
resumes. Every order is charged exactly
once, none is left. Unfenced (``SHOP_UNFENCED=1``), 32 of 40 are charged twice after the
restart (both databases), and the row in flight twice after the pause (on PostgreSQL).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psutil
import pytest

import distlock
from devkit.databases import DatabaseServer
from devkit.processes import child_env
from devkit.redis_server import RedisServer
from devkit.servers import HOST, wait_until
from devkit.shop.load import SETTINGS, Shop, serve_shop, shop_env, shop_locks
from devkit.shop.stops import stop_file
from tests.core.conftest import AT_ONCE
from tests.support.lock_helpers import free_within, read_line

TRIALS = 20
TRIALS_AFTER_READ = 8
TRIALS_AFTER_RESTART = 4
INVOICES = 40


def post(shop: Shop, path: str) -> tuple[int, dict[str, Any]]:
    assert shop.server is not None
    conn = http.client.HTTPConnection(HOST, shop.server.port, timeout=60)
    try:
        conn.request("POST", path, headers={"Accept": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def newer_holder(order: int, token: int) -> bool:
    held = distlock.locks["default"].info(f"fenced:{order}")
    return held is not None and held.fencing_token > token


def trial(shop: Shop, order: int, stop: str, restart: RedisServer | None = None) -> dict[str, Any]:
    """One paused holder and the request that takes over from it, once its lease ran out
    (or once ``restart`` restarted empty); what each saw."""
    with ThreadPoolExecutor(1) as first_thread:
        first = first_thread.submit(post, shop, f"/pay-fenced/{order}?stop={stop}")
        path = stop_file(shop.database, order)
        wait_until(lambda: len(path.read_text().split()) == 2, 30, "the first request's stop")
        pid, first_token = map(int, path.read_text().split())
        try:
            # Its lease runs out on Redis while it is stopped; then the second one pays.
            if restart is not None:
                restart.restart(empty=True)
            lock_key_gone = free_within(f"fenced:{order}", 30)
            with ThreadPoolExecutor(1) as second_thread:
                second_answer = second_thread.submit(post, shop, f"/pay-fenced/{order}")
                if stop in ("read", "write"):  # it holds the lock; its claim waits for
                    # the stopped one's transaction, whose row lock is taken
                    wait_until(
                        lambda: newer_holder(order, first_token) or second_answer.done(),
                        30,
                        "the second holder",
                    )
                else:
                    second_answer.result(timeout=60)
                overlapped = not first.done()  # the first is still inside its view
                os.kill(pid, signal.SIGCONT)
                second = second_answer.result(timeout=60)
        finally:
            os.kill(pid, signal.SIGCONT)
        status, body = first.result(timeout=60)
    return {
        "lease_ran_out": lock_key_gone,
        "overlapped": overlapped,
        "first": (status, body, first_token),
        "second": second,
    }


def paused_trials(
    shop: Shop, stop: str, trials: int, restart: RedisServer | None = None
) -> list[dict[str, Any]]:
    """Run ``trials`` trials, AT_ONCE at a time (one at a time with ``restart``); check every
    order was charged exactly once."""
    orders = range(1, trials + 1)
    shop.query("INSERT INTO shop_order (id) VALUES " + ", ".join(f"({order})" for order in orders))
    with ThreadPoolExecutor(1 if restart else AT_ONCE) as pool:
        seen = list(pool.map(lambda order: trial(shop, order, stop, restart), orders))
    overlapped = sum(one["lease_ran_out"] and one["overlapped"] for one in seen)
    charges = shop.charges_per_order()
    twice = {order: n for order, n in charges.items() if n > 1}
    assert not twice, f"{len(twice)} of {trials} orders charged twice ({overlapped} overlapped)"
    assert sorted(charges) == list(orders), "every order charged (none lost)"
    for one in seen:
        assert one["lease_ran_out"] and one["overlapped"], one
        assert one["second"][1]["token"] > one["first"][2], "the second one's token is newer"
    return seen


def test_a_request_paused_before_its_work_is_refused_and_rolled_back(shop: Shop) -> None:
    for seen in paused_trials(shop, "before", TRIALS):
        first_status, first_body, _ = seen["first"]
        second_status, second_body = seen["second"]
        assert second_status == 200 and second_body["result"] == "charged", seen
        # Refused, rolled back, answered 409 (LockFenced).
        assert first_status == 409 and "nothing was saved" in first_body["detail"], seen


@pytest.mark.slow
def test_a_request_paused_after_reading_holds_the_next_one_back(shop: Shop) -> None:
    for seen in paused_trials(shop, "read", TRIALS_AFTER_READ):
        assert seen["first"][:2] == (200, {"result": "charged", "token": seen["first"][2]})
        assert seen["second"][0] == 200 and seen["second"][1]["result"] == "already paid"


@pytest.mark.slow
def test_a_request_whose_redis_restarted_empty_holds_the_next_one_back(
    shop: Shop, redis_server: RedisServer
) -> None:
    """Redis restarts empty while a request works (stopped after its read, so that the
    second request surely comes while it is inside): the second takes the lock at once; its
    claim waits for the first one's transaction, then finds the order paid."""
    for seen in paused_trials(shop, "read", TRIALS_AFTER_RESTART, restart=redis_server):
        assert seen["first"][:2] == (200, {"result": "charged", "token": seen["first"][2]})
        assert seen["second"][0] == 200 and seen["second"][1]["result"] == "already paid"


# --- LockedCommandMixin ---------------------------------------------------------------------
@pytest.fixture
def invoices(
    real_database: DatabaseServer, redis_server: RedisServer, settings: Any
) -> Iterator[tuple[Shop, dict[str, str]]]:
    """A shop database with INVOICES unpaid orders, and the environment of its commands."""
    redis_server.flushall()
    settings.DISTLOCK = shop_locks(redis_server.url)
    with serve_shop(real_database, redis_server.url, workers=0) as served:
        served.query(
            "INSERT INTO shop_order (id) VALUES "
            + ", ".join(f"({order})" for order in range(1, INVOICES + 1))
        )
        env = child_env(
            settings=SETTINGS,
            **shop_env(real_database, served.database, redis_server.url),
            PYTHONUNBUFFERED="1",
        )
        yield served, env


def invoicing(processes: Any, env: dict[str, str], **more: str) -> subprocess.Popen:
    """Start ``manage.py shop_invoices``; return it once it holds the lock (its token line)."""
    command = processes(
        [sys.executable, "-m", "django", "shop_invoices"],
        {**env, **more},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    command.token = int(read_line(command, "token ").split()[1])  # type: ignore[attr-defined]
    return command


def rows_done(command: subprocess.Popen, rows: int) -> None:
    for _ in range(rows):
        read_line(command, "row ")


def charged_once_each(shop: Shop) -> None:
    charges = shop.charges_per_order()
    twice = {order: n for order, n in charges.items() if n > 1}
    assert not twice, f"{len(twice)} of {INVOICES} orders charged more than once"
    assert sorted(charges) == list(range(1, INVOICES + 1)), "orders left unprocessed"


@pytest.mark.slow
def test_a_command_whose_redis_restarted_empty_never_charges_twice(
    invoices: tuple[Shop, dict[str, str]], redis_server: RedisServer, processes: Any
) -> None:
    """A 60 s lease, renewed every 20 s: after the restart the first copy runs on, unaware,
    for up to 20 s; only the fence stops its rows once the second copy has claimed."""
    shop, env = invoices
    slow_rows = {"SHOP_INVOICES_LEASE": "60", "SHOP_ROW_SECONDS": "0.2"}  # rows left for both
    first = invoicing(processes, env, **slow_rows)
    rows_done(first, 5)
    redis_server.restart(empty=True)  # the lease is gone; the first copy does not know yet
    rows_done(first, 1)  # it ran on: a row committed after the restart
    second = invoicing(processes, env, **slow_rows)
    assert second.token > first.token, "fencing tokens rise across the restart"  # type: ignore[attr-defined]
    assert second.wait(120) == 0, second.stderr.read()
    first.wait(60)
    charged_once_each(shop)
    assert first.returncode != 0, "the first copy went on alongside the second to the end"
    refused = first.stderr.read()
    # Stopped by the fence (a row tried after the second copy's claim, refused), not by its
    # next renewal (20 s away), which would say "Lost the lock".
    assert "Stopped:" in refused and "Lost the lock" not in refused, refused
    assert "FencedUpdateRejected" in refused or "was refused and rolled back" in refused, refused


def test_a_command_paused_past_its_lease_never_charges_twice(
    invoices: tuple[Shop, dict[str, str]], processes: Any
) -> None:
    """Stopped with a row in flight (written, not committed) past its lease: the second copy
    takes the lock; its first claim waits for the stopped copy's transaction (whose claim
    came first), so it sees that row committed. Unfenced, it charges that row again."""
    shop, env = invoices
    first = invoicing(processes, env, SHOP_INVOICES_LEASE="2", SHOP_STOP_AT_ROW="5")
    rows_done(first, 4)
    stopped = psutil.Process(first.pid)
    wait_until(lambda: stopped.status() == psutil.STATUS_STOPPED, 30, "the first copy's stop")
    try:
        assert free_within("invoices", 30), "the stopped copy's lease never ended"
        second = invoicing(processes, env, SHOP_INVOICES_LEASE="2")
        time.sleep(0.5)  # its first transaction under way
    finally:
        first.send_signal(signal.SIGCONT)
    assert second.wait(60) == 0, second.stderr.read()
    first.wait(60)
    charged_once_each(shop)
    assert first.returncode != 0, "the paused copy went on as if it still held the lock"
