"""Shared locks and database transactions: a shared holder's release inside
``transaction.atomic()`` waits for the transaction to end, as an exclusive holder's does."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import transaction

import distlock
from distlock import SharedLockUpgrade
from distlock.handler import locks
from tests.support.lock_helpers import contenders

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default"]),
    pytest.mark.usefixtures("lock_backend"),
]


def holders() -> list[str]:
    return [h.token for h in locks["default"].shared.inspect("prices")]


def test_a_shared_release_inside_atomic_waits_for_commit() -> None:
    with transaction.atomic():
        with distlock.lock("prices", shared=True, ttl=5) as lk:
            token = lk.token
        assert holders() == [token], "released before COMMIT"
    assert holders() == []


def test_a_writer_waiting_behind_a_reader_gets_in_after_the_readers_commit() -> None:
    order: list[str] = []

    def write() -> None:
        with distlock.lock("prices", ttl=5, wait=5):
            order.append("writer")

    with transaction.atomic():
        transaction.on_commit(lambda: order.append("committed"))
        with distlock.lock("prices", shared=True, ttl=5), contenders(1) as queued:
            thread = threading.Thread(target=write)
            thread.start()
            queued()
        time.sleep(0.2)  # the release waits for COMMIT: the writer stays out
        assert order == []
    thread.join(5)
    assert order == ["committed", "writer"]


def test_the_same_reader_again_in_one_transaction_takes_its_hold_back() -> None:
    with transaction.atomic():
        with distlock.lock("prices", shared=True, ttl=5) as first:
            token = first.token
        again = distlock.lock("prices", shared=True, ttl=5)
        assert again.acquire()
        assert again.token == token and holders() == [token]
        again.release()
        # The exclusive lock would wait for this transaction's own shared hold.
        with pytest.raises(SharedLockUpgrade):
            distlock.lock("prices", wait=None).acquire()
    assert holders() == []
    with distlock.lock("prices", ttl=5, wait=0):
        pass
