"""Any server process the test run starts (Redis, PostgreSQL, MariaDB, uvicorn, ...): free
loopback ports, a process that cannot outlive the run (its own process group, killed at exit
and, on Linux, when the run dies), its stop, its temporary directory, and the managed base
class that gives every server its ``with`` block and its log."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import redis

from devkit.processes import start_process

HOST = "127.0.0.1"
#: Seconds a server gets to exit after SIGTERM before SIGKILL.
STOP_TIMEOUT = 5.0
#: A Redis Cluster node also listens on its port + 10000 (the cluster bus).
CLUSTER_BUS_OFFSET = 10000

_T = TypeVar("_T")
_M = TypeVar("_M", bound="ManagedServer")  # typing.Self needs Python 3.11

# Every process started here that may still be running; killed by ``_kill_all`` at exit.
_LIVE: set[subprocess.Popen[bytes]] = set()
_LIVE_LOCK = threading.Lock()


def managed_processes() -> set[subprocess.Popen[bytes]]:
    """Return the processes spawn_managed started that were not reaped yet (a copy)."""
    with _LIVE_LOCK:
        return set(_LIVE)


# --------------------------------------------------------------------------- ports


def free_port(cluster_bus: bool = False) -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick for port 0).

    With ``cluster_bus=True`` the port is also one a cluster node can use: at most 55535,
    with ``port + 10000`` (Redis 6's cluster bus port) free as well.

    Another process may take the port before a server binds it: :meth:`RedisServer.start`
    retries with a new port when that happens.
    """
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port = int(sock.getsockname()[1])
            if not cluster_bus:
                return port
            if port + CLUSTER_BUS_OFFSET <= 65535:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bus:
                    try:
                        bus.bind((HOST, port + CLUSTER_BUS_OFFSET))
                    except OSError:
                        continue
                    return port
    raise RuntimeError("found no free port pair for a cluster node")


# --------------------------------------------------------------------------- processes


def _set_parent_death_signal() -> None:  # pragma: no cover - runs in the forked child
    """Have the kernel SIGKILL the child when its parent dies (Linux only)."""
    with contextlib.suppress(Exception):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` to the process group ``proc`` leads (it and any fork, e.g. an RDB child).

    Only while ``proc`` is unreaped: until then its pid, hence the group id, cannot have
    been reused by an unrelated process.
    """
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)


def kill_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc``'s process group and reap it."""
    signal_group(proc, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=STOP_TIMEOUT)
    with _LIVE_LOCK:
        _LIVE.discard(proc)


@atexit.register
def _kill_all() -> None:
    """Kill every server process still running (registered with :mod:`atexit`)."""
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:
        kill_process(proc)


def spawn_managed(
    command: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    output: Path,
    env: Mapping[str, str] | None = None,
    user: int | None = None,
    group: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``command`` as a server process that cannot outlive the test run.

    It runs in its own session (so :func:`signal_group` reaches it and its forks), is
    registered for :func:`_kill_all` at exit and, when started from the main thread, gets
    SIGKILL from the kernel if this process dies. Its stdout and stderr are appended to
    ``output``. With ``user`` (and ``group``), it runs as that uid/gid with no supplementary
    groups (only root may ask); the death signal is set after that switch, which would
    clear it.
    """
    main_thread = threading.current_thread() is threading.main_thread()
    identity: dict[str, Any] = {}
    if user is not None:
        identity = {"user": user, "group": group, "extra_groups": []}
    with open(output, "ab") as out:
        proc = start_process(
            command,
            os.environ if env is None else env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            cwd=cwd,
            start_new_session=True,
            # The death signal fires when the *thread* that forked exits, so only ask
            # for it when starting from the main thread.
            preexec_fn=_set_parent_death_signal if main_thread else None,
            **identity,
        )
    with _LIVE_LOCK:
        _LIVE.add(proc)
    return proc


def stop_managed(
    proc: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT, sig: int = signal.SIGTERM
) -> None:
    """Ask a :func:`spawn_managed` process to exit with ``sig`` (resumed first if paused),
    wait up to ``timeout`` seconds, then SIGKILL its process group and reap it."""
    if proc.poll() is None:
        signal_group(proc, signal.SIGCONT)  # a stopped process would not act on ``sig``
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
    kill_process(proc)  # SIGKILL if still there; also any fork left in the group


def temporary_directory(owner: object, prefix: str) -> Path:
    """A new temporary directory, removed once ``owner`` is garbage collected or at exit.

    (Unlike ``tempfile.TemporaryDirectory``, this does not emit a ResourceWarning, which
    ``filterwarnings = error`` would turn into a failure.)
    """
    path = tempfile.mkdtemp(prefix=prefix)
    weakref.finalize(owner, shutil.rmtree, path, ignore_errors=True)
    return Path(path)


def wait_until(
    condition: Callable[[], _T | None], timeout: float, what: str, interval: float = 0.05
) -> _T:
    """Poll ``condition`` until it returns something truthy; TimeoutError naming ``what``.

    Redis and socket errors raised by ``condition`` count as "not yet".
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = condition()
        except (redis.RedisError, OSError) as exc:
            result, last_error = None, exc
        if result:
            return result
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}{detail}")
        time.sleep(interval)


class ManagedServer:
    """Context-manager support on top of ``start()`` / ``stop()``, and the server's log."""

    _log_offsets: dict[Path, int]  # where the latest start began, per file

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines the server wrote (log file, stdout/stderr) since its
        latest start."""
        parts = []
        for path, offset in self._log_offsets.items():
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    text = f.read().decode(errors="replace")
            except FileNotFoundError:
                continue
            tail = text.splitlines()[-lines:]
            if tail:
                parts.append(f"--- {path} (last {len(tail)} lines) ---\n" + "\n".join(tail))
        return "\n".join(parts) or "(the server wrote nothing)"

    def start(self) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def stop(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self: _M) -> _M:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
