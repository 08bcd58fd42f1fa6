"""Helpers shared by the fault tests."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distlock.backends.base import BaseLockBackend
from distlock.signals import lock_lost
from tests.faults.procs import Child

# Added to time bounds: the machine the suite runs on may be shared and loaded.
SLACK = 0.75


def wait_for_holder(backend: BaseLockBackend, name: str, pid: int, timeout: float = 30.0) -> None:
    """Wait until the process ``pid`` holds ``name``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = backend.info(name)
        if info is not None and info.pid == pid:
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} never acquired {name!r}")


def wait_for_report(path: Path, child: Child, final: Path, timeout: float = 30.0) -> dict[str, Any]:
    """Wait until ``child`` has written the JSON report ``path``; return it. Fail at once if
    the child ends first, with what it said in its ``final`` report."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if child.exited() and not path.exists():
            story = exit_story(child, final)  # reaps it: the child's repr shows its status
            raise AssertionError(f"{child} ended without writing {path.name}: {story}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{child} wrote no {path.name} within {timeout:g} s")
        time.sleep(0.005)
    return json.loads(path.read_text())


def exit_story(child: Child, report: Path) -> str:
    """What is known about how ``child`` ended: its exit status (waited for, up to 30 s),
    the report it wrote, if any, and the end of the zygote's log (children's tracebacks)."""
    status = child.wait(timeout=30)
    written = report.read_text() if report.exists() else "(none)"
    return (
        f"exit status {status}; report {report.name}: {written}; "
        f"zygote log:\n{child.zygote.log_tail(15)}"
    )


def check_errors(config: dict[str, Any]) -> list[Any]:
    """Return the errors (not warnings) `manage.py check` reports for DISTLOCK['default']."""
    from django.test import override_settings

    from distlock.checks import check_settings

    with override_settings(DISTLOCK={"default": config}):
        return [message for message in check_settings() if message.is_serious()]


@dataclass
class Lost:
    """The names lock_lost was sent for, and an event set at the first."""

    names: list[str] = field(default_factory=list)
    first: threading.Event = field(default_factory=threading.Event)


@contextmanager
def lost_locks() -> Iterator[Lost]:
    """Collect the lock_lost signals sent while the block runs."""
    lost = Lost()

    def receiver(sender: Any, name: str, **kwargs: Any) -> None:
        lost.names.append(name)
        lost.first.set()

    lock_lost.connect(receiver)
    try:
        yield lost
    finally:
        lock_lost.disconnect(receiver)
