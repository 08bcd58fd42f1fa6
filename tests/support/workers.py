"""Worker processes for the multi-process tests: ``python -m tests.support.workers COMMAND ...``.

Each worker is a real, separate Python process with its own connections, configured like
the test process through DISTLOCK_TEST_KIND and DISTLOCK_TEST_URL (devkit.configs); the data
the locks protect lives on the Redis server at DISTLOCK_TEST_DATA_URL.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable


def setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "devkit.settings")
    import django
    from django.conf import settings

    from devkit.configs import distlock_settings

    django.setup()
    settings.DISTLOCK, settings.CACHES = distlock_settings(
        os.environ["DISTLOCK_TEST_KIND"], os.environ["DISTLOCK_TEST_URL"]
    )


def say(*words: object) -> None:
    print(*words, flush=True)


def counter(name: str, iterations: str, mode: str = "") -> None:
    """Increment a counter in Redis with a non-atomic read-modify-write, inside the lock, and
    check at the 'resource' that fencing tokens only go up. ``mode`` "non-fair": the lock is
    made with fair=False (else the alias's FAIR)."""
    import redis

    import distlock

    data = redis.Redis.from_url(os.environ["DISTLOCK_TEST_DATA_URL"])
    say("ready")
    for _ in range(int(iterations)):
        fair = False if mode == "non-fair" else None
        with distlock.lock(name, ttl=10, wait=None, fair=fair) as lk:
            value = int(data.get("counter") or 0)
            last_fence = int(data.get("fence") or 0)
            if lk.fencing_token <= last_fence:
                data.incr("fence_violations")
            data.set("fence", lk.fencing_token)
            data.set("counter", value + 1)
    say("done")


def hold(name: str, ttl: str, renewed: str = "") -> None:
    """Acquire and hold until killed (a crashed holder); ``renewed`` "renewed": the lease is
    renewed while the process lives, so it runs out ``ttl`` after the kill."""
    import distlock

    lk = distlock.lock(name, ttl=float(ttl), wait=10, auto_renew=renewed == "renewed")
    assert lk.acquire()
    say("held", lk.fencing_token)
    time.sleep(3600)


def hold_then_extend(name: str, ttl: str, purpose: str) -> None:
    """Acquire with ``purpose``, then extend() when a line arrives on stdin; print how the
    extend went (an operator may have force released the lock in between)."""
    import distlock

    lk = distlock.lock(name, ttl=float(ttl), wait=10, purpose=purpose)
    assert lk.acquire()
    say("held", lk.fencing_token)
    sys.stdin.readline()
    try:
        lk.extend()
    except distlock.LockError as exc:
        say("extend", type(exc).__name__)
    else:
        say("extend", "ok")


def waiter(name: str, rounds: str) -> None:
    """Wait for the lock ``rounds`` times; print when each wait ended (monotonic clock)."""
    import distlock

    say("ready")
    for _ in range(int(rounds)):
        lk = distlock.lock(name, ttl=10, wait=30)
        assert lk.acquire()
        say("acquired", repr(time.monotonic()))
        lk.release()
        time.sleep(0.03)  # let the other side take the lock for the next round
    say("done")


def lead(name: str, ttl: str, log_path: str) -> None:
    """Campaign for leadership of ``name``; log to ``log_path`` lines "elected TERM TIME",
    "revoked TERM TIME" (from the callbacks) and, every 50 ms while leading, "act TERM TIME"
    (wall clock, which every process of the test shares)."""
    import distlock

    with open(log_path, "a", buffering=1) as log:

        def write(kind: str, term: object) -> None:
            log.write(f"{kind} {term} {time.time():.6f}\n")

        leader = distlock.leader(
            name,
            ttl=float(ttl),
            on_elected=lambda lead: write("elected", lead.term),
            on_revoked=lambda lead: write("revoked", lead.term),
        )
        with leader:
            say("ready")
            while True:
                if leader.is_leader:
                    write("act", leader.term)
                time.sleep(0.05)


def run(commands: dict[str, Callable[..., object]]) -> None:
    """A worker module's main: set Django up, then run the command its first argument names
    with the rest as its arguments."""
    setup()
    command, *arguments = sys.argv[1:]
    commands[command](*arguments)


if __name__ == "__main__":
    run(
        {
            "counter": counter,
            "hold": hold,
            "hold_then_extend": hold_then_extend,
            "waiter": waiter,
            "lead": lead,
        }
    )
