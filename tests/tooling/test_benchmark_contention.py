"""The contention benchmark's accounting (benchmarks/contention_analysis.py, cpu_load.py) on
made-up spans: where the lock's time goes, the reach of a hybrid handoff, and the fairness
figure. No timing of this machine is asserted here."""

from __future__ import annotations

import os

import pytest

from benchmarks import cpu_load
from benchmarks.contention_analysis import fairness, time_budget

# (wait began, acquired, released, run queue while waiting, run queue while holding,
#  release() called), us. Worker 1 is handed the lock at 100 after waiting 50 us (a young
# handoff), retakes it, and hands it to worker 0, which had waited 1.85 ms by then.
SPANS = [
    [(0, 0, 150, 0, 0, 100), (150, 2900, 3000, 2000, 0, 2950)],
    [(50, 400, 550, 250, 0, 500), (560, 600, 2050, 0, 0, 2000)],
]


def test_the_cycle_splits_into_work_and_handovers() -> None:
    budget = time_budget([{"spans": SPANS}])
    assert budget["cycle_us"] == pytest.approx(2900 / 3, abs=0.1)
    assert budget["work_us"] == pytest.approx((100 + 100 + 1400) / 3, abs=0.1)
    assert budget["handoff_share"] == pytest.approx(2 / 3, abs=0.001)
    assert budget["handover_us"] == (300 + 900) / 2
    assert budget["retake_handover_us"] == 100
    # The waiter's run-queue delay counts up to the handover only (2,000 us capped at 900).
    assert budget["handover_waiter_run_queue_us"] == (250 + 900) / 2


def test_a_hybrid_reaches_only_the_handoffs_to_young_waiters() -> None:
    hybrid = time_budget([{"spans": SPANS}])["hybrid"]
    # Under 1 ms: only the handoff to the waiter of 50 us, its 250 us of run queue.
    assert hybrid["1 ms"]["young_handoff_share"] == 0.5
    assert hybrid["1 ms"]["run_queue_share_of_time"] == pytest.approx(250 / 2900, abs=1e-4)
    assert hybrid["4 ms"]["young_handoff_share"] == 1.0
    assert hybrid["4 ms"]["run_queue_share_of_time"] == pytest.approx(1150 / 2900, abs=1e-4)


def test_a_run_without_handoffs_has_no_handoff_figures() -> None:
    budget = time_budget([{"spans": [[(0, 0, 20, 0, 0, 10), (20, 30, 50, 0, 0, 40)], []]}])
    assert budget["handoff_share"] == 0
    assert budget["handover_us"] is None
    assert budget["hybrid"]["1 ms"]["young_handoff_share"] is None


def test_fairness_is_the_fewest_turns_over_the_most() -> None:
    even = {"per_worker": [5, 5]}
    starved = {"per_worker": [1, 4]}
    assert fairness([even]) == 1.0
    assert fairness([starved]) == 0.25
    assert fairness([even, starved, {"per_worker": [0, 8]}]) == 0.25


def test_the_busy_loops_run_while_the_block_runs_and_are_gone_after() -> None:
    with cpu_load.busy_loops(2) as pids:
        assert len(pids) == 2
        for pid in pids:
            os.kill(pid, 0)  # alive: no error
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert cpu_load.cores() >= 1
