"""The Node.js and Ruby clients end a wait on their own clock, not on the server's ``hz``
timer (docs/protocol.md, "Ending a BLPOP on time"): with ``hz 10`` a BLPOP's timeout ends at
the server's next tick, up to 100 ms late, and back-to-back waits fall in step with the ticks
(a 20 ms wait then returns about 80 ms late, every time). Each client, holding the lock
itself, times acquires of it with a 20 ms wait against a server started with ``--hz 10``."""

from __future__ import annotations

import statistics
from collections.abc import Iterator

import pytest

from devkit.node import Node
from devkit.paths import ROOT
from devkit.processes import child_env, run_process
from devkit.redis_server import RedisServer
from devkit.ruby import Ruby

WAIT_MS = 20
CALLS = 9
# Issue 43's acceptance: the Node.js and Ruby clients' waits end within W + 10 ms at hz 10.
# The median of CALLS waits must, with no room added: one wait's lateness is one sample of
# the machine's scheduling, which a loaded 2-core machine stretches past 10 ms now and then
# (the contract's p99 is a benchmark figure: benchmarks/wait_bound.py). On the shared 2-core
# development machine, 5 runs: medians 2.0 to 3.6 ms (Node.js) and 2.2 to 2.6 ms (Ruby),
# the worst single wait 11.5 ms; beside a CPU-bound loop, 3 runs: medians 3.8 to 5.2 and
# 2.1 to 5.9 ms, the worst single wait 21.2 ms. Without the clients' own timer, the waits
# end on the server's: medians 80.8 and 80.5 ms.
LATE_BOUND_MS = 10

RUBY_TIMER = """
library, url, scripts, wait_ms, count = ARGV
require library
client = Distlock::Client.new(url: url, prefix: 'test', scripts_dir: scripts)
holder = client.acquire('late', ttl_ms: 60_000, wait_ms: 0) or raise 'held already'
late = Array.new(Integer(count)) do
  began = Process.clock_gettime(Process::CLOCK_MONOTONIC, :float_millisecond)
  client.acquire('late', ttl_ms: 60_000, wait_ms: Integer(wait_ms)) and raise 'acquired'
  now = Process.clock_gettime(Process::CLOCK_MONOTONIC, :float_millisecond)
  format('%.1f', now - began - Integer(wait_ms))
end
client.release('late', holder.token)
client.close
puts "late #{late.join(' ')}"
"""


@pytest.fixture(scope="module")
def slow_timer_server() -> Iterator[RedisServer]:
    """A server whose timer runs 10 times a second (Redis' default, set explicitly)."""
    server = RedisServer(["--hz", "10"]).start()
    yield server
    server.stop()


def lateness(output: str) -> list[float]:
    """The ms past the wait of each acquire, from the "late MS MS ..." line."""
    words = output.split()
    assert words[:1] == ["late"], output
    return [float(ms) for ms in words[1:]]


def check(late: list[float]) -> None:
    print(f"ms past a {WAIT_MS} ms wait at hz 10: {sorted(late)}")
    assert len(late) == CALLS
    assert min(late) >= -1, "a wait never ends before W"
    median = statistics.median(late)
    assert median <= LATE_BOUND_MS, f"the waits ended {median} ms past W: on the server's timer?"


def test_a_node_wait_ends_on_time_at_hz_10(
    node_client: Node, slow_timer_server: RedisServer
) -> None:
    env = child_env()
    env["DISTLOCK_NODE_URL"] = slow_timer_server.url
    worker = ROOT / "tests" / "interop" / "node_worker.mjs"
    result = run_process(
        [node_client.binary, str(worker), "late", "late", str(WAIT_MS), str(CALLS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    check(lateness(result.stdout))


def test_a_ruby_wait_ends_on_time_at_hz_10(
    ruby_client: Ruby, slow_timer_server: RedisServer
) -> None:
    scripts = ROOT / "distlock" / "backends" / "redis_ops" / "lua"
    command = [ruby_client.binary, "-e", RUBY_TIMER, "--"]
    library = str(ruby_client.client / "distlock_client")
    result = run_process(
        [*command, library, slow_timer_server.url, str(scripts), str(WAIT_MS), str(CALLS)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    check(lateness(result.stdout))
