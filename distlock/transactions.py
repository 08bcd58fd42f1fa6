"""Releases that wait for the database: a lock taken in a transaction is released when the
transaction or savepoint that took it ends (docs/transactions.md).

PostgreSQL's transaction-level advisory locks are the model. Each hold of a lock is *tied*
to the transactions it belongs to: at acquire, to the atomic block (transaction or savepoint)
of each connection it was taken in; at a release inside a transaction, also to the outermost
block of each connection not tied yet. A tie is a connection and the depth of the block
among the code's own atomic blocks (Django's TestCase blocks never count). When a block
ends, its ties end (the whole transaction ended, or a savepoint inside which the lock was
taken rolled back) or move up to the enclosing block (a savepoint released: keeping a lock
longer is always safe, freeing it early is the danger). A released hold is freed when its
last tie has ended; taking it back in the same transaction stacks (the shallower tie stays).

The ends are seen directly, by wrapping Django's ``Atomic.__exit__`` (and, for transactions
managed by hand with ``set_autocommit(False)``, the connection's ``commit``, ``rollback``,
``close`` and ``set_autocommit``), after Django has done its work and whatever it raised
(a lock released before any ``on_commit`` hook is freed earlier: right after the COMMIT,
when Django is about to run the hooks, through ``run_and_clear_commit_hooks``):
no ``on_commit`` callback, no garbage collector, no object identity. With no tie anywhere the
wrappers cost one test of an empty dict. ``Atomic.__enter__`` notes the connections of the
code's outermost blocks in a context variable: that is how a lock finds the transactions it
is in without looking at every connection, and ``async_to_sync`` copies it into the
coroutine it runs, so an async lock released there is tied to the calling thread's
transaction.
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import logging
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

logger = logging.getLogger("distlock")
# Isolation levels whose snapshot can predate the lock: a row read after acquiring may be
# older than the previous holder's committed write.
SNAPSHOT_LEVELS = frozenset({"repeatable read", "serializable"})
# What a block's end does to the ties at its depth.
END_ALL, END, MOVE_UP, END_MANUAL = "end all", "end", "move up", "end manual"
COMMITTED = "committed"  # the outermost block committed; its on_commit hooks run next


# --- the transactions the running code is in ---------------------------------------------
def own_depth(conn: Any) -> int:
    """Return how many of the code's own atomic blocks ``conn`` is in (the blocks Django's
    TestCase wraps around a test do not count; they are always the outermost ones)."""
    if not conn.in_atomic_block:
        return 0
    blocks = conn.atomic_blocks
    if not blocks or not blocks[0]._from_testcase:
        return len(blocks)
    return sum(not block._from_testcase for block in blocks)


def _in_manual_transaction(conn: Any) -> bool:
    """Autocommit turned off by hand (``set_autocommit(False)``, or ``AUTOCOMMIT: False``)
    and no atomic block: the transaction ends at ``commit()`` or ``rollback()``."""
    return conn.connection is not None and not conn.autocommit and not conn.in_atomic_block


def open_transactions() -> list[Any]:
    """Return this thread's database connections that are inside an atomic block of the
    code's own (the blocks Django's TestCase wraps around a test do not count)."""
    return [conn for conn in connections.all(initialized_only=True) if own_depth(conn)]


def transactions_here() -> list[tuple[Any, int]]:
    """Return each transaction the running code is in, as (connection, own depth): the
    connections of its open atomic blocks (this thread's, and in a coroutine that
    ``async_to_sync`` runs for a thread inside atomic blocks, that thread's), and this
    thread's connections in a transaction managed by hand (depth 0).

    Cheap when there is none (every acquire asks): the open blocks are read from a context
    variable, and connections are looked at for a manual transaction only once this process
    has turned autocommit off by hand.
    """
    entered = _entered.get()
    if not entered and not _manual_seen:
        return []
    found = []
    for conn, number in entered:
        if conn.distlock_transaction == number:  # not an earlier transaction's
            depth = own_depth(conn)
            if depth:
                found.append((conn, depth))
    if _manual_seen:
        found += [
            (conn, 0)
            for conn in connections.all(initialized_only=True)
            if _in_manual_transaction(conn)
        ]
    return found


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


# --- holds and their ties ----------------------------------------------------------------
_guard = threading.Lock()
# The holds tied to each connection's transaction. Strong references: a tie lasts as long as
# its block, and a thread always leaves its blocks. Empty (the common case): the wrappers
# return at once.
_tied: dict[Any, set[Hold]] = {}


class Hold:
    """One hold of a lock and its ties to the transactions it belongs to.

    ``finish`` frees the lock; it is called once, after ``wait()``, from whichever thread
    ends the last tie (the one leaving the block, or the releasing thread if none is left),
    with the aliases found unreachable by the releases of the same block end (it adds to them):
    a batch's locks do not each wait out a timeout inside Django's COMMIT.
    """

    def __init__(self, finish: Callable[[set[str]], None]) -> None:
        self.finish = finish
        self.ties: dict[Any, int] = {}  # connection -> own depth of the block it is tied to
        self.waiting = False  # released: free the lock when the last tie ends
        # How many on_commit hooks each tied connection had at the release: with none, the
        # lock is freed at the COMMIT itself; else after those hooks (as documented).
        self.hooks_before: dict[Any, int] = {}
        self.done = False  # freed or dropped

    def tie(self, transactions: Iterable[tuple[Any, int]]) -> None:
        """Tie this hold to the blocks it is taken (or taken back) in: a tie already made in
        the same transaction keeps its shallower block, as PostgreSQL's locks stack."""
        with _guard:
            for conn, depth in transactions:
                tied = self.ties.get(conn)
                if tied is None or depth < tied:
                    self._add(conn, depth)

    def wait(self, transactions: Iterable[tuple[Any, int]]) -> bool:
        """Mark the hold released inside ``transactions``: tie it to the outermost block of
        each one it is not tied to yet. Return True if the release must wait for a tie to
        end, False if the lock can be freed now."""
        with _guard:
            for conn, depth in transactions:
                if conn not in self.ties:
                    self._add(conn, min(depth, 1))
            self.hooks_before = {conn: len(conn.run_on_commit) for conn in self.ties}
            self.waiting = bool(self.ties) and not self.done
            return self.waiting

    def resume(self) -> bool:
        """Take the hold back (the same code asks for the lock again): stop waiting. Return
        False if the lock is being freed already."""
        with _guard:
            if self.done:
                return False
            self.waiting = False
            return True

    def drop(self) -> None:
        """Forget every tie: the hold ended some other way (released, lost, taken over)."""
        with _guard:
            self.done = True
            for conn in self.ties:
                holds = _tied.get(conn)
                if holds is not None:
                    holds.discard(self)
                    if not holds:
                        del _tied[conn]
            self.ties.clear()
            self.hooks_before.clear()

    def _add(self, conn: Any, depth: int) -> None:
        self.ties[conn] = depth
        _tied.setdefault(conn, set()).add(self)

    def _untie(self, conn: Any) -> bool:
        """Remove the tie to ``conn``; return True if the lock is to be freed now."""
        del self.ties[conn]
        self.hooks_before.pop(conn, None)
        if self.waiting and not self.ties and not self.done:
            self.done = True
            return True
        return False

    def run_finish(self, unreachable: set[str]) -> None:
        try:
            self.finish(unreachable)
        except Exception:  # called from Django's commit or rollback: never raise into it
            logger.exception("distlock: releasing a lock after its transaction ended failed")


def block_ended(conn: Any, depth: int, how: str) -> None:
    """Apply the end of ``conn``'s block at own ``depth`` to the ties: END_ALL (its
    transaction ended), END (a savepoint rolled back: the ties made inside it end), MOVE_UP
    (a savepoint released: they move to the enclosing block), END_MANUAL (a transaction
    managed by hand ended: the ties outside every atomic block end) or COMMITTED (the
    outermost block committed: the ties of holds released before any on_commit hook end;
    the others end with the block, once the hooks have run)."""
    freed = []
    with _guard:
        holds = _tied.get(conn)
        if not holds:
            return
        for hold in list(holds):
            tied = hold.ties[conn]
            if how == COMMITTED:
                if hold.waiting and hold.hooks_before.get(conn) == 0:
                    holds.discard(hold)
                    if hold._untie(conn):
                        freed.append(hold)
            elif (
                how == END_ALL
                or (how == END and tied >= depth)
                or (how == END_MANUAL and tied == 0)
            ):
                holds.discard(hold)
                if hold._untie(conn):
                    freed.append(hold)
            elif tied >= depth:
                hold.ties[conn] = depth - 1
        if not holds:
            del _tied[conn]
    unreachable: set[str] = set()
    for hold in freed:
        hold.run_finish(unreachable)


# --- seeing the ends: wrappers around Django's own methods -------------------------------
# The code's open outermost atomic blocks in this context, as (connection, transaction
# number): async_to_sync copies them into the coroutine it runs, so an async lock there is
# tied to the calling thread's transaction. An entry stays after its block ended (removing it
# would cost every block's exit a look-up); the number tells a later transaction apart.
_entered: contextvars.ContextVar[tuple[tuple[Any, int], ...]] = contextvars.ContextVar(
    "distlock_entered", default=()
)
_numbers = itertools.count(1)
# Whether autocommit was ever turned off by hand in this process (set_autocommit(False), or
# AUTOCOMMIT False): until then no connection needs a look for a manual transaction.
_manual_seen = False


def _outermost(block: Any, conn: Any) -> bool:
    """Return True if ``block``, the innermost of ``conn``'s atomic blocks, is the code's
    own outermost one."""
    if block._from_testcase:
        return False
    blocks = conn.atomic_blocks
    return len(blocks) < 2 or blocks[-2]._from_testcase


def _wrap_enter(enter: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(enter)
    def __enter__(self: Any) -> Any:
        result = enter(self)
        conn: Any = connections[self.using or DEFAULT_DB_ALIAS]
        if _outermost(self, conn):
            number = conn.distlock_transaction = next(_numbers)
            entered = _entered.get()
            if len(entered) != 1 or entered[0][0] is not conn:  # not just this one's entry
                entered = tuple(entry for entry in entered if entry[0] is not conn)
                _entered.set((*entered, (conn, number)))
            else:
                _entered.set(((conn, number),))
        return result

    return __enter__


def _wrap_exit(exit_: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(exit_)
    def __exit__(self: Any, exc_type: Any, exc_value: Any, traceback: Any) -> Any:
        if not _tied:  # no lock tied to any transaction (the common case)
            return exit_(self, exc_type, exc_value, traceback)
        conn: Any = connections[self.using or DEFAULT_DB_ALIAS]
        if not _tied.get(conn):
            return exit_(self, exc_type, exc_value, traceback)
        outermost = _outermost(self, conn)
        depth = own_depth(conn)
        sid = conn.savepoint_ids[-1] if conn.savepoint_ids else None
        rolls_back = exc_type is not None or conn.needs_rollback
        # Django's COMMIT of this block ends the ties of holds released before any on_commit
        # hook (_wrap_commit_hooks): handed on right after COMMIT, as PostgreSQL's are.
        conn.distlock_ending = outermost and not self._from_testcase
        try:
            return exit_(self, exc_type, exc_value, traceback)
        finally:
            conn.distlock_ending = False
            if self._from_testcase:  # a TestCase's block: the code's own have all ended
                block_ended(conn, 0, END_ALL)
            elif outermost and not _in_manual_transaction(conn):
                block_ended(conn, depth, END_ALL)  # committed, rolled back, closed, killed
            elif rolls_back and sid is not None and not conn.needs_rollback:
                block_ended(conn, depth, END)  # rolled back to its savepoint
            else:
                block_ended(conn, depth, MOVE_UP)

    return __exit__


def _wrap_ending(method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``commit``, ``rollback`` or ``close``: each ends a transaction managed by hand."""

    @functools.wraps(method)
    def ending(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _tied:
            return method(self, *args, **kwargs)
        try:
            return method(self, *args, **kwargs)
        finally:
            # Inside Atomic.__exit__ (the outermost block's COMMIT and the hooks after it)
            # only ties outside atomic blocks end here; the block's own end when it returns.
            if not self.in_atomic_block:
                block_ended(self, 0, END_MANUAL)

    return ending


def _wrap_commit_hooks(method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``run_and_clear_commit_hooks``: in the outermost atomic block's ``__exit__`` it
    runs once COMMIT succeeded and autocommit is back on, so the locks released before any
    on_commit hook are freed there, before the hooks run (lock_released receivers run
    outside any transaction, as after the block)."""

    @functools.wraps(method)
    def run_and_clear_commit_hooks(self: Any) -> Any:
        if _tied and getattr(self, "distlock_ending", False):
            block_ended(self, 0, COMMITTED)
        return method(self)

    return run_and_clear_commit_hooks


def _wrap_set_autocommit(method: Callable[..., Any]) -> Callable[..., Any]:
    """Turning autocommit on ends a transaction managed by hand; turning it off by hand
    (Atomic.__enter__ forces a BEGIN, connect() applies AUTOCOMMIT) begins one."""

    @functools.wraps(method)
    def set_autocommit(
        self: Any, autocommit: bool, force_begin_transaction_with_broken_autocommit: bool = False
    ) -> Any:
        global _manual_seen
        if not autocommit and not force_begin_transaction_with_broken_autocommit:
            _manual_seen = True
        if not _tied:
            return method(self, autocommit, force_begin_transaction_with_broken_autocommit)
        try:
            return method(self, autocommit, force_begin_transaction_with_broken_autocommit)
        finally:
            if autocommit and not self.in_atomic_block:
                block_ended(self, 0, END_MANUAL)

    return set_autocommit


def install() -> None:
    """Watch the ends of atomic blocks and of transactions managed by hand (once)."""
    with _guard:
        if getattr(transaction.Atomic.__exit__, "distlock_watches", False):
            return
        atomic = transaction.Atomic
        for cls, name, wrap in (
            (atomic, "__enter__", _wrap_enter),
            (atomic, "__exit__", _wrap_exit),
            (BaseDatabaseWrapper, "commit", _wrap_ending),
            (BaseDatabaseWrapper, "rollback", _wrap_ending),
            (BaseDatabaseWrapper, "close", _wrap_ending),
            (BaseDatabaseWrapper, "set_autocommit", _wrap_set_autocommit),
            (BaseDatabaseWrapper, "run_and_clear_commit_hooks", _wrap_commit_hooks),
        ):
            wrapped = wrap(getattr(cls, name))
            wrapped.distlock_watches = True  # type: ignore[attr-defined]
            setattr(cls, name, wrapped)


# --- the same code asking again ----------------------------------------------------------
_here = threading.local()


def waiting_release(key: Hashable) -> Any:
    """Return this thread's lock named by ``key`` whose release waits for a transaction,
    or, failing that, one whose release waits for a transaction the running code is in
    (async_to_sync runs a coroutine in another thread, inside the caller's transaction: a
    release there, then a take-back here, or the reverse, must not wait for itself)."""
    waiting: dict[Hashable, Any] = getattr(_here, "waiting", {})
    lock = waiting.get(key)
    if lock is not None and lock._pending is None:  # released meanwhile
        waiting.pop(key, None)
        lock = None
    return lock if lock is not None else _waiting_in_transactions_here(key)


def _waiting_in_transactions_here(key: Hashable) -> Any:
    """Return the lock named by ``key`` whose release waits for one of the transactions
    the running code is in, or None (cheap: the holds tied to those connections only)."""
    if not _tied:
        return None
    for conn, _depth in transactions_here():
        with _guard:  # another thread may end a tie meanwhile
            holds = list(_tied.get(conn, ()))
        for hold in holds:
            lock = getattr(hold.finish, "__self__", None)  # the Lock whose hold it is
            mine = lock is not None and lock._pending is hold and lock._resource() == key
            if hold.waiting and mine:
                return lock
    return None


def note_waiting_release(key: Hashable, lock: Any) -> None:
    waiting = getattr(_here, "waiting", None)
    if waiting is None:
        waiting = _here.waiting = {}
    for stale in [k for k, held in waiting.items() if held._pending is None]:
        del waiting[stale]  # freed from another thread: forget here
    waiting[key] = lock


def forget_waiting_release(key: Hashable, lock: Any) -> None:
    waiting = getattr(_here, "waiting", {})
    if waiting.get(key) is lock:
        del waiting[key]


# Installed when distlock is imported, not only in DistlockConfig.ready(): a project that locks
# without listing the app must still see its transactions end.
install()
