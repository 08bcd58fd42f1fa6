"""Issue 39, the eleventh adversary: the tenth adversary's fix (5231b9f, 371c4a3), a bridged
coroutine's release made before its thread's answer held until that answer
(``LockTies.settle_on_answer``, ``_awaiting_here``). Each test says what it expects and
what was observed at 1356c87.

In-process (SQLite): the shapes are about which code may take such a release back, not
about the database. Each test failed at 0b12a23 (under ``--runxfail``); the fix places sync
code in the transactions open on its own thread's connections (``_begun_on``), whatever its
context names, reads the loop thread's open transactions from the same registry instead of
its tasks' contexts (no Python 3.11 branch left), looks for a late answer while a release
awaits one, and adds one done callback per hold and answer.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import connections, transaction

import distlock
from devkit.shop.bridge import through_a_client_thread
from distlock import transactions
from tests.core import test_transactions_adversary10 as adversary10
from tests.support.lock_helpers import (
    atake_timed,
    forced_free_after,
    free_within,
    is_held,
    take_timed,
)

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "fencing"]),
    pytest.mark.usefixtures("redis_backend"),
]


@pytest.fixture(autouse=True)
def no_transaction_managed_by_hand_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a process that never turned autocommit off by hand (the usual one). Before the
    fix, sync code found its own thread's open transactions only once one had
    (``transactions._manual_seen``, left True by earlier tests of the suite): the step
    shapes below then passed after test_transactions_adversary2.py, and failed alone."""
    monkeypatch.setattr(transactions, "_manual_seen", False)


WAIT = 3  # the step's wait for the lock (s): a take-back is at once, a deadlock is all of it


async def _beside_a_fraud_check(*callbacks: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """The service: the request's thread runs a 1 s fraud check while a client's thread
    schedules each callback on the loop in turn (their questions queue behind the check)."""
    fraud = asyncio.ensure_future(sync_to_async(time.sleep)(1.0))
    await asyncio.sleep(0.1)
    for callback in callbacks:
        await through_a_client_thread(callback())
    await fraud


def _in_request_transaction(request_conn: list[Any]) -> bool:
    conn = connections["default"]
    return conn.connection is request_conn[0] and not conn.get_autocommit()


def bridged_take_and_release(name: str, loop: asyncio.AbstractEventLoop) -> bool:
    """From sync code that keeps ``loop``'s thread busy: have a callback-based client's
    thread schedule a coroutine on ``loop`` that takes ``name`` and releases it (its
    question to the busy thread unanswered: the release awaits the answer). Return True
    once it has released (waited for: a fixed sleep let a loaded machine's code ask for the
    lock first, and the bridged coroutine then waited, and was cancelled)."""
    released = threading.Event()

    async def bridged() -> None:
        lk = distlock.lock(name, ttl=5, wait=WAIT)
        assert await lk.aacquire()
        await lk.arelease()
        released.set()

    threading.Thread(
        target=lambda: asyncio.run_coroutine_threadsafe(bridged(), loop).result(), daemon=True
    ).start()
    return released.wait(30)


def _run_step_with_a_bridged_release(
    name: str,
    seen: dict[str, Any],
    request_conn: list[Any],
    step_from_bridged: bool,
    wait: float | None = WAIT,
) -> None:
    """The view's transaction runs its async service through async_to_sync. A sync step
    runs in the request's thread (sync_to_async), started by the service's own coroutine
    or (``step_from_bridged``) by a coroutine a callback-based client's thread scheduled on
    the loop. The step has the client schedule another coroutine, which takes the lock and
    releases it while the request's thread is busy with the step (its question unanswered:
    the release awaits the answer); then the step asks for the same lock, in sync code."""
    loop_box: list[Any] = []

    def step() -> None:  # sync, in the request's thread and its transaction
        seen["step_in_transaction"] = _in_request_transaction(request_conn)
        seen["released"] = bridged_take_and_release(name, loop_box[0])
        take_timed(name, seen, wait=wait)

    async def by_the_client() -> None:
        await sync_to_async(step)()

    async def service() -> None:
        loop_box.append(asyncio.get_running_loop())
        if step_from_bridged:
            await through_a_client_thread(by_the_client())
        else:
            await sync_to_async(step)()

    with transaction.atomic():
        request_conn.append(connections["default"].connection)
        async_to_sync(service)()
    assert seen["released"], seen


def test_a_step_a_bridged_coroutine_runs_in_the_transaction_takes_back_an_awaiting_release() -> (
    None
):
    """The shape of adversary 10's nested test (its ``sync`` form), except that the sync
    step in the request's thread is started by a bridged coroutine (``sync_to_async`` from
    a coroutine a client's thread scheduled, as ``captured`` charges in adversary 10), not
    by the service's own coroutine. The step runs in the request's thread, in its
    transaction (checked: ``step_in_transaction``); the other bridged coroutine's release
    awaits its answer, which the request's thread can give only after the step.

    Expected: the step takes the release back at once (as the same step started by the
    service's coroutine does: the control, same test module), or at least the release is
    freed as it was before the tenth adversary's fix.
    Observed at 1356c87: refused after its whole wait (3.0 s of 3; with ``wait=None``
    the request hangs for ever, the lock renewed meanwhile): the step's context (a copy of
    the client thread's) names no transaction, so ``_awaiting_here`` finds it in none of
    those the release names, and the answer is queued behind the step itself. At 41bdbbd
    (before the fix) the release was freed at once and the step got the lock."""
    name = "adv11:step-from-bridged"
    seen: dict[str, Any] = {}
    _run_step_with_a_bridged_release(name, seen, [], step_from_bridged=True)
    assert seen["step_in_transaction"] is True
    assert free_within(name, 2)
    assert seen["got"] and seen["took"] < WAIT / 2, seen


HANG = 8.0  # seconds the watchdog lets the step wait (wait=None) before forcing the lock free


def test_with_no_wait_the_step_a_bridged_coroutine_runs_never_hangs() -> None:
    """The test above with ``wait=None`` (the default of many callers), ttl 5 s. A watchdog
    looks after 8 s and then force-releases the lock on the server, so that the test ends.

    Expected: the step gets the lock at once (at worst once the answer comes).
    Observed at 1356c87: after 8 s the step still waits and the lock is still held (its
    5 s lease renewed by the process: ``settle_on_answer``'s keep_alive, the renewer
    returning "not ended" while the hop is not done), the answer queued behind the step:
    a hang for ever, the request's thread and the lock with it, ended only by the forced
    release (the step then took 7.7 s; the forced release is then logged as a lost lease)."""
    name = "adv11:step-no-wait"
    seen: dict[str, Any] = {}
    with forced_free_after(name, HANG, seen):
        _run_step_with_a_bridged_release(name, seen, [], step_from_bridged=True, wait=None)
    assert free_within(name, 2)
    assert seen["got"] and seen["took"] < WAIT / 2, seen


def test_control_the_same_step_from_the_services_coroutine_takes_it_back() -> None:
    """The control of the test above: the step started by the service's own coroutine (its
    context names the request's transaction) takes the awaiting release back at once."""
    name = "adv11:step-from-service"
    seen: dict[str, Any] = {}
    _run_step_with_a_bridged_release(name, seen, [], step_from_bridged=False)
    assert seen["step_in_transaction"] is True
    assert free_within(name, 2)
    assert seen["got"] and seen["took"] < WAIT / 2, seen


class _TaskOnPython311:
    """A task as Python 3.11 has it: no ``get_context()`` (3.12 added it)."""

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self._task = task

    def __getattr__(self, name: str) -> Any:
        if name == "get_context":
            raise AttributeError(name)
        return getattr(self._task, name)


class _AsyncioOnPython311:
    """``asyncio`` as distlock.transactions sees it on Python 3.11: its tasks cannot tell
    their context. Everything else is asyncio's own."""

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    def all_tasks(loop: Any = None) -> set[Any]:
        return {_TaskOnPython311(task) for task in asyncio.all_tasks(loop)}


@pytest.fixture
def python_3_11_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run distlock's transaction code with tasks as Python 3.11 has them (no 3.11
    virtualenv with Django was at hand when these shapes were found; the code no longer
    reads a task's context at all, so this only shows that nothing depends on it)."""
    monkeypatch.setattr(transactions, "asyncio", _AsyncioOnPython311())


@pytest.mark.usefixtures("python_3_11_tasks")
def test_on_python_3_11_the_transactions_own_step_takes_back_an_awaiting_release() -> None:
    """The control above (adversary 10's nested ``sync`` shape, which 371c4a3 fixed) as
    Python 3.11 runs it: a task's context cannot be read (``Task.get_context()`` is 3.12+).

    Expected: as on 3.12+, the step in the request's transaction takes it back at once.
    Observed at 1356c87 (3.11 simulated by patching ``_loop_thread_transactions`` to return
    None, what its 3.11 branch returned; at 0b12a23 the same with this fixture): refused
    after its whole wait (3.0 s of 3; for ever with ``wait=None``, the lock renewed, the
    request hung): the release named no transaction, so only the task that made it could
    take it back, and the answer was queued behind the step that waited for it."""
    name = "adv11:py311-step"
    seen: dict[str, Any] = {}
    _run_step_with_a_bridged_release(name, seen, [], step_from_bridged=False)
    assert free_within(name, 2)
    assert seen["got"] and seen["took"] < WAIT / 2, seen


def test_a_bridged_coroutines_child_task_takes_back_its_release() -> None:
    """A bridged coroutine (scheduled by a client's thread) takes the lock and releases it
    while the request's thread runs a 1 s fraud check (its question unanswered: the release
    awaits the answer), then starts a task (``ensure_future``) that asks for the same lock
    (wait 3 s) and awaits it; the service awaits the coroutine. The child task's ORM calls
    go to the request's thread, in its transaction, as its parent's do.

    Expected: the child gets the lock (the release taken back: it is in the transaction the
    release is tied to, whose COMMIT waits for it), as it did before the tenth adversary's
    fix.
    Observed at 1356c87: refused after its whole wait (3.05 s of 3; for ever with
    ``wait=None``): once the answer comes (about 1 s) the release is tied to the request's
    transaction, but the child's context, copied before the answer was noted, names no
    transaction, and its COMMIT waits for the child. With ``settle_on_answer`` patched
    to return False (the behaviour before 5231b9f): granted in 0.05 s. The child's own
    question (asked at its acquire, queued behind the fraud check too) is answered at the
    same time, but the waiting loop notes a late loop answer only under ``if tied and
    (self.answer_awaited or answer_pending())``: while the parent's release sits in
    ``_awaiting`` nothing is tied, so the loop never looks, and once it is settled (tied)
    the child's answer has come (answer_pending() False, answer_awaited never set): never
    noted. The same child asking only after the answer came (a 1.5 s sleep first) notes it
    at the call's start and takes the release back in 0.0 s."""
    name = "adv11:child-task"
    seen: dict[str, Any] = {}

    async def child() -> None:
        await atake_timed(name, seen, ttl=10, wait=WAIT)

    async def bridged() -> None:
        lk = distlock.lock(name, ttl=10, wait=1)
        assert await lk.aacquire()
        await lk.arelease()
        await asyncio.ensure_future(child())

    with transaction.atomic():
        async_to_sync(_beside_a_fraud_check)(bridged)
    assert free_within(name, 2)
    assert seen["got"] and seen["took"] < WAIT / 2, seen


def test_a_second_bridged_callback_takes_back_the_firsts_release() -> None:
    """The client's ``captured`` callback takes the lock and releases it while the
    request's thread runs a 1 s fraud check (its release awaits the answer); its next
    callback, ``settled`` (another coroutine the client's thread schedules, awaited by the
    service), asks for the same lock (wait 3 s). Both callbacks' ORM calls go to the
    request's thread, in its transaction.

    Expected: ``settled`` gets the lock once the answer comes at the latest (it is in the
    transaction the release is then tied to, whose COMMIT waits for it).
    Observed at 1356c87: refused after its whole wait (3.06 s of 3; the request hangs for
    ever with ``wait=None``), for the reason the child-task test gives (its own late answer
    is never noted while it waits). With ``settle_on_answer`` patched to return False
    (before 5231b9f): granted in 0.05 s."""
    name = "adv11:second-callback"
    seen: dict[str, Any] = {}

    async def captured() -> None:
        lk = distlock.lock(name, ttl=10, wait=1)
        assert await lk.aacquire()
        await lk.arelease()

    async def settled() -> None:
        await atake_timed(name, seen, ttl=10, wait=WAIT)

    with transaction.atomic():
        async_to_sync(_beside_a_fraud_check)(captured, settled)
    assert free_within(name, 2)
    assert seen["got"] and seen["took"] < WAIT / 2, seen


@pytest.mark.usefixtures("python_3_11_tasks")
def test_on_python_3_11_a_release_awaiting_at_the_loops_shutdown_waits_for_the_commit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Adversary 10's shutdown test (the service returns while ``captured``'s receipt and
    its release's question are still queued to the request's thread; asyncio.run cancels
    the question before that thread runs it: ``_Noted.seen`` is None at the settlement on
    3.13 too) as Python 3.11 runs it (its tasks cannot tell their context).

    Expected: held until the COMMIT, as on 3.12+ (where the transactions named at the
    release, ``[(default, n, 1)]``, are used when the question never ran).
    Observed at 1356c87 (simulated 3.11): freed at the loop's shutdown, before the COMMIT
    ({'after_the_call': False, 'before_commit': False}): the release named no transaction
    (``answer[2] == []``) and its question never ran, so ``settle`` finds no place and
    frees it; ``captured`` charged in the request's transaction, so a second click reads
    no charge and charges again (the tenth adversary's double charge, back on 3.11;
    docs/transactions.md says only that on 3.11 such a release is held until the answer).
    At 0b12a23 the same with this fixture."""
    adversary10.test_a_bridged_release_awaiting_its_answer_when_the_loop_shuts_down(caplog)


def test_a_release_whose_transaction_cannot_be_told_is_left_to_its_lease(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The shutdown shape above when the loop's thread cannot be told (an asgiref whose
    executor has no ``_work_thread``: ``_loop_thread`` returns None, and
    ``manage.py check`` says so) and the question never ran: which transaction the release
    belongs to is unknown. Freed, it could let a second charge in before the COMMIT; it is
    left to its lease instead (held past the COMMIT, gone within its ttl), with a warning."""
    monkeypatch.setattr(transactions, "_loop_thread", lambda: None)
    name = "adv11:cannot-be-told"
    seen = adversary10.release_awaiting_its_answer_at_the_loops_shutdown(name, ttl=2)
    seen["after_commit"] = is_held(name)
    assert seen == {"after_the_call": True, "before_commit": True, "after_commit": True}
    assert free_within(name, 4)
    assert any("could not be told" in record.getMessage() for record in caplog.records)


CYCLES = 2000


def test_releases_awaiting_one_answer_keep_memory_flat() -> None:
    """A bridged coroutine takes and releases its lock 2,000 times (a consumer's loop)
    while the request's thread is busy (one sync step; its question, asked once per task,
    unanswered throughout): each release awaits the answer, each next acquire takes it
    back at once (its own task).

    Expected: memory flat in the number of releases (``_awaiting`` holds one entry: it
    does), the answer's callbacks a handful.
    Observed at 1356c87: each settle_on_answer adds a done callback (closing over the Lock,
    its Hold and the answer) to the same hop: 2,002 callbacks on the hop, 1.42-1.58 MB more
    traced memory for 2,000 releases (150 KB for 200: 710-790 B per release, unbounded
    while the thread stays busy; 20,000 releases: about 16 MB), all run at the answer.
    Each cycle took 0.9 ms."""
    import gc
    import tracemalloc

    name = "adv11:cycles"
    seen: dict[str, Any] = {}
    done = threading.Event()

    async def consumer() -> None:
        lk = distlock.lock(name, ttl=30, wait=3)
        try:
            assert await lk.aacquire()
            await lk.arelease()
            noted = transactions.loop_answer_pending()
            assert noted is not None and noted.hop is not None
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(CYCLES):
                assert await lk.aacquire()
                await lk.arelease()
            gc.collect()  # what is kept, not redis-py's garbage waiting for the collector
            seen["grew"] = tracemalloc.get_traced_memory()[0] - before
            tracemalloc.stop()
            seen["callbacks"] = len(noted.hop._callbacks)  # type: ignore[attr-defined]
            seen["awaiting"] = sum(len(holds) for holds in transactions._awaiting.values())
            seen["still_unanswered"] = transactions.loop_answer_pending() is not None
        finally:
            done.set()

    async def service() -> None:
        busy = asyncio.ensure_future(sync_to_async(done.wait)(60))
        await asyncio.sleep(0.1)
        await through_a_client_thread(consumer())
        await busy

    with transaction.atomic():
        async_to_sync(service)()
    assert free_within(name, 2)
    assert seen["still_unanswered"] and seen["awaiting"] == 1, seen
    assert seen["callbacks"] <= 10 and seen["grew"] < 200_000, seen


# --- found while reviewing the above (not the adversary's) -------------------------------
def test_a_step_a_bridged_coroutine_runs_in_the_transaction_ties_its_own_release() -> None:
    """A coroutine a callback-based client's thread scheduled on async_to_sync's loop runs a
    sync step through ``sync_to_async``: asgiref runs it in the request's thread, on its
    connection, inside its transaction (checked: autocommit is off there). The step takes
    a lock and releases it.

    Expected: the release waits for the request's COMMIT (its work is that transaction's).
    Observed at 5ee1721: freed at the release, before the COMMIT (held neither after the
    release nor before the COMMIT): the step's context, a copy of the client thread's,
    names no transaction, and sync code is found in a transaction only through its context.
    The same class as the tenth adversary's double charge, for sync code."""
    name = "adv11:step-own-release"
    seen: dict[str, Any] = {}

    def step() -> None:
        seen["in_transaction"] = not connections["default"].get_autocommit()
        lk = distlock.lock(name, ttl=10)
        assert lk.acquire()
        lk.release()

    async def by_the_client() -> None:
        await sync_to_async(step)()

    async def service() -> None:
        await through_a_client_thread(by_the_client())

    with transaction.atomic():
        async_to_sync(service)()
        seen["held_before_commit"] = is_held(name)
    assert seen["in_transaction"] is True
    assert seen["held_before_commit"], seen
    assert free_within(name, 2)
