"""A holder SIGKILLed inside its critical section: nobody gets the lock before its lease
ends, and the next waiter gets it right after.

Redis ends a blocking command's timeout (the waiter's BLPOP, which lasts until the holder's
lease ends) on its periodic tick, ``hz`` times a second (10 by default): up to 100 ms late.
distlock's waiter does not wait for that tick: it ends its own BLPOP on its clock (a PING on
the blocked connection), so the lock is taken a few ms after the lease at either ``hz``
(measured at full scale: median 4 ms, max 8 ms). Both settings are run to keep it so."""

# Its holders are forked by the zygote (tests/faults/conftest.py): these tests need its speed,
# killing and replacing holders many times.

from __future__ import annotations

import random
import statistics
import time

import pytest

import distlock
from devkit.redis_server import RedisServer
from tests.conftest import _use
from tests.faults.conftest import scaled, scaled_timeout
from tests.faults.helpers import wait_for_holder

pytestmark = [pytest.mark.django_db(databases=[]), scaled_timeout]
LEASE = 0.3  # seconds: short, so that 200 crashes take about a minute
# Re-acquired at most this long after the lease ended: ttl + 200 ms, as the foundation issue
# asks (measured at full scale: max 8 ms at either hz over 250 kills).
MARGIN = 0.2


@pytest.fixture(params=[10, 100], ids=lambda hz: f"hz{hz}")
def server_hz(request, settings):
    """A redis-server of the test's own with the given ``hz``; DISTLOCK points at it."""
    server = RedisServer(["--hz", str(request.param)]).start()
    _use(settings, "redis", server.url)
    yield server, request.param
    server.stop()


def test_a_killed_holders_lock_is_taken_when_its_lease_ends(spawn, server_hz, record):
    server, hz = server_hz
    kills = scaled(ci=20, full=200) if hz == 10 else scaled(ci=10, full=50)
    backend = distlock.locks["default"]
    delays = []
    for round_ in range(kills):
        holder = spawn("hold", url=server.url, name="crash", ttl=LEASE)
        wait_for_holder(backend, "crash", holder.pid)
        held = backend.info("crash")
        time.sleep(random.uniform(0, LEASE / 3))  # somewhere inside its critical section
        holder.kill()
        assert holder.wait() == -9
        successor = distlock.lock("crash", ttl=5)
        assert successor.acquire(wait=LEASE + 5), f"round {round_}: never re-acquired"
        taken = backend.info("crash")
        successor.release()
        # Both instants are the server's clock (ms): no overlap means it was granted only once
        # the killed holder's lease had ended.
        delay = (taken.acquired_at - held.expires_at).total_seconds()
        assert delay >= -0.001, f"round {round_}: granted {-delay:.3f}s before the lease ended"
        assert taken.fencing_token > held.fencing_token
        delays.append(delay)
    assert max(delays) < MARGIN, sorted(delays)[-5:]
    record(
        f"Holder SIGKILLed inside its critical section (redis-server hz {hz})",
        f"{kills}/{kills} re-acquired after the lease ended and never before (0 overlaps); "
        f"delay after the {LEASE}s lease: median {statistics.median(delays) * 1000:.0f} ms, "
        f"max {max(delays) * 1000:.0f} ms",
        kills=kills,
        lease_seconds=LEASE,
        overlaps=0,
        hz=hz,
        median_delay_ms=round(statistics.median(delays) * 1000, 1),
        max_delay_ms=round(max(delays) * 1000, 1),
    )
