"""The Celery app the Celery tests run real workers of: ``celery -A tests.support.celery_app
worker``.

Configured like tests.support.workers (DISTLOCK_TEST_KIND, DISTLOCK_TEST_URL); the broker and the
result backend are the redis-server at DISTLOCK_TEST_BROKER, and each task records its run
in a Redis list (devkit.worker_pool), so the test sees what ran when.
"""

from __future__ import annotations

import json
import os
import time

import redis
from celery import Celery

from distlock.contrib.celery import LockedTask
from tests.support.workers import setup

if "DISTLOCK_TEST_KIND" in os.environ:  # a worker; the test process has its own settings
    setup()
    if "DISTLOCK_TEST_DOWN_URL" in os.environ:  # the alias "down": a Redis the test stops
        from django.conf import settings

        from devkit.configs import with_alias_down

        settings.DISTLOCK, settings.CACHES = with_alias_down(
            os.environ["DISTLOCK_TEST_URL"], os.environ["DISTLOCK_TEST_DOWN_URL"]
        )
app = Celery(
    "distlock_tests",
    broker=os.environ.get("DISTLOCK_TEST_BROKER", "memory://"),
    backend=os.environ.get("DISTLOCK_TEST_BROKER"),
)
# One task per pool process at a time, so 2 workers x 4 run 8 tasks at once.
app.conf.update(
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    task_default_queue=os.environ.get("DISTLOCK_TEST_QUEUE", "distlock-tests"),
)


def _data() -> redis.Redis:
    return redis.Redis.from_url(os.environ["DISTLOCK_TEST_DATA_URL"])


def _work(kind: str, key: str, seconds: float) -> str:
    started = time.monotonic()
    _data().rpush("starts", json.dumps([kind, key, time.time(), os.getpid()]))
    if _data().incr(f"started:{key}") > 1 and seconds > 30:
        seconds = 0.2  # a long first run, killed by the test; the runs after it are short
    time.sleep(seconds)
    _data().rpush("runs", json.dumps([kind, key, started, time.monotonic(), os.getpid()]))
    return f"ran {key}"


@app.task(bind=True, base=LockedTask, lock_name="job:{key}", lock_ttl=2)
def skip_job(self: LockedTask, key: str, seconds: float = 1.0) -> str:
    return _work("skip", key, seconds)


# The tasks' declarations stay alike in shape (duplicates pairs skip_job's and retry_job's with
# late_job's and outage_job's): each is one LockedTask configuration the tests run a real worker
# on, its options the point.
@app.task(
    bind=True,
    base=LockedTask,
    lock_name="job:{key}",
    lock_ttl=2,
    lock_on_duplicate="retry",
    lock_retry_after=0.3,
    lock_max_retries=100,
)
def retry_job(self: LockedTask, key: str, seconds: float = 1.0) -> str:
    return _work("retry", key, seconds)


@app.task(bind=True, base=LockedTask, lock_name="queued:{key}", lock_ttl=2, lock_at_enqueue=True)
def once_job(self: LockedTask, key: str, seconds: float = 1.0) -> str:
    return _work("once", key, seconds)


@app.task(bind=True, base=LockedTask, lock_name="fail:{key}", lock_ttl=30, max_retries=1)
def failing_job(self: LockedTask, key: str, how: str) -> str:
    time.sleep(0.5)
    if how == "retry" and not self.request.retries:
        raise self.retry(countdown=0.5)
    if how == "raise":
        raise RuntimeError("the task failed")
    time.sleep(0 if how == "retry" else 60)
    return "done"


@app.task(
    bind=True,
    base=LockedTask,
    lock_name="late:{key}",
    lock_ttl=2,
    acks_late=True,
    reject_on_worker_lost=True,
)
def late_job(self: LockedTask, key: str, seconds: float = 1.0) -> str:
    return _work("late", key, seconds)


@app.task(
    bind=True,
    base=LockedTask,
    lock_name="outage:{key}",
    lock_ttl=2,
    lock_using="down",
    lock_retry_after=0.5,
    max_retries=100,
)
def outage_job(self: LockedTask, key: str) -> str:
    return _work("outage", key, 0.1)


@app.task(bind=True, base=LockedTask, lock_name="retried:{key}", lock_ttl=2)
def retried_job(self: LockedTask, key: str) -> str:
    """The first try sends its retry, then holds the lock a while longer: the retry starts
    while its earlier try still holds the lock (same task id, next try)."""
    if not self.request.retries:
        retry = self.retry(countdown=0, throw=False)
        time.sleep(0.5)
        raise retry
    return _work("retried", key, 0.1)


@app.task(
    bind=True,
    base=LockedTask,
    lock_name="lateretry:{key}",
    lock_ttl=4,  # renewals that a loaded machine delays do not let the retry in early
    acks_late=True,
    reject_on_worker_lost=True,
)
def late_retry_job(self: LockedTask, key: str) -> str:
    """The first try sends its retry (``throw=False``, as code that cleans up before raising
    does) and is killed by the test before it returns: its message comes again (acks_late)
    while its retry is queued. Later deliveries do the work."""
    if not self.request.retries and not _data().get(f"retried:{key}"):
        # Due after Celery's main process has seen its pool process die (up to seconds on a
        # loaded machine): a retry that already succeeded would stop the redelivery.
        retry = self.retry(countdown=10, throw=False)
        _data().set(f"retried:{key}", os.getpid())
        time.sleep(60)  # killed here
        raise retry
    return _work("lateretry", key, 0.1)
