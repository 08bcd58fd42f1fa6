"""distlock.cache.get_or_set on a real Redis (lock and cache), with threads and processes
(issue 15, acceptance 4)."""
from __future__ import annotations

import asyncio
import math
import os
import statistics
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from django.core.cache import caches

import distlock.cache
from distlock.cache import PerProcessCacheWarning, aget_or_set, get_or_set
from tests.lock_helpers import read_line, spawner

pytestmark = pytest.mark.django_db(databases=[])
BUILD_SECONDS = 0.2
# XFetch's draws (see Draw): 0 never rebuilds before expiry (-ln(1 - 0) = 0); the largest
# float below 1 gives the earliest rebuild a draw can (-ln(2**-53) = 36.7 build times x beta).
NEVER, EARLIEST = 0.0, math.nextafter(1.0, 0.0)


@pytest.fixture
def data(redis_backend: str) -> redis.Redis:
    """The Redis where builds are counted (the same server as the cache and the locks)."""
    return redis.Redis.from_url(redis_backend)


def counted_build(data: redis.Redis, seconds: float = BUILD_SECONDS,
                  value: str = "built") -> Callable[[], str]:
    def build() -> str:
        data.incr("builds")
        time.sleep(seconds)
        return value

    return build


class Draw:
    """Stands in for distlock.cache.xfetch_random: random() returns the chosen value."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.fixture
def spawn(redis_backend: str) -> Iterator[Callable[..., Any]]:
    env = {**os.environ, "DISTLOCK_TEST_KIND": "redis", "DISTLOCK_TEST_URL": redis_backend,
           "DISTLOCK_TEST_DATA_URL": redis_backend}
    with spawner("tests.semaphore_workers", env, stdin=True) as start:
        yield start


PROCESSES, THREADS = 10, 40


def test_cold_key_fifty_callers_build_once(spawn, data: redis.Redis) -> None:
    """10 processes and 40 threads ask for a missing key at once: one build, 50 values."""
    workers = [spawn("cached", "cold", "0", str(round(BUILD_SECONDS * 1000)))
               for _ in range(PROCESSES)]
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
    """A steady load across the key's expiry: one build, and no caller waits for it."""
    timeout, build_seconds = 1.0, 0.3
    build = counted_build(data, build_seconds)
    assert get_or_set("hot", build, timeout, stale=30) == "built"  # warm: build 1
    stop = time.monotonic() + timeout + 1.0  # the load runs past the expiry
    durations: list[float] = []

    def load() -> None:
        while time.monotonic() < stop:
            started = time.monotonic()
            assert get_or_set("hot", build, timeout, stale=30) == "built"
            durations.append(time.monotonic() - started)
            time.sleep(0.01)

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert int(data.get("builds")) == 2, "the expired key was built more than once"
    assert max(durations) < build_seconds, f"a caller waited: {max(durations):.3f}s"
    assert len(durations) > 100 and statistics.median(durations) < 0.05


def test_a_missing_key_waits_for_the_builder_then_reads(data: redis.Redis) -> None:
    build = counted_build(data)
    results: list[str] = []
    first = threading.Thread(target=lambda: results.append(get_or_set("k", build, 60)))
    first.start()
    time.sleep(0.05)
    started = time.monotonic()
    assert get_or_set("k", counted_build(data, value="second"), 60) == "built"
    assert time.monotonic() - started < BUILD_SECONDS + 0.2
    first.join()
    assert results == ["built"] and int(data.get("builds")) == 1


def test_a_caller_that_waited_in_vain_builds_itself(data: redis.Redis) -> None:
    slow = threading.Thread(target=get_or_set, args=("slow", counted_build(data, 1.0), 60))
    slow.start()
    time.sleep(0.1)
    assert get_or_set("slow", counted_build(data, 0, "mine"), 60, wait=0.2) == "mine"
    slow.join()


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


def test_entries_of_another_shape_are_rebuilt(redis_backend) -> None:
    caches["default"].set("foreign", "written by someone else")
    assert get_or_set("foreign", lambda: "mine", 60) == "mine"


def test_async_cold_key_many_tasks_build_once(data: redis.Redis) -> None:
    async def build() -> str:
        data.incr("builds")
        await asyncio.sleep(BUILD_SECONDS)
        return "built"

    async def main() -> list[str]:
        return await asyncio.gather(*(aget_or_set("acold", build, 60, wait=10)
                                      for _ in range(20)))

    assert asyncio.run(main()) == ["built"] * 20
    assert int(data.get("builds")) == 1


def test_async_stale_value_is_served_while_a_task_rebuilds(data: redis.Redis) -> None:
    async def main() -> tuple[list[str], float]:
        values = iter(["old", "new"])

        async def build() -> str:
            data.incr("builds")
            await asyncio.sleep(0.3)
            return next(values)

        assert await aget_or_set("astale", build, 1, stale=30) == "old"
        await asyncio.sleep(1.1)  # past its freshness
        started = time.monotonic()
        served = await asyncio.gather(*(aget_or_set("astale", build, 1, stale=30)
                                        for _ in range(10)))
        took = time.monotonic() - started
        await asyncio.sleep(0.5)  # the rebuild task finishes; "new" is fresh for 1 s
        return [*served, await aget_or_set("astale", build, 1, stale=30)], took

    values, took = asyncio.run(main())
    assert values == ["old"] * 10 + ["new"] and took < 0.3
    assert int(data.get("builds")) == 2


# --- caches each process keeps to itself ------------------------------------------------
def test_a_per_process_cache_warns_once_per_alias(redis_backend, settings) -> None:
    local, dummy = f"local-{uuid.uuid4().hex}", f"dummy-{uuid.uuid4().hex}"
    settings.CACHES = {
        **settings.CACHES,
        local: {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                "LOCATION": local},
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


@pytest.mark.parametrize(("arguments", "error"), [
    ({"timeout": 0}, ValueError), ({"stale": -1}, ValueError), ({"wait": "1"}, TypeError),
    ({"lock_ttl": None}, TypeError), ({"key": ""}, TypeError), ({"build": 3}, TypeError),
    ({"stail": 5}, TypeError),
])
def test_bad_arguments(arguments: dict, error: type) -> None:
    call = {"key": "k", "build": lambda: 1, "timeout": 5, **arguments}
    with pytest.raises(error):
        get_or_set(call.pop("key"), call.pop("build"), call.pop("timeout"), **call)
