"""Sentinel failovers with WAIT_REPLICAS as documented, repeated: planned (SENTINEL
FAILOVER) with a long-lived and fresh clients, on one and on two replicas, and a master
SIGKILLed while its replica lags. Never two holders, no acknowledged lock lost.

Marked slow: each round starts a group of its own. tests/backends/test_sentinel.py runs one round
of each in the normal suite."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from typing import Any

import pytest

from devkit.configs import distlock_settings
from devkit.redis_server import RedisSentinelGroup
from distlock.handler import locks
from tests.backends.test_sentinel import kill_while_lagging, planned_failover_holds

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.slow, pytest.mark.timeout(600)]
ROUNDS = 3


def in_a_group(settings: Any, replicas: int, scenario: Callable[..., Any]) -> Any:
    with RedisSentinelGroup(replicas=replicas) as group:
        location = ",".join(f"{host}:{port}" for host, port in group.sentinels)
        settings.DISTLOCK = distlock_settings("sentinel", location)[0]
        locks.reset()
        try:
            return scenario(settings, group)
        finally:
            for replica in group.replicas:
                replica.resume()
            locks["default"].close()
            locks.reset()


@pytest.mark.parametrize("replicas", [1, 2])
def test_planned_failovers_never_give_two_holders(settings, replicas, record) -> None:
    gaps, holds = [], 0
    for _ in range(ROUNDS):
        outcome = in_a_group(settings, replicas, planned_failover_holds)
        starts = sorted(start for _, start, _ in outcome.intervals)
        gaps.append(max(later - earlier for earlier, later in pairwise(starts)))
        holds += len(outcome.intervals)
    record(
        f"SENTINEL FAILOVER, {replicas} replica(s), WAIT_REPLICAS={replicas}",
        f"{ROUNDS} planned failovers, {holds} holds by a long-lived and fresh clients: "
        f"0 times two holders; no lock for at most {max(gaps):.1f} s per failover",
        rounds=ROUNDS,
        holds=holds,
        two_holders=0,
        longest_gap=round(max(gaps), 2),
    )


def test_masters_killed_while_replicas_lag_lose_no_acknowledged_lock(settings, record):
    acknowledged = refused = 0
    for _ in range(ROUNDS):
        acked, unconfirmed = in_a_group(settings, 1, kill_while_lagging)
        acknowledged += acked
        refused += unconfirmed
    record(
        "Master SIGKILL, replica paused 1 s before, WAIT_REPLICAS=1",
        f"{ROUNDS} kills: 0 of {acknowledged} acknowledged locks lost; {refused} acquires "
        "refused with BackendUnavailable while the replica could not confirm",
        rounds=ROUNDS,
        acknowledged=acknowledged,
        lost=0,
        refused=refused,
    )
