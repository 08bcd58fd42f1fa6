"""The uncontended pair's shortcuts (issue 42) keep what the longer forms did: a request and
a grant built with tuple.__new__ have every field, a lease is checked in one call as the two
checks did, the backend's kept conversion of the last lease still refuses a lease above
MAX_TTL, a Lock's operations come from one look-up and follow a reset, and a release that
fails its checks leaves the lease's mutex free."""

from __future__ import annotations

import math
from typing import Any

import pytest

import distlock
from distlock import LockNotOwned
from distlock.attempts import Attempts
from distlock.backends.operations import Attempt, Request
from distlock.backends.redis_ops import holds
from distlock.handler import locks
from distlock.validation import MAX_LEASE_SECONDS, lease_milliseconds, lease_seconds, seconds
from tests.conftest import _use

pytestmark = pytest.mark.django_db(databases=[])


@pytest.fixture(autouse=True)
def redis_alias(settings: Any, redis_url: str) -> None:
    _use(settings, "redis", redis_url)


def test_a_request_has_every_field_in_order() -> None:
    lock = distlock.lock("hot:request", ttl=7)
    request = Attempts(lock, lock.operations, None, 0.0).request()
    assert type(request) is Request
    assert len(request) == len(Request._fields)
    assert request == Request(
        request.name, request.token, 7000, request.meta, request.patience_ms, 1, ""
    )
    assert request.name == "hot:request" and len(request.token) == 32
    assert request.patience_ms > 0  # wait=None: queued while it waits


def test_a_grant_read_from_a_reply_has_every_field() -> None:
    for reply in (b"7 1700000000123", "7 1700000000123"):
        attempt = holds.attempt_from(reply, 2.5)
        assert type(attempt) is Attempt
        assert len(attempt) == len(Attempt._fields)
        assert attempt == Attempt(True, 7, 1700000000123, 0, -1, 0, 2.5)
        assert attempt._replace(sent=1.0).sent == 1.0


@pytest.mark.parametrize(
    "value",
    [10, 10.5, 0.001, 0.0005, 0.0004, MAX_LEASE_SECONDS, MAX_LEASE_SECONDS + 1, None, 0, -1,
     math.inf, math.nan, True, "5", 1e300],
)  # fmt: skip
def test_a_lease_is_checked_in_one_call_as_the_two_checks_did(value: Any) -> None:
    def both() -> float | None:
        number = seconds("ttl", value, allow_none=True)
        if number is not None:
            lease_milliseconds("ttl", number)
        return number

    try:
        expected: Any = both()
    except (TypeError, ValueError) as error:
        with pytest.raises(type(error)) as raised:
            lease_seconds("ttl", value)
        assert str(raised.value) == str(error)
    else:
        assert lease_seconds("ttl", value) == expected


def test_the_kept_lease_conversion_still_refuses_a_lease_above_max_ttl(settings: Any) -> None:
    default = {**settings.DISTLOCK["default"], "OPTIONS": {"MAX_TTL": 30}, "TIMEOUT": 30}
    settings.DISTLOCK = {**settings.DISTLOCK, "default": default}
    locks.reset()
    backend = locks["default"]
    assert backend.lease_ms(10) == 10_000
    assert backend.lease_ms(10.0) == 10_000  # the kept one
    with pytest.raises(ValueError, match="MAX_TTL"):
        backend.lease_ms(31)
    assert backend.lease_ms(2.5) == 2_500
    with pytest.raises(ValueError, match="MAX_TTL"):
        distlock.lock("hot:max", ttl=31).acquire()
    lock = distlock.lock("hot:max", ttl=20)
    assert lock.acquire()
    lock.release()


def test_a_locks_operations_follow_a_reset_of_the_backends() -> None:
    lock = distlock.lock("hot:ops")
    assert lock.operations is locks["default"].exclusive
    assert distlock.lock("hot:ops", shared=True).operations is locks["default"].shared
    locks.reset()
    assert lock.operations is locks["default"].exclusive  # the new backend's


def test_a_refused_release_leaves_the_mutex_free() -> None:
    lock = distlock.lock("hot:mutex", ttl=5)
    assert lock.acquire()
    lock.release()
    with pytest.raises(LockNotOwned):
        lock.release()
    assert not lock._lease.mutex.locked()
    assert lock.acquire()  # and the lock works as before
    lock.release()
