"""One lock shared by Python and Node.js (issue 26): the reference client (clients/node/)
in real Node.js processes beside Python processes, on the same real Redis server and Cluster.

Mutual exclusion, first-come-first-served handoff and fencing tokens across both languages;
a handoff from one to the other in one round trip; a Node.js holder killed while holding
released by its lease; its metadata shown by the admin and ``distlock list``."""

from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

import distlock
from devkit.configs import distlock_settings
from devkit.node import Node
from devkit.processes import child_env, end_processes, start_process
from devkit.redis_server import RedisServer
from devkit.tcp_proxy import TcpProxy

# Loading these modules loads every script (each loads those its operations run): the test of
# every script's SHA1 must not depend on which other tests imported them first.
from distlock.backends.redis_ops import grants, holds, listing, semaphores, shared  # noqa: F401
from distlock.backends.redis_ops.scripts import LOADED, LUA
from distlock.handler import locks

HERE = Path(__file__).resolve().parent
NODE_WORKER = HERE / "node_worker.mjs"
pytestmark = pytest.mark.django_db(databases=[])


class Fleet:
    """Start Node.js and Python worker processes on one Redis (server or Cluster)."""

    def __init__(self, node: Node, kind: str, url: str, cluster_urls: list[str]) -> None:
        self.node, self.kind, self.url = node, kind, url
        self.node_env = child_env()
        if kind == "cluster":
            self.node_env["DISTLOCK_NODE_CLUSTER"] = ",".join(cluster_urls)
        else:
            self.node_env["DISTLOCK_NODE_URL"] = url
        self.started: list[subprocess.Popen[str]] = []

    def node_process(self, *args: str) -> subprocess.Popen[str]:
        return self._start([self.node.binary, str(NODE_WORKER), *args], self.node_env)

    def python_process(self, *args: str) -> subprocess.Popen[str]:
        env = child_env(kind=self.kind, url=self.url, data_url=self.url)
        return self._start([sys.executable, "-m", "tests.interop.python_worker", *args], env)

    def _start(self, command: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
        # Alike in shape to test_lead_command's Hosts.start (duplicates pairs them): the one
        # start_process call with its pipes, and the list that some tests end early.
        process = start_process(
            command,
            env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.started.append(process)
        return process


def read(process: subprocess.Popen[str]) -> list[str]:
    """Return the words of the process's next line (failing if it ended instead)."""
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, f"the process ended (exit status {process.wait()}) instead of answering"
    return line.split()


def send(process: subprocess.Popen[str], line: str) -> None:
    assert process.stdin is not None
    process.stdin.write(line + "\n")
    process.stdin.flush()


@pytest.fixture
def fleet(node_client: Node, redis_backend: str) -> Iterator[Fleet]:
    """Workers on the tests' one Redis server (DISTLOCK points at it too)."""
    fleet = Fleet(node_client, "redis", redis_backend, [])
    yield fleet
    end_processes(fleet.started)


@pytest.fixture(params=["redis", "cluster"])
def any_fleet(request: pytest.FixtureRequest, node_client: Node, settings: Any) -> Iterator[Fleet]:
    """Workers on one server, then on a Cluster (DISTLOCK points at the same)."""
    if request.param == "cluster":
        cluster = request.getfixturevalue("redis_cluster")
        for node in cluster.nodes:
            node.flushall()
        url, urls = cluster.urls[0], cluster.urls
    else:
        server = request.getfixturevalue("redis_server")
        server.flushall()
        url, urls = server.url, []
    settings.DISTLOCK, settings.CACHES = distlock_settings(request.param, url)
    locks.reset()
    fleet = Fleet(node_client, request.param, url, urls)
    yield fleet
    end_processes(fleet.started)
    locks.reset()


# --- one lock, two languages --------------------------------------------------------------


def test_both_clients_compute_the_same_keys(fleet: Fleet) -> None:
    names = ["a", "order {42}", "é/ü:*()!'~@+=,;% x", "日本語 🔒", "x" * 1024]
    process = fleet.node_process("keys", json.dumps(names))
    got = json.loads(process.communicate(timeout=30)[0])
    layout = locks["default"].layout
    for name, keys in zip(names, got, strict=True):
        k = layout.keys_for(name)
        assert keys == {
            "lock": k.lock,
            "fence": k.fence,
            "queue": k.waiters,
            "live": k.live,
            "index": k.index,
        }, name


def test_both_clients_expand_every_script_to_the_same_text(fleet: Fleet) -> None:
    # Every script file, includes expanded: the same SHA1, so EVALSHA finds what either loaded.
    names = sorted(LOADED)
    process = fleet.node_process("shas", json.dumps(names))
    got = json.loads(process.communicate(timeout=30)[0])
    assert dict(zip(names, got, strict=True)) == {name: LOADED[name].sha for name in names}
    assert len(names) == len(list(Path(str(LUA)).glob("*.lua")))


def test_two_node_and_two_python_processes_share_one_lock(any_fleet: Fleet, tmp_path: Path) -> None:
    # Acceptance 2: 2,000 acquisitions, 500 by each process.
    name, rounds = "interop-counter", 500
    logs = [tmp_path / f"{n}.log" for n in range(4)]
    processes = [
        any_fleet.node_process("counter", name, str(rounds), str(logs[0])),
        any_fleet.python_process("counter", name, str(rounds), str(logs[1])),
        any_fleet.node_process("counter", name, str(rounds), str(logs[2])),
        any_fleet.python_process("counter", name, str(rounds), str(logs[3])),
    ]
    for process in processes:
        assert read(process) == ["ready"]
    for process in processes:
        send(process, "go")
    for process in processes:
        assert read(process) == ["done"]
        process.wait(timeout=30)
        assert process.returncode == 0

    with data_client(any_fleet) as data:
        assert int(data.get("interop:counter")) == 4 * rounds  # no lost update
        assert data.get("interop:overlaps") is None  # nobody was inside with another
    lines = [line.split() for log in logs for line in log.read_text().splitlines()]
    entries = sorted(
        (int(seq), int(fence), token, head, language) for seq, fence, token, head, language in lines
    )
    assert [entry[0] for entry in entries] == list(range(1, 4 * rounds + 1))
    fences = [entry[1] for entry in entries]
    assert all(a < b for a, b in itertools.pairwise(fences)), "fencing tokens strictly increase"
    # Queue order: whoever was first in the queue when a holder released is the next holder.
    handoffs = [(a, b) for a, b in itertools.pairwise(entries) if a[3] != "-"]
    assert [b[2] for _, b in handoffs] == [a[3] for a, _ in handoffs]
    crossings = {(a[4], b[4]) for a, b in handoffs if a[4] != b[4]}
    assert crossings == {("node", "python"), ("python", "node")}, "handed across languages"


def data_client(fleet: Fleet) -> Any:
    if fleet.kind == "cluster":
        return redis.RedisCluster.from_url(fleet.url)
    return redis.Redis.from_url(fleet.url)


def test_a_node_holder_killed_while_holding_is_released_by_its_lease(any_fleet: Fleet) -> None:
    holder = any_fleet.node_process("hold", "killed-holder", "1", "crashes")
    held, fence, _ = read(holder)
    assert held == "held"
    taken = time.monotonic()
    assert not distlock.lock("killed-holder", ttl=5).acquire(wait=0)
    holder.kill()
    holder.wait()
    successor = distlock.lock("killed-holder", ttl=5)
    assert successor.acquire(wait=5)
    waited = time.monotonic() - taken
    assert 0.8 <= waited <= 1.5, f"taken over {waited:.2f}s after a 1 s lease began"
    assert successor.fencing_token > int(fence)
    successor.release()


def test_node_reads_who_holds_a_lock_python_took(any_fleet: Fleet) -> None:
    """The Node client's holder() reads a Python holder's metadata, the waiter count, and the
    shared marker while Python readers hold the lock."""

    def node_holder(name: str) -> Any:
        process = any_fleet.node_process("holder", name)
        line = process.stdout.readline() if process.stdout else ""
        assert process.wait() == 0, f"node holder {name!r} failed"
        return json.loads(line)

    assert node_holder("read-me") is None
    with distlock.lock("read-me", ttl=10, purpose="python holds it") as held:
        found = node_holder("read-me")
        assert found["purpose"] == "python holds it"
        assert found["pid"] == os.getpid()
        assert int(found["fencingToken"]) == held.fencing_token
        assert found["waiters"] == 0
    with distlock.lock("read-me", shared=True, ttl=10):
        assert node_holder("read-me") == {"shared": True}


# --- one round trip, either way -----------------------------------------------------------
# The proxy adds 150 ms each way: a second round trip would take 0.6 s at least, and 1.8
# round trips (0.54 s) leave 240 ms for a loaded machine to schedule the processes. 1.6 (180
# ms of room) once took 0.49 s beside a busy loop, and 50 ms each way failed at a load of 7-8.
# (300 ms each way is no cure: there the handoff took two round trips, 1.19 s, in 3 runs of 3;
# why is not established yet.)
LATENCY = 0.15
ROUND_TRIP = 2 * LATENCY
BOUND = 1.8 * ROUND_TRIP


@pytest.fixture
def far(settings: Any, redis_server: RedisServer) -> Iterator[TcpProxy]:
    """A proxy in front of the tests' server; DISTLOCK goes through it (no delay yet)."""
    redis_server.flushall()
    with TcpProxy(("127.0.0.1", redis_server.port)) as proxy:
        settings.DISTLOCK, settings.CACHES = distlock_settings("redis", proxy.url)
        locks.reset()
        yield proxy
        locks.reset()


def test_a_python_release_hands_a_node_waiter_the_lock_in_one_round_trip(
    node_client: Node, far: TcpProxy
) -> None:
    # Acceptance 3, Python to Node.js.
    fleet = Fleet(node_client, "redis", far.url, [])
    try:
        waiter = fleet.node_process("waiter", "far-handoff")
        assert read(waiter) == ["ready"]
        for latency, settle in ((0.0, 0.2), (LATENCY, 1.2)):  # a round to connect, then measure
            far.latency = latency
            holder = distlock.lock("far-handoff", ttl=5)
            assert holder.acquire(wait=0)
            send(waiter, "go")
            time.sleep(settle)  # the waiter is queued and blocked on its wake-up list
            released = time.time()
            holder.release()
            acquired, at = read(waiter)
            assert acquired == "acquired"
            assert read(waiter) == ["released"]
        delay = float(at) - released
    finally:
        end_processes(fleet.started)
    assert 0.9 * ROUND_TRIP <= delay < BOUND, f"handoff took {delay:.3f}s"


def test_a_node_release_hands_a_python_waiter_the_lock_in_one_round_trip(
    node_client: Node, far: TcpProxy
) -> None:
    # Acceptance 3, Node.js to Python.
    fleet = Fleet(node_client, "redis", far.url, [])
    try:
        for latency in (0.0, LATENCY):  # a round to connect and load the scripts, then measure
            far.latency = 0.0
            holder = fleet.node_process("hold", "far-handoff-back", "5", "handoff")
            assert read(holder)[0] == "held"
            far.latency = latency
            acquired_at: list[float] = []
            waiter = threading.Thread(target=wait_for, args=("far-handoff-back", acquired_at))
            waiter.start()
            time.sleep(1.2)  # queued and blocked, well before its block ends
            send(holder, "release")
            releasing, at = read(holder)
            assert releasing == "releasing"
            assert read(holder) == ["released"]
            waiter.join()
            assert acquired_at, "the Python waiter never got the lock"
            delay = acquired_at[0] - float(at)
    finally:
        end_processes(fleet.started)
    assert 0.9 * ROUND_TRIP <= delay < BOUND, f"handoff took {delay:.3f}s"


def wait_for(name: str, acquired_at: list[float]) -> None:
    lock = distlock.lock(name, ttl=5)
    if lock.acquire(wait=5):
        acquired_at.append(time.time())
        lock.release()


@pytest.mark.slow
class ServerClockStepped(UserWarning):
    """The slow waiter's test failed while the server's clock stepped: it ran once more."""


@pytest.mark.filterwarnings("always::tests.interop.test_interop.ServerClockStepped")
def test_a_node_waiter_whose_clock_runs_one_percent_slow_counts_no_lease_past_the_servers(
    fleet: Fleet,
) -> None:
    """The Node.js waiter (performance.now() 1% slow) waits 10 s for a Python release, then
    holds a 1 s lease: once the server's key is gone, leaseLeft() is 0. (Projecting the wait
    at one rate, its START was ~100 ms late: docs/protocol.md, "The drift allowance".)

    The server's clock is its wall clock, which this VM's host or NTP may step: a step forward
    during the wait that the client cannot see (smaller than its grant reply's delay) costs
    up to that delay, which the protocol does not cover. A failure measured with such a step
    runs once more, with a warning that names it; a second one fails, naming both."""
    left, step = slow_waiter_left(fleet, "node-slow-clock")
    if left != 0.0 and step > STEPPED_MS:
        warnings.warn(f"{stepped(left, step)}: run again", ServerClockStepped, stacklevel=1)
        left, again = slow_waiter_left(fleet, "node-slow-clock")
        assert left == 0.0, f"{stepped(left, again)} (the first run: {step:+.0f} ms)"
    assert left == 0.0, stepped(left, step)


STEPPED_MS = 5  # more than two TIME round trips can make of a steady clock


def slow_waiter_left(fleet: Fleet, name: str) -> tuple[float, float]:
    """Queue a 1% slow Node.js waiter, release after 10 s: return its leaseLeft() once the
    key is gone, and how much further the server's clock moved than this process's."""
    waiter, holder = queued_slow_waiter(fleet, name)
    with redis.Redis.from_url(fleet.url) as server:
        began = clocks(server)
        time.sleep(10)
        holder.release()
        step = stepped_ms(server, began)
    assert read(waiter) == ["acquired"]
    said, left = read(waiter)
    assert said == "left"
    return float(left), step


def stepped(left: float, step: float) -> str:
    return (
        f"leaseLeft() was {left} s once the key was gone; the server's clock ran {step:+.0f} ms"
        " against the test's over the wait"
    )


def test_a_node_waiter_counts_no_lease_past_the_servers_after_the_servers_clock_steps_forward(
    fleet: Fleet,
) -> None:
    """The same 1% slow waiter, whose clock stands still 500 ms during its wait: the server's
    clock (Redis' TIME, the wall clock) stepped 500 ms forward, as it sees it. Once the key is
    gone, leaseLeft() is 0: a START projected past the grant's reply counts from the send.
    (Without that fallback, leaseLeft() was still 0.48 s: START ~500 ms late.) The step is
    larger than any delay of the grant's reply: a step smaller than that delay is not seen,
    and costs up to that delay (docs/protocol.md, "The drift allowance")."""
    waiter, holder = queued_slow_waiter(fleet, "node-stepped-clock", "500")
    send(waiter, "stall")
    assert read(waiter) == ["stalled"]
    time.sleep(1)  # the stall is over
    holder.release()
    assert read(waiter) == ["acquired"]
    said, left = read(waiter)
    assert (said, float(left)) == ("left", 0.0)


def queued_slow_waiter(
    fleet: Fleet, name: str, *stall_ms: str
) -> tuple[subprocess.Popen[str], distlock.Lock]:
    """Return a Node.js slowwaiter for a 1 s lease of ``name``, queued (its clock pair taken)
    behind a Python holder, and that holder."""
    holder = distlock.lock(name, ttl=60)
    assert holder.acquire(wait=0)
    waiter = fleet.node_process("slowwaiter", name, "1", *stall_ms)
    assert read(waiter) == ["ready"]
    deadline = time.monotonic() + 20
    while (info := holder.holder()) is None or not info.waiters:  # queued: clock pair taken
        assert time.monotonic() < deadline, "the Node.js waiter never queued"
        time.sleep(0.01)
    return waiter, holder


def clocks(server: redis.Redis) -> tuple[float, float]:
    """(this process's monotonic clock, the server's TIME), both ms, read one after the other."""
    local = time.monotonic() * 1000
    seconds, micros = server.time()
    return local, seconds * 1000 + micros / 1000


def stepped_ms(server: redis.Redis, began: tuple[float, float]) -> float:
    """How many ms more the server's clock moved than this process's since ``began``."""
    local, server_ms = clocks(server)
    return (server_ms - began[1]) - (local - began[0])


# --- what operators see -------------------------------------------------------------------


@pytest.fixture
def node_holder(fleet: Fleet) -> Iterator[tuple[int, int]]:
    """A Node.js process holding "billing:nightly" for 60 s: (its pid, its fencing token)."""
    holder = fleet.node_process("hold", "billing:nightly", "60", "invoice run (node)")
    held, fence, _ = read(holder)
    assert held == "held"
    yield holder.pid, int(fence)


@pytest.mark.django_db
def test_the_admin_shows_a_node_holder(admin_client: Client, node_holder: tuple[int, int]) -> None:
    pid, fence = node_holder
    response = admin_client.get(reverse("admin:distlock_heldlock_changelist"))
    assert response.status_code == 200
    [shown] = [row.info for row in response.context["cl"].rows]
    assert (shown.name, shown.pid, shown.thread) == ("billing:nightly", pid, "main")
    assert (shown.purpose, shown.fencing_token) == ("invoice run (node)", fence)
    assert shown.host == os.uname().nodename
    content = response.content.decode()
    assert f"pid {pid}, thread main" in content and "invoice run (node)" in content


def test_distlock_list_shows_a_node_holder(node_holder: tuple[int, int]) -> None:
    pid, fence = node_holder
    out = io.StringIO()
    call_command("distlock", "list", "--json", stdout=out)
    [entry] = json.loads(out.getvalue())
    assert entry["name"] == "billing:nightly"
    assert (entry["pid"], entry["purpose"], entry["fencing_token"]) == (
        pid,
        "invoice run (node)",
        fence,
    )
    out = io.StringIO()
    call_command("distlock", "list", stdout=out)
    assert "invoice run (node)" in out.getvalue()
