"""distlock.cache.get_or_set on a real Redis (lock and cache), with threads and processes
(issue 15, acceptance 4).

No outcome here depends on how fast the machine is: callers are ordered by events (a caller
held right after its cache read, a build held until the test lets it finish), and XFetch's
draws come from a stand-in for ``distlock.cache.xfetch_random``.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import pytest
import redis
from django.core.cache import caches
from django_redis.cache import RedisCache

import distlock.cache
from devkit.processes import child_env
from distlock.cache import PerProcessCacheWarning, aget_or_set, get_or_set
from distlock.signals import lock_contended
from tests.support.lock_helpers import read_line, spawner

pytestmark = pytest.mark.django_db(databases=[])
BUILD_SECONDS = 0.2
# XFetch's draws (see Draw): 0 never rebuilds before expiry (-ln(1 - 0) = 0); the largest
# float below 1 gives the earliest rebuild a draw can (-ln(2**-53) = 36.7 build times x beta).
NEVER, EARLIEST = 0.0, math.nextafter(1.0, 0.0)


@pytest.fixture
def data(redis_backend: str) -> redis.Redis:
    """The Redis where builds are counted (the same server as the cache and the locks)."""
    return redis.Redis.from_url(redis_backend)


def counted_build(
    data: redis.Redis, seconds: float = BUILD_SECONDS, value: str = "built"
) -> Callable[[], str]:
    def build() -> str:
        data.incr("builds")
        time.sleep(seconds)
        return value

    return build


def numbered_build(data: redis.Redis) -> Callable[[], str]:
    """A build that returns "v<n>" for its n-th run: which build a caller got is visible."""

    def build() -> str:
        time.sleep(0.01)  # a build time for XFetch to scale (test_an_early_rebuild_...)
        return f"v{data.incr('builds')}"

    return build


def builds(data: redis.Redis) -> int:
    return int(data.get("builds") or 0)


class Draw:
    """Stands in for distlock.cache.xfetch_random: random() returns the chosen value."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


def join_background_rebuilds() -> None:
    """Wait for get_or_set's background rebuild threads (stale values) to end."""
    for thread in threading.enumerate():
        if thread.name.startswith("distlock-cache"):
            thread.join(30)
            assert not thread.is_alive(), "a background rebuild did not end within 30 s"


async def other_tasks_done(*running: asyncio.Task[Any]) -> None:
    """Wait for the loop's other tasks (aget_or_set's background rebuilds) to end."""
    others = asyncio.all_tasks() - {asyncio.current_task(), *running}
    await asyncio.wait_for(asyncio.gather(*others), 30)


def make_stale(key: str, build: Callable[[], Any]) -> None:
    """Cache ``key`` (build 1) fresh for 0.05 s and kept 60 s, then let it go stale."""
    assert get_or_set(key, build, 0.05, stale=60) == "v1"
    time.sleep(0.1)  # at least 0.1 s: its freshness is over, however loaded the machine


# --- a caller descheduled between its cache read and its lock attempt ------------------
class Pause:
    """Holds one caller of (a)get_or_set right after its first cache read until go(): the
    caller read the key, then was descheduled before it tried the rebuild lock."""

    def __init__(self) -> None:
        self.has_read, self._go = threading.Event(), threading.Event()

    def hold(self) -> None:
        if not self.has_read.is_set():  # its first read only, not a read under the lock
            self.has_read.set()
            assert self._go.wait(30), "the paused caller was never resumed"

    def go(self) -> None:
        self._go.set()


# Set by the caller to hold, in its own thread or task: the others read as usual.
PAUSED: ContextVar[Pause | None] = ContextVar("paused", default=None)


@pytest.fixture
def pause(monkeypatch: pytest.MonkeyPatch) -> Pause:
    """A Pause applied by django-redis's get and aget to the caller that set PAUSED."""
    pause = Pause()
    get, aget = RedisCache.get, RedisCache.aget

    def paused_get(self: RedisCache, *args: Any, **kwargs: Any) -> Any:
        entry = get(self, *args, **kwargs)
        if PAUSED.get() is pause:
            pause.hold()
        return entry

    async def paused_aget(self: RedisCache, *args: Any, **kwargs: Any) -> Any:
        # aget runs get in a thread shared by all tasks: the hold must not happen there.
        unpaused = PAUSED.set(None)
        try:
            entry = await aget(self, *args, **kwargs)
        finally:
            PAUSED.reset(unpaused)
        if PAUSED.get() is pause:
            await asyncio.to_thread(pause.hold)
        return entry

    monkeypatch.setattr(RedisCache, "get", paused_get)
    monkeypatch.setattr(RedisCache, "aget", paused_aget)
    return pause


def call_paused(pause: Pause, call: Callable[[], str]) -> str:
    PAUSED.set(pause)  # this thread's context only
    return call()


def test_a_stale_key_is_rebuilt_once_when_a_caller_was_descheduled(data, pause) -> None:
    """A reads the stale key and is held before its lock attempt; B rebuilds the key in the
    background and releases the lock; A then finds the lock free, and must not build."""
    build = numbered_build(data)
    make_stale("k", build)

    def call() -> str:
        return get_or_set("k", build, 60, stale=60)

    with ThreadPoolExecutor(1) as pool:
        a = pool.submit(call_paused, pause, call)
        assert pause.has_read.wait(30)
        assert call() == "v1"  # B: served the stale value, rebuilds behind
        join_background_rebuilds()
        assert builds(data) == 2
        pause.go()
        assert a.result(30) in ("v1", "v2")
    join_background_rebuilds()
    assert builds(data) == 2, "a caller that read the stale key before the rebuild built again"
    assert call() == "v2"


async def test_async_a_stale_key_is_rebuilt_once_when_a_caller_was_descheduled(data, pause) -> None:
    build = numbered_build(data)
    await asyncio.to_thread(make_stale, "ak", build)

    def call() -> Any:
        return aget_or_set("ak", build, 60, stale=60)

    async def paused() -> str:
        PAUSED.set(pause)  # this task's context only
        return await call()

    a = asyncio.create_task(paused())
    assert await asyncio.to_thread(pause.has_read.wait, 30)
    assert await call() == "v1"  # B: served the stale value, rebuilds in a task
    await other_tasks_done(a)
    assert builds(data) == 2
    pause.go()
    assert await a in ("v1", "v2")
    await other_tasks_done()
    assert builds(data) == 2, "a caller that read the stale key before the rebuild built again"
    assert await call() == "v2"


@pytest.mark.parametrize("run", ["sync", "async"])
def test_an_early_rebuild_happens_once_when_a_caller_was_descheduled(
    data, pause, monkeypatch, run
) -> None:
    """Both callers draw an early rebuild (XFetch) of a fresh key; A is held after its read
    while B rebuilds; A then finds the lock free and must return B's value, not build."""
    build = numbered_build(data)
    monkeypatch.setattr(distlock.cache, "xfetch_random", Draw(NEVER))
    assert get_or_set("e", build, 60, early=1000) == "v1"
    # At least 0.01 s of build x 1000 x 36.7: far more than the 60 s of freshness left.
    monkeypatch.setattr(distlock.cache, "xfetch_random", Draw(EARLIEST))

    def call() -> str:
        if run == "sync":
            return get_or_set("e", build, 60, early=1000)
        return asyncio.run(aget_or_set("e", build, 60, early=1000))

    with ThreadPoolExecutor(1) as pool:
        a = pool.submit(call_paused, pause, call)
        assert pause.has_read.wait(30)
        assert call() == "v2"  # B: rebuilt early, synchronously
        pause.go()
        assert a.result(30) == "v2", "the caller held after its read rebuilt the key again"
    assert builds(data) == 2


# --- many callers ----------------------------------------------------------------------
@pytest.fixture
def spawn(redis_backend: str) -> Iterator[Callable[..., Any]]:
    env = child_env(kind="redis", url=redis_backend, data_url=redis_backend)
    with spawner("tests.support.semaphore_workers", env, stdin=True) as start:
        yield start


PROCESSES, THREADS = 10, 40


def test_cold_key_fifty_callers_build_once(spawn, data: redis.Redis) -> None:
    """10 processes and 40 threads ask for a missing key at once: one build, 50 values."""
    workers = [
        spawn("cached", "cold", "0", str(round(BUILD_SECONDS * 1000))) for _ in range(PROCESSES)
    ]
    for process in workers:
        read_line(process, "ready")
    barrier = threading.Barrier(THREADS + 1)
    build = counted_build(data)

    def call() -> str:
        barrier.wait()
        return get_or_set("cold", build, 60, wait=10)

    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(call) for _ in range(THREADS)]
        for process in workers:
            process.stdin.write("go\n")
            process.stdin.flush()
        barrier.wait()
        values = [future.result(timeout=30) for future in futures]
    values += [read_line(process, "value").split()[1] for process in workers]
    assert values == ["built"] * (PROCESSES + THREADS)
    assert int(data.get("builds")) == 1


def test_hot_key_expiring_under_load_builds_once_in_the_background(data: redis.Redis) -> None:
    """A steady load across the key's expiry: one build, in the background, and no caller
    waits for it: the rebuild is held until every caller of the load has returned."""
    timeout = 1.0
    rebuilding, load_over = threading.Event(), threading.Event()
    rebuild_let_go: list[bool] = []

    def build() -> str:
        if data.incr("builds") == 1:
            return "built"
        rebuilding.set()
        # Should a caller wait for this build, the load never ends: after 30 s this build
        # goes on and the test fails below.
        rebuild_let_go.append(load_over.wait(30))
        return "rebuilt"

    assert get_or_set("hot", build, timeout, stale=30) == "built"  # warm: build 1
    served: list[str] = []

    def load() -> None:
        # Until the key expired and its rebuild began, then 20 calls more.
        deadline, after = time.monotonic() + 30, 0
        while after < 20 and time.monotonic() < deadline:
            served.append(get_or_set("hot", build, timeout, stale=30))
            after += rebuilding.is_set()
            time.sleep(0.01)

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    load_over.set()
    join_background_rebuilds()
    assert rebuilding.is_set(), "the key never went stale under the load"
    assert rebuild_let_go == [True], "a caller waited for the background build"
    assert set(served) == {"built"} and len(served) >= 8 * 20
    assert int(data.get("builds")) == 2, "the expired key was built more than once"
    assert get_or_set("hot", build, timeout, stale=30) == "rebuilt"
    join_background_rebuilds()  # "rebuilt" may be stale already on a loaded machine


@contextmanager
def contention(name_part: str) -> Iterator[threading.Event]:
    """An event set once a caller finds a lock whose name contains ``name_part`` held (it
    goes on to wait in the lock's queue)."""
    seen = threading.Event()

    def receiver(sender: Any, name: str, **kwargs: Any) -> None:
        if name_part in name:
            seen.set()

    lock_contended.connect(receiver)
    try:
        yield seen
    finally:
        lock_contended.disconnect(receiver)


def test_a_missing_key_waits_for_the_builder_then_reads(data: redis.Redis) -> None:
    building, finish = threading.Event(), threading.Event()

    def first_build() -> str:
        data.incr("builds")
        building.set()
        assert finish.wait(30)
        return "built"

    with contention(":k") as waiting, ThreadPoolExecutor(2) as pool:
        first = pool.submit(get_or_set, "k", first_build, 60)
        assert building.wait(30)
        second = pool.submit(get_or_set, "k", counted_build(data, 0, "second"), 60)
        assert waiting.wait(30)  # the second caller found the builder's lock held
        finish.set()
        assert (first.result(30), second.result(30)) == ("built", "built")
    assert int(data.get("builds")) == 1


def test_a_caller_that_waited_in_vain_builds_itself(data: redis.Redis) -> None:
    building, finish = threading.Event(), threading.Event()

    def slow_build() -> str:
        building.set()
        assert finish.wait(30)
        return "slow"

    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(get_or_set, "slow", slow_build, 60)
        assert building.wait(30)
        assert get_or_set("slow", counted_build(data, 0, "mine"), 60, wait=0.2) == "mine"
        finish.set()
        assert slow.result(30) == "slow"


# --- XFetch ----------------------------------------------------------------------------
def test_early_rebuild_xfetch_runs_before_expiry(redis_backend, monkeypatch) -> None:
    calls = []

    def build() -> int:
        calls.append(1)
        time.sleep(0.05)
        return len(calls)

    monkeypatch.setattr(distlock.cache, "xfetch_random", Draw(NEVER))
    assert get_or_set("early", build, 60, early=50) == 1
    assert get_or_set("early", build, 60, early=50) == 1  # the lowest draw: fresh, no rebuild
    monkeypatch.setattr(distlock.cache, "xfetch_random", Draw(EARLIEST))
    # At least 0.05 s of build x beta 50 x 36.7 = 92 s, more than the 60 s left: rebuilt.
    assert get_or_set("early", build, 60, early=50) == 2
    assert get_or_set("early", build, 60, early=0) == 2  # beta 0: no early rebuild


# --- what the cache holds ---------------------------------------------------------------
def test_entries_of_another_shape_are_rebuilt(redis_backend) -> None:
    caches["default"].set("foreign", "written by someone else")
    assert get_or_set("foreign", lambda: "mine", 60) == "mine"


def test_async_cold_key_many_tasks_build_once(data: redis.Redis) -> None:
    async def build() -> str:
        data.incr("builds")
        await asyncio.sleep(BUILD_SECONDS)
        return "built"

    async def main() -> list[str]:
        return await asyncio.gather(*(aget_or_set("acold", build, 60, wait=10) for _ in range(20)))

    assert asyncio.run(main()) == ["built"] * 20
    assert int(data.get("builds")) == 1


def test_async_stale_value_is_served_while_a_task_rebuilds(data: redis.Redis) -> None:
    """10 calls on a stale key all get the old value while the rebuild task is held: none
    waits for it (a caller that did would never return, and wait_for would time out)."""

    async def main() -> list[str]:
        values = iter(["old", "new"])
        let_go = asyncio.Event()

        async def build() -> str:
            value = next(values)
            if data.incr("builds") > 1:
                await let_go.wait()
            return value

        assert await aget_or_set("astale", build, 0.05, stale=30) == "old"
        await asyncio.sleep(0.1)  # at least: past its freshness
        served = await asyncio.wait_for(
            asyncio.gather(*(aget_or_set("astale", build, 60, stale=30) for _ in range(10))), 30
        )
        let_go.set()
        await other_tasks_done()
        return [*served, await aget_or_set("astale", build, 60, stale=30)]

    assert asyncio.run(main()) == ["old"] * 10 + ["new"]
    assert int(data.get("builds")) == 2


# --- caches each process keeps to itself ------------------------------------------------
def test_a_per_process_cache_warns_once_per_alias(redis_backend, settings) -> None:
    local, dummy = f"local-{uuid.uuid4().hex}", f"dummy-{uuid.uuid4().hex}"
    settings.CACHES = {
        **settings.CACHES,
        local: {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": local},
        dummy: {"BACKEND": "django.core.cache.backends.dummy.DummyCache"},
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert get_or_set("w", lambda: 1, 60, cache=local) == 1
        assert get_or_set("w", lambda: 2, 60, cache=local) == 1  # kept, in this process
        assert asyncio.run(aget_or_set("w", lambda: 3, 60, cache=local)) == 1
        assert get_or_set("w", lambda: 4, 60, cache=dummy) == 4
        assert get_or_set("w", lambda: 5, 60, cache=dummy) == 5  # kept nothing: built again
    assert [warning.category for warning in caught] == [PerProcessCacheWarning] * 2
    assert issubclass(PerProcessCacheWarning, RuntimeWarning)
    first, second = (str(warning.message) for warning in caught)
    assert f"{local!r} (LocMemCache)" in first and "each process" in first
    assert f"{dummy!r} (DummyCache)" in second and "every call builds" in second
    assert all("shared cache (Redis, Memcached" in message for message in (first, second))
    assert caught[0].filename == __file__  # points at the caller


def test_a_redis_cache_does_not_warn(redis_backend) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert get_or_set("quiet", lambda: 1, 60) == 1
        assert asyncio.run(aget_or_set("quiet", lambda: 2, 60)) == 1


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"timeout": 0}, ValueError),
        ({"stale": -1}, ValueError),
        ({"wait": "1"}, TypeError),
        ({"lock_ttl": None}, TypeError),
        ({"key": ""}, TypeError),
        ({"build": 3}, TypeError),
        ({"stail": 5}, TypeError),
    ],
)
def test_bad_arguments(arguments: dict, error: type) -> None:
    call = {"key": "k", "build": lambda: 1, "timeout": 5, **arguments}
    with pytest.raises(error):
        get_or_set(call.pop("key"), call.pop("build"), call.pop("timeout"), **call)
