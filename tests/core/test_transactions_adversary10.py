"""Issue 39, the tenth adversary: a release made by a coroutine that a plain thread
scheduled on async_to_sync's loop (anote_loop_thread) before its question was answered.
Each test says what it expects and what was observed at 41bdbbd.

In-process (SQLite) where the database does not matter; PostgreSQL and MariaDB served by a
real gunicorn (devkit/shop/adversary10.py) where it does. Under ASGI the shape does not
arise: the loop is the server's, none of asgiref's loops of their own, so a bridged
coroutine's ORM calls never reach the request's thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
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

BUSY = 0.5  # the thread's sync step: well over LOOP_HOP_TIMEOUT (50 ms)


def _in_request_transaction(request_conn: list[Any]) -> bool:
    conn = connections["default"]
    return conn.connection is request_conn[0] and not conn.get_autocommit()


def _split_service(name: str, seen: dict[str, Any], request_conn: list[Any]) -> Any:
    """An async service whose client takes the lock in one callback and, in another, makes
    its ORM call and releases (the callback's first lock call), the receipt's sync step
    started just before the release, so the release's question waits behind it."""
    lk = distlock.lock(name, ttl=5, wait=2)

    async def authorized() -> None:
        assert await lk.aacquire()

    async def captured() -> None:
        seen["in_transaction"] = await sync_to_async(_in_request_transaction)(request_conn)
        receipt = asyncio.ensure_future(sync_to_async(time.sleep)(BUSY))
        began = time.monotonic()
        await lk.arelease()
        seen["release_took"] = time.monotonic() - began
        seen["held_after_release"] = is_held(name)
        await receipt
        seen["held_after_answer"] = is_held(name)

    async def service() -> None:
        fraud = asyncio.ensure_future(sync_to_async(time.sleep)(BUSY))
        await asyncio.sleep(0.1)
        await through_a_client_thread(authorized())  # its question waits behind the check
        await through_a_client_thread(captured())
        await fraud

    return service


def test_a_bridged_release_before_its_answer_waits_for_the_commit_of_its_orm_calls() -> None:
    """The view opens its transaction and runs its async service through async_to_sync (a
    loop of its own: WSGI). A callback-based client's thread schedules two callbacks on the
    loop (run_coroutine_threadsafe): ``authorized`` takes the lock while the request's
    thread runs a slow fraud check (its question, which transactions are open there, waits
    behind it: unanswered after LOOP_HOP_TIMEOUT, the hold is tied to none); ``captured``
    charges through sync_to_async (the request's thread, in its transaction), starts the
    receipt's sync step there and releases: its first lock call, so its question is asked
    only now, behind the receipt, after its ORM call had run.

    Expected: the release waits for the COMMIT (the charge is uncommitted), and the lock is
    freed at the COMMIT; the release call itself does not wait for the answer.
    Observed at 41bdbbd: the release freed the lock at once ("a release before the answer
    came is freed at once, safely: none of its ORM calls has run since" holds only for
    ORM calls made after the question; this task's ran before it)."""
    name = "adv10:split"
    seen: dict[str, Any] = {}
    request_conn: list[Any] = []
    with transaction.atomic():
        request_conn.append(connections["default"].connection)
        async_to_sync(_split_service(name, seen, request_conn))()
        assert is_held(name), "freed before the COMMIT"
    assert seen["in_transaction"] is True
    assert seen["held_after_release"], "freed before the COMMIT of its own charge"
    assert seen["held_after_answer"], "freed once the answer came, before the COMMIT"
    assert seen["release_took"] < BUSY / 2, "the release call waited for the answer"
    assert free_within(name, 2)


def test_a_bridged_release_before_its_answer_outside_any_transaction_is_immediate() -> None:
    """The same service run by a management command (or a Celery task): no transaction
    anywhere. Expected: the release frees the lock at once (as at 41bdbbd), not once the
    busy thread answers (adversary 9: a busy command's callbacks must not wait for it)."""
    name = "adv10:split-no-transaction"
    seen: dict[str, Any] = {}
    async_to_sync(_split_service(name, seen, [None]))()
    assert seen["in_transaction"] is False
    assert not seen["held_after_release"], "held until the busy thread answered"
    assert seen["release_took"] < BUSY / 2


def test_a_bridged_release_before_its_answer_is_freed_if_the_transaction_rolls_back() -> None:
    """As the first test, the request's transaction rolled back (the view raised).
    Expected: held until the ROLLBACK, then freed at once, never left to its lease.
    Observed at 41bdbbd: freed at the release, before the ROLLBACK."""
    name = "adv10:split-rollback"
    seen: dict[str, Any] = {}
    request_conn: list[Any] = []

    class ViewFailed(Exception):
        pass

    with pytest.raises(ViewFailed), transaction.atomic():
        request_conn.append(connections["default"].connection)
        async_to_sync(_split_service(name, seen, request_conn))()
        raise ViewFailed
    assert seen["held_after_answer"]
    assert free_within(name, 1)


SPLIT_ORDERS = 4
SECOND_CLICK = 1.5  # after the release (about 0.6 s in), before the COMMIT (about 3 s in)


def test_a_split_bridged_payment_under_gunicorn_never_charges_twice(
    real_database: DatabaseServer, redis_url: str
) -> None:
    """``pay-callback-split`` (devkit/shop/adversary10.py) under gunicorn's sync workers (a
    loop of async_to_sync's own per request), and a second click on ``pay`` 1.5 s later.

    Expected: the captured callback's release waits for the COMMIT; the second click then
    reads the charge: every order charged once.
    Observed at 41bdbbd: 4 of 4 orders charged twice, on PostgreSQL and on MariaDB."""
    with serve_shop(real_database, redis_url, workers=2 * SPLIT_ORDERS) as shop:
        answers = shop.click_then_pay("pay-callback-split", SPLIT_ORDERS, SECOND_CLICK)
        charges = shop.charges_per_order()
    assert_each_charged_once(answers, charges, SPLIT_ORDERS)


def test_a_bridged_release_awaiting_its_answer_when_the_loop_shuts_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As the first test, but the service returns once ``captured`` has released, without
    waiting for it: the receipt's sync step and the release's question are still queued
    to the request's thread when the loop shuts down (asyncio.run cancels the tasks left,
    the hop's among them, after that thread has run it).

    Expected: the lock held until the COMMIT, then freed (not left to its lease, renewed
    for ever); nothing logged as an error.
    Observed at 41bdbbd: freed at the release, before the COMMIT."""
    name = "adv10:split-shutdown"
    seen = release_awaiting_its_answer_at_the_loops_shutdown(name)
    assert seen == {"after_the_call": True, "before_commit": True}
    assert free_within(name, 2)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def release_awaiting_its_answer_at_the_loops_shutdown(name: str, ttl: int = 5) -> dict[str, Any]:
    """The shape of the test above; return whether the lock was held after the service's
    call and just before the COMMIT."""
    lk = distlock.lock(name, ttl=ttl, wait=2)
    seen: dict[str, Any] = {}

    async def authorized() -> None:
        assert await lk.aacquire()

    async def captured(released: asyncio.Event) -> None:
        await sync_to_async(connections["default"].ensure_connection)()
        receipt = asyncio.ensure_future(sync_to_async(time.sleep)(BUSY))
        await lk.arelease()
        released.set()
        await receipt

    async def service() -> None:
        loop = asyncio.get_running_loop()
        fraud = asyncio.ensure_future(sync_to_async(time.sleep)(BUSY))
        await asyncio.sleep(0.1)
        await through_a_client_thread(authorized())
        released = asyncio.Event()
        threading.Thread(
            target=lambda: asyncio.run_coroutine_threadsafe(captured(released), loop),
            daemon=True,
        ).start()
        await released.wait()
        await fraud  # the receipt and the question still queued to the thread

    with transaction.atomic():
        async_to_sync(service)()
        seen["after_the_call"] = is_held(name)
        time.sleep(0.3)
        seen["before_commit"] = is_held(name)
    return seen


@pytest.mark.parametrize("same_object", [True, False], ids=["same-lock", "new-lock"])
def test_a_bridged_task_takes_back_its_own_release_awaiting_its_answer(same_object: bool) -> None:
    """A bridged coroutine, its thread busy in the request's transaction, takes the lock,
    releases it (no ORM call between: its question still unanswered, so the release awaits
    the answer) and asks for it again, from the same Lock object or a new one.

    Expected: granted at once (its own release, not yet settled), and freed by the end of
    the transaction, never left behind. (Held at 41bdbbd, where such a release was freed
    at once; with the release awaiting its answer, the first form was told "this Lock
    object already holds it", and the second was never freed: two settlements of one
    hold, each undoing the other's.)"""
    name = f"adv10:own-{same_object}"
    seen: dict[str, Any] = {}

    async def items() -> None:
        lk = distlock.lock(name, ttl=5, wait=3)
        for item in range(2):
            if not same_object:
                lk = distlock.lock(name, ttl=5, wait=3)
            began = time.monotonic()
            seen[item] = await lk.aacquire()
            seen[f"took {item}"] = time.monotonic() - began
            await lk.arelease()

    async def service() -> None:
        fraud = asyncio.ensure_future(sync_to_async(time.sleep)(BUSY))
        await asyncio.sleep(0.1)
        await through_a_client_thread(items())
        await fraud

    with transaction.atomic():
        async_to_sync(service)()
    assert seen[0] is True and seen[1] is True
    assert seen["took 1"] < BUSY / 2, f"waited {seen['took 1']:.2f} s for its own release"
    assert free_within(name, 2)


class Broken(Exception):
    """distlock's own bookkeeping raising (a renamed internal)."""


def _raise(*args: Any, **kwargs: Any) -> Any:
    raise Broken("bookkeeping")


@pytest.mark.parametrize("where", ["_loop_thread_transactions", "_places_seen"])
def test_a_bridged_release_awaiting_its_answer_is_fail_safe(
    where: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The first test's shape with distlock's new bookkeeping raising: at the release
    (what the loop's tasks name) or at the answer (what it names). Expected: the release
    and the service go on (nothing raised into them, the transaction commits), the lock is
    freed (at once, as before this bookkeeping: only the feature degrades) and never left
    behind, and the failure is logged once."""
    monkeypatch.setattr(transactions, where, _raise)
    monkeypatch.setattr(transactions, "_failures_logged", set())
    name = f"adv10:fail-safe-{where}"
    seen: dict[str, Any] = {}
    request_conn: list[Any] = []
    with transaction.atomic():
        request_conn.append(connections["default"].connection)
        async_to_sync(_split_service(name, seen, request_conn))()
    assert seen["in_transaction"] is True
    assert free_within(name, 2)
    failures = [r for r in caplog.records if "bookkeeping" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("inner_first", [False, True])
@pytest.mark.parametrize("inner_kind", ["async", "sync"])
def test_the_transactions_own_code_takes_back_a_release_awaiting_its_answer(
    inner_first: bool, inner_kind: str
) -> None:
    """The service runs a sync step in the request's thread (sync_to_async, inside its
    transaction), which has a callback-based client schedule a coroutine on the loop
    (run_coroutine_threadsafe) and then asks for the same lock itself, in the transaction:
    through a nested async_to_sync (``async``) or in sync code (``sync``), after the
    coroutine released it or while it still held it (``inner_first``). The coroutine's
    question waits for the request's thread, busy with the step, so its release awaits the
    answer, which can come only after the step.

    Expected: the step's code, in the request's transaction (the one the release names),
    takes the release back at once (within its wait: 3 s).
    Held at 41bdbbd (the release was freed at once); with the release held until its answer
    (this adversary's first fix), refused after its 3 s wait in all four shapes (for ever
    with wait=None, the lock renewed meanwhile)."""
    name = f"adv10:nested{inner_first}{inner_kind}"
    seen: dict[str, Any] = {}
    loop_box: list[Any] = []

    def callback_thread(coro_fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        threading.Thread(
            target=lambda: asyncio.run_coroutine_threadsafe(coro_fn(), loop_box[0]).result(),
            daemon=True,
        ).start()

    async def bridged() -> None:
        lk = distlock.lock(name, ttl=5, wait=3)
        assert await lk.aacquire()
        await asyncio.sleep(0.3 if inner_first else 0.0)
        await lk.arelease()
        seen["released"] = time.monotonic()

    async def inner() -> None:
        await asyncio.sleep(0.1 if inner_first else 0.3)
        lk = distlock.lock(name, ttl=5, wait=3)
        t0 = time.monotonic()
        seen["got"] = await lk.aacquire()
        seen["took"] = round(time.monotonic() - t0, 2)
        if seen["got"]:
            await lk.arelease()

    def step() -> None:  # sync, in the request's thread, inside its transaction
        callback_thread(bridged)
        if inner_kind == "async":
            async_to_sync(inner)()
        else:
            time.sleep(0.1 if inner_first else 0.3)
            lk = distlock.lock(name, ttl=5, wait=3)
            t0 = time.monotonic()
            seen["got"] = lk.acquire()
            seen["took"] = round(time.monotonic() - t0, 2)
            if seen["got"]:
                lk.release()

    async def service() -> None:
        loop_box.append(asyncio.get_running_loop())
        await sync_to_async(step)()

    with transaction.atomic():
        async_to_sync(service)()
    time.sleep(0.2)
    assert free_within(name, 2)
    assert seen["got"] and seen["took"] < 1.5, seen
