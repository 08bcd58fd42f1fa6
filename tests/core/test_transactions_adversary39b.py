"""Issue 39, adversary 39b: shapes the hop39/share39/adv39 fixes did not cover. Each test
says what it expects and what was observed on main at 7fc1f05.

In-process (SQLite, an event loop standing for uvicorn's), as in test_transactions_adversary6.
"""

from __future__ import annotations

import asyncio
import time
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

STEP = 5.0  # the longest any step waits for another thread (never reached when it works)


def test_a_task_left_by_a_nested_call_behind_busy_sync_code_ties_its_release() -> None:
    """The request's sync view opens its transaction, then runs its service through
    async_to_sync (the outer call); the service runs sync code in the request's thread
    (sync_to_async) that runs an inner service through async_to_sync (the inner call),
    which starts a follow-up task and returns; the sync code works on longer than
    HOP_TIMEOUT; the outer service then waits for the follow-up. The follow-up takes a
    lock, writes through the ORM (thread-sensitive: queued to the request's thread through
    the outer call, which still runs: on the request's connection, in its transaction) and
    releases the lock.

    Expected: its release waits for the COMMIT (its write is in the transaction; another
    process taking the lock at once reads the rows as they were before: double execution).
    Observed on 7fc1f05: the follow-up's question to asgiref, queued behind the busy sync
    code, timed out; its inner call had returned, so it was taken as outside every
    transaction (_unanswered: _NOWHERE, looking at the innermost call only): its release
    freed the lock at once while its write was uncommitted."""
    name = "adv39b:nested-busy"
    seen: dict[str, Any] = {}
    request_conn: list[Any] = []

    async def follow_up() -> None:
        await asyncio.sleep(0.05)  # the inner service has returned by then
        lk = distlock.lock(name, ttl=5, wait=0)
        assert await lk.aacquire()
        seen["on_request_conn"] = await sync_to_async(
            lambda: (
                connections["default"].connection is request_conn[0]
                and connections["default"].in_atomic_block
            )
        )()
        seen["noted"] = transactions._noted_sync_thread()
        await lk.arelease()
        seen["held_after_release"] = is_held(name)

    holder: list[asyncio.Task[None]] = []

    async def inner() -> None:
        holder.append(asyncio.create_task(follow_up()))

    def busy() -> None:
        async_to_sync(inner)()
        time.sleep(transactions.HOP_TIMEOUT + 0.5)  # works on in the request's thread

    async def service() -> None:
        await sync_to_async(busy)()
        await holder[0]

    def view() -> None:
        with transaction.atomic():  # the request's transaction (ATOMIC_REQUESTS)
            request_conn.append(connections["default"].connection)
            async_to_sync(service)()
            seen["held_before_commit"] = is_held(name)

    async def serve() -> None:
        async with ThreadSensitiveContext():  # as Django's ASGIHandler serves a request
            await sync_to_async(view)()

    asyncio.run(serve())
    assert seen["on_request_conn"] is True  # its write was in the request's transaction
    assert seen["held_after_release"], f"freed before the COMMIT (noted {seen['noted']})"
    assert seen["held_before_commit"]
    assert free_within(name, 1)


ORDERS = 10
SECOND_CLICK = 1.2  # after the charge took the lock (HOP_TIMEOUT), before it released it


def test_a_nested_follow_up_under_uvicorn_never_charges_twice(
    real_database: DatabaseServer, redis_url: str
) -> None:
    """``pay-nested-follow-up`` (devkit/shop/adversary39b.py) under a real uvicorn, and a
    second click on ``pay`` for the same order 1.2 s later (it waits for the order's lock).

    Expected: the charge's release waits for the request's COMMIT; the second click then
    reads the charge ("already paid"): every order charged once.
    Observed on 7fc1f05: the charge's question to asgiref, queued behind the receipt in the
    request's thread, timed out; its inner call had returned, so it was counted as in no
    transaction and its release freed the lock before the COMMIT of its charge; the second
    click read the order unpaid and charged it again."""
    with serve_shop(real_database, redis_url, workers=1, server="uvicorn") as shop:
        answers = shop.click_then_pay("pay-nested-follow-up", ORDERS, SECOND_CLICK)
        charges = shop.charges_per_order()
    assert_each_charged_once(answers, charges, ORDERS)
