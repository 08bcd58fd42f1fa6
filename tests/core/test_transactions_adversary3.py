"""Issue 39, the third adversary: the fixes of the second round attacked again. Each test
says what it expects and what was observed; each FAILS on the code it was written against
(main at e297940).

SQLite and threads in-process, where the database does not matter.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import threading
import time
import weakref
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import connections, transaction

import distlock
from devkit.databases import DatabaseServer
from devkit.redis_server import RedisServer
from devkit.shop.load import scenario_report
from distlock import transactions
from distlock.signals import lock_lost
from tests.support.lock_helpers import free_within

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "fencing"]),
    pytest.mark.usefixtures("redis_backend"),
]

STEP = 10.0  # the longest any step waits for another thread (never reached when it works)


def _try_once(name: str, got: list[bool]) -> None:
    """Try ``name`` once (wait=0), note whether it was granted, and let it go."""
    lk = distlock.lock(name, ttl=5, wait=0)
    got.append(lk.acquire())
    if got[-1]:
        lk.release()


def test_a_release_tied_to_two_transactions_is_not_taken_back_from_only_one_of_them() -> None:
    """A sync view under ATOMIC_REQUESTS calls an async service (async_to_sync) that runs two
    charges in pool threads (sync_to_async(thread_sensitive=False)), each `atomic { lock {
    charge } }` on its own connection. The first charge releases the lock inside its own
    block: the release waits for that block's COMMIT (and, since the pool thread runs in a
    copy of the request's context, for the request's transaction too).

    Expected: the second charge, in another transaction on another connection, waits for the
    first one's COMMIT (acquire(wait=0) is refused while that transaction is open).
    Observed: the second charge also runs in a copy of the request's context, so it is "in"
    the request's transaction, and a release tied to the request's transaction AND the
    first charge's is taken back from the request's alone: the lock is handed over before the
    first charge committed (double execution: the second charge reads the order unpaid)."""
    name = "adv3:two-ties"
    released = threading.Event()
    probed = threading.Event()
    got: list[bool] = []

    def first_charge() -> None:
        with transaction.atomic():
            with distlock.lock(name, ttl=5, wait=0):
                pass  # charge; the release waits for this block's COMMIT
            released.set()
            assert probed.wait(STEP)  # not committed yet while the second one asks

    def second_charge() -> None:
        assert released.wait(STEP)
        with transaction.atomic():
            lk = distlock.lock(name, ttl=5, wait=0)
            got.append(lk.acquire())
            probed.set()
            if got[-1]:
                lk.release()

    async def service() -> None:
        await asyncio.gather(
            sync_to_async(first_charge, thread_sensitive=False)(),
            sync_to_async(second_charge, thread_sensitive=False)(),
        )

    with transaction.atomic():  # the request's transaction (ATOMIC_REQUESTS)
        async_to_sync(service)()
        assert got == [False], "taken back before the first charge's transaction committed"
    assert free_within(name)


def test_a_context_copied_in_an_earlier_transaction_never_takes_back_a_hooks_release() -> None:
    """A job's code spawns a long-lived task with a copy of its context while its transaction
    is open (asyncio.run_coroutine_threadsafe onto an app's own loop, asyncio.to_thread, a
    thread started in copy_context().run); the job commits. The same worker thread runs the
    next job: it locks an order, registers an on_commit hook (the e-mail), releases, commits:
    the lock is handed on once that hook has run. Meanwhile the long-lived task asks for the
    same lock.

    Expected: the task, in no transaction of the second job, waits (acquire(wait=0) refused
    while the hook runs).
    Observed: its copied context names the worker's connection (from the first job's
    transaction); during the second job's hooks that connection is "committing", and the
    hook window is found by connection only, not by transaction number: the task takes the
    release back and runs the order while the e-mail hook still runs (double execution)."""
    name = "adv3:stale-context-hooks"
    copied: list[contextvars.Context] = []
    got: list[bool] = []

    with transaction.atomic():  # the first job
        copied.append(contextvars.copy_context())

    def hook() -> None:  # the second job's e-mail: the order is still locked meanwhile
        task = threading.Thread(target=copied[0].run, args=(_try_once, name, got))
        task.start()
        task.join(STEP)

    with transaction.atomic():  # the second job, on the same thread and connection
        lk = distlock.lock(name, ttl=5)
        assert lk.acquire()
        transaction.on_commit(hook)
        lk.release()
    assert got == [False], "the earlier job's task took the release back during the hooks"
    assert free_within(name)


def _abandon(name: str) -> None:
    """Clean up after a failing test: stop renewing and forget every hold of ``name`` that
    distlock's registry keeps, and free it on the server."""
    for holds in list(transactions._tied.values()):
        for hold in list(holds):
            if hold.owner.name == name:
                hold.owner._forget()
    distlock.locks["default"].force_release(name)


def _dies_holding(
    name: str, *, auto_renew: bool, locks: list[weakref.ref[Any]] | None = None
) -> weakref.ref[Any]:
    """A job runner's thread turns autocommit off (a transaction managed by hand), takes a
    lock and dies (the job raises; the runner logs it and the thread ends) before releasing
    it, committing or rolling back. Return a weak reference to the thread's connection (and
    add one to the Lock to ``locks``)."""
    connection_ref: list[weakref.ref[Any]] = []

    def job() -> None:
        conn = connections["fencing"]
        conn.set_autocommit(False)  # managed by hand
        connection_ref.append(weakref.ref(conn))
        lk = distlock.lock(name, ttl=1, auto_renew=auto_renew)
        if locks is not None:
            locks.append(weakref.ref(lk))
        assert lk.acquire()
        raise RuntimeError("the job fails before release(), commit() or rollback()")

    def runner() -> None:
        with contextlib.suppress(RuntimeError):
            job()

    thread = threading.Thread(target=runner)
    thread.start()
    thread.join()
    gc.collect()
    return connection_ref[0]


def test_a_thread_that_dies_holding_an_auto_renewed_lock_by_hand_stops_renewing_it() -> None:
    """CONTRACT: "a thread that dies inside a transaction ends with the lock freed or lost
    within its lease". Observed: the round-2 fix looks for dead threads only for a
    *released* hold waiting for the COMMIT. A hold still held stays tied in distlock's
    registry, which keeps the Lock object alive, so the renewer renews it for as long as the
    process lives (stall: every other holder waits for ever)."""
    name = "adv3:dies-renewed"
    try:
        _dies_holding(name, auto_renew=True)
        # Lease 1 s: freed or lost within it (generous margin; fails only if renewed on).
        assert free_within(name, 4), "the dead thread's lock is still renewed"
    finally:
        _abandon(name)


def test_a_thread_that_dies_holding_a_lock_by_hand_leaves_its_connection_to_be_closed() -> None:
    """The same thread with a lock that is not renewed: its lease ends it. Expected: as
    without distlock, the dead thread's connection is collected and the server ends its
    session, rolling back its transaction. Observed: the hold stays tied in distlock's
    registry, which keeps the connection for as long as the process lives (on PostgreSQL a
    session "idle in transaction" for ever, keeping its row locks: host harmed)."""
    name = "adv3:dies-connection"
    try:
        connection = _dies_holding(name, auto_renew=False)
        assert connection() is None, "distlock keeps the dead thread's connection"
    finally:
        _abandon(name)


def test_the_ties_of_a_dead_threads_collected_connection_end_as_its_rollback_would() -> None:
    """The same thread: once its connection is collected (the server ends the session,
    rolling back), its ties end as that rollback's would. The next tie made anywhere ends
    them: the registry keeps neither the dead thread's Lock (not renewed: its lease ends
    it) nor an entry for the collected connection. Observed before: both kept for as long
    as the process lives, with the connection."""
    name, other = "adv3:dies-ties-end", "adv3:dies-next-tie"
    locks: list[weakref.ref[Any]] = []
    try:
        connection = _dies_holding(name, auto_renew=False, locks=locks)
        assert connection() is None, "distlock keeps the dead thread's connection"
        with transaction.atomic(), distlock.lock(other, ttl=5):  # a tie on this connection
            pass
        assert free_within(other)
        gc.collect()
        assert locks[0]() is None, "the collected connection's tie keeps the dead thread's Lock"
        assert all(ref() is not None for ref in transactions._tied), "a collected one is kept"
        assert free_within(name, 4)  # its lease (1 s) ended it
    finally:
        _abandon(name)
        _abandon(other)


def test_an_unreleased_auto_renewed_lock_taken_in_a_transaction_is_not_kept_by_a_cycle() -> None:
    """Code takes an auto-renewed lock inside atomic() and drops the Lock object without
    releasing it (an exception between acquire() and its try/finally, a lock_acquired
    receiver that raises inside a `with`). Outside a transaction the renewer holds the Lock
    only weakly: it is collected at once and its lease ends it.

    Expected: the same after the transaction ended (the contract: nothing relies on the
    garbage collector). Observed: Lock._hold and Hold.owner make a reference cycle, so the
    dropped Lock lives, and is renewed, until the cyclic collector runs (never while gc is
    disabled or the objects sit in an old generation): other holders wait meanwhile."""
    name = "adv3:cycle"
    gc.disable()
    try:
        with transaction.atomic():
            lk = distlock.lock(name, ttl=1, auto_renew=True)
            assert lk.acquire()
        dropped = weakref.ref(lk)
        del lk
        assert dropped() is None, "the dropped Lock is kept alive by a reference cycle"
        assert free_within(name, 4)
    finally:
        gc.enable()
        _abandon(name)


def test_a_context_copied_in_an_earlier_transaction_by_hand_is_not_in_the_next_one() -> None:
    """A worker thread manages its transactions by hand (autocommit off once, as with
    DATABASES' AUTOCOMMIT: False; commit() after each job). Job 1's code hands a copy of
    its context to a long-lived task (copy_context().run in a thread,
    asyncio.run_coroutine_threadsafe); job 1 commits. Job 2 locks an order inside an
    atomic() block and releases it: the release waits for job 2's COMMIT. Meanwhile the task
    asks for the same lock.

    Expected: the task waits (acquire(wait=0) refused): it is in no transaction of job 2.
    Observed: a transaction managed by hand keeps the number it got at set_autocommit(False)
    across every commit(), so the task's copied context still names "the" transaction of the
    worker's connection, and the task takes job 2's release back before job 2 committed."""
    name = "adv3:manual-number"
    conn = connections["fencing"]
    got: list[bool] = []

    transaction.set_autocommit(False, using="fencing")
    try:
        copied = contextvars.copy_context()  # job 1 hands its context to a task
        transaction.commit(using="fencing")  # job 1 ends
        with transaction.atomic(using="fencing"):  # job 2
            with distlock.lock(name, ttl=5):
                pass
            task = threading.Thread(target=copied.run, args=(_try_once, name, got))
            task.start()
            task.join(STEP)
        assert got == [False], "an earlier job's task took job 2's release back"
        transaction.commit(using="fencing")
        assert free_within(name)
    finally:
        if conn.connection is not None:
            conn.rollback()
            transaction.set_autocommit(True, using="fencing")
        _abandon(name)


def test_a_dropped_auto_renewed_lock_is_not_kept_by_the_renewer_after_its_first_renewal() -> None:
    """The renewer holds each Lock weakly, so that one dropped without release() (an
    exception between acquire() and its try/finally) stops being renewed and its lease ends
    it; the cycle test above relies on it. Expected: freed within its lease once dropped.
    Observed: after one renewal, the renewer thread's own locals (the list of locks due, the
    loop variable) still reference the Lock while it waits for the next due time, and take
    a new strong reference each round: the dropped Lock is renewed for as long as the
    process lives (stall: every other holder waits for ever)."""
    name = "adv3:renewer-keeps"
    try:
        lk = distlock.lock(name, ttl=1, auto_renew=True)
        assert lk.acquire()
        deadline = time.monotonic() + STEP
        while True:  # until the renewer has renewed it once
            info = distlock.locks["default"].info(name)
            if info is not None and info.renewals >= 1:
                break
            assert time.monotonic() < deadline
            time.sleep(0.01)
        dropped = weakref.ref(lk)
        del lk
        assert free_within(name, 4), "the dropped lock is still renewed"
        assert dropped() is None
    finally:
        _abandon(name)


def test_pool_thread_siblings_on_a_real_database_never_charge_twice(
    real_database: DatabaseServer, redis_server: RedisServer
) -> None:
    """The first test's shape on PostgreSQL and MariaDB (devkit/shop/adversary3.py):
    under a request's transaction, an async service charges the same order twice at once
    in pool threads, each `atomic { lock { charge } }`, working on 0.1 s after its release.
    Expected: the second waits for the first's COMMIT, reads the charge, 0 orders charged
    twice. Observed on e297940: the second took the release back through the request's
    transaction before the first committed (measured there: 9 of 10 orders charged twice on
    PostgreSQL, 10 of 10 on MariaDB)."""
    redis_server.flushall()
    report = scenario_report(real_database, redis_server.url, "devkit.shop.adversary3")
    assert report["pool_siblings"] == {"twice": 0, "results": ["already paid", "charged"]}


def test_a_shared_sibling_gets_the_lock_once_the_exclusive_sibling_released() -> None:
    """Two tasks of one transaction (asyncio.gather under async_to_sync, inside atomic()):
    task A writes under the exclusive lock, task B reads under the shared lock of the same
    name. CONTRACT (shared locks): "transactions: as for exclusive locks", and for those:
    "two tasks of one transaction exclude each other while both hold; once the first has
    released, the second gets the lock at once".

    Expected: B gets the shared lock once A has released (A's release waits for the COMMIT:
    B downgrades it, as the same transaction). Observed: B asked while A held, so it waits
    on the server for the exclusive hold to end; A's release then waits for the COMMIT,
    which waits for B: B gets LockNotAcquired when its wait ends (with wait=None it never
    returns: the request hangs)."""
    name = "adv3:shared-sibling"
    a_holds = asyncio.Event()
    got: list[str] = []

    async def writer() -> None:
        async with distlock.lock(name, ttl=5, wait=0):
            a_holds.set()
            await asyncio.sleep(0.2)  # B is queued meanwhile
        got.append("exclusive")

    async def reader() -> None:
        await a_holds.wait()
        async with distlock.lock(name, ttl=5, wait=3, shared=True):
            got.append("shared")

    async def both() -> None:
        await asyncio.gather(writer(), reader())

    with transaction.atomic(), contextlib.suppress(distlock.LockNotAcquired):
        async_to_sync(both)()
    assert got == ["exclusive", "shared"], "the shared sibling waited for its own COMMIT"
    assert free_within(name)


def test_a_release_whose_lease_ended_while_it_waited_is_reported_lost_when_asked_again() -> None:
    """The release waits for the COMMIT; meanwhile the lease ends (an operator force-releases
    the lock; Redis restarted empty or evicted it) before the renewer's next look; then
    the same transaction asks for the lock again (the loop meets the order twice).
    CONTRACT: "If the lease ends while the release waits for COMMIT, it is a lost lease
    (on_lost, the lock_lost signal, a log record): the commit may then land after another
    holder's writes".

    Observed: the take-back finds the hold gone and drops it silently (then Lock._adopt,
    now attempts._adopt: "reported if renewed"), then acquires anew: no on_lost, no
    lock_lost, no log record, so the holder never learns that another holder may have
    written in between."""
    name = "adv3:lost-while-waiting"
    lost: list[str] = []

    def on_lost_signal(sender: Any, **kwargs: Any) -> None:
        lost.append(f"signal:{kwargs['name']}")

    lock_lost.connect(on_lost_signal)
    try:
        with transaction.atomic():
            first = distlock.lock(name, ttl=30, on_lost=lambda lk: lost.append("on_lost"))
            assert first.acquire()
            first.release()  # waits for the COMMIT, its lease kept alive (next look in 10 s)
            assert distlock.locks["default"].force_release(name)  # the lease ends
            again = distlock.lock(name, ttl=30, wait=0)
            assert again.acquire()  # the order met a second time
            again.release()
        assert sorted(lost) == ["on_lost", f"signal:{name}"], "the lost lease was not reported"
        assert free_within(name)
    finally:
        lock_lost.disconnect(on_lost_signal)
        _abandon(name)


def test_an_exclusive_sibling_queued_behind_a_shared_sibling_is_refused_once_it_released() -> None:
    """The reverse of the shared-sibling test: task A reads under the shared lock, task B
    (same transaction, asyncio.gather under async_to_sync) asks for the exclusive lock while
    A holds. CONTRACT: "The exclusive lock asked for while a shared release of the same
    transaction waits for its COMMIT (in the same task, or another task of it) is refused at
    once with SharedLockUpgrade" (it would wait for itself).

    Expected: once A has released (its release waits for the COMMIT, which waits for B), B
    is refused with SharedLockUpgrade. Observed: B was queued before A released, and nothing
    looks again: B waits on the server for its whole wait and gets LockNotAcquired (with
    wait=None it never returns: the request hangs)."""
    name = "adv3:exclusive-sibling"
    a_holds = asyncio.Event()
    outcome: list[str] = []

    async def reader() -> None:
        async with distlock.lock(name, ttl=5, wait=0, shared=True):
            a_holds.set()
            await asyncio.sleep(0.2)  # B is queued meanwhile

    async def writer() -> None:
        await a_holds.wait()
        try:
            async with distlock.lock(name, ttl=5, wait=3):
                outcome.append("acquired")
        except distlock.LockError as exc:
            outcome.append(type(exc).__name__)

    async def both() -> None:
        await asyncio.gather(reader(), writer())

    with transaction.atomic():
        async_to_sync(both)()
    assert outcome == ["SharedLockUpgrade"], "the exclusive sibling waited for its own COMMIT"
    assert free_within(name)
