"""What a shared lock stores on Redis, on one server and on a Cluster, and the backend that
refuses shared locks (Redlock)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis

import distlock
from devkit.redis_server import RedisCluster, RedisServer
from distlock import LockError, SharedLocksNotSupported
from distlock.backends.operations import Request
from distlock.handler import locks
from distlock.keys import bucket_of
from tests.conftest import QueueThreads

pytestmark = pytest.mark.django_db(databases=[])


@pytest.fixture
def data(redis_backend: str) -> redis.Redis:
    return redis.Redis.from_url(redis_backend, decode_responses=True)


def test_shared_holders_mark_the_lock_and_keep_their_own_keys_in_its_slot(data) -> None:
    first = distlock.lock("orders:{42}* x", shared=True, ttl=5)
    second = distlock.lock("orders:{42}* x", shared=True, ttl=2)
    assert first.acquire() and second.acquire()
    keys = locks["default"].layout.shared_keys_for("orders:{42}* x")
    assert data.get(keys.lock) == "=~"  # the exclusive scripts see a reservation
    assert 4000 < data.pttl(keys.lock) <= 5001  # the last lease
    assert set(data.zrange(keys.readers, 0, -1)) == {first.token, second.token}
    assert set(data.hkeys(keys.holders)) == {first.token, second.token}
    assert data.zscore(keys.index, "orders:{42}* x")
    every = data.keys("*")
    assert len({key.split("}")[0] for key in every}) == 1  # one hash tag, one slot
    first.release()
    assert 1000 < data.pttl(keys.lock) <= 2001  # now the remaining lease
    second.release()
    # Only the bucket's fencing token is left (as after an exclusive lock).
    assert data.keys("*") == [keys.fence]


def test_a_queued_writer_is_woken_when_the_last_lease_moves_earlier(
    data, queue_threads: QueueThreads
) -> None:
    long_reader = distlock.lock("report", shared=True, ttl=30)
    short_reader = distlock.lock("report", shared=True, ttl=0.5)
    assert long_reader.acquire() and short_reader.acquire()
    got: list[float] = []
    writer = distlock.lock("report", ttl=5, wait=10)

    def write() -> None:
        start = time.monotonic()
        assert writer.acquire()
        got.append(time.monotonic() - start)
        writer.release()

    [thread] = queue_threads(write)  # blocking until the 30 s lease ends at the latest
    long_reader.release()  # the last lease is now the short one: the writer re-reads it
    thread.join(5)
    assert got and got[0] < 1.0, got  # at the short lease's end, not 30 s


def test_exclusive_locks_store_what_they_stored_before(data) -> None:
    with distlock.lock("plain", ttl=5) as lk:
        k = locks["default"].layout.keys_for("plain")
        assert sorted(data.keys("*")) == sorted([k.lock, k.fence, k.index])
        assert data.get(k.lock).startswith(f"{lk.token} ")


def test_cluster_keeps_every_key_of_a_shared_lock_in_one_slot(
    settings: Any, redis_cluster: RedisCluster
) -> None:
    from devkit.configs import distlock_settings

    for node in redis_cluster.nodes:
        node.flushall()
    settings.DISTLOCK = distlock_settings("cluster", redis_cluster.urls[0])[0]
    locks.reset()
    names = [f"price-list:{n}:{{x}} é" for n in range(50)]
    held = [distlock.lock(name, shared=True, ttl=5) for name in names for _ in range(2)]
    for lk in held:
        assert lk.acquire()
    writer = distlock.lock(names[0], ttl=5, wait=0)
    assert not threading_result(writer.acquire)
    assert [e.name for e in locks["default"].shared.list("price-list:")] == sorted(names)
    for lk in held:
        lk.release()
    assert threading_result(writer.acquire)
    threading_result(writer.release)
    assert {bucket_of(n) for n in names}  # spread over buckets, each a slot of its own


def threading_result(func: Any) -> Any:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(func()))
    thread.start()
    thread.join(10)
    return result[0]


def test_redlock_refuses_shared_locks_naming_what_to_use(nodes: list[RedisServer]) -> None:
    with pytest.raises(SharedLocksNotSupported, match="RedisBackend") as caught:
        distlock.lock("catalogue", shared=True).acquire()
    assert isinstance(caught.value, LockError)
    assert "exclusive lock" in str(caught.value)
    assert locks["default"].shared.list() == []  # none can be held: none is listed


async def test_redlock_says_so_when_asked_if_a_shared_lock_is_held(
    nodes: list[RedisServer],
) -> None:
    """locked() of a shared Lock on Redlock raises as acquire() does (as in release 5f7026b);
    it must not answer False, least of all while the exclusive lock of the name is held."""
    exclusive = distlock.lock("catalogue", ttl=5)
    assert await exclusive.aacquire()
    reader = distlock.lock("catalogue", shared=True)
    with pytest.raises(SharedLocksNotSupported, match="RedisBackend"):
        reader.locked()
    with pytest.raises(SharedLocksNotSupported, match="RedisBackend"):
        await reader.alocked()
    assert reader.holder() is None and await reader.aholder() is None  # (messages only)
    # The contract's force_release() with a shared holder's token raises as in 5f7026b
    # (no shared hold can exist here to release), not a "not held" False.
    backend = locks["default"]
    with pytest.raises(SharedLocksNotSupported, match="RedisBackend"):
        backend.force_release("catalogue", "~" + "a" * 32)
    with pytest.raises(SharedLocksNotSupported, match="RedisBackend"):
        await backend.aforce_release("catalogue", "~" + "a" * 32)
    assert exclusive.owned()
    await exclusive.arelease()


def test_a_writer_giving_up_wakes_the_readers_it_kept_out(
    data, queue_threads: QueueThreads
) -> None:
    holder = distlock.lock("catalogue", shared=True, ttl=5)
    assert holder.acquire()
    writer = distlock.lock("catalogue", ttl=5, wait=0.3)
    outcome: list[bool] = []
    [thread] = queue_threads(lambda: outcome.append(writer.acquire()))
    backend = locks["default"]
    kept_out = backend.shared.try_acquire(Request("catalogue", "~waiter", 5000, "{}", 5000))
    assert not kept_out.acquired and kept_out.place == 1
    wake = f"{backend.layout.shared_keys_for('catalogue').queue}:~waiter"
    assert data.llen(wake) == 0
    thread.join(5)
    assert outcome == [False]
    assert data.llen(wake) == 1  # its BLPOP returns now, not at the holder's lease end
    assert backend.shared.try_acquire(Request("catalogue", "~waiter", 5000, "{}", 5000)).acquired
    assert backend.shared.release("catalogue", "~waiter") == 1
    holder.release()
