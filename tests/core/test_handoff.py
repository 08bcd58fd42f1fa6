"""Direct handoff on one server: a release makes the longest waiter the holder, and the waiter
learns it from the reply that wakes it (one round trip); a waiter that gave up or died is
never left holding the lock."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
import redis

import distlock
from devkit.configs import distlock_settings
from devkit.processes import Start, child_env
from devkit.tcp_proxy import TcpProxy
from distlock.backends.base import HANDOFF_GRACE_MS
from distlock.handler import locks
from tests.support.lock_helpers import handoff_delay

pytestmark = pytest.mark.django_db(databases=[])
# The documented bound on what a waiter that died while queued costs the next one: the
# grace the dead waiter had to claim the lock, plus at most one grace until the next waiter
# (which looks again that often while it is next in line) finds the lock free.
DEAD_WAITER_BOUND = 2 * HANDOFF_GRACE_MS / 1000


def queued(redis_url: str, name: str) -> int:
    with redis.Redis.from_url(redis_url) as client:
        return int(client.zcard(locks["default"].layout.keys_for(name).waiters))


def until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def waiter_process(redis_backend: str, processes: Start) -> Any:
    env = child_env(kind="redis", url=redis_backend, data_url=redis_backend)

    def start(name: str) -> subprocess.Popen[str]:
        process = processes(
            [sys.executable, "-m", "tests.support.workers", "waiter", name, "1"],
            env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        return process

    return start


def test_a_waiter_killed_while_queued_delays_the_next_by_the_bound_at_most(
    redis_backend: str, waiter_process: Any
) -> None:
    holder = distlock.lock("dead-waiter", ttl=30)
    assert holder.acquire()
    first = waiter_process("dead-waiter")
    until(lambda: queued(redis_backend, "dead-waiter") == 1)
    second = waiter_process("dead-waiter")
    until(lambda: queued(redis_backend, "dead-waiter") == 2)
    first.send_signal(signal.SIGKILL)
    first.wait()
    time.sleep(0.3)  # the second waiter is well into its wait
    released = time.monotonic()
    holder.release()  # handed to the dead waiter first: it never claims it
    assert second.stdout is not None
    line = second.stdout.readline().split()
    assert line[0] == "acquired"
    delay = float(line[1]) - released
    assert 0 <= delay <= DEAD_WAITER_BOUND + 0.15, f"the next waiter got it after {delay:.3f}s"


def acquire_into(lk: distlock.Lock, wait: float, result: list[bool]) -> None:
    result.append(lk.acquire(wait=wait))


def test_a_waiter_whose_wait_ran_out_is_never_made_holder(redis_backend: str) -> None:
    # A holder releases at a random moment around the end of a waiter's wait, over and over:
    # a waiter that returned False must never be left holding (or reserving) the lock.
    rng = random.Random(14)
    key = locks["default"].layout.keys_for("gave-up").lock
    admin = redis.Redis.from_url(redis_backend)
    outcomes = {True: 0, False: 0}
    for _ in range(60):
        holder = distlock.lock("gave-up", ttl=5)
        assert holder.acquire(wait=0)
        waiter = distlock.lock("gave-up", ttl=5)
        result: list[bool] = []
        thread = threading.Thread(
            target=acquire_into, args=(waiter, rng.uniform(0.005, 0.04), result)
        )
        thread.start()
        time.sleep(rng.uniform(0.0, 0.045))
        holder.release()
        thread.join()
        outcomes[result[0]] += 1
        if result[0]:
            assert waiter.owned()
            waiter.release()
        else:
            assert waiter.token is None
        # Nothing is left for a waiter that went away: not a holder, not a reservation.
        assert admin.exists(key) == 0
        assert distlock.lock("gave-up", ttl=5).acquire(wait=0)
        admin.delete(key)
    assert outcomes[True] and outcomes[False], outcomes  # both sides of the race were hit
    admin.close()


def test_fencing_tokens_strictly_increase_across_direct_handoffs(redis_backend: str) -> None:
    fences: list[int] = []
    guard = threading.Lock()

    def contend() -> None:
        for _ in range(40):
            with distlock.lock("handoffs", ttl=5, wait=10) as lk, guard:
                fences.append(int(lk.fencing_token or 0))

    threads = [threading.Thread(target=contend) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(fences) == 160
    assert fences == sorted(fences) and len(set(fences)) == len(fences)


def test_waiters_are_served_first_come_first_served(redis_backend: str) -> None:
    holder = distlock.lock("fifo", ttl=30)
    assert holder.acquire()
    order: list[int] = []

    def wait(number: int) -> None:
        with distlock.lock("fifo", ttl=5, wait=10):
            order.append(number)

    threads = []
    for number in range(5):
        thread = threading.Thread(target=wait, args=(number,))
        thread.start()
        threads.append(thread)
        until(lambda n=number: queued(redis_backend, "fifo") == n + 1)
    holder.release()
    for thread in threads:
        thread.join()
    assert order == [0, 1, 2, 3, 4]


def test_a_handoff_costs_one_round_trip(settings: Any, redis_server: Any) -> None:
    # The server 50 ms away each way: the waiter holds the lock about one round trip after
    # the holder called release() (the release reaches the server, the reply that wakes the
    # waiter comes back), not two (woken, then asking for it).
    redis_server.flushall()
    with TcpProxy(("127.0.0.1", redis_server.port)) as proxy:
        settings.DISTLOCK, settings.CACHES = distlock_settings("redis", proxy.url)
        locks.reset()
        holder = distlock.lock("far-handoff", ttl=5)
        warm_up = distlock.lock("far-handoff", ttl=5)
        assert warm_up.acquire()
        assert handoff_delay(warm_up, holder, settle=0.1) < 1  # scripts loaded, connected
        proxy.latency = 0.05
        assert holder.acquire()
        delay = handoff_delay(holder, distlock.lock("far-handoff", ttl=5), settle=0.4)
        locks.reset()
    assert 0.09 <= delay < 0.16, f"handoff took {delay:.3f}s with a round trip of 0.1 s"
