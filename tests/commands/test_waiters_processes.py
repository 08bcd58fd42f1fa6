"""Acceptance: five processes queued behind a holder are listed by ``manage.py distlock
info --json`` in their queue order, with their pids; each leaves the list when its turn
comes."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command

import distlock
from devkit.processes import child_env
from tests.support.lock_helpers import queued_in_turn, read_line, spawner

pytestmark = pytest.mark.django_db(databases=[])


@pytest.fixture
def spawn(redis_backend: str, redis_url: str) -> Iterator[Any]:
    env = child_env(kind="redis", url=redis_url)
    with spawner("tests.support.workers", env) as start:
        yield start


def info_json(name: str) -> dict[str, Any]:
    out = io.StringIO()
    call_command("distlock", "info", name, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_five_queued_processes_in_queue_order_with_their_pids(spawn) -> None:
    holder = distlock.lock("reports:monthly", ttl=60, purpose="monthly report")
    assert holder.acquire()

    def join(place: int) -> Any:
        process = spawn("waiter", "reports:monthly", "1")
        read_line(process, "ready")
        return process

    waiters = queued_in_turn("reports:monthly", 5, join)

    shown = info_json("reports:monthly")
    assert shown["purpose"] == "monthly report"
    assert shown["waiters"] == 5
    assert [w["pid"] for w in shown["waiting"]] == [p.pid for p in waiters]
    assert all(w["purpose"].endswith("waiter reports:monthly 1") for w in shown["waiting"])
    waited = [w["waited"] for w in shown["waiting"]]
    assert waited == sorted(waited, reverse=True)  # oldest first

    out = io.StringIO()
    call_command("distlock", "info", "reports:monthly", stdout=out)
    text = out.getvalue()
    assert "waiters:        5" in text
    for place, process in enumerate(waiters, start=1):
        assert f"  {place}. " in text and f"pid {process.pid} " in text

    holder.release()
    for process in waiters:
        read_line(process, "acquired")
        read_line(process, "done")
        assert process.wait(timeout=30) == 0
    assert distlock.locks["default"].waiters("reports:monthly") == []
