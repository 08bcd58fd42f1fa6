"""The processes a test starts: one way to start them (start_process, with the environment
child_env builds), and one way to end them (end_processes: every one stopped, reaped and its
pipes closed). The fault suite's fork server (tests/faults/zygote.py) is the one exception:
it forks its children for speed, from a process started here."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tests.support.paths import ROOT


def child_env(
    *,
    kind: str | None = None,
    url: str | None = None,
    data_url: str | None = None,
    settings: str | None = None,
    python_path: bool = True,
    **more: str,
) -> dict[str, str]:
    """Return the environment of a process a test starts: this process's, with the clone first
    on PYTHONPATH (``python -m tests...`` imports this checkout), and what the child's settings
    read (tests.support.env_settings): ``kind`` as DISTLOCK_TEST_KIND (a backend kind of
    tests.support.configs), ``url`` as DISTLOCK_TEST_URL (its location), ``data_url`` as
    DISTLOCK_TEST_DATA_URL (the Redis holding the test's shared data), ``settings`` as
    DJANGO_SETTINGS_MODULE; ``more`` as given (a value of None is left out). With
    ``python_path=False`` PYTHONPATH stays as it is: a child started in the clone's directory
    imports the clone anyway, and test_command_processes measured its commands exiting about
    a second later after a lost lock with any PYTHONPATH set (not yet explained)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    named = {
        "DISTLOCK_TEST_KIND": kind,
        "DISTLOCK_TEST_URL": url,
        "DISTLOCK_TEST_DATA_URL": data_url,
        "DJANGO_SETTINGS_MODULE": settings,
        **more,
    }
    env = {**os.environ, "PYTHONPATH": path} if python_path else {**os.environ}
    return {**env, **{name: value for name, value in named.items() if value is not None}}


def start_process(
    command: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    cwd: str | os.PathLike[str] = ROOT,
    **options: Any,
) -> subprocess.Popen:
    """Start ``command`` in ``cwd`` (the clone's top directory) with ``env`` (default:
    child_env()) and return it; ``options`` go to Popen (stdin, stdout, text, ...). The
    caller ends it with end_processes() (servers: redis_server.stop_managed)."""
    return subprocess.Popen(
        list(command), cwd=cwd, env=dict(child_env() if env is None else env), **options
    )


def end_processes(processes: Iterable[subprocess.Popen], grace: float = 0.0) -> None:
    """Stop every process of ``processes`` still running, then reap each and close its pipes.

    With ``grace``, each gets SIGTERM and up to ``grace`` seconds to exit before SIGKILL;
    without, SIGKILL at once. A process a test paused (SIGSTOP) is resumed first, so that it
    can act on either.
    """
    processes = list(processes)
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
            if grace:
                process.terminate()
            else:
                process.kill()
    for process in processes:
        try:
            process.communicate(timeout=grace or None)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
