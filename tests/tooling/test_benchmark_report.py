"""The benchmark suite's bookkeeping (benchmarks/targets.py, benchmarks/report.py) on made-up
figures: which targets hold, and what the Markdown says. No timing is asserted here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from benchmarks import anchors, check_outputs, latency, report, targets
from benchmarks.harness import QUICK, paired_ratio, percentile
from benchmarks.uncontended import (
    DISTINCT,
    FLOOR,
    FLOOR_BARE,
    PING,
    PING_BARE,
    SAME,
    SCRIPTS_BARE,
)


def measured(per_s: float) -> dict[str, Any]:
    return {"per_s": per_s, "us": 1e6 / per_s, "min_per_s": per_s, "max_per_s": per_s, "rounds": 3}


def contention_row(handoffs: float, p99: float, lost: int = 0) -> dict[str, Any]:
    return {
        "acquisitions_per_s": handoffs,
        "handoffs_per_s": handoffs,
        "wait_median_ms": 1.0,
        "wait_p99_ms": p99,
        "wait_max_ms": p99 * 2,
        "lost_updates": lost,
        "acquisitions": 100,
        "repeats": 1,
    }


def fit(calibrated: float, *, poll_bound: bool = False) -> dict[str, Any]:
    return {
        "median_ms": {"0": 0.5, "1": 0.5 + 2 * calibrated},
        "samples_per_delay": 3,
        "a_ms": 0.5,
        "k": calibrated,
        "calibrated": calibrated,
        "k_large": calibrated,
        "calibrated_large": calibrated,
        "poll_bound": poll_bound,
    }


def latency_section(handoff: float, pair: float) -> dict[str, Any]:
    fits: dict[str, dict[str, Any]] = {
        PING: {latency.CLIENT: fit(1.0)},
        FLOOR: {latency.CLIENT: fit(2.0)},
        latency.PAIR: {library: fit(pair) for library in anchors.LATENCY_LIBRARIES},
        latency.HANDOFF: {
            library: fit(2.0, poll_bound=library in anchors.POLLING)
            for library in anchors.LATENCY_LIBRARIES
        },
    }
    fits[latency.HANDOFF][anchors.DISTLOCK] = fit(handoff)
    fits[latency.HANDOFF_SENTINEL] = {anchors.DISTLOCK: fit(handoff)}
    fits[latency.HANDOFF_CLUSTER] = {anchors.DISTLOCK: fit(handoff)}
    for operation in latency.REDLOCK.values():
        fits[operation] = {library: fit(2.05) for library in anchors.REDLOCK_LIBRARIES}
    fits[latency.SHARED_PAIR] = {anchors.DISTLOCK: fit(pair)}
    fits[latency.BATCH_HANDOFF] = {anchors.DISTLOCK: fit(handoff)}
    return {
        "delays_ms": [0, 1],
        "large_from_ms": 1,
        "ping_k": 1.04,
        "ping_k_large": 1.01,
        "limits": latency.LIMITS,
        "polling": anchors.POLLING,
        "fits": fits,
    }


def server_time_section(ours: float) -> dict[str, Any]:
    libraries = {
        library: {
            "us_per_pair": 5.0,
            "calls_per_pair": {"evalsha": 1.0, "set": 1.0},
            "scripted_commands": ["del"],
            "pairs": 10,
        }
        for library in anchors.LATENCY_LIBRARIES
    }
    libraries[anchors.DISTLOCK] = {
        "us_per_pair": ours,
        "calls_per_pair": {"evalsha": 2.0},
        "scripted_commands": ["set"],
        "pairs": 10,
    }
    return {
        "libraries": libraries,
        "distlock_vs_redis_py": ours / 5.0,
        "commands_only": {
            "us_per_pair": 7.5,
            "vs_redis_py": 1.5,
            "scripted_commands": ["del", "set"],
        },
    }


def results(*, vs_redis_py: float, lost: int) -> dict[str, Any]:
    floor = {name: measured(1000.0) for name in (PING, PING_BARE, FLOOR, FLOOR_BARE)}
    locks = {
        mode: {library: measured(500.0) for library in anchors.UNCONTENDED_LIBRARIES}
        for mode in (SAME, DISTINCT)
    }
    ratios = {
        mode: {
            **{f"vs {library}": vs_redis_py for library in anchors.UNCONTENDED_LIBRARIES[1:]},
            f"vs {FLOOR}": 0.9,
            f"vs {FLOOR_BARE}": 0.4,
        }
        for mode in (SAME, DISTINCT)
    }
    by_k = {
        f"K={k}": {
            anchors.DISTLOCK: contention_row(300, 10, lost),
            anchors.PYTHON_REDIS_LOCK: contention_row(150, 40),
            anchors.REDIS_PY: contention_row(100, 80),
        }
        for k in (2, 8)
    }
    contention_ratios = {
        f"K={k}": {f"handoffs/s vs {anchor}": 2.0 for anchor in anchors.CONTENDED_LIBRARIES[1:]}
        | {f"p99 wait vs {anchor}": 0.25 for anchor in anchors.CONTENDED_LIBRARIES[1:]}
        for k in (2, 8)
    }
    sections = {
        "uncontended": {"floor": floor, "locks": locks, "distlock_ratios": ratios},
        "latency": latency_section(handoff=1.1, pair=2.0),
        "server_time": server_time_section(12.0),
        "memory": {
            "locks": 10,
            "bytes_per_lock": {anchors.DISTLOCK: 550.0, anchors.REDIS_PY: 150.0},
            "distlock_bytes_per_released_name": 150.0,
        },
        "contention": {
            "by_k": by_k,
            "distlock_ratios": contention_ratios,
            "seconds_per_run": 1.0,
            "redis_py_sleep_s": 0.001,
        },
        "external": {
            "redlock": {
                "title": "Redlock",
                "rows": [{"nodes": 3, "per_s": 900}],
                "targets": [
                    {
                        "target": "redlock vs redlock-py",
                        "value": 1.1,
                        "limit": ">= 1.0",
                        "met": True,
                    }
                ],
            },
            "admin": {"error": "bench_admin.py exited with 1: boom"},
        },
    }
    env = {
        "date": "today",
        "machine": "test CPU",
        "cpus": 2,
        "python": "3",
        "redis_server": "7",
        "packages": {"redis": "5", "hiredis": None},
        "load_average_at_start": [0, 0, 0],
    }
    found = {
        "command": "python benchmarks/run.py",
        "profile": QUICK.as_dict(),
        "environment": env,
        "duration_s": 1.0,
        "sections": sections,
    }
    found["targets"] = targets.check(sections)
    return found


def test_targets_follow_the_ratios() -> None:
    good = {t["target"]: t["met"] for t in results(vs_redis_py=1.2, lost=0)["targets"]}
    assert good["uncontended (same name) vs redis-py Lock"] is True
    assert good["uncontended (same name) vs floor: SET NX PX + DEL"] is True
    assert good["uncontended (same name) vs floor: SET NX PX + DEL (bare connection)"] is False
    assert good["handoffs/s vs python-redis-lock, K=8"] is True
    assert good["lost updates (distlock, every K)"] is True
    assert good["redlock vs redlock-py"] is True  # merged from the external script
    bad = {t["target"]: t["met"] for t in results(vs_redis_py=0.9, lost=2)["targets"]}
    assert bad["uncontended (distinct names) vs redis-py Lock"] is False
    assert bad["lost updates (distlock, every K)"] is False


def test_round_trip_server_time_and_memory_targets_follow_the_figures() -> None:
    found = results(vs_redis_py=1.2, lost=0)
    met = {t["target"]: t["met"] for t in found["targets"]}
    assert met["handoff, round trips (calibrated)"] is True  # 1.1 <= 1.15
    assert met["handoff through Sentinel, round trips (calibrated)"] is True
    assert met["handoff on a Cluster, round trips (calibrated)"] is True
    assert met["uncontended acquire+release, round trips (calibrated)"] is True
    assert met["Redlock pair, 5 nodes, round trips (calibrated)"] is True
    assert met["server time per acquire+release vs redis-py Lock"] is True  # 2.4x <= 3x
    assert met["Redis memory per held lock (bytes)"] is True
    assert met["handoffs/s vs python-redis-lock, K=2"] is True  # 1.5x at every K
    sections = found["sections"]
    sections["latency"] = latency_section(handoff=1.96, pair=2.11)
    sections["server_time"] = server_time_section(20.0)
    sections["memory"]["bytes_per_lock"][anchors.DISTLOCK] = 1230.0
    sections["contention"]["distlock_ratios"]["K=2"][
        f"handoffs/s vs {anchors.PYTHON_REDIS_LOCK}"
    ] = 1.2
    missed = {t["target"] for t in targets.check(sections) if not t["met"]}
    assert {
        "handoff, round trips (calibrated)",
        "handoff through Sentinel, round trips (calibrated)",
        "handoff on a Cluster, round trips (calibrated)",
        "uncontended acquire+release, round trips (calibrated)",
        "server time per acquire+release vs redis-py Lock",
        "Redis memory per held lock (bytes)",
        "handoffs/s vs python-redis-lock, K=2",
    } <= missed


def test_the_latency_table_has_a_row_per_operation_and_a_column_per_library() -> None:
    text = report.markdown(results(vs_redis_py=1.2, lost=0))
    assert (
        "| operation | limit | distlock | redis-py Lock | python-redis-lock | "
        "pottery Redlock | redlock-py |"
    ) in text
    assert "| uncontended acquire+release | 2 | 2 | 2 | 2 | 2 | 2 |" in text
    # A polling waiter shows its median wait; an operation a library lacks shows "-".
    assert (
        "| handoff | 1 | 1.1 | poll-bound: 0.5 ms at 0 delay (polls every 1 ms here) | 2 |" in text
    )
    assert "| Redlock pair, 3 nodes | 2 | 2.05 | - | - | 2.05 | 2.05 |" in text
    assert "| handoff through Sentinel | 1 | 1.1 | - | - | - | - |" in text
    assert "| shared acquire+release | 2 | 2 | - | - | - | - |" in text
    assert "| handoff to a batch of readers | 1 | 1.1 | - | - | - | - |" in text
    assert "| distlock | 12.0 | 2.4 | evalsha x2 |" in text
    assert "| python-redis-lock | 5 | 1 | evalsha x1, set x1 |" in text


def test_the_fit_gives_round_trips_from_the_medians() -> None:
    # 0.3 ms of fixed cost plus 2 round trips (a one-way delay d ms is a 2d ms round trip)
    medians = {delay: 0.0003 + 2 * (2 * delay / 1000) for delay in (0, 0.5, 1, 2)}
    intercept, slope = latency.fit(medians)
    assert round(intercept, 6) == 0.0003 and round(slope, 6) == 2
    medians[0] = 0.01  # only the delays from 1 ms count for the bias check
    assert round(latency.fit(medians, from_ms=1)[1], 6) == 2


def test_markdown_lists_targets_sections_and_external_results() -> None:
    text = report.markdown(results(vs_redis_py=0.9, lost=0))
    assert text.index("## Targets") < text.index("## Uncontended acquire+release")
    assert "| uncontended (same name) vs redis-py Lock | 0.9 | >= 1.0 | **NO** |" in text
    assert "| K=8 | distlock | 300 | 300 |" in text
    assert "## Redlock" in text and "| 3 | 900 |" in text
    assert "Not measured: bench_admin.py exited with 1: boom" in text
    assert "take 7.5 us per pair: 1.5x redis-py Lock's whole pair" in text


def test_ratios_are_taken_round_by_round() -> None:
    # distlock twice as fast in every round, whatever the machine did between rounds
    assert paired_ratio([200.0, 20.0, 2000.0], [100.0, 10.0, 1000.0]) == 2.0
    assert percentile(list(range(1, 101)), 0.99) == 99


def test_verdicts_of_the_other_scripts_become_target_rows() -> None:
    # The shapes bench_redlock.py, bench_lock_view.py and bench_admin.py write.
    sections = {
        "external": {
            "redlock": {
                "results": {"distlock/5": {"median_us": 900.0}},
                "ratios": {
                    "distlock/redlock-py over 5 nodes": {"ratio": 0.4, "target": 0.5, "met": True}
                },
            },
            "lock_view": {
                "target_ratio": 1.2,
                "modes": {"async": {"ratio": 1.3, "meets_target": False}},
            },
            "admin": {
                "target_seconds": 1.0,
                "page_render_median_seconds": 0.16,
                "meets_target": True,
                "machine": {"meets_target": False},
            },
        }
    }
    rows = {row["target"]: row for row in targets.check(sections)}
    assert rows["redlock ratios distlock/redlock-py over 5 nodes"] == {
        "target": "redlock ratios distlock/redlock-py over 5 nodes",
        "value": 0.4,
        "limit": "<= 0.5",
        "met": True,
    }
    assert rows["lock_view modes async"]["met"] is False
    assert rows["lock_view modes async"]["limit"] == "<= 1.2"
    assert rows["admin"]["value"] == 0.16 and rows["admin"]["met"] is True
    assert len(rows) == 3  # nothing read from "machine"
    text = "\n".join(report._external("redlock", sections["external"]["redlock"]))
    assert "| distlock/5 | 900.0 |" in text


def test_the_scripts_ceiling_is_reported_beside_the_bare_floor() -> None:
    found = results(vs_redis_py=1.2, lost=0)
    pairs = found["sections"]["uncontended"]
    pairs["floor"][SCRIPTS_BARE] = measured(600.0)
    pairs["scripts_bare_vs_bare_floor"] = 0.6
    text = report.markdown(found)
    assert "distlock's own acquire and release scripts" in text
    assert "0.6x the bare floor's speed" in text
    older = report.markdown(results(vs_redis_py=1.2, lost=0))  # results without the case
    assert "distlock's own acquire and release scripts" not in older


def test_listing_time_is_a_benchmark_target() -> None:
    """50,000 held locks listed in under 3 s: a benchmark target (it was a unit test's)."""
    listing = {
        "locks": 50_000,
        "repeats": 3,
        "iter_held_s": 1.2,
        "iter_held_max_s": 1.4,
        "command_s": 3.4,
        "command_max_s": 3.9,
    }
    found = results(vs_redis_py=1.2, lost=0)
    found["sections"]["listing"] = listing
    found["targets"] = targets.check(found["sections"])
    met = {t["target"]: t["met"] for t in found["targets"]}
    assert met["seconds to walk 50,000 held locks (iter_held)"] is True
    assert met["seconds to list 50,000 held locks (manage.py distlock list --json)"] is False
    text = report.markdown(found)
    assert "## Listing 50,000 held locks (median of 3 listings, seconds)" in text
    assert "| manage.py distlock list --json | 3.4 | 3.9 |" in text


COMMITTED = Path(__file__).resolve().parent.parent.parent / "benchmarks" / "results" / "latest"


def test_the_committed_run_has_all_three_outputs_and_every_section() -> None:
    assert check_outputs.problems(COMMITTED) == []


def test_missing_outputs_and_failed_sections_are_named(tmp_path: Path) -> None:
    prefix = tmp_path / "latest"
    for suffix in (".json", ".md", ".png"):
        shutil.copy(COMMITTED.with_suffix(suffix), prefix.with_suffix(suffix))
    results = json.loads(prefix.with_suffix(".json").read_text())
    del results["sections"]["scale"]
    results["sections"]["external"]["redlock"] = {"error": "bench_redlock.py exited with 1"}
    prefix.with_suffix(".json").write_text(json.dumps(results))
    prefix.with_suffix(".png").write_bytes(b"not an image")
    assert check_outputs.problems(prefix) == [
        "section 'scale' is missing",
        "redlock: bench_redlock.py exited with 1",
        "the plot is not a PNG image",
    ]
    prefix.with_suffix(".md").unlink()
    assert check_outputs.problems(prefix) == [f"{prefix}.md was not written"]


def test_long_waits_are_attributed_to_the_run_queue_not_dropped() -> None:
    from benchmarks import contention

    # Worker 0 holds 0-50 ms, 48 ms of it runnable but not running; worker 1 waits 0-50 ms.
    # Short waits of 1 ms make the p99 small, so the 50 ms wait is a long one.
    short = [(100_000 + i * 10, 101_000 + i * 10, 101_005 + i * 10, 0, 0) for i in range(200)]
    repeat = {
        "spans": [[(0, 0, 50_000, 0, 48_000)], [(0, 50_000, 50_100, 100, 0), *short]],
        "run_queue": True,
    }
    found = contention._long_waits([repeat], 1_000)
    assert found["long_waits"] == 1
    assert found["long_waits_scheduler_bound"] == 1
    assert found["worst_wait_waiter_run_queue_ms"] == 0.1
    assert found["worst_wait_holders_run_queue_ms"] == 48.0
    # Without the holder's delay, the same wait is not scheduler-bound, and still counted.
    repeat["spans"][0] = [(0, 0, 50_000, 0, 0)]
    assert contention._long_waits([repeat], 1_000)["long_waits_scheduler_bound"] == 0
    repeat["run_queue"] = False
    assert contention._long_waits([repeat], 1_000)["long_waits_scheduler_bound"] is None
