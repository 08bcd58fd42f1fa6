"""``manage.py distlock lead NAME -- COMMAND``: 3 real "hosts" (processes), each reaching
Redis through a TCP proxy of its own (to cut one off), running a child that appends to a
file once a second; the file tells which child ran when."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import psutil
import pytest
from django.core.management import CommandError, call_command

import distlock
from devkit.processes import child_env, end_processes, start_process
from devkit.redis_server import RedisServer
from devkit.tcp_proxy import TcpProxy
from tests.support.lock_helpers import holder_index

TTL = 2.0
LOCK = "scheduler"
# The child: "start PID TIME", then "tick PID TIME" every second, "stop PID TIME" on SIGTERM.
APPENDER = """
import os, signal, sys, time
def write(kind):
    with open(sys.argv[1], "a") as out:
        out.write(f"{kind} {os.getpid()} {time.time():.6f}\\n")
def stop(signum, frame):
    write("stop")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
write("start")
while True:
    time.sleep(1)
    write("tick")
"""
pytestmark = pytest.mark.django_db(databases=[])


class Hosts:
    """``python -m django distlock lead`` processes (tests.support.env_settings)."""

    def __init__(self, server: RedisServer, directory: Path) -> None:
        self.server = server
        self.file = directory / "appended.txt"
        self.proxies: list[TcpProxy] = []
        self.processes: list[subprocess.Popen[str]] = []

    def start(self, *child: str, ttl: float = TTL) -> subprocess.Popen[str]:
        proxy = TcpProxy(self.server.address).start()
        self.proxies.append(proxy)
        env = child_env(kind="redis", url=proxy.url, settings="tests.support.env_settings")
        command = child or (sys.executable, "-c", APPENDER, str(self.file))
        process = start_process(
            [
                sys.executable,
                "-m",
                "django",
                "distlock",
                "lead",
                LOCK,
                "--ttl",
                str(ttl),
                "--grace",
                "1",
                "--",
                *command,
            ],
            env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.processes.append(process)
        return process

    def leading(self, other_than: int | None = None) -> int:
        """Return the index of the host that leads (once it is not ``other_than``)."""
        return holder_index(LOCK, self.processes, other_than)

    def lines(self) -> list[tuple[str, int, float]]:
        text = self.file.read_text() if self.file.exists() else ""
        return [
            (kind, int(pid), float(when))
            for kind, pid, when in (line.split() for line in text.splitlines())
        ]

    def wait_for(self, kind: str, after: float, timeout: float = 15) -> tuple[str, int, float]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [line for line in self.lines() if line[0] == kind and line[2] > after]
            if found:
                return found[0]
            time.sleep(0.02)
        raise AssertionError(f"no {kind!r} line after {after} within {timeout}s")

    def stop(self) -> None:
        end_processes(self.processes, grace=10)
        for proxy in self.proxies:
            proxy.close()


@pytest.fixture
def hosts(private_redis: RedisServer, tmp_path: Path) -> Iterator[Hosts]:
    group = Hosts(private_redis, tmp_path)
    yield group
    group.stop()


def children(
    lines: list[tuple[str, int, float]], ended: dict[int, float]
) -> list[tuple[float, float, int]]:
    """Return (start, end, pid) of each child: its "stop" line, else when it was killed
    (``ended``, by pid), else one second after its last line (it was still running)."""
    spans: dict[int, list[float]] = {}
    stops: dict[int, float] = {}
    for kind, pid, when in lines:
        spans.setdefault(pid, []).append(when)
        if kind == "stop":
            stops[pid] = when
    return sorted(
        (min(times), stops.get(pid, ended.get(pid, max(times) + 1.0)), pid)
        for pid, times in spans.items()
    )


def test_one_child_at_a_time_with_failover(hosts: Hosts) -> None:
    for _ in range(3):
        hosts.start()
    first = hosts.leading()
    first_child = hosts.wait_for("start", 0)
    time.sleep(2.5)

    # SIGKILL of the leading host: its child dies with it, another host's child starts.
    hosts.processes[first].kill()
    killed_at = time.time()
    second = hosts.leading(other_than=first)
    second_child = hosts.wait_for("start", killed_at)
    assert second_child[2] - killed_at <= TTL + 1
    assert (
        not psutil.pid_exists(first_child[1])
        or psutil.Process(first_child[1]).status() == psutil.STATUS_ZOMBIE
    )
    time.sleep(2.5)

    # The leading host loses Redis: its child is stopped before another host's starts.
    hosts.proxies[second].blackhole = True
    cut_at = time.time()
    stopped = hosts.wait_for("stop", cut_at)
    assert stopped[1] == second_child[1]
    third_child = hosts.wait_for("start", cut_at)
    assert third_child[2] - cut_at <= TTL + 1
    assert hosts.leading(other_than=second) not in (first, second)
    time.sleep(1.5)

    spans = children(hosts.lines(), {first_child[1]: killed_at})
    assert [pid for _, _, pid in spans] == [first_child[1], second_child[1], third_child[1]]
    for (_, end, pid), (start, _, next_pid) in itertools.pairwise(spans):
        assert end < start, f"children {pid} and {next_pid} ran at the same time"
    ticks = [line for line in hosts.lines() if line[0] == "tick"]
    assert len(ticks) >= 4


def test_the_child_exiting_gives_the_leadership_up(hosts: Hosts) -> None:
    host = hosts.start(sys.executable, "-c", "import time; time.sleep(1.5); raise SystemExit(3)")
    hosts.leading()
    info = distlock.locks["default"].info(LOCK)
    assert info.purpose.startswith(f"leader of {LOCK}: ")
    _, err = host.communicate(timeout=20)
    assert host.returncode == 3, err
    assert "exited with status 3; giving up the leadership" in err
    assert distlock.locks["default"].info(LOCK) is None


def test_sigterm_stops_the_child_and_resigns(hosts: Hosts) -> None:
    host = hosts.start()
    hosts.leading()
    child = hosts.wait_for("start", 0)
    host.send_signal(signal.SIGTERM)
    _, err = host.communicate(timeout=20)
    assert host.returncode == 128 + signal.SIGTERM, err
    assert [line[0] for line in hosts.lines() if line[1] == child[1]][-1] == "stop"
    assert distlock.locks["default"].info(LOCK) is None


def test_a_waiting_host_says_whom_it_waits_for_and_ctrl_c_starts_nothing(hosts: Hosts) -> None:
    first = hosts.start()
    hosts.leading()
    child = hosts.wait_for("start", 0)
    second = hosts.start()
    waiting = second.stderr.readline()  # once the second host has found the lock held
    leader = distlock.locks["default"].info(LOCK)
    assert waiting == (
        f"distlock lead: Waiting to lead {LOCK!r}: {leader.host} pid {first.pid} leads it "
        f"(term {leader.fencing_token}); the command starts once this process leads.\n"
    )

    second.send_signal(signal.SIGINT)
    _, err = second.communicate(timeout=20)
    assert second.returncode == 130, err
    assert err == (
        f"CommandError: distlock lead {LOCK!r}: interrupted by SIGINT while waiting "
        "to lead; no command was started.\n"
    )
    assert {pid for _, pid, _ in hosts.lines()} == {child[1]}, "only the leader's child ran"
    assert distlock.locks["default"].info(LOCK).pid == first.pid, "the leader leads on"


def test_what_to_run_is_checked_first(redis_backend: str) -> None:
    with pytest.raises(CommandError, match="name the command to run"):
        call_command("distlock", "lead", LOCK, "--")
    with pytest.raises(CommandError, match="--grace must be >= 0"):
        call_command("distlock", "lead", LOCK, "--grace", "-1", "--", "true")
    with pytest.raises(CommandError, match="no alias 'nope'"):
        call_command("distlock", "lead", LOCK, "--using", "nope", "--", "true")
    with pytest.raises(CommandError, match="exit status 127") as failed:
        call_command("distlock", "lead", LOCK, "--", "/nonexistent/command")
    assert failed.value.returncode == 127
    assert distlock.locks["default"].info(LOCK) is None


# A busy loop, one per core beside the test; it ends by itself after this many seconds.
BURNER = """
import sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass
"""


@pytest.fixture
def cpu_burners() -> Iterator[None]:
    burners = [
        start_process([sys.executable, "-c", BURNER, "120"]) for _ in range(os.cpu_count() or 2)
    ]
    yield
    end_processes(burners)


def test_force_release_with_no_other_host_stops_the_child_and_starts_a_new_one(
    hosts: Hosts, cpu_burners: None
) -> None:
    """Issue 33, item 2: the lease is force-released and no other host waits, so the same
    host wins again at once, under a new term. Its child must be stopped all the same (within
    1 s: the renewals, every third of the 4.5 s lease, would be too late) and a new one
    started under the new term: 10 times in a row, beside a busy loop on every core."""
    host = hosts.start(ttl=4.5)
    hosts.leading()
    child = hosts.wait_for("start", 0)
    terms = [distlock.locks["default"].info(LOCK).fencing_token]
    for trial in range(10):
        asked_at = time.time()  # the release is done when call_command returns
        call_command("distlock", "release", LOCK, "--yes", stdout=StringIO())
        stopped = hosts.wait_for("stop", asked_at)
        assert stopped[1] == child[1], f"trial {trial}: another child stopped"
        assert stopped[2] - asked_at <= 1.0, (
            f"trial {trial}: stopped {stopped[2] - asked_at:.2f} s after the release"
        )
        new = hosts.wait_for("start", stopped[2])
        assert new[1] != child[1]
        holder = distlock.locks["default"].info(LOCK)
        assert holder.pid == host.pid and holder.fencing_token > terms[-1]
        terms.append(holder.fencing_token)
        child = new

    host.send_signal(signal.SIGTERM)
    _, err = host.communicate(timeout=30)
    started = [
        int(term) for term in re.findall(r"Leading 'scheduler' \(term (\d+)\): started", err)
    ]
    assert started == terms, err
    assert err.count("Lost the leadership ('scheduler', term ") == 10, err
    spans = children(hosts.lines(), {})
    for (_, end, pid), (start, _, next_pid) in itertools.pairwise(spans):
        assert end < start, f"children {pid} and {next_pid} ran at the same time"
