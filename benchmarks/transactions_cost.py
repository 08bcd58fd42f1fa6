"""What distlock's hooks into Django cost an ``atomic()`` block with no lock in it, in wall
time and in CPU time, against plain Django, interleaved in the same run.

    python benchmarks/bench_transactions.py --cost [--quick] [--rounds N] [--generations N]
        [--tree PATH ...]

Each mode runs in a long-lived worker process of its own, which nothing changes at run time:
plain Django (distlock never imported), plain Django again (the control: two processes of
the same code differ by a few percent), distlock (installed, nothing tied), distlock while
another thread's release waits for its COMMIT, and distlock while another thread holds a
fenced lock. The workers are pinned to one core and the parent asks them in turn for one
batch of blocks each, so only one runs at a time; the order of the modes turns by one each
round. Each batch reports its wall time (``perf_counter``) and the CPU time of the thread
that ran it (``thread_time``). A round's ratio is a mode's batch over plain Django's batch of
the same round (milliseconds apart: what the machine's load does to one, it mostly does to
the other); the figure is the median of the rounds' ratios, with their 25th and 75th
percentiles. The rounds are shared among ``generations`` sets of fresh processes: where a
process's memory lands moves its speed by a few percent, as much as what is measured, so no
one draw decides a ratio (the lowest and highest generation's medians are given too).

The previous harness swapped the wrapped methods on Django's classes between batches in one
process (each swap threw the interpreter's specialised bytecode away) and took each mode's
fastest batch (one lucky batch decided the figure).

The cases: an outermost block, one with ten nested ``savepoint=False`` blocks, and an
outermost block running one query; on an SQLite file and on a PostgreSQL server of its own
(devkit/databases.py; never the machine's own). ``--tree`` runs distlock's modes from other
clones too (plain Django from the first tree), in the same rounds: a before/after.
Writes benchmarks/results/transactions_cost.json (docs/transactions.md, "Cost", quotes it);
the instruction counts are benchmarks/cost_instructions.py's.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from subprocess import PIPE
from typing import Any

HERE = Path(__file__).resolve()
CASES = (
    "outermost atomic()",
    "outermost + ten nested atomic(savepoint=False)",
    "outermost atomic() running one query",
)
PLAIN = "plain Django"
# The control: plain Django again, in a process of its own. Two processes running the same
# code differ (memory layout, caches): its ratio to the first is that noise floor.
CONTROL = "plain Django, a second process"
MODES = (
    PLAIN,
    CONTROL,
    "distlock",
    "distlock, a release waiting in another thread",
    "distlock, a fenced lock held in another thread",
)
# Blocks per batch: a few milliseconds, far above the clocks' resolution and the wake-up of
# the process asked, short enough that the load rarely changes within a round.
CALLS = 200


# --- the worker: one mode, one process ---------------------------------------------------
def worker(mode: str) -> None:
    """Run batches of blocks as the parent asks (stdin: ``case calls``; stdout: ``wall_ns
    cpu_ns``), in ``mode``, on the DATABASES of the environment (alias "default")."""
    import django
    from django.conf import settings

    settings.configure(
        DATABASES=json.loads(os.environ["COST_DATABASES"]),
        INSTALLED_APPS=[] if mode in (PLAIN, CONTROL) else ["distlock"],
        DISTLOCK={"default": {"BACKEND": "distlock.backends.locmem.LocMemBackend"}},
        USE_TZ=True,
    )
    django.setup()
    if mode in (PLAIN, CONTROL):
        assert not any(name.startswith("distlock") for name in sys.modules)
    else:
        import distlock

        assert distlock.__file__.startswith(os.environ["COST_TREE"]), distlock.__file__
    if hasattr(os, "sched_setaffinity"):  # every worker on the same core, one at a time
        os.sched_setaffinity(0, {int(os.environ["COST_CPU"])})
    blocks = atomic_blocks()
    blocks[2]()  # connected first: a fenced hold puts its wrapper on the open connections
    done = _other_thread(mode)
    for block in blocks:  # warm: connected, caches filled, bytecode specialised
        for _ in range(500):
            block()
    # Start-up's objects out of the collector's way: a full collection landing in one mode's
    # batch and not in another's would outweigh what is measured.
    gc.collect()
    gc.freeze()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        case, calls = map(int, line.split())
        block = blocks[case]
        wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
        for _ in range(calls):
            block()
        cpu, wall = time.thread_time_ns() - cpu, time.perf_counter_ns() - wall
        print(wall, cpu, flush=True)
    if done is not None:
        done()


def atomic_blocks() -> tuple[Callable[[], None], ...]:
    """Return the cases' blocks (CASES' order); cost_instructions.py counts the same ones."""
    from django.db import connections, transaction

    def outermost() -> None:
        with transaction.atomic():
            pass

    def inner() -> Any:
        return transaction.atomic(savepoint=False)

    def nested() -> None:
        with transaction.atomic():  # noqa: SIM117 - nested, as measured
            with inner(), inner(), inner(), inner(), inner():
                with inner(), inner(), inner(), inner(), inner():
                    pass

    def one_query() -> None:
        with transaction.atomic(), connections["default"].cursor() as cursor:
            cursor.execute("SELECT 1")

    return outermost, nested, one_query


def _other_thread(mode: str) -> Callable[[], None] | None:
    """Start the other thread ``mode`` asks for (another request's) and return what ends it,
    or None: a release waiting for its COMMIT (the wrappers' slow path is armed), or a fenced
    lock held outside any transaction (the fence's execute wrapper is on the connections)."""
    import threading

    if mode not in MODES[3:]:
        return None
    from django.db import connections, transaction

    import distlock
    from distlock import claims, transactions

    waiting, done = threading.Event(), threading.Event()

    def hold() -> None:
        if mode == MODES[4]:
            with distlock.lock("cost:fenced", ttl=600, fence=True):
                waiting.set()
                done.wait()
        else:
            with transaction.atomic():
                with distlock.lock("cost:waiting", ttl=600):
                    pass  # released inside the transaction: the release waits for COMMIT
                waiting.set()
                done.wait()
        connections.close_all()

    thread = threading.Thread(target=hold, daemon=True)  # a failed worker still exits
    thread.start()
    waiting.wait()
    if mode == MODES[3]:
        assert transactions._tied
    else:
        assert claims.claim_first in connections["default"].execute_wrappers

    def end() -> None:
        done.set()
        thread.join()

    return end


# --- the parent: rounds, ratios ----------------------------------------------------------
# (wall ns, CPU ns) of each batch, by (run, case): one per round, in order.
Samples = dict[tuple[int, int], list[tuple[int, int]]]


def measure(
    databases: dict[str, Any],
    trees: list[Path],
    rounds: int,
    generations: int,
    calls: int = CALLS,
) -> dict[str, Any]:
    """Return each case's figures for each (tree, mode) against plain Django, from
    ``rounds`` rounds of one batch of ``calls`` blocks per mode and case, run by
    ``generations`` sets of worker processes in turn (each set a fresh process per mode)."""
    runs = [(trees[0], PLAIN), (trees[0], CONTROL)]
    runs += [(tree, mode) for tree in trees for mode in MODES[2:]]
    samples: Samples = {(run, case): [] for run in range(len(runs)) for case in range(len(CASES))}
    for _ in range(generations):
        # The same share each (a remainder is dropped): the generations' medians compare.
        _generation(databases, runs, max(1, rounds // generations), calls, samples)
    results: dict[str, Any] = {}
    for index, (tree, mode) in enumerate(runs[1:], start=1):
        figures = results.setdefault(str(tree), {}).setdefault(mode, {})
        for case, name in enumerate(CASES):
            figures[name] = _figures(samples[0, case], samples[index, case], calls, generations)
    return results


def _generation(
    databases: dict[str, Any],
    runs: list[tuple[Path, str]],
    rounds: int,
    calls: int,
    samples: Samples,
) -> None:
    """Start one worker process per run, add ``rounds`` rounds of batches to ``samples``,
    and end them. Two processes of the same code differ by a few percent (where the
    interpreter's memory lands: caches, branch predictors), as much as what is measured: each
    generation is a new draw, so that no one layout decides a ratio."""
    from devkit.processes import child_env, started_processes

    cpu = str(min(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else "0"
    with started_processes() as start:
        workers = []
        for tree, mode in runs:
            env = child_env(
                COST_DATABASES=json.dumps({"default": databases}), COST_TREE=str(tree), COST_CPU=cpu
            )
            env["PYTHONPATH"] = os.pathsep.join([str(tree), str(HERE.parent.parent)])
            command = [sys.executable, str(HERE), "--worker", mode]
            workers.append(start(command, env, stdin=PIPE, stdout=PIPE, text=True))
        for process in workers:
            assert process.stdout is not None and process.stdout.readline() == "ready\n"
        order = list(range(len(runs)))
        for round_ in range(rounds):
            for case in range(len(CASES)):
                shift = round_ % len(runs)  # each run takes each place in turn
                for run in order[shift:] + order[:shift]:
                    samples[run, case].append(_batch(workers[run], case, calls))
        for process in workers:
            assert process.stdin is not None
            process.stdin.write("quit\n")
            process.stdin.flush()
            process.wait(timeout=30)


def _batch(process: Any, case: int, calls: int) -> tuple[int, int]:
    """Have ``process`` run one batch; return its (wall ns, CPU ns)."""
    process.stdin.write(f"{case} {calls}\n")
    process.stdin.flush()
    wall, cpu = map(int, process.stdout.readline().split())
    return wall, cpu


def _figures(
    plain: list[tuple[int, int]], mine: list[tuple[int, int]], calls: int, generations: int
) -> dict[str, Any]:
    """Return a case's figures: per block, plain Django's and this mode's median wall time
    (µs); for wall and CPU time, the median of the rounds' ratios (this mode's batch over
    plain Django's of the same round), its 25th and 75th percentiles, and the lowest and
    highest of the generations' own medians (how much the processes' draw moves it)."""
    figures: dict[str, Any] = {
        "plain_us": round(statistics.median(wall for wall, _cpu in plain) / calls / 1e3, 2),
        "distlock_us": round(statistics.median(wall for wall, _cpu in mine) / calls / 1e3, 2),
    }
    per = len(plain) // generations
    for clock, at in (("wall", 0), ("cpu", 1)):
        ratios = [own[at] / base[at] for base, own in zip(plain, mine, strict=True)]
        quartiles = statistics.quantiles(ratios, n=4)
        figures[f"{clock}_ratio"] = round(statistics.median(ratios), 3)
        figures[f"{clock}_ratio_p25_p75"] = [round(quartiles[0], 3), round(quartiles[2], 3)]
        if generations > 1:
            medians = [
                statistics.median(ratios[start : start + per])
                for start in range(0, per * generations, per)
            ]
            figures[f"{clock}_ratio_generations"] = [round(min(medians), 3), round(max(medians), 3)]
    return figures


def cost(rounds: int, generations: int, trees: list[Path]) -> dict[str, Any]:
    """Return the figures on an SQLite file and on a PostgreSQL server of its own."""
    from devkit.databases import PostgresServer

    results: dict[str, Any] = {
        "rounds": rounds,
        "generations": generations,
        "blocks_per_batch": CALLS,
    }
    with PostgresServer() as postgres, tempfile.TemporaryDirectory() as directory:
        for vendor, database in (
            ("sqlite", {"ENGINE": "django.db.backends.sqlite3", "NAME": f"{directory}/c.db"}),
            ("postgresql", postgres.django_settings()),
        ):
            results[vendor] = measure(database, trees, rounds, generations)
    return results


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    worker(sys.argv[2])
