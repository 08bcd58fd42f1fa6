"""Worker processes of a task queue (Celery, django.tasks' db_worker) for the task tests, on a
redis-server of their own: locks in database 0, the broker in 1, and in 2 the runs the test
tasks record (a list "runs" of JSON [kind, key, started, ended, pid], monotonic clock)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import redis

from devkit.processes import child_env, end_processes, start_process
from devkit.redis_server import RedisServer

P = TypeVar("P", bound="WorkerPool")


class WorkerPool:
    """Start worker processes with ``spawn()``; subclasses say which in ``start()``."""

    def __init__(
        self, server: RedisServer, directory: Path, settings_module: str, **env: str
    ) -> None:
        """``env``: more of child_env's keywords (tasks_db, other variables)."""
        base = server.url.rsplit("/", 1)[0]
        self.server = server
        self.directory = directory
        self.env = child_env(
            kind="redis",
            url=f"{base}/0",
            data_url=f"{base}/2",
            broker=f"{base}/1",
            settings=settings_module,
            **env,
        )
        self.data = redis.Redis.from_url(self.env["DISTLOCK_TEST_DATA_URL"], decode_responses=True)
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def spawn(self, arguments: list[str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "ab") as output:
            process = start_process(
                [sys.executable, *arguments],
                self.env,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        self.processes.append(process)
        return process

    def stop(self) -> None:
        end_processes(self.processes, grace=15)

    def runs(self) -> list[list[Any]]:
        return [json.loads(item) for item in self.data.lrange("runs", 0, -1)]


@contextlib.contextmanager
def running(pool_class: type[P], directory: Path) -> Iterator[P]:
    """Start a redis-server and the pool's workers; stop both afterwards."""
    server = RedisServer().start()
    pool = pool_class(server, directory)  # type: ignore[call-arg]
    try:
        pool.start()
        yield pool
    finally:
        pool.stop()
        server.stop()


def overlapping(runs: list[list[Any]]) -> int:
    """Return the most runs that were under way at the same moment."""
    edges = sorted([(run[2], 1) for run in runs] + [(run[3], -1) for run in runs])
    most = current = 0
    for _, step in edges:
        current += step
        most = max(most, current)
    return most
