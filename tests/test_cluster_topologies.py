"""RedisBackend on Clusters of other shapes than the shared three masters: six masters (do
lock keys spread over all of them?) and three masters with a replica each (does a process
that only lists recover from a master's death by itself?)."""
from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import distlock
from distlock import BackendUnavailable
from distlock.backends.redis import RedisBackend
from distlock.handler import locks
from tests.configs import distlock_settings
from tests.lock_helpers import hold_many, release_many
from tests.redis_server import RedisCluster, RedisServer

pytestmark = pytest.mark.django_db(databases=[])
SPREAD_NAMES = 10_000
HELD = 300
# How soon after a replica took a dead master's slots both locking and listing must work.
RECOVERY = 2.0


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


class Samples:
    """What a thread saw, call after call: (when, succeeded)."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, bool]] = []

    def first_success_after(self, moment: float) -> float | None:
        return next((at for at, ok in self.seen if ok and at > moment), None)


def test_listing_and_locking_recover_from_a_killed_master(settings: Any) -> None:
    with RedisCluster(masters=3, replicas=1) as cluster:
        params = use(settings, cluster)
        tokens = hold_many([f"held:{number}" for number in range(HELD)], ttl=120)
        time.sleep(0.5)  # replicated by now
        # A backend of its own, that only lists: nothing else refreshes its slot map.
        lister = RedisBackend("lister", params)
        stop = threading.Event()
        listings, lockings, overlaps, incomplete = Samples(), Samples(), [], []
        inside: set[str] = set()

        def keep_listing() -> None:
            while not stop.is_set():
                try:
                    listed = [info.name for info in lister.iter_held("held:")]
                    counted = lister.count("held:")
                except BackendUnavailable:
                    listings.seen.append((time.monotonic(), False))
                    time.sleep(0.05)
                    continue
                listings.seen.append((time.monotonic(), True))
                if len(listed) != HELD or counted != HELD or len(set(listed)) != HELD:
                    incomplete.append((len(listed), counted))

        def keep_locking(worker: int) -> None:
            for attempt in itertools.count():
                if stop.is_set():
                    return
                name = f"work:{(worker + attempt) % 12}"
                try:
                    with distlock.lock(name, ttl=5, wait=0.5):
                        if name in inside:
                            overlaps.append(name)
                        inside.add(name)
                        time.sleep(0.002)
                        inside.discard(name)
                    lockings.seen.append((time.monotonic(), True))
                except BackendUnavailable:
                    lockings.seen.append((time.monotonic(), False))
                    time.sleep(0.05)
                except distlock.LockNotAcquired:
                    pass

        threads = [threading.Thread(target=keep_listing)] + [
            threading.Thread(target=keep_locking, args=(worker,)) for worker in range(4)]
        for thread in threads:
            thread.start()
        try:
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
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        listed_again = listings.first_success_after(promoted)
        locked_again = lockings.first_success_after(promoted)
        print(f"promoted {promoted - killed:.2f} s after the kill; listing back "
              f"{listed_again and listed_again - promoted} s, locking back "
              f"{locked_again and locked_again - promoted} s after that")
        assert any(not ok for _, ok in listings.seen), "the kill went unnoticed"
        assert listed_again is not None and listed_again - promoted < RECOVERY
        assert locked_again is not None and locked_again - promoted < RECOVERY
        # once back, listing keeps working, and complete
        assert all(ok for at, ok in listings.seen if at > listed_again + 0.5)
        assert overlaps == [] and incomplete == []
        lister.close()
        release_many(tokens)
