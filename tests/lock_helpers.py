"""Measurements several lock test modules share."""
from __future__ import annotations

import threading
import time

import distlock


def renewer_threads() -> int:
    """How many renewal threads run in this process (distlock keeps at most one)."""
    return sum(1 for t in threading.enumerate() if t.name == "distlock-renewer")


def handoff_delay(holder: distlock.Lock, waiter: distlock.Lock, settle: float) -> float:
    """Let ``waiter`` wait in another thread for ``settle`` seconds, release ``holder``, and
    return how long after the release the waiter held the lock (it releases it at once).

    Raise AssertionError if the waiter did not get the lock within 5 seconds.
    """
    acquired_at: list[float] = []

    def wait_for_it() -> None:
        if waiter.acquire(wait=5):
            acquired_at.append(time.monotonic())
            waiter.release()

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    time.sleep(settle)
    released = time.monotonic()
    holder.release()
    thread.join()
    assert acquired_at, f"the waiter never got {waiter.name!r}"
    return acquired_at[0] - released


def holder_index(name: str, processes: list, other_than: int | None = None,
                 timeout: float = 15) -> int:
    """Return the index in ``processes`` (Popen objects) of the one that holds ``name``, once
    it is not ``other_than``; raise AssertionError if none does within ``timeout`` seconds."""
    pids = [process.pid for process in processes]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = distlock.locks["default"].info(name)
        if info is not None and info.pid in pids and pids.index(info.pid) != other_than:
            return pids.index(info.pid)
        time.sleep(0.02)
    raise AssertionError(f"none of the processes held {name!r} within {timeout}s")
