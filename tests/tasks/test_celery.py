"""distlock.contrib.celery with real Celery workers: 2 worker processes of concurrency 4
(prefork), a real redis-server as the broker, result backend and lock server."""

from __future__ import annotations

import json
import os
import signal
import time
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.urls import reverse

from devkit.worker_pool import overlapping
from distlock.handler import locks
from tests.support.celery_workers import Workers

pytest.importorskip("celery", reason="pip install 'django-distlock[celery]'")
from distlock.contrib.celery import TaskAlreadyQueued, was_skipped

TTL = 2.0  # the lock_ttl of the test tasks (tests/support/celery_app.py)
pytestmark = pytest.mark.django_db(databases=[])


def settled(results: list[Any], timeout: float = 30) -> list[str]:
    """Wait until each result is SUCCESS, FAILURE or IGNORED (a skip); return the states."""
    deadline = time.monotonic() + timeout
    while True:
        states = [result.state for result in results]
        if all(state in ("SUCCESS", "FAILURE", "IGNORED") for state in states):
            return states
        assert time.monotonic() < deadline, f"not settled after {timeout}s: {states}"
        time.sleep(0.05)


def test_twenty_identical_tasks_run_the_body_once(tasks: Any, workers: Workers) -> None:
    results = [tasks.skip_job.delay("same", 2.0) for _ in range(20)]
    states = settled(results)
    assert states.count("SUCCESS") == 1, states
    assert states.count("IGNORED") == 19, states  # a skip is not a success
    assert [result.get(timeout=1) for result in results if result.state == "SUCCESS"] == [
        "ran same"
    ]
    assert all(was_skipped(result.info) for result in results if result.state == "IGNORED")
    skipped = next(result.info for result in results if result.state == "IGNORED")
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


def started_after_the_lease(start: list[Any], holder: Any) -> bool:
    """A run began after ``holder``'s lease ended (read before the kill; a renewal since
    only moves the end later). Wall clocks of one machine; Redis's is the same clock."""
    return start[2] >= holder.expires_at.timestamp() - 0.05


def long_run_and_duplicates(
    workers: Workers, task: Any, key: str, lock: str, duplicates: int
) -> tuple[Any, Any]:
    """Start a long run of ``task`` (to be killed in its body) and ``duplicates`` copies,
    each skipped (IGNORED); return the run's result and its holder."""
    first = task.delay(key, 60.0)
    workers.wait_started(key)
    holder = wait_for_holder(lock)
    copies = [task.delay(key, 60.0) for _ in range(duplicates)]
    assert settled(copies) == ["IGNORED"] * duplicates
    return first, holder


def test_a_redelivered_message_runs_once_its_killed_holder_lease_ends(
    tasks: Any, workers: Workers
) -> None:
    # acks_late + reject_on_worker_lost: the message of a killed pool process is delivered
    # again, with the same task id. It is not a duplicate of itself: it runs once the dead
    # holder's lease has ended.
    result, holder = long_run_and_duplicates(
        workers, tasks.late_job, "redelivered", "late:redelivered", 0
    )
    os.kill(holder.pid, signal.SIGKILL)
    assert result.get(timeout=30) == "ran redelivered"
    killed, again = workers.starts("redelivered")
    assert killed[3] == holder.pid != again[3]
    assert started_after_the_lease(again, holder)
    assert len(workers.runs()) == 1


def deliver_again(workers: Workers, task: Any, args: tuple[Any, ...], task_id: str) -> None:
    """Deliver the message of ``task_id`` again as a broker's visibility timeout does: kombu's
    Redis transport puts it back flagged ``redelivered``. (A copy sent to a queue nobody
    consumes, flagged, then moved to the workers' queue.)"""
    broker = redis.Redis.from_url(workers.env["DISTLOCK_TEST_BROKER"])
    task.apply_async(args, task_id=task_id, queue="parked")
    deadline = time.monotonic() + 10
    while (raw := broker.rpop("parked")) is None:
        assert time.monotonic() < deadline, "the copy did not reach the broker"
        time.sleep(0.02)
    queue = task.app.conf.task_default_queue
    message = json.loads(raw)
    message["headers"]["redelivered"] = True
    # As if it had been sent to the workers' queue (a message sent again follows it).
    message["properties"]["delivery_info"].update(redelivered=True, routing_key=queue)
    broker.lpush(queue, json.dumps(message))


def test_a_message_delivered_again_while_its_run_lives_waits_and_is_dropped(
    tasks: Any, workers: Workers
) -> None:
    # A broker's visibility timeout delivers a message again while its first delivery still
    # runs: the same task id, the same try. Never two at once, and not run twice.
    first = tasks.late_job.apply_async(("twice", 3.0))
    wait_for_holder("late:twice")
    deliver_again(workers, tasks.late_job, ("twice", 3.0), first.id)
    assert first.get(timeout=30) == "ran twice"
    workers.wait_for_log(f"[{first.id}] not run: the run of 'late:twice' it waited for ended")
    assert first.state == "SUCCESS"  # the result its run stored stays
    assert len(workers.starts("twice")) == 1
    assert len(workers.runs()) == 1


def test_skipped_duplicates_of_a_killed_run_make_one_run_after_its_lease(
    tasks: Any, workers: Workers
) -> None:
    first, holder = long_run_and_duplicates(workers, tasks.skip_job, "lost", "job:lost", 5)
    os.kill(holder.pid, signal.SIGKILL)
    workers.wait_for_checks()
    runs = workers.runs()
    assert [run[1] for run in runs] == ["lost"]  # one run: coalesced
    starts = workers.starts("lost")
    assert len(starts) == 2  # the killed one, and the one after its lease
    assert started_after_the_lease(starts[1], holder)
    assert first.state != "SUCCESS"


def test_skipped_duplicates_of_a_run_that_ended_make_no_run(tasks: Any, workers: Workers) -> None:
    first = tasks.skip_job.delay("ended", 1.5)
    wait_for_holder("job:ended")
    duplicates = [tasks.skip_job.delay("ended", 1.5) for _ in range(5)]
    assert settled(duplicates) == ["IGNORED"] * 5
    assert first.get(timeout=30) == "ran ended"
    ended = "not run: the run of 'job:ended' it waited for ended, or another took its work over"
    workers.wait_for_log(f"{ended} (skipped)")
    workers.wait_for_checks()
    assert len(workers.starts("ended")) == 1


def test_a_task_started_while_redis_is_down_is_retried_until_it_runs(
    tasks: Any, workers: Workers
) -> None:
    workers.down.stop()
    try:
        result = tasks.outage_job.delay("outage")
        workers.wait_for_log(f"[{result.id}] retry: Retry in 0.5s")
    finally:
        workers.down.start()
    assert result.get(timeout=30) == "ran outage"
    assert len(workers.starts("outage")) == 1


def test_a_killed_run_delivered_again_and_its_skipped_duplicates_make_one_run(
    tasks: Any, workers: Workers
) -> None:
    # Both the message delivered again and the duplicates' check wait for the killed run's
    # lease; only one of them does its work.
    first, holder = long_run_and_duplicates(workers, tasks.late_job, "both", "late:both", 3)
    os.kill(holder.pid, signal.SIGKILL)
    assert settled([first]) in (["SUCCESS"], ["IGNORED"])
    workers.wait_for_checks()
    assert [run[1] for run in workers.runs()] == ["both"]
    killed, again = workers.starts("both")
    assert killed[3] == holder.pid
    assert started_after_the_lease(again, holder)


def test_a_retry_that_starts_while_its_earlier_try_holds_the_lock_runs(
    tasks: Any, workers: Workers
) -> None:
    result = tasks.retried_job.delay("early")
    assert result.get(timeout=30) == "ran early"  # not skipped as a duplicate of its try
    assert len(workers.starts("early")) == 1
    workers.wait_for_log(f"[{result.id}] retry: Retry in 0s")  # its log may come later


def parent_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("PPid:")).split()[1])


def test_a_killed_run_delivered_again_after_its_lease_and_its_duplicates_make_one_run(
    tasks: Any, workers: Workers
) -> None:
    # The worker that lost the pool process is paused past the lease, so the message comes
    # again after the lock is free (no holder to wait for), maybe after the check ran.
    first, holder = long_run_and_duplicates(workers, tasks.late_job, "slow", "late:slow", 3)
    worker = parent_of(holder.pid)
    os.kill(worker, signal.SIGSTOP)
    try:
        os.kill(holder.pid, signal.SIGKILL)
        while time.time() < holder.expires_at.timestamp() + TTL:  # renewed at most once
            time.sleep(0.1)
    finally:
        os.kill(worker, signal.SIGCONT)
    assert settled([first]) in (["SUCCESS"], ["IGNORED"])
    workers.wait_for_checks()
    time.sleep(TTL)  # a second run would have begun by now
    assert [run[1] for run in workers.runs()] == ["slow"]
    assert len(workers.starts("slow")) == 2
