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

The operations, with the script calls they send to every node and how they count the
replies, are in distlock.backends.redlock_ops; this module keeps the settings, the nodes and
how each step runs on them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import os
import time
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

import redis

from ..exceptions import BackendUnavailable, InvalidLockBackendError
from ..info import LockInfo
from . import redlock_ops
from .base import DRIFT_FACTOR, Attempt, BaseLockBackend, HeldEntry
from .operations import ExclusiveKind, Operations, Request
from .redis import RedisBackend
from .redis_ops.fanout import Results, Skipped, afan_out, fan_out
from .redis_ops.memory import MemoryReport, is_out_of_memory
from .redis_ops.server_info import ServerReport
from .redis_ops.steps import Steps, adrive, drive
from .redlock_ops import Ask, OnNode, Sleep
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


class RedlockExclusive(ExclusiveKind):
    """The exclusive lock on a majority of the nodes: each operation is one of the
    generators of redlock_ops (try_acquire, turn, ...), driven by the backend's ``run``/``arun``."""

    backend: RedlockBackend

    # unasync: the async source of the sync code after it
    async def atry_acquire(self, request: Request, grant: str | None = None) -> Attempt:
        return await self.backend.arun(redlock_ops.try_acquire(self.backend, request, grant))

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def try_acquire(self, request: Request, grant: str | None = None) -> Attempt:
        return self.backend.run(redlock_ops.try_acquire(self.backend, request, grant))

    # unasync: end

    # unasync: the async source of the sync code after it
    async def aacquire_when_free(self, request: Request, timeout: float) -> Attempt:
        # Block on one node for a grant, then present it to every node.
        grant = await self.backend.arun(redlock_ops.turn(self.backend, request.name, timeout))
        sent = time.monotonic()
        attempt = await self.atry_acquire(request, grant)
        return attempt._replace(sent=sent)

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def acquire_when_free(self, request: Request, timeout: float) -> Attempt:
        # Block on one node for a grant, then present it to every node.
        grant = self.backend.run(redlock_ops.turn(self.backend, request.name, timeout))
        sent = time.monotonic()
        attempt = self.try_acquire(request, grant)
        return attempt._replace(sent=sent)

    # unasync: end

    # unasync: the async source of the sync code after it
    async def aleave(self, name: str, token: str) -> None:
        await self.backend.arun(redlock_ops.leave(self.backend, name, token))

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def leave(self, name: str, token: str) -> None:
        self.backend.run(redlock_ops.leave(self.backend, name, token))

    # unasync: end

    # unasync: the async source of the sync code after it
    async def arelease(self, name: str, token: str, *, every_level: bool = False) -> int:
        return await self.backend.arun(redlock_ops.release(self.backend, name, token, every_level))

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def release(self, name: str, token: str, *, every_level: bool = False) -> int:
        return self.backend.run(redlock_ops.release(self.backend, name, token, every_level))

    # unasync: end

    # unasync: the async source of the sync code after it
    async def aextend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        return await self.backend.arun(
            redlock_ops.extend(self.backend, name, token, ttl_ms, renewal, reenter)
        )

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        return self.backend.run(
            redlock_ops.extend(self.backend, name, token, ttl_ms, renewal, reenter)
        )

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

    Each operation is a generator of steps (Ask, OnNode, Sleep) in redlock_ops that ``run``
    and ``arun`` drive, so the sync and async ones cannot drift (see redis_ops.steps); the
    backend keeps the nodes, their settings, and how each step runs on them.
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
        self.votes = redlock_ops.Votes.count(len(self.nodes), self.quorum)
        self.max_block = min(node.max_block for node in self.nodes)
        self.timeout: float | None = self.nodes[0].client_options.get("socket_timeout")
        self.grace = GRACE if self.timeout is None else min(GRACE, self.timeout / 2)
        self._down_until = [0.0] * len(self.nodes)
        self._failures = [0] * len(self.nodes)  # in a row, per node

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
                forgot, [call.command(by_source=True) for call in step.calls], redlock_ops.always
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
                self.leave_out(position)
        return results

    def leave_out(self, position: int) -> None:
        """Leave node ``position`` out of fan-outs for a while: it failed (see BACKOFF)."""
        self._failures[position] += 1
        backoff = min(BACKOFF * 2 ** (self._failures[position] - 1), MAX_BACKOFF)
        self._down_until[position] = time.monotonic() + backoff

    def home(self) -> int:
        """The node waiters block on: the first one up, so that all of them queue there."""
        return next((i for i, up in enumerate(self._up()) if up), 0)

    def unavailable(
        self, action: str, name: str, agreed: int, results: Results
    ) -> BackendUnavailable:
        """The error of an operation that fewer than a majority of the nodes agreed on,
        saying what each node that failed answered."""
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

    # --- introspection ----------------------------------------------------------------
    def info(self, name: str) -> LockInfo | None:
        return self.run(redlock_ops.inspect(self, name))

    def info_many(self, names: list[str]) -> list[LockInfo]:
        return self.run(redlock_ops.inspect_many(self, names))

    def held_entries(self, prefix: str) -> list[HeldEntry]:
        """The index entries of the locks a majority holds (RedlockExclusive.list)."""
        return self.run(redlock_ops.held_entries(self, prefix))

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


def _server_identity(location: str) -> tuple[str, ...]:
    """Which server a URL names, whatever its database, password or spelling of the port."""
    parts = urlsplit(location)
    if parts.scheme == "unix":
        return ("unix", os.path.normpath(parts.path))
    return ("tcp", (parts.hostname or "localhost").lower(), str(parts.port or 6379))


def _no_script(reply: Any) -> bool:
    return isinstance(reply, redis.exceptions.NoScriptError)
