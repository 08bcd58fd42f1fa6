"""A pytest plugin that prints one line of progress every ``DISTLOCK_PROGRESS_SECONDS``
(default 20) while the tests run: ``scripts/test`` loads it (``-p devkit.progress``),
as its dots alone can stay silent for minutes during a slow file.

The line says how long the run has taken, how many tests are done of how many, what pytest
counted so far (failed and errors apart, as pytest's own summary does), and which test runs.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import pytest

INTERVAL = float(os.environ.get("DISTLOCK_PROGRESS_SECONDS", "20"))
# The terminal, as it was when ``-p`` imported this module: before pytest began capturing
# (while a test runs, file descriptor 1 is the capture's, and a line written there would be
# shown only if that test failed).
TERMINAL = os.dup(1)


class Progress:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.total = 0
        self.done = 0
        self.counts: Counter[str] = Counter()
        self.current = ""
        self.current_since = self.started
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.report, name="progress", daemon=True)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = len(session.items)
        self.thread.start()

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.current, self.current_since = nodeid, time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # As pytest's summary counts: a failed setup or teardown is an error, beside the call.
        if report.failed and report.when != "call":
            self.counts["errors"] += 1
        elif report.when == "call" or report.skipped:
            self.counts[report.outcome] += 1

    def pytest_runtest_logfinish(self) -> None:
        self.done += 1
        self.current = ""

    def pytest_sessionfinish(self) -> None:
        self.stop.set()

    def line(self) -> str:
        now = time.monotonic()
        minutes, seconds = divmod(int(now - self.started), 60)
        counted = ", ".join(
            f"{self.counts[key]} {key}" for key in ("passed", "failed", "errors", "skipped")
        )
        running = (
            f"; running {self.current} ({now - self.current_since:.0f} s)" if self.current else ""
        )
        done = f"{self.done} of {self.total} tests done"
        return f"[progress] {minutes}:{seconds:02d}: {done} ({counted}){running}"

    def report(self) -> None:
        while not self.stop.wait(INTERVAL):
            os.write(TERMINAL, f"\n{self.line()}\n".encode())


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Progress(), "distlock-progress")
