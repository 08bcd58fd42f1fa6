"""Measurements several lock test modules share."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import distlock

ROOT = Path(__file__).resolve().parent.parent


def renewer_threads() -> int:
    """How many renewal threads run in this process (distlock keeps at most one)."""
    return sum(1 for t in threading.enumerate() if t.name == "distlock-renewer")


def handoff_delay(holder: distlock.Lock, waiter: distlock.Lock, settle: float) -> float:
    """Let ``waiter`` wait in another thread for ``settle`` seconds, release ``holder``, and
    return how long after the release the waiter held the lock (it releases it at once).

    Raise AssertionError if the waiter did not get the lock within 5 seconds.
    """
    acquired_at: list[float] = []

    def wait_for_it() -> None:
        if waiter.acquire(wait=5):
            acquired_at.append(time.monotonic())
            waiter.release()

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    time.sleep(settle)
    released = time.monotonic()
    holder.release()
    thread.join()
    assert acquired_at, f"the waiter never got {waiter.name!r}"
    return acquired_at[0] - released


def holder_index(name: str, processes: list, other_than: int | None = None,
                 timeout: float = 15) -> int:
    """Return the index in ``processes`` (Popen objects) of the one that holds ``name``, once
    it is not ``other_than``; raise AssertionError if none does within ``timeout`` seconds."""
    pids = [process.pid for process in processes]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = distlock.locks["default"].info(name)
        if info is not None and info.pid in pids and pids.index(info.pid) != other_than:
            return pids.index(info.pid)
        time.sleep(0.02)
    raise AssertionError(f"none of the processes held {name!r} within {timeout}s")


@contextmanager
def spawner(module: str, env: dict[str, str], *,
            stdin: bool = False) -> Iterator[Callable[..., subprocess.Popen]]:
    """Yield ``start(*arguments)``, which runs ``python -m module *arguments`` (stdout, and
    stdin if asked, piped as text); every process started is killed and reaped at the end."""
    started: list[subprocess.Popen] = []

    def start(*arguments: str) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, "-m", module, *arguments], cwd=ROOT,
            env={**env, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
            stdin=subprocess.PIPE if stdin else None, text=True,
        )
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
            process.wait()
            for stream in (process.stdin, process.stdout):
                if stream:
                    stream.close()


def read_line(process: subprocess.Popen, expected: str) -> str:
    """Return the next line a worker printed; AssertionError unless it starts with
    ``expected``."""
    line = process.stdout.readline().strip()
    assert line.startswith(expected), f"worker said {line!r}, expected {expected!r}"
    return line
