"""One competing process: ``python -m benchmarks.contention_worker REDIS_URL``.

It prints ``ready``, then reads one JSON job per line from stdin and answers each with one
JSON line. A job names a library, a lock, a counter key and a time window (``start``,
``end``, on the wall clock every worker shares). Until ``end`` the worker takes the lock,
does a deliberately non-atomic read-modify-write of the counter (GET, then SET), and
releases. The counter holds ``count:pid`` so the next holder sees who held it last.

For every acquisition it also reports when the wait began, when acquire() returned, when
release() was called and when it returned (wall clock), and how long this process was
runnable but not running (its run-queue delay, from /proc/self/schedstat) while it waited and
while it held the lock; and for the whole job, the CPU time it used (same file).
Those reads happen outside the timed wait, the same way for every library; where the file
does not exist (not Linux) the delays are reported as None.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import redis

from benchmarks import anchors
from benchmarks.harness import configure_distlock


class RunQueue:
    """This process's total run-queue delay and CPU time so far (ns), from
    /proc/self/schedstat."""

    def __init__(self) -> None:
        try:
            self.fd: int | None = os.open("/proc/self/schedstat", os.O_RDONLY)
        except OSError:
            self.fd = None

    def delay_ns(self) -> int:
        if self.fd is None:
            return 0
        return int(os.pread(self.fd, 128, 0).split()[1])

    def cpu_ns(self) -> int:
        if self.fd is None:
            return 0
        return int(os.pread(self.fd, 128, 0).split()[0])


def compete(
    make: Callable[[str], Any], data: redis.Redis, job: dict[str, Any], me: str
) -> dict[str, Any]:
    name, counter = job["name"], job["counter"]
    delay = job["start"] - time.time()
    if delay > 0:
        time.sleep(delay)
    clock = time.perf_counter
    waits: list[int] = []
    # Per acquisition: wait began, acquired, released (us since job["start"]), the run-queue
    # delay (us) while waiting and while holding, and when release() was called (us).
    spans: list[tuple[int, int, int, int, int, int]] = []
    run_queue = RunQueue()
    start = job["start"]
    handoffs = 0
    cpu = run_queue.cpu_ns()
    while time.time() < job["end"]:
        lock = make(name)
        queued = run_queue.delay_ns()
        began = time.time()
        asked = clock()
        lock.acquire()
        waited = clock() - asked
        acquired = time.time()
        queued_acquired = run_queue.delay_ns()
        value = data.get(counter)
        count, _, previous = (value or b"0:").decode().partition(":")
        data.set(counter, f"{int(count) + 1}:{me}")
        releasing = time.time()
        lock.release()
        released = time.time()
        queued_released = run_queue.delay_ns()
        waits.append(round(waited * 1e6))
        spans.append(
            (
                round((began - start) * 1e6),
                round((acquired - start) * 1e6),
                round((released - start) * 1e6),
                (queued_acquired - queued) // 1000,
                (queued_released - queued_acquired) // 1000,
                round((releasing - start) * 1e6),
            )
        )
        handoffs += previous not in ("", me)
    return {
        "acquisitions": len(waits),
        "handoffs": handoffs,
        "waits_us": waits,
        "spans": spans,
        "run_queue": run_queue.fd is not None,
        "cpu_us": (run_queue.cpu_ns() - cpu) // 1000,
    }


def main(url: str) -> None:
    configure_distlock(url)
    data = redis.Redis.from_url(url)
    factories = {
        library: anchors.lock_factory(library, url) for library in anchors.CONTENDED_LIBRARIES
    }
    me = str(os.getpid())
    print("ready", flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        result = compete(factories[job["library"]], data, job, me)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
