"""Worker processes for the semaphore and cache tests: ``python -m tests.support.semaphore_workers
COMMAND ...``, configured like tests.support.workers (DISTLOCK_TEST_KIND, DISTLOCK_TEST_URL; shared
data on DISTLOCK_TEST_DATA_URL)."""

from __future__ import annotations

import json
import os
import sys
import time

from tests.support.workers import run, say

# Count one holder in, and keep the highest count seen, in one atomic step.
ENTER = """
local inside = redis.call('INCR', KEYS[1])
if inside > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], inside)
end
return inside
"""


def _data() -> object:
    import redis

    return redis.Redis.from_url(os.environ["DISTLOCK_TEST_DATA_URL"])


def permits(name: str, limit: str, iterations: str, work_ms: str) -> None:
    """Take a permit ``iterations`` times, count the holders inside (at the data server) and
    print every wait, in seconds, as JSON when done."""
    import distlock

    data = _data()
    enter = data.register_script(ENTER)  # type: ignore[attr-defined]
    waits = []
    # Connect and load every script first: the waits measured are the semaphore's, not the
    # first connection's of the process ahead in the queue.
    with distlock.semaphore(f"{name}:warm-up", 1, ttl=10):
        enter(keys=["warm-up", "warm-up:most"])
    say("ready")
    sys.stdin.readline()  # start together
    for _ in range(int(iterations)):
        started = time.monotonic()
        with distlock.semaphore(name, int(limit), ttl=10):
            waits.append(time.monotonic() - started)
            enter(keys=["inside", "most_inside"])
            time.sleep(int(work_ms) / 1000)
            data.decr("inside")  # type: ignore[attr-defined]
    say("waits", json.dumps(waits))


def hold_permit(name: str, limit: str, ttl: str) -> None:
    """Take a permit and hold it until killed (a crashed holder)."""
    import distlock

    permit = distlock.semaphore(name, int(limit), ttl=float(ttl), wait=10)
    assert permit.acquire()
    say("held", permit.fencing_token)
    time.sleep(3600)


def permit_waiter(name: str, limit: str, rounds: str) -> None:
    """Wait for a permit ``rounds`` times, each when told on stdin; print when each wait
    ended (monotonic clock)."""
    import distlock

    say("ready")
    for _ in range(int(rounds)):
        sys.stdin.readline()
        permit = distlock.semaphore(name, int(limit), ttl=10, wait=30)
        assert permit.acquire()
        say("acquired", repr(time.monotonic()))
        sys.stdin.readline()  # the test says when to give it back
        permit.release()
        say("released")
    say("done")


def cached(key: str, stale: str, build_ms: str) -> None:
    """Call distlock.cache.get_or_set once on ``key`` when a line arrives on stdin; print the
    value and how long the call took. The build counts its runs at the data server."""
    from distlock.cache import get_or_set

    data = _data()

    def build() -> str:
        data.incr("builds")  # type: ignore[attr-defined]
        time.sleep(int(build_ms) / 1000)
        return "built"

    say("ready")
    sys.stdin.readline()
    started = time.monotonic()
    value = get_or_set(key, build, 60, stale=float(stale) or None, wait=10)
    say("value", value, repr(time.monotonic() - started))


if __name__ == "__main__":
    run(
        {
            "permits": permits,
            "hold_permit": hold_permit,
            "permit_waiter": permit_waiter,
            "cached": cached,
        }
    )
