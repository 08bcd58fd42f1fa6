"""A CPU-bound job beside a benchmark: busy-loop processes started and stopped by it.

The contention section runs once on the machine as it is ("quiet") and once with one busy
loop per core beside it ("loaded"), so that its K processes outnumber the cores they get, as
the workers of a busy gunicorn box do. Starting the load itself makes the loaded figures
reproducible: they do not depend on what else happens to run. The machine's own load
(/proc/loadavg, which counts the loops too) is recorded around each mode.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from devkit.processes import start_process

# Pure Python, no I/O: runnable all the time, as a CPU-bound request or a report job is.
BUSY_LOOP = "while True: pass"


def cores() -> int:
    """How many busy loops make the loaded mode: one per core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def busy_loops(count: int) -> Iterator[list[int]]:
    """Run ``count`` busy-loop processes while the block runs; yield their pids."""
    processes = [start_process([sys.executable, "-c", BUSY_LOOP]) for _ in range(count)]
    try:
        yield [process.pid for process in processes]
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.wait()


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded."""
    return [round(value, 2) for value in os.getloadavg()]
