"""Where the lock's time goes under contention, from the spans the workers report.

Every acquisition of a run, ordered by when acquire() returned, is one cycle of the lock: the
time to the next acquisition. A cycle is the work (acquire() returned to release() called, in
the holder: the GET and SET) and the handover (the holder's release() called to the next
holder's acquire() returned), to another process (a handoff) or to the same one (a retake).
A handoff costs what the next holder needs to be running: with a strict
first-come-first-served handoff the server grants the lock to the head waiter as the release
runs, and the lock then waits for that process to be scheduled. Its run-queue delay while it
waited, capped at the handover, is the most of the handover that scheduling can explain.

The "young" handoffs are those whose next holder had waited less than a bound when the lock
was released: the only ones that a hybrid lock (Go's sync.Mutex: a running contender may
take a free lock while no waiter has waited over 1 ms) would open to a running contender.
The run-queue time in their handovers, over the run's length, is the most of the lock's time
such a hybrid could give to running contenders instead.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from .harness import median

HYBRID_BOUNDS_MS = (1, 4)  # Go's sync.Mutex starvation bound, and a looser one


def time_budget(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean cycle and its parts (us) over every acquisition of ``repeats``, and the reach
    of a hybrid handoff at each of HYBRID_BOUNDS_MS."""
    cycles = holds = hold_queued = 0.0
    handoffs = retakes = 0
    handover = {"handoff": 0.0, "retake": 0.0}
    handover_queued = 0.0
    young = dict.fromkeys(HYBRID_BOUNDS_MS, 0)
    young_queued = dict.fromkeys(HYBRID_BOUNDS_MS, 0.0)
    duration = 0.0
    for repeat in repeats:
        order = sorted(
            (span[1], worker, span)
            for worker, spans in enumerate(repeat["spans"])
            for span in spans
        )
        if len(order) < 2:
            continue
        duration += order[-1][0] - order[0][0]
        for (acquired, worker, span), (next_acquired, next_worker, next_span) in pairwise(order):
            cycles += next_acquired - acquired
            holds += span[5] - acquired
            hold_queued += span[4]
            gap = next_acquired - span[5]
            if next_worker == worker:
                retakes += 1
                handover["retake"] += gap
                continue
            handoffs += 1
            handover["handoff"] += gap
            queued = min(next_span[3], max(gap, 0))
            handover_queued += queued
            waited_ms = (span[5] - next_span[0]) / 1000  # the next holder's wait at release
            for bound in HYBRID_BOUNDS_MS:
                if waited_ms < bound:
                    young[bound] += 1
                    young_queued[bound] += queued
    count = handoffs + retakes
    return {
        "cycle_us": _mean(cycles, count),
        "work_us": _mean(holds, count),
        "hold_run_queue_us": _mean(hold_queued, count),
        "handoff_share": round(handoffs / count, 3) if count else None,
        "handover_us": _mean(handover["handoff"], handoffs),
        "handover_waiter_run_queue_us": _mean(handover_queued, handoffs),
        "retake_handover_us": _mean(handover["retake"], retakes),
        "hybrid": {
            f"{bound} ms": {
                "young_handoff_share": round(young[bound] / handoffs, 3) if handoffs else None,
                "run_queue_share_of_time": round(young_queued[bound] / duration, 4)
                if duration
                else None,
            }
            for bound in HYBRID_BOUNDS_MS
        },
    }


def fairness(repeats: list[dict[str, Any]]) -> float:
    """The fewest acquisitions of one process over the most, median over repeats: 1.0 when
    every process got as many turns, 0 when one got none."""
    return round(
        median(
            [
                min(counts) / max(counts) if max(counts) else 1.0
                for counts in (repeat["per_worker"] for repeat in repeats)
            ]
        ),
        3,
    )


def _mean(total: float, count: int) -> float | None:
    return round(total / count, 1) if count else None
