"""What a Redis server says of its memory: whether it may evict lock keys, how many keys it
has evicted, and its out-of-memory refusals.

Read from ``INFO memory`` and ``INFO stats``, never ``CONFIG GET``: managed services (and
servers that rename CONFIG) often refuse the latter to clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

# The one maxmemory-policy under which a server never deletes a key before its TTL ends.
NO_EVICTION = "noeviction"
# What a server answers to a write it refuses for memory: redis-py's OutOfMemoryError from
# a plain command or a script on Redis 7, a ResponseError quoting it from a script on 6.2.
OOM_ERROR = "OOM command not allowed"


@dataclass(frozen=True)
class MemoryReport:
    """One server's memory settings and evictions, or why they could not be read."""

    address: str
    policy: str = ""
    maxmemory: int = 0  # bytes; 0: no limit
    evicted_keys: int = 0  # since the server started (or CONFIG RESETSTAT)
    error: str = ""  # the server could not be read: nothing is known of it

    @property
    def may_evict(self) -> bool:
        """Whether the server can delete a lock's key while its lease runs: a memory limit
        and a policy that evicts. Without a limit (maxmemory 0) no policy ever acts."""
        return not self.error and self.maxmemory > 0 and self.policy != NO_EVICTION


def read_memory(client: Any, address: str) -> MemoryReport:
    """Return what the server of ``client`` (a plain redis-py client) says of its memory, in
    one round trip; a report with ``error`` when it cannot be read."""
    try:
        pipe = client.pipeline(transaction=False)
        pipe.info("memory")
        pipe.info("stats")
        memory, stats = pipe.execute()
    except (redis.RedisError, OSError) as exc:
        return MemoryReport(address, error=f"{type(exc).__name__}: {exc}")
    return MemoryReport(
        address,
        policy=str(memory.get("maxmemory_policy", "")),
        maxmemory=int(memory.get("maxmemory", 0)),
        evicted_keys=int(stats.get("evicted_keys", 0)),
    )


def is_out_of_memory(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or the error it was raised from) is a server's refusal of a write
    for memory (maxmemory reached under a policy that could not free any)."""
    while exc is not None:
        if isinstance(exc, redis.exceptions.OutOfMemoryError) or (
            isinstance(exc, redis.exceptions.ResponseError) and OOM_ERROR in str(exc)
        ):
            return True
        exc = exc.__cause__
    return False


def out_of_memory_message(address: str) -> str:
    """What BackendUnavailable says when the server at ``address`` refused a write for
    memory."""
    return (
        f"Redis at {address} is out of memory: it reached its maxmemory and refuses writes "
        "(OOM), so the lock was not taken. Free memory (delete keys, or give other data a "
        "Redis of its own) or raise maxmemory; locks already held still release. See "
        "docs/deployments.md."
    )
