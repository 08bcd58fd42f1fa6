"""The targets of issues #7 and #14, checked against ratios taken within one run, and
issue 23's listing time (moved here from a unit test)."""

from __future__ import annotations

import math
from typing import Any

from .anchors import DISTLOCK, PYTHON_REDIS_LOCK, REDIS_PY
from .latency import (
    BATCH_HANDOFF,
    HANDOFF,
    HANDOFF_CLUSTER,
    HANDOFF_SENTINEL,
    PAIR,
    REDLOCK,
    SHARED_PAIR,
)
from .otel_overhead import NO_READER, READER
from .uncontended import DISTINCT, FLOOR, FLOOR_BARE, SAME

# Latency at the largest number of held locks over latency at one held lock, divided by the
# same growth of redis-py's Lock measured in the same rounds (which cannot depend on how many
# distlock locks are held, so it is the machine's drift).
FLAT_LIMIT = 1.25
# Issue 14: round trips (calibrated: over a bare PING's), server time and memory.
ROUND_TRIP_LIMITS = {
    HANDOFF: 1.15,
    HANDOFF_SENTINEL: 1.15,
    HANDOFF_CLUSTER: 1.15,
    PAIR: 2.1,
    REDLOCK[3]: 2.2,
    REDLOCK[5]: 2.2,
    # Issue 25: shared locks.
    SHARED_PAIR: 2.1,
    BATCH_HANDOFF: 1.15,
}
SERVER_TIME_LIMIT = 3.0  # distlock's server time per pair over redis-py Lock's
BYTES_PER_LOCK_LIMIT = 600
HANDOFFS_LIMIT = 1.5  # contended handoffs/s over python-redis-lock's, at every K
LISTING_LIMIT_S = 3.0  # seconds to list 50,000 held locks (a walk, and the command)
# Issue 27: uncontended acquire+release with OpenTelemetry metrics, over the rate without.
OTEL_NO_READER_LIMIT = 0.95
OTEL_READER_LIMIT = 0.90


def _target(name: str, value: float, limit: float, at_least: bool) -> dict[str, Any]:
    met = not math.isnan(value) and (value >= limit if at_least else value <= limit)
    return {
        "target": name,
        "value": value,
        "limit": f"{'>=' if at_least else '<='} {limit}",
        "met": met,
    }


def check(sections: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    pairs = sections.get("uncontended")
    if pairs:
        for mode in (SAME, DISTINCT):
            ratios = pairs["distlock_ratios"][mode]
            found.append(
                _target(f"uncontended ({mode}) vs {REDIS_PY}", ratios[f"vs {REDIS_PY}"], 1.0, True)
            )
            # The floor through redis-py's client, and written straight to a connection
            # (what the wire and the server cost with no client layer at all).
            found.append(
                _target(
                    f"uncontended ({mode}) vs floor: {FLOOR}", ratios[f"vs {FLOOR}"], 0.85, True
                )
            )
            found.append(
                _target(
                    f"uncontended ({mode}) vs floor: {FLOOR_BARE}",
                    ratios[f"vs {FLOOR_BARE}"],
                    0.85,
                    True,
                )
            )
    found += _otel(pairs)
    found += _contention(sections.get("contention"))
    found += _round_trips(sections.get("latency"))
    server_time = sections.get("server_time")
    if server_time:
        found.append(
            _target(
                f"server time per acquire+release vs {REDIS_PY}",
                server_time["distlock_vs_redis_py"],
                SERVER_TIME_LIMIT,
                False,
            )
        )
    memory = sections.get("memory")
    if memory:
        found.append(
            _target(
                "Redis memory per held lock (bytes)",
                memory["bytes_per_lock"][DISTLOCK],
                BYTES_PER_LOCK_LIMIT,
                False,
            )
        )
    scale = sections.get("scale")
    if scale:
        found.append(
            _target(
                f"latency growth 1 -> {scale['largest_level']:,} held locks (vs reference)",
                scale["distlock_growth_vs_reference"],
                FLAT_LIMIT,
                False,
            )
        )
    listing = sections.get("listing")
    if listing:
        found.append(
            _target(
                f"seconds to walk {listing['locks']:,} held locks (iter_held)",
                listing["iter_held_s"],
                LISTING_LIMIT_S,
                False,
            )
        )
        found.append(
            _target(
                f"seconds to list {listing['locks']:,} held locks (manage.py distlock list --json)",
                listing["command_s"],
                LISTING_LIMIT_S,
                False,
            )
        )
    for name, external in sections.get("external", {}).items():
        found.extend(external.get("targets") or _verdicts(name, external))
    return found


def _otel(pairs: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Issue 27: metrics cost an uncontended pair at most 5% (no reader), 10% (a reader)."""
    otel = (pairs or {}).get("otel") or {}
    if "reader_vs_off" not in otel:
        return []
    return [
        _target(
            f"uncontended rate, {NO_READER} vs none",
            otel["no_reader_vs_off"],
            OTEL_NO_READER_LIMIT,
            True,
        ),
        _target(
            f"uncontended rate, {READER} vs none", otel["reader_vs_off"], OTEL_READER_LIMIT, True
        ),
    ]


def _contention(contention: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not contention:
        return []
    found = []
    ks = sorted(int(key[2:]) for key in contention["by_k"])
    ratios = contention["distlock_ratios"]
    for k in ks:
        found.append(
            _target(
                f"handoffs/s vs {PYTHON_REDIS_LOCK}, K={k}",
                ratios[f"K={k}"][f"handoffs/s vs {PYTHON_REDIS_LOCK}"],
                HANDOFFS_LIMIT,
                True,
            )
        )
    found.append(
        _target(
            f"p99 wait vs {PYTHON_REDIS_LOCK}, K={ks[-1]}",
            ratios[f"K={ks[-1]}"][f"p99 wait vs {PYTHON_REDIS_LOCK}"],
            0.5,
            False,
        )
    )
    for k in ks:
        ours = contention["by_k"][f"K={k}"][DISTLOCK]
        found.append(
            _target(
                f"max wait / p99 wait, K={k}",
                round(ours["wait_max_ms"] / ours["wait_p99_ms"], 2),
                5,
                False,
            )
        )
    lost = sum(row[DISTLOCK]["lost_updates"] for row in contention["by_k"].values())
    found.append(_target("lost updates (distlock, every K)", lost, 0, False))
    return found


def _round_trips(latency: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not latency:
        return []
    return [
        _target(
            f"{operation}, round trips (calibrated)",
            latency["fits"][operation][DISTLOCK]["calibrated"],
            limit,
            False,
        )
        for operation, limit in ROUND_TRIP_LIMITS.items()
        if operation in latency["fits"]  # a run from before the operation was measured
    ]


# Keys the other issues' scripts use for a verdict, the figure it is about, and its bound.
VERDICTS = ("met", "meets_target")
FIGURES = ("ratio", "value", "page_render_median_seconds", "median_us", "median")
BOUNDS = ("target", "target_ratio", "target_seconds", "limit")


def _verdicts(name: str, data: dict[str, Any]) -> list[dict[str, Any]]:
    """Target rows from a script's JSON without a ``targets`` list: every dict holding a
    verdict (``met``/``meets_target``) becomes one, named by its path. The bound is read
    from the dict or, failing that, the file's top level, as an upper bound (<=)."""
    found = []

    def visit(node: Any, path: list[str]) -> None:
        if not isinstance(node, dict):
            return
        verdict = next((node[key] for key in VERDICTS if isinstance(node.get(key), bool)), None)
        if verdict is not None:
            value = next((node[key] for key in FIGURES if key in node), "")
            bound = next(
                (
                    scope[key]
                    for scope in (node, data)
                    for key in BOUNDS
                    if isinstance(scope.get(key), (int, float))
                ),
                None,
            )
            found.append(
                {
                    "target": " ".join([name, *path]),
                    "value": value,
                    "limit": "" if bound is None else f"<= {bound}",
                    "met": verdict,
                }
            )
        for key, child in node.items():
            if key != "machine":
                visit(child, [*path, key])

    visit(data, [])
    return found
