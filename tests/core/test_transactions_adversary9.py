"""Issue 39, the ninth adversary: the route an answer holds on, the late answer, and the
coroutine on async_to_sync's loop that adopts its thread's transactions (anote_loop_thread).
Each test says what it expects and what was observed at a22c1c8 (marked
``xfail(strict=True)`` while it fails).

In-process (SQLite) where the database does not matter; PostgreSQL and MariaDB served by a
real gunicorn (devkit/shop/adversary9.py) where it does.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import connections, transaction

import distlock
from devkit.databases import DatabaseServer
from devkit.shop.bridge import through_a_client_thread
from devkit.shop.load import assert_each_charged_once, serve_shop
from distlock import transactions
from tests.support.lock_helpers import free_within, is_held

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "fencing"]),
    pytest.mark.usefixtures("redis_backend"),
]


def _in_request_transaction(request_conn: list[Any]) -> bool:
    conn = connections["default"]
    return conn.connection is request_conn[0] and not conn.get_autocommit()


def _charge_under_lock(name: str, seen: dict[str, Any], request_conn: list[Any]) -> Any:
    async def charge() -> None:
        lk = distlock.lock(name, ttl=5, wait=2)
        assert await lk.aacquire()
        seen["in_transaction"] = await sync_to_async(_in_request_transaction)(request_conn)
        await lk.arelease()
        seen["held_after_release"] = is_held(name)

    return charge()


def test_a_bridged_coroutine_unanswered_behind_the_threads_work_waits_for_the_commit() -> None:
    """The view opens its transaction and runs its async service through async_to_sync (a
    loop of its own: WSGI). The service starts a slow sync step in the request's thread
    (sync_to_async, longer than HOP_TIMEOUT), and meanwhile a callback-based client's thread
    schedules the charging coroutine on the loop (run_coroutine_threadsafe). Its question
    to the request's thread (anote_loop_thread: which transactions are open there) waits
    behind the slow step; its charge then runs in the request's thread, in the transaction.

    Expected: its release waits for the COMMIT (the charge is uncommitted; in doubt, the
    rule elsewhere is: hold longer).
    Observed at a22c1c8: unanswered in time, nothing is noted (and the late answer is
    thrown away, for the task's whole life): the release freed the lock at once, before
    the COMMIT of its own charge."""
    name = "adv9:bridge-busy"
    seen: dict[str, Any] = {}
    request_conn: list[Any] = []

    async def service() -> None:
        busy = asyncio.ensure_future(sync_to_async(time.sleep)(transactions.HOP_TIMEOUT + 0.5))
        await asyncio.sleep(0.1)
        await through_a_client_thread(_charge_under_lock(name, seen, request_conn))
        await busy

    with transaction.atomic():
        request_conn.append(connections["default"].connection)
        async_to_sync(service)()
    assert seen["in_transaction"] is True
    assert seen["held_after_release"], "freed before the COMMIT of its own charge"
    assert free_within(name, 2)


CALLBACK_ORDERS = 4
SECOND_CLICK = 2.0  # after the charge (about 1.6 s in), before the view's COMMIT (3.6 s)


def test_a_bridged_charge_behind_a_slow_step_under_gunicorn_never_charges_twice(
    real_database: DatabaseServer, redis_url: str
) -> None:
    """``pay-callback-busy`` (devkit/shop/adversary9.py) under gunicorn's sync workers, and a
    second click on ``pay`` for the same order 2 s later (after the bridged charge, before
    the first request's COMMIT, about 3.6 s in).

    Expected: the charge's release waits for the COMMIT; the second click then reads the
    charge ("already paid"): every order charged once.
    Observed at a22c1c8: 4 of 4 orders charged twice, on PostgreSQL and on MariaDB (0 of 4
    in adversary 8's pay-callback-thread, the same shape without the slow step)."""
    with serve_shop(real_database, redis_url, workers=2 * CALLBACK_ORDERS) as shop:
        answers = shop.click_then_pay("pay-callback-busy", CALLBACK_ORDERS, SECOND_CLICK)
        charges = shop.charges_per_order()
    assert_each_charged_once(answers, charges, CALLBACK_ORDERS)


def test_a_bridged_task_cancelled_after_its_loops_call_never_takes_back_the_view_release() -> None:
    """The view charges under the order's lock (its release waits for the COMMIT), then runs
    its async service through async_to_sync; the service has a client thread schedule a
    reconciler on the loop (run_coroutine_threadsafe, fire and forget). The reconciler takes
    another lock (anote_loop_thread notes the request's thread and its transaction), then
    waits; when the service returns, asyncio.run cancels it, and it makes sure the order is
    paid under the order's lock. asgiref no longer lists the loop in loop_thread_executors
    (new_loop_wrap's finally): its sync_to_async calls now run on asgiref's single executor
    thread, a connection of its own, outside the transaction. Its route,
    (executors.current, thread_sensitive_context), is (None, None) before and after.

    Expected: not granted (wait=0): it waits for the COMMIT like any outsider.
    Observed at a22c1c8: granted at once (the view's release taken back: the noted thread
    holds for the same route, and a noted call of None never goes stale), its ORM calls
    outside the transaction. Without the earlier lock call (nothing noted) it is refused."""
    name = "adv9:bridge-shutdown"
    seen: dict[str, Any] = {}
    request_conn: list[Any] = []

    def outside() -> bool:
        try:
            return not _in_request_transaction(request_conn)
        finally:
            if threading.current_thread() is not threading.main_thread():
                connections.close_all()

    async def reconcile(started: asyncio.Event) -> None:
        async with distlock.lock("adv9:bridge-shutdown-customer", ttl=5, wait=2):
            pass  # noted: its calls go to the request's thread
        started.set()
        try:
            await asyncio.sleep(30)  # waits for the provider's webhook
        except asyncio.CancelledError:  # the loop shuts down: make sure the order is paid
            lk = distlock.lock(name, ttl=5, wait=0)
            seen["granted"] = await lk.aacquire()
            seen["outside"] = await sync_to_async(outside)()
            if seen["granted"]:
                await lk.arelease()
            raise

    async def service() -> None:
        loop = asyncio.get_running_loop()
        started = asyncio.Event()
        threading.Thread(
            target=lambda: asyncio.run_coroutine_threadsafe(reconcile(started), loop),
            daemon=True,
        ).start()
        await started.wait()

    with transaction.atomic():
        request_conn.append(connections["default"].connection)
        with distlock.lock(name, ttl=5, wait=2):
            pass  # the view's charge: its release waits for the COMMIT
        async_to_sync(service)()
    assert seen["outside"] is True
    assert seen["granted"] is False, "took back the request's release"
    assert free_within(name, 2)


def test_a_bridged_reconciler_cancelled_at_shutdown_under_gunicorn_never_charges_twice(
    real_database: DatabaseServer, redis_url: str
) -> None:
    """``pay-shutdown-reconcile`` (devkit/shop/adversary9.py) under gunicorn's sync workers,
    one request per order.

    Expected: every order charged once (the reconciler, cancelled when the loop shuts down,
    waits for the COMMIT: refused with wait=0).
    Observed at a22c1c8: 4 of 4 orders charged twice, on PostgreSQL and on MariaDB."""
    with serve_shop(real_database, redis_url, workers=CALLBACK_ORDERS) as shop:
        answers = shop.click_orders("pay-shutdown-reconcile", CALLBACK_ORDERS, clicks=1)
        charges = shop.charges_per_order()
    assert_each_charged_once(answers, charges, CALLBACK_ORDERS)


def test_a_bridged_lock_call_outside_any_transaction_never_waits_for_the_busy_thread() -> None:
    """A management command (or a Celery task) runs its async code through async_to_sync,
    in no transaction; the code runs a sync step in the command's thread (2 s), and
    meanwhile a callback-based client's thread schedules three coroutines on the loop
    (run_coroutine_threadsafe), one after the other, each taking a lock nobody holds.

    Expected: each lock call returns at once (no transaction anywhere: before a22c1c8,
    0.00 s each).
    Observed at a22c1c8: anote_loop_thread asks the command's thread (one hop per task),
    which answers only once its sync step is done: 1.02 s (HOP_TIMEOUT, then unanswered
    for good), 0.88 s (answered when the step ended), 0.00 s; every bridged task's first
    lock call pays up to HOP_TIMEOUT whenever that thread is busy."""
    name = "adv9:bridge-no-transaction"
    took: list[float] = []

    async def take() -> None:
        began = time.monotonic()
        async with distlock.lock(name, ttl=5, wait=2):
            took.append(time.monotonic() - began)

    async def command() -> None:
        busy = asyncio.ensure_future(sync_to_async(time.sleep)(transactions.HOP_TIMEOUT + 1))
        await asyncio.sleep(0.1)
        for _ in range(3):  # three callbacks of the client, each a task of its own
            await through_a_client_thread(take())
        await busy

    async_to_sync(command)()  # a management command or a Celery task: no transaction
    assert len(took) == 3
    assert max(took) < 0.5, f"each bridged lock call took {[round(t, 2) for t in took]} s"
