"""Issue 31: a lock taken in a transaction is released when the transaction or savepoint that
took it ends, and that end is seen directly (no ``on_commit`` callback, no garbage collector,
no object identity), however it came about.

SQLite, where the database does not matter (its savepoints and COMMIT behave as the
others'); the same patterns against PostgreSQL and MariaDB served by gunicorn are in
test_transactions_databases.py.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import close_old_connections, connections, transaction
from django.http import HttpResponse
from django.test import Client, override_settings
from django.urls import path

import distlock
from distlock import lock_view
from tests.support.lock_helpers import elsewhere, free_within, is_held

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "fencing"]),
    pytest.mark.usefixtures("redis_backend"),
]


class Declined(Exception):
    """A payment the provider refused: its savepoint rolls back."""


class HookFailed(Exception):
    """Raised by a non-robust on_commit hook, out of the COMMIT."""


def fail() -> None:
    raise HookFailed


def taken_elsewhere(name: str) -> bool:
    """Return True if another thread could take ``name`` at once (it then lets it go)."""

    def take() -> bool:
        lk = distlock.lock(name, ttl=5, wait=0)
        got = lk.acquire()
        if got:
            lk.release()
        return got

    return bool(elsewhere(take))


# --- where the lock was taken decides ----------------------------------------------------
def test_a_repeat_in_a_rolled_back_savepoint_keeps_the_first_take() -> None:
    """A batch meets order 1 twice, one savepoint per item; the repeat is declined."""
    with transaction.atomic():
        for declined in (False, True):
            try:
                with transaction.atomic(), distlock.lock("batch:1", ttl=5, wait=0):
                    if declined:
                        raise Declined
            except Declined:
                pass
        assert is_held("batch:1"), "freed while the first charge was uncommitted"
        assert not taken_elsewhere("batch:1")
    assert free_within("batch:1")


KINDS: dict[str, Any] = {
    "lock": lambda name: distlock.lock(name, ttl=5, wait=0),
    "shared": lambda name: distlock.lock(name, ttl=5, wait=0, shared=True),
    "semaphore": lambda name: distlock.semaphore(name, 1, ttl=5, wait=0),
}


def kept_out(kind: str, name: str) -> bool:
    """Return True if another thread is kept out of ``name`` (a writer, for a shared lock)."""
    other = KINDS["lock" if kind == "shared" else kind]
    return elsewhere(lambda: other(name).acquire()) is False


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_is_tied_where_it_was_taken(kind: str) -> None:
    make = KINDS[kind]
    with transaction.atomic():
        for declined in (False, True):  # taken, then taken back in a savepoint rolled back
            try:
                with transaction.atomic(), make("kinds"):
                    if declined:
                        raise Declined
            except Declined:
                pass
        with pytest.raises(Declined), transaction.atomic():
            with make("kinds:inner"):
                pass
            raise Declined
        assert kept_out(kind, "kinds"), "freed while the first take was uncommitted"
        assert not kept_out(kind, "kinds:inner"), "held after the savepoint that took it"
    assert not kept_out(kind, "kinds")


def test_a_batch_with_repeats_holds_every_order_until_the_commit() -> None:
    items = [1, 2, 1, 3, 2, 1]
    seen: set[int] = set()
    with transaction.atomic():
        for item in items:
            try:
                with transaction.atomic(), distlock.lock(f"batch:{item}", ttl=5, wait=0):
                    if item in seen:
                        raise Declined  # a repeat: its savepoint rolls back
                    seen.add(item)
            except Declined:
                pass
            assert is_held(f"batch:{item}")
        assert all(is_held(f"batch:{item}") for item in seen)
    assert all(free_within(f"batch:{item}") for item in seen)


def test_a_release_inside_a_savepoint_that_rolls_back_keeps_an_outer_take() -> None:
    with transaction.atomic():
        lk = distlock.lock("outer-take", ttl=5)
        assert lk.acquire()
        with pytest.raises(Declined), transaction.atomic():
            lk.release()
            raise Declined
        assert is_held("outer-take"), "freed while the outer writes were uncommitted"
    assert free_within("outer-take")


def test_a_lock_taken_inside_a_rolled_back_savepoint_is_freed_with_it() -> None:
    with transaction.atomic():
        with pytest.raises(Declined), transaction.atomic():
            with distlock.lock("inner-take", ttl=5):
                pass
            raise Declined
        assert free_within("inner-take")


def test_a_lock_taken_in_a_released_savepoint_waits_for_the_outer_commit() -> None:
    with transaction.atomic():
        with transaction.atomic(), distlock.lock("moved-up", ttl=5):
            pass
        with pytest.raises(Declined), transaction.atomic():
            raise Declined  # an unrelated savepoint
        assert is_held("moved-up")
    assert free_within("moved-up")


def test_a_lock_taken_before_the_transaction_waits_for_it_when_released_inside() -> None:
    lk = distlock.lock("before", ttl=5)
    assert lk.acquire()
    with transaction.atomic():
        with pytest.raises(Declined), transaction.atomic():
            lk.release()
            raise Declined
        assert is_held("before")
    assert free_within("before")


def test_a_lock_taken_in_a_transaction_and_released_after_it_goes_at_once() -> None:
    with transaction.atomic():
        lk = distlock.lock("after", ttl=5)
        assert lk.acquire()
    lk.release()
    assert not is_held("after")


def test_a_release_by_another_thread_waits_for_the_transaction_that_took_the_lock() -> None:
    with transaction.atomic():
        lk = distlock.lock("handed", ttl=5)
        assert lk.acquire()
        elsewhere(lk.release)  # a worker thread, in no transaction of its own
        assert is_held("handed"), "freed while the transaction that took it was open"
    assert free_within("handed")


# --- however the transaction ends --------------------------------------------------------
def test_a_failing_hook_with_its_exception_kept_frees_at_commit() -> None:
    kept: list[BaseException] = []
    try:
        with transaction.atomic():
            transaction.on_commit(fail)
            with distlock.lock("hook:kept", ttl=30):
                pass
    except HookFailed as exc:
        kept.append(exc)  # its traceback keeps Django's frames, and their locals, alive
    assert kept and free_within("hook:kept")


# Kept apart from the test above (duplicates pairs their blocks): the cycle must be made by the
# frame that catches the hook's exception; a shared helper catching it would be that frame
# instead of pay()'s, and the test would no longer build the cycle it is about.
def test_a_failing_hook_in_a_reference_cycle_frees_at_commit_without_gc() -> None:
    def pay() -> None:
        try:
            with transaction.atomic():
                transaction.on_commit(fail)
                with distlock.lock("hook:cycle", ttl=30):
                    pass
        except HookFailed as exc:
            failure = exc  # noqa: F841  # the frame holds its own traceback: a cycle
        return None

    gc.disable()
    try:
        pay()
        assert free_within("hook:cycle")
    finally:
        gc.enable()


def test_a_failing_hook_registered_after_the_release_frees_at_commit() -> None:
    with pytest.raises(HookFailed), transaction.atomic():
        with distlock.lock("hook:after", ttl=30):
            pass
        transaction.on_commit(fail)
    assert free_within("hook:after")


@pytest.mark.parametrize("closing", ["connection.close()", "close_old_connections()"])
def test_a_connection_closed_inside_atomic_frees_when_the_block_ends(closing: str) -> None:
    # "fencing" is a file: an in-memory SQLite database ignores close().
    with transaction.atomic(using="fencing"), distlock.lock(f"closed:{closing}", ttl=30):
        if closing == "connection.close()":
            connections["fencing"].close()
        else:
            close_old_connections()  # in a block, autocommit is off: it closes
        assert connections["fencing"].closed_in_transaction
    assert free_within(f"closed:{closing}")


# --- transactions managed by hand, and async_to_sync -------------------------------------
@pytest.mark.parametrize("end", ["commit", "rollback", "close"])
def test_a_manual_transaction_holds_the_lock_until_it_ends(end: str) -> None:
    conn = connections["fencing"]
    transaction.set_autocommit(False, using="fencing")
    try:
        with distlock.lock("manual", ttl=5):
            conn.cursor().execute("SELECT 1")
        with transaction.atomic(using="fencing"), distlock.lock("manual:atomic", ttl=5):
            pass  # an atomic block inside a manual transaction is a savepoint of it
        assert is_held("manual") and is_held("manual:atomic"), "freed before the commit"
        if end == "close":
            conn.close()
        else:
            getattr(transaction, end)(using="fencing")
        assert free_within("manual") and free_within("manual:atomic")
    finally:
        if conn.connection is not None:
            conn.rollback()
            transaction.set_autocommit(True, using="fencing")


def test_a_manual_savepoint_rolled_back_frees_what_it_took() -> None:
    transaction.set_autocommit(False, using="fencing")
    try:
        with pytest.raises(Declined), transaction.atomic(using="fencing"):
            with distlock.lock("manual:rolled-back", ttl=5):
                pass
            raise Declined
        assert free_within("manual:rolled-back")
    finally:
        transaction.rollback(using="fencing")
        transaction.set_autocommit(True, using="fencing")


async def pay_async(name: str) -> None:
    async with distlock.lock(name, ttl=5):
        pass


def test_an_async_lock_through_async_to_sync_waits_for_the_callers_transaction() -> None:
    with transaction.atomic():
        async_to_sync(pay_async)("a2s")
        assert is_held("a2s"), "an async release inside the caller's transaction went at once"
        assert not taken_elsewhere("a2s")
    assert free_within("a2s")
    async_to_sync(pay_async)("a2s:autocommit")
    assert not is_held("a2s:autocommit")


def test_async_to_sync_inside_a_savepoint_that_rolls_back_frees_with_it() -> None:
    with transaction.atomic():
        with pytest.raises(Declined), transaction.atomic():
            async_to_sync(pay_async)("a2s:savepoint")
            assert is_held("a2s:savepoint")
            raise Declined
        assert free_within("a2s:savepoint")


# --- lock_view under ATOMIC_REQUESTS, with a failing hook --------------------------------
@lock_view("view:{order_id}", ttl=30)
def pay_and_fail(request: Any, order_id: int) -> HttpResponse:
    transaction.on_commit(fail)
    with distlock.lock(f"inside:{order_id}", ttl=30):
        pass
    return HttpResponse("paid")


urlpatterns = [path("pay/<int:order_id>", pay_and_fail)]


@pytest.fixture
def atomic_requests(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(connections.settings["default"], "ATOMIC_REQUESTS", True)
    with override_settings(ROOT_URLCONF=__name__):
        yield


@pytest.mark.usefixtures("atomic_requests")
def test_a_failing_hook_in_a_locked_view_frees_both_locks_without_gc() -> None:
    client = Client(raise_request_exception=False)
    gc.disable()
    try:
        response = client.post("/pay/1")
        assert response.status_code == 500  # the hook's exception, kept by the response
        assert response.exc_info[0] is HookFailed
        assert free_within("view:1"), "the view's lock"
        assert free_within("inside:1"), "the lock released inside the view"
    finally:
        gc.enable()
