"""Clusters under faults, at length: a master SIGKILLed while its only replica lags, with
WAIT_REPLICAS=1 (no acknowledged lock lost; the shard then has no replica, so its locks
fail closed until the old master comes back as the new master's replica), and 3,000 slots
resharded then rebalanced under a locking and listing load.

Marked slow (clusters of their own); tests/backends/test_cluster_topologies.py kills a master and
reshards 1,000 slots under load in the normal suite."""

from __future__ import annotations

import itertools
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from devkit.configs import distlock_settings
from devkit.redis_server import RedisCluster, RedisServer
from distlock import BackendUnavailable
from distlock.backends.operations import Request
from distlock.backends.redis import RedisBackend
from distlock.handler import locks
from tests.support.cluster_load import ClusterLoad
from tests.support.lock_helpers import Acknowledged, hold_many, release_many

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.slow, pytest.mark.timeout(300)]
CONFIRMED = {"WAIT_REPLICAS": 1, "WAIT_TIMEOUT": 100}
HELD = 300
RESHARDED_SLOTS = 3000


def names_on(backend: RedisBackend, node: RedisServer, count: int) -> list[str]:
    """``count`` lock names whose keys the master ``node`` serves now."""
    backend.client.nodes_manager.initialize()
    found = []
    for number in itertools.count():
        name = f"shard:{number}"
        if backend.client.get_node_from_key(backend.layout.keys_for(name).lock).port == node.port:
            found.append(name)
            if len(found) == count:
                return found
    raise AssertionError("unreachable")


def try_each(backend: RedisBackend, names: list[str]) -> Counter[str]:
    outcomes: Counter[str] = Counter()
    for name in names:
        token = uuid.uuid4().hex
        try:
            if backend.exclusive.try_acquire(Request(name, token, 30_000, "{}", 0)).acquired:
                outcomes["acquired"] += 1
                backend.exclusive.release(name, token)
        except BackendUnavailable:
            outcomes["unavailable"] += 1
    return outcomes


def test_a_killed_master_with_a_lagging_replica_loses_no_acknowledged_lock(
    settings: Any, record
) -> None:
    with RedisCluster(masters=3, replicas=1) as cluster:
        config = distlock_settings("cluster", cluster.urls[0])[0]["default"]
        params = {**config, "OPTIONS": {**config["OPTIONS"], **CONFIRMED}}
        settings.DISTLOCK = {"default": params}
        locks.reset()
        victim = cluster.masters()[0]
        heir = cluster.replica_of(victim)
        with Acknowledged(locks["default"]) as acknowledged:
            time.sleep(0.5)
            heir.pause()  # replication stops; the master keeps taking writes
            time.sleep(1.0)
            victim.kill()
            heir.resume()
            killed = time.monotonic()
            while cluster.role(heir) != "master":
                assert time.monotonic() < killed + 30, "the replica was never promoted"
                time.sleep(0.05)
            promoted = time.monotonic()
            time.sleep(1.0)
        # A new process, started with LOCATION on a node that still runs (a process started
        # while its LOCATION node is down cannot find the cluster).
        fresh = RedisBackend("fresh", {**params, "LOCATION": heir.url})
        assert acknowledged.tokens and acknowledged.refused and acknowledged.lost(fresh) == []

        # The shard lost its only replica: its locks fail closed, the others' still work.
        orphaned = try_each(fresh, names_on(fresh, heir, 20))
        other = next(node for node in cluster.masters() if node is not heir)
        elsewhere = try_each(fresh, names_on(fresh, other, 20))
        assert orphaned == {"unavailable": 20} and elsewhere == {"acquired": 20}
        restarted = time.monotonic()
        victim.restart(empty=True)  # comes back as the new master's replica
        while try_each(fresh, names_on(fresh, heir, 1)) != {"acquired": 1}:
            assert time.monotonic() < restarted + 60, "the shard never got a replica back"
            time.sleep(0.1)
        back = time.monotonic()
        fresh.close()
    record(
        "Cluster master SIGKILL, replica paused 1 s before, WAIT_REPLICAS=1",
        f"0 of {len(acknowledged.tokens)} acknowledged locks lost ({acknowledged.refused} "
        "acquires "
        f"refused while unconfirmed); promoted {promoted - killed:.1f} s after the kill; "
        "the shard left without a replica refused every acquire (BackendUnavailable) until "
        f"the old master rejoined as its replica, {back - restarted:.1f} s after its restart",
        acknowledged=len(acknowledged.tokens),
        lost=0,
        promotion=round(promoted - killed, 2),
        replica_back=round(back - restarted, 2),
    )


def test_resharding_and_rebalancing_under_load(settings: Any, record) -> None:
    with RedisCluster(masters=3) as cluster:
        config = distlock_settings("cluster", cluster.urls[0])[0]["default"]
        settings.DISTLOCK = {"default": config}
        locks.reset()
        tokens = hold_many([f"held:{number}" for number in range(HELD)], ttl=300)
        lister = RedisBackend("lister", config)
        with ClusterLoad(lister, HELD) as load:
            time.sleep(0.3)
            started = time.monotonic()
            cluster.reshard(cluster.nodes[0], cluster.nodes[1], RESHARDED_SLOTS)
            cluster.rebalance()
            moved = time.monotonic()
            time.sleep(0.3)
        lister.close()
        release_many(tokens)
    during = [ok for at, ok in load.listings.seen if started <= at <= moved]
    assert load.unexpected == [] and load.overlaps == [] and load.incomplete == []
    assert during and load.lockings.first_success_after(moved) is not None
    record(
        "Cluster resharding under load (3,000 slots moved, then rebalanced)",
        f"{moved - started:.1f} s of slot moves: {len(load.lockings.seen)} locks taken, 0 "
        f"overlaps, no MOVED/ASK/CROSSSLOT or other error reached a caller; {len(during)} "
        f"listings meanwhile, each complete, {during.count(False)} BackendUnavailable",
        seconds=round(moved - started, 1),
        listings=len(during),
        unavailable=during.count(False),
        overlaps=0,
    )
