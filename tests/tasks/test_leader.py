"""Leader election (distlock.leader): in one process, and over 3 real processes that are
killed (SIGKILL) and paused (SIGSTOP), judged from each process's own log."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

import distlock
from devkit.processes import child_env, end_processes, start_process
from tests.support.lock_helpers import holder_index

TTL = 2.0
pytestmark = pytest.mark.django_db(databases=[])


def test_lease_left_counts_down_by_the_local_clock(redis_backend: str) -> None:
    lk = distlock.lock("counted", ttl=0.5)
    assert lk.lease_left() == 0.0
    assert lk.acquire()
    assert 0.3 < lk.lease_left() <= 0.5
    time.sleep(0.6)  # as if the process had been paused past its lease
    assert lk.lease_left() == 0.0
    with pytest.raises(distlock.LockNotOwned):
        lk.release()
    assert lk.lease_left() == 0.0


def test_one_of_two_leads_and_the_other_takes_over_on_resignation(redis_backend: str) -> None:
    events: list[tuple[str, str, int | None]] = []

    def record(kind: str, who: str) -> Any:
        return lambda leader: events.append((kind, who, leader.term))

    first = distlock.leader(
        "jobs",
        ttl=TTL,
        on_elected=record("elected", "first"),
        on_revoked=record("revoked", "first"),
    )
    second = distlock.leader(
        "jobs",
        ttl=TTL,
        on_elected=record("elected", "second"),
        on_revoked=record("revoked", "second"),
    )
    with first:
        assert first.wait_elected(5)
        with second:
            assert not second.wait_elected(TTL + 0.5)  # renewed: never expires
            assert first.is_leader and not second.is_leader
            info = distlock.locks["default"].info("jobs")
            assert info.purpose == "leader of jobs" and info.fencing_token == first.term
            first.stop()
            assert not first.is_leader
            assert second.wait_elected(5)
            assert second.term > first.term
    assert [event[:2] for event in events] == [
        ("elected", "first"),
        ("revoked", "first"),
        ("elected", "second"),
        ("revoked", "second"),
    ]
    assert distlock.locks["default"].info("jobs") is None


def test_a_force_released_leader_is_told_and_campaigns_again(redis_backend: str) -> None:
    revoked: list[int | None] = []
    with distlock.leader("jobs", ttl=0.6, on_revoked=lambda lead: revoked.append(lead.term)) as it:
        assert it.wait_elected(5)
        term = it.term
        assert distlock.locks["default"].force_release("jobs")
        deadline = time.monotonic() + 3
        while not revoked:
            assert time.monotonic() < deadline, "never told that the leadership was lost"
            time.sleep(0.01)
        assert revoked == [term]
        assert it.wait_elected(3) and it.term > term


async def test_the_async_api(redis_backend: str) -> None:
    calls: list[str] = []

    async def elected(leader: distlock.Leader) -> None:
        await asyncio.sleep(0)
        calls.append(f"elected {leader.term}")

    async with distlock.leader("async-jobs", ttl=TTL, on_elected=elected) as lead:
        assert await lead.await_elected(5)
        assert lead.is_leader
    assert not lead.is_leader
    assert calls == [f"elected {lead.term}"]


# --- three processes -------------------------------------------------------------------
Entry = tuple[str, int, float]  # (kind, term, wall-clock time)


class Candidates:
    """``python -m tests.support.workers lead NAME TTL LOG`` processes, each with its own log."""

    def __init__(self, url: str, directory: Path) -> None:
        self.env = child_env(kind="redis", url=url)
        self.directory = directory
        self.processes: list[subprocess.Popen[str]] = []

    def start(self, count: int) -> None:
        for index in range(count):
            self.processes.append(
                start_process(
                    [
                        sys.executable,
                        "-m",
                        "tests.support.workers",
                        "lead",
                        "scheduler",
                        str(TTL),
                        str(self.directory / f"candidate{index}.log"),
                    ],
                    self.env,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        for process in self.processes:
            assert process.stdout is not None and process.stdout.readline() == "ready\n"

    def log(self, index: int) -> list[Entry]:
        path = self.directory / f"candidate{index}.log"
        lines = path.read_text().splitlines() if path.exists() else []
        return [
            (kind, int(term), float(when))
            for kind, term, when in (line.split() for line in lines if line.count(" ") == 2)
        ]

    def leader_index(self, other_than: int | None = None) -> int:
        """Return the index of the process that leads now (once it is not ``other_than``)."""
        return holder_index("scheduler", self.processes, other_than)

    def stop(self) -> None:
        end_processes(self.processes)


@pytest.fixture
def candidates(redis_backend: str, tmp_path: Path) -> Iterator[Candidates]:
    group = Candidates(redis_backend, tmp_path)
    yield group
    group.stop()


def acting_terms(logs: list[list[Entry]]) -> list[tuple[float, float, int, int]]:
    """Return (first act, last act, term, process) of every term, in order of first act."""
    spans: dict[tuple[int, int], list[float]] = {}
    for index, log in enumerate(logs):
        for kind, term, when in log:
            if kind == "act":
                spans.setdefault((index, term), []).append(when)
    return sorted((min(times), max(times), term, index) for (index, term), times in spans.items())


def first_act_after(logs: list[list[Entry]], moment: float) -> float:
    return min(when for log in logs for kind, _, when in log if kind == "act" and when > moment)


def test_three_processes_one_leader_at_a_time_through_kill_and_pause(
    candidates: Candidates,
) -> None:
    candidates.start(3)
    killed_index = candidates.leader_index()
    time.sleep(1.0)
    candidates.processes[killed_index].kill()
    killed_at = time.time()
    paused_index = candidates.leader_index(other_than=killed_index)
    time.sleep(1.0)

    paused = candidates.processes[paused_index]
    os.kill(paused.pid, signal.SIGSTOP)
    paused_at = time.time()
    time.sleep(TTL + 1.5)  # past the lease: the third process is elected meanwhile
    os.kill(paused.pid, signal.SIGCONT)
    resumed_at = time.time()
    time.sleep(1.5)

    logs = [candidates.log(index) for index in range(3)]
    # Exactly one leader at any moment: no two terms' acting overlap, terms only go up.
    terms = acting_terms(logs)
    assert len(terms) >= 3, logs
    for earlier, later in itertools.pairwise(terms):
        assert earlier[1] < later[0], f"terms {earlier} and {later} overlap"
        assert earlier[2] < later[2], f"term numbers went down: {earlier}, {later}"
    elected = sorted((when, term) for log in logs for kind, term, when in log if kind == "elected")
    assert [term for _, term in elected] == sorted({term for _, term in elected})
    # SIGKILL: another leader acts within ttl + 1 s.
    assert first_act_after(logs, killed_at) - killed_at <= TTL + 1
    # SIGSTOP past the lease: on resuming, the paused process is told it lost the leadership
    # before it acts as leader again.
    resumed = [entry for entry in logs[paused_index] if entry[2] >= paused_at]
    assert resumed and resumed[0][0] == "revoked", resumed[:5]
    assert resumed[0][2] - resumed_at < 1.0
    others = [index for index in range(3) if index not in (killed_index, paused_index)]
    assert any(
        kind == "elected" and paused_at < when < resumed_at for kind, _, when in logs[others[0]]
    )


@pytest.mark.django_db
def test_operators_see_the_leader(candidates: Candidates, admin_client: Any) -> None:
    candidates.start(1)
    candidates.leader_index()
    out = StringIO()
    call_command("distlock", "list", "--json", stdout=out)
    [info] = json.loads(out.getvalue())
    assert info["purpose"] == "leader of scheduler"
    assert info["pid"] == candidates.processes[0].pid
    page = admin_client.get(reverse("admin:distlock_heldlock_changelist"))
    assert "leader of scheduler" in page.content.decode()
