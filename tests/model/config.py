"""The configurations the checker runs: who the clients are (kind, clock rate, lease, wait,
how many acquires), and which drift rule they follow."""

from __future__ import annotations

import dataclasses

from .client import Client


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    clients: tuple[Client, ...]
    depth: int  # CI's depth (a run by hand may go deeper)


def _client(name: str, kind: str = "exclusive", **options: object) -> Client:
    defaults: dict[str, object] = {"rate": 1.0, "lease": 1000, "wait": 2000, "rounds": 2}
    return Client(name=name, kind=kind, **{**defaults, **options})  # type: ignore[arg-type]


def rate(rule: str = "new") -> Config:
    """A holder with a long lease; a waiter whose clock runs 1% slow and which holds a short
    lease after waiting (the clock-rate hole of issue 44 needs wait x 1% > lease x 1% + 3 ms)."""
    return Config(
        f"rate ({rule} drift rule)",
        (
            _client("A", rate=1.01, lease=1000, wait=0, rounds=1, rule=rule),
            _client("B", rate=0.99, lease=100, wait=3000, rounds=1, rule=rule),
        ),
        depth=9,
    )


def no_discard() -> Config:
    """A waiter that cancels but keeps the connection of its pending BLPOP + EVALSHA open
    (breaking the error path's MUST): that acquire runs after the error path."""
    return Config(
        "cancel without discarding the connection",
        (
            _client("A", wait=0, lease=500, rounds=1, faults=False),
            _client("B", lease=300, wait=1500, rounds=1, discard=False),
        ),
        depth=7,
    )


CONFIGS = {
    "exclusive": Config(
        "exclusive",
        (_client("A", rate=1.01, wait=0, lease=500), _client("B", rate=0.99, lease=300, wait=1500)),
        depth=8,
    ),
    "exclusive3": Config(
        "exclusive3",
        (
            _client("A", wait=0, lease=500, rounds=1),
            _client("B", rate=0.99, lease=300, wait=1500, rounds=1),
            _client("C", rate=1.01, lease=300, wait=1500, rounds=1),
        ),
        depth=6,
    ),
    "shared": Config(
        "shared",
        (
            _client("A", wait=1500, lease=500, rounds=1),
            _client("B", "shared", rate=0.99, lease=300, wait=1500, rounds=1),
            _client("C", "shared", rate=1.01, lease=300, wait=1500, rounds=1),
        ),
        depth=6,
    ),
    "semaphore": Config(
        "semaphore",
        (
            _client("A", "semaphore", rate=1.01, lease=500, wait=0, rounds=1),
            _client("B", "semaphore", rate=0.99, lease=300, wait=1500, rounds=1),
            _client("C", "semaphore", lease=300, wait=1500, rounds=1),
        ),
        depth=6,
    ),
    "rate": rate("new"),
    # Non-fair locks ("Non-fair locks"): '!' tokens, whose waiters send the BLPOP alone.
    "nonfair": Config(
        "nonfair",
        (
            _client("A", rate=1.01, wait=0, lease=500, fair=False),
            _client("B", rate=0.99, lease=300, wait=1500, fair=False),
        ),
        depth=8,
    ),
    # Fair and non-fair clients on one name: a non-fair holder that never waits, a non-fair
    # waiter and a fair one. Depth 6 reaches a woken non-fair waiter that gives up (its
    # leave_queue.lua wakes the next waiter).
    "mixed3": Config(
        "mixed3 (fair and non-fair on one name)",
        (
            _client("A", wait=0, lease=500, rounds=1, fair=False),
            _client("B", rate=0.99, lease=300, wait=1500, rounds=1, fair=False),
            _client("C", rate=1.01, lease=300, wait=1500, rounds=1),
        ),
        depth=6,
    ),
}
