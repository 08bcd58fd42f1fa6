"""Releases that wait for the database: a lock released inside ``transaction.atomic()`` is
handed on only when that transaction has ended (docs/transactions.md).

Django runs an ``on_commit`` callback after COMMIT and drops it on ROLLBACK (of the whole
transaction, or of a savepoint inside which it was registered, or when the connection is
closed). A waiting release registers one callback per database alias whose connection is in
an atomic block, and frees the lock once each of them has been either run or dropped. A
dropped callback is noticed at once through ``weakref.finalize``: CPython frees an object as
soon as its last reference goes, and nothing but Django's list of pending callbacks refers to
it (nothing here may make it part of a reference cycle, or its end would wait for the garbage
collector).

Django's ``TestCase`` wraps each test in atomic blocks that never commit; they do not count
(Django marks them ``_from_testcase``, as it does for ``durable``). Inside them the code's own
outermost block stands for the transaction: it ends by releasing a savepoint, which runs no
callback, so the end of such a block is watched for by the renewer thread every
``TEST_WATCH_INTERVAL`` seconds, and checked at once when the same thread asks for the lock
again. A rollback of that block drops the callback as in production.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any

from django.db import connections

from . import renewal

logger = logging.getLogger("distlock")
TEST_WATCH_INTERVAL = 0.01
# Isolation levels whose snapshot can predate the lock: a row read after acquiring may be
# older than the previous holder's committed write.
SNAPSHOT_LEVELS = frozenset({"repeatable read", "serializable"})


def open_transactions() -> list[Any]:
    """Return this thread's database connections that are inside an atomic block of the
    code's own (the blocks Django's TestCase wraps around a test do not count)."""
    return [conn for conn in connections.all(initialized_only=True) if _own_blocks(conn)]


def _own_blocks(conn: Any) -> list[Any]:
    if not conn.in_atomic_block:
        return []
    return [block for block in conn.atomic_blocks if not getattr(block, "_from_testcase", False)]


def snapshot_isolation_aliases() -> list[str]:
    """Return the aliases whose open transaction reads from a snapshot (REPEATABLE READ or
    SERIALIZABLE) as far as the connection's settings tell (no query is sent).

    Every acquire asks, so the common case is kept cheap: unless some alias sets an
    isolation level in its OPTIONS, every connection reads at READ COMMITTED (Django's
    default on PostgreSQL and MySQL/MariaDB alike) and no connection is looked at.
    """
    if not any(
        "isolation_level" in (database.get("OPTIONS") or {})
        for database in connections.settings.values()
    ):
        return []
    return [conn.alias for conn in open_transactions() if _isolation(conn) in SNAPSHOT_LEVELS]


def _isolation(conn: Any) -> str:
    level = getattr(conn, "isolation_level", None)  # set by the postgresql and mysql backends
    name = getattr(level, "name", level)  # psycopg's IsolationLevel, or MySQL's text
    return str(name or "").replace("_", " ").lower()


class PendingRelease:
    """A release that waits until every transaction open when it was asked for has ended.

    ``finish`` frees the lock; it is called once, from whichever thread ends the last
    transaction (the committing one, or the renewer for a TestCase's savepoint).
    """

    def __init__(self, finish: Callable[[], None], transactions: list[Any]) -> None:
        self._finish = finish
        self._open = len(transactions)
        self._settled = False  # finished or cancelled
        self._guard = threading.Lock()
        self._ends: list[weakref.finalize[Any, Any]] = []
        self._watch: _SavepointWatch | None = None
        for conn in transactions:
            self._ends.append(self._end_of(conn))

    def _end_of(self, conn: Any) -> weakref.finalize[Any, Any]:
        hook = _TransactionEnd()
        end = weakref.finalize(hook, self._ended)
        end.atexit = False
        hook.end = end  # run (COMMIT) or dropped (ROLLBACK): either way ``end`` runs, once
        conn.on_commit(hook, robust=True)
        if getattr(conn.atomic_blocks[0], "_from_testcase", False):
            if self._watch is None:
                self._watch = _SavepointWatch()
                self._watch.registration = renewal.renewer.register(
                    self._watch, TEST_WATCH_INTERVAL
                )
            self._watch.add(conn, end)
        return end

    def _ended(self) -> None:
        with self._guard:
            self._open -= 1
            if self._open > 0 or self._settled:
                return
            self._settled = True
        self._stop_watching()
        try:
            self._finish()
        except Exception:  # called from Django's commit or rollback: never raise into it
            logger.exception("distlock: releasing a lock after its transaction ended failed")

    def settle(self) -> None:
        """Finish now if the watched TestCase blocks have ended (no need to wait for the
        renewer's next look)."""
        if self._watch is not None:
            self._watch.look()

    def cancel(self) -> bool:
        """Stop waiting: the lock is taken back, still held. Return False if the release
        has already begun."""
        with self._guard:
            if self._settled:
                return False
            self._settled = True
        for end in self._ends:
            end.detach()
        self._stop_watching()
        return True

    def _stop_watching(self) -> None:
        if self._watch is not None:
            renewal.renewer.unregister(self._watch.registration)


class _TransactionEnd:
    """The callback a waiting release leaves with Django: called on COMMIT, dropped on
    ROLLBACK. It holds nothing that refers back to it (see the module's docstring)."""

    end: Callable[[], Any]

    def __call__(self) -> None:
        self.end()


class _SavepointWatch:
    """Inside a TestCase: end each waiting release when the code's own outermost atomic
    block of its connection has been left (run by the renewer thread)."""

    registration = -1

    def __init__(self) -> None:
        self._blocks: list[tuple[Any, Any, int, Callable[[], Any]]] = []

    def add(self, conn: Any, end: Callable[[], Any]) -> None:
        own = _own_blocks(conn)[0]
        self._blocks.append((conn, own, conn.atomic_blocks.index(own), end))

    def look(self) -> None:
        for conn, block, index, end in list(self._blocks):
            blocks = conn.atomic_blocks
            if len(blocks) <= index or blocks[index] is not block:
                end()

    def _renew(self) -> float | None:
        self.look()
        return TEST_WATCH_INTERVAL


# --- the same thread asking again --------------------------------------------------------
_here = threading.local()


def waiting_release(key: Hashable) -> Any:
    """Return this thread's lock named by ``key`` whose release waits for a transaction,
    or None."""
    waiting: dict[Hashable, Any] = getattr(_here, "waiting", {})
    lock = waiting.get(key)
    if lock is None:
        return None
    pending = lock._pending
    if pending is not None:
        pending.settle()
    if lock._pending is None:  # released meanwhile
        waiting.pop(key, None)
        return None
    return lock


def note_waiting_release(key: Hashable, lock: Any) -> None:
    waiting = getattr(_here, "waiting", None)
    if waiting is None:
        waiting = _here.waiting = {}
    for stale in [k for k, held in waiting.items() if held._pending is None]:
        del waiting[stale]  # released by another thread (a TestCase's watch): forget here
    waiting[key] = lock


def forget_waiting_release(key: Hashable, lock: Any) -> None:
    waiting = getattr(_here, "waiting", {})
    if waiting.get(key) is lock:
        del waiting[key]
