"""K processes competing for one lock, each doing a non-atomic read-modify-write inside it.

The worker processes (benchmarks/contention_worker.py) start once and take jobs: each run
uses the first K of them, all libraries interleaved in a shuffled order within every repeat.

Per library and K: acquisitions/s, cross-process handoffs/s (acquisitions whose previous
holder was another process: what a lock must do fast when work moves between processes),
the wait of each acquire() call (median, p99, max, over every acquisition of every repeat),
and lost updates (acquisitions minus the final counter: anything but 0 means two processes
were inside the lock at once).

The longest waits are explained, not dropped: every worker reports, for each acquisition, how
long it was runnable but not running (its run-queue delay, /proc/self/schedstat) while it
waited and while it held the lock. For each wait longer than LONG_WAIT_P99S times the p99
(and the longest wait), the report gives the waiter's own run-queue delay and that of the
processes that held the lock during the wait (each hold's delay, capped at its overlap with
the wait): a wait is "scheduler-bound" when those delays cover at least half of its excess
over the p99. The same is done for every library; max and p99 are over every wait, as before.
"""

from __future__ import annotations

import bisect
import json
import random
import subprocess
import sys
import time
from typing import Any

import redis

from devkit.processes import start_process

from . import anchors, cpu_load
from .contention_analysis import fairness, time_budget
from .harness import ROOT, Profile, log, median, paired_ratio, percentile

START_DELAY = 0.2  # seconds between sending a job and its start: every worker has it by then
LONG_WAIT_P99S = 5  # a wait longer than this many p99s is explained in the report


class Workers:
    """Competing processes, started once, each answering jobs on its stdin."""

    def __init__(self, count: int, url: str) -> None:
        self.processes = [
            start_process(
                [sys.executable, "-m", "benchmarks.contention_worker", url],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(count)
        ]
        for process in self.processes:
            ready = process.stdout.readline().strip()  # type: ignore[union-attr]
            if ready != "ready":
                raise RuntimeError(f"a contention worker failed to start (said {ready!r})")

    def run(self, k: int, job: dict[str, Any]) -> list[dict[str, Any]]:
        job = {**job, "start": time.time() + START_DELAY}
        job["end"] = job["start"] + job.pop("seconds")
        line = json.dumps(job) + "\n"
        chosen = self.processes[:k]
        for process in chosen:
            process.stdin.write(line)  # type: ignore[union-attr]
            process.stdin.flush()  # type: ignore[union-attr]
        return [self._answer(process) for process in chosen]

    @staticmethod
    def _answer(process: subprocess.Popen[str]) -> dict[str, Any]:
        line = process.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"contention worker {process.pid} died (status {process.wait()})")
        return json.loads(line)

    def close(self) -> None:
        for process in self.processes:
            process.stdin.close()  # type: ignore[union-attr]
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def run(profile: Profile, url: str) -> dict[str, Any]:
    """Every K and library on the machine as it is ("quiet"), then again with one busy loop
    per core beside the workers ("loaded"); the loaded figures are under "loaded"."""
    data = redis.Redis.from_url(url)
    workers = Workers(max(profile.contention_ks), url)
    try:
        for library in anchors.CONTENDED_LIBRARIES:  # warm-up: connections, scripts
            workers.run(max(profile.contention_ks), _job(library, "warmup", "warmup", 0.2))
        quiet = _measure(profile, workers, data, "quiet")
        busy = cpu_load.cores()
        with cpu_load.busy_loops(busy):
            loaded = _measure(profile, workers, data, "loaded")
    finally:
        workers.close()
    return {
        **_aggregate(profile, quiet.pop("runs")),
        "load_average": quiet,
        "loaded": {
            **_aggregate(profile, loaded.pop("runs")),
            "busy_loops": busy,
            "load_average": loaded,
        },
    }


def _measure(profile: Profile, workers: Workers, data: redis.Redis, mode: str) -> dict[str, Any]:
    """Run every K and library, interleaved; return the runs and the machine's load average
    before and after (it counts the busy loops of the loaded mode too)."""
    before = cpu_load.load_average()
    runs: dict[tuple[int, str], list[dict[str, Any]]] = {}
    order = list(anchors.CONTENDED_LIBRARIES)
    shuffle = random.Random(11).shuffle
    for repeat in range(profile.contention_repeats):
        for k in profile.contention_ks:
            shuffle(order)
            for library in order:
                tag = f"{mode}:{k}:{repeat}"
                job = _job(library, tag, tag, profile.contention_seconds)
                server_cpu = _server_cpu_us(data)
                results = workers.run(k, job)
                server_cpu = _server_cpu_us(data) - server_cpu
                final = data.get(job["counter"]) or b"0:"
                runs.setdefault((k, library), []).append(
                    _one_run(results, int(final.split(b":")[0]), job["seconds"], server_cpu)
                )
                log(
                    f"contention {mode} K={k} {library}: "
                    f"{runs[(k, library)][-1]['acquisitions_per_s']:.0f} acquisitions/s"
                )
    return {"before": before, "after": cpu_load.load_average(), "runs": runs}


def _job(library: str, name_tag: str, counter_tag: str, seconds: float) -> dict[str, Any]:
    short = library.split()[0] if library != anchors.DISTLOCK_NON_FAIR else "distlock-non-fair"
    return {
        "library": library,
        "name": f"contended:{short}:{name_tag}",
        "counter": f"counter:{short}:{counter_tag}",
        "seconds": seconds,
    }


def _server_cpu_us(data: redis.Redis) -> float:
    """The CPU time (us) the Redis server has used so far, user and system."""
    cpu = data.info("cpu")
    return (cpu["used_cpu_user"] + cpu["used_cpu_sys"]) * 1e6


def _one_run(
    results: list[dict[str, Any]], final_count: int, seconds: float, server_cpu_us: float
) -> dict[str, Any]:
    acquisitions = sum(result["acquisitions"] for result in results)
    handoffs = sum(result["handoffs"] for result in results)
    return {
        # CPU time per acquisition, of the competing processes and of the server (whose
        # figure includes the few commands the benchmark itself sends around a run).
        "workers_cpu_us": sum(result["cpu_us"] for result in results) / max(acquisitions, 1),
        "server_cpu_us": server_cpu_us / max(acquisitions, 1),
        "acquisitions_per_s": acquisitions / seconds,
        "handoffs_per_s": handoffs / seconds,
        "lost_updates": acquisitions - final_count,
        "waits_us": [wait for result in results for wait in result["waits_us"]],
        "spans": [result["spans"] for result in results],  # per worker, as it reported them
        "run_queue": all(result["run_queue"] for result in results),
        "per_worker": [result["acquisitions"] for result in results],
    }


def _cpu_ratio(row: dict[str, Any], library: str, anchor: str, field: str) -> float:
    """``library``'s CPU per acquisition (``field``) over ``anchor``'s."""
    theirs = row[anchor][field]
    return round(row[library][field] / theirs, 3) if theirs else float("nan")


def _long_waits(repeats: list[dict[str, Any]], p99_us: float) -> dict[str, Any]:
    """How much of the long waits (over LONG_WAIT_P99S p99s) and of the longest one was
    run-queue delay: the waiter's own, and that of the processes holding the lock meanwhile."""
    threshold = LONG_WAIT_P99S * p99_us
    long_count = bound = 0
    worst: dict[str, Any] | None = None
    for repeat in repeats:
        holds = sorted(
            (span[1], span[2], span[4], worker)
            for worker, spans in enumerate(repeat["spans"])
            for span in spans
        )
        starts = [hold[0] for hold in holds]
        longest_hold = max((end - start for start, end, _, _ in holds), default=0)
        for worker, spans in enumerate(repeat["spans"]):
            for began, acquired, _, waiter_queued, *_ in spans:
                wait = acquired - began
                if wait <= threshold and (worst is not None and wait <= worst["wait_us"]):
                    continue
                holders_queued = sum(
                    min(queued, min(end, acquired) - max(start, began))
                    for start, end, queued, other in holds[
                        bisect.bisect_left(starts, began - longest_hold) : bisect.bisect_left(
                            starts, acquired
                        )
                    ]
                    if other != worker and end > began
                )
                explained = waiter_queued + holders_queued >= (wait - p99_us) / 2
                if wait > threshold:
                    long_count += 1
                    bound += explained
                if worst is None or wait > worst["wait_us"]:
                    worst = {"wait_us": wait, "waiter": waiter_queued, "holders": holders_queued}
    known = all(repeat["run_queue"] for repeat in repeats)
    return {
        "long_wait_threshold_ms": round(threshold / 1000, 3),
        "long_waits": long_count,
        "long_waits_scheduler_bound": bound if known else None,
        "worst_wait_waiter_run_queue_ms": round(worst["waiter"] / 1000, 3)
        if worst and known
        else None,
        "worst_wait_holders_run_queue_ms": round(worst["holders"] / 1000, 3)
        if worst and known
        else None,
    }


def _aggregate(
    profile: Profile, runs: dict[tuple[int, str], list[dict[str, Any]]]
) -> dict[str, Any]:
    by_k: dict[str, dict[str, Any]] = {}
    ratios: dict[str, dict[str, float]] = {}
    for k in profile.contention_ks:
        row: dict[str, Any] = {}
        for library in anchors.CONTENDED_LIBRARIES:
            repeats = runs[(k, library)]
            waits = [wait for one in repeats for wait in one["waits_us"]]
            row[library] = {
                "acquisitions_per_s": round(median([r["acquisitions_per_s"] for r in repeats]), 1),
                "handoffs_per_s": round(median([r["handoffs_per_s"] for r in repeats]), 1),
                "wait_median_ms": round(median(waits) / 1000, 3),
                "wait_p99_ms": round(percentile(waits, 0.99) / 1000, 3),
                "wait_max_ms": round(max(waits, default=0) / 1000, 3),
                "wait_p999_ms": round(percentile(waits, 0.999) / 1000, 3),
                "lost_updates": sum(r["lost_updates"] for r in repeats),
                "acquisitions": len(waits),
                "repeats": len(repeats),
                "fewest_over_most_acquisitions": fairness(repeats),
                "workers_cpu_us_per_acquisition": round(
                    median([r["workers_cpu_us"] for r in repeats]), 1
                ),
                "server_cpu_us_per_acquisition": round(
                    median([r["server_cpu_us"] for r in repeats]), 1
                ),
                **_long_waits(repeats, percentile(waits, 0.99)),
                "time_budget": time_budget(repeats),
            }
        ratios[f"K={k}"] = {}
        for library in anchors.OURS:
            ours = runs[(k, library)]
            # The default mode's keys name no mode (as before the non-fair mode came).
            mode = "" if library == anchors.DISTLOCK else "fair=False "
            for anchor in (a for a in anchors.CONTENDED_LIBRARIES if a not in anchors.OURS):
                theirs = runs[(k, anchor)]
                ratios[f"K={k}"][f"{mode}acquisitions/s vs {anchor}"] = round(
                    paired_ratio(
                        [r["acquisitions_per_s"] for r in ours],
                        [r["acquisitions_per_s"] for r in theirs],
                    ),
                    3,
                )
                ratios[f"K={k}"][f"{mode}handoffs/s vs {anchor}"] = round(
                    paired_ratio(
                        [r["handoffs_per_s"] for r in ours],
                        [r["handoffs_per_s"] for r in theirs],
                    ),
                    3,
                )
                ratios[f"K={k}"][f"{mode}p99 wait vs {anchor}"] = (
                    round(row[library]["wait_p99_ms"] / row[anchor]["wait_p99_ms"], 3)
                    if row[anchor]["wait_p99_ms"]
                    else float("nan")
                )
                ratios[f"K={k}"][f"{mode}client CPU vs {anchor}"] = _cpu_ratio(
                    row, library, anchor, "workers_cpu_us_per_acquisition"
                )
                ratios[f"K={k}"][f"{mode}server CPU vs {anchor}"] = _cpu_ratio(
                    row, library, anchor, "server_cpu_us_per_acquisition"
                )
        by_k[f"K={k}"] = row
    return {
        "by_k": by_k,
        "distlock_ratios": ratios,
        "seconds_per_run": profile.contention_seconds,
        "redis_py_sleep_s": anchors.REDIS_PY_SLEEP,
        "long_wait_p99s": LONG_WAIT_P99S,
    }
