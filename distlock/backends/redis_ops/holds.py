"""Lock operations on one Redis server (RedisBackend, DjangoRedisBackend), each read top to
bottom: the keys and arguments of its script, the steps, and what the reply means.

Each operation is a generator of steps (see .steps), run by the backend on its sync client
(``run``) or its async one (``arun``); it takes the Scope. A ``..._call`` builds one script's
call (an Eval) from the alias's KeyLayout, in every module of redis_ops: ``acquire_call(layout,
request, ...)`` here, in .shared, .semaphores and .grants, followed by what the script needs
beyond the Request (``waited`` in the lock's queue, Redlock's ``grant``; a semaphore nothing).
The calls and replies that Redlock's nodes share with one server (extend, inspect) are here
too; Redlock's own scripts are in .grants.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from ...exceptions import BackendUnavailable
from ...info import LockInfo, WaiterInfo
from ...keys import ABOUT_WAITERS, KeyLayout, validate_name
from ...tokens import NON_FAIR_MARK
from ..base import Attempt
from ..operations import Request
from .scripts import Script, load
from .steps import ENCODED_FLAG, Confirmed, Eval, Pop, PopThenEval, Scope, Steps, flag, text

ACQUIRE = load("acquire")
RELEASE = load("release")
LEAVE_QUEUE = load("leave_queue")
EXTEND = load("extend")
INSPECT = load("inspect")
WAITERS = load("waiters")
# Waiters listed at most by waiters() (an operator's view, not an export).
MAX_WAITERS_LISTED = 1000


# --- the calls of one kind ---------------------------------------------------------------
class KindCalls(NamedTuple):
    """The script calls of one kind held on the lock itself: the exclusive kind's (EXCLUSIVE,
    below) or the shared kind's (.shared). Both kinds wait in the lock's one queue and read
    their replies alike, so the generators below serve both, given the kind's calls."""

    acquire_call: Callable[[KeyLayout, Request, bool], Eval]  # (layout, request, waited)
    release_call: Callable[[KeyLayout, str, str, bool], Eval]  # (layout, name, token, every)
    leave_call: Callable[[KeyLayout, str, str], Eval]  # (layout, name, token)
    # The list a release pushes a waiter's turn to (encoded or not, as redis-py takes keys).
    wake: Callable[[KeyLayout, str, str], str | bytes]
    # The extend script (extend.lua, shared_extend.lua: one ARGV) and its keys for a name.
    extend_script: Script
    extend_keys: Callable[[KeyLayout, str], list[str]]


# --- acquire ------------------------------------------------------------------------------
def try_acquire(
    scope: Scope, calls: KindCalls, request: Request, waited: bool = False
) -> Steps[Attempt]:
    """Take the lock (a hold of the kind ``calls`` runs) for ``request.token``, or queue it for
    ``request.patience_ms``. ``waited``: the token may be queued already (it waited), so it
    leaves the queue once it holds."""
    call = calls.acquire_call(scope.layout, request, waited)
    if not scope.wait_replicas:
        return attempt_from((yield call))
    reply, confirmed = yield Confirmed(call)
    return (yield from replicated(scope, calls, request, reply, confirmed))


def acquire_call(layout: KeyLayout, request: Request, waited: bool = False) -> Eval:
    """``waited`` is KindCalls' (the shared kind sends it); acquire.lua tells by itself
    whether the token may be queued, and defaults the grace (HANDOFF_GRACE_MS)."""
    # Idempotent: sent again, it tells the token that already holds the lock so. The name goes
    # as a str, which the client encodes as it does in every other call (its OPTIONS may set
    # an encoding): the index entry a renewal or a listing reads is then the same one. So
    # does the metadata (JSON, not always ASCII). The token and the numbers are ASCII in any
    # encoding: they go encoded, which redis-py passes on as they are (every acquire).
    return Eval(
        ACQUIRE,
        layout.encoded_keys_for(request.name).acquire,  # lock, fence, waiters, live, index
        [
            request.token.encode(),
            b"%d" % request.ttl_ms,
            request.meta,
            request.name,
            b"%d" % request.patience_ms,
        ],
        True,  # idempotent (positional: a keyword cost every acquire a slower call)
    )


def acquire_when_free(
    scope: Scope, calls: KindCalls, request: Request, timeout: float
) -> Steps[Attempt]:
    """Block on this waiter's own list until a release hands it the lock (or ``timeout``
    passes), and run the acquire right after, in the same round trip: the server runs the
    pipelined script as soon as the BLPOP returns, so a waiter handed the lock (or let in
    with a batch of readers) learns it holds it from the reply that woke it."""
    name, token = request.name, request.token
    wake = calls.wake(scope.layout, name, token)
    if token.startswith(NON_FAIR_MARK):
        # Non-fair: the release left the lock free, not reserved. The acquire goes after the
        # wake-up, not pipelined behind it, so that a process already running (the releaser
        # looping, a newcomer) takes the lock meanwhile instead of it waiting, held, for this
        # waiter to be scheduled: a round trip more per handoff, for throughput.
        yield Pop(wake, timeout)
        sent = time.monotonic()
        attempt = yield from try_acquire(scope, calls, request, waited=True)
        return attempt._replace(sent=sent)
    call = calls.acquire_call(scope.layout, request, True)
    sent = time.monotonic()
    replies = yield PopThenEval(wake, timeout, call, confirm=bool(scope.wait_replicas))
    return (yield from after_turn(scope, calls, request, replies, sent))


def after_turn(
    scope: Scope, calls: KindCalls, request: Request, replies: list[Any] | None, sent: float
) -> Steps[Attempt]:
    """Return the attempt in the ``replies`` of a fair waiter's PopThenEval (sent at
    ``sent``), after the steps their rare outcomes need (ScriptedOnLock.acquire_when_free
    reads the usual one itself)."""
    if replies is None:
        # The reply came later than the socket timeout (a loaded server or client): its
        # acquire may have run. Give back what it may have taken, which also tells whether
        # the server answers at all (BackendUnavailable if not), and report no turn.
        yield calls.release_call(scope.layout, request.name, request.token, False)
        return Attempt(False)
    if any(isinstance(reply, Exception) for reply in replies):
        # The server forgot the script, or the slot moved: ask again the usual way (the lock
        # a release reserved for this waiter waits for it for HANDOFF_GRACE_MS).
        del replies  # no cycle through this frame (see detached.py)
        attempt = yield from try_acquire(scope, calls, request, waited=True)
    elif scope.wait_replicas:
        attempt = yield from replicated(scope, calls, request, replies[1], int(replies[2]))
    else:
        attempt = attempt_from(replies[1])
    return attempt._replace(sent=sent)


def replicated(
    scope: Scope, calls: KindCalls, request: Request, reply: Any, confirmed: int
) -> Steps[Attempt]:
    """Return the attempt in an acquire's ``reply`` if enough replicas confirmed it; else give
    back what it took and raise BackendUnavailable (fail closed: a failover could lose it)."""
    attempt = attempt_from(reply)
    if attempt.acquired and confirmed < scope.wait_replicas:
        with contextlib.suppress(BackendUnavailable):
            yield calls.release_call(scope.layout, request.name, request.token, False)
        raise scope.unconfirmed(request.name, confirmed)
    return attempt


def took_lock(reply: Any) -> bool:
    """Whether an acquire.lua or grant_acquire.lua reply says the lock was taken: only then
    is it a string, "FENCE ACQUIRED_MS" (an error or a table otherwise)."""
    return isinstance(reply, (bytes, str))


def attempt_from(reply: Any, sent: float = 0.0) -> Attempt:
    """Return the Attempt in an acquire.lua, shared_acquire.lua or grant_acquire.lua reply
    (to a request sent at ``sent``, when known: a waiter's turn; positional arguments, and
    no _replace() after: both cost a waiter's every turn)."""
    if isinstance(reply, (bytes, str)):  # took_lock(), inlined: the hot path
        fence, acquired = reply.split()
        # tuple.__new__, as the NamedTuple's own __new__ calls it, without that Python frame
        # and its argument binding (every acquire: 1,700 instructions of 4,000).
        return tuple.__new__(Attempt, (True, int(fence), int(acquired), 0, -1, 0, sent))
    if len(reply) > 2:  # one server: the place in the queue and the server's clock
        return Attempt(False, 0, 0, int(reply[1]), int(reply[2]), int(reply[3]), sent)
    return Attempt(False, 0, 0, int(reply[1]), -1, 0, sent)


def leave(scope: Scope, calls: KindCalls, name: str, token: str) -> Steps[None]:
    """Stop waiting; a lock handed to ``token`` meanwhile goes on to the next waiter."""
    yield calls.leave_call(scope.layout, name, token)


def leave_call(layout: KeyLayout, name: str, token: str) -> Eval:
    k = layout.keys_for(name)
    # The grace left out: leave_queue.lua defaults it (HANDOFF_GRACE_MS).
    return Eval(LEAVE_QUEUE, [k.lock, k.waiters, k.live], [token], idempotent=True)


def wake(layout: KeyLayout, name: str, token: str) -> bytes:
    # What hand_over.lua pushes to: "<waiters>:<token>", encoded as the acquire's keys are
    # (redis-py passes bytes on as they are: one encoder call less on every wait).
    return layout.encoded_keys_for(name).acquire[2] + b":" + token.encode()


# --- release, extend ----------------------------------------------------------------------
def release(scope: Scope, calls: KindCalls, name: str, token: str, every_level: bool) -> Steps[int]:
    """Return 0 if ``token`` does not hold the lock (of ``calls``' kind), 1 if released (and handed
    on: to the longest waiter, or by the last shared holder out), 2 if one reentrant level
    was."""
    return int((yield calls.release_call(scope.layout, name, token, every_level)))


def release_call(layout: KeyLayout, name: str, token: str, every_level: bool) -> Eval:
    # Never sent twice: a release whose reply was lost, sent again, would answer "not held".
    # The grace left out: release.lua defaults it (HANDOFF_GRACE_MS).
    return Eval(
        RELEASE,
        layout.encoded_keys_for(name).release,  # lock, waiters, live, index
        [token.encode(), name, ENCODED_FLAG[every_level]],  # the name as a str: see acquire_call
    )


def extend(
    scope: Scope, calls: KindCalls, name: str, token: str, ttl_ms: int, renewal: bool, reenter: bool
) -> Steps[bool]:
    """Return True if the lease of ``token`` was set to ``ttl_ms`` from now, False if it does
    not hold the lock; RenewalLimitReached for a renewal past MAX_RENEWALS. Confirmed by
    WAIT_REPLICAS replicas when the alias asks for it."""
    layout, most = scope.layout, scope.max_renewals
    call = extend_call(layout, name, token, ttl_ms, renewal, reenter, most, calls)
    if not scope.wait_replicas:
        return extended(scope, name, (yield call))
    reply, confirmed = yield Confirmed(call)
    # An unconfirmed extension leaves the holder its earlier, replicated lease: the lock
    # keeps its token and renewals retry while that lease lasts.
    if reply == 1 and confirmed < scope.wait_replicas:
        raise scope.unconfirmed(name, confirmed)
    return extended(scope, name, reply)


def extend_call(
    layout: KeyLayout,
    name: str,
    token: str,
    ttl_ms: int,
    renewal: bool,
    reenter: bool,
    max_renewals: int | None,
    calls: KindCalls | None = None,
) -> Eval:
    """The call of the extend script of ``calls``' kind (the exclusive kind's when None)."""
    calls = calls or EXCLUSIVE
    # Sent twice, a renewal would count twice against MAX_RENEWALS at worst; a reentrant
    # acquire would add a level nobody releases, so it is never sent twice.
    return Eval(
        calls.extend_script,
        calls.extend_keys(layout, name),
        [
            token,
            ttl_ms,
            name,
            flag(renewal),
            flag(reenter),
            "" if max_renewals is None else max_renewals,
        ],
        idempotent=not reenter,
    )


def extend_keys(layout: KeyLayout, name: str) -> list[str]:
    k = layout.keys_for(name)
    return [k.lock, k.index]


def extended(scope: Scope, name: str, outcome: Any) -> bool:
    if outcome == 2:
        raise scope.renewal_limit_reached(name)
    return outcome == 1


EXCLUSIVE = KindCalls(acquire_call, release_call, leave_call, wake, EXTEND, extend_keys)


# --- introspection ------------------------------------------------------------------------
# (Who holds a lock, of either kind: shared.info, which reads inspect.lua's reply.)
def inspect_call(layout: KeyLayout, name: str, redlock: bool = False) -> Eval:
    k = layout.keys_for(name)
    # The zset that says how long each waiter stays registered: Redlock's nodes keep one.
    return Eval(INSPECT, [k.lock, k.waiters if redlock else k.live], [], idempotent=True)


def lock_info_from(alias: str, name: str, reply: list[Any]) -> LockInfo | None:
    """Return the LockInfo in inspect.lua's reply, None when the lock is not held (or held
    shared: see shared.info)."""
    if len(reply) < 3:
        return None
    value, pttl, now, waiters = reply
    token, fence, acquired, renewals, depth, meta = text(value).split(" ", 5)
    return LockInfo.from_stored(
        name=name,
        token=token,
        fence=int(fence),
        meta_json=meta,
        acquired_ms=int(acquired),
        now_ms=int(now),
        pttl_ms=int(pttl),
        renewals=int(renewals),
        depth=int(depth),
        alias=alias,
        waiters=int(waiters),
    )


def waiters(scope: Scope, name: str) -> Steps[list[WaiterInfo]]:
    """Return who waits for ``name``, first come first (at most MAX_WAITERS_LISTED)."""
    validate_name(name)
    k = scope.layout.keys_for(name)
    reply = yield Eval(
        WAITERS,
        [k.waiters, k.live, k.waiters + ABOUT_WAITERS],
        [MAX_WAITERS_LISTED],
        idempotent=True,
    )
    now, *entries = reply
    return [
        WaiterInfo.from_stored(
            meta_json=text(entries[i + 1]), arrival_us=int(entries[i]), now_ms=int(now)
        )
        for i in range(0, len(entries), 2)
    ]
