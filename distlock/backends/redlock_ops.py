"""Redlock's operations, each read top to bottom: the script calls it sends to every node
(built by redis_ops.grants and redis_ops.holds), the steps, and how the nodes' replies make a
majority's outcome.

Each operation is a generator of steps (Ask, OnNode, Sleep), as an operation on one server
is (redis_ops.holds): it takes the backend, as a Majority, and RedlockBackend.run/arun drive
it (redis_ops.steps.drive/adrive), asking the nodes at once (redis_ops.fanout). A lock is
held when a majority granted it while its validity, ``ttl - elapsed - drift`` with ``drift =
ttl x drift_factor + DRIFT_MS``, is still positive.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from ..exceptions import BackendUnavailable, RenewalLimitReached
from ..info import LockInfo
from ..keys import KeyLayout, validate_name
from .base import DRIFT_MS, Attempt, HeldEntry
from .operations import Request
from .redis_ops import grants, holds, listing
from .redis_ops.fanout import Results, Skipped
from .redis_ops.steps import Eval, Steps

# A waiter whose grant got some nodes but not a majority tries again this many times, after
# GRANT_RETRY_DELAY x 1, 2, ... seconds (the release that woke it is still reaching nodes).
GRANT_RETRIES = 3
GRANT_RETRY_DELAY = 0.002
# After an attempt that got some nodes but no majority (contenders split the nodes), wait
# a random time in this range (ms) before trying again, so that they do not split again.
JITTER_MS = (5.0, 50.0)


# --- the steps ------------------------------------------------------------------------------
class Ask(NamedTuple):
    """A step of a Redlock operation: run ``calls`` on every node that is up (of ``only``),
    at once, until ``decided`` says the replies so far settle the outcome. Reply: per node,
    the list of its replies or the exception that stands for them."""

    calls: list[Eval]
    decided: Callable[[Results], bool]
    only: list[int] | None = None


class OnNode(NamedTuple):
    """A step of a Redlock operation: run the operation ``steps`` on node ``position``
    alone. Reply: its outcome."""

    position: int
    steps: Steps[Any]


class Sleep(NamedTuple):
    """A step of a Redlock operation: wait ``seconds``."""

    seconds: float


class Majority(Protocol):
    """What an operation reads of the RedlockBackend it runs for."""

    alias: str
    layout: KeyLayout
    max_renewals: int | None
    quorum: int  # a majority of the nodes
    drift_factor: float
    votes: Votes  # built once with the nodes (Votes.count)

    @property
    def nodes(self) -> Sequence[object]: ...

    def home(self) -> int: ...

    def leave_out(self, position: int) -> None: ...

    def renewal_limit_reached(self, name: str) -> RenewalLimitReached: ...

    def unavailable(
        self, action: str, name: str, agreed: int, results: Results
    ) -> BackendUnavailable: ...


# --- acquire --------------------------------------------------------------------------------
# A waiter handed the lock is woken by the first node the release reached; the other nodes
# may still show the releasing holder for a moment. A grant that got some nodes but not a
# majority is so tried again, shortly, before the waiter waits again.
def try_acquire(backend: Majority, request: Request, grant: str | None) -> Steps[Attempt]:
    """Take the lock on a majority of the nodes (grant_acquire.lua on each), presenting
    ``grant`` if a release handed it one; take back what a failed attempt was granted."""
    name, token, ttl_ms = request.name, request.token, request.ttl_ms
    call = grants.acquire_call(backend.layout, request, grant)
    decided = backend.votes.acquired
    for retry in range(GRANT_RETRIES + 1):
        started = time.monotonic()
        results = yield Ask([call], decided)
        attempt, undo, error = judge_acquire(backend, name, ttl_ms, results, started)
        if undo:
            # Queue where the lock was taken back, as the refusing nodes queued it; not
            # when the attempt fails as a whole (nobody will wait).
            back = grants.undo_call(
                backend.layout, name, token, 0 if error else request.patience_ms
            )
            yield Ask([back], always, undo)
        if error is not None:
            try:
                raise error
            finally:
                del error  # no cycle through this frame (see redis_ops/detached.py)
        if attempt.acquired or not (grant and _granted_anywhere(results)):
            break
        yield Sleep(GRANT_RETRY_DELAY * (retry + 1))
    return attempt


def judge_acquire(
    backend: Majority, name: str, ttl_ms: int, results: Results, started: float
) -> tuple[Attempt, list[int], BackendUnavailable | None]:
    """Return the attempt's outcome, the nodes to take the lock back from, and the error
    to raise instead of an outcome."""
    quorum = backend.quorum
    answered = [(i, holds.took_lock(r[0])) for i, r in enumerate(results) if isinstance(r, list)]
    granted = [i for i, took in answered if took]
    refused = [i for i, took in answered if not took]
    unanswered = [
        i for i, r in enumerate(results) if isinstance(r, Exception) and not isinstance(r, Skipped)
    ]
    validity = ttl_ms - (time.monotonic() - started) * 1000 - drift_ms(backend, ttl_ms)
    if len(granted) >= quorum and validity > 0:
        taken = [holds.attempt_from(results[i][0]) for i in granted]
        return (
            Attempt(
                True,
                fencing_token=max(grant.fencing_token for grant in taken),
                acquired_ms=min(grant.acquired_ms for grant in taken),
            ),
            [],
            None,
        )
    if len(granted) + len(refused) < quorum:
        # No majority answered: nothing can be known. (The Lock then releases on every
        # node, which also covers grants whose reply was lost.)
        error = backend.unavailable("acquire", name, len(granted), results)
        return Attempt(False), granted, error
    # Not held: take back every grant, including any whose reply was lost.
    undo = granted + unanswered
    if granted:
        # Contenders split the nodes, or the lease ran out: retry after a jitter.
        return Attempt(False, holder_pttl_ms=round(random.uniform(*JITTER_MS))), undo, None
    # Held: it can be free once a majority of the refusing nodes' leases ended.
    leases = sorted(max(int(results[i][0][1]), 1) for i in refused)
    return Attempt(False, holder_pttl_ms=leases[quorum - 1]), undo, None


def turn(backend: Majority, name: str, timeout: float) -> Steps[str | None]:
    """Block on the home node until a release pushes a grant (grants.wait_for_grant)."""
    home = backend.home()
    try:
        return (yield OnNode(home, grants.wait_for_grant(backend.layout, name, timeout)))
    except BackendUnavailable:
        backend.leave_out(home)
        return None  # the next attempt tells whether a majority is still reachable


def leave(backend: Majority, name: str, token: str) -> Steps[None]:
    """Stop waiting, on every node (grant_leave_queue.lua)."""
    yield Ask([grants.leave_call(backend.layout, name, token)], always)


# --- release and extend ---------------------------------------------------------------------
def release(backend: Majority, name: str, token: str, every_level: bool) -> Steps[int]:
    """Release on every node (grant_release.lua); return as holds.release does."""
    # One grant, valid on every node; and the nodes the lock was not held on (a bare
    # majority held it) hand it to the waiters too, so no newcomer can take them first.
    # (A force release does not know the holder's token, hence its grant: it does not.)
    call = grants.release_call(
        backend.layout, name, token, every_level, suffix=os.urandom(8).hex(), vacant=bool(token)
    )
    return judge_release(backend, name, (yield Ask([call], backend.votes.released)))


def judge_release(backend: Majority, name: str, results: Results) -> int:
    quorum = backend.quorum
    outcomes = [int(r[0]) for r in results if isinstance(r, list)]
    released = sum(outcome in (1, 2) for outcome in outcomes)
    if released >= quorum:
        return 2 if outcomes.count(2) >= quorum else 1
    failed = sum(isinstance(r, Exception) for r in results)
    if released + failed >= quorum:
        # Maybe held still: raise, so that the Lock keeps its token and can retry.
        raise backend.unavailable("release", name, released, results)
    return 0


def extend(
    backend: Majority, name: str, token: str, ttl_ms: int, renewal: bool, reenter: bool
) -> Steps[bool]:
    """Extend the lease on a majority of the nodes (extend.lua on each, as on one server)."""
    call = holds.extend_call(
        backend.layout, name, token, ttl_ms, renewal, reenter, backend.max_renewals
    )
    decided = backend.votes.extended
    started = time.monotonic()
    results = yield Ask([call], decided)
    return judge_extend(backend, name, ttl_ms, results, started)


def judge_extend(
    backend: Majority, name: str, ttl_ms: int, results: Results, started: float
) -> bool:
    quorum = backend.quorum
    refused = sum(isinstance(r, list) and _limit_reached(r[0]) for r in results)
    if refused >= quorum:
        raise backend.renewal_limit_reached(name)
    extended = sum(isinstance(r, list) and _extended(r[0]) for r in results)
    validity = ttl_ms - (time.monotonic() - started) * 1000 - drift_ms(backend, ttl_ms)
    if extended >= quorum and validity > 0:
        return True
    failed = sum(isinstance(r, Exception) for r in results)
    if extended + failed < quorum:
        return False  # too many nodes no longer hold it: the lease is lost
    raise backend.unavailable("extend", name, extended, results)


# --- introspection --------------------------------------------------------------------------
def inspect(backend: Majority, name: str) -> Steps[LockInfo | None]:
    """Return the LockInfo of the token a majority holds (inspect.lua on each node), None
    when no token can have a majority; BackendUnavailable when the silent nodes could make
    one."""
    validate_name(name)  # operators pass names by hand: a clear error, not an AttributeError
    call = holds.inspect_call(backend.layout, name, redlock=True)
    results = yield Ask([call], backend.votes.answered)
    infos = _infos(backend, name, results, 0)
    verdict = _majority(backend, infos)
    if not isinstance(verdict, LockInfo | None):  # _UNKNOWN
        raise backend.unavailable("read", name, len(infos), results)
    return verdict


def inspect_many(backend: Majority, names: list[str]) -> Steps[list[LockInfo]]:
    """Return the LockInfo of each name a majority holds, in order, in one fan-out."""
    if not names:
        return []
    inspect_calls = [holds.inspect_call(backend.layout, name, redlock=True) for name in names]
    results = yield Ask(inspect_calls, backend.votes.answered)
    found = []
    for position, name in enumerate(names):
        verdict = _majority(backend, _infos(backend, name, results, position))
        if isinstance(verdict, LockInfo):
            found.append(verdict)
    return found


def _infos(backend: Majority, name: str, results: Results, position: int) -> list[LockInfo | None]:
    """Return what each node that answered says about ``name`` (None: not held there);
    raise BackendUnavailable when fewer than a majority answered."""
    answered = [r for r in results if isinstance(r, list)]
    if len(answered) < backend.quorum:
        raise backend.unavailable("read", name, len(answered), results)
    return [holds.lock_info_from(backend.alias, name, reply[position]) for reply in answered]


def _majority(backend: Majority, infos: list[LockInfo | None]) -> LockInfo | object | None:
    """Merge the nodes' views: the LockInfo of the token a majority holds, None when no
    token can have a majority, _UNKNOWN when the silent nodes could make one."""
    quorum = backend.quorum
    groups: dict[str, list[LockInfo]] = defaultdict(list)
    for info in infos:
        if info is not None:
            groups[info.token].append(info)
    silent = len(backend.nodes) - len(infos)
    for group in groups.values():
        if len(group) >= quorum:
            return _merged(group, quorum)
    if any(len(group) + silent >= quorum for group in groups.values()):
        return _UNKNOWN
    return None


_UNKNOWN = object()


def _merged(group: list[LockInfo], quorum: int) -> LockInfo:
    """One LockInfo from the nodes of a majority: the lease the majority surely still has,
    the fencing token the holder was given (the largest), the most renewals and levels."""
    group = sorted(group, key=lambda info: info.ttl_remaining, reverse=True)
    return dataclasses.replace(
        group[quorum - 1],
        fencing_token=max(info.fencing_token for info in group),
        acquired_at=min(info.acquired_at for info in group),
        renewals=max(info.renewals for info in group),
        depth=max(info.depth for info in group),
        # Each waiter queues on every node it reaches: the most any node of the majority saw.
        waiters=max(info.waiters or 0 for info in group),
    )


def held_entries(backend: Majority, prefix: str) -> Steps[list[HeldEntry]]:
    """The index entries of the locks a majority holds (RedlockExclusive.list)."""
    quorum = backend.quorum
    results = yield Ask(listing.held_names_calls(backend.layout, "wait"), backend.votes.answered)
    answered = [r for r in results if isinstance(r, list)]
    if len(answered) < quorum:
        raise backend.unavailable(
            "list the locks of", prefix or "every prefix", len(answered), results
        )
    seen: dict[str, list[HeldEntry]] = defaultdict(list)
    for buckets in answered:
        for reply in buckets:
            for entry in listing.held_entries(reply):
                if entry.name.startswith(prefix):
                    seen[entry.name].append(entry)
    # Held where a majority holds it: until the quorum-th latest lease end, since the
    # earliest acquisition among those nodes.
    return sorted(
        HeldEntry(
            name,
            sorted((e.lease_end for e in entries), reverse=True)[quorum - 1],
            min((e.acquired for e in entries if e.acquired), default=0.0),
            max(e.waiters for e in entries),
        )
        for name, entries in seen.items()
        if len(entries) >= quorum
    )


# --- counting the nodes' replies ------------------------------------------------------------
def drift_ms(backend: Majority, ttl_ms: int) -> float:
    """The share of a ``ttl_ms`` lease set aside for clock drift between the nodes."""
    return ttl_ms * backend.drift_factor + DRIFT_MS


def vote_decided(
    granted: Callable[[Any], bool], nodes: int, quorum: int
) -> Callable[[Results], bool]:
    """Return a test of whether the replies so far settle a majority vote either way."""

    def decided(results: Results) -> bool:
        yes = no = 0
        for result in results:
            if isinstance(result, list):
                if granted(result[0]):
                    yes += 1
                else:
                    no += 1
            elif result is not None:
                no += 1
        return yes >= quorum or no > nodes - quorum

    return decided


def answered_by(quorum: int) -> Callable[[Results], bool]:
    """Return a test of whether ``quorum`` nodes answered (a read is then decided)."""

    def answered(results: Results) -> bool:
        return sum(isinstance(result, list) for result in results) >= quorum

    return answered


@dataclasses.dataclass(frozen=True, slots=True)
class Votes:
    """The tests that settle each operation's fan-out, built once per backend with its nodes
    (an Ask is on the hot path: nothing is built or looked up per operation)."""

    acquired: Callable[[Results], bool]
    released: Callable[[Results], bool]
    extended: Callable[[Results], bool]
    answered: Callable[[Results], bool]  # a read: a quorum answered

    @classmethod
    def count(cls, nodes: int, quorum: int) -> Votes:
        return cls(
            acquired=vote_decided(holds.took_lock, nodes, quorum),
            released=vote_decided(_released, nodes, quorum),
            extended=vote_decided(_extended, nodes, quorum),
            answered=answered_by(quorum),
        )


def always(results: Results) -> bool:
    """Decided from the first reply on: what the nodes answer does not change the outcome,
    so the stragglers get the fan-out's grace only."""
    return True


def _granted_anywhere(results: Results) -> bool:
    return any(isinstance(result, list) and holds.took_lock(result[0]) for result in results)


def _released(reply: Any) -> bool:
    return not isinstance(reply, Exception) and int(reply) in (1, 2)


def _extended(reply: Any) -> bool:
    return not isinstance(reply, Exception) and int(reply) == 1


def _limit_reached(reply: Any) -> bool:
    """The EXTEND script's answer when MAX_RENEWALS refused the renewal."""
    return not isinstance(reply, Exception) and int(reply) == 2
