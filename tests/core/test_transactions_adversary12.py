"""Issue 39, the twelfth adversary: 5f6a5f4 places sync code in every transaction open on its
own thread's connections (``transactions._begun_on``: thread identity -> weak references of
the connections that began a transaction there), and reads the loop thread's open
transactions from the same registry. Each test says what it expects and what was observed at
5f6a5f4 (and at 0b12a23, before the registry).

In-process (SQLite, real threads, a real redis-server): the shapes are about which code
counts as in which transaction, not about the database. Every defect found here (each test
failed at 5f6a5f4 under ``--runxfail``) is fixed: the registry keeps each connection's
thread and drops a thread's entries when it ends; a release awaiting its answer is taken
back by code in those of its transactions still open, and freed once all have ended; a
lease lost before the COMMIT is reported.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import DatabaseError, connections, transaction

import distlock
from devkit.databases import DatabaseServer
from devkit.shop.load import serve_shop
from distlock import transactions
from distlock.handler import locks
from distlock.signals import lock_lost
from tests.core.test_transactions_adversary11 import bridged_take_and_release
from tests.support.lock_helpers import forced_free_after, free_within, is_held, take_timed

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "fencing"]),
    pytest.mark.usefixtures("redis_backend"),
]

JOB_DB = "fencing"  # a file: each thread has a connection of its own


# --- a thread that reuses a dead thread's identity ----------------------------------------
def _job_left_in_a_transaction(seen: list[weakref.ref[Any]]) -> None:
    """A batch job that manages its transaction by hand and ends on a failed query without
    rollback() (its thread then ends: the batch's executor shuts down). Its Future keeps the
    DatabaseError, whose traceback keeps the job's connection (Django's cursor frames)."""
    transaction.set_autocommit(False, using=JOB_DB)
    conn = connections[JOB_DB]
    seen.append(weakref.ref(conn))
    with conn.cursor() as cursor:
        cursor.execute("SELECT * FROM adv12_no_such_table")


def _clean_job() -> None:
    """A job that commits its block and closes its connection, as a request's end does."""
    with transaction.atomic(using=JOB_DB):
        connections[JOB_DB].cursor().execute("SELECT 1")
    connections[JOB_DB].close()


def _dead_thread(job: Callable[[], None]) -> tuple[int, Future[None]]:
    """Run ``job`` in a thread of its own (a batch's executor), and let that thread end;
    return its identity and the job's Future (kept, as a batch keeps its results)."""
    with ThreadPoolExecutor(1) as batch:
        future = batch.submit(job)
        ident = batch.submit(threading.get_ident).result()
    return ident, future


@pytest.fixture
def same_identity() -> Iterator[Callable[[int], ThreadPoolExecutor]]:
    """Yield ``new(ident)``: a one-thread executor whose thread has the identity ``ident``
    (threads are made and ended until one gets it: glibc reuses a joined thread's stack,
    so the first one does). Each is shut down afterwards."""
    made: list[ThreadPoolExecutor] = []

    def new(ident: int) -> ThreadPoolExecutor:
        for _ in range(50):
            executor = ThreadPoolExecutor(1)
            made.append(executor)
            if executor.submit(threading.get_ident).result() == ident:
                return executor
            executor.shutdown()
        pytest.skip("no new thread got the dead thread's identity")

    yield new
    for executor in made:
        executor.shutdown()


def _lock_and_release(name: str, in_block: bool) -> bool:
    """A later job: take the lock and release it, outside any transaction or (``in_block``)
    inside an atomic block of its own, committed before this returns; return whether the
    lock is still held just after."""
    lk = distlock.lock(name, ttl=2, wait=1)
    if in_block:
        with transaction.atomic(using=JOB_DB):
            assert lk.acquire()
            lk.release()
    else:
        assert lk.acquire()
        lk.release()
    return is_held(name)


@pytest.mark.parametrize("in_block", [False, True], ids=["no-transaction", "own-block"])
def test_a_new_thread_with_a_dead_threads_identity_is_not_in_its_transaction(
    in_block: bool, same_identity: Callable[[int], ThreadPoolExecutor]
) -> None:
    """A batch job (a per-batch ThreadPoolExecutor) turns autocommit off by hand, fails on a
    query and ends without rollback(); its thread ends, its Future keeps the error (and, in
    the traceback, its connection). The next batch's thread gets the same identity (glibc
    reuses the stack) and takes and releases a lock, outside any transaction or inside an
    atomic block of its own that commits. The dead thread's connection was registered in
    ``_begun_on`` under that identity and still looks in its transaction.

    Expected: the lock is free right after the release (or the COMMIT): the new thread's
    queries never ran in the dead thread's transaction (at 0b12a23, freed at once).
    Observed at 5f6a5f4: still held 1.5 s after, the release tied to the dead thread's
    transaction (ttl 2 s, renewed: held after 3 s in the scratch run too), both
    parametrizations. It lasts until the connection is collected (a full collection of
    the garbage collector, never with gc.freeze() or the Future kept), the new thread ends
    (the renewer reads the thread recorded for the tie: the new one, alive), or
    MANUAL_COMMIT_WAIT (600 s), when the lock is reported lost. Everyone else waits. Cause:
    ``_open_on`` (transactions.py, about line 163) trusts ``conn._thread_ident == ident``,
    and a thread's identity is reused once it ends; ``Hold._add`` then records the new
    thread for the tie (``_open`` finds it alive). Fixed in 2e93ba8: the registry keeps
    each connection's thread, not its identity alone."""
    name = f"adv12:reuse:{in_block}"
    seen: list[weakref.ref[Any]] = []
    ident, future = _dead_thread(lambda: _job_left_in_a_transaction(seen))
    try:
        assert isinstance(future.exception(), DatabaseError)
        assert seen[0]() is not None, "the dead thread's connection is kept by its error"
        later = same_identity(ident)
        held = later.submit(_lock_and_release, name, in_block).result()
        assert not held and free_within(name, 1.5), "held after the release"
    finally:
        _end_dead_threads_transaction(seen)
        del future
        gc.collect()
        assert free_within(name, 5)


def _end_dead_threads_transaction(seen: list[weakref.ref[Any]]) -> None:
    """Roll back and close the dead thread's connection (shared with this thread for it), so
    that its transaction ends here, whatever the garbage collector does, and no later test
    inherits it (a thread of theirs may get the same identity)."""
    conn = seen[0]() if seen else None
    seen.clear()
    if conn is None:
        return
    conn.inc_thread_sharing()
    try:
        conn.rollback()
        conn.set_autocommit(True)
        conn.close()
    finally:
        conn.dec_thread_sharing()


def test_a_new_thread_with_a_clean_dead_threads_identity_frees_at_once(
    same_identity: Callable[[int], ThreadPoolExecutor],
) -> None:
    """The shape above, the dead thread's job having committed its block and closed its
    connection (as a request's end does), its connection not yet collected. Held at
    5f6a5f4: freed at once, outside a transaction and after the new thread's own COMMIT."""
    ident, _future = _dead_thread(_clean_job)
    later = same_identity(ident)
    for in_block in (False, True):
        name = f"adv12:clean-reuse:{in_block}"
        assert not later.submit(_lock_and_release, name, in_block).result()


def test_the_registry_stays_small_with_a_thread_per_request() -> None:
    """2,000 short threads in turn, each committing a block and closing its connection (a
    thread-per-request server: Django's sync views under ASGI run each request in a thread
    of its own). Held at 5f6a5f4: one identity reused throughout (entries 2 to 3, one per
    identity seen), the dead connections dropped once collected (81 to 82 references
    while the collector had not run, after 10,000 threads; 18 KB left after gc.collect())."""

    def request() -> None:
        _clean_job()

    for _ in range(2000):
        thread = threading.Thread(target=request)
        thread.start()
        thread.join()
    assert len(transactions._begun_on) <= 10
    gc.collect()
    thread = threading.Thread(target=request)  # its registration drops the collected ones
    thread.start()
    thread.join()
    entries = [entry for entries in transactions._begun_on.values() for entry in entries]
    alive = [entry for entry in entries if entry[0]() is not None]
    assert len(alive) <= 10, len(alive)


@pytest.mark.parametrize(
    "export_first",
    [pytest.param(True, id="after-export"), pytest.param(False, id="control")],
)
def test_a_pooled_payment_hands_the_lock_on_at_its_commit(
    export_first: bool, real_database: DatabaseServer, redis_url: str
) -> None:
    """devkit/shop/adversary12.py under one gunicorn sync worker, its garbage collector off
    (``gc.disable()``, as sites that freeze or disable it do; with it on, the same lasts
    until a full collection gets to the dead thread's connection). ``export`` first (its
    batch job, in a thread pool of the request's own, left in a transaction managed by
    hand: a failed query, no rollback), or not (the control); then ``pay-pooled/1``
    (charged and committed in the payments pool, a module's executor whose thread starts
    at its first job, and lives on; the lock released inside the block), then ``pay/1``,
    the second click (``@lock_view``, wait=10).

    Expected: the second click finds the lock free and answers "already paid" at once.
    Observed at 5f6a5f4: at once in the control; after the export, refused after its whole
    10 s wait (409), on PostgreSQL and on MariaDB: the payments thread got the dead export
    thread's identity, so every lock it takes is tied to that thread's transaction
    (``_open_on``), held past its COMMIT until MANUAL_COMMIT_WAIT (600 s) ends it (the
    thread recorded for the tie is the payments thread, alive). At 0b12a23: at once. Fixed
    in 2e93ba8 (the registry keeps each connection's thread, not its identity alone)."""
    with serve_shop(real_database, redis_url, workers=1, gc_disabled=True) as shop:
        shop.place_orders(1)
        if export_first:
            assert shop.post("/export").result == "export failed"
        first = shop.post("/pay-pooled/1")
        began = time.monotonic()
        second = shop.post("/pay/1")
        took = round(time.monotonic() - began, 1)
        charges = shop.charges_per_order()
    assert first.result == "charged", first
    assert charges == {1: 1}, charges
    assert (second.status, second.result, took < 5) == (200, "already paid", True), took


def _calls_into_transactions(pair: Callable[[], None]) -> int:
    """Return how many Python calls into distlock.transactions one ``pair()`` makes, run
    (warmed up once) in a new thread: a context that never entered a transaction."""
    calls = [0]

    def count(frame: Any, event: str, _arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.endswith("transactions.py"):
            calls[0] += 1

    def run() -> None:
        pair()
        sys.setprofile(count)
        try:
            pair()
        finally:
            sys.setprofile(None)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return calls[0]


def test_a_pair_outside_transactions_costs_the_same_once_another_thread_began_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An uncontended acquire+release in a thread with no transaction (a pool job, a
    management command, a sync view under ASGI: a new thread, a new context), counted in
    Python calls into distlock.transactions, before and after another thread of the
    process began a transaction (in every Django site, the first request that writes).

    Expected: the same count (0b12a23: 4 and 4; its fast path asked only the thread's own
    context and whether a transaction was ever managed by hand).
    Observed at 5f6a5f4: 4, then 16 (the new thread got the other thread's identity, and
    walks its dead connection too; 10 with an identity of its own). Under callgrind (a
    redis-server of its own, benchmarks/cost_pair.py's child with one atomic block run
    first in another thread):
    509,925 instructions per pair against 489,076 at 0b12a23 (+20,849, +4.3%; 486,506
    with no transaction ever begun). Where the thread's identity has many connections
    registered (a thread per request: 10,000 requests in turn left 82 dead threads'
    connections under one identity until the collector ran), ``transactions_here()``
    walks them all, twice per pair: 30 us with 83 against 1.3 us with 1."""
    name = "adv12:cost"

    def pair() -> None:
        lk = distlock.lock(name, ttl=5)
        lk.acquire()
        lk.release()

    monkeypatch.setattr(transactions, "_begun_on", {}, raising=False)
    before = _calls_into_transactions(pair)
    other = threading.Thread(target=_clean_job)  # another thread begins a transaction
    other.start()
    other.join()
    after = _calls_into_transactions(pair)
    assert after == before, (before, after)


# --- a step's own block on another database, and a bridged release awaiting its answer -----
WAIT = 3  # the step's wait for the lock (s): a take-back is at once, a deadlock is all of it


def _step_with_a_bridged_release(
    name: str,
    own_block: bool,
    using: str = "fencing",
    request_block: bool = True,
    wait: float | None = WAIT,
) -> dict[str, Any]:
    """The request's transaction (``default``) runs its async service through async_to_sync;
    the service runs a sync step in the request's thread (sync_to_async). While the step
    is busy (inside an atomic block of its own on ``fencing`` when ``own_block``), a
    callback-based client's thread schedules a coroutine on the loop that takes the lock
    and releases it: its question to the busy thread is unanswered, so the release awaits
    its answer, naming the transactions open on that thread. Then the step, its own block
    committed, asks for the same lock."""
    seen: dict[str, Any] = {}
    loop_box: list[asyncio.AbstractEventLoop] = []

    def client_callback() -> None:  # the release is made meanwhile
        seen["released"] = bridged_take_and_release(name, loop_box[0])

    def step() -> None:
        if own_block:
            with transaction.atomic(using=using):
                client_callback()
        else:
            client_callback()
        seen["awaiting"] = bool(transactions._awaiting.get(("lock", "default", name)))
        take_timed(name, seen, wait=wait)

    async def service() -> None:
        loop_box.append(asyncio.get_running_loop())
        await sync_to_async(step)()

    if request_block:
        with transaction.atomic():
            async_to_sync(service)()
    else:
        async_to_sync(service)()
    seen["freed_after_commit"] = free_within(name, 3)
    return seen


def test_a_step_whose_own_block_ended_takes_back_a_release_awaiting_its_answer() -> None:
    """The step opens an atomic block of its own on another database (``fencing``: a second
    alias, as a site whose payments live apart) around the client's callback; the bridged
    release then names both transactions open on the request's thread (the request's and
    the step's). The step's block commits, and the step asks for the lock.

    Expected: granted at once: the step is in the request's transaction, the only one the
    release named that is still open (the answer, when it comes, ties the release to that
    one alone: ``_places_seen`` keeps the open ones). Freed at the COMMIT.
    Observed at 5f6a5f4: refused after its whole wait (3.0 s of 3; with wait=None it would
    wait for ever, the lock renewed: the answer is queued behind the step). At 0b12a23
    granted at once (0.0 s). Cause: ``_awaiting_here`` (transactions.py, about line 602)
    compares the named places as they were at the release (``all(... in here for ... in
    named)``), not those still open (``_still_open``)."""
    seen = _step_with_a_bridged_release("adv12:own-block-ended", own_block=True)
    assert seen["awaiting"], seen
    assert seen["got"] and seen["took"] < WAIT / 2, seen
    assert seen["freed_after_commit"], seen


def test_control_a_step_without_a_block_of_its_own_takes_it_back() -> None:
    """The control: the same step with no block of its own. Held at 5f6a5f4: granted at
    once (0.0 s), freed after the COMMIT."""
    seen = _step_with_a_bridged_release("adv12:no-own-block", own_block=False)
    assert seen["awaiting"], seen
    assert seen["got"] and seen["took"] < WAIT / 2, seen
    assert seen["freed_after_commit"], seen


def test_a_step_after_its_only_block_ended_gets_a_release_that_awaited_its_answer() -> None:
    """No request transaction (``non_atomic_requests``, a command): the step opens the only
    block (on ``default``) around the client's callback, so the bridged release names that
    block's transaction alone; the block commits, and the step, outside any transaction,
    asks for the lock.

    Expected: granted at once: every transaction the release waited for has committed (the
    answer, when it comes, frees it: ``_places_seen`` finds none open).
    Observed at 5f6a5f4: refused after its whole wait (3.0 s of 3; for ever with
    wait=None), the answer queued behind the step. At 0b12a23 granted at once (0.0 s; the
    release was not held for its answer there). Cause: ``_awaiting_here`` returns nothing
    for code in no named transaction, and nothing settles a release whose named
    transactions have all ended before its answer comes."""
    seen = _step_with_a_bridged_release(
        "adv12:only-block-ended", own_block=True, using="default", request_block=False
    )
    # Since the thirteenth adversary's fix the release is tied at once to the block, and
    # freed at its COMMIT: no longer awaiting its answer when the step asks.
    assert not seen["awaiting"], seen
    assert seen["got"] and seen["took"] < WAIT / 2, seen


HANG = 8.0  # seconds the watchdog lets the step wait (wait=None) before forcing the lock free


def test_with_no_wait_the_step_after_its_only_block_never_hangs() -> None:
    """The test above with ``wait=None`` (the default), ttl 5 s. A watchdog looks after 8 s,
    then force-releases the lock on the server, so that the test ends.

    Expected: the step gets the lock at once.
    Observed at 5f6a5f4: after 8 s the step still waited and the lock was still held (its
    5 s lease renewed); the step got it only after the forced release (8.0 s)."""
    name = "adv12:only-block-no-wait"
    watched: dict[str, Any] = {}
    with forced_free_after(name, HANG, watched):
        seen = _step_with_a_bridged_release(
            name, own_block=True, using="default", request_block=False, wait=None
        )
    assert seen["got"] and seen["took"] < WAIT / 2, (seen, watched)


# --- a lease lost while the release waits, found by the COMMIT's release ------------------
def test_a_lease_lost_before_the_commit_found_by_the_commits_release_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Found beside the shapes above (the watchdog's forced release): a lock released inside
    a transaction, its lease lost before the COMMIT (force-released here; a failover or an
    eviction alike) and before any renewal found it (ttl 30 s: renewed every 10 s), so the
    release at the COMMIT is the first to find it gone.
    (test_transactions.py's test of a lease lost while waiting covers the other order: a
    renewal finds it first, ttl 0.3 s.)

    Expected: reported lost once: ``on_lost`` called and ``lock_lost`` sent; no error.
    Observed at 5f6a5f4 (and at 0b12a23): neither; "lost the lease" is logged, then
    "releasing a lock after its transaction ended failed" with AttributeError: 'NoneType'
    object has no attribute 'signal_sender' (from ``finish``; the same escapes into the
    event loop as "Exception in callback _settle_when_answered" for a bridged release, and
    into the renewer's "renewing ... failed"). Cause: ``LockTies.release_after``
    (transactions.py, about line 1169) calls ``lock._report_lost()`` after
    ``_release_now()`` raised LockNotOwned from ``_end_release``, which ran
    ``self._forget()`` first (lock.py line 261: ``_operations = None``), and
    ``_report_lost`` reads ``_sender(self._operations)`` (lock.py about line 286)."""
    name = "adv12:lost-before-commit"
    on_lost: list[str] = []
    signalled: list[str] = []

    def receiver(sender: Any, name: str, **kwargs: Any) -> None:
        signalled.append(name)

    lock_lost.connect(receiver)
    try:
        with transaction.atomic():
            lk = distlock.lock(name, ttl=30, on_lost=lambda lock: on_lost.append(lock.name))
            assert lk.acquire()
            lk.release()  # waits for the COMMIT
            assert locks["default"].force_release(name)
    finally:
        lock_lost.disconnect(receiver)
    errors = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert (on_lost, signalled, errors) == ([name], [name], [])
