"""Worker processes for the shared-lock tests: ``python -m tests.support.shared_workers
COMMAND ...``, configured like tests.support.workers (DISTLOCK_TEST_KIND, DISTLOCK_TEST_URL;
shared data on DISTLOCK_TEST_DATA_URL)."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from tests.support.workers import run, say

# Enter as a reader ('r') or a writer ('w') and count who is inside, in one atomic step:
# return 1 if the entry broke the rule (a writer with anyone, a reader with a writer), and
# keep the most readers seen inside at once.
ENTER = """
local inside = redis.call('INCR', KEYS[1] .. ARGV[1])
local readers = tonumber(redis.call('GET', KEYS[1] .. 'r') or '0')
local writers = tonumber(redis.call('GET', KEYS[1] .. 'w') or '0')
if readers > tonumber(redis.call('GET', KEYS[1] .. 'most') or '0') then
  redis.call('SET', KEYS[1] .. 'most', readers)
end
if writers > 1 or (writers == 1 and readers > 0) then
  redis.call('INCR', KEYS[1] .. 'broken')
  return 1
end
return 0
"""


def _data() -> object:
    import redis

    return redis.Redis.from_url(os.environ["DISTLOCK_TEST_DATA_URL"])


def operate(kind: str, name: str, iterations: str, work_ms: str) -> None:
    """Take the lock (``kind`` "r": shared, "w": exclusive, "d": exclusive, then downgraded
    to shared) ``iterations`` times, each held ``work_ms``; print, as JSON, each operation's
    request, grant and release times (the monotonic clock, one for every process of the
    machine) and fencing token."""
    import distlock

    data = _data()
    enter = data.register_script(ENTER)  # type: ignore[attr-defined]
    shared = kind == "r"
    # Connect and load every script first: the waits measured are the lock's.
    with distlock.lock(f"{name}:warm-up:{os.getpid()}", shared=shared, ttl=10):
        data.ping()  # type: ignore[attr-defined]
    say("ready")
    sys.stdin.readline()  # start together
    operations = []
    if kind == "d":
        say(
            "operations",
            json.dumps([downgrade(name, data, enter, work_ms) for _ in range(int(iterations))]),
        )
        return
    for _ in range(int(iterations)):
        requested = time.monotonic()
        with distlock.lock(name, shared=shared, ttl=10) as lk:
            granted = time.monotonic()
            enter(keys=["in:"], args=[kind])
            time.sleep(int(work_ms) / 1000)
            data.decr(f"in:{kind}")  # type: ignore[attr-defined]
            released = time.monotonic()
        operations.append([requested, granted, released, lk.fencing_token])
    say("operations", json.dumps(operations))


def downgrade(name: str, data: Any, enter: Any, work_ms: str) -> list[float]:
    """Write under the exclusive lock, take the shared lock while holding it (granted at
    once), release the exclusive one and read on: no writer may come in between."""
    import distlock

    requested = time.monotonic()
    with distlock.lock(name, ttl=10) as writer:
        granted = time.monotonic()
        enter(keys=["in:"], args=["w"])
        time.sleep(int(work_ms) / 1000)
        data.decr("in:w")
        reader = distlock.lock(name, shared=True, ttl=10, wait=0)
        if not reader.acquire():
            data.incr("in:refused")
            return [requested, granted, time.monotonic(), writer.fencing_token or 0]
        enter(keys=["in:"], args=["r"])
    time.sleep(int(work_ms) / 1000)  # the exclusive hold released: still a reader
    data.decr("in:r")
    reader.release()
    return [requested, granted, time.monotonic(), writer.fencing_token or 0]


def hold_shared(name: str, ttl: str) -> None:
    """Take the shared lock and hold it until killed (a crashed reader)."""
    import distlock

    lk = distlock.lock(name, shared=True, ttl=float(ttl), wait=10)
    assert lk.acquire()
    say("held", repr(time.monotonic() + float(ttl)))
    time.sleep(3600)


if __name__ == "__main__":
    run({"operate": operate, "hold_shared": hold_shared})
