"""Issue 40: a task body and a leader reach the lock they run under (its fencing token,
``lease_left()``, ``extend()``): ``self.lock`` in a bound Celery ``LockedTask``,
``context.lock`` in a ``contrib.tasks.locked`` task that takes its context, ``leader.lock``;
and ``lock_fence``/``fence=`` reach the Lock. The task runs in this process, through Celery's
own ``apply()`` and Django's immediate task backend (the fence itself:
tests/core/test_fence_claims.py)."""

from __future__ import annotations

from typing import Any

import django
import pytest

import distlock
from tests.support.lock_helpers import seen_from_inside

pytestmark = pytest.mark.django_db(databases=[])
celery = pytest.importorskip("celery", reason="pip install 'django-distlock[celery]'")

from distlock.contrib.celery import LockedTask  # noqa: E402

app = celery.Celery("reach", set_as_current=False)


@app.task(base=LockedTask, bind=True, lock_name="reach:{n}", lock_ttl=5, lock_fence=True)
def reach(self: Any, n: int) -> dict[str, Any]:
    return seen_from_inside(self.lock, f"reach:{n}")


def check(seen: dict[str, Any]) -> None:
    assert seen["token"] == seen["server_token"] and seen["token"] > 0
    assert 4 < seen["lease_left"] <= 5 and seen["fence"] is True


def test_a_bound_locked_task_reaches_its_lock_as_self_lock(redis_backend: str) -> None:
    check(reach.apply(args=(1,)).get())
    assert reach.lock is None, "outside a run there is no lock"


if django.VERSION >= (6, 0):
    from django.tasks import task

    from distlock.contrib.tasks import LockedTaskContext, locked

    @locked("ctx:{n}", ttl=5, fence=True)
    @task(takes_context=True)
    def with_context(context: Any, n: int) -> dict[str, Any]:
        assert isinstance(context, LockedTaskContext) and context.attempt == 1
        return seen_from_inside(context.lock, f"ctx:{n}")


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django >= 6.0")
def test_a_locked_django_task_reaches_its_lock_as_context_lock(redis_backend: str) -> None:
    check(with_context.enqueue(1).return_value)


def test_a_leader_reaches_its_lock(redis_backend: str) -> None:
    with distlock.leader("reach-leader", ttl=5) as leader:
        assert leader.wait_elected(10)
        lock = leader.lock
        assert lock is not None and lock.fencing_token == leader.term
        lock.extend()
        assert 4 < leader.lease_left() <= 5
    assert leader.lock is None
