"""A real HTTP server process serving a Django project, for tests and benchmarks.

Unlike pytest-django's ``live_server`` (a thread of the test process), this is a separate
process: ``uvicorn`` for an ASGI application, ``gunicorn`` with N sync worker processes for
a WSGI one, or ``django runserver --noreload`` (threaded WSGI), on a free loopback port,
configured through environment variables::

    with LiveServerProcess("devkit.live_project.asgi:application",
                           settings="devkit.live_project.settings",
                           env=distlock_variables(url=redis_url)) as server:
        urllib.request.urlopen(server.url + "/health/")

    with LiveServerProcess("devkit.live_project.wsgi:application", server="gunicorn",
                           workers=3, settings="devkit.live_project.settings",
                           env={**distlock_variables(url=redis_url),
                                **postgres_server.env()}) as server:
        server.worker_pids()  # the three worker processes

Like the redis-server processes of devkit/redis_server.py, it runs in its own process group,
is killed at exit and when the process that started it dies.
"""

from __future__ import annotations

import http.client
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from devkit import servers
from devkit.paths import ROOT
from devkit.processes import child_env, run_process
from devkit.servers import HOST, ManagedServer

START_TIMEOUT = 30.0
STOP_TIMEOUT = 5.0
SERVERS = ("uvicorn", "gunicorn", "gunicorn-uvicorn", "runserver")
# gunicorn with N worker processes: sync workers (WSGI) or uvicorn's worker (ASGI).
GUNICORNS = ("gunicorn", "gunicorn-uvicorn")


class LiveServerProcess(ManagedServer):
    """One HTTP server process on 127.0.0.1.

    ``app`` is the application's ``module:attribute``: ASGI for ``server="uvicorn"``, WSGI
    for ``server="gunicorn"`` (``workers`` sync worker processes, each with its own
    connections, as in production); ``settings`` the DJANGO_SETTINGS_MODULE; ``env`` extra
    environment variables. ``server="runserver"`` serves the settings' WSGI application with
    Django's threaded development server instead. ``ready_path`` is requested until it
    answers (and, for gunicorn, until all ``workers`` workers have been forked). With
    ``preload``, gunicorn imports the application once, before forking its workers (faster to
    start; Django opens no connection at import, so the workers still each open their own).
    """

    def __init__(
        self,
        app: str = "",
        *,
        settings: str,
        env: Mapping[str, str] | None = None,
        server: str = "uvicorn",
        ready_path: str = "/",
        workers: int = 1,
        preload: bool = False,
    ) -> None:
        if server not in SERVERS:
            raise ValueError(f"server must be one of {SERVERS}, not {server!r}")
        if server != "runserver" and not app:
            raise ValueError(
                f"{server} needs the application, e.g. 'project.asgi:application' "
                "(uvicorn) or 'project.wsgi:application' (gunicorn)"
            )
        if workers < 1 or ((workers > 1 or preload) and server not in GUNICORNS):
            raise ValueError("workers > 1 and preload need server='gunicorn'")
        self.app = app
        self.settings = settings
        self.server = server
        self.ready_path = ready_path
        self.workers = workers
        self.preload = preload
        self.env = {**child_env(settings=settings), **(env or {})}
        self.directory = servers.temporary_directory(self, "distlock-http-")
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
            return [
                sys.executable,
                "-m",
                "uvicorn",
                self.app,
                "--host",
                HOST,
                "--port",
                str(self.port),
                "--no-access-log",
                "--log-level",
                "warning",
                "--lifespan",
                "off",
                "--backlog",
                "512",
            ]
        if self.server in GUNICORNS:
            # Sync workers, each serving one request at a time. No control socket: by default
            # every gunicorn of the user shares one ($HOME/.gunicorn/gunicorn.ctl).
            return [
                sys.executable,
                "-m",
                "gunicorn",
                self.app,
                "--bind",
                f"{HOST}:{self.port}",
                "--workers",
                str(self.workers),
                "--worker-class",
                "uvicorn.workers.UvicornWorker" if self.server == "gunicorn-uvicorn" else "sync",
                "--timeout",
                "60",
                "--graceful-timeout",
                str(int(STOP_TIMEOUT) - 1),
                "--backlog",
                "512",
                "--log-level",
                "warning",
                "--no-control-socket",
                *(["--preload"] if self.preload else []),
            ]
        return [
            sys.executable,
            "-m",
            "django",
            "runserver",
            "--noreload",
            "--skip-checks",
            f"{HOST}:{self.port}",
        ]

    @property
    def pid(self) -> int | None:
        """Process id of the server (gunicorn's master), or None when not running."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def worker_pids(self) -> set[int]:
        """Process ids of gunicorn's worker processes now (the children of its master)."""
        import psutil

        if self.pid is None:
            return set()
        try:
            return {child.pid for child in psutil.Process(self.pid).children()}
        except psutil.NoSuchProcess:
            return set()

    def start(self, timeout: float = START_TIMEOUT) -> LiveServerProcess:
        """Launch the server and wait until it answers (another port if this one is taken)."""
        deadline = time.monotonic() + timeout
        while True:
            self.port = servers.free_port()
            outcome = self._launch_once(deadline)
            if outcome == "ok":
                if self.server in GUNICORNS:
                    try:
                        servers.wait_until(
                            lambda: len(self.worker_pids()) >= self.workers,
                            max(0.1, deadline - time.monotonic()),
                            f"{self.workers} gunicorn workers",
                        )
                    except BaseException:
                        self.stop()
                        raise
                return self
            if outcome != "port in use" or time.monotonic() >= deadline:
                raise RuntimeError(
                    f"{self.server} did not start on {self.url} ({outcome}).\n"
                    f"command: {subprocess.list2cmdline(self.command())}\n"
                    f"{self.log_tail()}"
                )

    def _launch_once(self, deadline: float) -> str:
        self.log_file.write_bytes(b"")  # this attempt's output only
        proc = servers.spawn_managed(self.command(), cwd=ROOT, output=self.log_file, env=self.env)
        self._proc = proc
        while time.monotonic() < deadline and proc.poll() is None:
            # Whoever answers must be this process: a port another process took first would
            # answer too (gunicorn keeps retrying to bind it for a few seconds).
            if self._answers() and self._listens(proc.pid):
                return "ok"
            time.sleep(0.05)
        servers.kill_process(proc)
        self._proc = None
        log = self.log_tail().lower()
        # gunicorn says "Connection in use", then retries for a few seconds.
        if "address already in use" in log or "connection in use" in log:
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

    def _listens(self, pid: int) -> bool:
        """Whether process ``pid`` has a listening socket on this server's port."""
        import psutil

        try:
            sockets = psutil.Process(pid).net_connections("tcp")
        except psutil.Error:
            return False
        return any(
            s.status == psutil.CONN_LISTEN and s.laddr and s.laddr[1] == self.port for s in sockets
        )

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return "(the server wrote nothing)"
        return "\n".join(text.splitlines()[-lines:]) or "(the server wrote nothing)"

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM the server (gunicorn: SIGQUIT, its quick shutdown, which does not wait for
        requests under way), SIGKILL after ``timeout`` (also to any worker left), and reap
        it. Idempotent."""
        if self._proc is not None:
            quit_signal = signal.SIGQUIT if self.server in GUNICORNS else signal.SIGTERM
            servers.stop_managed(self._proc, timeout, quit_signal)
        self._proc = None


def demo_project(redis_url: str, directory: Path) -> LiveServerProcess:
    """The demo project (testproject) served as scripts/demo serves it, by Django's threaded
    runserver (a browser's kept-open connection is served by one thread, request after
    request), on ``redis_url``; its SQLite file, migrated here (the Pay page records payments
    in it), goes in ``directory``."""
    env = {
        "REDIS_URL": redis_url,
        "DJANGO_DB_PATH": str(directory / "db.sqlite3"),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
    }
    run_process(
        [sys.executable, "-m", "django", "migrate", "--noinput", "--verbosity", "0"],
        {**child_env(settings="testproject.settings"), **env},
        check=True,
        timeout=120,
    )
    return LiveServerProcess(
        settings="testproject.settings", server="runserver", ready_path="/", env=env
    )
