"""Issue 39, the second adversary: shapes in which the claims of docs/transactions.md still
fail. Each test says what it expects; each FAILS on the code it was written against.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import IntegrityError, connections, transaction

import distlock
from devkit.fencingapp.models import Account
from distlock import transactions
from distlock.signals import lock_released
from tests.support.lock_helpers import BrokenCounter, free_within, is_held

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "fencing"]),
    pytest.mark.usefixtures("redis_backend"),
]


def release_before_two_hooks(name: str, ttl: float, first_hook: Callable[[], None]) -> list[bool]:
    """In a transaction, take ``name``, register ``first_hook`` and a second hook that looks
    whether ``name`` is held, then release it; return what the second hook saw once the
    transaction committed ([True]: held at hook 2, as the release waits for both hooks)."""
    held_at_second_hook: list[bool] = []
    with transaction.atomic():
        lk = distlock.lock(name, ttl=ttl)
        assert lk.acquire()
        transaction.on_commit(first_hook)
        transaction.on_commit(lambda: held_at_second_hook.append(is_held(name)))
        lk.release()
    return held_at_second_hook


def test_a_hook_taking_the_lock_back_in_its_own_block_keeps_it_past_the_later_hooks() -> None:
    """Hook 1 (registered before the release) locks the order again inside an atomic()
    block of its own; hook 2 (also registered before the release) sends the e-mail. The lock
    is handed on once the hooks registered before the release have run: it must still be
    held at hook 2. The take-back replaces the hold's tie to the committed transaction by a
    tie to the hook's new one, whose COMMIT then frees the lock between the hooks."""
    name = "adv2:hook-own-block"

    def first_hook() -> None:
        with transaction.atomic(), distlock.lock(name, ttl=5, wait=2):
            pass

    held_at_second_hook = release_before_two_hooks(name, 5, first_hook)
    assert held_at_second_hook == [True], "freed by the hook's own block, before hook 2"
    assert free_within(name)


def test_a_lock_held_over_the_commit_and_released_in_a_hooks_block_waits_for_later_hooks() -> None:
    """The lock is taken in the transaction and still held at its COMMIT; hook 1 releases it
    inside an atomic() block of its own. Hook 2 was registered before that release: the lock
    must still be held when it runs (the committed transaction's end includes its hooks)."""
    name = "adv2:held-over-commit"
    held_at_second_hook: list[bool] = []
    lk = distlock.lock(name, ttl=5)

    def first_hook() -> None:
        with transaction.atomic():
            lk.release()

    with transaction.atomic():
        assert lk.acquire()
        transaction.on_commit(first_hook)
        transaction.on_commit(lambda: held_at_second_hook.append(is_held(name)))
    assert held_at_second_hook == [True], "freed by the hook's own block, before hook 2"
    assert free_within(name)


class Interrupt(BaseException):
    """KeyboardInterrupt, SystemExit or gevent's Timeout: raised wherever the code happens
    to be."""


def test_an_interrupt_right_after_the_ties_end_leaves_no_lock_renewed_for_ever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The interrupt arrives after the COMMIT has ended the hold's last tie (the hold is
    marked done) and before the release is sent. The lock must be freed or lost within its
    lease (ttl 1 s: gone within 4 s). It is renewed for as long as the process lives: the
    renewer's safety net (Hold.end_unseen) looks for ties whose transaction is over, and a
    done hold has none left, so the waiting release is renewed again and again."""
    name = "adv2:interrupted-after-untie"

    def interrupted(freed: Any) -> None:
        raise Interrupt

    monkeypatch.setattr(transactions, "finish", interrupted)
    lk = distlock.lock(name, ttl=1)
    with pytest.raises(Interrupt), transaction.atomic():
        assert lk.acquire()
        lk.release()  # waits for the COMMIT
    monkeypatch.undo()
    assert free_within(name, 4), "renewed for ever after the interrupt"


@pytest.mark.parametrize(
    "helper", ["_began", "_hooks_follow_a_commit", "_commit_hooks_after_handing_on", "_apply_end"]
)
def test_a_failure_in_a_helper_the_wrappers_call_leaves_djangos_work_done(
    helper: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of these is called straight from a wrapper around Django's method, with no
    try around the call: distlock's fail-safety rests on each helper catching everything
    inside itself. Made to raise (a bug in distlock, a renamed Django attribute read
    outside the helper's own try), Django's own work must still be done, silently: the
    transaction committed, its on_commit hook run, the connection back in autocommit, and
    no distlock exception raised into the caller. _began: an atomic() block with no lock at
    all raises at its start (autocommit left off); _hooks_follow_a_commit and
    _commit_hooks_after_handing_on: Django's set_autocommit(True) never runs, the hook never
    runs, the connection stays out of autocommit; _apply_end: a committed block raises
    distlock's error into the caller."""
    conn = connections["default"]
    ran: list[int] = []
    name = f"adv2:helper-fails:{helper}"

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"injected into {helper}")

    if helper == "_began":  # every outermost block begins there: no lock needed
        monkeypatch.setattr(transactions, helper, broken)
        monkeypatch.setattr(transactions, "_numbers", BrokenCounter(helper))
    raised = None
    try:
        with transaction.atomic():
            Account.objects.create(balance=3939)
            transaction.on_commit(lambda: ran.append(1))
            lk = distlock.lock(name, ttl=5)
            assert lk.acquire()
            lk.release()  # waits for the COMMIT: the wrappers take their slow path
            monkeypatch.setattr(transactions, helper, broken)
    except RuntimeError as exc:
        raised = exc
    state = (conn.in_atomic_block, conn.autocommit, ran[:])
    monkeypatch.undo()
    try:
        assert raised is None, f"distlock's error reached the caller: {raised!r}"
        assert state == (False, True, [1]), "(in a block, autocommit, hooks run) afterwards"
    finally:
        _repair(conn)
    assert Account.objects.filter(balance=3939).exists()


def _repair(conn: Any) -> None:
    """Put a connection a failed wrapper left broken back in order for the next test."""
    conn.in_atomic_block = False
    conn.atomic_blocks, conn.savepoint_ids, conn.run_on_commit = [], [], []
    conn.needs_rollback = False
    if conn.connection is not None:
        conn.connection.rollback()  # the driver's: what the broken block left open
    conn.set_autocommit(True)
    conn.close()


def test_a_later_hold_until_commit_false_hold_never_frees_the_earlier_hold_before_commit() -> None:
    """In one transaction the order is charged under the lock (the default: its release
    waits for the COMMIT), then a helper locks the same name with hold_until_commit=False
    (it guards no database work of its own). The holds stack: the helper's release must not
    replace the first hold's tie to the transaction, so the lock stays held until COMMIT.
    The take-back moves the first hold's ties to the helper's Lock, whose release is
    immediate and drops them: another request can charge the order before the COMMIT."""
    name = "adv2:stack-no-hold"
    with transaction.atomic():
        with distlock.lock(name, ttl=5):
            pass  # charge: the release waits for the COMMIT
        with distlock.lock(name, ttl=5, wait=1, hold_until_commit=False):
            pass  # notify the warehouse
        assert is_held(name), "freed before the COMMIT by the later, non-holding release"
    assert free_within(name)


def test_a_hooks_own_block_with_a_slow_hook_of_its_own_never_lets_the_renewer_free_early() -> None:
    """Hook 1 saves something in an atomic() block of its own, and that block registers a
    slow hook of its own (a signal handler's delay_on_commit, an SMTP call: 1.2 s); hook 2
    sends the e-mail. Both were registered before the release: the lock must still be held
    at hook 2. While the inner block's hooks run, the connection is marked as ending the
    inner transaction, so the renewer's look (Hold._open) finds the committed transaction
    "no longer open" and frees the lock during hook 1 (ttl 1 s: a renewal every third)."""
    name = "adv2:renewer-in-hook"

    def first_hook() -> None:
        with transaction.atomic():
            Account.objects.create(balance=1)
            transaction.on_commit(lambda: time.sleep(1.2))

    held_at_second_hook = release_before_two_hooks(name, 1, first_hook)
    assert held_at_second_hook == [True], "freed by the renewer while hook 1's hooks ran"
    assert free_within(name)


class HookFailed(Exception):
    """Raised by an on_commit hook: Django raises it out of the block's __exit__."""


@pytest.mark.parametrize("receivers_block", ["commits", "rolls back", "hook fails"])
def test_a_lock_released_receiver_with_a_block_of_its_own_leaves_the_hooks_to_django(
    receivers_block: str,
) -> None:
    """The order is charged under the lock; the e-mail hook is registered after the release,
    so the lock is handed on at the COMMIT, before the hooks, and lock_released is sent
    there. A receiver writes an audit row in an atomic() block of its own (get_or_create,
    update_or_create: an IntegrityError rolls it back). The committed transaction's hooks
    must run as Django runs them: after the receiver, exactly once, their exception raised
    to the caller. They are still in the connection's run_on_commit while the receiver
    runs: its block's COMMIT runs them inside the receiver; its ROLLBACK discards them
    (the e-mail never goes); a failing hook's exception is swallowed by distlock's
    release (logged), and the caller's atomic() returns as if all went well."""
    name = f"adv2:receiver:{receivers_block}"
    order: list[str] = []

    def receiver(sender: Any, name: str, **kwargs: Any) -> None:
        if not name.startswith("adv2:receiver:"):
            return
        order.append("receiver")
        try:
            with transaction.atomic():
                Account.objects.create(balance=5)
                if receivers_block == "rolls back":
                    raise IntegrityError("the audit row exists")
        except IntegrityError:
            pass
        order.append("receiver done")

    def hook() -> None:
        order.append("hook")
        if receivers_block == "hook fails":
            raise HookFailed

    lock_released.connect(receiver, weak=False)
    raised = None
    try:
        with transaction.atomic():
            with distlock.lock(name, ttl=5):
                pass  # charge
            transaction.on_commit(hook)  # the e-mail
    except HookFailed as exc:
        raised = exc
    finally:
        lock_released.disconnect(receiver)
    assert order == ["receiver", "receiver done", "hook"]
    assert (raised is not None) == (receivers_block == "hook fails"), "the hook's exception"


def test_an_upgrade_refused_after_a_shared_release_that_waits_says_why() -> None:
    """In one transaction, a report reads under the shared lock (released: the release
    waits for the COMMIT), then the same transaction asks for the exclusive lock. It is
    refused at once (it would wait for itself), which is right, but the error tells the
    user to "Release the shared lock first": they did. It must say that the shared
    release waits for this transaction's COMMIT (take the exclusive lock first, or after
    the transaction)."""
    name = "adv2:upgrade-message"
    with transaction.atomic():
        with distlock.lock(name, ttl=5, shared=True):
            pass  # the report
        with pytest.raises(distlock.LockError) as refused:
            distlock.lock(name, ttl=5, wait=1).acquire()
    message = str(refused.value)
    assert "commit" in message.lower() or "transaction" in message.lower(), message


def test_a_task_asking_for_the_exclusive_lock_after_its_siblings_read_never_waits() -> None:
    """asyncio.gather under async_to_sync inside atomic(): one task reads under the shared
    lock and releases it (the release waits for the COMMIT), the other then asks for the
    exclusive lock. It must get it at once (the transaction holds the only shared hold, as
    PostgreSQL grants an upgrade within a transaction) or be refused at once with a clear
    error, as the same shape in one thread is (SharedLockUpgrade). It waits for its own
    transaction's COMMIT until its wait runs out (LockNotAcquired after 2 s; for ever with
    wait=None): the sibling look (held_in_transactions_here) only knows the same kind."""
    name = "adv2:gather-upgrade"
    outcome: list[tuple[str, float]] = []

    async def reader() -> None:
        async with distlock.lock(name, ttl=5, shared=True):
            await asyncio.sleep(0.05)

    async def writer() -> None:
        await asyncio.sleep(0.1)  # after the reader's release
        started = time.monotonic()
        try:
            async with distlock.lock(name, ttl=5, wait=2):
                outcome.append(("got it", time.monotonic() - started))
        except distlock.LockError as exc:
            outcome.append((type(exc).__name__, time.monotonic() - started))

    async def both() -> None:
        await asyncio.gather(reader(), writer())

    with transaction.atomic():
        async_to_sync(both)()
    assert outcome and outcome[0][1] < 1, f"waited for its own transaction: {outcome}"
    assert free_within(name)


def test_a_commit_through_the_driver_that_no_wrapper_sees_never_keeps_the_lock_renewed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker loop manages its transaction by hand (set_autocommit(False) once) and
    commits each batch through the driver (connection.connection.commit(), as code written
    for the DB-API does). A lock released in the batch waits for a commit no wrapper sees,
    and the renewer's look (Hold._open, Django's view: autocommit off, same number) finds
    the transaction open. Documented (docs/transactions.md, "Nothing is held for ever"):
    such a release waits at most MANUAL_COMMIT_WAIT, then the lock is left to its lease
    while the loop goes on; before that bound it was renewed for as long as the loop ran."""
    monkeypatch.setattr(transactions, "MANUAL_COMMIT_WAIT", 1.0)
    name = "adv2:driver-commit"
    committed, stop = threading.Event(), threading.Event()

    def worker() -> None:
        conn = connections["default"]
        conn.set_autocommit(False)
        try:
            with distlock.lock(name, ttl=1):
                Account.objects.create(balance=2)
            conn.connection.commit()  # the batch is committed: the driver's commit
            committed.set()
            stop.wait(20)  # the loop goes on to its next batch
        finally:
            conn.set_autocommit(True)
            conn.close()

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert committed.wait(10)
        assert free_within(name, 10), "renewed while the loop runs, past MANUAL_COMMIT_WAIT"
    finally:
        stop.set()
        thread.join(25)
