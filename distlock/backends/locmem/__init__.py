"""LocMemBackend: locks and semaphores inside this process, for tests and development.

The rules are the Redis scripts' (distlock/backends/redis_ops/lua/), kept in memory (.store):
a semaphore's permits freed while tokens wait are reserved for them in arrival order (for
HANDOFF_GRACE_MS), and waiters are woken through the store's condition, as the scripts do it
through one list per waiter. One operations object per kind: .exclusive, .shared, .semaphores.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from ...info import LockInfo, WaiterInfo
from ...keys import validate_name
from ..base import BaseLockBackend
from ..operations import Operations
from ..settings import Problems
from .store import Store, stores, stores_guard


class LocMemBackend(BaseLockBackend):
    """Keep locks in this process's memory: no server, no mutual exclusion across processes.

    A system check warns when it is configured with ``DEBUG = False``.
    """

    def configure(self, params: dict[str, Any], problems: Problems) -> None:
        super().configure(params, problems)
        location = params.get("LOCATION", "")
        with stores_guard:
            self.store = stores.setdefault(f"{self.key_prefix}:{location}", Store())

    # Each kind's in-memory operations class, as its definition names it.
    kind_family: ClassVar[str] = "locmem"
    kind_classes: ClassVar[dict[str, type[Operations]]] = {}

    def info(self, name: str) -> LockInfo | None:
        # The exclusive holder, else the first shared holder to end (as on Redis).
        with self.store.changed:  # (reentrant: one look at both kinds)
            return next(iter(self.exclusive.inspect(name) or self.shared.inspect(name)), None)

    def waiters(self, name: str) -> list[WaiterInfo] | None:
        validate_name(name)
        with self.store.changed:
            registered = self.store.registered(name)
        now_ms = time.time_ns() // 1_000_000
        return [
            WaiterInfo.from_stored(meta_json=meta, arrival_us=arrival, now_ms=now_ms)
            for meta, arrival in registered
        ]
