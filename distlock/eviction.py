"""Redis servers that may evict lock keys: what the deploy check, the admin and ``distlock
list`` say of them, and whether a lease lost while held was evicted.

A Redis with a memory limit (maxmemory) and a maxmemory-policy other than ``noeviction``
deletes keys when it is full, lock keys among them: the ``allkeys-*`` policies any key, the
``volatile-*`` ones any key with a TTL, which every lock key has. A lock whose key was
evicted is free on the server while its holder still works under it. The figures come from
``INFO memory`` and ``INFO stats`` (backend.memory_reports()), never CONFIG, which managed
services often refuse. A server that cannot be read is reported as nothing: no claim either
way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from .backends.base import BaseLockBackend

if TYPE_CHECKING:  # redis is not imported for LocMemBackend
    from .backends.redis_ops.memory import MemoryReport

T = TypeVar("T")

CHECK_ID = "distlock.W003"
# How long the deploy check waits for an alias's servers: a firewalled address without a
# connect timeout in OPTIONS would otherwise hold ``check --deploy`` (a build step) for
# minutes. Servers not read by then are passed over, as unreachable ones are.
CHECK_TIMEOUT = 5.0
DOCS = "docs/deployments.md"
CHECK_MESSAGE = (
    "DISTLOCK[{alias!r}]: the Redis server at {address} may evict lock keys: its "
    "maxmemory-policy is {policy!r} with maxmemory {maxmemory} bytes. When it is full it "
    "deletes keys, lock keys among them, and a second client can then take a lock whose "
    "holder still works under it."
)
CHECK_HINT = (
    "Set maxmemory-policy to noeviction on that server (redis.conf, or the managed service's "
    "parameter group), or give the locks a Redis of their own with noeviction; see "
    f"{DOCS}. Add '{CHECK_ID}' to SILENCED_SYSTEM_CHECKS to accept the risk."
)


def evicting_servers(backend: BaseLockBackend) -> list[MemoryReport]:
    """Return the memory reports of ``backend``'s servers that may evict lock keys (a memory
    limit and a policy other than noeviction). Servers that cannot be read are left out."""
    return [report for report in backend.memory_reports() if report.may_evict]


def check_messages(alias: str, backend: BaseLockBackend) -> list[str]:
    """Return the deploy check's message for each server of ``alias`` that may evict, as
    far as they answered within CHECK_TIMEOUT."""
    return [
        CHECK_MESSAGE.format(
            alias=alias,
            address=report.address,
            policy=report.policy,
            maxmemory=report.maxmemory,
        )
        for report in read_within(backend.memory_reports, CHECK_TIMEOUT) or []
        if report.may_evict
    ]


def read_within(read: Callable[[], list[T]], timeout: float) -> list[T] | None:
    """Return ``read()`` (reports of an alias's servers) if it comes within ``timeout``
    seconds, else None, without waiting any longer (the deploy checks' bound)."""
    found: list[T] = []
    reader = threading.Thread(
        target=lambda: found.extend(read()),
        name="distlock-server-check",
        daemon=True,  # one still connecting never keeps the process alive
    )
    reader.start()
    reader.join(timeout)
    return None if reader.is_alive() else found


def status_line(alias: str, backend: BaseLockBackend) -> str:
    """Return one line for operators (the admin's status line, ``distlock list``'s header)
    when a server of ``alias`` may evict lock keys; "" when none may (or none was read)."""
    servers = evicting_servers(backend)
    if not servers:
        return ""
    where = ", ".join(f"{report.address} ({report.policy})" for report in servers)
    return (
        f"Warning: DISTLOCK[{alias!r}] is on a Redis that may evict lock keys when full: "
        f"{where}. An evicted lock can be taken by a second holder; set maxmemory-policy "
        f"noeviction ({DOCS})."
    )


def evictions_now(backend: BaseLockBackend) -> dict[str, int]:
    """Return how many keys each readable server of ``backend`` has evicted so far, by
    address: the figure a later loss is compared with."""
    return {
        report.address: report.evicted_keys
        for report in backend.memory_reports()
        if not report.error
    }


def loss_reason(name: str, backend: BaseLockBackend, before: dict[str, int] | None) -> str:
    """Return why the lease on ``name`` was lost when its server evicted keys meanwhile
    (``before``: evictions_now() while the lease was known to be held, None when not
    read); "" when no server evicted any.

    With ``before``, a server whose count rose evicted while the lock was held. Without it,
    a server that may evict and has evicted since it started most likely did. (A Cluster's
    masters are each named that did: the one that held the key is among them.)
    """
    rose, evicting = [], []
    for report in backend.memory_reports():
        if report.error:
            continue
        if before is not None and report.address in before:
            evicted = report.evicted_keys - before[report.address]
            if evicted > 0:
                rose.append(f"{report.address} ({_keys(evicted)}, policy {report.policy!r})")
        elif report.may_evict and report.evicted_keys > 0:
            evicting.append(
                f"{report.address} (policy {report.policy!r}, {_keys(report.evicted_keys)} "
                "evicted since it started)"
            )
    if rose:
        cause = f"evicted by Redis: keys were evicted while it was held at {', '.join(rose)}"
    elif evicting:
        cause = f"most likely evicted by Redis: {', '.join(evicting)}"
    else:
        return ""
    return (
        f"The lease on {name!r} was lost while held, {cause}. Work done since may have "
        "overlapped with another holder. Set maxmemory-policy noeviction on that server or "
        f"give the locks a Redis of their own ({DOCS})."
    )


def _keys(count: int) -> str:
    return f"{count} key" if count == 1 else f"{count} keys"
