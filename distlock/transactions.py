"""Releases that wait for the database: a lock taken in a transaction is released when the
transaction or savepoint that took it ends (docs/transactions.md).

PostgreSQL's transaction-level advisory locks are the model. Each hold of a lock is *tied*
to the transactions it belongs to: at acquire, to the atomic block (transaction or savepoint)
of each connection it was taken in; at a release inside a transaction, also to the outermost
block of each connection not tied yet. A tie is a connection, the *number* of its
transaction and the depth of the block among the code's own atomic blocks (Django's TestCase
blocks never count). When a block ends, its ties end (the whole transaction ended, or a
savepoint inside which the lock was taken rolled back) or move up to the enclosing block (a
savepoint released: keeping a lock longer is always safe, freeing it early is the danger).
A released hold is freed when its last tie has ended; taking it back in the same
transaction stacks (the shallower tie stays).

The holder is the transaction, never a thread: each transaction gets a number when it
begins (the outermost block's ``set_autocommit(False)``, or autocommit turned off by hand),
noted on the connection and, with the connection, in a context variable that
``async_to_sync`` and ``sync_to_async`` carry into the code they run. A release waiting for
a COMMIT is found again only through a transaction the running code is in with that same
number, and whose queries it runs (the connection's thread, or a coroutine async_to_sync
runs for it; never sync code in another thread, such as a pool job given a copy of the
context, which queries a connection of its own): another request's coroutine on the same
event-loop thread, another job on the same pool thread, or a block an ``on_commit`` hook
opens after the COMMIT (a new number) never takes it back, and never ends the committed
transaction's ties.

The ends are seen directly, by wrapping two Django methods: ``Atomic.__exit__`` (after
Django has done its work, whatever it raised) and ``BaseDatabaseWrapper.set_autocommit``,
which numbers the transactions as they begin, frees the locks released before any
``on_commit`` hook right after the COMMIT (Django turns autocommit back on, then runs the
hooks) and sees a transaction managed by hand end. Once the process manages a transaction by
hand (``set_autocommit(False)``), the connection's ``commit``, ``rollback`` and ``close``
are wrapped too. No ``on_commit`` callback, no garbage collector, no object identity. With
no tie anywhere the wrappers cost one test of an empty dict; with ties, a block ended in a
thread none of them belongs to, one more. Every wrapper is fail-safe: whatever distlock's
bookkeeping raises, Django's own method runs, once (``checks.py`` reports a Django whose internals
changed shape at ``manage.py check``). What the wrappers cannot see (a thread that died
inside a hand-managed transaction, a backend whose ``commit()`` skips the base class's, a
transaction already open when distlock was first imported) the renewer finds at the next
renewal of a waiting release: the transaction it waits for is no longer open, so it is
freed, never renewed for ever. The ties refer to connections only weakly: the connection of
a thread that died is collected as without distlock (its server session ends, rolling
back), and its ties end as that rollback's would. A commit through the raw driver while
autocommit stays off leaves a transaction managed by hand looking open: a release waits for
one at most MANUAL_COMMIT_WAIT, then is reported lost and left to its lease.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import itertools
import logging
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Protocol

from asgiref.sync import AsyncToSync, SyncToAsync, sync_to_async
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from .exceptions import BackendUnavailable, IsolationLevelWarning, LockError, LockNotOwned
from .lease import Lease

logger = logging.getLogger("distlock")
# Isolation levels whose snapshot can predate the lock: a row read after acquiring may be
# older than the previous holder's committed write.
SNAPSHOT_LEVELS = frozenset({"repeatable read", "serializable"})
# What a block's end does to the ties at its depth.
END_ALL, END, MOVE_UP, END_MANUAL = "end all", "end", "move up", "end manual"
COMMITTED = "committed"  # the outermost block committed; its on_commit hooks run next
# The longest a release waits for a transaction managed by hand (seconds): a commit through
# the raw driver connection (``connection.connection.commit()``) while autocommit stays off
# is seen by no wrapper, and the transaction still looks open. Past this wait the lock is no
# longer renewed and is reported lost (its lease ends it). Atomic blocks need no such bound:
# Django's __exit__ always runs, and a thread that dies is seen.
MANUAL_COMMIT_WAIT = 600.0
# A place the running code is in: (connection, transaction number, own depth of its block).
Place = tuple[Any, int, int]


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


def _testcase_transaction(conn: Any) -> bool:
    """Return True if ``conn``'s transaction is one Django's TestCase wraps around a test (it
    is not the code's, and autocommit cannot be turned off by hand inside it)."""
    return bool(
        conn.in_atomic_block and conn.atomic_blocks and conn.atomic_blocks[0]._from_testcase
    )


def open_transactions() -> list[Any]:
    """Return this thread's database connections that are inside an atomic block of the
    code's own (the blocks Django's TestCase wraps around a test do not count)."""
    return [conn for conn in connections.all(initialized_only=True) if own_depth(conn)]


def transaction_number(conn: Any) -> int:
    """Return the number of ``conn``'s current transaction, giving it one if it has none
    (a transaction begun before distlock was imported, or autocommit off from the start)."""
    number: int | None = getattr(conn, "distlock_transaction", None)
    if number is None:
        number = conn.distlock_transaction = next(_numbers)
    return number


# The connections each thread has begun a transaction on, by the thread's identity, each with
# its thread, weakly: where sync code's queries go is its own thread's connections, whatever
# context it runs in. A sync step that a coroutine runs in the request's thread
# (``sync_to_async``) runs in a copy of the coroutine's context, which may name no
# transaction (a coroutine a callback-based client's thread scheduled), yet its queries run
# in the request's transaction: found through its context only, its release freed the lock
# before the COMMIT. Registered once per connection, in its own thread (at its first BEGIN:
# _note_transaction); empty until a transaction first begins in the process. The thread is
# kept beside the identity, which a new thread may reuse while a dead one's connection waits
# for the collector (Django's connections are in reference cycles).
_begun_on: dict[int, tuple[tuple[weakref.ref[Any], weakref.ref[threading.Thread]], ...]] = {}
_registering = threading.Lock()


def _register(conn: Any) -> None:
    """Note that a transaction began on ``conn``, in its own thread (once per connection):
    sync code of that thread is in it while it is open (_open_on). The entries of threads
    that ended, or whose connections are all gone, are dropped on the way."""
    ref = getattr(conn, "distlock_begun", None)
    if ref is not None and ref() is conn:
        return
    ident = conn._thread_ident
    if ident != _get_ident():  # a connection shared with this thread: its own registers it
        return
    thread = threading.current_thread()
    with _registering:
        for other, entries in list(_begun_on.items()):
            if other != ident and not any(map(_live, entries)):
                del _begun_on[other]
        kept = tuple(
            entry for entry in _begun_on.get(ident, ()) if _live(entry) and entry[1]() is thread
        )
        ref = conn.distlock_begun = weakref.ref(conn)
        _begun_on[ident] = (*kept, (ref, weakref.ref(thread)))
    # Dropped when the thread ends (before the OS can give its identity to another): a
    # thread that never began one, or whose identity was a dead one's, pays nothing for the
    # registry at its acquire.
    _watch_thread_end()


class _ThreadEnd:
    """Kept in a thread-local value of a thread: collected when it ends (its thread-local
    values are cleared then), whatever started it."""


_this_thread = threading.local()
# The threads seen to end (_watch_thread_end), weakly: a thread Python's threading module did
# not start (uWSGI's, mod_wsgi's, a C library's callback thread: a dummy thread) may still
# say is_alive() once it has ended (Python 3.11 keeps it in threading._active; 3.13.0 too
# while its object is kept): a release waiting for its transaction managed by hand waited
# until MANUAL_COMMIT_WAIT (the thirteenth adversary).
_ended_threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def _watch_thread_end() -> None:
    """Note when the running thread ends (once per thread): its registry entries are dropped
    then, and _thread_ended knows it."""
    if getattr(_this_thread, "ends", None) is None:
        thread = threading.current_thread()
        ends = _this_thread.ends = _ThreadEnd()
        weakref.finalize(ends, _thread_gone, _get_ident(), weakref.ref(thread))


def _thread_gone(ident: int, thread: weakref.ref[threading.Thread]) -> None:
    """The thread ``thread`` (identity ``ident``) ended: drop its registry entries."""
    ended = thread()
    if ended is not None:
        _ended_threads.add(ended)
    with _registering:
        entries = _begun_on.get(ident, ())
        kept = tuple(entry for entry in entries if entry[1]() is not ended and _live(entry))
        if kept:
            _begun_on[ident] = kept
        else:
            _begun_on.pop(ident, None)


def _live(entry: tuple[weakref.ref[Any], weakref.ref[threading.Thread]]) -> bool:
    """Return True if a registry entry's connection and thread are both still there."""
    thread = entry[1]()
    return entry[0]() is not None and thread is not None and not _thread_ended(entry[1])


def _in_transaction(conn: Any) -> bool:
    """Return True if ``conn`` is inside a transaction of the code's own: an atomic block of
    its own (not only the blocks Django's TestCase wraps around a test), or one managed by
    hand."""
    return bool(own_depth(conn)) or _in_manual_transaction(conn)


def _open_on(thread: threading.Thread, seen: Iterable[Any] = ()) -> list[Place]:
    """Return the transactions open on the connections of ``thread`` (those not in
    ``seen``), as places."""
    found = []
    for ref, thread_ref in _begun_on.get(thread.ident or 0, ()):
        conn = ref()
        if conn is None or thread_ref() is not thread or conn in seen:
            continue
        if _in_transaction(conn):
            found.append((conn, transaction_number(conn), own_depth(conn)))
    return found


def transactions_here(*, taking_back: bool = False) -> list[Place]:
    """Return each transaction the running code is in, as (connection, number, own depth):
    the connections of its open atomic blocks (this thread's, and in a coroutine that
    ``async_to_sync`` runs for a thread inside atomic blocks, that thread's), and, for sync
    code, every transaction open on this thread's own connections, whatever its context
    names (a transaction managed by hand and an atomic block inside one included).
    ``taking_back``: the code would take back a release found waiting for one of them; a
    coroutine whose question went unanswered is in none then (_runs_in).

    Cheap when there is none (every acquire asks): the open blocks are read from a context
    variable, and a thread's own connections from _begun_on, empty until a transaction
    first begins in the process.
    """
    entered = _entered.get()
    # (LockTies.wait and tie ask this first, inline)
    # A coroutine looks at its thread's connections for a transaction managed by hand once
    # the process has turned autocommit off by hand; sync code finds its own in the registry
    # (asking _manual_seen for it too, every sync pair of the process looked once any thread
    # had: 10 calls into this module per pair instead of 4, the thirteenth adversary).
    if not entered and _get_ident() not in _begun_on and not (_manual_seen and running_loop()):
        return []
    found = []
    for conn, number in _pairs(entered):
        # Not an earlier transaction's, and one whose queries this code runs in.
        if getattr(conn, "distlock_transaction", None) == number and _runs_in(conn, taking_back):
            depth = own_depth(conn)
            if depth:
                found.append((conn, number, depth))
    if running_loop() is None:
        found += _open_on(threading.current_thread(), {place[0] for place in found})
    elif _manual_seen:
        seen = {place[0] for place in found}
        found += [
            (conn, transaction_number(conn), own_depth(conn))
            for conn in connections.all(initialized_only=True)
            if conn not in seen
            and conn.connection is not None
            and not conn.autocommit
            and not _testcase_transaction(conn)
        ]
    return found


def _runs_in(conn: Any, taking_back: bool = False) -> bool:
    """Return True if the running code's queries run on ``conn``: it is ``conn``'s thread
    (or one ``conn`` is shared with, see below), or a coroutine whose ORM calls go back to that
    thread (async_to_sync runs it for ``conn``'s thread, in a copy of that thread's context;
    its sync_to_async calls run there). Sync code in another thread with a copy of the
    context (a ``sync_to_async(thread_sensitive=False)`` pool job, ``asyncio.to_thread``)
    queries a connection of its own, Django's being per thread: it does not see the
    transaction's uncommitted rows, so it is not in that transaction; taking its release
    back, it would read them as they were before (double execution). So is a coroutine
    such a pool job starts with async_to_sync: its ORM calls go back to the pool thread
    (note_sync_thread told which thread they go to).

    A connection shared between threads (``inc_thread_sharing()``: Django's live server
    hands its in-memory SQLite connection to each request thread) counts for sync code in a
    thread it was handed to, and for any coroutine (which of the sharing threads its ORM
    calls go to is not known: docs/transactions.md, limits).

    A coroutine whose question asgiref did not answer in time (_UNANSWERED) may be the
    transaction's (its thread waits for it) or not (a coroutine sent to a loop of its own
    and not waited for, its ORM calls then on a connection of its own): when in doubt, hold
    longer and take nothing back. It is in the transaction for tying (its release waits for
    the COMMIT, as an insider's), outside it for ``taking_back`` a release found waiting for
    that COMMIT (counted in, a sync view's follow-up sent to a background loop and not
    waited for took back the view's release and charged again through a pool job)."""
    if conn._thread_ident == _get_ident():
        # Sync code of the connection's thread. A coroutine on a loop run in that very thread
        # (asyncio.run() in sync code) is in doubt: asgiref never runs its sync_to_async calls
        # in the loop's thread (they reach another thread's connection), while its direct
        # ORM calls (DJANGO_ALLOW_ASYNC_UNSAFE) run on this one. In for tying, not for taking
        # back (counted in, such a reconciler took back the view's release and charged again
        # through sync_to_async: adversary 8).
        return not taking_back or asyncio._get_running_loop() is None
    if asyncio._get_running_loop() is None:
        return _handed_here(conn)
    if conn.allow_thread_sharing:
        return True
    sync_thread = _noted_sync_thread()
    if sync_thread == _UNANSWERED:
        return not taking_back
    return sync_thread is None or sync_thread == conn._thread_ident


def _handed_here(conn: Any) -> bool:
    """Return True if ``conn``, another thread's, is shared with this one: it allows thread
    sharing and is among this thread's connections (``connections[alias] = conn`` here). A
    thread it was not handed to (a pool job given a copy of the context) queries a
    connection of its own, outside the transaction. (Only this thread's connections already
    made are looked at: none is made here.)"""
    return conn.allow_thread_sharing and any(
        mine is conn for mine in connections.all(initialized_only=True)
    )


# The thread a coroutine's ORM calls go back to (sync_to_async's, thread-sensitive), noted
# by anote_sync_thread for its task (_Noted): asgiref copies a coroutine's context variables
# back to its caller when it returns, so a value without its task would reach the caller's
# next coroutines, whose thread may be another.
class _Noted:
    """What anote_sync_thread noted for one task: the thread its ORM calls go back to
    (``thread``; _UNANSWERED until a late answer comes, _NOWHERE), the async_to_sync call
    whose thread answered (asgiref's executor of that thread, weakly: once that call has
    returned, the answer is stale), and the route asgiref took (``route``: the answer holds
    only while the running code's route is the same one)."""

    __slots__ = ("call", "entered", "hop", "route", "seen", "task", "thread")

    def __init__(self, task: asyncio.Task[Any], call: Any, route: tuple[Any, ...]) -> None:
        self.task = weakref.ref(task)
        self.thread = _UNANSWERED
        self.call = call
        # Weakly: a route's objects (asgiref's executors, contexts) must not be kept alive.
        self.route = tuple(None if thing is None else weakref.ref(thing) for thing in route)
        self.entered: tuple[Any, ...] = ()  # a late loop-thread answer's, not noted yet
        self.hop: asyncio.Future[Any] | None = None  # anote_loop_thread's, while unanswered
        # What anote_loop_thread's hop found in the thread asked, once it ran there (kept
        # even if the hop's task is cancelled afterwards, at the loop's shutdown).
        self.seen: tuple[int, tuple[Any, ...]] | None = None

    def ask(self) -> tuple[int, tuple[Any, ...]]:
        """Run in the thread asked (anote_loop_thread's hop): note and return its answer."""
        self.seen = _open_here()
        return self.seen

    def holds(self, route: tuple[Any, ...]) -> bool:
        """Return True if no new question is needed: the route is the one asked on, and the
        answer is "no thread", still awaited (a late answer comes by itself), or a thread
        whose call still runs."""
        same = all(
            ref is None if thing is None else ref is not None and ref() is thing
            for ref, thing in zip(self.route, route, strict=True)
        )
        return same and (self.thread <= 0 or not _returned(self.call))

    def answered(self, hop: asyncio.Future[int]) -> None:
        """Take a hop's answer (_answer), given late too: a question that waited behind
        other sync work on its thread (a sibling task's slow charge) is unanswered until
        then, and answered as it would have been at once."""
        if not hop.cancelled():
            self.thread = _answer(hop)

    def answered_loop(self, hop: asyncio.Future[tuple[int, tuple[Any, ...]]]) -> None:
        """Take a late answer of anote_loop_thread's hop: the thread, and the transactions
        open there, noted in the task's context at its next lock call (anote_loop_thread)."""
        if self.hop is None or hop.cancelled():
            return  # taken already (anote_loop_thread), or never to come
        self.hop = None
        if hop.exception() is not None:
            self.thread = _NOWHERE
        else:
            self.thread, self.entered = hop.result()


_sync_thread: contextvars.ContextVar[_Noted | None] = contextvars.ContextVar(
    "distlock_sync_thread", default=None
)


# How long a coroutine waits for asgiref's answer: the thread it asks through may be the
# very one that waits for this coroutine (a sync view's
# ``run_coroutine_threadsafe(...).result()`` to a loop of its own), which would answer only
# after the coroutine's lock call returned, that is never (the fifth adversary: the lock
# call hung). Noted as _UNANSWERED until the answer comes, if ever (the task asks once):
# in the transaction for tying (its release waits for the COMMIT), not for taking back a
# release waiting for it (_runs_in: the same thread may be busy with a view that never
# waits for it).
HOP_TIMEOUT = 1.0
_UNANSWERED = 0  # a noted thread that has not answered (thread idents are never 0)
# How long anote_loop_thread waits for its answer, much shorter: such a coroutine is most
# often in no transaction (a command's or a Celery task's callbacks), and its thread may be
# busy with other sync work; an answer that comes later is noted at its next lock call (a
# release before it made no ORM call in that thread since the question: asgiref runs them
# in order). Waiting HOP_TIMEOUT, a callback's free lock took up to 1 s (the ninth
# adversary).
LOOP_HOP_TIMEOUT = 0.05
# A noted "no thread": asgiref refused the hop (a task that outlived the async_to_sync call
# that started it: "CurrentThreadExecutor already quit"). Its ORM calls reach no thread of
# the transaction, so it is not in it (counted in, it took back a release waiting for the
# request's COMMIT and charged again on a pool thread's connection: the sixth adversary).
_NOWHERE = -1


def _noted_sync_thread() -> int | None:
    """Return the thread the running task's ORM calls go back to, None if not noted for it
    (taken as the transaction's thread, as async_to_sync's coroutine's is), _NOWHERE once
    the async_to_sync call that answered has returned (they go back to none of that call's
    thread now; anote_sync_thread asks again before each lock call)."""
    noted = _noted_for(asyncio.current_task())
    if noted is None:
        return None
    if noted.thread > 0 and _returned(noted.call):
        return _NOWHERE
    return noted.thread


def _noted_for(task: asyncio.Task[Any] | None) -> _Noted | None:
    """Return what anote_sync_thread noted for ``task``, None if nothing (or for another
    task: a value asgiref copied back to a caller)."""
    noted = _sync_thread.get()
    return noted if noted is not None and noted.task() is task else None


def _returned(call: weakref.ref[Any] | None) -> bool:
    """Return True if the async_to_sync call of ``call`` (asgiref's executor of its thread,
    weakly; None: no such call, never returns) has returned (its executor quit, or is
    gone)."""
    if call is None:
        return False
    executor = call()
    return executor is None or _has_quit(executor)


def _has_quit(executor: Any) -> bool:
    """Return True if asgiref's executor of an async_to_sync call has quit (the call
    returned). asgiref has no public flag: its private one, read with a default
    (``manage.py check`` says when it is missing: _asgiref_problems)."""
    return bool(getattr(executor, "_broken", False))


def _calls() -> Iterable[Any]:
    """Yield asgiref's executors of the async_to_sync calls this context runs in, the
    innermost first (a thread-sensitive call goes to the first that has not returned)."""
    executor = getattr(AsyncToSync.executors, "current", None)
    for _ in range(100):  # a chain, never a cycle: bounded all the same
        if executor is None:
            return
        yield executor
        executor = getattr(executor, "_old_executor", None)


def _answering_call() -> weakref.ref[Any] | None:
    """Return the call a thread-sensitive call of this context goes to (the first not
    returned), weakly; None outside any (the answer then never goes stale)."""
    for executor in _calls():
        if not _has_quit(executor):
            return weakref.ref(executor)
    return None


def _answered_on(task: asyncio.Task[Any], route: tuple[Any, ...]) -> bool:
    """Return True if what was noted for ``task`` still holds on ``route`` (_Noted.holds):
    no new question is needed."""
    noted = _noted_for(task)
    return noted is not None and noted.holds(route)


def _route() -> tuple[Any, ...]:
    """Return what decides where the running coroutine's thread-sensitive calls go:
    asgiref's executor of the async_to_sync call it runs in, and its thread-sensitive
    context (inside ``ThreadSensitiveContext(executor=...)`` they go to that executor's
    thread, the call's executor hidden until the block ends). An answer noted on one route
    says nothing of another (the eighth adversary: noted inside such a block, it was kept
    after it, and before it, inside)."""
    context = getattr(SyncToAsync, "thread_sensitive_context", None)
    return (
        getattr(AsyncToSync.executors, "current", None),
        context.get(None) if context is not None else None,
        # With neither, asgiref sends the calls to the thread the running loop was made for
        # while async_to_sync's call runs, and to its single executor thread once that call
        # has returned (the loop shutting down: asyncio.run cancels the tasks left): an
        # answer noted on that loop's thread says nothing of the latter (the ninth
        # adversary: a cancelled bridged task took back the view's release).
        loops_of_async_to_sync.get(running_loop()),
    )


async def anote_sync_thread() -> None:
    """In a coroutine that runs in a copy of a context where a transaction is open, note
    which thread its ORM calls go back to, asking asgiref the only public way: by making
    such a call (one thread hop, once per task and route, and again once the async_to_sync
    call whose thread answered has returned). async_to_sync's coroutine goes back to the
    caller's thread, the transaction's; one that a ``sync_to_async(thread_sensitive=False)``
    pool job starts goes back to the pool thread, whose connection is another; one inside
    ``ThreadSensitiveContext(executor=...)``, to that executor's thread; a task that
    outlived every async_to_sync call that started it, to none (asgiref refuses the call).
    One whose call is not answered in time is unanswered (_UNANSWERED) until the answer
    comes. Anything else that goes wrong leaves it unnoted (the coroutine counts as the
    transaction's)."""
    entered = _entered.get()
    if not entered:  # no transaction ever noted in this context: every async view's lock
        return
    task = asyncio.current_task()
    if task is None:
        return
    try:
        route = _route()
        if _answered_on(task, route) or not any(map(_open_elsewhere, _pairs(entered))):
            return
        noted = _Noted(task, _answering_call(), route)
        hop = asyncio.ensure_future(sync_to_async(_get_ident)())
        # Not wait_for: cancelling a sync_to_async call waits for its thread all the same.
        done, _ = await asyncio.wait((hop,), timeout=HOP_TIMEOUT)
        if done:
            noted.answered(hop)
        else:
            # Unanswered until the thread is free (the answer is taken then: a question
            # that waited behind a sibling task's sync work longer than HOP_TIMEOUT, left
            # unanswered for good, kept that task from its sibling's release for ever),
            # even for a task that outlived the async_to_sync call it was started in: its
            # calls then wait for the thread of an outer call still running, busy with
            # work that may hold the transaction (a sync-only middleware's thread running
            # the view: they run after its COMMIT) or run inside it (sync code the service
            # runs, the transaction opened before the service: they run in it). Counted as
            # in none (_NOWHERE), such a task's release freed the lock before the COMMIT of
            # its own writes (test_transactions_adversary39b).
            hop.add_done_callback(noted.answered)
        _sync_thread.set(noted)
    except Exception:
        _bookkeeping_failed("anote_sync_thread")


# The loops async_to_sync made for a thread (a loop of its own, as under WSGI): asgiref's
# ``AsyncToSync.loop_thread_executors``, a dict it fills and empties, never rebinds. With
# ``running_loop`` (a builtin), the acquire path asks ``running_loop() in
# loops_of_async_to_sync`` inline, before anote_loop_thread: no frame for sync code (no
# loop) or under ASGI (the server's loop is not one of them).
loops_of_async_to_sync: Any = getattr(AsyncToSync, "loop_thread_executors", {})
running_loop = asyncio._get_running_loop


def _calls_go_to_the_loops_thread() -> bool:
    """Return True if the running coroutine's thread-sensitive calls go to the thread its
    loop was made for although its context names no async_to_sync call there (asgiref's
    fallback: a coroutine that a plain thread scheduled on the loop, with
    ``run_coroutine_threadsafe``, runs in that thread's context)."""
    if running_loop() not in loops_of_async_to_sync:
        return False
    if getattr(AsyncToSync.executors, "current", None) is not None:
        return False
    context = getattr(SyncToAsync, "thread_sensitive_context", None)
    return context is None or context.get(None) is None


def _open_here() -> tuple[int, tuple[Any, ...]]:
    """Return this thread's identity and the transactions of its open atomic blocks, flat as
    ``_entered`` holds them (run by a hop in the thread asked)."""
    entered = tuple(
        item
        for conn in open_transactions()
        for item in (weakref.ref(conn), transaction_number(conn))
    )
    return _get_ident(), entered


async def anote_loop_thread() -> None:
    """In a coroutine whose context names no transaction, on a loop async_to_sync made for a
    thread, whose thread-sensitive calls go to that thread all the same
    (_calls_go_to_the_loops_thread): its ORM calls run in whatever transaction that thread
    has open. Ask that thread (one hop, once per task and route) which transactions are
    open there, and note them, and the thread, in this task's context, as a copy of that
    thread's context would have them: its releases inside them then wait for their COMMIT
    (before: a coroutine a callback-based client's thread scheduled there charged inside the
    request's transaction, and its release freed the lock at once: 4 of 4 orders charged
    twice under gunicorn, the eighth adversary). Unanswered in time, nothing is noted: its
    releases free the lock at once, as before."""
    task = asyncio.current_task()
    if task is None or not _calls_go_to_the_loops_thread():
        return
    try:
        route = _route()
        noted = _noted_for(task)
        if noted is not None and noted.holds(route):
            hop = noted.hop
            if noted.thread == _UNANSWERED and hop is not None and hop.done():
                # Answered, its done callback not run yet: a call of this task's own that
                # queued behind the hop has returned in the same turn of the loop.
                noted.answered_loop(hop)
            if noted.entered:  # a late answer came meanwhile: note it now, in this task
                _entered.set(noted.entered)
                noted.entered = ()
            return
        noted = _Noted(task, None, route)
        hop = asyncio.ensure_future(sync_to_async(noted.ask)())
        done, _ = await asyncio.wait((hop,), timeout=LOOP_HOP_TIMEOUT)
        if not done:
            # Taken when it comes (the thread was busy with other sync work: this task's
            # own ORM calls queue behind the hop, so the answer is in before they return),
            # and noted at the task's next lock call, its release included (left
            # unnoted, the release of a charge made in the thread's transaction freed the
            # lock before the COMMIT: the ninth adversary).
            noted.hop = hop
            hop.add_done_callback(noted.answered_loop)
        elif hop.exception() is not None:
            noted.thread = _NOWHERE
        else:
            noted.thread, entered = hop.result()
            if entered:
                _entered.set(entered)
        _sync_thread.set(noted)
    except Exception:
        _bookkeeping_failed("anote_loop_thread")


def note_loop_thread() -> None:
    """Sync code runs its queries on its own thread's connection: nothing to note (the sync
    twin of anote_loop_thread)."""


def loop_answer_pending() -> _Noted | None:
    """Return what anote_loop_thread noted for the running task while its question is
    unanswered (its hop still runs), else None."""
    if running_loop() is None:
        return None
    noted = _noted_for(asyncio.current_task())
    if noted is None or noted.hop is None or noted.hop.done():
        return None
    return noted


# The releases awaiting their answer (LockTies.settle_on_answer), by the lock's key. Never
# rebound (the acquire's waiting loop reads it as ``awaiting``). Taken back at once by the
# task that made one, and by code in every transaction it names (_awaiting_here): before,
# the task waited for its own release, and code of the request's transaction for an answer
# that its own thread, busy with it (a nested async_to_sync), could give only after it.
_awaiting: dict[Hashable, list[Hold]] = {}
awaiting = _awaiting


def _awaiting_here(key: Hashable) -> Any:
    """Return the Lock named by ``key`` whose release awaits its answer and is the running
    code's to take back, or None: made by the running task, or (its transactions not told)
    asked for by sync code in the thread whose answer it awaits, which would otherwise wait
    for an answer queued behind itself (an on_commit hook of the transaction whose COMMIT
    it was made during). Code in the transactions the release is tied to takes it back
    through those ties, as any release waiting for them."""
    if running_loop() is None:
        current = threading.current_thread()
        for hold in list(_awaiting.get(key, ())):
            mine = hold.answered_in is current and hold.answer is not None
            if mine and hold.of.pending is hold:
                return hold.owner
        return None
    task = asyncio.current_task()
    for hold in list(_awaiting.get(key, ())):
        answer = hold.answer
        if answer is not None and hold.of.pending is hold and answer[0].task() is task:
            return hold.owner
    return None


def _forget_awaiting(key: Hashable, hold: Hold) -> None:
    with _guard:
        holds = _awaiting.get(key)
        if holds is not None and hold in holds:
            holds.remove(hold)
            if not holds:
                del _awaiting[key]


def _loop_thread_transactions() -> list[Place] | None:
    """Return the transactions open on the connections of the thread the running loop was
    made for (one whose COMMIT is running included: its atomic block is gone, autocommit
    still off): those a coroutine's thread-sensitive calls on that loop run in. Read from
    _begun_on, without a hop (that thread is busy: loop_answer_pending) nor any task's
    context (a task's context cannot be read on Python 3.11, where a release named none
    and so was freed at the loop's shutdown before the COMMIT: the eleventh adversary).
    None: cannot be told (asgiref's executor of that thread has no ``_work_thread``;
    ``manage.py check`` says so)."""
    thread = _loop_thread()
    if thread is None:
        return None
    places = _open_on(thread)
    if any(depth == 0 for _conn, _number, depth in places):
        # A COMMIT running there (Django has left the block, autocommit is still off) or a
        # transaction managed by hand: its end cannot be told from here. Held for the
        # answer, which comes once that thread is done with it, its on_commit hooks
        # included (tied as a manual transaction's, it was freed at the COMMIT before
        # them: the fourteenth adversary).
        return None
    return places


def _loop_thread() -> threading.Thread | None:
    """Return the thread the running loop was made for (async_to_sync's), None if it
    cannot be told (asgiref's executor of that thread has no ``_work_thread``)."""
    executor = loops_of_async_to_sync.get(running_loop())
    thread = getattr(executor, "_work_thread", None)
    return thread if isinstance(thread, threading.Thread) else None


def _still_open(places: Iterable[Place]) -> list[Place]:
    """Return those of ``places`` whose transaction is still open."""
    return [
        (conn, number, depth)
        for conn, number, depth in places
        if getattr(conn, "distlock_transaction", None) == number and own_depth(conn)
    ]


def _places_seen(seen: tuple[int, tuple[Any, ...]]) -> list[Place]:
    """Return the transactions a loop-thread hop found open (``_Noted.seen``) that are still
    open, as places to tie a release to (the outermost block: Hold.wait)."""
    return _still_open((conn, number, 1) for conn, number in _pairs(seen[1]))


def answer_pending() -> bool:
    """Return True if the running task asked which thread its ORM calls go to and the answer
    has not come yet (anote_sync_thread takes a late one when it comes)."""
    if asyncio._get_running_loop() is None:
        return False
    noted = _noted_for(asyncio.current_task())
    return noted is not None and noted.thread == _UNANSWERED


def _answer(hop: asyncio.Future[int]) -> int:
    """Return the thread a finished hop ran in, _NOWHERE if asgiref refused to run it (the
    only way the call itself fails: it ran ``threading.get_ident``)."""
    return _NOWHERE if hop.exception() is not None else hop.result()


def _open_elsewhere(entry: tuple[Any, int]) -> bool:
    """Return True if ``entry`` (connection, number) of the context is a transaction still
    open on another thread's connection, or one whose on_commit hooks run there (the window
    _committing_here looks at): the cases where a coroutine's sync thread matters. (Left
    unnoted during the hooks, a pool job's coroutine counted as one of them, and took back
    a release that waits for them.)"""
    conn, number = entry
    if conn.allow_thread_sharing or conn._thread_ident == _get_ident():
        return False
    if getattr(conn, "distlock_transaction", None) == number and own_depth(conn):
        return True
    return _ending_covers(conn, number) is not None


def note_sync_thread() -> None:
    """Sync code runs its queries on its own thread's connection: nothing to note (the sync
    twin of anote_sync_thread)."""


def snapshot_isolation_aliases() -> list[str]:
    """Return the aliases whose open transaction reads from a snapshot (REPEATABLE READ or
    SERIALIZABLE) as far as the connection's settings tell (no query is sent).

    Every acquire asks, so the common case is kept cheap: unless some alias sets an
    isolation level in its OPTIONS, every connection reads at READ COMMITTED (Django's
    default on PostgreSQL and MySQL/MariaDB alike) and no connection is looked at.
    """
    if not _isolation_levels_set():
        return []
    return [conn.alias for conn in open_transactions() if _isolation(conn) in SNAPSHOT_LEVELS]


# (DATABASES as connections read it, whether some alias sets an isolation level): the
# answer is kept for as long as the connections keep reading the same settings.
_isolation_seen: tuple[object, bool] = (None, False)


def _isolation_levels_set() -> bool:
    global _isolation_seen
    databases = connections.settings
    seen, answer = _isolation_seen
    if seen is not databases:
        answer = any(
            "isolation_level" in (database.get("OPTIONS") or {}) for database in databases.values()
        )
        _isolation_seen = (databases, answer)
    return answer


def _isolation(conn: Any) -> str:
    level = getattr(conn, "isolation_level", None)  # set by the postgresql and mysql backends
    if level is None and conn.vendor == "mysql":
        # OPTIONS["isolation_level"]: None leaves the server's own level, which InnoDB's
        # default makes REPEATABLE READ (Django's default is READ COMMITTED).
        return "repeatable read"
    name = getattr(level, "name", level)  # psycopg's IsolationLevel, or MySQL's text
    return str(name or "").replace("_", " ").lower()


# --- holds and their ties ----------------------------------------------------------------
_guard = threading.Lock()
# The holds tied to each connection's transactions, keyed by the connection's one weak
# reference (_ref): distlock never keeps a connection alive. A thread that dies inside a
# transaction managed by hand (no commit, no rollback) leaves its connection to be collected,
# as without distlock, so the server ends its session (rolling back); its ties then end
# (_end_gone). Empty (the common case): the wrappers return at once.
_tied: dict[weakref.ref[Any], set[Hold]] = {}
# The same dict (never rebound), read by the acquire's waiting loop (attempts.py) before any
# look at the ties: empty, no waiter has a transaction's hold to look for.
tied = _tied
# The weak references of tied connections collected since the last look (their weakref
# callback appends: no lock is taken there, the collector may run anywhere).
_gone: list[weakref.ref[Any]] = []
# The threads that may end a tied block, counted per tie: the connection's own and the one
# that made the tie (async_to_sync's loop thread ties the calling thread's connection); None:
# a tied connection shared between threads (any thread may). A block ended in any other
# thread has nothing tied: its wrapper returns without looking its connection up.
_enders: dict[int | None, int] = {}
_get_ident = threading.get_ident


def _ref(conn: Any) -> weakref.ref[Any]:
    """Return the weak reference to ``conn`` that the registry and the ties know it by: one
    per connection, kept on it (the same object each time, so that ties compare by
    identity; its callback notes the connection collected)."""
    ref: weakref.ref[Any] | None = getattr(conn, "distlock_ref", None)
    if ref is None or ref() is not conn:  # the first tie (or a copy of another's attribute)
        ref = conn.distlock_ref = weakref.ref(conn, _gone.append)
    return ref


def _known(conn: Any) -> weakref.ref[Any] | None:
    """Return ``conn``'s weak reference if it has one (it was ever tied), else None: a look-up
    only, nothing is made."""
    ref: weakref.ref[Any] | None = getattr(conn, "distlock_ref", None)
    return ref if ref is not None and ref() is conn else None


def _link(hold: Hold, conn: Any, ref: weakref.ref[Any]) -> None:
    """Tie ``hold`` to ``conn`` (its weak reference ``ref``) in the registry (under _guard)."""
    if _gone:
        _end_gone()
    _tied.setdefault(ref, set()).add(hold)
    hold._owner = hold._owner_ref()  # kept while tied
    idents = {None} if conn.allow_thread_sharing else {conn._thread_ident, _get_ident()}
    hold.enders[ref] = idents
    for ident in idents:
        _enders[ident] = _enders.get(ident, 0) + 1


def _end_gone() -> None:
    """End the ties to the connections collected since the last look (under _guard): their
    thread died inside a transaction managed by hand, and the server ends their session,
    rolling back. A hold still held is then tied nowhere and its Lock referred to weakly
    again: dropped, its lease ends it. A released hold waiting for such a connection is left
    to the renewer, which frees it at its next renewal (Hold.end_unseen: never here, where a
    round trip to the lock server would run inside another lock's tie)."""
    while _gone:
        ref = _gone.pop()
        for hold in list(_tied.get(ref, ())):
            if not hold.waiting:
                for key in [key for key in hold.ties if key[0] is ref]:
                    hold._untie(key)


def _unlink(hold: Hold, ref: weakref.ref[Any]) -> None:
    """Undo _link (under _guard)."""
    holds = _tied.get(ref)
    if holds is not None:
        holds.discard(hold)
        if not holds:
            del _tied[ref]
    for ident in hold.enders.pop(ref, ()):
        left = _enders.get(ident, 0) - 1
        if left > 0:
            _enders[ident] = left
        else:
            _enders.pop(ident, None)
    if not hold.enders and not hold.waiting:  # tied nowhere, nothing to free: weakly
        hold._owner = None


class Hold:
    """One hold of a lock and its ties to the transactions it belongs to.

    ``owner`` is the Lock whose hold it is, ``of`` that lock's LockTies: its
    ``release_after`` frees the lock, once, from whichever thread ends the last tie (the one
    leaving the block, or the releasing thread if none is left), with the aliases found
    unreachable by the releases of the same block end (it adds to them): a batch's locks do
    not each wait out a timeout inside Django's COMMIT.
    """

    def __init__(self, owner: Owner, of: LockTies) -> None:
        # The Lock, strongly only while the hold is tied or its release waits (the registry
        # then keeps a released Lock alive until its transaction ends); weakly otherwise, so
        # that Lock._ties.hold and this make no reference cycle: a Lock dropped unreleased
        # after its transaction is collected at once (and no longer renewed), as outside one.
        self._owner_ref: weakref.ref[Any] = weakref.ref(owner)
        self._owner: Any = None
        # Its LockTies, weakly (LockTies.hold refers to this): the Lock keeps it alive.
        self._of_ref: weakref.ref[LockTies] = weakref.ref(of)
        # (connection's weak reference, transaction number) -> own depth of the block it is
        # tied to. One tie per transaction, several per connection: an on_commit hook's own
        # block that takes the lock back is tied besides the committed transaction, never
        # instead of it. Weak: a tie never keeps a dead thread's connection (and session).
        self.ties: dict[tuple[weakref.ref[Any], int], int] = {}
        # The thread whose connection each tie is to, when the tie was made there: a tie
        # to a thread that died ends (the renewer looks).
        self.threads: dict[tuple[weakref.ref[Any], int], weakref.ref[threading.Thread]] = {}
        self.enders: dict[weakref.ref[Any], set[int | None]] = {}  # _link's threads
        self.waiting = False  # released: free the lock when the last tie ends
        self.waiting_since = 0.0  # time.monotonic() at the release
        # How many on_commit hooks each tied transaction had at the release: with none, the
        # lock is freed at the COMMIT itself; else after those hooks (as documented).
        self.hooks_before: dict[tuple[Any, int], int] = {}
        self.done = False  # freed or dropped
        # (what anote_loop_thread noted, its hop): a release made while that question was
        # unanswered, settled when the answer comes (LockTies.settle_on_answer).
        self.answer: tuple[_Noted, asyncio.Future[Any], list[Place] | None] | None = None
        # The thread whose answer a release held for it awaits, when which transactions it
        # belongs to cannot be told (LockTies.settle_on_answer).
        self.answered_in: threading.Thread | None = None
        # The hop whose answer settles it (a done callback added once: a consumer's loop of
        # releases and take-backs while the thread stays busy added one per release).
        self.settles_on: asyncio.Future[Any] | None = None

    @property
    def owner(self) -> Any:
        return self._owner if self._owner is not None else self._owner_ref()

    @owner.setter
    def owner(self, lock: Any) -> None:
        self._owner_ref = weakref.ref(lock)
        if self._owner is not None:
            self._owner = lock

    @property
    def of(self) -> LockTies:
        """The LockTies of ``owner``: read only while the owner lives, which keeps it."""
        of = self._of_ref()
        if of is None:
            raise ReferenceError("the Lock of this hold was collected")
        return of

    @of.setter
    def of(self, ties: LockTies) -> None:
        self._of_ref = weakref.ref(ties)

    def tie(self, places: Iterable[Place]) -> None:
        """Tie this hold to the blocks it is taken (or taken back) in: a tie already made in
        the same transaction keeps its shallower block, as PostgreSQL's locks stack."""
        with _guard:
            for conn, number, depth in places:
                tied = self.ties.get((_ref(conn), number))
                if tied is None or depth < tied:
                    self._add(conn, number, depth)

    def wait(self, places: Iterable[Place]) -> bool:
        """Mark the hold released inside ``places``: tie it to the outermost block of each
        transaction it is not tied to yet. Return True if the release must wait for a tie to
        end, False if the lock can be freed now."""
        with _guard:
            for conn, number, depth in places:
                if (_ref(conn), number) not in self.ties:
                    self._add(conn, number, min(depth, 1))
            # (Only the connection's current transaction's count is ever read: COMMITTED.)
            self.hooks_before = {key: _hooks(key[0]) for key in self.ties}
            self.waiting = bool(self.ties) and not self.done
            self.waiting_since = time.monotonic()
            return self.waiting

    def also_wait(self, places: Iterable[Place]) -> bool:
        """A waiting release's answer came: tie it also to the outermost block of each of
        ``places`` it is not tied to yet (their on_commit hooks counted now). Return True if
        it must still wait for a tie to end, False if the lock can be freed now."""
        with _guard:
            for conn, number, depth in places:
                key = (_ref(conn), number)
                if key not in self.ties:
                    self._add(conn, number, min(depth, 1))
                    self.hooks_before[key] = _hooks(key[0])
            if self.done or not self.ties:
                self.waiting = False
                return False
            self.waiting = True
            return True

    def resume(self) -> bool:
        """Take the hold back (code of the same transaction asks for the lock again): stop
        waiting. Return False if the lock is being freed already."""
        with _guard:
            if self.done:
                return False
            self.waiting = False
            return True

    def drop(self) -> None:
        """Forget every tie: the hold ended some other way (released, lost, taken over)."""
        with _guard:
            self.done = True
            for ref in list(self.enders):
                _unlink(self, ref)
            self.ties.clear()
            self.threads.clear()
            self.hooks_before.clear()

    def end_unseen(self) -> bool:
        """End the ties whose transaction is over without a wrapper having seen it (its
        thread died, a backend's commit() skipped the base class's, it was open when
        distlock was imported). Return True if the lock is to be freed now. The renewer asks,
        at each renewal of a waiting release: such a lock is never kept alive for ever."""
        with _guard:
            over = [key for key in self.ties if not self._open(*key)]
            freed = False
            for key in over:
                freed = self._untie(key) or freed
            return freed

    def give_up_manual(self) -> float | None:
        """If this released hold has waited longer than MANUAL_COMMIT_WAIT for a transaction
        managed by hand (a tie outside every atomic block), stop waiting: mark it done (no
        tie's end frees it any more) and return the seconds waited; else return None. The
        renewer asks, at each renewal of a waiting release, after end_unseen()."""
        with _guard:
            waited = time.monotonic() - self.waiting_since
            manual = any(depth == 0 for depth in self.ties.values())
            if self.done or not self.waiting or not manual or waited <= MANUAL_COMMIT_WAIT:
                return None
            self.done = True
            return waited

    def _open(self, ref: weakref.ref[Any], number: int) -> bool:
        thread = self.threads.get((ref, number))
        if thread is not None and _thread_ended(thread):
            return False
        conn = ref()
        if conn is None:  # collected: its thread died, the server ended its session
            return False
        if number in getattr(conn, "distlock_endings", ()):  # its on_commit hooks run
            return True
        if getattr(conn, "distlock_transaction", None) != number or conn.connection is None:
            return False
        return bool(conn.in_atomic_block or not conn.autocommit)

    def _add(self, conn: Any, number: int, depth: int) -> None:
        ref = _ref(conn)
        if ref not in self.enders:  # its first tie to this connection
            _link(self, conn, ref)
        self.ties[ref, number] = depth
        if conn._thread_ident == _get_ident():
            self.threads[ref, number] = weakref.ref(threading.current_thread())
            _watch_thread_end()
        if depth == 0:
            _watch_manual_endings(type(conn))

    def _untie(self, key: tuple[weakref.ref[Any], int]) -> bool:
        """Remove the tie to ``key`` (connection's weak reference, transaction number);
        return True if the lock is to be freed now."""
        del self.ties[key]
        self.threads.pop(key, None)
        self.hooks_before.pop(key, None)
        ref = key[0]
        if not any(tied is ref for tied, _number in self.ties):  # its last one there
            _unlink(self, ref)
        if self.waiting and not self.ties and not self.done:
            self.done = True
            return True
        return False


def _settle_when_answered(hold: Hold, _hop: asyncio.Future[Any]) -> None:
    """The answer a release of ``hold`` awaited came: settle the release awaiting it now, if
    any (taken back meanwhile, none; taken back by another Lock object, that one's)."""
    answer, lock = hold.answer, hold.owner
    if answer is not None and lock is not None:  # (its Lock, alive, keeps its ties)
        hold.of.settle(lock, hold, answer)


def _thread_ended(ref: weakref.ref[threading.Thread]) -> bool:
    """Return True if the thread ``ref`` refers to has ended. A thread that Python's
    threading module did not start (a uWSGI or mod_wsgi worker thread: a dummy thread) may
    raise instead of answering once it ended (Python 3.13's ``_DummyThread.is_alive()``:
    RuntimeError "thread is not alive"); the renewer asks this, and must get an answer."""
    thread = ref()
    if thread is None or thread in _ended_threads:
        return True
    try:
        return not thread.is_alive()
    except Exception:
        return True


def _hooks(ref: weakref.ref[Any]) -> int:
    """Return how many on_commit hooks the connection of ``ref`` has (0 once collected)."""
    conn = ref()
    return len(conn.run_on_commit) if conn is not None else 0


class Owner(Protocol):
    """What the ties of a hold read and do of the Lock they belong to: its public attributes,
    and the three steps the Lock lets its ties take (free it now, drop the hold, report it
    lost), which are the Lock's own."""

    name: str
    using: str
    token: str | None
    hold_until_commit: bool

    def lease_left(self) -> float: ...

    def _release_now(self) -> None: ...

    def _forget(self, *, fence_ends: bool = True) -> None: ...

    def _report_lost(self, operations: Any = None) -> None: ...

    @property
    def operations(self) -> Any: ...


class LockTies:
    """A Lock's ties to database transactions (``Lock._ties``): the Hold of its current hold,
    and the Hold whose release waits for a transaction or savepoint to end (``pending``).

    ``key`` is the lock's (kind, alias, name): a shared hold is not the exclusive lock, and a
    transaction takes back only its own kind. ``lease`` is the lock's Lease, whose mutex
    orders the release against renewals and which is kept alive while the release waits.
    Like the Lease, it keeps no reference to its lock (the lock is passed to each call; a
    Hold, made at the first tie, references it strongly only while tied or waiting).
    """

    __slots__ = ("__weakref__", "hold", "key", "lease", "pending")

    def __init__(self, key: tuple[str, str, str], lease: Lease) -> None:
        self.key = key
        self.lease = lease
        self.hold: Hold | None = None  # this hold's ties to database transactions
        self.pending: Hold | None = None  # the same, while its release waits for them

    def wait(self, lock: Owner, depth: int) -> bool:
        """If this hold belongs to a database transaction (taken in one, or released inside
        one), keep the lock held until that transaction or savepoint ends, its lease kept
        alive, and return True; else return False. ``depth``: the hold's reentrant depth."""
        if self.pending is not None:
            raise LockNotOwned(
                f"{lock.name!r} was released already: its release waits for the database "
                "transaction to end.",
                name=lock.name,
            )
        if depth > 1 or self.lease.lost or lock.token is None:
            return False
        hold = self.hold
        # No tie, and no transaction entered here nor managed by hand (the usual case): what
        # transactions_here() would find out, without its call.
        if hold is None and not (
            _entered.get()
            or _get_ident() in _begun_on
            or (_manual_seen and running_loop() is not None)  # a coroutine: see transactions_here
        ):
            return False
        # hold_until_commit=False ties to no transaction of its own, but a hold it took back
        # keeps its ties: the holds stack, so the earlier one's still waits for its end.
        transactions = transactions_here() if lock.hold_until_commit else []
        if hold is None and not transactions:
            return False
        left = lock.lease_left()
        if left <= 0:
            return False
        if hold is None:
            hold = self.hold = Hold(lock, self)
        self.pending = hold  # before wait(): a tie may end in another thread meanwhile
        if not hold.wait(transactions):
            self.pending = None
            return False
        self.lease.keep_alive(lock, left)  # keep the lease alive until the transaction ends
        return True

    def settle_on_answer(self, lock: Owner, depth: int) -> bool:
        """A release by a coroutine on async_to_sync's loop whose question to the loop's
        thread (anote_loop_thread: which transactions are open there) is not answered yet:
        tie it at once to every transaction open on that thread (_loop_thread_transactions:
        the coroutine's ORM calls ran in them), as a release made inside them, and return
        True; when the answer comes, also to those the answer found open. Else return False.
        Freed at once before, a release whose ORM calls ran in that thread's transaction
        before the question (the coroutine's first lock call was its release) let the next
        holder in before the COMMIT (the tenth adversary). Tied, its end is the
        transaction's own, seen by the wrappers: judged from another thread instead, it was
        taken for ended during the COMMIT (Django leaves the block before it commits) and
        before the on_commit hooks (the thirteenth adversary: charged twice)."""
        noted = loop_answer_pending()
        if noted is None or noted.hop is None or depth > 1 or not lock.hold_until_commit:
            return False
        if self.lease.lost or lock.token is None or self.pending is not None:
            return False
        try:
            named = _loop_thread_transactions()
        except Exception:
            _bookkeeping_failed("settle_on_answer")
            return False  # freed at once, as before
        if named == []:  # none open there (a command's, a Celery task's callbacks)
            return False
        left = lock.lease_left()
        if left <= 0:
            return False
        if self.hold is None:
            self.hold = Hold(lock, self)
        hold = self.pending = self.hold
        hop = noted.hop
        hold.answer = (noted, hop, named)
        if named is not None:
            tied = {(conn, number) for conn, number, _ in named}
            named += [place for place in transactions_here() if place[:2] not in tied]
            if not hold.wait(named):  # ended meanwhile: nothing to wait for
                hold.answer = None
                self.pending = None
                return False
        else:  # which transactions cannot be told: held for the answer, kept alive
            hold._owner = lock
            hold.answered_in = _loop_thread()  # its code takes it back (_awaiting_here)
        with _guard:
            _awaiting.setdefault(self.key, []).append(hold)
        if hold.settles_on is not hop:  # one callback per hold and answer, not per release
            hold.settles_on = hop
            hop.add_done_callback(functools.partial(_settle_when_answered, hold))
        self.lease.keep_alive(lock, left)
        return True

    def settle(
        self, lock: Owner, hold: Hold, answer: tuple[_Noted, Any, list[Place] | None]
    ) -> None:
        """The answer settle_on_answer waited for came (or the renewer found its hop done):
        also tie the release to the transactions the answer found open (it waits for the
        end of each), or, tied to none, free the lock; once. Nothing if that release was
        settled already, or taken back (``hold.answer`` is no longer ``answer``: the hold,
        taken back by another Lock object, may await another), or freed meanwhile."""
        with _guard:
            if hold.answer is not answer:
                return
            hold.answer = None
        if self.pending is not hold:
            return
        _forget_awaiting(self.key, hold)
        try:
            noted, _hop, named = answer
            seen = noted.seen
            if seen is None and named is None and hold.answered_in is None:
                # Nothing known of that thread: left to its lease.
                self.abandon(lock, "a release whose transaction could not be told")
                return
            # (Held for a COMMIT running there, its question never run: the loop shut down,
            # so that thread is done with the COMMIT and its hooks. Left to its lease, the
            # next holder waited for it: the thirteenth adversary's test, in the suite.)
            # Never run there (cancelled at the loop's shutdown before that thread got to
            # it, or refused): the ties made at the release stay (freed at once, a charge
            # made in one before the question was charged again: the tenth adversary).
            places = _places_seen(seen) if seen is not None else []
            if hold.also_wait(places):
                return
        except Exception:
            _bookkeeping_failed("settle")
        self.release_after(lock, set())

    def tie(self, lock: Owner) -> None:
        """Tie this hold to the transactions and savepoints it is taken (or taken back) in:
        their end, not the release, decides when the lock is freed."""
        if not lock.hold_until_commit or not (
            _entered.get()
            or _get_ident() in _begun_on
            or (_manual_seen and running_loop() is not None)  # a coroutine: see transactions_here
        ):
            return  # no transaction here (as transactions_here() would say, without its call)
        transactions = transactions_here()
        if transactions:
            if self.hold is None:
                self.hold = Hold(lock, self)
            self.hold.tie(transactions)

    def release_after(self, lock: Owner, unreachable: set[str]) -> None:
        """Free the lock: every transaction its release waited for has ended. ``unreachable``:
        the aliases whose server an earlier release of the same block end could not reach
        (not asked again: each try would hold up Django's COMMIT for a timeout)."""
        self._stop_awaiting()
        with self.lease.mutex:
            self.pending = None
        if lock.token is None or self.lease.lost:
            lock._forget()  # the lost lease was reported when a renewal found it gone
            return
        operations = lock.operations  # held: its own (the release forgets them)
        try:
            if lock.using in unreachable:
                raise BackendUnavailable(f"{lock.using!r} did not answer a release just before")
            lock._release_now()
        except LockNotOwned:  # the lease ended before the transaction did
            lock._report_lost(operations)
        except LockError as exc:
            if isinstance(exc, BackendUnavailable):
                unreachable.add(lock.using)
            logger.warning(
                "distlock: could not release %r after its transaction ended (%s); "
                "it ends with its lease.",
                lock.name,
                exc,
            )
            lock._forget()
        except BaseException:  # KeyboardInterrupt, SystemExit, gevent's Timeout: it goes on,
            lock._forget()  # and the lock is no longer renewed: its lease ends it
            raise

    def _stop_awaiting(self) -> None:
        """The waiting release ends (freed, or left to its lease) before its answer came:
        nothing is left to settle, and the registry of awaiting releases keeps nothing."""
        pending = self.pending
        if pending is not None and pending.answer is not None:
            pending.answer = None
            _forget_awaiting(self.key, pending)

    def abandon(self, lock: Owner, why: str = "its transaction ended (interrupted)") -> None:
        """Leave the lock to its lease: a BaseException cut short the releases at the end
        of its transaction before this one's turn, or which transaction its release belongs
        to cannot be told (nothing is renewed for ever, nothing freed too early)."""
        self._stop_awaiting()
        with self.lease.mutex:
            self.pending = None
        logger.warning(
            "distlock: %r was not released after %s; it ends with its lease.", lock.name, why
        )
        lock._forget()

    def ended_unseen(self, lock: Owner) -> bool:
        """At each renewal: free the lock if the transaction its release waits for ended
        unseen (its thread died, a backend's commit() skipped the base class's), or give it
        up to its lease past MANUAL_COMMIT_WAIT, and return True (the lock is no longer
        renewed); else end a held lock's ties to transactions that ended unseen, and return
        False."""
        pending = self.pending
        if pending is not None and pending.answer is not None:
            if pending.answer[1].done():  # its done callback never ran (the loop closed)
                self.settle(lock, pending, pending.answer)
                return self.pending is None
            if not pending.ties:  # held for an answer, its transactions not told: nothing
                return False  # else to look at
        if pending is not None and pending.end_unseen():
            self.release_after(lock, set())
            return True
        waited = pending.give_up_manual() if pending is not None else None
        if waited is None:
            if pending is None and self.hold is not None:
                # Held, not released: a tie whose thread died (a transaction managed by hand,
                # never ended) ends, so that the registry no longer keeps this Lock (renewed
                # for ever) nor the dead thread's connection.
                self.hold.end_unseen()
            return False
        # The release waited past MANUAL_COMMIT_WAIT for a transaction managed by hand that
        # still looks open (committed through the raw driver, unseen): report the lock lost
        # and stop renewing it, so that its lease ends it.
        reason = (
            f"The release of {lock.name!r} waited {waited:.0f}s for a transaction managed "
            "by hand (set_autocommit(False)) that still looks open, longer than "
            "distlock.transactions.MANUAL_COMMIT_WAIT: a commit through the raw driver "
            "connection is not seen. "
            "The lock is no longer renewed and its lease ends it. End such transactions "
            "with connection.commit() or rollback(), or use transaction.atomic()."
        )
        if self.lease.mark_lost(lock, reason):
            lock._report_lost()
            lock._forget()
        return True

    def waiting_release(self, lock: Owner) -> Any:
        """Return the hold of this lock whose release waits for a transaction the running
        code is in (the transaction holds it, not the thread)."""
        # Nothing tied anywhere (the usual case): waiting_release() would say None at once.
        if not (_tied or _awaiting) or (self.pending is None and lock.token is not None):
            return None
        return waiting_release(self.key)

    def resume(self) -> bool:
        """Cancel the waiting release (this lock is taken back); return False when there is
        none, or it has begun already."""
        pending = self.pending
        if pending is None or not pending.resume():
            return False
        if pending.answer is not None:  # a release awaiting its answer, taken back
            pending.answer = None
            _forget_awaiting(self.key, pending)
            if not pending.enders:  # tied nowhere: its Lock referred to weakly again
                pending._owner = None
        with self.lease.mutex:
            self.pending = None
        return True

    def adopt(self, other: LockTies, lock: Owner) -> None:
        """Take over ``other``'s ties (``lock`` took back the hold of another Lock object)."""
        self.hold, other.hold = other.hold, None
        if self.hold is not None:
            self.hold.owner, self.hold.of = lock, self

    def drop(self) -> None:
        """The hold ended: forget its ties."""
        if self.hold is not None:
            self.hold.drop()
            self.hold = self.pending = None

    def warn_if_snapshot_predates(self, lock: Owner) -> None:
        """Warn when acquiring inside a transaction that reads from a snapshot: it may have
        been taken before the lock, and then rows read under the lock can be stale."""
        if not lock.hold_until_commit:
            return
        # _isolation_levels_set(), without its call while its answer is kept (every acquire):
        # no alias sets an isolation level (the usual case), nothing to warn of.
        seen, answer = _isolation_seen
        if not (answer if seen is connections.settings else _isolation_levels_set()):
            return
        aliases = snapshot_isolation_aliases()
        if aliases:
            warnings.warn(
                f"{lock.name!r} is acquired inside a transaction on {', '.join(aliases)} at "
                "REPEATABLE READ or SERIALIZABLE isolation: if the transaction read anything "
                "before the lock was granted, its snapshot predates the previous holder's "
                "commit and rows read now may be stale. Take the lock before the transaction "
                "begins (with lock: with atomic(): ...). See docs/transactions.md.",
                IsolationLevelWarning,
                stacklevel=3,
            )


def block_ended(conn: Any, number: int, depth: int, how: str) -> None:
    """Apply the end of ``conn``'s block at own ``depth`` in transaction ``number`` to the
    ties: END_ALL (its transaction ended), END (a savepoint rolled back: the ties made inside
    it end), MOVE_UP (a savepoint released: they move to the enclosing block), END_MANUAL (a
    transaction managed by hand ended: the ties outside every atomic block end) or COMMITTED
    (the outermost block committed: the ties of holds released before any on_commit hook
    end; the others end with the block, once the hooks have run). Ties to another
    transaction of the connection (the committed one, while an on_commit hook runs a
    transaction of its own) are left alone."""
    freed = []
    ref = _known(conn)
    with _guard:
        holds = _tied.get(ref) if ref is not None else None
        if not holds:
            return
        for hold in list(holds):
            for key in [key for key in hold.ties if key[0] is ref]:
                tied = hold.ties[key]
                if how == END_MANUAL:
                    ends = tied == 0
                elif key[1] != number:
                    continue
                elif how == COMMITTED:
                    ends = hold.waiting and hold.hooks_before.get(key) == 0
                else:
                    ends = how == END_ALL or (how == END and tied >= depth)
                if ends and hold._untie(key):
                    freed.append(hold)
                elif not ends and how == MOVE_UP and tied >= depth:
                    hold.ties[key] = depth - 1
    try:
        finish(freed)
    except BaseException:
        # KeyboardInterrupt, SystemExit, gevent's Timeout: it goes on, but no lock whose
        # ties ended is left behind, the one it cut short included (it may have come before
        # that lock's release began): their hold is done, so no tie's end would free them
        # and the renewer's look would renew them for ever. Left to their leases.
        for hold in freed:
            if hold.of.pending is hold:  # its release never began
                hold.of.abandon(hold.owner)
        raise


def finish(freed: list[Hold]) -> None:
    """Free the locks of ``freed`` (their last tie ended). A BaseException on the way goes
    on; block_ended leaves to their leases the locks not freed yet."""
    unreachable: set[str] = set()
    for hold in freed:
        try:
            hold.of.release_after(hold.owner, unreachable)
        except Exception:  # called from Django's commit or rollback: never raise into it
            logger.exception("distlock: releasing a lock after its transaction ended failed")


# --- seeing the ends: wrappers around Django's own methods -------------------------------
# The code's open outermost atomic blocks in this context, flat: (connection's weak reference,
# transaction number, reference, number, ...), the latest first. Weak: a copy of the context
# that outlives its thread (a task, a thread given a copy) must not keep that thread's
# connection, and its server session (idle in a transaction managed by hand), alive.
# async_to_sync copies them into the coroutine it runs, so an async lock there is tied to the
# calling thread's transaction. An entry stays after its block ended (removing it would cost
# every block's exit a look-up); the number tells a later transaction apart. Set anew at each
# BEGIN: a copy taken during one transaction (a task the coroutine left running) must never
# read as inside the next one.
# Flat, one tuple per BEGIN: every outermost block pays for what is made there.
_entered: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar(
    "distlock_entered", default=()
)
# The same, for a caller outside this module: empty (false) in the usual case, where
# anote_sync_thread has nothing to do. A builtin method: asking costs no Python frame, so the
# acquire and release paths ask it before they call anote_sync_thread (or its empty sync twin).
transactions_entered = _entered.get
_numbers = itertools.count(1)
# Whether autocommit was ever turned off by hand in this process (set_autocommit(False), or
# AUTOCOMMIT False): until then no connection needs a look for a manual transaction.
_manual_seen = False
_failures_logged: set[str] = set()


def _bookkeeping_failed(where: str) -> None:
    """Log, once per wrapper, that distlock's own bookkeeping raised: Django's method still
    runs (fail-safe), only the ties of locks to transactions may be missed."""
    if where not in _failures_logged:
        _failures_logged.add(where)
        logger.exception(
            "distlock: its bookkeeping in %s failed; Django's own method ran as without "
            "distlock, but locks may be released without waiting for their transaction. "
            "Run `manage.py check` (distlock.E010).",
            where,
        )


def _outermost(block: Any, conn: Any) -> bool:
    """Return True if ``block``, the innermost of ``conn``'s atomic blocks, is the code's
    own outermost one."""
    if block._from_testcase:
        return False
    blocks = conn.atomic_blocks
    return len(blocks) < 2 or blocks[-2]._from_testcase


def _pairs(entered: tuple[Any, ...]) -> Iterable[tuple[Any, int]]:
    """Return the (connection, number) entries of ``_entered``'s flat value (a connection
    collected meanwhile is left out)."""
    for ref, number in zip(entered[::2], entered[1::2], strict=True):
        conn = ref()
        if conn is not None:
            yield conn, number


def _note_transaction(conn: Any) -> None:
    """A transaction begins on ``conn``: number it, and note it in this context (first).
    (``weakref.ref`` without a callback gives the connection's one plain reference back
    each time: the fast path in set_autocommit compares it by identity.)"""
    number = conn.distlock_transaction = next(_numbers)
    _register(conn)
    others = [
        item
        for other, noted in _pairs(_entered.get())
        if other is not conn
        for item in (weakref.ref(other), noted)
    ]
    _entered.set((weakref.ref(conn), number, *others))


def _wrap_exit(exit_: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``Atomic.__exit__``. Django's shape (three arguments, what ``with`` passes)
    gets a wrapper of the same shape: a call through ``*args``/``**kwargs`` costs an atomic
    block more than the rest of the wrapper. Any other shape gets one that takes and passes
    on any arguments (and ``manage.py check`` says the shape changed)."""
    if _parameters(exit_) == EXIT_PARAMETERS:

        @functools.wraps(exit_)
        def __exit__(self: Any, exc_type: Any, exc_value: Any, traceback: Any) -> Any:
            if not _tied or (None not in _enders and _get_ident() not in _enders):
                return exit_(self, exc_type, exc_value, traceback)  # nothing tied here
            call = functools.partial(exit_, self, exc_type, exc_value, traceback)
            return _exit_watched(self, exc_type, call)

        return __exit__

    @functools.wraps(exit_)
    def any_exit(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _tied or (None not in _enders and _get_ident() not in _enders):
            return exit_(self, *args, **kwargs)
        exc_type = args[0] if args else kwargs.get("exc_type")
        return _exit_watched(self, exc_type, functools.partial(exit_, self, *args, **kwargs))

    return any_exit


def _exit_watched(block: Any, exc_type: Any, call: Callable[[], Any]) -> Any:
    """Run Django's ``__exit__`` (``call``) for a block of a connection with ties, and apply
    the block's end to them afterwards, whatever it raised. distlock's work, before and
    after, is in one guarded place each: whatever it raises is logged, and Django's method
    runs once, its result or exception the caller's. (distlock's wrapper twice in the
    chain, a library's wrapper between them, is harmless: each end applies once.)"""
    end = None
    try:
        conn: Any = connections[block.using or DEFAULT_DB_ALIAS]
        ref = _known(conn)
        if ref is not None and _tied.get(ref):
            end = _block_end(block, conn, exc_type)
            ending_before = getattr(conn, "distlock_ending", None)
            endings_before = getattr(conn, "distlock_endings", ())
            if end[3] == END_ALL and not block._from_testcase:
                # Django's COMMIT of this block ends the ties of holds released before any
                # on_commit hook (_commit_hooks_after_handing_on): handed on right after COMMIT.
                conn.distlock_ending = end[0]
                # Every transaction whose hooks are running on conn (a hook's own block's
                # hooks run inside the committed one's): all still open (Hold._open).
                conn.distlock_endings = (*endings_before, end[0])
    except Exception:
        _bookkeeping_failed("Atomic.__exit__")
        end = None
    if end is None:
        return call()
    try:
        return call()
    finally:
        try:
            conn.distlock_ending, conn.distlock_endings = ending_before, endings_before
            _apply_end(block, conn, end)
        except Exception:
            _bookkeeping_failed("Atomic.__exit__")


def _parameters(method: Any) -> tuple[tuple[str, Any], ...] | None:
    """Return ``method``'s parameters as (name, default) pairs, None if it has no signature."""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return None
    return tuple((parameter.name, parameter.default) for parameter in parameters)


def _block_end(block: Any, conn: Any, exc_type: Any) -> tuple[int, int, Any, str]:
    """Read, before Django's __exit__ runs, what the end of ``block`` is: (transaction
    number, own depth, savepoint id, how; how is END_ALL for the code's own outermost block,
    else decided after Django's work: END if it rolled back to its savepoint)."""
    number = getattr(conn, "distlock_transaction", None) or 0
    sid = conn.savepoint_ids[-1] if conn.savepoint_ids else None
    rolls_back = exc_type is not None or conn.needs_rollback
    how = END_ALL if block._from_testcase or _outermost(block, conn) else ""
    return number, own_depth(conn), (sid, rolls_back), how


def _apply_end(block: Any, conn: Any, end: tuple[int, int, Any, str]) -> None:
    number, depth, (sid, rolls_back), how = end
    if block._from_testcase:  # a TestCase's block: the code's own have all ended
        block_ended(conn, number, 0, END_ALL)
    elif how == END_ALL and not _in_manual_transaction(conn):
        block_ended(conn, number, depth, END_ALL)  # committed, rolled back, closed, killed
    elif rolls_back and sid is not None and not conn.needs_rollback:
        block_ended(conn, number, depth, END)  # rolled back to its savepoint
    else:
        block_ended(conn, number, depth, MOVE_UP)


def _wrap_ending(method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``commit``, ``rollback`` or ``close``: each ends a transaction managed by hand
    (wrapped once the process has one: _watch_manual_endings)."""

    @functools.wraps(method)
    def ending(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        finally:
            # Inside Atomic.__exit__ (the outermost block's COMMIT and the hooks after it)
            # only ties outside atomic blocks end here; the block's own end when it returns.
            try:
                if not self.in_atomic_block:
                    if _tied:
                        block_ended(self, 0, 0, END_MANUAL)
                    _renumber_manual(self)
            except Exception:
                _bookkeeping_failed(method.__qualname__)

    return ending


def _renumber_manual(conn: Any) -> None:
    """A transaction managed by hand ended (commit() or rollback()) and the next one begins
    at once, autocommit staying off: give it a number of its own. A context copied during
    the earlier one (a task that outlived its job) is then in no transaction of the next."""
    if conn.connection is not None and not conn.autocommit:
        _note_transaction(conn)


def _wrap_set_autocommit(method: Callable[..., Any]) -> Callable[..., Any]:
    """Turning autocommit off begins a transaction (the outermost atomic block's, or one
    managed by hand): it is numbered. Turning it back on after the outermost block's COMMIT
    runs the on_commit hooks: the locks released before any hook are freed first. Turning it
    on ends a transaction managed by hand. Django's shape gets a wrapper of the same shape
    (as for __exit__), any other one that takes and passes on any arguments."""
    if _parameters(method) == SET_AUTOCOMMIT_PARAMETERS:

        @functools.wraps(method)
        def set_autocommit(
            self: Any,
            autocommit: bool,
            force_begin_transaction_with_broken_autocommit: bool = False,
        ) -> Any:
            forced = force_begin_transaction_with_broken_autocommit
            if not autocommit:  # every outermost block's BEGIN: kept fast
                goes_on = not forced and _goes_on(self)  # (an atomic block's is forced)
                result = method(self, autocommit, forced)  # raises: nothing began
                if goes_on:  # off already: the same transaction goes on, its number kept
                    return result
                try:
                    # _began inlined for the usual: an atomic block's BEGIN (forced) on the
                    # connection this context noted last, one tuple made (_began moves
                    # another alias's connection first).
                    entered = _entered.get()
                    if forced and entered and entered[0]() is self:
                        number = self.distlock_transaction = next(_numbers)
                        if len(entered) == 2:
                            _entered.set((entered[0], number))
                        else:
                            _entered.set((entered[0], number, *entered[2:]))
                    else:
                        _began(self, forced)
                except Exception:
                    _bookkeeping_failed("set_autocommit")
                return result
            if not _tied:  # nothing of an end to see
                return method(self, autocommit, forced)
            try:  # (a look-up without a call: _known, inlined; a wrong ref only watches)
                tied = getattr(self, "distlock_ref", None) in _tied
            except Exception:  # cannot be told: watched, to be safe
                tied = True
            if not tied:  # ties elsewhere only (another thread's release waits)
                return method(self, autocommit, forced)
            call = functools.partial(method, self, autocommit, forced)
            return _set_autocommit_watched(self, autocommit, forced, call)

        return set_autocommit

    @functools.wraps(method)
    def any_set_autocommit(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = functools.partial(method, self, *args, **kwargs)
        try:
            autocommit = args[0] if args else kwargs["autocommit"]
            forced = args[1] if len(args) > 1 else kwargs.get(FORCE_BEGIN, False)
        except Exception:
            _bookkeeping_failed("set_autocommit")
            return call()
        return _set_autocommit_watched(self, autocommit, forced, call)

    return any_set_autocommit


def _set_autocommit_watched(
    conn: Any, autocommit: Any, forced: Any, call: Callable[[], Any]
) -> Any:
    """Run Django's ``set_autocommit`` (``call``) once, whatever distlock's work raises:
    that work, before and after, is in one guarded place each, and its failure is logged
    (the ties may then end with the block, or the locks be left to their leases).

    After the outermost block's COMMIT, Django's method is told to leave the on_commit
    hooks: the locks released before any hook are handed on first (their lock_released
    receivers run with autocommit on, as after the block), then the hooks run as Django
    runs them, their exception the caller's."""
    hand_on = goes_on = False
    try:
        if autocommit and _tied and _hooks_follow_a_commit(conn):
            conn.run_commit_hooks_on_set_autocommit_on = False
            hand_on = True
        goes_on = not autocommit and not forced and _goes_on(conn)
    except Exception:
        _bookkeeping_failed("set_autocommit")
    try:
        result = call()
    except BaseException:  # nothing began or ended
        if hand_on:
            conn.run_commit_hooks_on_set_autocommit_on = True  # as Django leaves it
        raise
    hooks = None
    try:
        if hand_on:
            # The committed transaction's hooks are out of reach while the locks are handed
            # on: a lock_released receiver's own atomic block would run them at its COMMIT
            # (and swallow their exception) or drop them at its ROLLBACK.
            hooks, conn.run_on_commit = conn.run_on_commit, []
            _commit_hooks_after_handing_on(conn)
        elif not autocommit and not goes_on:
            _began(conn, forced)
        elif _tied and not conn.in_atomic_block:
            block_ended(conn, 0, 0, END_MANUAL)  # a transaction managed by hand ended
    except Exception:
        _bookkeeping_failed("set_autocommit")
    finally:
        if hand_on:
            if hooks is not None:  # back before any a receiver left (none, normally)
                conn.run_on_commit = hooks + conn.run_on_commit
            conn.run_and_clear_commit_hooks()  # Django's own work, never guarded
    return result


def _hooks_follow_a_commit(conn: Any) -> bool:
    """Return True if the code's outermost block on ``conn`` committed (its __exit__ marked
    the connection) and Django is about to turn autocommit on and run its on_commit hooks."""
    if getattr(conn, "distlock_ending", None) is None:
        return False
    return bool(conn.run_commit_hooks_on_set_autocommit_on)


def _commit_hooks_after_handing_on(conn: Any) -> None:
    """Autocommit is on again after the outermost block's COMMIT, its on_commit hooks not
    run yet: hand on the locks released before any hook."""
    block_ended(conn, conn.distlock_ending, 0, COMMITTED)


def _goes_on(conn: Any) -> bool:
    """Return True if turning autocommit off on ``conn`` (by hand) begins nothing: it is off
    already, on an open connection, outside any block (a helper making sure, AUTOCOMMIT
    False). Django's call then does nothing to the database: the transaction managed by hand
    goes on, uncommitted, and keeps its number, so that the releases waiting for it still
    wait (numbered anew, it looked ended to the renewer, which freed them before the
    commit()). Asked before Django's method runs; never raises (fail-safe). The driver's
    connection must be the one turned off by hand (_began notes it): Django's connect()
    turns autocommit off on a new one while ``conn.autocommit`` still says the old one's."""
    try:
        return (
            _manual_seen
            and _in_manual_transaction(conn)
            and getattr(conn, "distlock_raw", None) is conn.connection
        )
    except Exception:
        return False


def _began(conn: Any, forced: Any) -> None:
    """Autocommit was turned off: a transaction began on ``conn``. Number it, and note it in
    this context (the set_autocommit wrapper does both itself in the usual case)."""
    global _manual_seen
    if not forced and not _manual_seen:  # by hand (Atomic.__enter__ forces a BEGIN)
        _manual_seen = True
        _watch_manual_endings(type(conn))
    if not forced:
        conn.distlock_raw = conn.connection  # the driver's connection it began on (_goes_on)
    _note_transaction(conn)


FORCE_BEGIN = "force_begin_transaction_with_broken_autocommit"
# The shapes of Django's methods that get a wrapper of the same shape (_parameters).
EXIT_PARAMETERS = (
    ("self", inspect.Parameter.empty),
    ("exc_type", inspect.Parameter.empty),
    ("exc_value", inspect.Parameter.empty),
    ("traceback", inspect.Parameter.empty),
)
SET_AUTOCOMMIT_PARAMETERS = (
    ("self", inspect.Parameter.empty),
    ("autocommit", inspect.Parameter.empty),
    (FORCE_BEGIN, False),
)
# What is wrapped: (owner, attribute name, wrapper), at import. docs/transactions.md lists
# the same, and checks.py checks that each is there, takes what the wrapper reads, and is
# still wrapped. MANUAL_ENDINGS are wrapped too, once the process turns autocommit off by
# hand (until then no transaction is managed by hand: nothing to see end there).
TARGETS: tuple[tuple[type, str, Callable[..., Any]], ...] = (
    (transaction.Atomic, "__exit__", _wrap_exit),
    (BaseDatabaseWrapper, "set_autocommit", _wrap_set_autocommit),
)
MANUAL_ENDINGS = ("commit", "rollback", "close")
_wrapping = threading.Lock()  # one thread wraps at a time (never under _guard's holders)


def _wrap(cls: type, name: str, wrap: Callable[..., Any]) -> None:
    """Wrap ``cls.name`` unless it is distlock's wrapper already (idempotent per target; a
    wrapper another library put around Django's method after distlock's is wrapped too)."""
    method = cls.__dict__.get(name, getattr(cls, name))
    if _watched(method):
        return
    wrapped = wrap(method)
    wrapped.distlock_watches = True
    setattr(cls, name, wrapped)


def _watched(method: Any) -> bool:
    """Return True if distlock's wrapper is ``method`` or inside it (a library's wrapper of
    it made with functools.wraps, as Sentry's and cacheops' are)."""
    seen = 0
    while method is not None and seen < 20:
        if getattr(method, "distlock_watches", False):
            return True
        method, seen = getattr(method, "__wrapped__", None), seen + 1
    return False


def _watch_manual_endings(cls: type) -> None:
    """A transaction managed by hand on a connection of ``cls``: wrap ``commit``,
    ``rollback`` and ``close``, the base class's and each override of them on the way to
    ``cls`` (a backend whose commit() skips BaseDatabaseWrapper's would end it unseen)."""
    owners = [klass for klass in cls.__mro__ if issubclass(klass, BaseDatabaseWrapper)]
    for name in MANUAL_ENDINGS:
        for owner in owners:
            if name in owner.__dict__:
                try:
                    with _wrapping:
                        _wrap(owner, name, _wrap_ending)
                except Exception:
                    _bookkeeping_failed(f"wrapping {owner.__qualname__}.{name}")


def install() -> None:
    """Watch the ends of atomic blocks and of transactions managed by hand. Idempotent for
    every target: run again (DistlockConfig.ready() does), it wraps only what is not
    wrapped, such as a method another library replaced with its own wrapper meanwhile."""
    with _wrapping:
        for cls, name, wrap in TARGETS:
            _wrap(cls, name, wrap)
    _note_open_transactions()


def _note_open_transactions() -> None:
    """Number this thread's transactions already open (distlock imported inside one): their
    end is not seen by the wrappers, but the renewer's look finds it."""
    try:
        for conn in connections.all(initialized_only=True):
            if conn.in_atomic_block and getattr(conn, "distlock_transaction", None) is None:
                _note_transaction(conn)
    except Exception:  # no settings yet, or no database configured: nothing is open
        pass


# --- what the wrappers rely on (checks.py reports it at `manage.py check`) ---------------
# A connection's attributes that the bookkeeping reads (the wrapped methods' shapes are
# EXIT_PARAMETERS and SET_AUTOCOMMIT_PARAMETERS).
CONNECTION_ATTRIBUTES = (
    "in_atomic_block",
    "atomic_blocks",
    "savepoint_ids",
    "needs_rollback",
    "run_on_commit",
    "autocommit",
    "connection",
    "closed_in_transaction",
    "run_commit_hooks_on_set_autocommit_on",
    "run_and_clear_commit_hooks",
    "allow_thread_sharing",
    "_thread_ident",
)


def django_problems() -> list[str]:
    """Return what is missing or changed in the Django internals the wrappers rely on (this
    Django's, as installed): each problem means locks may be released before their
    transaction ends (Django itself is never affected: every wrapper is fail-safe)."""
    problems = []
    targets = [(cls, name) for cls, name, _ in TARGETS]
    targets += [(BaseDatabaseWrapper, name) for name in MANUAL_ENDINGS]
    for cls, name in targets:
        method = getattr(cls, name, None)
        if not callable(method):
            problems.append(f"{cls.__qualname__}.{name} is missing.")
        elif name in MANUAL_ENDINGS and not _manual_seen:
            pass  # wrapped once a transaction is managed by hand
        elif not _watched(method):
            problems.append(
                f"{cls.__qualname__}.{name} was replaced after distlock wrapped it (by "
                "another library, after DistlockConfig.ready())."
            )
    for cls, name, expected in (
        (transaction.Atomic, "__exit__", EXIT_PARAMETERS),
        (BaseDatabaseWrapper, "set_autocommit", SET_AUTOCOMMIT_PARAMETERS),
    ):
        found = _parameters(inspect.unwrap(getattr(cls, name, None) or (lambda: None)))
        if found != expected:
            names = tuple(name for name, _default in found or ())
            problems.append(
                f"{cls.__qualname__}.{name} takes {names}, not the shape distlock knows."
            )
    block = transaction.atomic()  # made, not entered
    missing = [name for name in ("using", "_from_testcase") if not hasattr(block, name)]
    if missing:
        problems.append(f"an Atomic block has no {', '.join(missing)}.")
    for conn in connections.all():
        missing = [name for name in CONNECTION_ATTRIBUTES if not hasattr(conn, name)]
        if missing:
            problems.append(f"connections[{conn.alias!r}] has no {', '.join(missing)}.")
    return problems + _asgiref_problems()


def _asgiref_problems() -> list[str]:
    """Return what is missing in the asgiref internals that tell a task which outlived its
    async_to_sync call (_returned, _calls): read with defaults, their absence would count
    such a task in the request's transaction again. (``_old_executor``, the chain of nested
    calls, is newer than asgiref 3.8.1, which Django 5.2 allows: its absence is not one.)"""
    from asgiref.current_thread_executor import CurrentThreadExecutor

    problems = []
    if not hasattr(AsyncToSync, "executors"):
        problems.append("asgiref's AsyncToSync has no executors.")
    try:
        try:
            executor = CurrentThreadExecutor(None)  # type: ignore[call-arg,unused-ignore]
        except TypeError:  # asgiref 3.8: no argument
            executor = CurrentThreadExecutor()  # type: ignore[call-arg,unused-ignore]
    except Exception as exc:
        return [*problems, f"asgiref's CurrentThreadExecutor cannot be made ({exc})."]
    for attribute in ("_broken", "_work_thread"):
        if not hasattr(executor, attribute):
            problems.append(f"asgiref's CurrentThreadExecutor has no {attribute}.")
    return problems


# --- the same transaction asking again ---------------------------------------------------
def waiting_release(key: Hashable) -> Any:
    """Return the Lock named by ``key`` whose release waits for a transaction the running
    code is in (the same number: never another request's, task's or job's that ran on this
    thread), or None. async_to_sync runs a coroutine in another thread, inside the caller's
    transaction: a release there, then a take-back here, or the reverse, must not wait for
    itself. An on_commit hook of that transaction, registered before the release, is still
    part of its end (the lock is handed on once those hooks have run): it takes the release
    back too, instead of waiting for itself. Cheap: the holds tied to those connections
    only. A release awaiting its answer (settle_on_answer) is the running code's to take
    back when its own task made it, or when it names only transactions the code is in."""
    if _awaiting:
        own = _awaiting_here(key)
        if own is not None:
            return own
    if not _tied:
        return None
    places = transactions_here(taking_back=True) + _committing_here()
    # A hold tied to several transactions (a pool thread's own block, and the request's it
    # runs in a copy of the context of) is taken back only by code in every one of them:
    # code in one alone would get the lock before the other's COMMIT.
    here = {(_known(conn), number) for conn, number, _depth in places}
    for ref, number in here:
        with _guard:  # another thread may end a tie meanwhile
            holds = [
                hold
                for hold in _tied.get(ref, ())  # type: ignore[arg-type]
                if (ref, number) in hold.ties and hold.ties.keys() <= here
            ]
        for hold in holds:
            lock = hold.owner
            if lock is None:  # untied meanwhile, its Lock dropped
                continue
            if hold.waiting and hold.of.pending is hold and hold.of.key == key:
                return lock
    return None


def _committing_here() -> list[Place]:
    """Return the transactions of the running code's connections whose on_commit hooks are
    running (the running code may be one of them)."""
    found = []
    for conn, entered in _pairs(_entered.get()):
        number = _ending_covers(conn, entered)
        # Nor is sync code of another thread, on a connection of its own, nor a coroutine
        # whose question went unanswered (_runs_in: this is for taking a release back).
        if number is not None and _runs_in(conn, taking_back=True):
            found.append((conn, number, 0))
    return found


def _ending_covers(conn: Any, entered: int) -> int | None:
    """Return the number of ``conn``'s transaction whose on_commit hooks are running, if code
    that entered transaction ``entered`` is part of that end: the committing transaction's
    code, or a hook's own block begun after it (numbers grow). A context copied in an earlier
    transaction of the connection (a task that outlived its job) is not."""
    number: int | None = getattr(conn, "distlock_ending", None)
    return number if number is not None and entered >= number else None


def held_in_transactions_here(key: Hashable) -> bool:
    """Return True if a hold of the lock named by ``key`` (held, not released) is tied to a
    transaction the running code is in: another task of the same transaction (asyncio.gather
    under async_to_sync) holds it, and its release will wait for the COMMIT, which waits for
    this code: so this code looks for that release often instead of blocking on the server.
    (Only code that may take that release back: an unanswered coroutine waits for it.)"""
    if not _tied:
        return False
    places = transactions_here(taking_back=True)
    for conn, number, _depth in places:
        ref = _known(conn)
        with _guard:
            holds = [hold for hold in _tied.get(ref, ()) if (ref, number) in hold.ties]  # type: ignore[arg-type]
        owners = [(hold.owner, hold) for hold in holds]  # kept while their ties are read
        if any(owner is not None and hold.of.key == key for owner, hold in owners):
            return True
    return False


# Installed when distlock is imported, not only in DistlockConfig.ready(): a project that locks
# without listing the app must still see its transactions end.
install()
