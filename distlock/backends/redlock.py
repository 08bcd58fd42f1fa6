"""RedlockBackend: a lock is held when a majority of independent Redis servers granted it.

Every node runs the Lua scripts one Redis server runs (distlock.backends.redis_ops), on the
same keys, and a few of its own (redis_ops.grants). An acquire asks all nodes at once
(redis_ops.fanout) and holds the lock when a majority granted it while its validity, ``ttl -
elapsed - drift`` with ``drift = ttl x DRIFT_FACTOR + 2 ms``, is still positive; otherwise it
takes back what it was granted, on every node. Extend and renewal need a majority too;
release asks every node.

Waiting: a release hands the lock to the waiters on every node with one grant, the same on
all of them, and a waiter blocks on one node (the first one up), pops that grant and presents
it to all nodes. Nodes that failed are left out for BACKOFF seconds.

Fencing tokens: each node issues its own, time-seeded (microseconds of its clock) and rising
per name; the lock's token is the largest one of the majority that granted it. Two majorities
share a node, whose token for the later holder is larger than the one it gave the earlier
holder; the later holder's token is larger than the earlier's whole maximum as long as the
nodes' clocks agree to within the time between the two acquisitions. A node restarted empty
with its clock stepped back, or clocks further apart than a handoff takes, can break the
order. See docs/deployments.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import os
import random
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple, TypeVar
from urllib.parse import urlsplit

import redis

from ..exceptions import BackendUnavailable, InvalidLockBackendError
from ..info import LockInfo
from ..keys import validate_name
from .base import DRIFT_FACTOR, DRIFT_MS, Attempt, BaseLockBackend, HeldEntry
from .operations import ExclusiveKind, Operations, Request
from .redis import RedisBackend
from .redis_ops import grants, holds, listing
from .redis_ops.fanout import Results, Skipped, afan_out, fan_out
from .redis_ops.memory import MemoryReport, is_out_of_memory
from .redis_ops.server_info import ServerReport
from .redis_ops.steps import Eval, Steps, adrive, drive
from .settings import LIMIT_OPTIONS, Problems

T = TypeVar("T")

MIN_NODES = 3
DEFAULT_DRIFT_FACTOR = DRIFT_FACTOR  # the OPTIONS' DRIFT_FACTOR when it is not set
# Once the outcome is decided, how long the remaining nodes may still answer (seconds; at
# most half the socket timeout). Healthy nodes answer within a millisecond; a busy host can
# delay one by tens of milliseconds, and leaving it out then only costs redundancy.
GRACE = 0.25
# A node that failed is left out of fan-outs for this long (seconds), doubled after each
# failure in a row up to MAX_BACKOFF, so that a dead or partitioned node costs nothing but
# redundancy between the (rarer and rarer) attempts to use it again.
BACKOFF = 1.0
MAX_BACKOFF = 8.0
# A waiter whose grant got some nodes but not a majority tries again this many times, after
# GRANT_RETRY_DELAY x 1, 2, ... seconds (the release that woke it is still reaching nodes).
GRANT_RETRIES = 3
GRANT_RETRY_DELAY = 0.002
# After an attempt that got some nodes but no majority (contenders split the nodes), wait
# a random time in this range (ms) before trying again, so that they do not split again.
JITTER_MS = (5.0, 50.0)
# No HELLO (RESP2, the default before redis-py 8) and no CLIENT SETINFO on connect: redis-py
# 8 spells the latter driver_info=None, earlier ones lib_name=None, lib_version=None.
QUIET_GREETING: dict[str, Any] = {
    "protocol": 2,
    **(
        {"driver_info": None}
        if "driver_info" in inspect.signature(redis.Redis.__init__).parameters
        else {"lib_name": None, "lib_version": None}
    ),
}
NO_SEMAPHORES = (
    "a permit count kept on several independent servers would need a quorum "
    "protocol distlock does not implement"
)
# Why Redlock has no non-fair mode (fair=False raises LockError saying so).
NO_NON_FAIR = (
    "a free lock is granted by a majority of independent nodes, and a waiter woken without "
    "the grant it is handed would race every newcomer on each node, which can split the "
    "votes so that nobody gets a majority"
)
NO_SHARED_LOCKS = (
    "a set of shared holders kept on several independent servers, each handing the lock "
    "to a different batch of waiters, would need a quorum protocol distlock does not "
    "implement"
)
LOCATION_HINT = (
    "For example 'LOCATION': ['redis://10.0.0.1:6379/0', 'redis://10.0.0.2:6379/0', "
    "'redis://10.0.0.3:6379/0']: an odd number (at least 3) of independent Redis servers."
)


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


class RedlockExclusive(ExclusiveKind):
    """The exclusive lock on a majority of the nodes: each operation is one of the
    backend's generators (``_acquire``, ``_turn``, ...), driven by its ``run``/``arun``."""

    backend: RedlockBackend

    # unasync: the async source of the sync code after it
    async def atry_acquire(self, request: Request, grant: str | None = None) -> Attempt:
        return await self.backend.arun(self._acquire(request, grant))

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def try_acquire(self, request: Request, grant: str | None = None) -> Attempt:
        return self.backend.run(self._acquire(request, grant))

    # unasync: end

    def _acquire(self, request: Request, grant: str | None) -> Steps[Attempt]:
        return self.backend._acquire(request, grant)

    # unasync: the async source of the sync code after it
    async def aacquire_when_free(self, request: Request, timeout: float) -> Attempt:
        # Block on one node for a grant, then present it to every node.
        grant = await self.backend.arun(self.backend._turn(request.name, timeout))
        sent = time.monotonic()
        attempt = await self.atry_acquire(request, grant)
        return attempt._replace(sent=sent)

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def acquire_when_free(self, request: Request, timeout: float) -> Attempt:
        # Block on one node for a grant, then present it to every node.
        grant = self.backend.run(self.backend._turn(request.name, timeout))
        sent = time.monotonic()
        attempt = self.try_acquire(request, grant)
        return attempt._replace(sent=sent)

    # unasync: end

    # unasync: the async source of the sync code after it
    async def aleave(self, name: str, token: str) -> None:
        await self.backend.arun(self.backend._leave(name, token))

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def leave(self, name: str, token: str) -> None:
        self.backend.run(self.backend._leave(name, token))

    # unasync: end

    # unasync: the async source of the sync code after it
    async def arelease(self, name: str, token: str, *, every_level: bool = False) -> int:
        return await self.backend.arun(self.backend._release(name, token, every_level))

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def release(self, name: str, token: str, *, every_level: bool = False) -> int:
        return self.backend.run(self.backend._release(name, token, every_level))

    # unasync: end

    # unasync: the async source of the sync code after it
    async def aextend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        return await self.backend.arun(self.backend._extend(name, token, ttl_ms, renewal, reenter))

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        return self.backend.run(self.backend._extend(name, token, ttl_ms, renewal, reenter))

    # unasync: end

    def inspect(self, name: str) -> tuple[LockInfo, ...]:
        info = self.backend.info(name)  # a majority's holder (no shared holds on Redlock)
        return () if info is None else (info,)

    def list(self, prefix: str = "") -> list[HeldEntry]:
        return self.backend.held_entries(prefix)


class RedlockBackend(BaseLockBackend):
    """Locks on a majority of independent Redis servers; LOCATION is the list of their URLs.

    Lower-case OPTIONS go to every node's client; ``DRIFT_FACTOR`` (default 0.01) is the
    share of the lease allowed for clock drift between the nodes.

    Each operation that has an async twin is a generator of steps (Ask, OnNode, Sleep) that
    ``run`` and ``arun`` drive, so the two cannot drift (see redis_ops.steps).
    """

    own_options = BaseLockBackend.own_options | {"DRIFT_FACTOR"}
    no_semaphores = NO_SEMAPHORES
    no_shared_locks = NO_SHARED_LOCKS
    no_non_fair = NO_NON_FAIR

    # Shared locks and semaphores: Unsupported (NO_SHARED_LOCKS, NO_SEMAPHORES say why).
    kind_classes: ClassVar[dict[str, type[Operations]]] = {"lock": RedlockExclusive}

    def configure(self, params: dict[str, Any], problems: Problems) -> None:
        super().configure(params, problems)
        self.drift_factor = problems.parse(self._parse_drift_factor, DEFAULT_DRIFT_FACTOR)
        # Every node gets the client options and enforces the same MAX_RENEWALS. A new
        # connection greets its server with nothing unless OPTIONS ask for it (a password,
        # a database, a client name): a node that accepts connections but never answers
        # (paused, partitioned) then holds up a fan-out for its grace, not for a socket
        # timeout spent waiting for the greeting's reply.
        node_options = {
            **QUIET_GREETING,
            **{k: v for k, v in self.options.items() if not k.isupper() or k in LIMIT_OPTIONS},
        }
        self.nodes = self._parse_nodes(params.get("LOCATION"), node_options, problems)
        if not self.nodes:
            return  # the problems say why; nothing below can be worked out
        self.quorum = len(self.nodes) // 2 + 1
        self.max_block = min(node.max_block for node in self.nodes)
        self.timeout: float | None = self.nodes[0].client_options.get("socket_timeout")
        self.grace = GRACE if self.timeout is None else min(GRACE, self.timeout / 2)
        self._down_until = [0.0] * len(self.nodes)
        self._failures = [0] * len(self.nodes)  # in a row, per node
        self._acquire_decided = self._decided(holds.took_lock)
        self._release_decided = self._decided(_released)
        self._extend_decided = self._decided(_extended)

    # --- configuration --------------------------------------------------------------
    def _location_error(self, message: str) -> InvalidLockBackendError:
        return InvalidLockBackendError(
            f"DISTLOCK[{self.alias!r}]['LOCATION'] {message}",
            check_id="distlock.E005",
            hint=LOCATION_HINT,
        )

    def _parse_nodes(
        self, location: object, options: dict[str, Any], problems: Problems
    ) -> list[RedisBackend]:
        if isinstance(location, str) or not isinstance(location, (list, tuple)):
            problems.add(
                self._location_error(
                    f"must be a list of Redis URLs, one per independent server, not {location!r}."
                )
            )
            return []
        nodes = []
        for position, url in enumerate(location):
            params = {
                "LOCATION": url,
                "KEY_PREFIX": self.key_prefix,
                "TIMEOUT": self.default_timeout,
                "OPTIONS": options,
            }
            try:
                nodes.append(RedisBackend(self.alias, params))
            except InvalidLockBackendError as exc:
                for problem in exc.problems:
                    if problem.check_id != "distlock.E005":
                        if position == 0:  # the same OPTIONS on every node: report once
                            problems.add(problem)
                        continue
                    problems.add(
                        self._location_error(
                            f"[{position}]: " + str(problem).split("['LOCATION'] ", 1)[-1]
                        )
                    )
        if len(nodes) < len(location):
            return []
        return problems.parse(lambda: self._check_nodes(nodes), [])

    def _check_nodes(self, nodes: list[RedisBackend]) -> list[RedisBackend]:
        count = len(nodes)
        if count < MIN_NODES:
            raise self._location_error(
                f"has {count} server(s); Redlock needs at least {MIN_NODES}, so that a "
                "majority survives the loss of one."
            )
        if count % 2 == 0:
            raise self._location_error(
                f"has {count} servers, an even number: its majority of {count // 2 + 1} "
                f"survives no more failures than {count - 1} servers would. Use an odd number."
            )
        seen: dict[tuple[str, ...], int] = {}
        for position, node in enumerate(nodes):
            server = _server_identity(node.location)
            if server in seen:
                raise self._location_error(
                    f"names the same server twice ([{seen[server]}] and [{position}]: "
                    f"{node.address}); a majority must be of independent servers."
                )
            seen[server] = position
        return nodes

    def _parse_drift_factor(self) -> float:
        factor = self.options.get("DRIFT_FACTOR", DEFAULT_DRIFT_FACTOR)
        if (
            isinstance(factor, bool)
            or not isinstance(factor, (int, float))
            or not (0 <= factor < 0.5)
        ):
            raise InvalidLockBackendError(
                f"DISTLOCK[{self.alias!r}]['OPTIONS']['DRIFT_FACTOR'] must be a number from 0 "
                f"up to 0.5, not {factor!r}.",
                check_id="distlock.E006",
                hint="DRIFT_FACTOR is the share of the lease set aside for clock drift between "
                "the servers; the default, 0.01, suits clocks that run at the same rate.",
            )
        return float(factor)

    # --- asking every node ----------------------------------------------------------
    def _up(self) -> list[bool]:
        now = time.monotonic()
        return [until <= now for until in self._down_until]

    # unasync: the async source of the sync code after it
    async def arun(self, steps: Steps[T]) -> T:
        """Run a Redlock operation; return its outcome."""
        return await adrive(steps, self._aexecute)

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def run(self, steps: Steps[T]) -> T:
        """Run a Redlock operation; return its outcome."""
        return drive(steps, self._execute)

    # unasync: end

    def _execute(self, step: Ask | OnNode | Sleep) -> Any:
        if isinstance(step, Ask):
            return self._ask(step)
        if isinstance(step, OnNode):
            return self.nodes[step.position].run(step.steps)
        time.sleep(step.seconds)
        return None

    async def _aexecute(self, step: Ask | OnNode | Sleep) -> Any:
        if isinstance(step, Ask):
            return await self._aask(step)
        if isinstance(step, OnNode):
            return await self.nodes[step.position].arun(step.steps)
        await asyncio.sleep(step.seconds)
        return None

    def _ask(self, step: Ask) -> Results:
        """Send ``step.calls`` to every node asked, at once, over each node's pool."""
        up = self._up()
        only = step.only
        asked = [i for i in range(len(self.nodes)) if up[i] and (only is None or i in only)]
        # The same source, so the same digest everywhere.
        results = self._fan_out(asked, [call.command() for call in step.calls], step.decided)
        forgot = [
            i
            for i, result in enumerate(results)
            if isinstance(result, list) and any(_no_script(reply) for reply in result)
        ]
        if forgot:
            # Nodes restarted since they last ran the script: run it there with EVAL, all of
            # them at once again (the server caches the script on the way).
            again = self._fan_out(
                forgot, [call.command(by_source=True) for call in step.calls], _always
            )
            for position in forgot:
                results[position] = again[position]
        return self._note_failures(results)

    def _fan_out(
        self,
        positions: list[int],
        commands: list[tuple[Any, ...]],
        decided: Callable[[Results], bool],
    ) -> Results:
        pools = [
            node.client.connection_pool if i in positions else None
            for i, node in enumerate(self.nodes)
        ]
        return fan_out(pools, commands, timeout=self.timeout, decided=decided, grace=self.grace)

    async def _aask(self, step: Ask) -> Results:
        """Async twin of _ask(): one task per node asked, each on the node's async client."""

        async def one(node: RedisBackend) -> list[Any]:
            client = await node.async_client()
            # One attempt per node, as the sync fan-out makes: a node that fails counts as
            # a vote short, and the Lock retries as a whole.
            return [
                await node.aexecute(dataclasses.replace(call, idempotent=False), client)
                for call in step.calls
            ]

        only = step.only
        tasks = [
            (lambda node=node: one(node)) if up and (only is None or i in only) else None
            for i, (node, up) in enumerate(zip(self.nodes, self._up(), strict=True))
        ]
        results = await afan_out(
            tasks, timeout=self.timeout, decided=step.decided, grace=self.grace
        )
        return self._note_failures(results)

    def _note_failures(self, results: Results) -> Results:
        for position, result in enumerate(results):
            if isinstance(result, list):
                error = next((r for r in result if isinstance(r, redis.RedisError)), None)
                if error is None:
                    self._failures[position] = 0
                    continue
                results[position] = result = error  # OOM, READONLY...: this node cannot serve
            if isinstance(result, Exception) and not isinstance(result, Skipped):  # asked
                self._leave_out(position)
        return results

    def _leave_out(self, position: int) -> None:
        self._failures[position] += 1
        backoff = min(BACKOFF * 2 ** (self._failures[position] - 1), MAX_BACKOFF)
        self._down_until[position] = time.monotonic() + backoff

    def _decided(self, granted: Callable[[Any], bool]) -> Callable[[Results], bool]:
        """Return a test of whether the replies so far settle a majority vote either way."""
        nodes, quorum = len(self.nodes), self.quorum

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

    def _answered_by_quorum(self, results: Results) -> bool:
        return sum(isinstance(result, list) for result in results) >= self.quorum

    def _drift_ms(self, ttl_ms: int) -> float:
        return ttl_ms * self.drift_factor + DRIFT_MS

    def _unavailable(
        self, action: str, name: str, agreed: int, results: Results
    ) -> BackendUnavailable:
        failures = [
            (node, result)
            for node, result in zip(self.nodes, results, strict=True)
            if isinstance(result, Exception)
        ]
        detail = (
            "; ".join(
                f"{node.address}: {type(error).__name__}: {error}" for node, error in failures
            )
            or "no failure reported"
        )
        full = [node.address for node, error in failures if is_out_of_memory(error)]
        if full:
            detail += (
                f". Out of memory (maxmemory reached, writes refused): {', '.join(full)}; "
                "free memory or raise maxmemory there (docs/deployments.md)"
            )
        return BackendUnavailable(
            f"Redlock could not {action} {name!r}: {agreed} of {len(self.nodes)} Redis servers "
            f"agreed and {len(failures)} did not answer ({detail}); a majority of "
            f"{self.quorum} is needed, so nothing was assumed.",
            name=name,
        )

    # --- acquire --------------------------------------------------------------------
    # A waiter handed the lock is woken by the first node the release reached; the other
    # nodes may still show the releasing holder for a moment. A grant that got some nodes but
    # not a majority is so tried again, shortly, before the waiter waits again.
    def _acquire(self, request: Request, grant: str | None) -> Steps[Attempt]:
        name, token, ttl_ms = request.name, request.token, request.ttl_ms
        call = grants.acquire_call(self.layout, request, grant)
        for retry in range(GRANT_RETRIES + 1):
            started = time.monotonic()
            results = yield Ask([call], self._acquire_decided)
            attempt, undo, error = self._judge_acquire(name, ttl_ms, results, started)
            if undo:
                # Queue where the lock was taken back, as the refusing nodes queued it; not
                # when the attempt fails as a whole (nobody will wait).
                back = grants.undo_call(
                    self.layout, name, token, 0 if error else request.patience_ms
                )
                yield Ask([back], _always, undo)
            if error is not None:
                try:
                    raise error
                finally:
                    del error  # no cycle through this frame (see detached.py)
            if attempt.acquired or not (grant and _granted_anywhere(results)):
                break
            yield Sleep(GRANT_RETRY_DELAY * (retry + 1))
        return attempt

    def _judge_acquire(
        self, name: str, ttl_ms: int, results: Results, started: float
    ) -> tuple[Attempt, list[int], BackendUnavailable | None]:
        """Return the attempt's outcome, the nodes to take the lock back from, and the error
        to raise instead of an outcome."""
        answered = [
            (i, holds.took_lock(r[0])) for i, r in enumerate(results) if isinstance(r, list)
        ]
        granted = [i for i, took in answered if took]
        refused = [i for i, took in answered if not took]
        unanswered = [
            i
            for i, r in enumerate(results)
            if isinstance(r, Exception) and not isinstance(r, Skipped)
        ]
        validity = ttl_ms - (time.monotonic() - started) * 1000 - self._drift_ms(ttl_ms)
        if len(granted) >= self.quorum and validity > 0:
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
        if len(granted) + len(refused) < self.quorum:
            # No majority answered: nothing can be known. (The Lock then releases on every
            # node, which also covers grants whose reply was lost.)
            error = self._unavailable("acquire", name, len(granted), results)
            return Attempt(False), granted, error
        # Not held: take back every grant, including any whose reply was lost.
        undo = granted + unanswered
        if granted:
            # Contenders split the nodes, or the lease ran out: retry after a jitter.
            return Attempt(False, holder_pttl_ms=round(random.uniform(*JITTER_MS))), undo, None
        # Held: it can be free once a majority of the refusing nodes' leases ended.
        leases = sorted(max(int(results[i][0][1]), 1) for i in refused)
        return Attempt(False, holder_pttl_ms=leases[self.quorum - 1]), undo, None

    def _turn(self, name: str, timeout: float) -> Steps[str | None]:
        """Block on the home node until a release pushes a grant (see grants)."""
        home = self._home()
        try:
            return (yield OnNode(home, grants.wait_for_grant(self.layout, name, timeout)))
        except BackendUnavailable:
            self._leave_out(home)
            return None  # the next attempt tells whether a majority is still reachable

    def _home(self) -> int:
        """The node waiters block on: the first one up, so that all of them queue there."""
        return next((i for i, up in enumerate(self._up()) if up), 0)

    def _leave(self, name: str, token: str) -> Steps[None]:
        yield Ask([grants.leave_call(self.layout, name, token)], _always)

    # --- release and extend -----------------------------------------------------------
    def _release(self, name: str, token: str, every_level: bool) -> Steps[int]:
        # One grant, valid on every node; and the nodes the lock was not held on (a bare
        # majority held it) hand it to the waiters too, so no newcomer can take them first.
        # (A force release does not know the holder's token, hence its grant: it does not.)
        call = grants.release_call(
            self.layout, name, token, every_level, suffix=os.urandom(8).hex(), vacant=bool(token)
        )
        return self._judge_release(name, (yield Ask([call], self._release_decided)))

    def _judge_release(self, name: str, results: Results) -> int:
        outcomes = [int(r[0]) for r in results if isinstance(r, list)]
        released = sum(outcome in (1, 2) for outcome in outcomes)
        if released >= self.quorum:
            return 2 if outcomes.count(2) >= self.quorum else 1
        failed = sum(isinstance(r, Exception) for r in results)
        if released + failed >= self.quorum:
            # Maybe held still: raise, so that the Lock keeps its token and can retry.
            raise self._unavailable("release", name, released, results)
        return 0

    def _extend(
        self, name: str, token: str, ttl_ms: int, renewal: bool, reenter: bool
    ) -> Steps[bool]:
        call = holds.extend_call(
            self.layout, name, token, ttl_ms, renewal, reenter, self.max_renewals
        )
        started = time.monotonic()
        results = yield Ask([call], self._extend_decided)
        return self._judge_extend(name, ttl_ms, results, started)

    def _judge_extend(self, name: str, ttl_ms: int, results: Results, started: float) -> bool:
        refused = sum(isinstance(r, list) and _limit_reached(r[0]) for r in results)
        if refused >= self.quorum:
            raise self.renewal_limit_reached(name)
        extended = sum(isinstance(r, list) and _extended(r[0]) for r in results)
        validity = ttl_ms - (time.monotonic() - started) * 1000 - self._drift_ms(ttl_ms)
        if extended >= self.quorum and validity > 0:
            return True
        failed = sum(isinstance(r, Exception) for r in results)
        if extended + failed < self.quorum:
            return False  # too many nodes no longer hold it: the lease is lost
        raise self._unavailable("extend", name, extended, results)

    # --- introspection ----------------------------------------------------------------
    def info(self, name: str) -> LockInfo | None:
        validate_name(name)  # operators pass names by hand: a clear error, not an AttributeError
        call = holds.inspect_call(self.layout, name, redlock=True)
        results = self._ask(Ask([call], self._answered_by_quorum))
        infos = self._infos(name, results, 0)
        verdict = self._majority(infos)
        if not isinstance(verdict, LockInfo | None):  # _UNKNOWN
            raise self._unavailable("read", name, len(infos), results)
        return verdict

    def info_many(self, names: list[str]) -> list[LockInfo]:
        if not names:
            return []
        inspect_calls = [holds.inspect_call(self.layout, name, redlock=True) for name in names]
        results = self._ask(Ask(inspect_calls, self._answered_by_quorum))
        found = []
        for position, name in enumerate(names):
            verdict = self._majority(self._infos(name, results, position))
            if isinstance(verdict, LockInfo):
                found.append(verdict)
        return found

    def _infos(self, name: str, results: Results, position: int) -> list[LockInfo | None]:
        """Return what each node that answered says about ``name`` (None: not held there);
        raise BackendUnavailable when fewer than a majority answered."""
        answered = [r for r in results if isinstance(r, list)]
        if len(answered) < self.quorum:
            raise self._unavailable("read", name, len(answered), results)
        return [holds.lock_info_from(self.alias, name, reply[position]) for reply in answered]

    def _majority(self, infos: list[LockInfo | None]) -> LockInfo | object | None:
        """Merge the nodes' views: the LockInfo of the token a majority holds, None when no
        token can have a majority, _UNKNOWN when the silent nodes could make one."""
        groups: dict[str, list[LockInfo]] = defaultdict(list)
        for info in infos:
            if info is not None:
                groups[info.token].append(info)
        silent = len(self.nodes) - len(infos)
        for group in groups.values():
            if len(group) >= self.quorum:
                return _merged(group, self.quorum)
        if any(len(group) + silent >= self.quorum for group in groups.values()):
            return _UNKNOWN
        return None

    def held_entries(self, prefix: str) -> list[HeldEntry]:
        """The index entries of the locks a majority holds (RedlockExclusive.list)."""
        results = self._ask(
            Ask(listing.held_names_calls(self.layout, "wait"), self._answered_by_quorum)
        )
        answered = [r for r in results if isinstance(r, list)]
        if len(answered) < self.quorum:
            raise self._unavailable(
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
                sorted((e.lease_end for e in entries), reverse=True)[self.quorum - 1],
                min((e.acquired for e in entries if e.acquired), default=0.0),
                max(e.waiters for e in entries),
            )
            for name, entries in seen.items()
            if len(entries) >= self.quorum
        )

    def close(self) -> None:
        for node in getattr(self, "nodes", ()):
            node.close()

    def memory_reports(self) -> list[MemoryReport]:
        """Return each node's memory report (a node may evict the lock keys it keeps)."""
        return [report for node in self.nodes for report in node.memory_reports()]

    def server_reports(self) -> list[ServerReport]:
        """Return each node's report: which server answered there, or why none did."""
        return [report for node in self.nodes for report in node.server_reports()]

    @property
    def address(self) -> str:
        return ", ".join(node.address for node in self.nodes)


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


def _server_identity(location: str) -> tuple[str, ...]:
    """Which server a URL names, whatever its database, password or spelling of the port."""
    parts = urlsplit(location)
    if parts.scheme == "unix":
        return ("unix", os.path.normpath(parts.path))
    return ("tcp", (parts.hostname or "localhost").lower(), str(parts.port or 6379))


def _no_script(reply: Any) -> bool:
    return isinstance(reply, redis.exceptions.NoScriptError)


def _granted_anywhere(results: Results) -> bool:
    return any(isinstance(result, list) and holds.took_lock(result[0]) for result in results)


def _released(reply: Any) -> bool:
    return not isinstance(reply, Exception) and int(reply) in (1, 2)


def _extended(reply: Any) -> bool:
    return not isinstance(reply, Exception) and int(reply) == 1


def _limit_reached(reply: Any) -> bool:
    """The EXTEND script's answer when MAX_RENEWALS refused the renewal."""
    return not isinstance(reply, Exception) and int(reply) == 2


def _always(results: Results) -> bool:
    return True
