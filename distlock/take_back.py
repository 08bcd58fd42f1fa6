"""Taking back a lock whose release waits for a transaction the running code is in.

Code of the same transaction that asks for the lock again (an order met twice, another task
of it under ``asyncio.gather``) holds it again at once, as the database's own locks stack
within a session, instead of waiting for its own COMMIT (docs/transactions.md). Which
release waits, and for which transactions: the Lock's ties (transactions.LockTies).

``lock`` is the Lock that asks, ``held`` the Lock whose release waits (often the same
object); neither is imported here, since lock.py imports this module.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from .backends.base import lease_end
from .backends.operations import Operations
from .exceptions import LockError


# unasync: the async source of the sync code after it
async def atake_back(lock: Any, held: Any) -> bool:
    """Hold again, at once, the lock whose release waits for this thread's transaction
    (an order met twice in one transaction), as the database's own locks stack within a
    session. Return False if that hold has ended meanwhile."""
    ttl_ms = _stop_waiting(lock, held)
    if ttl_ms is None:
        return False
    started = time.monotonic()
    try:
        extended = await held.operations.aextend(lock.name, held.token or "", ttl_ms)
    except BaseException:
        held._forget()
        raise
    return _adopt(lock, held, extended, started, ttl_ms)


async def atake_back_from_queue(lock: Any, operations: Operations, token: str, held: Any) -> bool:
    """Leave the server's queue of waiters (as ``token``), then take ``held``'s waiting
    release back."""
    with contextlib.suppress(LockError):  # the registration expires on its own
        await operations.aleave(lock.name, token)
    return await atake_back(lock, held)


# Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
def take_back(lock: Any, held: Any) -> bool:
    """Hold again, at once, the lock whose release waits for this thread's transaction
    (an order met twice in one transaction), as the database's own locks stack within a
    session. Return False if that hold has ended meanwhile."""
    ttl_ms = _stop_waiting(lock, held)
    if ttl_ms is None:
        return False
    started = time.monotonic()
    try:
        extended = held.operations.extend(lock.name, held.token or "", ttl_ms)
    except BaseException:
        held._forget()
        raise
    return _adopt(lock, held, extended, started, ttl_ms)


def take_back_from_queue(lock: Any, operations: Operations, token: str, held: Any) -> bool:
    """Leave the server's queue of waiters (as ``token``), then take ``held``'s waiting
    release back."""
    with contextlib.suppress(LockError):  # the registration expires on its own
        operations.leave(lock.name, token)
    return take_back(lock, held)


# unasync: end


def _stop_waiting(lock: Any, held: Any) -> int | None:
    """Cancel ``held``'s waiting release; return ``lock``'s lease (ms), or None when the
    release has begun already."""
    if not held._ties.resume():
        return None
    operations = held.operations
    return operations.lease_ms(lock.ttl if lock.ttl is not None else operations.default_timeout)


def _adopt(lock: Any, held: Any, extended: bool, started: float, ttl_ms: int) -> bool:
    """``lock`` holds ``held``'s hold again, its lease renewed to ``ttl_ms`` from ``started``;
    or, when the renewal found it gone, nobody does (return False)."""
    if not extended:  # its lease ended while its release waited for the transaction
        if held._lease.lost_while_waiting(held):  # the renewer's look had not found it
            held._report_lost()
        held._forget()
        return False
    lock._hold_again(held, ttl_ms, lease_end(started, ttl_ms))
    return True
