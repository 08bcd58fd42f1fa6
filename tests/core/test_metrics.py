"""OpenTelemetry metrics (distlock.metrics) through the real SDK and its in-memory reader:
every instrument, its unit and attributes, for locks and semaphores (without the package:
test_metrics_absent.py)."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command

import distlock
from distlock import metrics
from tests.conftest import _use
from tests.support.otel import Point, collect, fresh


@pytest.fixture(autouse=True)
def _reader(redis_backend: str, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    fresh(monkeypatch)
    yield
    # A hold a test leaves behind ends during a later test, which then records its name:
    # each test ends with nothing held (checked on the suite's server, whatever the test set).
    _use(settings, "redis", redis_backend)
    assert [info.name for info in distlock.locks["default"].held()] == []


def points(instrument: str) -> list[Point]:
    return [point for point in collect() if point.instrument == instrument]


def attributes(alias: str, kind: str, name: str, **more: str) -> dict[str, str]:
    extra = {f"distlock.{key}": value for key, value in more.items()}
    return {"distlock.alias": alias, "distlock.kind": kind, "distlock.name": name, **extra}


def test_a_lock_records_its_wait_and_hold_in_seconds() -> None:
    lock = distlock.lock("report:42", ttl=10, metric_name="report:{id}")
    assert lock.acquire()
    time.sleep(0.05)
    lock.release()
    found = collect()
    [wait] = [p for p in found if p.instrument == metrics.WAIT_DURATION]
    [hold] = [p for p in found if p.instrument == metrics.HOLD_DURATION]
    assert wait.unit == hold.unit == "s"
    assert wait.attributes == attributes("default", "lock", "report:{id}", outcome="acquired")
    assert hold.attributes == attributes("default", "lock", "report:{id}")
    assert wait.count == hold.count == 1
    assert 0 < wait.total < 1
    assert 0.05 <= hold.total < 5


def test_a_contended_wait_is_timed_to_its_outcome() -> None:
    holder = distlock.lock("busy", ttl=10)
    assert holder.acquire()
    collect()
    assert not distlock.lock("busy", wait=0.2).acquire()
    [wait] = points(metrics.WAIT_DURATION)
    assert wait.attributes == attributes("default", "lock", "busy", outcome="not_acquired")
    assert 0.2 <= wait.total < 5

    releaser = threading.Timer(0.2, holder.release)
    releaser.start()
    waiter = distlock.lock("busy", wait=5, ttl=10)
    assert waiter.acquire()
    waiter.release()  # a hold left behind would be recorded by whichever test comes next
    releaser.join()  # and so would the holder's, were its release still being recorded
    waits = [p for p in points(metrics.WAIT_DURATION) if p.attributes["distlock.outcome"]]
    [acquired] = [p for p in waits if p.attributes["distlock.outcome"] == "acquired"]
    assert 0.15 <= acquired.total < 5


def test_an_unreachable_server_is_an_error_outcome(settings) -> None:
    settings.DISTLOCK = {
        "default": {
            "BACKEND": "distlock.backends.redis.RedisBackend",
            "LOCATION": "redis://127.0.0.1:1/0",
        }
    }
    distlock.locks.reset()
    with pytest.raises(distlock.BackendUnavailable):
        distlock.lock("nowhere:1").acquire()
    [wait] = points(metrics.WAIT_DURATION)
    assert wait.attributes == attributes("default", "lock", "nowhere:*", outcome="error")


def test_a_plain_lock_reports_a_bounded_name_and_the_user_can_name_it() -> None:
    for order in range(300):
        with distlock.lock(f"order:{order}", ttl=5):
            pass
    with distlock.lock("order:1", ttl=5, metric_name="orders"):
        pass
    names = {p.attributes["distlock.name"] for p in points(metrics.HOLD_DURATION)}
    assert names == {"order:*", "orders"}


def test_derived_names_stop_growing_at_the_limit() -> None:
    for number in range(metrics.MAX_DERIVED_NAMES + 50):
        with distlock.lock(f"job-{number}", ttl=5):  # no ":": the whole name is its form
            pass
    names = {p.attributes["distlock.name"] for p in points(metrics.HOLD_DURATION)}
    assert len(names) == metrics.MAX_DERIVED_NAMES + 1
    assert metrics.OTHER in names


def test_metric_name_must_be_a_non_empty_str() -> None:
    with pytest.raises(TypeError, match="metric_name must be a non-empty str"):
        distlock.lock("x", metric_name="")
    assert distlock.lock("x", metric_name="n").copy().metric_name == "n"


def test_a_semaphore_records_the_same_instruments_with_its_kind() -> None:
    first = distlock.semaphore("exports:eu", 1, ttl=10, metric_name="exports:{region}")
    assert first.acquire()
    assert not distlock.semaphore("exports:eu", 1, wait=0).acquire()
    first.release()
    found = collect()
    waits = sorted(
        (p.attributes["distlock.outcome"], p.attributes["distlock.kind"], p.count)
        for p in found
        if p.instrument == metrics.WAIT_DURATION
    )
    assert waits == [("acquired", "semaphore", 1), ("not_acquired", "semaphore", 1)]
    [hold] = [p for p in found if p.instrument == metrics.HOLD_DURATION]
    assert hold.attributes == attributes("default", "semaphore", "exports:{region}")


def test_a_lost_lease_is_counted() -> None:
    lost = threading.Event()
    lock = distlock.lock(
        "nightly:7", ttl=0.3, auto_renew=True, on_lost=lambda lock: lost.set(), metric_name="n"
    )
    assert lock.acquire()
    assert distlock.locks["default"].force_release("nightly:7")
    assert lost.wait(5)
    [counted] = points(metrics.LOST)
    assert counted.unit == "{lock}"
    assert counted.attributes == attributes("default", "lock", "n")
    assert counted.total == 1


def test_a_force_release_by_code_is_counted_once_for_each_kind() -> None:
    backend = distlock.locks["default"]
    held = distlock.lock("invoice:9", ttl=30)
    reader = distlock.lock("prices:eu", ttl=30, shared=True)
    permit = distlock.semaphore("pool:a", 2, ttl=30)
    assert held.acquire() and reader.acquire() and permit.acquire()
    collect()
    assert backend.force_release("invoice:9")
    assert backend.shared.force_release("prices:eu", reader.token)
    assert backend.semaphores.force_release("pool:a", permit.token)
    assert not backend.force_release("invoice:9")  # nothing held: nothing counted
    found = sorted(
        (p.attributes["distlock.kind"], p.attributes["distlock.name"], p.total)
        for p in points(metrics.FORCE_RELEASED)
    )
    assert found == [
        ("lock", "invoice:*", 1),
        ("semaphore", "pool:*", 1),
        ("shared", "prices:*", 1),
    ]


def test_a_force_release_from_the_command_is_counted() -> None:
    held = distlock.lock("invoice:9", ttl=30)
    assert held.acquire()
    sem = distlock.semaphore("pool:a", 2, ttl=30)
    assert sem.acquire()
    collect()
    call_command("distlock", "release", "invoice:9", "--yes", stdout=io.StringIO())
    call_command(
        "distlock", "release", "pool:a", "--token", sem.token, "--yes", stdout=io.StringIO()
    )
    found = sorted(
        (p.attributes["distlock.kind"], p.attributes["distlock.name"], p.total)
        for p in points(metrics.FORCE_RELEASED)
    )
    assert found == [("lock", "invoice:*", 1), ("semaphore", "pool:*", 1)]
