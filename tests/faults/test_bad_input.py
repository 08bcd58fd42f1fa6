"""Hostile values at every public entry point get a clear, specific error (never a crash
deep inside, never a silent misreading)."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest

import distlock
from distlock import InvalidLockName, LockNotOwned
from distlock.handler import locks
from distlock.validation import MAX_LEASE_SECONDS
from tests.faults.helpers import check_errors

pytestmark = pytest.mark.django_db(databases=[])

# (value, the error it must raise) for a number of seconds that must be > 0.
BAD_TTLS = [
    (0, ValueError),
    (-1, ValueError),
    (math.nan, ValueError),
    (math.inf, ValueError),
    (-math.inf, ValueError),
    (0.0001, ValueError),
    (MAX_LEASE_SECONDS + 1, ValueError),
    (1e300, ValueError),
    (True, TypeError),
    (False, TypeError),
    ("5", TypeError),
    (b"5", TypeError),
    ([], TypeError),
    (Decimal("5"), TypeError),
]
# wait may be 0 (try once) or None (wait until acquired).
BAD_WAITS = [(v, e) for v, e in BAD_TTLS if v not in (0, 0.0001, MAX_LEASE_SECONDS + 1, 1e300)]


# --- ttl and wait ---------------------------------------------------------------------
@pytest.mark.parametrize(("value", "error"), BAD_WAITS)
def test_acquire_rejects_a_bad_wait_before_touching_the_server(backend_kind, value, error):
    lk = distlock.lock("w")
    with pytest.raises(error, match="wait"):
        lk.acquire(wait=value)
    assert lk.token is None and not lk.locked()


@pytest.mark.parametrize(("value", "error"), BAD_TTLS)
def test_extend_rejects_a_bad_ttl_and_leaves_the_lease_alone(backend_kind, value, error):
    lk = distlock.lock("e", ttl=30)
    lk.acquire()
    with pytest.raises(error, match="ttl"):
        lk.extend(ttl=value)
    assert lk.owned() and 25 < lk.ttl_remaining() <= 30
    lk.release()


@pytest.mark.parametrize(("value", "error"), BAD_TTLS)
async def test_async_entry_points_reject_the_same_values(backend_kind, value, error):
    lk = distlock.lock("a", ttl=30)
    assert await lk.aacquire()
    with pytest.raises(error, match="ttl"):
        await lk.aextend(ttl=value)
    if (value, error) in BAD_WAITS:
        with pytest.raises(error, match="wait"):
            await distlock.lock("b").aacquire(wait=value)
    await lk.arelease()


def test_a_lease_longer_than_ten_years_is_refused_everywhere(backend_kind, settings) -> None:
    # Bug found by this suite: ttl=1e12 was accepted, and its end did not fit a datetime, so
    # held() raised OverflowError for every operator; larger values were refused by Redis and
    # reported as "Redis did not answer" (BackendUnavailable).
    with pytest.raises(ValueError, match="at most"):
        distlock.lock("forever", ttl=1e12)
    settings.DISTLOCK = {"default": {**settings.DISTLOCK["default"], "TIMEOUT": 1e12}}
    with pytest.raises(distlock.InvalidLockBackendError, match="TIMEOUT"):
        distlock.lock("forever").acquire()
    settings.DISTLOCK = {"default": {**settings.DISTLOCK["default"], "TIMEOUT": 60}}
    lk = distlock.lock("ten-years", ttl=MAX_LEASE_SECONDS)
    assert lk.acquire()
    [info] = locks["default"].held()
    assert info.name == "ten-years" and info.expires_at.year >= info.acquired_at.year + 9
    lk.release()


# --- operator API: info, force_release, held, count -------------------------------------
BAD_NAMES = [
    ("", InvalidLockName),
    ("x" * 10240, InvalidLockName),
    ("a\x00b", InvalidLockName),
    ("line\nbreak", InvalidLockName),
    ("\x1b[31mred", InvalidLockName),
    (None, TypeError),
    (5, TypeError),
    (b"bytes", TypeError),
]
# Valid names that look like wildcards, hash tags, percent-escapes or distlock's own keys:
# each must name one lock of its own.
TRICKY_NAMES = [
    "*",
    "?",
    "[ab]",
    "{}",
    "{b00}",
    "%2A",
    "a:{b01}:lock:x",
    "test:{b03}:held",
    "ключ 🔒",
    " ",
    "\\",
    "'; DROP TABLE x; --",
]


@pytest.mark.parametrize(("name", "error"), BAD_NAMES)
def test_every_entry_point_rejects_a_bad_name(backend_kind, name, error) -> None:
    # Before: info(None) raised AttributeError from deep inside, info("") answered None.
    backend = locks["default"]
    for call in (
        lambda: distlock.lock(name),
        lambda: backend.info(name),
        lambda: backend.force_release(name),
    ):
        with pytest.raises(error):
            call()


@pytest.mark.parametrize(("name", "error"), BAD_NAMES)
async def test_async_entry_points_reject_a_bad_name(backend_kind, name, error) -> None:
    backend = locks["default"]
    with pytest.raises(error):
        await backend.ainfo(name)
    with pytest.raises(error):
        await backend.aforce_release(name)


def test_an_empty_token_never_releases_someone_elses_lock(backend_kind) -> None:
    # Bug found by this suite: force_release(name, token="") released whoever held the lock
    # (an empty form field read as "no token"). Only token=None means "whoever holds it".
    backend = locks["default"]
    holder = distlock.lock("mine", ttl=30)
    holder.acquire()
    with pytest.raises(ValueError, match="empty string"):
        backend.force_release("mine", token="")
    with pytest.raises(TypeError, match="token"):
        backend.force_release("mine", token=holder.fencing_token)
    assert backend.force_release("mine", token="0" * 32) is False  # a stale or made-up token
    # No holder's token has a space or starts with "=" (docs/protocol.md, "Tokens"): such a
    # token is never sent, whatever the script would read it as.
    for token in (f"{holder.token} {holder.fencing_token}", f"={holder.token}"):
        assert backend.force_release("mine", token=token) is False
    assert backend.force_release("unknown-name") is False
    assert backend.info("unknown-name") is None
    assert holder.owned()
    assert backend.force_release("mine", token=holder.token) is True
    with pytest.raises(LockNotOwned):
        holder.release()


def test_stale_token_of_an_earlier_holder_does_not_release_the_current_one(backend_kind):
    backend = locks["default"]
    first = distlock.lock("turns", ttl=30)
    first.acquire()
    stale = first.token
    first.release()
    second = distlock.lock("turns", ttl=30)
    second.acquire()
    assert backend.force_release("turns", token=stale) is False
    assert second.owned()
    second.release()


@pytest.mark.parametrize("prefix", [None, 5, b"a", ["a"]])
def test_listing_rejects_a_prefix_that_is_not_text(backend_kind, prefix) -> None:
    # Before: held(prefix=None) and count(None) silently answered [] and 0.
    backend = locks["default"]
    with pytest.raises(TypeError, match="prefix"):
        backend.held(prefix=prefix)
    with pytest.raises(TypeError, match="prefix"):
        backend.count(prefix)


@pytest.mark.parametrize(
    ("limit", "offset", "error"),
    [
        ("3", 0, TypeError),
        (0, 0, ValueError),
        (-1, 0, ValueError),
        (True, 0, TypeError),
        (10, -1, ValueError),
        (10, 1.5, TypeError),
        (10, None, TypeError),
    ],
)
def test_listing_rejects_bad_pages(backend_kind, limit, offset, error) -> None:
    with pytest.raises(error):
        locks["default"].held(limit=limit, offset=offset)


def test_tricky_names_are_separate_locks_and_prefixes_are_not_patterns(backend_kind) -> None:
    backend = locks["default"]
    held = [distlock.lock(name, ttl=30) for name in TRICKY_NAMES]
    for lk in held:
        assert lk.acquire(wait=0), f"{lk.name!r} collided with another name"
    assert sorted(info.name for info in backend.held(limit=1000)) == sorted(TRICKY_NAMES)
    assert [info.name for info in backend.held(prefix="*")] == ["*"]  # not a wildcard
    assert [info.name for info in backend.held(prefix="[")] == ["[ab]"]
    assert backend.count("{") == 2
    for lk in held:
        assert backend.info(lk.name).token == lk.token
        assert backend.force_release(lk.name, token=lk.token)
    assert backend.count() == 0


# --- settings -------------------------------------------------------------------------
REDIS = "distlock.backends.redis.RedisBackend"


@pytest.mark.parametrize(
    "location",
    [
        " redis://127.0.0.1:6379/0",
        "redis://127.0.0.1:6379/0\n",
        "redis://h:6379/0 ",
        "redis://127.0.0.1:6379/notadb",
        "redis://127.0.0.1:6379/0/1",
        "rediss://h/-1",
    ],
)
def test_malformed_location_is_e005_at_check_time(location) -> None:
    # Before: a database that is not a number was ignored by redis-py (database 0 was used),
    # and surrounding whitespace passed the check but failed in the client, blamed on OPTIONS.
    [error] = check_errors({"BACKEND": REDIS, "LOCATION": location})
    assert error.id == "distlock.E005" and "LOCATION" in error.msg and error.hint


@pytest.mark.parametrize(
    "options",
    [
        {"socket_timeout": math.nan},
        {"socket_timeout": math.inf},
        {"socket_connect_timeout": -math.inf},
        {"CLUSTER": "yes"},
        {"CLUSTER": 1},
        {"SENTINELS": "10.0.0.1:26379"},
        {"SENTINELS": []},
        {"SENTINELS": [("h",)]},
        {"SENTINELS": [("h", "26379")]},
        {"SENTINELS": [("h", 26379)], "SENTINEL_KWARGS": "pw"},
    ],
)
def test_wrong_option_types_are_e006_at_check_time(options) -> None:
    # Before: socket_timeout=nan or inf passed the check, then the first lock raised ValueError
    # or OverflowError; CLUSTER='yes' crashed `manage.py check` (it tried to connect).
    [error] = check_errors({"BACKEND": REDIS, "LOCATION": "redis://h:6379/0", "OPTIONS": options})
    assert error.id == "distlock.E006" and error.hint


@pytest.mark.parametrize(
    "backend",
    ["", "distlock", "distlock.lock.Lock", "os.path.join", "distlock.backends.redis.RedisBackend "],
)
def test_unknown_backend_is_e004(backend) -> None:
    [error] = check_errors({"BACKEND": backend, "LOCATION": "redis://h:6379/0"})
    assert error.id == "distlock.E004" and error.hint


def test_cluster_option_is_checked_without_connecting_and_fails_closed(settings) -> None:
    # Before: `manage.py check` built a RedisCluster client, which connects: with the cluster
    # unreachable the check crashed with RedisClusterException, and so did every acquire
    # (instead of BackendUnavailable).
    from devkit.redis_server import free_port

    config = {
        "BACKEND": REDIS,
        "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
        "OPTIONS": {"CLUSTER": True, "socket_connect_timeout": 0.5},
    }
    assert check_errors(config) == []
    settings.DISTLOCK = {"default": config}
    with pytest.raises(distlock.BackendUnavailable, match="did not answer"):
        distlock.lock("x", wait=0).acquire()
