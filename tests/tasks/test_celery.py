"""distlock.contrib.celery with real Celery workers: 2 worker processes of concurrency 4
(prefork), a real redis-server as the broker, result backend and lock server."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from distlock.handler import locks
from tests.support.configs import distlock_settings
from tests.support.redis_server import RedisServer
from tests.support.worker_pool import WorkerPool, overlapping, running

pytest.importorskip("celery", reason="pip install 'django-distlock[celery]'")
from distlock.contrib.celery import TaskAlreadyQueued, was_skipped

TTL = 2.0  # the lock_ttl of the test tasks (tests/support/celery_app.py)
pytestmark = pytest.mark.django_db(databases=[])


class Workers(WorkerPool):
    """Two ``celery worker`` processes (prefork, concurrency 4)."""

    def __init__(self, server: RedisServer, directory: Path) -> None:
        super().__init__(server, directory, "tests.support.settings")

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

    def logs(self) -> str:
        return "\n".join(
            path.read_text(errors="replace")[-3000:]
            for path in sorted(self.directory.glob("worker*.log"))
        )


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    with running(Workers, tmp_path_factory.mktemp("celery")) as pool:
        yield pool


@pytest.fixture
def tasks(workers: Workers, settings: Any) -> Iterator[Any]:
    """The test tasks, sent to the workers' broker; DISTLOCK points at their lock server."""
    from tests.support import celery_app

    url = workers.env["DISTLOCK_TEST_URL"]
    settings.DISTLOCK, settings.CACHES = distlock_settings("redis", url)
    locks.reset()
    workers.server.flushall()
    previous = dict(celery_app.app.conf)
    celery_app.app.conf.update(
        broker_url=workers.env["DISTLOCK_TEST_BROKER"],
        result_backend=workers.env["DISTLOCK_TEST_BROKER"],
    )
    yield celery_app
    celery_app.app.conf.update(
        broker_url=previous["broker_url"], result_backend=previous["result_backend"]
    )
    locks.reset()


def test_twenty_identical_tasks_run_the_body_once(tasks: Any, workers: Workers) -> None:
    results = [tasks.skip_job.delay("same", 2.0) for _ in range(20)]
    values = [result.get(timeout=30) for result in results]
    assert values.count("ran same") == 1, values
    assert sum(was_skipped(value) for value in values) == 19
    skipped = next(value for value in values if was_skipped(value))
    assert skipped["lock"] == "job:same"
    assert "celery task tests.support.celery_app.skip_job[" in skipped["holder"]
    assert len(workers.runs()) == 1
    assert "skipped tests.support.celery_app.skip_job" in workers.logs()


def test_twenty_different_tasks_all_run_concurrently(tasks: Any, workers: Workers) -> None:
    results = [tasks.skip_job.delay(f"key{n}", 2.0) for n in range(20)]
    assert [result.get(timeout=60) for result in results] == [f"ran key{n}" for n in range(20)]
    runs = workers.runs()
    assert sorted(run[1] for run in runs) == sorted(f"key{n}" for n in range(20))
    assert overlapping(runs) == 8  # every pool process of both workers busy at once
    assert len({run[4] for run in runs}) == 8


def wait_for_holder(name: str, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = locks["default"].info(name)
        if info is not None:
            return info
        time.sleep(0.02)
    raise AssertionError(f"nobody took {name!r} within {timeout}s")


def wait_until_free(name: str, timeout: float) -> float:
    """Return how long ``name`` took to be free."""
    began = time.monotonic()
    while locks["default"].info(name) is not None:
        assert time.monotonic() - began < timeout, f"{name!r} still held after {timeout}s"
        time.sleep(0.01)
    return time.monotonic() - began


def test_a_worker_killed_mid_task_frees_the_lock_within_its_lease(
    tasks: Any, workers: Workers
) -> None:
    tasks.skip_job.delay("crash", 60.0)
    holder = wait_for_holder("job:crash")
    os.kill(holder.pid, signal.SIGKILL)  # the pool process running the task
    killed = time.monotonic()
    wait_until_free("job:crash", TTL + 1)
    assert time.monotonic() - killed <= TTL + 1
    assert tasks.skip_job.delay("crash", 0.1).get(timeout=30) == "ran crash"


def test_retry_mode_runs_every_duplicate_one_after_another(tasks: Any, workers: Workers) -> None:
    results = [tasks.retry_job.delay("serial", 0.5) for _ in range(4)]
    assert [result.get(timeout=60) for result in results] == ["ran serial"] * 4
    runs = workers.runs()
    assert len(runs) == 4
    assert overlapping(runs) == 1
    assert "Retry in 0.3s" in workers.logs()


def test_enqueue_mode_refuses_a_queued_duplicate(tasks: Any, workers: Workers) -> None:
    first = tasks.once_job.delay("report", 1.5)
    with pytest.raises(TaskAlreadyQueued) as refused:
        tasks.once_job.delay("report", 1.5)
    assert refused.value.name == "queued:report"
    assert tasks.once_job.delay("other", 0.1).get(timeout=30) == "ran other"
    wait_for_holder("queued:report")  # running now: still refused
    with pytest.raises(TaskAlreadyQueued):
        tasks.once_job.delay("report", 0.1)
    assert first.get(timeout=30) == "ran report"
    assert tasks.once_job.delay("report", 0.1).get(timeout=30) == "ran report"
    assert len([run for run in workers.runs() if run[1] == "report"]) == 2


@pytest.mark.parametrize("how", ["raise", "retry", "terminate"])
def test_the_lock_is_released_when_the_task_ends(tasks: Any, workers: Workers, how: str) -> None:
    result = tasks.failing_job.delay(how, how)
    holder = wait_for_holder(f"fail:{how}")
    assert holder.ttl_remaining > 20  # released by the task, not by its lease ending
    if how == "terminate":
        result.revoke(terminate=True)
    if how == "raise":
        with pytest.raises(RuntimeError):
            result.get(timeout=30)
    elif how == "retry":
        wait_until_free(f"fail:{how}", 10)  # between the try and the retry
        assert result.get(timeout=30) == "done"
    assert wait_until_free(f"fail:{how}", 10) < 5


@pytest.mark.django_db
def test_operators_see_the_task_and_its_id(tasks: Any, workers: Workers, admin_client: Any) -> None:
    result = tasks.skip_job.delay("shown", 3.0)
    holder = wait_for_holder("job:shown")
    assert holder.purpose == f"celery task tests.support.celery_app.skip_job[{result.id}]"
    out = StringIO()
    call_command("distlock", "list", "--json", stdout=out)
    assert [info["purpose"] for info in json.loads(out.getvalue())] == [holder.purpose]
    page = admin_client.get(reverse("admin:distlock_heldlock_changelist"))
    assert holder.purpose in page.content.decode().replace("<wbr>", "")  # wrap points
    result.get(timeout=30)
