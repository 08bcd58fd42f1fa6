"""Lock hogging: OPTIONS MAX_TTL (longest lease) and MAX_RENEWALS (renewals per hold),
checked at `manage.py check` and enforced: MAX_RENEWALS atomically in the server's script."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import pytest

import distlock
from distlock import LockLost, RenewalLimitReached
from distlock.handler import locks
from tests.faults.helpers import check_errors, lost_locks

pytestmark = pytest.mark.django_db(databases=[])
REDIS = "distlock.backends.redis.RedisBackend"


def limit(settings: Any, **options: Any) -> None:
    """Add upper-case OPTIONS to the default alias (as configured by backend_kind)."""
    config = dict(settings.DISTLOCK["default"])
    if "MAX_TTL" in options:
        config["TIMEOUT"] = options["MAX_TTL"]  # the default lease may not exceed it
    config["OPTIONS"] = {**config.get("OPTIONS", {}), **options}
    settings.DISTLOCK = {"default": config}


# --- settings -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "options",
    [
        {"MAX_TTL": 0},
        {"MAX_TTL": -5},
        {"MAX_TTL": math.nan},
        {"MAX_TTL": math.inf},
        {"MAX_TTL": "60"},
        {"MAX_TTL": True},
        {"MAX_TTL": 1e12},
        {"MAX_TTL": 0.0001},
        {"MAX_TTL": 30},  # shorter than TIMEOUT (60): every default lease would be refused
        {"MAX_RENEWALS": -1},
        {"MAX_RENEWALS": 1.5},
        {"MAX_RENEWALS": "3"},
        {"MAX_RENEWALS": True},
    ],
)
def test_bad_limits_are_e006_at_check_time(options: dict) -> None:
    [error] = check_errors(
        {"BACKEND": REDIS, "LOCATION": "redis://h:6379/0", "TIMEOUT": 60, "OPTIONS": options}
    )
    assert error.id == "distlock.E006"
    assert next(iter(options)) in error.msg and error.hint


@pytest.mark.parametrize(
    "backend",
    [
        REDIS,
        "distlock.backends.locmem.LocMemBackend",
    ],
)
def test_good_limits_pass_on_every_backend(backend: str) -> None:
    options = {"MAX_TTL": 300, "MAX_RENEWALS": 0}
    assert (
        check_errors({"BACKEND": backend, "LOCATION": "redis://h:6379/0", "OPTIONS": options}) == []
    )
    assert (
        check_errors(
            {"BACKEND": backend, "LOCATION": "redis://h:6379/0", "OPTIONS": {"MAX_RENEWALS": None}}
        )
        == []
    )


def test_the_unknown_option_hint_names_the_limits() -> None:
    [error] = check_errors(
        {"BACKEND": REDIS, "LOCATION": "redis://h:6379/0", "OPTIONS": {"MAX_LEASE": 5}}
    )
    assert error.id == "distlock.E006"
    assert "MAX_RENEWALS" in error.hint and "MAX_TTL" in error.hint


# --- MAX_TTL --------------------------------------------------------------------------
def test_a_ttl_above_max_ttl_is_refused_at_acquire(backend_kind, settings, record) -> None:
    limit(settings, MAX_TTL=10)
    lk = distlock.lock("capped", ttl=11)
    with pytest.raises(ValueError, match=r"MAX_TTL of DISTLOCK\['default'\] \(10 seconds\)"):
        lk.acquire()
    assert not lk.locked() and lk.token is None
    ok = distlock.lock("capped", ttl=10)
    assert ok.acquire()
    with pytest.raises(ValueError, match="MAX_TTL"):
        ok.extend(ttl=10.5)
    assert ok.ttl_remaining() <= 10
    ok.extend(ttl=10)
    ok.release()
    if backend_kind == "redis":
        record(
            "Lock hogging: MAX_TTL=10",
            "acquire(ttl=11) and extend(ttl=10.5) raised ValueError naming the alias and the "
            "limit, before anything was sent; ttl=10 worked",
        )


async def test_async_acquire_and_extend_respect_max_ttl(backend_kind, settings) -> None:
    limit(settings, MAX_TTL=10)
    with pytest.raises(ValueError, match="MAX_TTL"):
        await distlock.lock("acapped", ttl=20).aacquire()
    lk = distlock.lock("acapped", ttl=5)
    assert await lk.aacquire()
    with pytest.raises(ValueError, match="MAX_TTL"):
        await lk.aextend(ttl=11)
    await lk.arelease()


# --- MAX_RENEWALS ---------------------------------------------------------------------
def test_extend_beyond_max_renewals_is_refused_and_the_lock_stays_held(
    backend_kind, settings
) -> None:
    limit(settings, MAX_RENEWALS=3)
    lk = distlock.lock("renewed", ttl=30)
    lk.acquire()
    for _ in range(3):
        lk.extend()
    with pytest.raises(RenewalLimitReached, match=r"renewed 3 times.*MAX_RENEWALS"):
        lk.extend()
    assert lk.owned()
    assert locks["default"].info("renewed").renewals == 3
    lk.release()  # still ours to release
    assert not lk.locked()
    again = distlock.lock("renewed", ttl=30)  # a new hold starts counting from zero
    again.acquire()
    again.extend()
    again.release()


def test_reentrant_acquires_are_not_renewals(backend_kind, settings) -> None:
    limit(settings, MAX_RENEWALS=0)
    lk = distlock.lock("re", ttl=30, reentrant=True)
    lk.acquire()
    lk.acquire()
    with pytest.raises(RenewalLimitReached):
        lk.extend()
    lk.release()
    lk.release()
    assert not lk.locked()


@pytest.mark.parametrize("kind", ["redis", "locmem"])
def test_the_limit_holds_under_concurrent_extends(kind, settings, redis_url, record) -> None:
    """Checked and counted in one atomic step: 16 racing extends, exactly MAX_RENEWALS win."""
    from devkit.configs import distlock_settings

    settings.DISTLOCK, settings.CACHES = distlock_settings(kind, redis_url)
    limit(settings, MAX_RENEWALS=5)
    lk = distlock.lock("race", ttl=30)
    lk.acquire()
    outcomes: list[str] = []
    start = threading.Barrier(16)

    def extend() -> None:
        start.wait()
        try:
            lk.extend()
            outcomes.append("extended")
        except RenewalLimitReached:
            outcomes.append("refused")

    threads = [threading.Thread(target=extend) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes).count("extended") == 5
    assert locks["default"].info("race").renewals == 5
    lk.release()
    if kind == "redis":
        record(
            "Lock hogging: MAX_RENEWALS=5, 16 threads extend at once",
            "exactly 5 extends succeeded, 11 raised RenewalLimitReached (counted and "
            "checked in one Lua script); the lock stayed held and was released normally",
        )


def test_auto_renewal_reaching_the_limit_reports_the_lock_lost(
    backend_kind, settings, record
) -> None:
    limit(settings, MAX_RENEWALS=2)
    told = threading.Event()

    def on_lost(lock: distlock.Lock) -> None:
        told.set()

    with lost_locks() as lost:
        lk = distlock.lock("hog", ttl=0.3, auto_renew=True, on_lost=on_lost)
        lk.acquire()
        started = time.monotonic()
        assert told.wait(5), "the holder was never told"
        # two renewals (at ttl/3 each), refused at the third: told while still exclusive
        assert 0.2 < time.monotonic() - started < 2.0
        assert lost.names == ["hog"]
        assert locks["default"].info("hog").renewals == 2
        with pytest.raises(LockLost, match="MAX_RENEWALS"):
            lk.release()
        time.sleep(0.35)
        assert not distlock.lock("hog").locked()  # the lease ran out on its own
    if backend_kind == "redis":
        record(
            "Lock hogging: auto-renewed lock with MAX_RENEWALS=2",
            "refused at the third renewal: the holder was told at once (on_lost, "
            "lock_lost, then LockLost from release()) while still exclusive; the lease then "
            "ran out on its own",
        )
