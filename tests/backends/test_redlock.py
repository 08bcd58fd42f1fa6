"""Redlock on real, independent redis-server processes: failures, restarts, settings.

The contract suite (tests/core/test_contract.py) also runs on Redlock with 3 and 5 nodes; this
module covers what only a quorum has: nodes that die, pause or come back empty.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest

import distlock
from devkit.configs import SOCKET_TIMEOUT, distlock_settings
from devkit.redis_server import RedisServer
from distlock import BackendUnavailable, LockNotAcquired
from distlock.backends.operations import Request
from distlock.backends.redlock import BACKOFF, GRACE
from distlock.checks import check_settings
from distlock.handler import locks
from tests.conftest import ahandoff_delay
from tests.support.lock_helpers import handoff_delay

pytestmark = pytest.mark.django_db(databases=[])
REDLOCK = "distlock.backends.redlock.RedlockBackend"


def lock_keys(server: RedisServer) -> list[bytes]:
    """The keys of a held or queued lock on ``server``: everything but the buckets' fencing
    memory."""
    with server.client() as client:
        keys = [key for key in client.keys("test:*") if not key.endswith(b":fence")]
        return [key for key in keys if client.type(key) != b"zset" or client.zcard(key)]


def wait_out_backoff() -> None:
    """Let the backends try nodes they left out after a failure again."""
    time.sleep(BACKOFF + 0.05)


# --------------------------------------------------------------------------- settings


def check(location: Any, **options: Any) -> list[Any]:
    from django.test import override_settings

    setting = {"default": {"BACKEND": REDLOCK, "LOCATION": location, "OPTIONS": options}}
    with override_settings(DISTLOCK=setting):
        return check_settings()


URLS = [f"redis://10.0.0.{i}:6379/0" for i in range(1, 6)]


@pytest.mark.parametrize(
    ("location", "message"),
    [
        ("redis://10.0.0.1:6379/0", "must be a list of Redis URLs"),
        (URLS[:1], "has 1 server(s); Redlock needs at least 3"),
        (URLS[:2], "has 2 server(s); Redlock needs at least 3"),
        (URLS[:4], "has 4 servers, an even number"),
        ([*URLS[:2], "redis://10.0.0.1:6379/1"], "names the same server twice ([0] and [2]"),
        ([*URLS[:2], "redis://10.0.0.1"], "names the same server twice"),
        ([*URLS[:2], "http://10.0.0.3"], "[2]: 'http://10.0.0.3' is not a Redis URL"),
        ([*URLS[:2], "redis://h:port/0"], "[2]: 'redis://h:port/0' has an invalid port"),
        ([*URLS[:2], None], "[2]: must be a Redis URL string"),
    ],
)
def test_bad_locations_fail_the_system_check(location: Any, message: str) -> None:
    [error] = check(location)
    assert error.id == "distlock.E005"
    assert message in error.msg, error.msg
    assert "an odd number (at least 3) of independent Redis servers" in error.hint


def test_passwords_in_redlock_urls_never_reach_messages() -> None:
    [error] = check([*URLS[:2], "redis://:hunter2@10.0.0.1:6379/3"])
    assert "hunter2" not in error.msg and "***" in error.msg


@pytest.mark.parametrize(
    "options",
    [
        {"DRIFT_FACTOR": 0.5},
        {"DRIFT_FACTOR": -0.1},
        {"DRIFT_FACTOR": "0.01"},
        {"CLUSTER": True},
        {"WAIT_REPLICAS": 1},
        {"socket_timeout": 0},
        {"no_such_option": 1},
    ],
)
def test_bad_options_fail_the_system_check(options: dict[str, Any]) -> None:
    [error] = check(URLS[:3], **options)
    assert error.id == "distlock.E006" and error.hint


def test_three_and_five_independent_servers_pass() -> None:
    assert check(URLS[:3]) == [] and check(URLS, DRIFT_FACTOR=0.02) == []
    assert check(["unix:///run/a.sock", "unix:///run/b.sock", "rediss://10.0.0.9"]) == []


# --------------------------------------------------------------------------- one node down


def test_one_node_killed_locks_keep_working(nodes: list[RedisServer]) -> None:
    nodes[2].kill()
    backend = locks["default"]
    for _ in range(20):
        with distlock.lock("survives", ttl=5) as lk:
            assert lk.owned() and lk.locked()
            lk.extend(ttl=10)
            assert lk.ttl_remaining() > 9
            assert not distlock.lock("survives", wait=0).acquire()
            assert [info.name for info in backend.held()] == ["survives"]
    assert backend.held() == []
    fences = []
    for _ in range(5):
        with distlock.lock("fenced", ttl=5) as lk:
            fences.append(lk.fencing_token)
    assert fences == sorted(set(fences))


def test_one_node_killed_waiters_are_still_handed_the_lock(nodes: list[RedisServer]) -> None:
    nodes[0].kill()  # the node waiters would block on: they move to the next one
    holder = distlock.lock("handoff", ttl=10)
    assert holder.acquire()
    waiter = distlock.lock("handoff", ttl=10, using="other")
    assert handoff_delay(holder, waiter, settle=0.3) < 0.2  # notified, not polling


async def test_one_node_killed_async(nodes: list[RedisServer]) -> None:
    nodes[1].kill()
    async with distlock.lock("async-survives", ttl=5) as lk:
        assert await lk.aowned()
        await lk.aextend()
        assert not await distlock.lock("async-survives", wait=0).aacquire()
    assert not await lk.alocked()


# --------------------------------------------------------------------------- two nodes down


@pytest.mark.parametrize("wait", [0, 0.5, None])
def test_two_nodes_killed_acquire_fails_closed_and_leaves_nothing(
    nodes: list[RedisServer], wait: float | None
) -> None:
    nodes[1].kill()
    nodes[2].kill()
    lk = distlock.lock("two-down", ttl=30, wait=wait)
    for _ in range(3):
        started = time.monotonic()
        with pytest.raises((BackendUnavailable, LockNotAcquired)), lk:
            pytest.fail("a lock held by one node of three was reported as held")
        assert lk.token is None and lk.fencing_token is None
        assert time.monotonic() - started < (wait or 0) + 2 * SOCKET_TIMEOUT
    assert lock_keys(nodes[0]) == []


def test_two_nodes_killed_while_held_extend_and_release_fail_closed(
    nodes: list[RedisServer],
) -> None:
    lk = distlock.lock("held-then-down", ttl=30)
    assert lk.acquire()
    nodes[0].kill()
    nodes[1].kill()
    with pytest.raises(BackendUnavailable):
        lk.extend()
    assert lk.token is not None  # may still be held: kept, so release() can be retried
    with pytest.raises(BackendUnavailable):
        lk.release()
    with pytest.raises(BackendUnavailable):
        distlock.lock("held-then-down", using="other").acquire(wait=0)
    with pytest.raises(BackendUnavailable):
        locks["default"].held()


async def test_two_nodes_killed_async_acquire_fails_closed(nodes: list[RedisServer]) -> None:
    nodes[0].kill()
    nodes[2].kill()
    lk = distlock.lock("async-two-down", ttl=30)
    with pytest.raises(BackendUnavailable, match="a majority of 2 is needed"):
        await lk.aacquire(wait=0.5)
    assert lk.token is None
    assert lock_keys(nodes[1]) == []


def test_nodes_asked_at_once_a_paused_node_costs_no_socket_timeout(
    nodes: list[RedisServer],
) -> None:
    nodes[1].pause()  # accepts connections, never answers: a partition
    started = time.monotonic()
    with distlock.lock("partitioned", ttl=5) as lk:
        first = time.monotonic() - started
        assert lk.owned()
    assert first < GRACE + 0.5 < SOCKET_TIMEOUT  # the majority decided; the grace bounds it
    started = time.monotonic()
    for _ in range(10):  # the paused node is left out now
        with distlock.lock("partitioned", ttl=5):
            pass
    assert time.monotonic() - started < 1.0
    nodes[0].pause()
    started = time.monotonic()
    with pytest.raises(BackendUnavailable):
        distlock.lock("partitioned", ttl=5, wait=0).acquire()
    assert time.monotonic() - started < 2 * SOCKET_TIMEOUT + 0.5


def test_nodes_back_after_an_outage_are_used_again(nodes: list[RedisServer]) -> None:
    nodes[0].kill()
    nodes[1].kill()
    with pytest.raises(BackendUnavailable):
        distlock.lock("back", wait=0).acquire()
    nodes[0].restart()
    nodes[1].restart()
    wait_out_backoff()
    with distlock.lock("back", ttl=5) as lk:
        assert lk.owned()
    assert all(lock_keys(node) == [] for node in nodes)


# --------------------------------------------------------------------------- validity


def test_a_lease_shorter_than_the_round_trip_is_never_reported_held(
    settings: Any, nodes: list[RedisServer]
) -> None:
    # validity = ttl - elapsed - drift, drift = ttl x 0.01 + 2 ms: below zero for 2 ms.
    lk = distlock.lock("instant", ttl=0.002)
    assert lk.acquire(wait=0) is False
    assert lk.token is None
    assert all(lock_keys(node) == [] for node in nodes)
    # A drift factor near one half leaves half a lease: a 100 ms lease is still held.
    config = {**settings.DISTLOCK["default"], "OPTIONS": {"DRIFT_FACTOR": 0.49}}
    settings.DISTLOCK = {"default": config, "other": config}
    locks.reset()
    with distlock.lock("instant", ttl=0.1) as held:
        assert held.token is not None


# --------------------------------------------------------------------------- restarts


def test_a_node_restarted_empty_after_the_longest_lease_causes_no_overlap(
    nodes: list[RedisServer],
) -> None:
    """Restarting a node only once every lease it granted has ended keeps mutual exclusion:
    the holder's majority (nodes 0, 1) still has the lock on node 1 until the lease ends,
    and a restarted, empty node 0 can only add a vote when no such lease is left."""
    lease = 1.5
    nodes[2].kill()
    holder = distlock.lock("restarted", ttl=lease)
    assert holder.acquire()
    acquired = time.monotonic()
    lease_end = acquired + lease
    nodes[2].restart()  # back, empty: the holder has nodes 0 and 1
    nodes[0].kill()  # crash, and stay down for the longest lease
    contender = distlock.lock("restarted", ttl=5, using="other")
    while time.monotonic() < acquired + lease:
        with contextlib.suppress(BackendUnavailable):
            assert not contender.acquire(wait=0), "acquired while the holder's lease lasts"
        time.sleep(0.05)
    nodes[0].restart()  # empty, but only after the delay
    wait_out_backoff()
    assert contender.acquire(wait=5)
    assert time.monotonic() >= lease_end
    contender.release()


def test_a_node_restarted_empty_at_once_can_grant_an_overlapping_lock(
    nodes: list[RedisServer],
) -> None:
    """Documented, not hidden (see docs/deployments.md): Redlock's safety needs a crashed
    node to stay down for the longest lease, or to keep its keys (appendfsync always).

    The holder took nodes 0 and 1 while node 2 was down; node 2 came back empty. Node 0
    crashes and restarts empty at once: nodes 0 and 2 now form a majority that never heard
    of the holder, so a second client gets the lock while the first one's lease lasts. Both
    believe they hold it; only a fencing token at the resource could tell them apart."""
    nodes[2].kill()
    holder = distlock.lock("overlap", ttl=30)
    assert holder.acquire()
    nodes[2].restart()
    nodes[0].restart()  # SIGKILL, then an empty restart on the same port
    contender = distlock.lock("overlap", ttl=30, using="other")
    assert contender.acquire(wait=0) is True
    assert holder.token is not None  # the holder was never told: two holders at once
    assert contender.owned()
    assert locks["other"].info("overlap").token == contender.token  # nodes 0 and 2
    # The restarted nodes issue tokens from their clocks, so this one still rises here.
    assert contender.fencing_token > holder.fencing_token
    contender.release()


# --------------------------------------------------------------------------- fencing


def test_the_fencing_token_is_the_largest_of_the_granting_majority(
    nodes: list[RedisServer],
) -> None:
    with distlock.lock("fence", ttl=5) as lk:
        per_node = []
        for node in nodes:
            with node.client() as client:
                value = client.get(next(iter(client.keys("test:*:lock:*"))))
                per_node.append(int(value.split()[1]))  # TOKEN FENCE ...
        assert lk.fencing_token == max(per_node)
        assert locks["default"].info("fence").fencing_token == max(per_node)


async def test_async_waiter_is_handed_the_lock_across_nodes(nodes: list[RedisServer]) -> None:
    holder = distlock.lock("async-handoff", ttl=10)
    assert await holder.aacquire()
    waiter = distlock.lock("async-handoff", ttl=10, using="other")
    assert await ahandoff_delay(holder, waiter) < 0.2


# --------------------------------------------------------------------------- validity


def slow_replies(backend: Any, script: str, delay: float) -> None:
    """Make every fan-out of ``script`` answer ``delay`` seconds late (as a slow network or
    a paused client would): the replies are the real ones, only time has passed."""
    original = backend._ask

    def late(step):
        results = original(step)
        if step.calls[0].script.name == script:
            time.sleep(delay)
        return results

    backend._ask = late


def test_a_majority_granted_too_late_is_not_held_and_is_taken_back(
    nodes: list[RedisServer],
) -> None:
    # Every node grants the 300 ms lease, but the replies take 350 ms: validity = ttl -
    # elapsed - drift is negative, so the lock is not held, and every grant is undone.
    slow_replies(locks["default"], "grant_acquire", 0.35)
    lk = distlock.lock("late-majority", ttl=0.3)
    assert lk.acquire(wait=0) is False
    assert lk.token is None
    assert all(lock_keys(node) == [] for node in nodes)
    # The same replies in time: held.
    del locks["default"]._ask
    assert lk.acquire(wait=0) is True
    lk.release()


def test_an_extension_confirmed_too_late_is_not_reported(nodes: list[RedisServer]) -> None:
    lk = distlock.lock("late-extend", ttl=0.3)
    lk.acquire()
    slow_replies(locks["default"], "extend", 0.35)
    with pytest.raises(BackendUnavailable):
        lk.extend()  # the nodes said yes, but the new lease may be over by now
    del locks["default"]._ask
    assert lk.token is not None  # the holder keeps its token and may release


def test_a_split_vote_retries_after_a_random_jitter_and_keeps_nothing(
    nodes: list[RedisServer],
) -> None:
    # Two contenders hold one node each (as if they split the nodes between them); a third
    # gets only the free node: no majority. It must take that node back and retry after a
    # random pause, so that contenders do not split again in step.
    backend = locks["default"]
    for node, token in zip(backend.nodes[:2], ("a" * 32, "b" * 32), strict=True):
        node.exclusive.try_acquire(Request("split", token, 30_000, "{}", 0))
    pauses = set()
    for _ in range(10):
        attempt = backend.exclusive.try_acquire(Request("split", "c" * 32, 30_000, "{}", 0))
        assert not attempt.acquired
        assert 5 <= attempt.holder_pttl_ms <= 50
        pauses.add(attempt.holder_pttl_ms)
        with nodes[2].client() as client:
            assert client.get(backend.layout.keys_for("split").lock) is None
    assert len(pauses) > 1, "the pause before a retry must be random"


@pytest.mark.parametrize("count", [3, 5])
def test_a_fan_out_costs_one_round_trip_not_one_per_node(settings: Any, count: int) -> None:
    # Every node 50 ms away each way: asked one after another, an acquire would take one
    # round trip of 0.1 s per node (0.3 s or 0.5 s); asked at once, about one (0.1 s). The
    # same for release and extend.
    from devkit.tcp_proxy import TcpProxy

    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(RedisServer()) for _ in range(count)]
        proxies = [stack.enter_context(TcpProxy(("127.0.0.1", server.port))) for server in servers]
        kind = f"redlock{count}"
        config = distlock_settings(kind, ",".join(p.url for p in proxies))[0]["default"]
        settings.DISTLOCK = {"default": config, "other": config}  # the fixture closes both
        locks.reset()
        # Connect and load the scripts first (a server's first EVALSHA of a script it has not
        # seen costs one more round trip, for the EVAL): only round trips are timed.
        with distlock.lock("far-away", ttl=5) as warm_up:
            warm_up.extend()
        for proxy in proxies:
            proxy.latency = 0.05
        lk = distlock.lock("far-away", ttl=5)
        took = {}
        for step, call in (
            ("acquire", lambda: lk.acquire(wait=0)),
            ("extend", lk.extend),
            ("release", lk.release),
        ):
            started = time.monotonic()
            call()
            took[step] = time.monotonic() - started
        locks["default"].close()
    for step, seconds in took.items():
        assert 0.1 <= seconds < 0.18, f"{step} took {seconds:.3f}s over {count} nodes 0.1 s away"


# --------------------------------------------------------------------------- node I/O


def test_fan_outs_give_every_connection_back_to_its_nodes_pool(nodes: list[RedisServer]) -> None:
    from tests.backends.test_public_api import in_use

    with distlock.lock("pools", ttl=5) as lk:
        assert lk.owned()
        lk.extend()
    assert distlock.lock("pools").locked() is False
    pools = [node.client.connection_pool for node in locks["default"].nodes]
    assert [in_use(pool) for pool in pools] == [0, 0, 0]
    nodes[1].pause()  # a node that never answers: its connection is dropped, not kept
    try:
        with distlock.lock("pools", ttl=5):
            pass
    finally:
        nodes[1].resume()
    assert [in_use(pool) for pool in pools] == [0, 0, 0]


def test_fan_outs_over_redis_pys_connection_keep_every_guarantee(
    nodes: list[RedisServer], settings: Any
) -> None:
    # RESP3 (replies may come with pushes) keeps every guarantee too.
    settings.DISTLOCK["default"]["OPTIONS"] = {
        **settings.DISTLOCK["default"]["OPTIONS"],
        "protocol": 3,
    }
    locks.reset()
    fences = []
    for _ in range(3):
        with distlock.lock("resp3", ttl=5) as lk:
            assert not distlock.lock("resp3", wait=0).acquire()
            fences.append(lk.fencing_token)
    assert fences == sorted(set(fences))
    nodes[2].kill()
    with distlock.lock("resp3", ttl=5) as lk:
        assert lk.owned()
    for server in nodes[:2]:
        with server.client() as client:
            client.script_flush()  # an error reply (NOSCRIPT) on every node, then EVAL
    with distlock.lock("resp3", ttl=5) as lk:
        assert lk.fencing_token > fences[-1]


# --------------------------------------------------------------------------- semaphores


def test_semaphores_are_refused_with_what_to_use_instead(nodes: list[RedisServer]) -> None:
    with pytest.raises(distlock.SemaphoresNotSupported, match="RedisBackend"):
        distlock.semaphore("pool", 2, wait=0).acquire()
    with pytest.raises(NotImplementedError):
        distlock.semaphore("pool", 2).locked()
