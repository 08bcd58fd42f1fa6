"""A real HTTP server process serving a Django project, for tests and benchmarks.

Unlike pytest-django's ``live_server`` (a thread of the test process), this is a separate
process: ``uvicorn`` for an ASGI application, or ``django runserver --noreload`` (threaded
WSGI), on a free loopback port, configured through environment variables::

    with LiveServerProcess("tests.live_project.asgi:application",
                           settings="tests.live_project.settings",
                           env={"DISTLOCK_TEST_URL": redis_url}) as server:
        urllib.request.urlopen(server.url + "/health/")

Like the redis-server processes of tests/redis_server.py, it runs in its own process group,
is killed at exit and when the process that started it dies.
"""
from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from tests.redis_server import (
    HOST,
    _kill_process,
    _Managed,
    _temporary_directory,
    free_port,
    spawn_managed,
    stop_managed,
)

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 30.0
STOP_TIMEOUT = 5.0


class LiveServerProcess(_Managed):
    """One HTTP server process on 127.0.0.1.

    ``app`` is the ASGI application's ``module:attribute`` (for ``server="uvicorn"``);
    ``settings`` the DJANGO_SETTINGS_MODULE; ``env`` extra environment variables.
    ``server="runserver"`` serves the settings' WSGI application with Django's threaded
    development server instead. ``ready_path`` is requested until it answers.
    """

    def __init__(self, app: str = "", *, settings: str, env: Mapping[str, str] | None = None,
                 server: str = "uvicorn", ready_path: str = "/") -> None:
        if server not in ("uvicorn", "runserver"):
            raise ValueError(f"server must be 'uvicorn' or 'runserver', not {server!r}")
        if server == "uvicorn" and not app:
            raise ValueError("uvicorn needs the ASGI application, e.g. 'project.asgi:application'")
        self.app = app
        self.settings = settings
        self.server = server
        self.ready_path = ready_path
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": settings,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            **(env or {}),
        }
        self.directory = _temporary_directory(self, "distlock-http-")
        self.log_file = self.directory / "server.log"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def __repr__(self) -> str:
        return f"<LiveServerProcess {self.server} {self.url}>"

    def command(self) -> list[str]:
        if self.server == "uvicorn":
            return [sys.executable, "-m", "uvicorn", self.app, "--host", HOST, "--port",
                    str(self.port), "--no-access-log", "--log-level", "warning",
                    "--lifespan", "off", "--backlog", "512"]
        return [sys.executable, "-m", "django", "runserver", "--noreload", "--skip-checks",
                f"{HOST}:{self.port}"]

    def start(self, timeout: float = START_TIMEOUT) -> LiveServerProcess:
        """Launch the server and wait until it answers (another port if this one is taken)."""
        deadline = time.monotonic() + timeout
        while True:
            self.port = free_port()
            outcome = self._launch_once(deadline)
            if outcome == "ok":
                return self
            if outcome != "port in use" or time.monotonic() >= deadline:
                raise RuntimeError(f"{self.server} did not start on {self.url} ({outcome}).\n"
                                   f"command: {subprocess.list2cmdline(self.command())}\n"
                                   f"{self.log_tail()}")

    def _launch_once(self, deadline: float) -> str:
        self.log_file.write_bytes(b"")  # this attempt's output only
        proc = spawn_managed(self.command(), cwd=ROOT, output=self.log_file, env=self.env)
        self._proc = proc
        while time.monotonic() < deadline and proc.poll() is None:
            if self._answers():
                return "ok"
            time.sleep(0.05)
        _kill_process(proc)
        self._proc = None
        if "address already in use" in self.log_tail().lower():
            return "port in use"
        if proc.returncode not in (None, -signal.SIGKILL):
            return f"exited with status {proc.returncode}"
        return "no answer in time"

    def _answers(self) -> bool:
        connection = http.client.HTTPConnection(HOST, self.port, timeout=2)
        try:
            connection.request("GET", self.ready_path)
            return connection.getresponse().status < 500
        except OSError:
            return False
        finally:
            connection.close()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return "(the server wrote nothing)"
        return "\n".join(text.splitlines()[-lines:]) or "(the server wrote nothing)"

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM the server (SIGKILL after ``timeout``) and reap it. Idempotent."""
        if self._proc is not None:
            stop_managed(self._proc, timeout)
        self._proc = None


def demo_project(redis_url: str, directory: Path) -> LiveServerProcess:
    """The demo project (testproject) served by uvicorn on ``redis_url``; its SQLite file
    (unused by the pages tested) goes in ``directory``."""
    return LiveServerProcess(
        "testproject.asgi:application", settings="testproject.settings", ready_path="/",
        env={"REDIS_URL": redis_url, "DJANGO_DB_PATH": str(directory / "db.sqlite3"),
             "DJANGO_ALLOWED_HOSTS": "127.0.0.1"},
    )
