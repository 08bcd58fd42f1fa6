"""Inside Django's TestCase (and pytest-django's ``django_db``), whose transaction is never
committed, locks behave as in production: a release waits only for the code's own outermost
``atomic()`` block, and is immediate when the code opens none."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import transaction
from django.test import TestCase

import distlock
from tests.support.lock_helpers import free_within, is_held


def acquired_by_another_thread(name: str, wait: float) -> float | None:
    """Return how long another thread waited for ``name`` (None: it did not get it)."""
    took: list[float | None] = []

    def contend() -> None:
        started = time.monotonic()
        lk = distlock.lock(name, ttl=5, wait=wait)
        took.append(time.monotonic() - started if lk.acquire() else None)
        if lk.token:
            lk.release()

    thread = threading.Thread(target=contend)
    thread.start()
    thread.join(wait + 5)
    return took[0]


@pytest.mark.usefixtures("redis_backend")
class LocksInsideTestCase(TestCase):
    def test_two_lock_objects_without_an_atomic_block_of_the_codes_own(self) -> None:
        for _ in range(2):
            with distlock.lock("tc:plain", ttl=5, wait=0):
                pass
            self.assertFalse(is_held("tc:plain"), "held for the test's own transaction")

    def test_two_lock_objects_each_in_its_own_atomic_block(self) -> None:
        for _ in range(2):
            started = time.monotonic()
            with transaction.atomic():
                with distlock.lock("tc:atomic", ttl=5, wait=0):
                    pass
                self.assertTrue(is_held("tc:atomic"), "released before the code's block ended")
            self.assertLess(time.monotonic() - started, 2)
        self.assertTrue(free_within("tc:atomic"))

    def test_the_lock_is_free_for_others_when_the_codes_block_ends(self) -> None:
        with transaction.atomic():
            with distlock.lock("tc:others", ttl=5):
                pass
            self.assertIsNone(acquired_by_another_thread("tc:others", wait=0))
        self.assertTrue(free_within("tc:others"))
        self.assertIsNotNone(acquired_by_another_thread("tc:others", wait=0))

    def test_the_same_thread_takes_its_waiting_lock_again_at_once(self) -> None:
        with transaction.atomic():
            with distlock.lock("tc:again", ttl=5, wait=0) as first:
                pass
            second = distlock.lock("tc:again", ttl=5, wait=0)
            self.assertTrue(second.acquire())
            self.assertEqual(second.fencing_token, first.fencing_token)
            second.release()
        self.assertTrue(free_within("tc:again"))

    def test_a_rolled_back_block_frees_the_lock_at_once(self) -> None:
        with self.assertRaises(ZeroDivisionError), transaction.atomic():
            with distlock.lock("tc:rollback", ttl=30):
                pass
            1 / 0  # noqa: B018
        self.assertFalse(is_held("tc:rollback"))

    def test_capture_on_commit_callbacks_sees_only_the_users_callbacks(self) -> None:
        ran: list[str] = []

        def first() -> None:
            ran.append("first")

        def second() -> None:
            ran.append("second")

        with self.captureOnCommitCallbacks() as callbacks, transaction.atomic():
            transaction.on_commit(first)
            with distlock.lock("tc:captured", ttl=5):
                pass
            transaction.on_commit(second)
        self.assertEqual(callbacks, [first, second])
        self.assertTrue(free_within("tc:captured"))
        with (
            self.captureOnCommitCallbacks(execute=True) as callbacks,
            transaction.atomic(),
            distlock.lock("tc:executed", ttl=5),
        ):
            transaction.on_commit(first)
        self.assertEqual(callbacks, [first])
        self.assertEqual(ran, ["first"])
        self.assertFalse(is_held("tc:executed"))

    def test_a_decorated_atomic_function_called_in_a_loop_frees_each_lock(self) -> None:
        # @transaction.atomic reuses one Atomic object for every call.
        @transaction.atomic
        def pay(order: int) -> bool:
            earlier_free = order == 0 or free_within(f"tc:loop:{order - 1}")
            with distlock.lock(f"tc:loop:{order}", ttl=30, wait=0):
                pass
            return earlier_free

        for order in range(4):
            self.assertTrue(pay(order), f"the lock of call {order - 1} was still held")
        self.assertTrue(free_within("tc:loop:3"))


@pytest.mark.django_db
def test_pytest_django_db_marker_counts_only_the_codes_own_blocks(redis_backend: str) -> None:
    with distlock.lock("pd:plain", ttl=5, wait=0):
        pass
    assert not is_held("pd:plain")
    with transaction.atomic():
        with distlock.lock("pd:atomic", ttl=5, wait=0):
            pass
        assert is_held("pd:atomic")
    assert free_within("pd:atomic")


@pytest.mark.django_db
def test_the_tests_transaction_never_counts_once_the_process_managed_one_by_hand(
    redis_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once any code of the process has turned autocommit off by hand, every acquire looks
    at the connections for a transaction managed by hand: the test's own transaction (also
    autocommit off) is still not one (a reverse-order run caught it counted as one)."""
    monkeypatch.setattr(distlock.transactions, "_manual_seen", True)
    with distlock.lock("pd:after-manual", ttl=5, wait=0):
        pass
    assert not is_held("pd:after-manual")
