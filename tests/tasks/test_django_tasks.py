"""distlock.contrib.tasks: django.tasks tasks that run once at a time, with Django's own
backends in this process and with real ``db_worker`` processes of django-tasks-db; a task's
metrics name its lock by the template (through the real OpenTelemetry SDK)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django
import pytest
from django.core.exceptions import ImproperlyConfigured

import distlock
from devkit.paths import ROOT
from devkit.processes import run_process
from devkit.redis_server import RedisServer
from devkit.worker_pool import WorkerPool, running
from distlock import metrics
from tests.support.otel import collect, reader

if django.VERSION < (6, 0):
    pytest.skip("django.tasks needs Django >= 6.0", allow_module_level=True)

from django.tasks import task

from distlock.contrib.tasks import locked, was_skipped

pytestmark = pytest.mark.django_db(databases=[])


@locked("report:{key}", ttl=5)
@task
def immediate_report(key: str) -> str:
    return f"ran {key}"


@locked("report:{key}", ttl=5)
@task(takes_context=True)
async def async_report(context: Any, key: str) -> str:
    return f"ran {key} attempt {context.attempt}"


@pytest.mark.parametrize("report", [immediate_report, async_report])
def test_a_run_while_the_lock_is_held_is_skipped(redis_backend: str, report: Any) -> None:
    assert report.enqueue("a/b").return_value.startswith("ran a/b")
    with distlock.lock("report:a%2Fb", ttl=5, purpose="the first run"):
        value = report.enqueue("a/b").return_value
    assert was_skipped(value)
    assert value["lock"] == "report:a%2Fb"
    assert "(the first run)" in value["holder"]
    assert distlock.locks["default"].info("report:a%2Fb") is None


def later(key: str) -> None: ...


def test_bad_options_fail_when_the_task_is_defined(redis_backend: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="not a parameter of the task"):
        locked("report:{other}")(task(later))


@locked("invoice:{number}", ttl=5)
@task
def send_invoice(number: int) -> str:
    return f"sent {number}"


def test_a_task_reports_its_template(redis_backend: str) -> None:
    """Its metrics carry ``distlock.name`` as the template, not each run's name."""
    reader()
    collect()
    for number in range(20):
        assert send_invoice.enqueue(number).return_value == f"sent {number}"
    found = collect()
    assert {p.attributes["distlock.name"] for p in found} == {"invoice:{number}"}
    waits = [p for p in found if p.instrument == metrics.WAIT_DURATION]
    assert sum(p.count for p in waits) == 20
    with pytest.raises(ImproperlyConfigured, match="'skip' or 'retry'"):
        locked(on_duplicate="again")(task(later))
    with pytest.raises(ImproperlyConfigured, match="does not support"):
        locked(on_duplicate="retry")(task(later))  # the immediate backend cannot defer
    with pytest.raises(TypeError, match="above @task"):
        locked()(later)


class DbWorkers(WorkerPool):
    """Two ``manage.py db_worker`` processes on one SQLite file."""

    def __init__(self, server: RedisServer, directory: Path) -> None:
        super().__init__(
            server,
            directory,
            "tests.support.tasks_settings",
            tasks_db=str(directory / "tasks.sqlite3"),
            DISTLOCK_FENCING_DB=str(directory / "fencing.sqlite3"),
        )

    def start(self) -> None:
        self.run("-m", "django", "migrate", "--verbosity", "0")
        for _ in range(2):
            self.spawn(
                [
                    "-m",
                    "django",
                    "db_worker",
                    "--interval",
                    "0.05",
                    "--no-startup-delay",
                    "--no-reload",
                ],
                self.directory / "workers.log",
            )

    def run(self, *arguments: str) -> str:
        done = run_process(
            [sys.executable, *arguments],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def enqueue(self, task_name: str, key: str, seconds: float, count: int) -> list[str]:
        return json.loads(
            self.run(
                "-m", "tests.support.tasks_cli", "enqueue", task_name, key, str(seconds), str(count)
            )
        )

    def results(self, ids: list[str]) -> list[Any]:
        return json.loads(self.run("-m", "tests.support.tasks_cli", "results", *ids))


@pytest.fixture(scope="module")
def db_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DbWorkers]:
    with running(DbWorkers, tmp_path_factory.mktemp("tasks")) as pool:
        yield pool


@pytest.fixture
def workers(db_workers: DbWorkers) -> DbWorkers:
    db_workers.server.flushall()
    return db_workers


def test_a_task_enqueued_twice_runs_once(workers: DbWorkers) -> None:
    ids = workers.enqueue("report", "weekly", 2.0, 2)
    values = workers.results(ids)
    assert sorted(map(was_skipped, values)) == [False, True], values
    assert "ran weekly" in values
    skipped = next(value for value in values if was_skipped(value))
    ran = ids[values.index("ran weekly")]
    assert f"(django task tests.support.tasks.report[{ran}])" in skipped["holder"]
    assert [run[1] for run in workers.runs()] == ["weekly"]


def test_retry_mode_runs_the_duplicate_after_the_first(workers: DbWorkers) -> None:
    ids = workers.enqueue("report_retry", "daily", 1.5, 2)
    values = workers.results(ids)
    assert values.count("ran daily") == 1
    retried = next(value for value in values if value != "ran daily")
    while isinstance(retried, list):  # [skipped and enqueued again, what that one gave]
        assert was_skipped(retried[0]) and retried[0]["retried_as"]
        retried = retried[1]
    assert retried == "ran daily"
    runs = workers.runs()
    assert len(runs) == 2
    first, second = sorted(runs, key=lambda run: run[2])
    assert second[2] >= first[3]  # one after the other, never at once
