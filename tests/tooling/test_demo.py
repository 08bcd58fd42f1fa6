"""``scripts/demo`` started in the background from a script, as a CI job or a tmux helper
would: it serves the demo, tells other commands where its Redis is, and stops everything it
started (runserver and redis-server) on SIGINT and on SIGTERM.

The test's demo runs beside the user's, if one runs in this clone (the README has the user
run the tests "in another shell" while the demo serves): its Redis URL goes to a file of the
test's own (DEMO_REDIS_URL_FILE), and the clone's ``.demo-redis-url`` is left as it was."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.paths import ROOT
from devkit.processes import run_process, start_process
from devkit.servers import free_port

pytestmark = pytest.mark.timeout(300)
URL_FILE = ROOT / ".demo-redis-url"


class Demo:
    """scripts/demo run as ``scripts/demo &`` by a non-interactive bash, in a session of its
    own: every process it starts is in that session's process group."""

    def __init__(self, tmp_path: Path) -> None:
        self.port = free_port()
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in {"REDIS_URL", "DJANGO_SETTINGS_MODULE"}
        }
        self.url_file = tmp_path / "demo-redis-url"
        env.update(
            DEMO_REDIS_URL_FILE=str(self.url_file),
            DEMO_PORT=str(self.port),
            DJANGO_DB_PATH=str(tmp_path / "demo.sqlite3"),
            DEMO_ADMIN_PASSWORD="demo-pw",
        )
        self.script = start_process(
            ["bash", "-c", 'scripts/demo & echo "demo pid $!"; wait'],
            env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.output: list[str] = []
        self.pid = int(self.read_until(r"^demo pid (\d+)$").group(1))

    def read_until(self, pattern: str, timeout: float = 120) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.script.stdout.readline()
            assert line, "scripts/demo ended:\n" + "".join(self.output)
            self.output.append(line)
            found = re.search(pattern, line.rstrip("\n"))
            if found:
                return found
        raise AssertionError(f"no line matching {pattern!r}:\n" + "".join(self.output))

    def group_alive(self) -> bool:
        try:
            os.killpg(self.script.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def kill_everything(self) -> None:
        """What a failed test leaves: nothing (SIGKILL to the whole process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.script.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.script.communicate(timeout=10)


def users_demo() -> str | None:
    """What the clone's .demo-redis-url says: the user's running demo, if any."""
    with contextlib.suppress(FileNotFoundError):
        return URL_FILE.read_text()
    return None


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    before = users_demo()
    started = Demo(tmp_path)
    try:
        yield started
    finally:
        started.kill_everything()
    assert users_demo() == before, "the test's demo changed the user's .demo-redis-url"


def answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
        return True
    return False


def home_page(port: int) -> str:
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                return response.read().decode()
        except OSError:
            assert time.monotonic() < deadline, "the demo server never answered"
            time.sleep(0.3)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_the_demo_stops_everything_it_started(demo: Demo, stop: signal.Signals) -> None:
    server = Path(demo.read_until(r"starting (\S+) on 127\.0\.0\.1:").group(1)).name
    redis_port = int(demo.read_until(r"Locks live in redis://127\.0\.0\.1:(\d+)/0").group(1))
    demo.read_until(r"Press Ctrl-C to stop")
    page = home_page(demo.port)
    assert "Coming soon" not in page and "manage.py send_digest" in page
    assert demo.url_file.read_text().strip() == f"redis://127.0.0.1:{redis_port}/0"

    # Another shell of the clone, with no REDIS_URL: its manage.py uses the demo's Redis.
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"REDIS_URL", "DJANGO_SETTINGS_MODULE"}
    }
    env["DEMO_REDIS_URL_FILE"] = str(demo.url_file)
    shell = run_process(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-v",
            "0",
            "-c",
            "import distlock; from django.conf import settings; print(settings.REDIS_URL); "
            "print(distlock.lock('from-another-shell', ttl=5).acquire(wait=0))",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shell.stdout.split() == [f"redis://127.0.0.1:{redis_port}/0", "True"], shell.stderr

    os.kill(demo.pid, stop)  # the demo's own pid, as `kill $demo_pid` in a script would
    demo.script.wait(timeout=30)
    rest, _ = demo.script.communicate(timeout=10)
    deadline = time.monotonic() + 10
    while demo.group_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not demo.group_alive(), (
        "a process of the demo outlived it:\n" + "".join(demo.output) + rest
    )
    assert f"stopping {server} (pid" in rest  # valkey-server when it started one
    assert not answers(demo.port) and not answers(redis_port)
    assert not demo.url_file.exists(), "the URL of a Redis that is gone was left for other shells"
