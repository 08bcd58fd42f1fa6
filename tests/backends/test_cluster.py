"""RedisBackend on a real three-master Redis Cluster (the contract suite runs on it too)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from django.test import override_settings

import distlock
from devkit.configs import distlock_settings
from devkit.redis_server import RedisCluster
from distlock import BackendUnavailable
from distlock.checks import check_settings
from distlock.handler import locks

pytestmark = pytest.mark.django_db(databases=[])
REDIS = "distlock.backends.redis.RedisBackend"


@pytest.fixture
def cluster(settings: Any, redis_cluster: RedisCluster) -> RedisCluster:
    for node in redis_cluster.nodes:
        node.flushall()
        with node.client() as client:
            client.config_resetstat()  # zero the error counters
    settings.DISTLOCK = distlock_settings("cluster", redis_cluster.urls[0])[0]
    locks.reset()
    return redis_cluster


def random_name(rng: random.Random) -> str:
    alphabet = "abc:/{}*?[] é€ключ%-_.0123456789"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))


def cross_slot_errors(cluster: RedisCluster) -> int:
    total = 0
    for node in cluster.nodes:
        with node.client() as client:
            stats = client.info("errorstats")
        total += int(stats.get("errorstat_CROSSSLOT", {}).get("count", 0))
    return total


def test_a_thousand_random_names_never_cross_slots(cluster: RedisCluster) -> None:
    rng = random.Random(6)
    names = sorted({random_name(rng) for _ in range(1200)})[:1000]
    assert len(names) == 1000
    held = [distlock.lock(name, ttl=30) for name in names]
    for lk in held:
        assert lk.acquire(wait=0), lk.name
        lk.extend(ttl=60)
    backend = locks["default"]
    assert backend.count() == 1000
    listed = []
    for offset in range(0, 1000, 250):
        listed += [info.name for info in backend.held(limit=250, offset=offset)]
    assert listed == names
    assert {info.token for info in backend.held(limit=1000)} == {lk.token for lk in held}
    per_node = []
    for node in cluster.nodes:  # the locks really are spread over every master
        with node.client() as client:
            per_node.append(len(client.keys("test:*:lock:*")))
    assert sum(per_node) == 1000 and all(per_node)
    for lk in held:
        lk.release()
    assert backend.held() == [] and backend.count() == 0
    assert cross_slot_errors(cluster) == 0


async def test_async_locks_on_random_names(cluster: RedisCluster) -> None:
    rng = random.Random(7)
    for _ in range(50):
        async with distlock.lock(random_name(rng), ttl=5) as lk:
            await lk.aextend()
            assert await lk.aowned()
    assert cross_slot_errors(cluster) == 0


def test_wait_replicas_without_replicas_fails_closed(settings: Any, cluster: RedisCluster) -> None:
    config = settings.DISTLOCK["default"]
    options = {**config["OPTIONS"], "WAIT_REPLICAS": 1, "WAIT_TIMEOUT": 50}
    settings.DISTLOCK = {"default": {**config, "OPTIONS": options}}
    locks.reset()
    lk = distlock.lock("confirmed", ttl=30)
    with pytest.raises(BackendUnavailable, match="Only 0 of the 1 replicas"):
        lk.acquire(wait=0)
    assert lk.token is None
    for node in cluster.nodes:
        with node.client() as client:
            assert client.keys("test:*:lock:*") == []


def check(options: dict[str, Any], location: str = "redis://10.0.0.1:7000") -> list[Any]:
    with override_settings(
        DISTLOCK={"default": {"BACKEND": REDIS, "LOCATION": location, "OPTIONS": options}}
    ):
        return check_settings()


def test_cluster_settings_are_checked_without_connecting() -> None:
    confirmed = {"WAIT_REPLICAS": 1, "WAIT_TIMEOUT": 100}
    # nothing listens on 10.0.0.1: nothing is asked
    assert check({"CLUSTER": True, **confirmed}) == []
    assert (
        check({"CLUSTER": True, "read_from_replicas": False, "socket_timeout": 1, **confirmed})
        == []
    )
    [warning] = check({"CLUSTER": True})  # see tests/core/test_checks.py
    assert warning.id == "distlock.W002"
    for options, check_id in [
        ({"CLUSTER": "yes"}, "distlock.E006"),
        ({"CLUSTER": True, "SENTINELS": [("h", 26379)]}, "distlock.E006"),
        ({"CLUSTER": True, "no_such_option": 1}, "distlock.E006"),
        ({"CLUSTER": True, "WAIT_REPLICAS": -1}, "distlock.E006"),
    ]:
        [error] = [message for message in check(options) if message.is_serious()]
        assert error.id == check_id and error.hint, options
    [error] = check({"CLUSTER": True, **confirmed}, "redis://10.0.0.1:7000/3")
    assert error.id == "distlock.E005" and "only has database 0" in error.msg
    [error] = check({"CLUSTER": True, **confirmed}, "unix:///run/redis.sock")
    assert error.id == "distlock.E005" and "unix socket" in error.msg


def test_the_pair_runs_again_after_every_master_forgot_its_scripts(cluster: RedisCluster) -> None:
    """EVALSHA goes through execute_command (issue 42), routed by its keys; NOSCRIPT after a
    SCRIPT FLUSH still falls back to EVAL, sync and async, on whichever master holds the name."""
    import asyncio

    names = [f"flushed:{n}" for n in range(12)]  # spread over the masters' slots
    for name in names:
        with distlock.lock(name, ttl=5):
            pass

    async def pairs() -> list[bool]:
        held = []
        for name in names:
            async with distlock.lock(name, ttl=5) as lk:
                held.append(lk.token is not None)
        return held

    for flush_before in ("sync", "async"):
        for node in cluster.nodes:
            with node.client() as client:
                client.script_flush()
        if flush_before == "sync":
            for name in names:
                lk = distlock.lock(name, ttl=5)
                assert lk.acquire(wait=0)
                lk.release()
        else:
            assert asyncio.run(pairs()) == [True] * len(names)
    assert not any(distlock.lock(name).locked() for name in names)
