"""Issue 39, the eighth adversary: the answer a coroutine notes about which thread its ORM
calls go to (anote_sync_thread), and the unanswered coroutine (HOP_TIMEOUT). Each test says
what it expects and what was observed on main at 8aafe3c; each FAILS there (each was
marked ``xfail(strict=True)`` until it was fixed).

In-process (SQLite, an event loop standing for uvicorn's) where the database does not
matter; PostgreSQL and MariaDB served by a real uvicorn (devkit/shop/adversary8.py) where
it does.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from asgiref.sync import ThreadSensitiveContext, async_to_sync, sync_to_async
from django.db import connections, transaction

import distlock
from devkit.databases import DatabaseServer
from devkit.shop.load import assert_each_charged_once, serve_shop
from distlock import transactions
from tests.support.lock_helpers import free_within, is_held

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "fencing"]),
    pytest.mark.usefixtures("redis_backend"),
]


def _in_request_transaction(request_conn: list[Any]) -> bool:
    conn = connections["default"]
    return conn.connection is request_conn[0] and conn.in_atomic_block


# --- 1. an answer noted inside ThreadSensitiveContext(executor=...) ---------------------
def test_a_release_after_an_executor_block_waits_for_the_commit() -> None:
    """The request's sync view opens its transaction and runs its async service through
    async_to_sync. The service first works under one lock inside
    ``ThreadSensitiveContext(executor=legacy)`` (asgiref sends its thread-sensitive calls to
    the legacy client's thread there), then, after the block, takes the order's lock and
    charges through sync_to_async: in the request's thread, on its connection, inside its
    transaction (asgiref sends thread-sensitive calls there again), and releases.

    Expected: that release waits for the COMMIT (the charge is uncommitted).
    Observed on 8aafe3c: the coroutine noted the legacy thread inside the block, with no
    async_to_sync call to go stale with; after the block it still counts as outside the
    transaction: its release freed the lock at once, before the COMMIT."""
    seen: dict[str, Any] = {}
    request_conn: list[Any] = []
    legacy = ThreadPoolExecutor(1)

    async def service() -> None:
        async with (
            ThreadSensitiveContext(executor=legacy),
            distlock.lock("adv8:receipt", ttl=5, wait=2),
        ):
            await sync_to_async(time.sleep)(0.01)  # the legacy client's work
        lk = distlock.lock("adv8:pay", ttl=5, wait=2)
        assert await lk.aacquire()
        seen["in_transaction"] = await sync_to_async(_in_request_transaction)(request_conn)
        await lk.arelease()
        seen["held_after_release"] = is_held("adv8:pay")

    try:
        with transaction.atomic():
            request_conn.append(connections["default"].connection)
            async_to_sync(service)()
    finally:
        legacy.shutdown()
    assert seen["in_transaction"] is True  # the charge was in the request's transaction
    assert seen["held_after_release"], "freed before the COMMIT of its own charge"
    assert free_within("adv8:pay", 2)


def test_a_coroutine_inside_an_executor_block_never_takes_back_the_requests_release() -> None:
    """The view charges under the order's lock (its release waits for the COMMIT), then
    runs its async service through async_to_sync. The service takes the customer's lock
    (the coroutine notes the request's thread), then, inside
    ``ThreadSensitiveContext(executor=legacy)``, asks for the order's lock: its
    thread-sensitive calls run on the legacy thread's connection, outside the transaction
    (they read the order unpaid).

    Expected: not granted (it is not in the request's transaction: it waits for the
    COMMIT, as a pool job does; wait=0 here).
    Observed on 8aafe3c: granted at once (the request's release taken back), its next
    ORM call on a connection of its own, outside the transaction."""
    seen: dict[str, Any] = {}
    request_conn: list[Any] = []
    legacy = ThreadPoolExecutor(1)

    def outside() -> bool:
        try:
            return not _in_request_transaction(request_conn)
        finally:
            connections.close_all()  # the legacy thread's connection ends with its call

    async def service() -> None:
        async with (
            distlock.lock("adv8:customer", ttl=5, wait=2),
            ThreadSensitiveContext(executor=legacy),
        ):
            lk = distlock.lock("adv8:order", ttl=5, wait=0)
            seen["granted"] = await lk.aacquire()
            seen["outside"] = await sync_to_async(outside)()
            if seen["granted"]:
                await lk.arelease()

    try:
        with transaction.atomic():
            request_conn.append(connections["default"].connection)
            with distlock.lock("adv8:order", ttl=5, wait=2):
                pass  # the view's charge: its release waits for the COMMIT
            async_to_sync(service)()
    finally:
        legacy.shutdown()
    assert seen["outside"] is True  # its ORM calls ran outside the transaction
    assert seen["granted"] is False, "took back the request's release"
    assert free_within("adv8:order", 2)


# --- 2. a task of the transaction unanswered behind a sibling's sync work ------------------
def test_two_tasks_hand_on_when_a_siblings_sync_work_outlasts_the_hop_timeout() -> None:
    """asyncio.gather under async_to_sync inside atomic(): the first task takes the lock and
    charges through sync_to_async (the request's thread) for longer than HOP_TIMEOUT (a
    slow payment provider); the second looks a price up (async) once the first is
    charging, then asks for the same lock with wait=4.

    Expected: the second gets the lock once the first released (about 1.5 s in), as two
    tasks of one transaction do (docs/transactions.md, issue 39's gather row).
    Observed on 8aafe3c: the second's question to asgiref waited behind the first's sync
    work and timed out (unanswered); it then took the sibling's hold for another
    transaction's: refused after 5.0 s (1 s question + its 4 s wait); with wait=None it
    never returns."""
    name = "adv8:gather-busy"
    got: list[tuple[str, float]] = []
    began = time.monotonic()

    charging = asyncio.Event()

    async def first() -> None:
        async with distlock.lock(name, ttl=5, wait=4):
            got.append(("first", time.monotonic() - began))
            charging.set()
            await sync_to_async(time.sleep)(transactions.HOP_TIMEOUT + 0.5)  # the provider

    async def second() -> None:
        await charging.wait()
        await asyncio.sleep(0.2)  # the price look-up, once the first item is charging
        lk = distlock.lock(name, ttl=5, wait=4)
        if await lk.aacquire():
            got.append(("second", time.monotonic() - began))
            await lk.arelease()

    async def both() -> None:
        await asyncio.gather(first(), second())

    with transaction.atomic():
        async_to_sync(both)()
    assert free_within(name, 2)
    assert [who for who, _at in got] == ["first", "second"], f"got {got}"


# --- 3. the same shapes served: PostgreSQL and MariaDB under uvicorn -----------------------
ORDERS = 10
SECOND_CLICK = 1.0  # after the service's charge, before the view's COMMIT (2 s later)


def test_a_charge_after_an_executor_block_under_uvicorn_never_charges_twice(
    real_database: DatabaseServer, redis_url: str
) -> None:
    """``pay-legacy-client`` (devkit/shop/adversary8.py) under a real uvicorn, and a second
    click on ``pay`` for the same order 1 s later (it asks for the order's lock while the
    first request's view works on before its COMMIT).

    Expected: the charge's release waits for the first request's COMMIT; the second click
    then reads the charge ("already paid"): every order charged once.
    Observed on 8aafe3c: 10 of 10 orders charged twice, on PostgreSQL and on MariaDB."""
    with serve_shop(real_database, redis_url, workers=1, server="uvicorn") as shop:
        answers = shop.click_then_pay("pay-legacy-client", ORDERS, SECOND_CLICK)
        charges = shop.charges_per_order()
    assert_each_charged_once(answers, charges, ORDERS)


ITEM_ORDERS = 4


def test_two_items_of_one_order_under_uvicorn_both_get_the_lock(
    real_database: DatabaseServer, redis_url: str
) -> None:
    """``pay-items-slow`` (devkit/shop/adversary8.py) under a real uvicorn: one request per
    order, its two items charged at once (asyncio.gather) under the order's lock, the
    first item's charge taking 1.5 s in the request's thread.

    Expected: 200 for every request, in about 3 s (the items one after the other).
    Observed on 8aafe3c: 500 for every request (the second item's LockNotAcquired after
    its 4 s wait, 5.2 s in), on PostgreSQL and on MariaDB."""
    with serve_shop(real_database, redis_url, workers=1, server="uvicorn") as shop:
        answers = shop.click_orders("pay-items-slow", ITEM_ORDERS, clicks=1)
        charges = shop.charges_per_order()
    assert_each_charged_once(answers, charges, ITEM_ORDERS)


# --- 4. a coroutine scheduled on async_to_sync's loop from a thread of its own -------------
def test_a_coroutine_a_callback_thread_schedules_ties_its_release() -> None:
    """The request's sync view opens its transaction and runs its async service through
    async_to_sync (no running loop: a loop of its own, as under WSGI). The service hands
    the charge to a callback-based client: a plain thread that schedules the charging
    coroutine back on the service's loop (asyncio.run_coroutine_threadsafe). That coroutine
    takes the order's lock, charges through sync_to_async and releases.

    Expected: the release waits for the COMMIT: asgiref sends the charge to the request's
    thread (the loop's CurrentThreadExecutor, AsyncToSync.loop_thread_executors), on its
    connection, inside its transaction.
    Observed on 8aafe3c: the coroutine's context (a copy of the plain thread's, empty) names
    no transaction: its release freed the lock at once, before the COMMIT of its charge."""
    seen: dict[str, Any] = {}
    request_conn: list[Any] = []

    async def charge() -> None:
        async with distlock.lock("adv8:callback", ttl=5, wait=2):
            seen["in_transaction"] = await sync_to_async(_in_request_transaction)(request_conn)
        seen["held_after_release"] = is_held("adv8:callback")

    async def service() -> None:
        loop = asyncio.get_running_loop()
        sent: list[Any] = []
        thread = threading.Thread(
            target=lambda: sent.append(asyncio.run_coroutine_threadsafe(charge(), loop))
        )
        thread.start()
        await asyncio.to_thread(thread.join)
        await asyncio.wrap_future(sent[0])

    with transaction.atomic():
        request_conn.append(connections["default"].connection)
        async_to_sync(service)()
    assert seen["in_transaction"] is True  # the charge was in the request's transaction
    assert seen["held_after_release"], "freed before the COMMIT of its own charge"
    assert free_within("adv8:callback", 2)


CALLBACK_ORDERS = 4  # one gunicorn sync worker per request in flight: 8 workers


def test_a_charge_scheduled_by_a_callback_thread_under_gunicorn_never_charges_twice(
    real_database: DatabaseServer, redis_url: str
) -> None:
    """``pay-callback-thread`` (devkit/shop/adversary8.py) under gunicorn's sync workers
    (WSGI: async_to_sync runs the service on a loop of its own), and a second click on
    ``pay`` for the same order 1 s later, while the first request's view works on.

    Expected: every order charged once.
    Observed on 8aafe3c: 4 of 4 orders charged twice, on PostgreSQL and on MariaDB."""
    with serve_shop(real_database, redis_url, workers=2 * CALLBACK_ORDERS) as shop:
        answers = shop.click_then_pay("pay-callback-thread", CALLBACK_ORDERS, SECOND_CLICK)
        charges = shop.charges_per_order()
    assert_each_charged_once(answers, charges, CALLBACK_ORDERS)


# --- 5. an event loop held longer than HOP_TIMEOUT ------------------------------------------
def test_the_transactions_coroutine_takes_back_its_release_after_the_loop_was_held() -> None:
    """The view charges under the order's lock (its release waits for the COMMIT), then runs
    its async service through async_to_sync; the service asks for the order's lock again
    (the same transaction) while other code on the event loop (another request's, run
    right after it) holds the loop for 1.5 s.

    Expected: granted at once once the loop is free (the request's thread answers at once:
    it only waits for this coroutine).
    Observed on 8aafe3c: the answer came after HOP_TIMEOUT had run out on the held loop;
    unanswered, the coroutine waited for its own transaction's COMMIT: refused after its
    wait (1.5 s + 3 s); with wait=None it never returns, the lock renewed meanwhile."""
    seen: dict[str, Any] = {}

    async def service() -> None:
        asyncio.get_running_loop().call_soon(time.sleep, 1.5)  # another request's code
        lk = distlock.lock("adv8:loop-held", ttl=5, wait=3)
        seen["granted"] = await lk.aacquire()
        if seen["granted"]:
            await lk.arelease()

    with transaction.atomic():
        with distlock.lock("adv8:loop-held", ttl=5, wait=2):
            pass  # the view's charge: its release waits for the COMMIT
        async_to_sync(service)()
    assert seen["granted"], "its own transaction's release was not taken back"
    assert free_within("adv8:loop-held", 2)


LOYALTY_ORDERS = 3


def test_a_loyalty_credit_after_the_loop_was_held_under_uvicorn_succeeds(
    real_database: DatabaseServer, redis_url: str
) -> None:
    """``pay-then-loyalty`` (devkit/shop/adversary8.py) under a real uvicorn: the view
    charges under the order's lock, then its async loyalty service takes the lock again
    (the same transaction) while a sibling task renders a badge on the event loop for 1.5 s.

    Expected: 200 for every request (the take-back is the same transaction's).
    Observed on 8aafe3c: 500 for every request (3 of 3; 4 of 4 sent one after the other),
    on PostgreSQL and on MariaDB; 4 of 4 answered 200 when the badge waits without holding
    the loop (asyncio.sleep)."""
    with serve_shop(real_database, redis_url, workers=1, server="uvicorn") as shop:
        shop.place_orders(LOYALTY_ORDERS)
        # One after the other: each request's badge holds the one event loop 1.5 s, and
        # concurrent ones would add up past the credit's own wait whatever distlock did.
        answers = [shop.post(f"/pay-then-loyalty/{n}") for n in range(1, LOYALTY_ORDERS + 1)]
        charges = shop.charges_per_order()
    assert_each_charged_once(answers, charges, LOYALTY_ORDERS)


# --- 6. asyncio.run() in the request's thread ------------------------------------------------
def test_a_coroutine_asyncio_run_runs_in_the_view_never_takes_back_the_requests_release() -> None:
    """The view charges under the order's lock (its release waits for the COMMIT), then runs
    its async reconciler with asyncio.run() (a loop in the request's own thread, instead of
    async_to_sync); the reconciler asks for the order's lock, and its ORM calls
    (sync_to_async) run on asgiref's single executor thread, a connection of its own.

    Expected: not granted (it is not in the transaction: it waits for the COMMIT; wait=0).
    Observed on 8aafe3c: granted at once (the request's release taken back: the running
    thread is the connection's), its ORM calls outside the transaction."""
    seen: dict[str, Any] = {}
    request_conn: list[Any] = []

    def outside() -> bool:
        try:
            return not _in_request_transaction(request_conn)
        finally:
            connections.close_all()  # the executor thread's connection ends with its call

    async def reconcile() -> None:
        lk = distlock.lock("adv8:asyncio-run", ttl=5, wait=0)
        seen["granted"] = await lk.aacquire()
        seen["outside"] = await sync_to_async(outside)()
        if seen["granted"]:
            await lk.arelease()

    with transaction.atomic():
        request_conn.append(connections["default"].connection)
        with distlock.lock("adv8:asyncio-run", ttl=5, wait=2):
            pass  # the view's charge: its release waits for the COMMIT
        asyncio.run(reconcile())
    assert seen["outside"] is True  # its ORM calls ran outside the transaction
    assert seen["granted"] is False, "took back the request's release"
    assert free_within("adv8:asyncio-run", 2)


def test_a_reconciler_run_by_asyncio_run_under_gunicorn_never_charges_twice(
    real_database: DatabaseServer, redis_url: str
) -> None:
    """``pay-asyncio-run`` (devkit/shop/adversary8.py) under gunicorn's sync workers, one
    request per order.

    Expected: every order charged once (the reconciler waits for the COMMIT, refused after
    its 2 s wait, or reads the charge).
    Observed on 8aafe3c: 4 of 4 orders charged twice, on PostgreSQL and on MariaDB."""
    with serve_shop(real_database, redis_url, workers=CALLBACK_ORDERS) as shop:
        answers = shop.click_orders("pay-asyncio-run", CALLBACK_ORDERS, clicks=1)
        charges = shop.charges_per_order()
    assert_each_charged_once(answers, charges, CALLBACK_ORDERS)
