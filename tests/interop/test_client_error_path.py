"""The error path's MUSTs (docs/protocol.md, "The error path") for the Node.js and Ruby
clients, on real processes and a real server that the test pauses (SIGSTOP: connections are
accepted, nothing is answered):

- **bound it**: one attempt per call, each bounded by the connect timeout C and the read
  timeout R, so an acquire's error reaches its caller at most one failed call (a wait's
  pipeline: BLOCK + R) plus C + R after it began failing; no retry, no offline queue;
- **a release is never sent twice**: a release whose reply timed out is not resent (on a
  reconnect, by the client library), which MONITOR counts once the server runs again;
- **drop the connection**: after a read timeout, no later call reads the abandoned call's
  late reply as its own (tests/faults/test_late_reply.py's idea: a Lua loop keeps the server
  busy past R, the acquire's script runs late and grants its token; every later acquire that
  says it holds must be the server's holder).

Each client gets R = C = 0.5 s (0.2 s for the late reply); the bounds add SLACK_S for two
processes to be scheduled on a loaded machine."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO

import pytest
import redis

from devkit.node import Node
from devkit.paths import ROOT
from devkit.processes import child_env, end_processes, start_process
from devkit.redis_server import RedisServer
from devkit.ruby import Ruby
from tests.faults.test_late_reply import keep_busy

R_S = 0.5  # each client's read timeout, s
C_S = 0.5  # each client's connect timeout, s
SLACK_S = 0.5  # scheduling room on a loaded 2-core machine
WAIT_MS = 2000  # the acquire's wait W
PAUSE_AFTER_S = 0.3  # the "during" case: the server stops this long into the wait
MAX_BLOCK_S = min(0.5, R_S / 2)  # a BLPOP's longest block: MAX_BLOCK <= R / 2
LATE_R_S = 0.2  # the late-reply case's read timeout (tests/faults/test_late_reply.py's)
STUCK_S = 8.0  # how long a call may go on before the test calls it stuck
SCRIPTS = ROOT / "distlock" / "backends" / "redis_ops" / "lua"


@dataclass
class Worker:
    """One client process: lines in on stdin, lines out on stdout (read with a deadline)."""

    process: subprocess.Popen[str]
    lines: list[str]
    errors: IO[str]

    @classmethod
    def start(cls, command: list[str], env: dict[str, str]) -> Worker:
        # A file, not a pipe: a pipe could fill up with a library's logging and stop the worker.
        errors = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by start_worker)
        process = start_process(
            command, env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True
        )
        worker = cls(process, [], errors)
        threading.Thread(target=worker._read, daemon=True).start()
        return worker

    def _read(self) -> None:
        assert self.process.stdout is not None
        with contextlib.suppress(ValueError, OSError):  # closed by end_processes
            for line in self.process.stdout:
                self.lines.append(line.strip())

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def expect(self, timeout: float) -> str | None:
        """The next line, or None if none came within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not self.lines:
            if self.process.poll() is not None:
                time.sleep(0.1)  # the reader thread's last lines
                if self.lines:
                    break
                self.errors.seek(0)
                raise AssertionError(f"the worker ended: {self.errors.read()[-3000:]}")
            if time.monotonic() > deadline:
                return None
            time.sleep(0.005)
        return self.lines.pop(0)


StartWorker = Callable[[str, float, list[str]], Worker]


@pytest.fixture(params=["node", "ruby"])
def client_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def start_worker(
    client_kind: str, request: pytest.FixtureRequest, server: RedisServer
) -> Iterator[StartWorker]:
    """``start_worker(command, read_timeout_s, args)``: a Node.js or Ruby worker process on
    ``server`` (ended after the test)."""
    started: list[Worker] = []

    def start(command: str, timeout: float, args: list[str]) -> Worker:
        if client_kind == "node":
            node: Node = request.getfixturevalue("node_client")
            env = child_env()
            env["DISTLOCK_NODE_URL"] = server.url
            env["DISTLOCK_NODE_TIMEOUT"] = str(timeout)
            env["DISTLOCK_NODE_CONNECT_TIMEOUT"] = str(C_S)
            script = ROOT / "tests" / "interop" / "node_worker.mjs"
            worker = Worker.start([node.binary, str(script), command, *args], env)
        else:
            ruby: Ruby = request.getfixturevalue("ruby_client")
            script = ROOT / "tests" / "interop" / "ruby_worker.rb"
            library = str(ruby.client / "distlock_client")
            settings = [library, server.url, str(SCRIPTS), str(timeout), str(C_S)]
            worker = Worker.start(
                [ruby.binary, str(script), *settings, command, *args], child_env()
            )
        started.append(worker)
        return worker

    yield start
    server.resume()
    end_processes([worker.process for worker in started])
    for worker in started:
        worker.errors.close()


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A server of this test's own: the test pauses it."""
    server = RedisServer().start()
    yield server
    server.stop()


def outcome(line: str | None) -> tuple[str, float]:
    """("acquired" | "not-acquired" | "released" | "error:CLASS", seconds) from "OUTCOME MS"."""
    assert line is not None
    word, ms = line.split()
    return word, float(ms) / 1000


@pytest.mark.parametrize("when", ["before", "during"])
def test_an_acquire_against_a_paused_server_ends_within_the_bound(
    server: RedisServer, start_worker: StartWorker, when: str
) -> None:
    """Paused before the acquire: its first call fails after R, the give-back after C + R
    at most (step 2 skipped when step 1 got no answer). Paused PAUSE_AFTER_S into a wait
    (the lock held): the pipeline fails after BLOCK + R, then C + R."""
    worker = start_worker("paused", R_S, ["stuck", str(WAIT_MS)])
    assert worker.expect(30) == "ready"
    if when == "during":
        # Another client holds "stuck": take it with a worker of the same kind, so the wait
        # runs the client's own waiting loop.
        other = start_worker("release", R_S, ["stuck"])
        line = other.expect(30)
        assert line is not None and line.startswith("held"), line
    else:
        server.pause()
    began = time.monotonic()
    worker.send("go")
    if when == "during":
        time.sleep(PAUSE_AFTER_S)
        server.pause()
        bound = PAUSE_AFTER_S + MAX_BLOCK_S + R_S + C_S + R_S
    else:
        bound = R_S + C_S + R_S
    line = worker.expect(bound + STUCK_S)
    took = time.monotonic() - began
    print(f"{when}: {line!r} after {took:.2f} s (bound {bound + SLACK_S:.2f} s)")
    assert line is not None, f"the acquire was still pending after {took:.1f} s"
    word, seconds = outcome(line)
    assert word.startswith("error:"), "an acquire whose calls got no answer reports an error"
    assert seconds <= bound + SLACK_S, f"took {seconds:.2f} s, past the bound"


def test_a_release_whose_reply_timed_out_is_sent_once(
    server: RedisServer, start_worker: StartWorker
) -> None:
    worker = start_worker("release", R_S, ["once"])
    line = worker.expect(30)
    assert line is not None and line.startswith("held "), line
    token = line.split()[1]
    seen: list[str] = []
    monitor = threading.Thread(target=watch, args=(server, seen), daemon=True)
    monitor.start()
    time.sleep(0.2)  # MONITOR is on
    server.pause()
    began = time.monotonic()
    worker.send("go")
    line = worker.expect(R_S + STUCK_S)
    took = time.monotonic() - began
    server.resume()
    if line is None:  # still pending: let the server answer it, then count
        line = worker.expect(5)
    with contextlib.suppress(subprocess.TimeoutExpired):
        worker.process.wait(10)  # it ends after the release
    time.sleep(0.3)  # a resend on a new connection arrives meanwhile
    server.client().echo(END)
    monitor.join(10)
    releases = [command for command in seen if token in command]
    print(f"release: {line!r} after {took:.2f} s; sent {len(releases)} time(s)")
    assert len(releases) == 1, f"the release ran {len(releases)} times: {releases}"
    assert took <= R_S + SLACK_S, f"the release took {took:.2f} s (one call: R = {R_S} s)"
    assert outcome(line)[0].startswith("error:"), line


END = "distlock-monitor-end"


def watch(server: RedisServer, seen: list[str]) -> None:
    """Append each command the server runs to ``seen`` until it runs ECHO END."""
    with server.client(socket_timeout=None).monitor() as monitor:
        for event in monitor.listen():
            command = str(event["command"])
            if END in command:
                return
            seen.append(command)


def holder_token(client: redis.Redis, name: str) -> str | None:
    """The token the server's lock key of ``name`` (prefix "test") names, or None."""
    keys = client.keys(f"test:*:lock:{name}")
    if not keys:
        return None
    value = client.get(keys[0])
    return None if value is None else value.decode().split()[0]


def test_a_late_grant_after_a_read_timeout_is_never_believed(
    server: RedisServer, start_worker: StartWorker
) -> None:
    worker = start_worker("lategrant", LATE_R_S, ["late"])
    assert worker.expect(30) == "ready"
    busy = keep_busy(server)  # its script runs after the loop, past the read timeout
    worker.send("go")
    line = worker.expect(STUCK_S)
    assert busy.read_response() == 1  # the server is free again
    busy.disconnect()
    print(f"the acquire during the busy loop: {line!r}")
    assert line is not None, "the acquire was still pending"
    assert outcome(line)[0].startswith("error:"), "a timed-out call is an error"
    data = server.client()
    worker.send("next")
    for _ in range(3):
        line = worker.expect(10)
        assert line is not None
        if line.startswith("believed "):
            assert holder_token(data, "late") == line.split()[1], "believed a hold it has not"
        worker.send("checked")
    assert worker.expect(10) == "done"
