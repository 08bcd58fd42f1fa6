"""A live hold whose key the server evicted is reported lost with the eviction named: in
``on_lost`` (``lock.lost_reason``), the ``lock_lost`` signal's ``reason``, the log record and
LockLost's message. A loss the server's evictions do not explain names none.

Real servers with maxmemory 8mb; cache entries without a TTL fill them, so under a
``volatile-*`` policy the keys with a TTL, the lock's among them, are the ones evicted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import distlock
from devkit.configs import distlock_settings
from devkit.memory import FILLER, evicting, write_entries
from devkit.redis_server import RedisServer
from distlock import LockLost
from distlock.handler import locks
from distlock.signals import lock_lost
from tests.conftest import location_of

pytestmark = pytest.mark.django_db(databases=[])


@pytest.fixture(params=["volatile-ttl", "volatile-lru"])
def evicting_server(request: pytest.FixtureRequest, settings: Any) -> Iterator[RedisServer]:
    server = RedisServer(["--maxmemory", "8mb", "--maxmemory-policy", request.param]).start()
    settings.DISTLOCK, settings.CACHES = distlock_settings("redis", server.url)
    locks.reset()
    yield server
    locks.reset()
    server.stop()


class Loss:
    """What a lost lease told: on_lost, the lock_lost signal, the log."""

    def __init__(self) -> None:
        self.reported = threading.Event()
        self.on_lost_reason: str | None = None
        self.signal_reason: str | None = None

    def on_lost(self, lock: distlock.Lock) -> None:
        self.on_lost_reason = lock.lost_reason
        self.reported.set()

    def receiver(self, sender: Any, reason: str = "", **kwargs: Any) -> None:
        self.signal_reason = reason


@pytest.fixture
def loss() -> Iterator[Loss]:
    seen = Loss()
    lock_lost.connect(seen.receiver, weak=False)
    yield seen
    lock_lost.disconnect(seen.receiver)


def evict(server: RedisServer, name: str, client: Any = None) -> int:
    """Write 2 KB cache entries (through ``client``, default the server's) until the server
    evicted the key of lock ``name``, then delete a few (room for the next writes); return
    how many keys it evicted so far."""
    client = client or server.client()
    key = locks["default"].layout.keys_for(name).lock
    assert client.exists(key)
    written = write_entries(client, 100_000, stop=lambda: not client.exists(key))
    assert not client.exists(key)
    client.unlink(*[f"{FILLER}{i}" for i in range(min(written, 500))])
    return int(client.info("stats")["evicted_keys"])


def renewed(name: str, times: int) -> None:
    deadline = time.monotonic() + 20
    while (locks["default"].info(name).renewals or 0) < times:
        assert time.monotonic() < deadline, "never renewed"
        time.sleep(0.02)


def test_a_hold_evicted_before_its_first_renewal_is_reported_evicted(
    evicting_server: RedisServer, loss: Loss, caplog: pytest.LogCaptureFixture
) -> None:
    holder = distlock.lock("pay:42", ttl=3, auto_renew=True, on_lost=loss.on_lost)
    assert holder.acquire()
    evicted = evict(evicting_server, "pay:42")
    second = distlock.lock("pay:42", ttl=3)
    assert second.acquire(wait=0)  # what eviction allows: a second holder
    with caplog.at_level(logging.WARNING, logger="distlock"):
        assert loss.reported.wait(10)
    assert loss.on_lost_reason is not None
    assert "evicted by Redis" in loss.on_lost_reason  # (before or after the first renewal)
    assert f"{evicting_server.url} (policy " in loss.on_lost_reason
    assert f"{evicted} key" in loss.on_lost_reason
    assert loss.signal_reason == loss.on_lost_reason
    assert any("evicted by Redis" in record.getMessage() for record in caplog.records)
    with pytest.raises(LockLost, match="most likely evicted by Redis"):
        holder.release()
    second.release()


def test_a_hold_evicted_after_a_renewal_names_the_keys_evicted_while_held(
    evicting_server: RedisServer, loss: Loss
) -> None:
    holder = distlock.lock("report:7", ttl=1.5, auto_renew=True, on_lost=loss.on_lost)
    assert holder.acquire()
    renewed("report:7", 2)  # the renewal after the first has read the evictions so far
    evicted = evict(evicting_server, "report:7")
    assert loss.reported.wait(10)
    assert loss.on_lost_reason is not None
    assert "evicted by Redis: keys were evicted while it was held" in loss.on_lost_reason
    assert f"{evicting_server.url} ({evicted} key" in loss.on_lost_reason
    with pytest.raises(LockLost, match="evicted while it was held"):
        holder.extend()


def test_a_force_release_on_a_server_that_evicted_before_the_hold_names_no_eviction(
    evicting_server: RedisServer, loss: Loss
) -> None:
    early = distlock.lock("early", ttl=30)
    assert early.acquire()
    assert evict(evicting_server, "early") > 0  # evictions before the hold below
    holder = distlock.lock("nightly", ttl=1.5, auto_renew=True, on_lost=loss.on_lost)
    assert holder.acquire()
    renewed("nightly", 2)
    assert locks["default"].force_release("nightly")
    assert loss.reported.wait(10)
    assert loss.on_lost_reason is not None
    assert "evict" not in loss.on_lost_reason
    assert "a renewal found it gone" in loss.on_lost_reason


def test_a_redlock_hold_evicted_on_a_majority_is_reported_evicted(
    nodes: list[RedisServer], loss: Loss
) -> None:
    with evicting(nodes, "volatile-ttl", "8mb"):
        holder = distlock.lock("pay:43", ttl=3, auto_renew=True, on_lost=loss.on_lost)
        assert holder.acquire()
        for node in nodes[:2]:
            evict(node, "pay:43")
        assert loss.reported.wait(10)
    assert loss.on_lost_reason is not None
    assert "evicted by Redis" in loss.on_lost_reason  # (before or after the first renewal)
    assert all(f"{node.url} (" in loss.on_lost_reason for node in nodes[:2])
    assert nodes[2].url not in loss.on_lost_reason  # it evicted nothing


def test_a_cluster_hold_evicted_is_reported_evicted(
    request: pytest.FixtureRequest, settings: Any, redis_url: str, loss: Loss
) -> None:
    settings.DISTLOCK, settings.CACHES = distlock_settings(
        "cluster", location_of("cluster", request, redis_url)
    )
    locks.reset()
    cluster = request.getfixturevalue("redis_cluster")
    try:
        with evicting(cluster.nodes, "volatile-ttl", "8mb"):
            holder = distlock.lock("pay:44", ttl=3, auto_renew=True, on_lost=loss.on_lost)
            assert holder.acquire()
            evict(cluster.nodes[0], "pay:44", client=cluster.client())
            assert loss.reported.wait(10)
    finally:
        for node in cluster.masters():
            node.flushall()
    assert loss.on_lost_reason is not None
    assert "evicted by Redis" in loss.on_lost_reason  # (before or after the first renewal)
