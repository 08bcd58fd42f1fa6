"""Issue 39: the holder of a release waiting for a COMMIT is the transaction, never the thread;
nothing is held for ever; memory stays flat; the wrappers around Django are fail-safe.

SQLite, where the database does not matter (tests/core/test_transactions_holder_databases.py
has the shapes where it does, on PostgreSQL and MariaDB).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

import distlock
from devkit.fencingapp.models import Account
from devkit.processes import child_env, run_process
from distlock import transactions
from distlock.cache import _lock_name, get_or_set
from tests.support.lock_helpers import BrokenCounter, free_within, is_held

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "fencing"]),
    pytest.mark.usefixtures("redis_backend"),
]


class Timeout(BaseException):
    """gevent's Timeout: a BaseException raised wherever the greenlet happens to be."""


def taken_at_once(name: str, **options: Any) -> bool:
    lk = distlock.lock(name, ttl=5, wait=0, hold_until_commit=False, **options)
    got = lk.acquire()
    if got:
        lk.release()
    return got


# --- 1. the holder is the transaction ----------------------------------------------------
def test_a_pool_thread_never_takes_back_a_release_waiting_for_another_transaction() -> None:
    """The pool thread released the request's lock (it waits for the request's COMMIT); its
    next job, for the same order, must wait for that COMMIT too (before: taken back at once)."""
    with ThreadPoolExecutor(1) as pool:
        with transaction.atomic():
            lk = distlock.lock("holder:pool", ttl=5)
            assert lk.acquire()
            pool.submit(lk.release).result()
            assert not pool.submit(taken_at_once, "holder:pool").result()
            assert is_held("holder:pool")
        assert free_within("holder:pool")
        assert pool.submit(taken_at_once, "holder:pool").result()


def test_a_pool_thread_never_downgrades_a_release_waiting_for_another_transaction() -> None:
    """A shared acquire looks for the same transaction's exclusive hold to downgrade: the
    pool thread's is not the request's transaction's."""
    with ThreadPoolExecutor(1) as pool:
        with transaction.atomic():
            lk = distlock.lock("holder:downgrade", ttl=5)
            assert lk.acquire()
            pool.submit(lk.release).result()
            assert not pool.submit(taken_at_once, "holder:downgrade", shared=True).result()
        assert free_within("holder:downgrade")


def test_a_context_copied_in_one_transaction_is_not_inside_the_threads_next_one() -> None:
    """A copy of the context taken during one transaction (a task a coroutine left running, a
    job given a copy) and run later, while the same thread is in its next transaction, is not
    inside that one: it waits for that COMMIT like any other code. (Why the BEGIN sets the
    context variable anew each time instead of updating a record shared with the copies.)
    The copy runs in a coroutine, as async_to_sync runs one: sync code in another thread is
    in no transaction of this thread's (its queries run on a connection of its own)."""

    def in_a_coroutine(call: Any, *args: Any) -> Any:
        async def run() -> Any:
            return call(*args)

        return pool.submit(copied.run, asyncio.run, run()).result()

    with ThreadPoolExecutor(1) as pool:
        with transaction.atomic():
            copied = contextvars.copy_context()
            assert in_a_coroutine(transactions.transactions_here)
        with transaction.atomic():
            assert not in_a_coroutine(transactions.transactions_here)
            lk = distlock.lock("holder:copied", ttl=5)
            assert lk.acquire()
            lk.release()  # waits for this transaction's COMMIT
            assert not in_a_coroutine(taken_at_once, "holder:copied")
            assert is_held("holder:copied")
        assert free_within("holder:copied")


async def _hold_briefly(name: str, got: list[str]) -> None:
    async with distlock.lock(name, ttl=5, wait=5):
        got.append("in")
        await asyncio.sleep(0.05)
        got.append("out")


async def _both(name: str, got: list[str]) -> None:
    await asyncio.gather(_hold_briefly(name, got), _hold_briefly(name, got))


def test_two_tasks_of_one_transaction_exclude_each_other_then_hand_on() -> None:
    """asyncio.gather under async_to_sync inside atomic(): the second task gets the lock once
    the first released (before: LockNotAcquired after its wait, never with wait=None)."""
    got: list[str] = []
    started = time.monotonic()
    with transaction.atomic():
        async_to_sync(_both)("holder:gather", got)
        assert is_held("holder:gather")
    assert got == ["in", "out", "in", "out"]  # never both in at once
    assert time.monotonic() - started < 4
    assert free_within("holder:gather")


# --- 2. ends are the transaction's own ---------------------------------------------------
def test_a_hook_opening_its_own_block_leaves_the_committed_transactions_ties() -> None:
    """Both hooks registered before the release: the lock is handed on once they have run,
    not when the first one's own atomic() block ends (before: freed between them)."""
    held_at_second_hook: list[bool] = []

    def own_block() -> None:
        with transaction.atomic():
            pass

    with transaction.atomic():
        lk = distlock.lock("holder:hooks", ttl=5)
        assert lk.acquire()
        transaction.on_commit(own_block)
        transaction.on_commit(lambda: held_at_second_hook.append(is_held("holder:hooks")))
        lk.release()
    assert held_at_second_hook == [True]
    assert free_within("holder:hooks")


# --- 3. a cache rebuild guards no database work -----------------------------------------
def test_get_or_set_frees_its_build_lock_before_the_builders_commit() -> None:
    with transaction.atomic():
        assert get_or_set("holder:report", lambda: "built", 60) == "built"
        assert not is_held(_lock_name("default", "holder:report")), "waits for the COMMIT"


# --- 4. nothing held for ever ------------------------------------------------------------
@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit, Timeout])
def test_an_interrupt_during_the_release_at_commit_leaves_no_lock_renewed(
    interrupt: type[BaseException], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interrupt goes on; the interrupted lock and the ones after it in the same COMMIT
    end within their lease (before: renewed for as long as the process lived)."""
    first = distlock.lock("holder:interrupted", ttl=1)
    second = distlock.lock("holder:after", ttl=1)

    def interrupted() -> None:
        raise interrupt

    with pytest.raises(interrupt), transaction.atomic():
        for lk in (first, second):
            assert lk.acquire()
            lk.release()  # waits for the COMMIT
        monkeypatch.setattr(first, "_release_now", interrupted)
        monkeypatch.setattr(second, "_release_now", interrupted)
    assert first._lease.renewal is None and second._lease.renewal is None
    assert free_within("holder:interrupted", 3) and free_within("holder:after", 3)


def test_a_thread_that_dies_inside_a_hand_managed_transaction_frees_its_lock() -> None:
    """No commit, no rollback: the renewer finds the thread dead at its next renewal and
    frees the lock (before: held, its session "idle in transaction", for ever)."""

    def work() -> None:
        conn = connections["default"]
        conn.set_autocommit(False)
        lk = distlock.lock("holder:dead-thread", ttl=3)  # first renewal after 1 s
        assert lk.acquire()
        lk.release()  # waits for a commit() that never comes

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(10)
    assert is_held("holder:dead-thread")
    assert free_within("holder:dead-thread", 8)  # within a renewal, long before the lease


def test_a_release_waiting_for_a_commit_made_through_the_raw_driver_is_bounded(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A hand-managed transaction committed through the driver (autocommit stays off) looks
    open for ever: past MANUAL_COMMIT_WAIT the waiting release is reported lost, saying why,
    and its lease ends it (before: renewed until the next commit(), without bound)."""
    monkeypatch.setattr(transactions, "MANUAL_COMMIT_WAIT", 1.0)
    lost = threading.Event()
    conn = connections["default"]
    conn.set_autocommit(False)
    try:
        lk = distlock.lock("holder:raw-commit", ttl=1, on_lost=lambda _lock: lost.set())
        assert lk.acquire()
        conn.cursor().execute("SELECT 1")
        lk.release()  # waits for the transaction's end
        conn.connection.commit()  # the driver's own: no wrapper sees it
        assert lost.wait(20), "the waiting release was renewed without bound"
        assert "MANUAL_COMMIT_WAIT" in caplog.text
        assert free_within("holder:raw-commit", 5)  # the lease (1 s) ended it
        assert not lk.owned() and not transactions._tied.get(transactions._ref(conn))
    finally:
        conn.rollback()
        conn.set_autocommit(True)


def test_a_backend_whose_commit_skips_the_base_class_still_frees_at_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conn = connections["default"]

    class Skipping(type(conn)):  # type: ignore[misc]
        def commit(self) -> None:
            self.connection.commit()  # the driver's, not BaseDatabaseWrapper.commit

    monkeypatch.setattr(conn, "__class__", Skipping)
    conn.set_autocommit(False)
    try:
        lk = distlock.lock("holder:skipping", ttl=5)
        assert lk.acquire()
        lk.release()
        assert is_held("holder:skipping")
        conn.commit()
        assert free_within("holder:skipping")
    finally:
        conn.set_autocommit(True)


def test_a_transaction_open_when_distlock_was_installed_is_seen_and_its_end_found() -> None:
    """distlock first imported inside an open transaction: its number comes from install(),
    and its end, which no wrapper sees (the block's __exit__ was Django's own), from the
    renewer (before: the release inside it was immediate)."""
    django_exit = transaction.Atomic.__exit__.__wrapped__  # type: ignore[attr-defined]
    block = transaction.atomic()
    block.__enter__()
    try:
        conn = connections["default"]
        conn.distlock_transaction = None  # as if begun before distlock was imported
        transactions._entered.set(())
        transactions.install()  # what importing distlock does
        with distlock.lock("holder:imported", ttl=1):
            pass
        assert is_held("holder:imported"), "released inside the open transaction"
    finally:
        django_exit(block, None, None, None)  # the end no wrapper sees
    assert free_within("holder:imported", 3)


# --- 5. constant memory ------------------------------------------------------------------
def test_async_locks_through_async_to_sync_keep_no_client_per_call(redis_backend: str) -> None:
    """4,000 calls in a process of their own, half in a transaction: flat (before: a client,
    a pool and a closed loop kept per call, +25 MB and +100,000 objects per 1,000 calls)."""
    done = run_process(
        [sys.executable, "-m", "tests.support.async_to_sync_memory", "4000"],
        env=child_env(settings="tests.support.env_settings", kind="redis", url=redis_backend),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    before, after = report["before"], report["after"]
    assert after["objects"] - before["objects"] < 1000, report
    assert after["rss_kb"] - before["rss_kb"] < 10 * 1024, report


# --- 7. fail-safe ------------------------------------------------------------------------
@pytest.fixture
def failing_bookkeeping(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """distlock's bookkeeping raises in every wrapper (a renamed Django attribute, say),
    the numbering of each BEGIN included, with a tie on the connection so that no wrapper
    takes its fast path."""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise AttributeError("'DatabaseWrapper' object has no attribute 'renamed'")

    monkeypatch.setitem(transactions._tied, transactions._ref(connections["default"]), {object()})
    for name in ("own_depth", "block_ended", "_note_transaction", "_began", "_apply_end"):
        monkeypatch.setattr(transactions, name, broken, raising=False)
    monkeypatch.setattr(transactions, "_numbers", BrokenCounter("the numbering"))
    yield


@pytest.mark.usefixtures("failing_bookkeeping")
def test_an_atomic_block_with_no_lock_is_unaffected_by_failing_bookkeeping() -> None:
    """Django's own __exit__ still runs: the block commits and the connection leaves it
    (before: in_atomic_block stayed True, the transaction open)."""
    conn = connections["default"]
    with transaction.atomic():
        Account.objects.create(balance=39)
        with transaction.atomic():
            pass
    assert not conn.in_atomic_block and conn.get_autocommit()
    assert Account.objects.filter(balance=39).exists()


def test_install_is_idempotent_for_every_target_and_rewraps_a_replaced_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A library that saved Django's Atomic.__exit__ before distlock, and installs its own
    wrapper of it afterwards: install() (DistlockConfig.ready() runs it) wraps that one, and
    no target is wrapped twice. Locks are handed on at COMMIT again."""
    django_exit = transaction.Atomic.__exit__.__wrapped__  # type: ignore[attr-defined]

    def library_exit(self: Any, *args: Any) -> Any:  # a Sentry-like wrapper of the original
        return django_exit(self, *args)

    monkeypatch.setattr(transaction.Atomic, "__exit__", library_exit)
    assert call_command_errors() and "replaced" in call_command_errors()
    transactions.install()
    transactions.install()
    for cls, name, _wrap in transactions.TARGETS:
        method = getattr(cls, name)
        assert method.distlock_watches, name
        assert not getattr(method.__wrapped__, "distlock_watches", False), f"{name} twice"
    with transaction.atomic(), distlock.lock("holder:library", ttl=5):
        pass
    assert free_within("holder:library")


def call_command_errors() -> str:
    """Return what `manage.py check` reports (errors only), '' when it passes."""
    try:
        call_command("check")
    except SystemCheckError as exc:
        return str(exc)
    return ""


def test_the_check_fails_when_a_django_internal_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert call_command_errors() == ""
    monkeypatch.delattr(BaseDatabaseWrapper, "run_and_clear_commit_hooks")
    errors = call_command_errors()
    assert "distlock.E010" in errors and "has no run_and_clear_commit_hooks" in errors


def test_the_check_fails_when_asgirefs_executor_has_no_broken_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A task that outlived its async_to_sync call is told by asgiref's executor flag
    (read with a default): an asgiref without it would count the task in the request's
    transaction again, so `manage.py check` says so."""
    from asgiref.current_thread_executor import CurrentThreadExecutor

    made = CurrentThreadExecutor.__init__

    def without_flag(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        del self._broken

    assert call_command_errors() == ""
    monkeypatch.setattr(CurrentThreadExecutor, "__init__", without_flag)
    errors = call_command_errors()
    assert "distlock.E010" in errors and "CurrentThreadExecutor has no _broken" in errors


def test_install_leaves_a_library_wrapper_that_keeps_distlocks_inside(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sentry- and cacheops-style: a wrapper made with functools.wraps around distlock's,
    installed after it. install() leaves it, and the check (distlock.E010) finds distlock's
    inside: no false "replaced" error."""
    distlocks_exit = transaction.Atomic.__exit__

    @functools.wraps(distlocks_exit)
    def library_exit(self: Any, exc_type: Any, exc_value: Any, traceback: Any) -> Any:
        return distlocks_exit(self, exc_type, exc_value, traceback)

    monkeypatch.setattr(transaction.Atomic, "__exit__", library_exit)
    transactions.install()
    assert transaction.Atomic.__exit__ is library_exit
    assert call_command_errors() == ""
    with transaction.atomic(), distlock.lock("holder:kept-inside", ttl=5):
        pass
    assert free_within("holder:kept-inside")


def test_a_hook_registered_before_the_release_takes_the_lock_back() -> None:
    """The lock is handed on once the hooks registered before its release have run: such a
    hook asking for the same lock is part of that end, and must not wait for itself (it
    would until its wait ran out)."""
    took: list[float] = []

    def hook() -> None:
        started = time.monotonic()
        with distlock.lock("holder:hook-again", ttl=5, wait=2):
            took.append(time.monotonic() - started)

    with transaction.atomic():
        lk = distlock.lock("holder:hook-again", ttl=5)
        assert lk.acquire()
        transaction.on_commit(hook)
        lk.release()
    assert took and took[0] < 1, "the hook waited for its own transaction's release"
    assert free_within("holder:hook-again")
