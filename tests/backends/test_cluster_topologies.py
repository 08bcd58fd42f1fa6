"""RedisBackend on Clusters of other shapes than the shared three masters: six masters (do
lock keys spread over all of them?) and three masters with a replica each (does a process
that only lists recover from a master's death by itself?)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from devkit.configs import distlock_settings
from devkit.redis_server import RedisCluster, RedisServer
from distlock.backends.redis import RedisBackend
from distlock.handler import locks
from tests.support.cluster_load import ClusterLoad
from tests.support.lock_helpers import hold_many, release_many

pytestmark = pytest.mark.django_db(databases=[])
SPREAD_NAMES = 10_000
HELD = 300
# How soon after a replica took a dead master's slots both locking and listing must work.
RECOVERY = 2.0
# Slots moved between two masters while locks are taken and listed (of 16,384).
RESHARDED_SLOTS = 1000


@pytest.fixture(scope="module")
def six_masters() -> Iterator[RedisCluster]:
    with RedisCluster(masters=6) as cluster:
        yield cluster


def use(settings: Any, cluster: RedisCluster) -> dict[str, Any]:
    settings.DISTLOCK = distlock_settings("cluster", cluster.urls[0])[0]
    locks.reset()
    return dict(settings.DISTLOCK["default"])


def lock_keys(node: RedisServer) -> int:
    with node.client() as client:
        return len(client.keys("test:*:lock:*"))


def test_lock_keys_spread_over_every_master(settings: Any, six_masters: RedisCluster) -> None:
    use(settings, six_masters)
    names = [f"order:{number}" for number in range(SPREAD_NAMES)]
    tokens = hold_many(names, ttl=60)
    try:
        per_master = [lock_keys(node) for node in six_masters.nodes]
        mean = SPREAD_NAMES / len(per_master)
        shares = [round(count / mean, 3) for count in per_master]
        print("keys per master, share of the mean:", shares)  # measured: shown with -s
        assert sum(per_master) == SPREAD_NAMES
        assert all(0.8 <= share <= 1.2 for share in shares), shares
        started = time.monotonic()
        listed = [info.name for info in locks["default"].iter_held()]
        print(f"iter_held over {SPREAD_NAMES} locks: {time.monotonic() - started:.3f} s")
        assert sorted(listed) == sorted(names)
        assert locks["default"].count() == SPREAD_NAMES
    finally:
        release_many(tokens)


def test_listing_and_locking_recover_from_a_killed_master(settings: Any) -> None:
    with RedisCluster(masters=3, replicas=1) as cluster:
        params = use(settings, cluster)
        tokens = hold_many([f"held:{number}" for number in range(HELD)], ttl=120)
        time.sleep(0.5)  # replicated by now
        # A backend of its own, that only lists: nothing else refreshes its slot map.
        lister = RedisBackend("lister", params)
        with ClusterLoad(lister, HELD) as load:
            time.sleep(0.5)
            victim = cluster.masters()[0]
            heir = cluster.replica_of(victim)
            killed = time.monotonic()
            victim.kill()
            deadline = killed + 30
            while cluster.role(heir) != "master":
                assert time.monotonic() < deadline, "the replica was never promoted"
                time.sleep(0.02)
            promoted = time.monotonic()
            time.sleep(RECOVERY + 1.0)
        listings, lockings = load.listings, load.lockings
        listed_again = listings.first_success_after(promoted)
        locked_again = lockings.first_success_after(promoted)
        print(
            f"promoted {promoted - killed:.2f} s after the kill; listing back "
            f"{listed_again and listed_again - promoted} s, locking back "
            f"{locked_again and locked_again - promoted} s after that"
        )
        assert any(not ok for _, ok in listings.seen), "the kill went unnoticed"
        assert listed_again is not None and listed_again - promoted < RECOVERY
        assert locked_again is not None and locked_again - promoted < RECOVERY
        # once back, listing keeps working, and complete
        assert all(ok for at, ok in listings.seen if at > listed_again + 0.5)
        assert load.overlaps == [] and load.incomplete == [] and load.unexpected == []
        lister.close()
        release_many(tokens)


def test_resharding_under_load_never_surfaces_a_redirect(settings: Any) -> None:
    with RedisCluster(masters=3) as cluster:
        params = use(settings, cluster)
        tokens = hold_many([f"held:{number}" for number in range(HELD)], ttl=120)
        lister = RedisBackend("lister", params)
        source, target = cluster.nodes[0], cluster.nodes[1]
        before = cluster.slots_of(target)
        with ClusterLoad(lister, HELD) as load:
            time.sleep(0.3)
            started = time.monotonic()
            cluster.reshard(source, target, RESHARDED_SLOTS)
            moved = time.monotonic()
            time.sleep(0.3)
        during = [ok for at, ok in load.listings.seen if started <= at <= moved]
        print(
            f"{RESHARDED_SLOTS} slots moved in {moved - started:.1f} s: {len(during)} "
            f"listings meanwhile, {during.count(False)} BackendUnavailable; "
            f"{len(load.lockings.seen)} locks taken"
        )
        assert load.unexpected == [] and load.overlaps == [] and load.incomplete == []
        assert during and load.lockings.first_success_after(moved) is not None
        assert cluster.slots_of(target) == before + RESHARDED_SLOTS  # they did move
        lister.close()
        release_many(tokens)
