"""A downgrade inside a transaction: the exclusive release waits for COMMIT, and the same
thread asking for the shared lock meanwhile is granted it at once; after COMMIT the shared
hold stays, and a queued writer waits for it."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import transaction

import distlock
from distlock.handler import locks
from tests.support.lock_helpers import contenders

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default"]),
    pytest.mark.usefixtures("lock_backend"),
]


def test_a_downgrade_while_the_exclusive_release_waits_for_commit() -> None:
    order: list[str] = []

    def write() -> None:
        with distlock.lock("ledger", ttl=5, wait=10):
            order.append("writer")

    reader = distlock.lock("ledger", shared=True, ttl=5, wait=2)
    with transaction.atomic():
        with distlock.lock("ledger", ttl=5), contenders(1) as queued:
            thread = threading.Thread(target=write)
            thread.start()
            queued()
        # The exclusive release waits for COMMIT; this thread still holds it.
        began = time.monotonic()
        assert reader.acquire(), "the same thread waited for its own exclusive hold"
        assert time.monotonic() - began < 1
    assert reader.token in {h.token for h in locks["default"].shared.inspect("ledger")}
    time.sleep(0.2)
    assert order == [], "a writer came in between the COMMIT and the shared hold"
    reader.release()
    thread.join(10)
    assert order == ["writer"]
