"""Round trips per operation: time = a + k x RTT, through a proxy that delays every packet.

A proxy per Redis server (benchmarks/latency_proxy.py, a process of its own) adds a one-way
delay d each way, so a round trip costs RTT = 2d more. At every delay of the profile, in
shuffled orders (delays within a round, cases within a delay), it times one call after
another:

- a bare PING and a bare SET NX PX + DEL pair through redis-py's client: the calibration;
- an uncontended acquire+release of distlock and each anchor, on one server;
- the handoff: a holder thread calls release() while a waiter thread is blocked in
  acquire(); the time from the start of release() until the waiter's acquire() returns;
- distlock's handoff through Sentinel: a sentinel (not delayed: clients ask it only when
  they connect) monitors the first server at its proxy's address, so the clients that it
  points at the master go through the proxy;
- distlock's handoff on a Redis Cluster of 3 masters, each announcing its proxy's port
  (``cluster-announce-port``), so the slot map sends every call through a proxy;
- Redlock acquire+release over 3 and 5 servers (distlock's RedlockBackend, pottery,
  redlock-py);
- distlock's shared locks (issue 25): a shared acquire+release, and a writer's handoff to a
  batch of BATCH_READERS readers blocked behind it: the time from the start of the writer's
  release() until the last reader's acquire() returns (one release lets them all in, each
  learning it holds from the reply that wakes it).

Per case, a least-squares line through the median time at each delay gives k, the round
trips the operation costs. A process woken after a pause runs slower, so even a PING reads a
little above 1: every k is also divided by the PING's k from the same run (``calibrated``,
what the table shows), and fitted again over the larger delays only (from
``latency_large_ms``), where that bias weighs less. A waiter that polls (see
anchors.POLLING) is bound by its poll interval, not by round trips: its handoff figures are
reported as measured, with that note.
"""

from __future__ import annotations

import gc
import json
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import redis

from devkit.processes import start_process
from devkit.redis_server import RedisCluster, RedisServer
from devkit.servers import free_port, wait_until

from . import anchors
from .harness import KEY_PREFIX, ROOT, Profile, distlock_aliases, log
from .uncontended import FLOOR, PING

PAIR, HANDOFF = "uncontended acquire+release", "handoff"
HANDOFF_SENTINEL = "handoff through Sentinel"
HANDOFF_CLUSTER = "handoff on a Cluster"
SENTINEL_SERVICE = "bench"
REDLOCK = {3: "Redlock pair, 3 nodes", 5: "Redlock pair, 5 nodes"}
SHARED_PAIR, BATCH_HANDOFF = "shared acquire+release", "handoff to a batch of readers"
BATCH_READERS = 4
CLIENT = "redis-py client"  # who sends the bare commands
# The physical limit of each operation, in round trips.
LIMITS = {
    PING: 1,
    FLOOR: 2,
    PAIR: 2,
    HANDOFF: 1,
    HANDOFF_SENTINEL: 1,
    HANDOFF_CLUSTER: 1,
    REDLOCK[3]: 2,
    REDLOCK[5]: 2,
    SHARED_PAIR: 2,
    BATCH_HANDOFF: 1,
}
OPERATIONS = (
    PAIR,
    HANDOFF,
    HANDOFF_SENTINEL,
    HANDOFF_CLUSTER,
    REDLOCK[3],
    REDLOCK[5],
    SHARED_PAIR,
    BATCH_HANDOFF,
)
NODES = 5
# A handoff's waiter gets this long, plus SETTLE_ROUND_TRIPS, to be waiting before the
# holder releases: queued and blocked (distlock, python-redis-lock) or polling.
SETTLE_S, SETTLE_ROUND_TRIPS = 0.002, 4
HANDOFF_TIMEOUT_S = 10.0
WARMUP_CALLS = 3

Key = tuple[str, str]  # (operation, library)
Case = Callable[[float], list[float]]  # the one-way delay in s -> timings in s


class Proxies:
    """The delaying proxies' process: one proxy per port, all at the same delay."""

    def __init__(self, ports: list[int]) -> None:
        self.process = start_process(
            [sys.executable, "-m", "benchmarks.latency_proxy", *map(str, ports)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.ports: list[int] = json.loads(self._answer())

    def _answer(self) -> str:
        line = self.process.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"the proxy process died (status {self.process.wait()})")
        return line

    def delay(self, seconds: float) -> None:
        self.process.stdin.write(f"{seconds}\n")  # type: ignore[union-attr]
        self.process.stdin.flush()  # type: ignore[union-attr]
        if self._answer().strip() != "ok":
            raise RuntimeError("the proxy process did not take the delay")

    def close(self) -> None:
        self.process.stdin.close()  # type: ignore[union-attr]
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


# --- the cases --------------------------------------------------------------------------
def timed(call: Callable[[], object], count: int) -> list[float]:
    gc.collect()
    clock = time.perf_counter
    timings = []
    for _ in range(count):
        started = clock()
        call()
        timings.append(clock() - started)
    return timings


def handoff(make: Callable[[str], Any], name: str, settle: float) -> float:
    """Seconds from the start of the holder's release() until the waiter's acquire() returns."""
    holder = make(name)
    holder.acquire()
    waiter = make(name)
    woke: list[float] = []

    def wait() -> None:
        waiter.acquire()
        woke.append(time.perf_counter())
        waiter.release()

    thread = threading.Thread(target=wait, name="latency-waiter", daemon=True)
    thread.start()
    time.sleep(settle)
    released = time.perf_counter()
    holder.release()
    thread.join(HANDOFF_TIMEOUT_S)
    if not woke:
        raise RuntimeError(f"a waiter of {name!r} did not get the lock in {HANDOFF_TIMEOUT_S} s")
    return woke[0] - released


def batch_handoff(name: str, settle: float) -> float:
    """Seconds from the start of a writer's release() until the last of BATCH_READERS
    readers blocked behind it has returned from acquire() (each holding, all at once)."""
    import distlock

    writer = distlock.lock(name, ttl=anchors.TTL)
    writer.acquire()
    readers = [distlock.lock(name, ttl=anchors.TTL, shared=True) for _ in range(BATCH_READERS)]
    woke: list[float] = []
    inside = threading.Barrier(BATCH_READERS + 1, timeout=HANDOFF_TIMEOUT_S)

    def read(reader: Any) -> None:
        reader.acquire()
        woke.append(time.perf_counter())
        inside.wait()  # all hold together before any lets go
        reader.release()

    threads = [
        threading.Thread(target=read, args=(reader,), name="latency-reader", daemon=True)
        for reader in readers
    ]
    for thread in threads:
        thread.start()
    time.sleep(settle)
    released = time.perf_counter()
    writer.release()
    inside.wait()
    for thread in threads:
        thread.join(HANDOFF_TIMEOUT_S)
    return max(woke) - released


def cases(urls: list[str], profile: Profile) -> dict[Key, Case]:
    """Every case, on the proxied ``urls`` (the first one is the one-server case's)."""
    client = redis.Redis.from_url(urls[0])

    def set_and_delete() -> None:
        client.set("latency:floor", "token", nx=True, px=10_000)
        client.delete("latency:floor")

    calls: dict[Key, Callable[[], object]] = {
        (PING, CLIENT): client.ping,
        (FLOOR, CLIENT): set_and_delete,
    }
    found: dict[Key, Case] = {}
    for library in anchors.LATENCY_LIBRARIES:
        make = anchors.lock_factory(library, urls[0])
        name = f"latency:{library.split()[0]}"  # redis-py's and redlock-py's keys are bare
        calls[(PAIR, library)] = anchors.pair(make, lambda name=name: f"{name}:pair")
        found[(HANDOFF, library)] = _handoffs(make, f"{name}:handoff", profile.latency_handoffs)
    for operation, alias in ((HANDOFF_SENTINEL, "sentinel"), (HANDOFF_CLUSTER, "cluster")):
        found[(operation, anchors.DISTLOCK)] = _handoffs(
            anchors.distlock_factory(alias), f"latency:distlock:{alias}", profile.latency_handoffs
        )
    shared = anchors.distlock_factory(shared=True)
    calls[(SHARED_PAIR, anchors.DISTLOCK)] = anchors.pair(shared, lambda: "latency:shared:pair")
    found[(BATCH_HANDOFF, anchors.DISTLOCK)] = _batch_handoffs(profile.latency_handoffs)
    for nodes, operation in REDLOCK.items():
        for library in anchors.REDLOCK_LIBRARIES:
            make = anchors.redlock_factory(library, urls[:nodes], using=f"redlock{nodes}")
            name = f"latency:{library.split()[0]}:redlock"
            calls[(operation, library)] = anchors.pair(make, lambda name=name: name)
    for key, call in calls.items():
        for _ in range(WARMUP_CALLS):  # connections, scripts loaded
            call()
        found[key] = lambda delay, call=call: timed(call, profile.latency_batch)
    for key in found:
        if key[0] in (HANDOFF, BATCH_HANDOFF):
            found[key](0.0)
    return found


def _handoffs(make: Callable[[str], Any], name: str, count: int) -> Case:
    def case(delay: float) -> list[float]:
        settle = SETTLE_S + SETTLE_ROUND_TRIPS * 2 * delay
        return [handoff(make, name, settle) for _ in range(count)]

    return case


def _batch_handoffs(count: int) -> Case:
    def case(delay: float) -> list[float]:
        settle = SETTLE_S + SETTLE_ROUND_TRIPS * 2 * delay
        return [batch_handoff("latency:distlock:batch", settle) for _ in range(count)]

    return case


def measure(
    found: dict[Key, Case], proxies: Proxies, profile: Profile
) -> dict[Key, dict[float, list[float]]]:
    delays = list(profile.latency_delays_ms)
    samples: dict[Key, dict[float, list[float]]] = {key: {d: [] for d in delays} for key in found}
    shuffle = random.Random(13).shuffle
    order = list(found)
    for round_number in range(profile.latency_rounds):
        shuffle(delays)
        for delay in delays:
            proxies.delay(delay / 1000)
            shuffle(order)
            for key in order:
                samples[key][delay] += found[key](delay / 1000)
        log(f"latency round {round_number + 1}/{profile.latency_rounds}")
    proxies.delay(0)
    return samples


# --- the fit ----------------------------------------------------------------------------
def fit(medians: dict[float, float], from_ms: float = 0.0) -> tuple[float, float]:
    """Least squares through (RTT, median time) for the delays from ``from_ms`` up: the
    intercept a (s) and the slope k (round trips)."""
    points = sorted(
        (2 * delay / 1000, median) for delay, median in medians.items() if delay >= from_ms
    )
    if len(points) < 2:
        return float("nan"), float("nan")
    slope, intercept = statistics.linear_regression([x for x, _ in points], [y for _, y in points])
    return intercept, slope


def summarise(samples: dict[Key, dict[float, list[float]]], profile: Profile) -> dict[str, Any]:
    medians = {
        key: {delay: statistics.median(times) for delay, times in by_delay.items()}
        for key, by_delay in samples.items()
    }
    ping_k = fit(medians[(PING, CLIENT)])[1]
    ping_k_large = fit(medians[(PING, CLIENT)], profile.latency_large_ms)[1]
    fits: dict[str, dict[str, Any]] = {}
    for (operation, library), by_delay in medians.items():
        a, k = fit(by_delay)
        k_large = fit(by_delay, profile.latency_large_ms)[1]
        fits.setdefault(operation, {})[library] = {
            "median_ms": {
                f"{delay:g}": round(value * 1000, 3) for delay, value in sorted(by_delay.items())
            },
            "samples_per_delay": min(
                len(times) for times in samples[(operation, library)].values()
            ),
            "a_ms": round(a * 1000, 3),
            # (+ 0.0: no "-0" for a flat line)
            "k": round(k, 3) + 0.0,
            "calibrated": round(k / ping_k, 3) + 0.0,
            "k_large": round(k_large, 3) + 0.0,
            "calibrated_large": round(k_large / ping_k_large, 3) + 0.0,
            "poll_bound": operation == HANDOFF and library in anchors.POLLING,
        }
    return {
        "delays_ms": list(profile.latency_delays_ms),
        "large_from_ms": profile.latency_large_ms,
        "ping_k": round(ping_k, 3),
        "ping_k_large": round(ping_k_large, 3),
        "limits": LIMITS,
        "polling": anchors.POLLING,
        "fits": fits,
    }


# --- the section ------------------------------------------------------------------------
def run(profile: Profile, url: str) -> dict[str, Any]:
    extra = [RedisServer() for _ in range(NODES - 1)]
    sentinel = RedisServer(["--sentinel"])
    sentinel.config_file = sentinel.directory / "sentinel.conf"
    cluster = None
    proxies = None
    try:
        for server in extra:
            server.start()
        cluster_ports = [free_port(cluster_bus=True) for _ in range(3)]
        ports = [urlsplit(url).port or 6379, *(server.port for server in extra), *cluster_ports]
        proxies = Proxies(ports)
        urls = [f"redis://127.0.0.1:{port}/0" for port in proxies.ports[:NODES]]
        _start_sentinel(sentinel, proxies.ports[0])
        # Each node announces its proxy, so the slot map sends every call through one.
        cluster = RedisCluster(3, ports=cluster_ports, announce_ports=proxies.ports[NODES:])
        cluster.start()
        _wait_for_proxied_slots(cluster, proxies.ports[NODES:])
        with distlock_aliases(_aliases(urls, sentinel.address, proxies.ports[NODES])):
            samples = measure(cases(urls, profile), proxies, profile)
    finally:
        if proxies:
            proxies.close()
        for server in (*extra, sentinel):
            server.stop()
        if cluster:
            cluster.stop()
    return summarise(samples, profile)


def _wait_for_proxied_slots(cluster: RedisCluster, ports: list[int]) -> None:
    """Return once every node's slot map names only the proxies ``ports``."""

    def proxied(node: RedisServer) -> bool:
        with node.client() as client:
            slots = client.execute_command("CLUSTER", "SLOTS")
        return all(int(master[1]) in ports for *_, master in slots)

    for node in cluster.nodes:
        wait_until(lambda node=node: proxied(node), 20.0, "the cluster to announce its proxies")


def _start_sentinel(sentinel: RedisServer, master_port: int) -> None:
    """Start ``sentinel`` monitoring the master at ``master_port`` (its proxy); return once
    it answers for the master there."""
    assert sentinel.config_file is not None
    sentinel.config_file.write_text(
        "\n".join(
            [
                "sentinel resolve-hostnames no",
                f"sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {master_port} 1",
                # delays are not outages
                f"sentinel down-after-milliseconds {SENTINEL_SERVICE} 60000",
                "",
            ]
        )
    )
    sentinel.start()

    def knows_master() -> bool:
        with sentinel.client() as client:
            found = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SENTINEL_SERVICE)
        return bool(found) and int(found[1]) == master_port

    wait_until(knows_master, 10.0, "the sentinel to know the master")


def _aliases(
    urls: list[str], sentinel: tuple[str, int], cluster_port: int
) -> dict[str, dict[str, Any]]:
    """distlock's default alias on the first proxied server, the same server through the
    sentinel, the proxied cluster, and Redlock over 3 and 5."""
    aliases: dict[str, dict[str, Any]] = {
        "default": {
            "BACKEND": "distlock.backends.redis.RedisBackend",
            "LOCATION": urls[0],
            "KEY_PREFIX": KEY_PREFIX,
        },
        "sentinel": {
            "BACKEND": "distlock.backends.redis.RedisBackend",
            "LOCATION": f"redis://{SENTINEL_SERVICE}/0",
            "OPTIONS": {"SENTINELS": [sentinel]},
            "KEY_PREFIX": KEY_PREFIX,
        },
        "cluster": {
            "BACKEND": "distlock.backends.redis.RedisBackend",
            "LOCATION": f"redis://127.0.0.1:{cluster_port}/0",
            "OPTIONS": {"CLUSTER": True},
            "KEY_PREFIX": KEY_PREFIX,
        },
    }
    for nodes in REDLOCK:
        aliases[f"redlock{nodes}"] = {
            "BACKEND": "distlock.backends.redlock.RedlockBackend",
            "LOCATION": urls[:nodes],
            "KEY_PREFIX": KEY_PREFIX,
        }
    return aliases
