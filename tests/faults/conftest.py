"""Fixtures of the reliability suite: the zygote that forks holders to kill and pause, the
scale of the run, and the recording of measured results for docs/RELIABILITY.md."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.faults.procs import Child, Zygote

# "ci" (the default, inside the normal test run) or "full" (scripts/reliability).
SCALE = os.environ.get("DISTLOCK_FAULTS_SCALE", "ci")
# When set (by scripts/reliability), each scenario appends its measured result here.
RESULTS = os.environ.get("DISTLOCK_RELIABILITY_RESULTS")


def scaled(ci: int, full: int) -> int:
    """Return how many times to repeat a scenario at this scale."""
    return full if SCALE == "full" else ci


# For tests whose repetitions grow with the scale: pytest's 120 s limit (setup.cfg) is not
# enough at full scale.
scaled_timeout = pytest.mark.timeout(scaled(ci=120, full=3600))


# The fault tests fork their holders from the zygote (tests/faults/zygote.py), not through the
# processes fixture: they kill and replace holders hundreds of times, and a fork of a process
# that has imported Django costs a millisecond where a fresh one costs half a second of CPU.
# The zygote itself is started the one way (devkit.processes.start_process).
@pytest.fixture(scope="session")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Zygote]:
    process = Zygote(tmp_path_factory.mktemp("zygote") / "zygote.log").start()
    yield process
    process.close()


@pytest.fixture
def spawn(zygote: Zygote) -> Iterator[Callable[..., Child]]:
    """Fork a child running a role of tests/faults/roles.py against a given Redis URL (and
    SQLite file); every child still running at the end of the test is killed and reaped."""
    started: list[Child] = []

    def start(role: str, *, url: str, db: str | None = None, **kwargs: Any) -> Child:
        child = zygote.spawn(role, {"kind": "redis", "url": url, "db": db}, **kwargs)
        started.append(child)
        return child

    yield start
    for child in started:
        if not child.reaped:
            child.kill()
            child.resume()
            child.wait(timeout=10)


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Record a scenario's measured result: ``record(scenario, result, **figures)``.

    ``scenario`` is a short title, ``result`` one sentence saying what was measured; the
    figures are numbers. scripts/reliability turns them into docs/RELIABILITY.md.
    """

    def save(scenario: str, result: str, **figures: Any) -> None:
        entry = {
            "scenario": scenario,
            "result": result,
            "figures": figures,
            "test": request.node.nodeid,
            "scale": SCALE,
        }
        request.node.user_properties.append(("reliability", entry))
        _note(entry)

    return save


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Show what the reliability scenarios measured at the end of the run."""
    entries = [
        value
        for report in terminalreporter.stats.get("passed", [])
        for name, value in report.user_properties
        if name == "reliability"
    ]
    if entries:
        terminalreporter.section(f"reliability figures ({SCALE} scale)")
        for entry in entries:
            terminalreporter.write_line(f"{entry['scenario']}: {entry['result']}")


def _note(entry: dict[str, Any]) -> None:
    if RESULTS:
        with open(RESULTS, "a") as results:
            results.write(json.dumps(entry) + "\n")


def pytest_collection_finish(session: pytest.Session) -> None:
    _note({"machine": "start", "load": os.getloadavg(), "time": time.time()})


def pytest_sessionfinish(session: pytest.Session) -> None:
    _note({"machine": "end", "load": os.getloadavg(), "time": time.time()})
