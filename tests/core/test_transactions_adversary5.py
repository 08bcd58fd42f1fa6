"""Issue 39, the fifth adversary: the fixes of the fourth round (aeea5fa, d0cd5aa: a
coroutine asks asgiref, once per task, which thread its ORM calls go to) attacked again.
Each test says what it expects and what was observed; each FAILS on the code it was written
against (main at 1f2cd82).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from asgiref.sync import ThreadSensitiveContext, async_to_sync, sync_to_async
from django.db import connections, transaction

import distlock
from devkit.databases import DatabaseServer
from devkit.shop.load import serve_shop
from tests.support.lock_helpers import free_within, is_held

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "fencing"]),
    pytest.mark.usefixtures("redis_backend"),
]

STEP = 5.0  # the longest any step waits for another thread (never reached when it works)


def _hooks_window_try(name: str, *, coroutine: bool) -> list[bool]:
    """A request's transaction charges under ``name`` and registers an on_commit hook (the
    receipt) before the release, so the release waits for the COMMIT and that hook. Before
    the COMMIT it hands a job to a pool thread with a copy of its context (what
    sync_to_async(thread_sensitive=False) does); the job asks for the lock (wait=0) while
    the hook runs. Return what the job got."""
    got: list[bool] = []
    in_hook, tried = threading.Event(), threading.Event()

    def hook() -> None:  # the receipt: the job asks for the lock meanwhile
        in_hook.set()
        tried.wait(STEP)

    async def inner() -> None:
        await asyncio.to_thread(in_hook.wait, STEP)
        lk = distlock.lock(name, ttl=5, wait=0)
        got.append(await lk.aacquire())
        tried.set()
        if got[-1]:
            await lk.arelease()

    def job() -> None:
        if not in_hook.wait(STEP):
            return
        if coroutine:
            async_to_sync(inner)()
        else:
            lk = distlock.lock(name, ttl=5, wait=0)
            got.append(lk.acquire())
            tried.set()
            if got[-1]:
                lk.release()

    with ThreadPoolExecutor(1) as pool:
        with transaction.atomic():  # the request's transaction
            with distlock.lock(name, ttl=5):
                transaction.on_commit(hook)  # the charge's receipt, before the release
            done = pool.submit(contextvars.copy_context().run, job)
        done.result(STEP)
    assert free_within(name, 1)
    return got


def test_a_pool_job_never_takes_back_a_release_waiting_for_the_hooks() -> None:
    """The control: sync code of a pool job (its own connection) asks for the lock while
    the request's on_commit hooks run: it waits for them (refused with wait=0)."""
    assert _hooks_window_try("adv5:hooks-sync", coroutine=False) == [False]


def test_a_pool_jobs_coroutine_never_takes_back_a_release_waiting_for_the_hooks() -> None:
    """The same job runs a coroutine of its own (async_to_sync), which asks for the lock
    while the request's on_commit hooks run.

    Expected: refused, as the job's sync code is: its ORM calls go back to the pool thread,
    it is not in the request's transaction (docs/transactions.md), nor one of its hooks.
    Observed: anote_sync_thread asks which thread the coroutine's ORM calls go to only while
    the transaction is open (own_depth > 0); during its on_commit hooks it is not, so the
    coroutine is left unnoted, counted as the transaction's own (_committing_here), and
    takes the release back before the hooks have run: the lock is handed to a job that
    is no part of the transaction before the receipt is recorded."""
    assert _hooks_window_try("adv5:hooks-coroutine", coroutine=True) == [False]


def test_a_coroutine_the_request_thread_waits_for_on_another_loop_never_hangs() -> None:
    """Under ASGI a sync view runs in the request's ThreadSensitiveContext thread. Inside
    its transaction (ATOMIC_REQUESTS) it sends a coroutine to a long-lived event loop of
    its own (a background loop thread, as clients bound to one loop are used from sync
    code) with asyncio.run_coroutine_threadsafe and waits for its result; the coroutine
    takes an async lock that no one holds.

    Expected: the coroutine gets the lock and returns, after HOP_TIMEOUT at the most.
    Before: the coroutine's context is a copy of the view's (it names the open
    transaction), so anote_sync_thread asks asgiref which thread its ORM calls go to by
    running get_ident through sync_to_async: routed to the request's thread, which is
    blocked waiting for this very coroutine, it never returned (a regression of aeea5fa;
    the view's wait ended it). Now it stops asking after HOP_TIMEOUT; unanswered, its
    release waits for the COMMIT, and it would take back no release waiting for it
    (test_an_unanswered_coroutine_never_takes_back_a_release_waiting_for_the_commit)."""
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    name = "adv5:threadsafe"

    async def client_call() -> str:
        async with distlock.lock(name, ttl=5, wait=1):
            return "done"

    def view() -> Any:
        with transaction.atomic():  # ATOMIC_REQUESTS
            future = asyncio.run_coroutine_threadsafe(client_call(), loop)
            try:
                return future.result(STEP)
            except TimeoutError:
                future.cancel()
                return "hung"

    async def asgi_request() -> Any:
        async with ThreadSensitiveContext():  # what Django's ASGIHandler does per request
            return await sync_to_async(view)()

    try:
        result = asyncio.run(asgi_request())
    finally:
        # Shut the loop down as asyncio.run does: its async generators are finalised, and
        # distlock's client for this loop closes its connections then (a loop only closed
        # left them to the garbage collector, whose ResourceWarnings failed the next test).
        asyncio.run_coroutine_threadsafe(loop.shutdown_asyncgens(), loop).result(STEP)
        loop.call_soon_threadsafe(loop.stop)
        runner.join(STEP)
        loop.close()
    assert result == "done"
    assert not is_held(name)


def _pool_job_on_a_shared_connection(name: str, *, handed: bool) -> tuple[bool, bool]:
    """Inside a request's transaction whose connection allows thread sharing, release
    ``name`` (the release waits for the COMMIT), then let a pool job given a copy of the
    context ask for it (wait=0); ``handed``: the job's thread is handed the request's
    connection first (``connections[alias] = conn``, as Django's live server does). Return
    (whether the job's queries ran on the request's connection, what it got); the lock is
    checked free right after the COMMIT."""
    got: list[bool] = []
    used: list[bool] = []

    def job() -> None:
        if handed:
            connections["default"] = request_conn
        used.append(connections["default"] is request_conn)
        lk = distlock.lock(name, ttl=5, wait=0)
        got.append(lk.acquire())
        if got[-1]:
            lk.release()  # inside the transaction: waits for its COMMIT again

    with transaction.atomic():  # the request's transaction
        request_conn = connections["default"]
        request_conn.inc_thread_sharing()
        try:
            with distlock.lock(name, ttl=5):
                pass  # the release waits for the COMMIT
            with ThreadPoolExecutor(1) as pool:
                pool.submit(contextvars.copy_context().run, job).result(STEP)
            assert is_held(name)  # still waiting for the COMMIT
        finally:
            request_conn.dec_thread_sharing()
    assert free_within(name, 1)
    return used == [True], got == [True]


def test_a_pool_job_never_takes_back_a_release_of_a_connection_shared_between_threads() -> None:
    """The request's connection allows thread sharing (``inc_thread_sharing()``, as Django's
    live server does for an in-memory SQLite database, handing that connection to its
    request threads). A pool job given a copy of the request's context
    (sync_to_async(thread_sensitive=False)) asks for a lock whose release waits for the
    request's COMMIT.

    Expected: refused (wait=0): the pool thread's queries run on its own connection
    (``connections[alias]`` there is not the shared one), outside the transaction.
    Observed on bbdc692: taken back at once, 1 of 1: _runs_in answered True for any thread
    once the connection allowed sharing."""
    on_request_conn, got = _pool_job_on_a_shared_connection("adv5:sharing", handed=False)
    assert not on_request_conn  # the pool job's queries are not on the request's connection
    assert not got, "a pool job on a connection of its own took the release back"


def test_a_thread_handed_the_shared_connection_takes_back_its_transactions_release() -> None:
    """The twin of the case above: a thread that was handed the shared connection
    (``connections[alias] = conn``, what Django's live server does in each request thread)
    runs its queries inside the request's transaction, so it takes the release back at once
    (wait=0), as the request's own thread would; the COMMIT then frees the lock."""
    on_request_conn, got = _pool_job_on_a_shared_connection("adv5:handed", handed=True)
    assert on_request_conn
    assert got, "a thread on the transaction's own connection was refused"


RECEIPT_ORDERS = 10
# A real uvicorn (one process, every request's coroutine on its loop thread), and gunicorn
# with two of uvicorn's worker processes.
SERVED = pytest.mark.parametrize(
    ("server", "workers"), [("uvicorn", 1), ("gunicorn-uvicorn", 2)], ids=["uvicorn", "gunicorn"]
)


@SERVED
def test_a_reconcilers_coroutine_under_uvicorn_never_sends_a_receipt_twice(
    real_database: DatabaseServer, redis_url: str, server: str, workers: int
) -> None:
    """The hooks-window shape served by a real uvicorn (devkit/shop/adversary5.py,
    ``pay-receipt``): the view charges the order under its lock and registers the receipt
    hook (0.5 s to send, then recorded) before the release; its async service starts a
    reconciler (a pool job's coroutine, not waited for) that sends the receipt unless it is
    recorded, under the same lock, asking while the hook runs.

    Expected: the reconciler waits for the COMMIT and the receipt hook, then finds the
    receipt: every order's receipt sent once.
    Observed on 1f2cd82: the reconciler's coroutine, left unnoted during the hooks, took the
    release back and sent the receipt again, two runs each: PostgreSQL 6 and 6 of 10
    receipts sent twice under uvicorn, 6 and 9 under gunicorn's uvicorn workers; MariaDB 3
    and 6 under uvicorn, 5 and 6 under gunicorn (0 of 10 everywhere with the fix)."""
    orders = range(1, RECEIPT_ORDERS + 1)
    with serve_shop(real_database, redis_url, workers=workers, server=server) as shop:
        shop.place_orders(RECEIPT_ORDERS)
        shop.query(
            "INSERT INTO shop_product (id, units) VALUES " + ", ".join(f"({n}, 0)" for n in orders)
        )
        answers = shop.send([f"/pay-receipt/{n}" for n in orders])
        time.sleep(2.5)  # the reconcilers: the hook's 0.5 s, then their own look
        rows = shop.query("SELECT product_id, COUNT(*) FROM shop_sale GROUP BY product_id")
    assert Counter(a.status for a in answers) == {200: RECEIPT_ORDERS}
    receipts = {int(order): int(count) for order, count in rows}
    twice = sum(count > 1 for count in receipts.values())
    assert sorted(receipts) == list(orders), f"receipts: {receipts}"
    assert twice == 0, f"{twice} of {RECEIPT_ORDERS} receipts sent twice"


TASK_ORDERS = 12
TASK_CLICKS = 3


@SERVED
def test_taskgroup_tasks_of_requests_under_uvicorn_charge_once(
    real_database: DatabaseServer, redis_url: str, server: str, workers: int
) -> None:
    """``pay-tasks`` (devkit/shop/adversary5.py) under a real uvicorn: each request's async
    service charges from two TaskGroup tasks under the order's lock; three clicks per order,
    40 ms apart. Expected: the second task of a request takes its sibling's release back
    (in the same transaction: "already paid" at once, no stall), and another request's
    tasks wait for the COMMIT: 0 orders charged twice, no request stalled."""
    with serve_shop(real_database, redis_url, workers=workers, server=server) as shop:
        started = time.monotonic()
        answers = shop.click_apart("pay-tasks", TASK_ORDERS, TASK_CLICKS, gap=0.04)
        seconds = time.monotonic() - started
        charges = shop.charges_per_order()
    assert Counter(a.status for a in answers) == {200: TASK_ORDERS * TASK_CLICKS}
    twice = {order: n for order, n in charges.items() if n > 1}
    assert not twice, f"{len(twice)} of {TASK_ORDERS} orders charged more than once"
    assert sorted(charges) == list(range(1, TASK_ORDERS + 1))
    assert Counter(a.result for a in answers) == {
        "already paid,charged": TASK_ORDERS,
        "already paid,already paid": TASK_ORDERS * (TASK_CLICKS - 1),
    }
    assert seconds < 8, f"{seconds:.1f} s: requests stalled"
