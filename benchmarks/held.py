"""Hold many locks at once, fast: the backend's own acquire and release scripts, pipelined.

Each lock is taken by exactly the script a ``distlock.lock(name).acquire()`` runs (same keys,
metadata, index entry and fencing token), only many per round trip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from distlock.backends.operations import Request
from distlock.backends.redis_ops import holds as lock_ops
from distlock.backends.redis_ops.steps import EvalMany
from distlock.handler import locks
from distlock.info import holder_metadata

BATCH = 2_000  # scripts per pipeline: well within the 2 s socket timeout


def _batches(names: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(names), BATCH):
        yield names[start : start + BATCH]


def acquire_all(names: list[str], ttl_ms: int) -> dict[str, str]:
    """Hold every lock in ``names`` for ``ttl_ms``; return their tokens by name."""
    backend = locks["default"]
    meta = holder_metadata(None)
    tokens = {}
    for batch in _batches(names):
        acquires = []
        for name in batch:
            tokens[name] = os.urandom(16).hex()
            acquires.append(
                lock_ops.acquire_call(backend.layout, Request(name, tokens[name], ttl_ms, meta, 0))
            )
        replies = backend.execute(EvalMany(acquires))
        if not all(lock_ops.attempt_from(reply).acquired for reply in replies):
            raise RuntimeError("a lock meant to be free was held")
    return tokens


def release_all(tokens: dict[str, str]) -> None:
    backend = locks["default"]
    for batch in _batches(list(tokens)):
        releases = [
            lock_ops.release_call(backend.layout, name, tokens[name], False) for name in batch
        ]
        backend.execute(EvalMany(releases))
