"""Issue 40 adversary: LockedTask delivery with real Celery workers (the workers and tasks
of tests/tasks/conftest.py). Each test failed on the code it attacked."""

from __future__ import annotations

import os
import re
import signal
import time
from typing import Any

import pytest

from devkit.worker_pool import overlapping
from tests.support.celery_workers import Workers
from tests.tasks.test_celery import (
    TTL,
    long_run_and_duplicates,
    wait_for_holder,
    wait_until_free,
)

pytest.importorskip("celery", reason="pip install 'django-distlock[celery]'")
pytestmark = pytest.mark.django_db(databases=[])


def settle(workers: Workers, task_id: str, killed: int, timeout: float = 60) -> None:
    """Wait until every delivery of ``task_id`` but the ``killed`` ones has ended and the
    workers have said nothing more of it for three leases (a message that waits for a run
    sends itself again, due a lease later)."""
    deadline = time.monotonic() + timeout
    said, quiet_since = -1, time.monotonic()
    while True:
        logs = workers.full_logs()
        received = len(re.findall(rf"\[{task_id}\] received", logs))
        ended = len(re.findall(rf"\[{task_id}\] (ignored|succeeded|raised|retry)", logs))
        lines = logs.count(task_id)
        if lines != said:
            said, quiet_since = lines, time.monotonic()
        if received - ended <= killed and time.monotonic() - quiet_since > 3 * TTL:
            return
        assert time.monotonic() < deadline, f"{task_id} did not settle:\n{workers.logs()}"
        time.sleep(0.2)


def test_a_killed_try_delivered_again_beside_its_retry_runs_the_work_once(
    tasks: Any, workers: Workers
) -> None:
    """acks_late + reject_on_worker_lost: a try that sent its retry is killed before Celery
    acked its message, so the message comes again (same id, try 0) while the retry (try 1)
    is queued (due 10 s later). The message delivered again waits for the killed run's lease
    and runs (its run was killed); the retry runs too (nothing marked try 0's work as handed
    to its retry). Expected: the task's work runs once."""
    result = tasks.late_retry_job.delay("k")
    holder = wait_for_holder("lateretry:k")
    deadline = time.monotonic() + 20
    while not workers.data.get("retried:k"):  # the retry is sent: now kill it
        assert time.monotonic() < deadline, workers.logs()
        time.sleep(0.02)
    os.kill(holder.pid, signal.SIGKILL)
    assert result.get(timeout=30) == "ran k"
    settle(workers, result.id, killed=1, timeout=90)
    runs = [run for run in workers.runs() if run[1] == "k"]
    assert len(runs) == 1, f"the work of {result.id} ran {len(runs)} times: {runs}"


def test_a_fresh_run_after_the_killed_ones_lease_is_followed_by_one_run_of_its_check(
    tasks: Any, workers: Workers
) -> None:
    """Skip mode: the running copy is killed with duplicates skipped (one check scheduled).
    Its lease ends, a new copy is enqueued, runs and ends before the check comes. The check
    knows nothing of runs of other messages (it would take a record of every run's start, a
    write per run, to know): it runs the work once more. Documented (tasks-and-leaders.md):
    the duplicates make at most one run after the lease, one after the other with any new
    run, never two at once."""
    _, holder = long_run_and_duplicates(workers, tasks.skip_job, "fresh", "job:fresh", 3)
    os.kill(holder.pid, signal.SIGKILL)
    wait_until_free("job:fresh", 10 * TTL)
    assert tasks.skip_job.delay("fresh", 0.01).get(timeout=30) == "ran fresh"
    workers.wait_for_checks()
    wait_until_free("job:fresh", 10 * TTL)
    runs = [run for run in workers.runs() if run[1] == "fresh"]
    # The check ran the work unless it came while the fresh run held the lock (then it
    # was skipped as that run's duplicate: a loaded machine may order them so).
    checked = "runs: the run of 'job:fresh' it waited for was killed (skipped)"
    assert len(runs) == 1 + (checked in workers.full_logs()), runs
    assert overlapping(runs) == 1  # the fresh run and the check's: never at once


def test_a_duplicate_sent_with_the_same_task_id_is_skipped_not_run_again(
    tasks: Any, workers: Workers
) -> None:
    """Skip mode, ``apply_async(task_id=...)`` with an id made from the arguments (Celery's
    own idempotency idiom): a second send while the first runs is a duplicate, not "this
    very message delivered again". It is taken for one (same purpose), waits for the run,
    and since a run that is not ``acks_late`` records no end when no check is pending, it
    then runs the work again. Expected: skipped, one run."""
    first = tasks.skip_job.apply_async(("fixed", 1.5), task_id="charge-fixed")
    wait_for_holder("job:fixed")
    again = tasks.skip_job.apply_async(("fixed", 1.5), task_id="charge-fixed")
    assert first.get(timeout=30) == "ran fixed"
    assert again.id == first.id
    settle(workers, first.id, killed=0)
    runs = [run for run in workers.runs() if run[1] == "fixed"]
    assert len(runs) == 1, f"{len(runs)} runs of one task id sent twice: {runs}"
