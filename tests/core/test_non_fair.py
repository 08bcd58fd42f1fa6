"""Non-fair locks (fair=False): a free lock goes to whoever asks first, waiters may be
overtaken but are still woken by the release, and mutual exclusion holds whatever the mix of
modes (CONTRACT "Fair and non-fair locks"). The exclusive contract in this mode: the
"-non-fair" rows of test_contract.py."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from django.test import override_settings

import distlock
from devkit.processes import child_env
from distlock import LockError
from distlock.backends.operations import Request
from distlock.info import holder_metadata
from distlock.tokens import NON_FAIR_MARK, SHARED_MARK, new_token
from distlock.views.decorators import ViewLock, ViewLockOptions
from tests.support.lock_helpers import assert_counted_exactly, spawner

pytestmark = pytest.mark.django_db(databases=[])
WAITER = "0123456789abcdef0123456789abcdef"


def register_waiter(name: str) -> Request:
    """Queue a waiter for ``name`` that is not blocked right now (as between two of its
    attempts), through the backend's operations; return its request."""
    request = Request(name, WAITER, 10_000, holder_metadata("waiter"), 10_000)
    assert not distlock.locks["default"].exclusive.try_acquire(request).acquired
    return request


@pytest.mark.parametrize("fair", [True, False])
def test_a_newcomer_overtakes_a_queued_waiter_only_when_non_fair(
    non_fair_backend: str, fair: bool
) -> None:
    backend = distlock.locks["default"]
    holder = distlock.lock("report", ttl=10, fair=fair)
    assert holder.acquire()
    waiter = register_waiter("report")
    holder.release()
    newcomer = distlock.lock("report", ttl=10, wait=0, fair=fair)
    assert newcomer.acquire() is not fair
    if not fair:
        assert backend.info("report").waiters == 1  # the waiter keeps its place
        newcomer.release()
    assert backend.exclusive.try_acquire(waiter).acquired  # then its turn comes


def test_a_non_fair_release_wakes_the_longest_waiter_without_handing_it_the_lock(
    redis_backend: str, redis_url: str
) -> None:
    backend = distlock.locks["default"]
    client = redis.Redis.from_url(redis_url)
    holder = distlock.lock("report", ttl=60, fair=False)
    assert holder.acquire()
    waiter = register_waiter("report")
    wake = backend.layout.keys_for("report").waiters + ":" + WAITER
    assert client.llen(wake) == 0
    holder.release()
    assert client.llen(wake) == 1  # its BLPOP returns: notified, not polling
    assert not backend.locked("report")  # free for whoever asks first: not reserved
    newcomer = distlock.lock("report", ttl=60, fair=False)
    assert newcomer.acquire()  # overtakes it before it came back
    newcomer.release()
    assert client.llen(wake) == 1  # woken once: overtaken again, it does not spin
    assert (
        backend.info("report") is None
        and client.exists(backend.layout.keys_for("report").lock) == 0
    )
    assert backend.exclusive.try_acquire(waiter._replace(patience_ms=0)).acquired


@pytest.mark.parametrize("second", ["non-fair", "fair", "shared"])
def test_a_woken_waiter_that_gives_up_wakes_the_next_one(
    redis_backend: str, redis_url: str, second: str
) -> None:
    """docs/protocol.md, "Non-fair locks": the head a non-fair release woke (not handed the
    lock) gives up before its acquire, by the error path (release.lua, then leave_queue.lua).
    Its leave wakes the next waiter, whose BLPOP returns at once; before, it slept on the free
    lock until its BLPOP's timeout (up to MAX_BLOCK, or the 250 ms grace)."""
    backend = distlock.locks["default"]
    client = redis.Redis.from_url(redis_url)
    holder = distlock.lock("report", ttl=60, fair=False)
    assert holder.acquire()
    meta = holder_metadata("waiter")
    first = Request("report", NON_FAIR_MARK + new_token(), 10_000, meta, 10_000)
    mark = {"non-fair": NON_FAIR_MARK, "fair": "", "shared": SHARED_MARK}[second]
    then = Request("report", mark + new_token(), 10_000, meta, 10_000)
    kind = backend.shared if second == "shared" else backend.exclusive
    assert not backend.exclusive.try_acquire(first).acquired  # queued, blocked on its list
    assert not kind.try_acquire(then).acquired  # queued behind it
    waiters = backend.layout.keys_for("report").waiters
    holder.release()
    assert client.llen(f"{waiters}:{first.token}") == 1  # woken, the lock not reserved
    assert client.llen(f"{waiters}:{then.token}") == 0
    # Its BLPOP returned; its caller cancels before its acquire: the error path.
    assert backend.exclusive.release("report", first.token) == 0
    backend.exclusive.leave("report", first.token)
    assert client.llen(f"{waiters}:{then.token}") == 1  # woken: its BLPOP returns now
    assert kind.try_acquire(then._replace(patience_ms=0)).acquired


def test_an_in_memory_waiter_is_woken_by_a_non_fair_release(settings: Any) -> None:
    settings.DISTLOCK = {"default": {"BACKEND": "distlock.backends.locmem.LocMemBackend"}}
    distlock.locks.reset()
    holder = distlock.lock("report", ttl=60, fair=False)
    assert holder.acquire()
    waiter = register_waiter("report")
    woke: list[float] = []
    blocked = threading.Thread(
        target=lambda: (
            distlock.locks["default"].exclusive.wait_turn(waiter, 60),
            woke.append(time.monotonic()),
        )
    )
    blocked.start()
    time.sleep(0.05)
    released = time.monotonic()
    holder.release()
    blocked.join(60)
    assert woke and woke[0] - released < 30  # the release woke it, long before its timeout


def test_mixed_fair_and_non_fair_processes_lose_no_update(redis_url: str) -> None:
    env = child_env(kind="redis", url=redis_url, data_url=redis_url)
    with spawner("tests.support.workers", env) as spawn:
        workers = [spawn("counter", "mixed", "150", mode) for mode in ("non-fair", "", "non-fair")]
        assert_counted_exactly(workers, redis_url, 3 * 150)


def test_the_alias_setting_is_the_default_and_a_lock_may_override_it(
    redis_backend: str, settings: Any
) -> None:
    settings.DISTLOCK["default"]["OPTIONS"]["FAIR"] = False
    distlock.locks.reset()
    holder = distlock.lock("report", ttl=10)
    assert holder.fair is None and holder.copy().fair is None
    assert holder.acquire() and holder.token.startswith("!")  # the alias's: non-fair
    waiter = register_waiter("report")
    holder.release()
    newcomer = distlock.lock("report", ttl=10, wait=0)
    assert newcomer.acquire()  # the alias's mode: it overtakes the waiter
    newcomer.release()
    fair = distlock.lock("report", ttl=10, wait=0, fair=True)
    assert fair.acquire() is False  # a fair newcomer queues behind the waiter
    assert distlock.locks["default"].exclusive.try_acquire(waiter).acquired
    assert distlock.lock("report", fair=False).copy().fair is False


@pytest.mark.parametrize("fair", ["yes", 1, 0.0])
def test_fair_must_be_a_bool_or_none(fair: Any) -> None:
    with pytest.raises(TypeError, match="fair must be True, False or None"):
        distlock.lock("report", fair=fair)
    with pytest.raises(TypeError, match="fair must be True, False or None"):
        distlock.lock_view("report", fair=fair)


def test_shared_locks_and_view_semaphores_refuse_non_fair() -> None:
    with pytest.raises(ValueError, match="exclusive locks"):
        distlock.lock("report", shared=True, fair=False)
    with pytest.raises(ValueError, match="drop limit"):
        distlock.lock_view("report", limit=2, fair=False)
    assert distlock.lock("report", shared=True, fair=True).fair is True


def test_lock_view_makes_non_fair_locks(settings: Any) -> None:
    options = ViewLockOptions(
        "report",
        ttl=None,
        wait=0,
        methods=("POST",),
        using="default",
        on_locked=None,
        fail_open=False,
        fair=False,
    )
    assert ViewLock(options, "app.views.report").lock_for("report").fair is False


def test_redlock_says_it_has_no_non_fair_mode() -> None:
    nodes = [f"redis://127.0.0.1:{port}/0" for port in (1, 2, 3)]
    alias = {"BACKEND": "distlock.backends.redlock.RedlockBackend", "LOCATION": nodes}
    with override_settings(DISTLOCK={"default": alias}):
        distlock.locks.reset()
        with pytest.raises(LockError, match=r"no non-fair mode.*RedisBackend"):
            distlock.lock("report", fair=False, wait=0).acquire()
    distlock.locks.reset()
