"""Metrics at the edges of a hold, from a review: every hold is recorded once, however it
ends (released, lost, run out, given back after a transaction, taken back by another object),
an error before the first attempt is a wait that ended in an error, and a shared hold's force
release is counted. Through the real OpenTelemetry SDK and its in-memory reader."""

from __future__ import annotations

import io
import threading
import time
from typing import Any

import pytest
from django.core.management import call_command
from django.db import transaction

import distlock
from distlock import metrics
from tests.support.lock_helpers import queued_in_turn
from tests.support.otel import Point, collect, fresh


@pytest.fixture(autouse=True)
def _reader(redis_backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh(monkeypatch)


def points(instrument: str) -> list[Point]:
    return [point for point in collect() if point.instrument == instrument]


def holds_recorded() -> int:
    return sum(point.count for point in points(metrics.HOLD_DURATION))


def test_a_lost_lease_records_its_hold_once() -> None:
    lost = threading.Event()
    lock = distlock.lock("edge:lost", ttl=0.3, auto_renew=True, on_lost=lambda _: lost.set())
    assert lock.acquire()
    assert distlock.locks["default"].force_release("edge:lost")
    assert lost.wait(5)
    with pytest.raises(distlock.LockLost):
        lock.release()  # what `with lock:` does on exit
    assert holds_recorded() == 1


def test_a_hold_that_ran_out_is_recorded_when_the_object_acquires_again() -> None:
    lock = distlock.lock("edge:expired", ttl=0.2)
    assert lock.acquire()
    time.sleep(0.3)
    assert lock.acquire()  # the ended hold is dropped, a new one begins
    lock.release()
    holds = points(metrics.HOLD_DURATION)
    assert sum(point.count for point in holds) == 2
    assert sum(point.total for point in holds) < 0.2 + 0.3  # the first ended with its lease


@pytest.mark.django_db(transaction=True)
def test_a_hold_taken_back_in_a_transaction_is_one_hold() -> None:
    with transaction.atomic():
        first = distlock.lock("edge:tx", ttl=10)
        assert first.acquire()
        first.release()  # waits for the transaction
        second = distlock.lock("edge:tx", ttl=10)
        assert second.acquire()  # takes the waiting hold back
        second.release()
    assert holds_recorded() == 1


@pytest.mark.django_db(transaction=True)
def test_a_release_after_commit_that_fails_still_records_the_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unreachable(*args: Any, **kwargs: Any) -> int:
        raise distlock.BackendUnavailable("redis down (simulated)")

    with transaction.atomic():
        lock = distlock.lock("edge:tx-down", ttl=2)
        assert lock.acquire()
        lock.release()  # waits for the transaction
        monkeypatch.setattr(distlock.locks["default"].exclusive, "release", unreachable)
    assert not lock.owned() or lock.token is None
    assert holds_recorded() == 1


def test_a_shared_holds_force_release_is_counted() -> None:
    held = distlock.lock("edge:shared", ttl=30, shared=True)
    assert held.acquire()
    collect()
    call_command(
        "distlock", "release", "edge:shared", "--token", held.token, "--yes", stdout=io.StringIO()
    )
    found = [(p.attributes["distlock.kind"], p.total) for p in points(metrics.FORCE_RELEASED)]
    assert found == [("shared", 1)]


def test_an_upgrade_refused_is_a_wait_that_ended_in_an_error() -> None:
    reader = distlock.lock("edge:upgrade", ttl=30, shared=True)
    assert reader.acquire()
    collect()
    with pytest.raises(distlock.SharedLockUpgrade):
        distlock.lock("edge:upgrade", ttl=30).acquire()
    reader.release()
    outcomes = [p.attributes.get("distlock.outcome") for p in points(metrics.WAIT_DURATION)]
    assert outcomes == ["error"]


def test_info_of_a_shared_lock_counts_every_waiter_beyond_the_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from distlock.backends.redis_ops import holds as ops

    monkeypatch.setattr(ops, "MAX_WAITERS_LISTED", 1)  # stands for its 1,000
    reader = distlock.lock("edge:count", ttl=30, shared=True)
    assert reader.acquire()

    def writer(_: int) -> threading.Thread:
        def run() -> None:
            lock = distlock.lock("edge:count", ttl=30, wait=10)
            if lock.acquire():
                lock.release()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    threads = queued_in_turn("edge:count", 2, writer)
    try:
        out = io.StringIO()
        call_command("distlock", "info", "edge:count", stdout=out)
        assert "waiters:        2" in out.getvalue()
        assert "... and 1 more" in out.getvalue()
    finally:
        reader.release()
        for thread in threads:
            thread.join(10)
