"""RedisBackend behind Sentinel, and WAIT_REPLICAS, on real servers: a master SIGKILLed
mid-run, replication cut while locks are taken."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

import distlock
from devkit.configs import SENTINEL_SERVICE, distlock_settings
from devkit.redis_server import RedisSentinelGroup, RedisServer
from distlock import BackendUnavailable
from distlock.backends.redis import RedisBackend
from distlock.checks import check_settings
from distlock.handler import locks
from distlock.keys import bucket_of
from tests.support.lock_helpers import Acknowledged, Holds

pytestmark = pytest.mark.django_db(databases=[])
REDIS = "distlock.backends.redis.RedisBackend"
WAIT_TIMEOUT_MS = 100


@pytest.fixture
def group(settings: Any, request: pytest.FixtureRequest) -> Iterator[RedisSentinelGroup]:
    """A master, a replica (or ``request.param`` replicas) and three sentinels of this
    test's own (failovers change them)."""
    with RedisSentinelGroup(replicas=getattr(request, "param", 1)) as started:
        location = ",".join(f"{host}:{port}" for host, port in started.sentinels)
        settings.DISTLOCK = distlock_settings("sentinel", location)[0]
        locks.reset()
        yield started
        for replica in started.replicas:
            replica.resume()
        locks["default"].close()
        locks.reset()


def confirmed_by_replicas(settings: Any, replicas: int = 1) -> None:
    config = settings.DISTLOCK["default"]
    options = {**config["OPTIONS"], "WAIT_REPLICAS": replicas, "WAIT_TIMEOUT": WAIT_TIMEOUT_MS}
    settings.DISTLOCK = {"default": {**config, "OPTIONS": options}}
    locks.reset()


def lock_keys(server: RedisServer) -> list[bytes]:
    with server.client() as client:
        return client.keys("test:*:lock:*")


def test_clients_follow_a_failover_when_the_master_is_killed(group: RedisSentinelGroup) -> None:
    outcomes: list[tuple[float, bool]] = []
    stop = threading.Event()

    def keep_locking() -> None:
        # A new name each time: a lock whose release the failover interrupted stays held
        # on the new master until its lease ends (when it was replicated in time).
        for attempt in itertools.count():
            if stop.is_set():
                return
            try:
                with distlock.lock(f"busy-{attempt}", ttl=5, wait=0):
                    pass
                outcomes.append((time.monotonic(), True))
            except BackendUnavailable:
                outcomes.append((time.monotonic(), False))
                time.sleep(0.05)

    worker = threading.Thread(target=keep_locking)
    worker.start()
    try:
        time.sleep(0.3)
        assert outcomes and all(ok for _, ok in outcomes)
        killed = time.monotonic()
        group.master.kill()
        new_master = group.wait_for_failover(timeout=30)
        failed_over = time.monotonic()
        deadline = failed_over + 5
        while not any(ok and at > failed_over for at, ok in outcomes):
            assert time.monotonic() < deadline, "no lock taken on the new master"
            time.sleep(0.05)
    finally:
        stop.set()
        worker.join()
    failures = [at for at, ok in outcomes if not ok]
    assert failures and min(failures) >= killed  # it failed closed during the failover...
    resumed = min(at for at, ok in outcomes if ok and at > max(failures))
    assert resumed - failed_over < 2.0  # ...and resumed as soon as the sentinels agreed
    assert new_master[1] == group.replica.port
    with distlock.lock("after", ttl=5) as lk:  # the whole API works on the new master
        lk.extend()
        held = [info.name for info in locks["default"].held()]
        # and the lock whose release the kill interrupted, if it reached the replica in time
        assert held[0] == "after" and all(name.startswith("busy-") for name in held[1:])
        assert b"test:{b%04d}:lock:after" % bucket_of("after") in lock_keys(group.replica)


def test_wait_replicas_confirms_and_fails_closed_when_replication_is_cut(
    settings: Any, group: RedisSentinelGroup
) -> None:
    confirmed_by_replicas(settings)
    held = distlock.lock("replicated", ttl=30)
    assert held.acquire(wait=0)
    assert lock_keys(group.replica)  # it was on the replica before acquire() returned
    group.replica.pause()  # replication cut: the master cannot get acknowledgements
    lk = distlock.lock("unconfirmed", ttl=30)
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="Only 0 of the 1 replicas"):
        lk.acquire(wait=0)
    assert time.monotonic() - started < WAIT_TIMEOUT_MS / 1000 + 0.5
    assert lk.token is None
    assert [key for key in lock_keys(group.master) if b"unconfirmed" in key] == []
    with pytest.raises(BackendUnavailable):
        held.extend()  # not confirmed either; the earlier, replicated lease stands
    assert held.token is not None
    held.release()  # releasing needs no confirmation
    group.replica.resume()
    with distlock.lock("unconfirmed", ttl=30) as lk:
        assert lk.owned()


async def test_wait_replicas_async(settings: Any, group: RedisSentinelGroup) -> None:
    confirmed_by_replicas(settings)
    async with distlock.lock("async-replicated", ttl=30) as lk:
        await lk.aextend()
    group.replica.pause()
    lk = distlock.lock("async-unconfirmed", ttl=30)
    with pytest.raises(BackendUnavailable, match="replicas"):
        await lk.aacquire(wait=0)
    assert lk.token is None
    assert lock_keys(group.master) == []


def test_wait_replicas_on_a_server_without_replicas_fails_closed(
    settings: Any, private_redis
) -> None:
    confirmed_by_replicas(settings)
    lk = distlock.lock("alone", ttl=30)
    with pytest.raises(BackendUnavailable, match="Only 0 of the 1 replicas"):
        lk.acquire()
    assert lk.token is None and lock_keys(private_redis) == []


def check(options: dict[str, Any], location: str = f"redis://{SENTINEL_SERVICE}/0") -> list[Any]:
    with override_settings(
        DISTLOCK={"default": {"BACKEND": REDIS, "LOCATION": location, "OPTIONS": options}}
    ):
        return check_settings()


SENTINELS = [("10.0.0.1", 26379), ("10.0.0.2", 26379)]


def test_sentinel_and_wait_settings_are_checked() -> None:
    [warning] = check({"SENTINELS": SENTINELS})  # see tests/core/test_checks.py
    assert warning.id == "distlock.W002"
    assert (
        check(
            {
                "SENTINELS": SENTINELS,
                "SENTINEL_KWARGS": {"password": "x"},
                "WAIT_REPLICAS": 1,
                "WAIT_TIMEOUT": 200,
            }
        )
        == []
    )
    for options in [
        {"SENTINELS": []},
        {"SENTINELS": "10.0.0.1:26379"},
        {"SENTINELS": [("10.0.0.1", "26379")]},
        {"SENTINELS": [("10.0.0.1", 26379, 0)]},
        {"SENTINELS": SENTINELS, "SENTINEL_KWARGS": "password=x"},
        {"SENTINEL_KWARGS": {"password": "x"}},
        {"WAIT_REPLICAS": True},
        {"WAIT_REPLICAS": "1"},
        {"WAIT_REPLICAS": 1, "WAIT_TIMEOUT": 0},
        {"WAIT_REPLICAS": 1, "WAIT_TIMEOUT": 2000},  # not below the socket timeout (2 s)
        {"WAIT_REPLICAS": 1, "WAIT_TIMEOUT": 0.5},
        {"WAIT_TIMEOUT": 100},
    ]:
        [error] = [
            message
            for message in check(
                {"SENTINELS": SENTINELS, **options}
                if "SENTINELS" not in options and "SENTINEL_KWARGS" not in options
                else options
            )
            if message.is_serious()
        ]
        assert error.id == "distlock.E006" and error.hint, options
    for location in ["redis:///0", "redis://service/db1", "unix:///run/redis.sock"]:
        [error] = [
            message for message in check({"SENTINELS": SENTINELS}, location) if message.is_serious()
        ]
        assert error.id == "distlock.E005" and "SERVICE_NAME" in error.hint, location


# --- failovers with WAIT_REPLICAS: never two holders ------------------------------------
def sentinel_failover(group: RedisSentinelGroup) -> None:
    with group.sentinel_client() as client:
        client.execute_command("SENTINEL", "FAILOVER", group.service_name)


def test_a_planned_failover_never_gives_two_holders_with_wait_replicas(
    settings: Any, group: RedisSentinelGroup
) -> None:
    planned_failover_holds(settings, group)


def planned_failover_holds(settings: Any, group: RedisSentinelGroup) -> Holds:
    """Let a long-lived client and fresh ones take one lock through a SENTINEL FAILOVER, with
    WAIT_REPLICAS as documented (every replica of the master); assert they never both held
    it, and return what they did."""
    confirmed_by_replicas(settings, replicas=len(group.replicas))
    params = settings.DISTLOCK["default"]
    long_lived = locks["default"]
    holds, stop = Holds(), threading.Event()

    def as_long_lived() -> None:  # one client, its connections made before the failover
        while not stop.is_set():
            holds.hold_once("long-lived", long_lived, "planned", ttl=2)

    def as_fresh() -> None:  # a new client (a new Sentinel lookup) for every attempt
        while not stop.is_set():
            backend = RedisBackend("fresh", params)
            holds.hold_once("fresh", backend, "planned", ttl=2)
            backend.close()

    threads = [threading.Thread(target=as_long_lived), threading.Thread(target=as_fresh)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.5)
        started = time.monotonic()
        sentinel_failover(group)
        group.wait_for_failover(timeout=30)
        # until the old master is a replica of the new one and both clients hold again
        deadline = time.monotonic() + 30
        while not all(
            any(c == client and at > started + 1 for c, at, _ in holds.intervals)
            for client in ("long-lived", "fresh")
        ):
            assert time.monotonic() < deadline, "the clients never held the lock again"
            time.sleep(0.1)
        time.sleep(1)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert holds.two_holders() == []
    assert {client for client, _, _ in holds.intervals} == {"long-lived", "fresh"}
    return holds


def test_a_master_killed_while_replicas_lag_loses_no_acknowledged_lock(
    settings: Any, group: RedisSentinelGroup
) -> None:
    kill_while_lagging(settings, group)


def kill_while_lagging(settings: Any, group: RedisSentinelGroup) -> tuple[int, int]:
    """Take locks with WAIT_REPLICAS while the replica is paused and the master is killed;
    assert that every acknowledged lock is held on the new master, and return how many
    were acknowledged and how many refused (unconfirmed)."""
    confirmed_by_replicas(settings)
    with Acknowledged(locks["default"]) as acknowledged:
        time.sleep(0.5)
        group.replica.pause()  # replication stops; the master keeps taking writes
        time.sleep(1.0)
        group.master.kill()
        group.replica.resume()
        group.wait_for_failover(timeout=30)
    assert acknowledged.tokens and acknowledged.refused > 0
    fresh = RedisBackend("fresh", settings.DISTLOCK["default"])
    try:
        lost = acknowledged.lost(fresh)
    finally:
        fresh.close()
    assert lost == [], f"{len(lost)} of {len(acknowledged.tokens)} acknowledged locks were lost"
    return len(acknowledged.tokens), acknowledged.refused
