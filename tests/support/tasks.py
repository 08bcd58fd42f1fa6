"""django.tasks tasks that the ``db_worker`` processes of tests/tasks/test_django_tasks.py run
(settings: tests.support.tasks_settings). Each run records its key, start and end (monotonic clock)
and process in a Redis list at DISTLOCK_TEST_DATA_URL."""

from __future__ import annotations

import json
import os
import time

import redis
from django.tasks import task

from distlock.contrib.tasks import locked


def _record(kind: str, key: str, seconds: float) -> str:
    data = redis.Redis.from_url(os.environ["DISTLOCK_TEST_DATA_URL"])
    started = time.monotonic()
    time.sleep(seconds)
    data.rpush("runs", json.dumps([kind, key, started, time.monotonic(), os.getpid()]))
    return f"ran {key}"


@locked("report:{key}", ttl=2)
@task
def report(key: str, seconds: float = 1.0) -> str:
    return _record("skip", key, seconds)


@locked("report:{key}", ttl=2, on_duplicate="retry", retry_after=0.3)
@task
def report_retry(key: str, seconds: float = 1.0) -> str:
    return _record("retry", key, seconds)
