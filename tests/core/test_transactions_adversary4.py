"""Issue 39, the fourth adversary: the fixes of the third round attacked again. Each test
says what it expects and what was observed; each FAILS on the code it was written against
(main at c74ddd7).

SQLite and threads in-process where the database does not matter; PostgreSQL and MariaDB
(devkit/shop/adversary4.py) where it does.
"""

from __future__ import annotations

import _thread
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
from tests.support.lock_helpers import free_within, is_held

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "fencing"]),
    pytest.mark.usefixtures("redis_backend"),
]

STEP = 10.0  # the longest any step waits for another thread (never reached when it works)


def _try_once(name: str) -> bool:
    """Try ``name`` once (wait=0) and let it go; return whether it was granted."""
    lk = distlock.lock(name, ttl=5, wait=0)
    got = lk.acquire()
    if got:
        lk.release()
    return got


def test_a_pool_thread_on_a_connection_of_its_own_never_takes_back_the_requests_release() -> None:
    """A request's transaction (ATOMIC_REQUESTS) charges an order under its lock: the release
    waits for the request's COMMIT. The request then calls an async service (async_to_sync)
    that offloads blocking ORM work to a pool thread (sync_to_async(thread_sensitive=False)),
    which charges the same order again under the same lock.

    Expected: the pool thread waits for the request's COMMIT (acquire(wait=0) refused): its
    queries run on a connection of its own (Django's connections are per thread), outside
    the request's transaction, so the request's charge, not committed yet, is invisible to
    it, as it is to another process.
    Observed: the pool thread runs in a copy of the request's context, which names the
    request's connection and open transaction, so distlock counts it as inside that
    transaction: it takes the release back at once, and reads the order unpaid (double
    execution; devkit/shop/adversary4.py measures it on PostgreSQL and MariaDB)."""
    name = "adv4:pool-own-connection"
    got: list[bool] = []

    async def service() -> None:
        got.append(await sync_to_async(_try_once, thread_sensitive=False)(name))

    with transaction.atomic():  # the request's transaction
        with distlock.lock(name, ttl=5):
            pass  # the request's charge; the release waits for the COMMIT
        async_to_sync(service)()
        assert is_held(name)
    assert got == [False], "a pool thread took back the release of the request's transaction"
    assert free_within(name)


def test_a_pool_thread_after_the_request_on_a_real_database_never_charges_twice(
    real_database: DatabaseServer, redis_server: RedisServer
) -> None:
    """The first test's shape on PostgreSQL and MariaDB (devkit/shop/adversary4.py): the
    request charges an order, then its async service charges it again in a pool thread
    under the same lock (wait=1). Expected: the pool thread waits for the request's COMMIT
    (which waits for it: refused after its wait), 0 orders charged twice. Observed on
    c74ddd7: it took the release back and, on its own connection, read the order unpaid:
    10 of 10 orders charged twice on PostgreSQL, 10 of 10 on MariaDB."""
    redis_server.flushall()
    report = scenario_report(real_database, redis_server.url, "devkit.shop.adversary4")
    assert report["pool_after_request"] == {"twice": 0, "results": ["charged", "waited"]}


def test_autocommit_turned_off_again_on_a_real_database_never_charges_twice(
    real_database: DatabaseServer, redis_server: RedisServer
) -> None:
    """The last test's shape on PostgreSQL and MariaDB (devkit/shop/adversary4.py): a job
    by hand charges an order (lock ttl=1), a helper turns autocommit off again, the job
    works on 1.5 s and commits; another worker charges the same order meanwhile. Expected:
    it waits for the commit() and reads the charge, 0 of 5 orders charged twice. Observed
    on c74ddd7: the renewer freed the lock before the commit(): 5 of 5 charged twice on
    MariaDB (psycopg refuses set_autocommit(False) inside a transaction: PostgreSQL, 0)."""
    redis_server.flushall()
    report = scenario_report(real_database, redis_server.url, "devkit.shop.adversary4")
    assert report["redundant_begin"] == {"twice": 0, "results": ["already paid", "charged"]}


def test_autocommit_turned_off_again_by_hand_goes_on_with_the_same_transaction() -> None:
    """A job manages its transaction by hand (set_autocommit(False)); it charges an order
    under a lock (the release waits for its commit()); then a helper it calls makes sure
    autocommit is off: set_autocommit(False) again. For Django and the database that is
    nothing: the same transaction goes on, uncommitted.

    Expected: the lock is held until the job's commit() (docs/transactions.md: "held until
    commit(), rollback(), close() or set_autocommit(True)").
    Observed: distlock numbered the call as a new transaction; the renewer, at its next look
    (a third of the lease), found the transaction the release waits for "no longer open"
    and freed the lock: freed 0.34 s after the release with ttl=1 (within 10 s with
    ttl=30), the job's charge not committed (double execution: devkit/shop/adversary4.py)."""
    name = "adv4:autocommit-off-again"
    conn = connections["fencing"]
    transaction.set_autocommit(False, using="fencing")
    try:
        with distlock.lock(name, ttl=1):
            pass  # the charge; the release waits for commit()
        transaction.set_autocommit(False, using="fencing")  # a helper makes sure
        time.sleep(1.2)  # the job works on: the renewer looks three times meanwhile
        held = is_held(name)
        transaction.commit(using="fencing")
    finally:
        if conn.connection is not None:
            conn.rollback()
            transaction.set_autocommit(True, using="fencing")
    assert held, "freed before the transaction managed by hand committed"
    assert free_within(name)


def test_a_copy_of_the_context_never_keeps_a_dead_threads_connection() -> None:
    """A job runner's thread turns autocommit off (a transaction managed by hand), queries,
    starts a heartbeat thread in a copy of its context (copy_context().run, as logging and
    tracing libraries do; Python 3.14's free-threaded build gives every new thread a copy),
    and dies before commit() or rollback() (the job raises).

    Expected: as without distlock (Django's connections are per thread, not in the context),
    the dead thread's connection is collected and the server ends its session, rolling its
    transaction back (round 3: "distlock never keeps a connection alive").
    Observed: distlock's context variable noting the transaction held the connection
    strongly, so the heartbeat's copy kept it for as long as it ran (on PostgreSQL a
    session "idle in transaction", keeping its row locks)."""
    connection: list[weakref.ref[Any]] = []
    stop = threading.Event()

    def job() -> None:
        conn = connections["fencing"]
        conn.set_autocommit(False)
        connection.append(weakref.ref(conn))
        conn.cursor().execute("SELECT 1")
        copy = contextvars.copy_context()
        threading.Thread(target=copy.run, args=(stop.wait, STEP)).start()
        raise RuntimeError("the job fails before commit() or rollback()")

    def runner() -> None:
        with contextlib.suppress(RuntimeError):
            job()

    try:
        thread = threading.Thread(target=runner)
        thread.start()
        thread.join()
        gc.collect()
        assert connection[0]() is None, "a copy of the context keeps the dead thread's connection"
    finally:
        stop.set()


def test_the_dead_thread_check_answers_for_threads_threading_did_not_start() -> None:
    """A uWSGI or mod_wsgi worker thread is not started by Python's threading module: it is
    a dummy thread, whose is_alive() may raise once it ended (Python 3.13: RuntimeError
    "thread is not alive") instead of answering. The renewer asks this at each renewal of a
    hold tied to a transaction; it must be told "ended", not stop renewing on the error."""
    started, release = threading.Event(), threading.Event()
    seen: list[threading.Thread] = []

    def worker() -> None:  # as a server's C code starts a thread: threading never knew it
        seen.append(threading.current_thread())
        started.set()
        release.wait(STEP)

    _thread.start_new_thread(worker, ())
    assert started.wait(STEP)
    try:
        assert not transactions._thread_ended(weakref.ref(seen[0])), "a running thread ended"
    finally:
        release.set()

    class EndedDummyThread(threading.Thread):
        def is_alive(self) -> bool:
            raise RuntimeError("thread is not alive")  # as _DummyThread's, once it ended

    ended = EndedDummyThread()
    assert transactions._thread_ended(weakref.ref(ended))


def test_a_coroutine_a_pool_thread_starts_never_takes_back_the_requests_release() -> None:
    """One level deeper than the pool thread above: the pool job (thread_sensitive=False)
    runs a coroutine of its own through async_to_sync, which asks for the same lock.

    Expected: it waits for the request's COMMIT (aacquire(wait=0) refused): its ORM calls
    go back to the pool thread, whose connection is not the request's.
    Observed (the fourth adversary's suspicion, reproduced): a coroutine counted as inside
    every transaction its context names, so it took the release back at once while its
    queries ran on the pool thread's connection, outside the request's transaction."""
    name = "adv4:pool-coroutine"
    got: list[tuple[bool, bool]] = []

    async def inner() -> None:
        lk = distlock.lock(name, ttl=5, wait=0)
        granted = await lk.aacquire()
        # Where this coroutine's ORM calls run: not the request's connection.
        same = await sync_to_async(lambda: connections["default"].connection is request_conn)()
        got.append((granted, same))
        if granted:
            await lk.arelease()

    def job() -> None:
        async_to_sync(inner)()

    async def service() -> None:
        await sync_to_async(job, thread_sensitive=False)()

    with transaction.atomic():  # the request's transaction
        request_conn = connections["default"].connection
        with distlock.lock(name, ttl=5):
            pass  # the request's charge; the release waits for the COMMIT
        async_to_sync(service)()
        assert is_held(name)
    assert got == [(False, False)], "a pool job's coroutine took back the request's release"
    assert free_within(name)


def test_the_requests_own_coroutine_still_takes_its_release_back() -> None:
    """The control: a coroutine that async_to_sync runs for the request's own thread is in
    its transaction (its ORM calls go back to that thread): it takes the release back at
    once instead of waiting for its own COMMIT."""
    name = "adv4:own-coroutine"
    got: list[bool] = []

    async def service() -> None:
        lk = distlock.lock(name, ttl=5, wait=0)
        got.append(await lk.aacquire())
        if got[-1]:
            await lk.arelease()

    with transaction.atomic():
        with distlock.lock(name, ttl=5):
            pass
        async_to_sync(service)()
        assert is_held(name)
    assert got == [True]
    assert free_within(name)
