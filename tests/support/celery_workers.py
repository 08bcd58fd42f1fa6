"""The Celery workers of tests/tasks/test_celery.py and test_celery_adversary.py (the fixtures
``workers`` and ``tasks`` of tests/tasks/conftest.py): two ``celery worker`` processes of the
test app (tests/support/celery_app.py) on a redis-server of their own."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from devkit.redis_server import RedisServer
from devkit.worker_pool import WorkerPool


class Workers(WorkerPool):
    """Two ``celery worker`` processes (prefork, concurrency 4)."""

    def __init__(self, server: RedisServer, directory: Path) -> None:
        # The lock server of the alias "down", which a test stops while the broker runs on.
        self.down = RedisServer().start()
        super().__init__(server, directory, "devkit.settings", down_url=self.down.url)

    def start(self) -> None:
        logs = [self.directory / f"worker{index}.log" for index in range(2)]
        for index, log in enumerate(logs):
            self.spawn(
                [
                    "-m",
                    "celery",
                    "-A",
                    "tests.support.celery_app",
                    "worker",
                    "--pool",
                    "prefork",
                    "--concurrency",
                    "4",
                    "--loglevel",
                    "INFO",
                    "--hostname",
                    f"w{index}@%h",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                ],
                log,
            )
        deadline = time.monotonic() + 60
        while not all(log.exists() and b"ready." in log.read_bytes() for log in logs):
            assert time.monotonic() < deadline, f"the workers did not start:\n{self.logs()}"
            time.sleep(0.2)

    def stop(self) -> None:
        super().stop()
        self.down.stop()

    def starts(self, key: str) -> list[list[Any]]:
        """The runs of ``key`` that began (kind, key, wall clock, pid), killed ones too."""
        starts = [json.loads(item) for item in self.data.lrange("starts", 0, -1)]
        return [start for start in starts if start[1] == key]

    def wait_started(self, key: str, timeout: float = 20) -> None:
        """Wait until a run of ``key`` is in its body (its long first sleep)."""
        deadline = time.monotonic() + timeout
        while not self.data.get(f"started:{key}"):
            assert time.monotonic() < deadline, f"no run of {key!r} began:\n{self.logs()}"
            time.sleep(0.02)

    def full_logs(self) -> str:
        return "\n".join(
            path.read_text(errors="replace") for path in sorted(self.directory.glob("worker*.log"))
        )

    def wait_for_checks(self, timeout: float = 30) -> None:
        """Wait until every check a skipped duplicate scheduled has run (ignored or ran)."""
        deadline = time.monotonic() + timeout
        while True:
            logs = self.full_logs()
            checks = re.findall(r"will check, as \S+\[([0-9a-f-]+)\]", logs)
            # A check that finds the run still there sends itself again: received twice.
            pending = [
                check
                for check in checks
                if len(re.findall(rf"\[{check}\] (ignored|succeeded|raised)", logs))
                < max(1, len(re.findall(rf"\[{check}\] received", logs)))
            ]
            if not pending:
                return
            assert time.monotonic() < deadline, f"checks {pending} did not run:\n{self.logs()}"
            time.sleep(0.1)

    def wait_for_log(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.full_logs():
            assert time.monotonic() < deadline, f"no {text!r} in the logs:\n{self.logs()}"
            time.sleep(0.1)

    def logs(self) -> str:
        return "\n".join(
            path.read_text(errors="replace")[-3000:]
            for path in sorted(self.directory.glob("worker*.log"))
        )
