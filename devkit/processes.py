"""The processes a test (or a benchmark) starts: one way to start them (start_process, and
run_process for one run to its end; the ``processes`` fixture of tests/conftest.py is
started_processes, which ends what it started), one place their environment is built
(child_env, and distlock_variables for the DISTLOCK_TEST_* variables alone), and one way to
end them (end_processes: every one stopped, reaped and its pipes closed). The fault suite's
fork server (tests/faults/zygote.py) is the one exception: it forks its children for speed,
from a process started here."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from devkit.paths import ROOT

#: The variable that gives a child its DATABASES (JSON; devkit.databases reads it back).
DATABASES_VARIABLE = "DISTLOCK_TEST_DATABASES"


def distlock_variables(
    *,
    kind: str | None = None,
    url: str | None = None,
    data_url: str | None = None,
    down_url: str | None = None,
    broker: str | None = None,
    tasks_db: str | None = None,
    databases: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, str]:
    """Return the DISTLOCK_TEST_* variables a child's settings read, and only those (a value
    of None is left out): ``kind`` (a backend kind of devkit.configs) and ``url`` (its
    location), read by tests.support.env_settings; ``data_url``, the Redis holding the test's
    shared data; ``down_url``, a Redis that is down (tests.support.outage_settings);
    ``broker``, Celery's; ``tasks_db``, django.tasks' SQLite file; ``databases``, the
    DATABASES (devkit.databases). The one place these names are written for a child."""
    named = {
        "DISTLOCK_TEST_KIND": kind,
        "DISTLOCK_TEST_URL": url,
        "DISTLOCK_TEST_DATA_URL": data_url,
        "DISTLOCK_TEST_DOWN_URL": down_url,
        "DISTLOCK_TEST_BROKER": broker,
        "DISTLOCK_TEST_TASKS_DB": tasks_db,
        DATABASES_VARIABLE: None if databases is None else json.dumps(databases),
    }
    return {name: value for name, value in named.items() if value is not None}


def child_env(
    *,
    settings: str | None = None,
    python_path: bool = True,
    kind: str | None = None,
    url: str | None = None,
    data_url: str | None = None,
    down_url: str | None = None,
    broker: str | None = None,
    tasks_db: str | None = None,
    databases: Mapping[str, Mapping[str, Any]] | None = None,
    **more: str,
) -> dict[str, str]:
    """Return the environment of a process a test starts: this process's, with the clone first
    on PYTHONPATH (``python -m tests...`` imports this checkout), ``settings`` as
    DJANGO_SETTINGS_MODULE, the DISTLOCK_TEST_* variables of distlock_variables (same
    keywords) and ``more`` as given (other variables: REDIS_URL, ...). With
    ``python_path=False`` PYTHONPATH stays as it is: a child started in the clone's directory
    imports the clone anyway, and test_command_processes measured its commands exiting about
    a second later after a lost lock with any PYTHONPATH set (not yet explained)."""
    # distlock_variables' keywords are listed again above, not folded into **more, so that each
    # is named, typed and documented at the one place a child's environment is built.
    env = {**os.environ}
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if settings is not None:
        env["DJANGO_SETTINGS_MODULE"] = settings
    variables = distlock_variables(
        kind=kind,
        url=url,
        data_url=data_url,
        down_url=down_url,
        broker=broker,
        tasks_db=tasks_db,
        databases=databases,
    )
    return {**env, **variables, **more}


def start_process(
    command: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    cwd: str | os.PathLike[str] = ROOT,
    **options: Any,
) -> subprocess.Popen:
    """Start ``command`` in ``cwd`` (the clone's top directory) with ``env`` (default:
    child_env()) and return it; ``options`` go to Popen (stdin, stdout, text, ...). The
    caller ends it with end_processes() (servers: servers.stop_managed)."""
    return subprocess.Popen(
        list(command), cwd=cwd, env=dict(child_env() if env is None else env), **options
    )


def run_process(
    command: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    cwd: str | os.PathLike[str] = ROOT,
    **options: Any,
) -> subprocess.CompletedProcess:
    """Run ``command`` to its end as start_process starts it (same ``cwd`` and ``env``
    defaults) and return the finished process; ``options`` go to subprocess.run
    (capture_output, text, check, timeout, ...)."""
    return subprocess.run(
        list(command), cwd=cwd, env=dict(child_env() if env is None else env), **options
    )


def run_python(
    code: str, env: Mapping[str, str] | None = None, *, timeout: float = 60, **options: Any
) -> subprocess.CompletedProcess:
    """Run ``code`` in a new Python interpreter (this one's) to its end, as run_process runs
    a command, and return the finished process with its output read as text."""
    return run_process(
        [sys.executable, "-c", code],
        env,
        capture_output=True,
        text=True,
        timeout=timeout,
        **options,
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


Start = Callable[..., subprocess.Popen]


@contextlib.contextmanager
def started_processes(grace: float = 0.0) -> Iterator[Start]:
    """Yield ``start(command, env=None, **options)``, start_process's own signature, and end
    every process it started on the way out (end_processes, with ``grace``). The fixture
    ``processes`` (tests/conftest.py) is this, for one test."""
    started: list[subprocess.Popen] = []

    def start(
        command: Sequence[str], env: Mapping[str, str] | None = None, **options: Any
    ) -> subprocess.Popen:
        process = start_process(command, env, **options)
        started.append(process)
        return process

    try:
        yield start
    finally:
        end_processes(started, grace)
