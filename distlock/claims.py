"""The fence of ``fence=True``: in each database transaction a fenced lock's holder runs, its
fencing token is claimed on the lock's row of distlock's Fence table, in that transaction,
before the work's first statement; a holder whose token is older than one already claimed
is refused (``FencedUpdateRejected``) and its transaction rolls back.

How the claim gets in front of the work: while a fenced lock is held anywhere in the
process, every database connection carries :func:`claim_first` among its
``execute_wrappers`` (Django's public hook): the first fenced hold puts it on every connection
opened so far, in every thread (the holder's code may run its ORM calls on another thread's
connection: ``sync_to_async``), and a connection that opens meanwhile gets it then. Once no
fenced hold is left, each connection takes it off at its next statement, from its own thread:
a process that holds no fenced lock pays nothing per statement. A fenced lock, once granted,
is noted in a context variable of the code that acquired it (the holder's thread or asyncio
task; ``sync_to_async`` and ``async_to_sync`` copy it, so an async view's ORM calls carry
it). Before each statement the wrapper looks for fenced holds there; with none, it costs one
context variable read. With one, the statement's connection is:

- inside an atomic block: the claim runs once per transaction, before its first statement.
  The connection notes it (``distlock_claims``: the transaction's number, from
  transactions.py, Django's list of its ``on_commit`` hooks, which Django replaces when a
  transaction ends or a savepoint rolls back, and the innermost savepoint the claim ran in): a claim
  counts while its transaction is the connection's current one, the list is the same, and
  its savepoint is still open (or it ran outside every savepoint). A rolled-back savepoint
  takes its claim along, and so does a released one as far as this note knows: the next
  statement claims again (an extra claim is harmless, a missing one is not). Nothing is
  registered with Django: ``on_commit`` and ``captureOnCommitCallbacks()`` see only the
  user's own callbacks;
- in autocommit: the statement is a transaction of its own, so it runs inside
  ``atomic()`` with the claim before it;
- in a transaction managed by hand (``set_autocommit(False)``): refused with an error
  saying to use ``atomic()``, as ``on_commit`` refuses it.

Only Django's own statements that begin a transaction or handle a savepoint pass unclaimed
(matched whole), and the statements a database runs only outside a transaction (VACUUM, ...).
On MySQL and MariaDB a statement that commits implicitly (DDL) ends the claim's transaction:
the next statement claims again. Work past the execute wrappers (``callproc()``, psycopg's
``copy()``) claims by hand: :func:`claim_now` (``distlock.fencing.claim``). A hold stays
fenced until its holder ends it (release, a new acquire) or drops its Lock, not when the Lock
learns that its lease ended: the code that catches that error is still the stale holder.

The claim is one statement, an upsert that stores the token only when the stored one is not
newer (PostgreSQL and SQLite ``ON CONFLICT ... DO UPDATE ... WHERE ... RETURNING``; MariaDB
and MySQL ``ON DUPLICATE KEY UPDATE`` with ``IF()``). It locks the row: a newer holder's
claim waits for an older holder's transaction to end, and the older holder's claim, made
after the newer one committed, is refused. Claims go to every database alias the holder's
transactions use on which the Fence table lives (a router's ``allow_migrate`` decides).
"""

from __future__ import annotations

import contextvars
import hashlib
import re
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from django.db import DatabaseError, connections, router, transaction
from django.db.backends.signals import connection_created

from .exceptions import FencedUpdateRejected, LockError
from .transactions import transaction_number


class Lock(Protocol):
    """What the fence reads of a held distlock.Lock (not imported: lock.py imports this)."""

    name: str
    using: str
    token: str | None
    fencing_token: int | None

    def lease_left(self) -> float: ...


# The fenced holds of the running code: (its Lock, the fencing token it was granted). The
# Lock is referenced weakly: a Lock dropped unreleased ends its fence.
_held: contextvars.ContextVar[tuple[tuple[weakref.ref[Lock], int], ...]] = contextvars.ContextVar(
    "distlock_fenced_holds", default=()
)
_claiming: contextvars.ContextVar[bool] = contextvars.ContextVar("distlock_claiming", default=False)
# The fenced holds of the whole process, by id of their Lock: while there is one, every
# connection carries the wrapper. A hold is fenced from its grant until the holder ends it
# on purpose (release(), the end of its with block: forget_fenced) or drops its Lock, not
# when the Lock learns that its lease ended (a failed extend(), a renewal that found it
# gone): the code that catches that error and carries on is still the stale holder.
_live: dict[int, tuple[weakref.ref[Lock], int]] = {}
# Every connection opened since distlock was installed, in any thread (connections are
# per thread: the first fenced hold puts the wrapper on all of them).
_connections: weakref.WeakSet[Any] = weakref.WeakSet()
_guard = threading.Lock()  # _live, _connections and the wrappers they put on
VENDORS = ("postgresql", "sqlite", "mysql")
TABLE = "distlock_fence"  # distlock.models.Fence's (the models are a surface: not imported)
# The statements Django itself sends through cursors to begin transactions and handle
# savepoints (SQLite's BEGIN; SAVEPOINT, RELEASE SAVEPOINT, ROLLBACK TO SAVEPOINT with a
# quoted name): they do no work, so they pass unclaimed. Matched whole: raw SQL that only
# starts so (``BEGIN; INSERT ...``, MariaDB's ``BEGIN NOT ATOMIC ... END``) is claimed.
_NAME = r"(\"[^\"]+\"|`[^`]+`|\w+)"
_CONTROL = re.compile(
    rf"\s*(BEGIN(\s+(DEFERRED|IMMEDIATE|EXCLUSIVE))?|COMMIT|ROLLBACK|START\s+TRANSACTION|(RELEASE\s+|ROLLBACK\s+TO\s+)?"
    rf"SAVEPOINT\s+{_NAME})\s*;?\s*",
    re.I,
)
# Statements PostgreSQL or SQLite refuse to run inside a transaction (VACUUM, CREATE or DROP
# INDEX CONCURRENTLY, ...), alone in their string: they pass unclaimed
# (wrapped in atomic() they could not run at all). They are maintenance, not the work whose
# rows the fence protects (docs/fencing-and-limits.md).
_NO_TRANSACTION = re.compile(
    r"\s*(VACUUM|(CREATE|DROP)\s+(UNIQUE\s+)?INDEX\s+CONCURRENTLY|REINDEX\s[^;]*CONCURRENTLY"
    r"|(CREATE|DROP)\s+(DATABASE|TABLESPACE)|ALTER\s+SYSTEM)\b[^;]*;?\s*",
    re.I,
)
# Statements MySQL and MariaDB run after an implicit COMMIT (DDL, LOCK TABLES, ...): the
# transaction the claim was made in ends there, so the next statement claims again.
_IMPLICIT_COMMIT = re.compile(
    r"\s*(CREATE|ALTER|DROP|TRUNCATE|RENAME|LOCK|UNLOCK|GRANT|REVOKE|ANALYZE|OPTIMIZE|REPAIR"
    r"|FLUSH|INSTALL|UNINSTALL|RESET|LOAD\s+INDEX|CACHE\s+INDEX|BEGIN|START)\b",
    re.I,
)


def digest(alias: str, name: str) -> str:
    """Return the Fence row's key of the lock ``name`` of DISTLOCK alias ``alias``."""
    return hashlib.sha256(f"{alias}\0{name}".encode()).hexdigest()


# --- the holds ---------------------------------------------------------------------------
def note_fenced(lock: Lock) -> None:
    """Fence the running code's transactions with ``lock``'s token, while it holds it."""
    token = lock.fencing_token
    assert token is not None
    with _guard:
        _prune()
        first = not _live
        _live[id(lock)] = (weakref.ref(lock, _dropped(id(lock))), token)
        _connections.update(connections.all(initialized_only=True))  # opened before install
        if first:  # no connection carries the wrapper yet: every one does from now on
            for conn in _connections:
                _add_wrapper(conn)
    holds = tuple(
        hold for hold in _held.get() if (other := _lock_of(hold)) is not None and other is not lock
    )
    _held.set((*holds, (weakref.ref(lock), token)))


def forget_fenced(lock: Lock) -> None:
    """``lock``'s holder ended its hold (released it, or acquires it anew): it fences no
    transaction any more. With no fenced hold left, each connection takes the wrapper off at
    its next statement."""
    with _guard:
        _live.pop(id(lock), None)
        _prune()


def _prune() -> None:
    """Drop the fenced holds whose Lock was dropped: they must not keep the wrapper on
    (under _guard)."""
    for key, (ref, _token) in list(_live.items()):
        if ref() is None:
            _live.pop(key, None)


def _dropped(key: int) -> Callable[[weakref.ref[Lock]], None]:
    """Return the callback that ends the fence of the Lock ``key`` when it is collected
    (not under _guard: the collector may run inside it; dict operations are atomic)."""

    def drop(ref: weakref.ref[Lock]) -> None:
        entry = _live.get(key)
        if entry is not None and entry[0] is ref:
            _live.pop(key, None)

    return drop


def _lock_of(hold: tuple[weakref.ref[Lock], int]) -> Lock | None:
    """Return the Lock of ``hold`` while it still fences with the token noted there (not
    ended by its holder, not dropped, not acquired again since with a newer token)."""
    ref, token = hold
    lock = ref()
    if lock is None:
        return None
    entry = _live.get(id(lock))
    return lock if entry is not None and entry[0]() is lock and entry[1] == token else None


def install() -> None:
    """Give every database connection the wrapper, as it opens (idempotent)."""
    connection_created.connect(_on_connection_created, dispatch_uid="distlock.claims")


def _on_connection_created(sender: Any, connection: Any, **kwargs: Any) -> None:
    with _guard:
        _connections.add(connection)
        if _live:
            _add_wrapper(connection)


def _add_wrapper(conn: Any) -> None:
    """Put the wrapper on ``conn`` (under _guard; the connection may be another thread's).
    First in the list, in place: a ``connection.execute_wrapper()`` block open in that thread
    pops its own wrapper, the last one, when it ends. (Put on another thread's connection
    at the very moment that thread builds a statement's chain of two or more wrappers, it
    shifts the list under Django's loop: that one statement may skip one wrapper. Only the
    first fenced hold after none puts it on; a later statement sees the list whole.)"""
    if claim_first not in conn.execute_wrappers:
        conn.execute_wrappers.insert(0, claim_first)


def _take_off(conn: Any) -> None:
    """No fenced hold is left in the process: take the wrapper off ``conn``, from the thread
    running its statement (its list of wrappers is not being read)."""
    with _guard:
        if not _live and claim_first in conn.execute_wrappers:
            conn.execute_wrappers.remove(claim_first)


# --- the claim ---------------------------------------------------------------------------
def claim_first(
    execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]
) -> Any:
    """The connections' execute wrapper: claim the running code's fenced tokens in the
    statement's transaction before the statement runs."""
    fenced = _held.get()
    if not fenced or _claiming.get():
        if not _live:
            _take_off(context["connection"])
        return execute(sql, params, many, context)
    conn = context["connection"]
    holds = _live_holds(fenced)
    if not holds:
        _held.set(())  # every hold here has ended: back to one read per statement
        if not _live:
            _take_off(conn)
        return execute(sql, params, many, context)
    text = sql if isinstance(sql, str) else ""
    if _CONTROL.fullmatch(text) or _outside_transactions(conn, text) or not _has_fences(conn):
        return execute(sql, params, many, context)
    if conn.in_atomic_block:
        for lock, token in holds:
            if not _claimed(conn, lock, token):
                _claim(conn, lock, token)
        try:
            return execute(sql, params, many, context)
        finally:
            if conn.vendor == "mysql" and _IMPLICIT_COMMIT.match(text):
                conn.distlock_claims = None  # committed: the next statement claims again
    return _claim_alone(conn, holds, execute, sql, params, many, context)


def _outside_transactions(conn: Any, sql: str) -> bool:
    """Return True if ``sql`` runs only outside a transaction on ``conn``'s database (MySQL
    and MariaDB have none such: their DDL commits implicitly, and is claimed after)."""
    return conn.vendor != "mysql" and _NO_TRANSACTION.fullmatch(sql) is not None


def _claim_alone(
    conn: Any,
    holds: list[tuple[Lock, int]],
    execute: Callable[..., Any],
    *args: Any,
) -> Any:
    """Run a statement outside any atomic block, claimed: in autocommit, in a transaction of
    its own; in a transaction managed by hand, refused."""
    if not conn.get_autocommit():
        names = ", ".join(repr(lock.name) for lock, _ in holds)
        raise LockError(
            f"The fenced lock {names} cannot fence a transaction managed by hand "
            f"(set_autocommit(False)) on {conn.alias!r}: run the work in "
            "transaction.atomic(), where each transaction claims the lock's fencing token."
        )
    with transaction.atomic(using=conn.alias):  # a statement in autocommit: its own transaction
        for lock, token in holds:
            _claim(conn, lock, token)
        return execute(*args)


def claim_now(lock: Lock, using: str) -> None:
    """Claim ``lock``'s fencing token in the running transaction on ``using`` now, unless it
    was claimed there already (distlock.fencing.claim: for work that bypasses Django's
    execute wrappers)."""
    entry = _live.get(id(lock))
    if entry is None or entry[0]() is not lock:
        raise LockError(
            f"{lock.name!r} fences nothing: it was not acquired with fence=True, or its "
            "holder released it. Claim inside the fenced lock's hold.",
            name=lock.name,
        )
    conn = connections[using]
    if not conn.in_atomic_block:
        raise LockError(
            f"The claim of {lock.name!r} needs a transaction on {using!r}: call it inside "
            "transaction.atomic(), before the work it fences (the claim counts until that "
            "transaction ends).",
            name=lock.name,
        )
    token = entry[1]
    if not _claimed(conn, lock, token):
        _claim(conn, lock, token)


def _live_holds(
    fenced: tuple[tuple[weakref.ref[Lock], int], ...],
) -> list[tuple[Lock, int]]:
    """Return the Locks (with their tokens) of ``fenced`` that still fence."""
    return [(lock, hold[1]) for hold in fenced if (lock := _lock_of(hold)) is not None]


def _has_fences(conn: Any) -> bool:
    return bool(router.allow_migrate(conn.alias, "distlock", model_name="fence"))


def _claimed(conn: Any, lock: Lock, token: int) -> bool:
    """Return True if ``token`` was claimed for ``lock`` in ``conn``'s current transaction,
    in a savepoint still open (or outside every savepoint)."""
    noted = getattr(conn, "distlock_claims", None)
    if noted is None or noted[0] != transaction_number(conn) or noted[1] is not conn.run_on_commit:
        return False
    sid = noted[2].get((digest(lock.using, lock.name), token), False)
    return sid is None or (sid is not False and sid in conn.savepoint_ids)


def _note_claim(conn: Any, key: str, token: int) -> None:
    """Note on ``conn`` that ``token`` is claimed for the lock ``key`` in its current
    transaction, at its innermost savepoint (None: outside every savepoint)."""
    savepoints = [sid for sid in conn.savepoint_ids if sid is not None]
    if not savepoints and not getattr(conn, "commit_on_exit", False):
        # An atomic block without a savepoint inside a transaction managed by hand: its
        # commit() ends the transaction unseen here. Not noted: each statement claims.
        return
    number, hooks = transaction_number(conn), conn.run_on_commit
    noted: tuple[int, list[Any], dict[tuple[str, int], str | None]] | None
    noted = getattr(conn, "distlock_claims", None)
    if noted is None or noted[0] != number or noted[1] is not hooks:  # an earlier one's
        noted = (number, hooks, {})
        conn.distlock_claims = noted
    noted[2][key, token] = savepoints[-1] if savepoints else None


def _claim(conn: Any, lock: Lock, token: int) -> None:
    """Claim ``token`` for ``lock`` in ``conn``'s transaction, or refuse: mark the
    transaction for rollback and raise FencedUpdateRejected."""
    key = digest(lock.using, lock.name)
    reset = _claiming.set(True)
    try:
        newest = _upsert(conn, key, lock.name, token)
    except DatabaseError as exc:
        if TABLE not in str(exc):
            raise
        raise LockError(
            f"The fenced lock {lock.name!r} could not claim its token on {conn.alias!r}: "
            f"{exc}. Run `manage.py migrate distlock --database {conn.alias}` (the table "
            f"{TABLE}), or route distlock's Fence model away from that database with a "
            "router's allow_migrate.",
            name=lock.name,
        ) from exc
    finally:
        _claiming.reset(reset)
    if newest > token:
        transaction.set_rollback(True, using=conn.alias)
        raise _refused(lock, token, newest, conn.alias)
    _note_claim(conn, key, token)


def _upsert(conn: Any, key: str, name: str, token: int) -> int:
    """Store ``token`` unless a newer one is stored, in one statement; return the token
    stored now (``token`` when the claim was accepted)."""
    vendor = conn.vendor
    if vendor not in VENDORS:
        raise LockError(
            f"fence=True needs PostgreSQL, MariaDB, MySQL or SQLite; {conn.alias!r} is "
            f"{vendor}. Route distlock's Fence model away from it (a router's allow_migrate), "
            "or leave fence off."
        )
    table = conn.ops.quote_name(TABLE)
    with conn.cursor() as cursor:
        if vendor == "mysql":
            cursor.execute(
                f"INSERT INTO {table} (digest, name, token, claims) VALUES (%s, %s, %s, 1) "
                "ON DUPLICATE KEY UPDATE "
                "claims = IF(token <= VALUES(token), claims + 1, claims), "
                "token = IF(token <= VALUES(token), VALUES(token), token)",
                [key, name, token],
            )
            # 2: an existing row updated (accepted; the claims count always changes). 1: a
            # row inserted, or left as it was (Django's MySQL connections count found rows).
            if cursor.rowcount == 2:
                return token
            cursor.execute(f"SELECT token FROM {table} WHERE digest = %s FOR UPDATE", [key])
            return int(cursor.fetchone()[0])
        cursor.execute(
            f"INSERT INTO {table} (digest, name, token, claims) VALUES (%s, %s, %s, 1) "
            f"ON CONFLICT (digest) DO UPDATE SET token = excluded.token, "
            f"claims = {table}.claims + 1 WHERE {table}.token <= excluded.token "
            "RETURNING token",
            [key, name, token],
        )
        if cursor.fetchone() is not None:
            return token
        # Refused: the row is locked by the upsert all the same; read what it holds.
        cursor.execute(f"SELECT token FROM {table} WHERE digest = %s", [key])
        return int(cursor.fetchone()[0])


def _refused(lock: Lock, token: int, newest: int, alias: str) -> FencedUpdateRejected:
    if lock.lease_left() > 0:
        why = (
            "This holder's lease has not ended by its own clock: the lock server lost it early "
            "(it restarted empty, failed over or evicted it, or it was force-released) and a "
            "newer holder took it; or, if every holder of this name is refused, the server's "
            "clock was set back past the stored token (docs/fencing-and-limits.md)."
        )
    else:
        why = (
            "This holder's lease ended (it was paused, its lease was too short, or the lock "
            "server restarted or was force-released) and a newer holder has claimed the lock."
        )
    return FencedUpdateRejected(
        f"The transaction on {alias!r} was refused and rolled back: the fenced lock "
        f"{lock.name!r} carries fencing token {token}, but the newer token {newest} was "
        f"already claimed. {why} Do not apply this work: the newer holder does it.",
        token=token,
        newest=newest,
        name=lock.name,
    )
