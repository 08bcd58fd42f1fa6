"""ScriptedBackend: locks kept by the Lua scripts on a Redis server that a redis-py client
reaches. A subclass supplies the client (RedisBackend builds its own; DjangoRedisBackend
borrows a django-redis cache's).

Every call goes through the client's public API: EVALSHA (EVAL when the server forgot the
script), BLPOP and pipelines. Each call takes a connection from the client's pool and gives
it back before it returns, so between calls distlock holds none; a waiter blocked on BLPOP
holds one while it waits.
"""
from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import redis
from asgiref.sync import sync_to_async

from ..exceptions import BackendUnavailable
from ..info import LockInfo
from ..names import validate_name
from . import calls
from .base import Attempt, BaseLockBackend, HeldEntry, check_prefix
from .calls import SCRIPT_SHAS, SCRIPT_SOURCES, Call
from .semaphores import RedisSemaphores

_T = TypeVar("_T")

# What the client raises when a call's outcome is unknown. RedisClusterException (an
# unreachable cluster, while the client is built) is not a RedisError.
CLIENT_ERRORS = (redis.RedisError, redis.exceptions.RedisClusterException)
# Cluster errors that mean "route this call again" (MovedError is an AskError).
REDIRECTS = (redis.exceptions.AskError, redis.exceptions.TryAgainError)
# What a Cluster node's failure looks like to a call routed by the cached slot map: the
# master died (and a replica may have taken its slots since), or the cluster is failing over.
STALE_ROUTE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
               redis.exceptions.ClusterDownError)
# Scripts that only read (or drop ended index entries): safe to run again after a failure
# whose outcome is unknown.
REPEATABLE = frozenset({"inspect", "inspect_many", "held_names"})
# Index entries one ZSCAN call returns at most (a bucket's index is usually much smaller).
SCAN_COUNT = 1000
# Names read per info_many() while walking: as many as fit, since info_many makes one call
# per bucket whatever the count.
WALK_BATCH = 20_000


class ScriptedBackend(RedisSemaphores, BaseLockBackend):
    """Run the lock and semaphore scripts on ``self.client`` (a subclass provides it)."""

    # Set by RedisBackend's settings; a borrowed client never waits for replicas.
    cluster = False
    wait_replicas = 0
    wait_timeout_ms = 0

    @property
    def client(self) -> Any:
        raise NotImplementedError("subclasses of ScriptedBackend must provide a client")

    @property
    def address(self) -> str:
        """Where the server is, for messages (never a password)."""
        raise NotImplementedError("subclasses of ScriptedBackend must provide an address")

    # --- running scripts ------------------------------------------------------------------
    def run_script(self, name: str, keys: list[str], args: list[Any], *,
                   idempotent: bool = False) -> Any:
        """Run script ``name``; return its reply; BackendUnavailable when the server cannot
        be reached (the outcome is then unknown).

        An ``idempotent`` call (running it twice does what running it once does) is sent
        once more on a fresh connection after a connection error: a pooled connection the
        server or a middlebox dropped after the pool checked it fails the write, and the
        caller should not pay for that. Other calls (a release, a reentrant extend) are never
        sent twice: their outcome is then left for distlock's callers to settle.
        """
        for attempt in (1, 2):
            try:
                client = self.client  # a Redis Cluster's connects to learn its slots
                try:
                    return client.evalsha(SCRIPT_SHAS[name], len(keys), *keys, *args)
                except redis.exceptions.NoScriptError:  # the server restarted or was flushed
                    return client.eval(SCRIPT_SOURCES[name], len(keys), *keys, *args)
            except redis.exceptions.ConnectionError as exc:
                if not (idempotent and attempt == 1):
                    raise self._unavailable(exc) from exc
            except CLIENT_ERRORS as exc:
                raise self._unavailable(exc) from exc
        raise AssertionError("unreachable: the second attempt returns or raises")

    def run_pipelined(self, name: str, script_calls: list[Call]) -> list[Any]:
        """Run script ``name`` once per call, in one round trip per server."""
        if not script_calls:
            return []
        with self._translate_errors():
            if not self.cluster:
                return self._pipelined(self.client, name, script_calls)
            if name not in REPEATABLE:
                return self._pipelined_per_node(name, script_calls)
            return self._rerouted(lambda: self._pipelined_per_node(name, script_calls))

    def _rerouted(self, call: Callable[[], _T]) -> _T:
        """Return ``call()``, a Cluster read routed by the cached slot map. When a node
        fails, learn the slot map again (a replica may have taken the slots of a dead master)
        and try once more. Lock operations refresh the map through the cluster client;
        without this, a process that only lists (the admin, an operator's view) would keep
        asking the dead master forever."""
        try:
            return call()
        except STALE_ROUTE:
            self.client.nodes_manager.initialize()
            return call()

    def _pipelined(self, client: Any, name: str, script_calls: list[Call]) -> list[Any]:
        for _ in range(2):
            pipe = client.pipeline(transaction=False)
            for keys, args in script_calls:
                pipe.evalsha(SCRIPT_SHAS[name], len(keys), *keys, *args)
            replies = pipe.execute(raise_on_error=False)
            if not any(isinstance(r, redis.exceptions.NoScriptError) for r in replies):
                break
            client.script_load(SCRIPT_SOURCES[name])  # then run them all again
        for reply in replies:
            if isinstance(reply, Exception) and not isinstance(reply, REDIRECTS):
                try:
                    raise reply
                finally:
                    del reply, replies  # no cycle through this frame (see detached.py)
        return replies

    def _pipelined_per_node(self, name: str, script_calls: list[Call]) -> list[Any]:
        # A cluster pipeline cannot run scripts, so each master gets a plain pipeline of the
        # calls whose keys it holds; a call redirected by a moving slot is sent again
        # through the cluster client, which follows the redirection.
        nodes: dict[str, Any] = {}
        positions: dict[str, list[int]] = defaultdict(list)
        for position, (keys, _) in enumerate(script_calls):
            node = self.client.get_node_from_key(keys[0])
            nodes[node.name] = node
            positions[node.name].append(position)
        replies: list[Any] = [None] * len(script_calls)
        for node_name, node_positions in positions.items():
            node_client = self.client.get_redis_connection(nodes[node_name])
            node_replies = self._pipelined(node_client, name,
                                           [script_calls[p] for p in node_positions])
            for position, reply in zip(node_positions, node_replies, strict=True):
                if isinstance(reply, REDIRECTS):
                    reply = self.run_script(name, *script_calls[position])
                replies[position] = reply
        return replies

    @contextmanager
    def _translate_errors(self) -> Iterator[None]:
        try:
            yield
        except CLIENT_ERRORS as exc:
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: Exception) -> BackendUnavailable:
        return BackendUnavailable(
            f"Redis at {self.address} did not answer ({type(exc).__name__}: {exc}); "
            "the lock state is unknown, so nothing was assumed.",
        )

    # --- replica acknowledgement (WAIT_REPLICAS) ----------------------------------------
    def _node_client(self, key: str) -> Any:
        """Return the plain client of the server that holds ``key``."""
        if self.cluster:
            return self.client.get_redis_connection(self.client.get_node_from_key(key))
        return self.client

    def run_confirmed(self, name: str, keys: list[str], args: list[Any]) -> tuple[Any, int]:
        """Run a script and WAIT for replicas on the same connection, in one round trip;
        return the script's reply and how many replicas confirmed it."""
        with self._translate_errors():
            for attempt in range(3):
                node = self._node_client(keys[0])
                pipe = node.pipeline(transaction=False)
                pipe.evalsha(SCRIPT_SHAS[name], len(keys), *keys, *args)
                pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
                try:
                    reply, confirmed = pipe.execute()
                    return reply, int(confirmed)
                except redis.exceptions.NoScriptError:
                    node.script_load(SCRIPT_SOURCES[name])  # a restarted server: load, rerun
                except REDIRECTS:
                    if attempt == 2:
                        raise
                    self.client.nodes_manager.initialize()  # the slot moved: learn where
        raise AssertionError("unreachable: the script is loaded")  # pragma: no cover

    def _unconfirmed(self, name: str, confirmed: int) -> BackendUnavailable:
        return BackendUnavailable(
            f"Only {confirmed} of the {self.wait_replicas} replicas required by WAIT_REPLICAS "
            f"confirmed the lease on {name!r} within {self.wait_timeout_ms} ms at "
            f"{self.address}; a failover could lose it, so it is not reported as held.",
            name=name,
        )

    # --- primitives -------------------------------------------------------------------
    def try_acquire(self, name: str, token: str, ttl_ms: int, meta: str, grant: str | None,
                    patience_ms: int) -> Attempt:
        # (No grants on one server: a release hands the lock to a waiter's token directly.)
        return self._acquire(name, token, calls.acquire_call(self.layout, name, token, ttl_ms,
                                                             meta, patience_ms))

    def _acquire(self, name: str, token: str, call: Call) -> Attempt:
        if not self.wait_replicas:
            return calls.attempt_from(self.run_script("acquire", *call, idempotent=True))
        return self._confirmed_attempt(name, token, *self.run_confirmed("acquire", *call))

    def _confirmed_attempt(self, name: str, token: str, reply: Any, confirmed: int) -> Attempt:
        attempt = calls.attempt_from(reply)
        if attempt.acquired and confirmed < self.wait_replicas:
            with contextlib.suppress(BackendUnavailable):
                self.release(name, token)  # fail closed: give back what was not confirmed
            raise self._unconfirmed(name, confirmed)
        return attempt

    def wait_and_acquire(self, timeout: float, name: str, token: str, ttl_ms: int, meta: str,
                         patience_ms: int) -> Attempt:
        """Block on this waiter's own list until a release hands it the lock (or ``timeout``
        passes), and run ACQUIRE right after, in the same round trip: the server runs the
        pipelined script as soon as the BLPOP returns, so a waiter handed the lock learns it
        holds it from the reply that woke it."""
        call = calls.acquire_call(self.layout, name, token, ttl_ms, meta, patience_ms,
                                  waited=True)
        sent = time.monotonic()
        replies = self.pop_then_run(calls.wake_key(self.layout, name, token), timeout,
                                    "acquire", call, confirm=bool(self.wait_replicas))
        if replies is None:
            return self._late(name, token)
        if any(isinstance(reply, Exception) for reply in replies):
            # The server forgot the script, or the slot moved: ask again the usual way (the
            # lock a release reserved for this waiter waits for it for HANDOFF_GRACE_MS).
            del replies  # no cycle through this frame (see detached.py)
            attempt = self._acquire(name, token, call)
        elif self.wait_replicas:
            attempt = self._confirmed_attempt(name, token, replies[1], int(replies[2]))
        else:
            attempt = calls.attempt_from(replies[1])
        return attempt._replace(sent=sent)

    def pop_then_run(self, wake: str, timeout: float, name: str, call: Call, *,
                     confirm: bool = False) -> list[Any] | None:
        """Block up to ``timeout`` seconds on list ``wake`` (BLPOP), then run script ``name``,
        pipelined in one round trip (and WAIT for replicas if ``confirm``). Return the
        replies, errors among them as values; None when the reply came later than the
        socket timeout (a loaded server or client: the script may have run)."""
        keys, args = call
        try:
            pipe = self._node_client(keys[0]).pipeline(transaction=False)
            pipe.blpop([wake], calls.block_seconds(timeout))
            pipe.evalsha(SCRIPT_SHAS[name], len(keys), *keys, *args)
            if confirm:
                pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
            replies: list[Any] = pipe.execute(raise_on_error=False)
        except redis.exceptions.TimeoutError:
            return None
        except CLIENT_ERRORS as exc:
            raise self._unavailable(exc) from exc
        return replies

    async def apop_then_run(self, wake: str, timeout: float, name: str, call: Call, *,
                            confirm: bool = False) -> list[Any] | None:
        """Async twin of pop_then_run() (in a worker thread; RedisBackend's is native)."""
        run = sync_to_async(self.pop_then_run, thread_sensitive=False)
        return await run(wake, timeout, name, call, confirm=confirm)

    async def arun_script(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Async twin of run_script() (in a worker thread; RedisBackend's is native)."""
        return await sync_to_async(self.run_script, thread_sensitive=False)(name, keys, args)

    async def await_and_acquire(self, timeout: float, name: str, token: str, ttl_ms: int,
                                meta: str, patience_ms: int) -> Attempt:
        wait = sync_to_async(self.wait_and_acquire, thread_sensitive=False)
        return await wait(timeout, name, token, ttl_ms, meta, patience_ms)

    def _late(self, name: str, token: str) -> Attempt:
        """A wait whose reply came later than the socket timeout (a loaded server or client):
        its ACQUIRE may have run. Give back what it may have taken, which also tells whether
        the server answers at all (BackendUnavailable if not), and report no turn."""
        self.release(name, token)
        return Attempt(False)

    def wait_for_turn(self, name: str, timeout: float) -> str | None:
        """Block until a Redlock release pushes a grant to this lock's signal list (Redlock
        waiters block on one node; on one server, wait_and_acquire does it all)."""
        try:
            popped = self.client.blpop([self.layout.keys_for(name).signal],
                                       calls.block_seconds(timeout))
        except CLIENT_ERRORS as exc:
            self._unless_late(exc)
            return None
        return calls.text(popped[1]) if popped else None

    def _unless_late(self, exc: Exception) -> None:
        """Raise BackendUnavailable for a BLPOP's error, except a reply later than the socket
        timeout (a loaded server or client): that is "no signal", not an outage. Waiting
        changes no lock state, and the acquire attempt that follows at once finds out whether
        the server is there (raising BackendUnavailable within its own socket timeout if not).
        A grant popped by the late reply is not lost for good: the server takes it back after
        HANDOFF_GRACE_MS."""
        if not isinstance(exc, redis.exceptions.TimeoutError):
            raise self._unavailable(exc) from exc

    def leave_queue(self, name: str, token: str) -> None:
        self.run_script("leave_queue", *calls.leave_call(self.layout, name, token),
                        idempotent=True)

    def release(self, name: str, token: str, *, every_level: bool = False) -> int:
        return int(self.run_script("release",
                                   *calls.release_call(self.layout, name, token, every_level)))

    def extend(self, name: str, token: str, ttl_ms: int, *, renewal: bool = False,
               reenter: bool = False) -> bool:
        call = calls.extend_call(self.layout, name, token, ttl_ms, renewal, reenter,
                                 self.max_renewals)
        if not self.wait_replicas:
            # Sent twice, a renewal would count twice against MAX_RENEWALS at worst; a
            # reentrant acquire would add a level nobody releases.
            outcome = self.run_script("extend", *call, idempotent=not reenter)
            return self._extended(name, outcome)
        return self._confirmed_extension(name, *self.run_confirmed("extend", *call))

    def _extended(self, name: str, outcome: Any) -> bool:
        if outcome == 2:
            raise self.renewal_limit_reached(name)
        return outcome == 1

    def _confirmed_extension(self, name: str, reply: Any, confirmed: int) -> bool:
        # An unconfirmed extension leaves the holder its earlier, replicated lease: the lock
        # keeps its token and renewals retry while that lease lasts.
        if reply == 1 and confirmed < self.wait_replicas:
            raise self._unconfirmed(name, confirmed)
        return self._extended(name, reply)

    # --- introspection ----------------------------------------------------------------
    def info(self, name: str) -> LockInfo | None:
        validate_name(name)  # operators pass names by hand: a clear error, not an AttributeError
        reply = self.run_script("inspect", *calls.inspect_call(self.layout, name),
                                idempotent=True)
        return calls.lock_info_from(self.alias, name, reply)

    def info_many(self, names: list[str]) -> list[LockInfo]:
        # One call per bucket (INSPECT_MANY), not per lock: reading 50,000 locks then costs
        # about 1,000 calls instead of 50,000.
        grouped = calls.inspect_many_calls(self.layout, names)
        replies = self.run_pipelined("inspect_many", [call for _, call in grouped])
        found = {info.name: info
                 for (group, _), reply in zip(grouped, replies, strict=True)
                 for info in calls.lock_infos_from(self.alias, group, reply)}
        return [found[name] for name in names if name in found]

    def held_names(self, prefix: str = "") -> list[HeldEntry]:
        replies = self.run_pipelined("held_names", calls.held_names_calls(self.layout))
        found = [entry for reply in replies for entry in calls.held_entries(reply)
                 if entry.name.startswith(prefix)]
        found.sort()
        return found

    def iter_held(self, prefix: str = "") -> Iterator[LockInfo]:
        """Yield the LockInfo of every held lock whose name starts with ``prefix``, in no
        particular order: a walk of every bucket's index with ZSCAN (one pipeline per server
        and round), the locks read in pipelined batches as their names arrive.

        A lock held for the whole walk is yielded exactly once, however many others are
        taken and released meanwhile (ZSCAN returns it at least once; repeats are dropped
        here); one taken or released during the walk may or may not be. The cost is about
        one read per held lock, not one per page.
        """
        check_prefix(prefix)
        return self._walk(prefix)

    def _walk(self, prefix: str) -> Iterator[LockInfo]:
        seen: set[str] = set()
        cursors = dict.fromkeys(self.layout.index_keys, 0)
        moved: set[str] = set()  # indexes whose slot moved: walked through the cluster client
        while cursors:
            with self._translate_errors():
                found, cursors = self._scan_round(cursors, moved, prefix)
            fresh = [name for name in dict.fromkeys(found)
                     if name not in seen and name.startswith(prefix)]
            seen.update(fresh)
            for start in range(0, len(fresh), WALK_BATCH):
                yield from self.info_many(fresh[start : start + WALK_BATCH])

    def _scan_round(self, cursors: dict[str, int], moved: set[str], prefix: str
                    ) -> tuple[list[str], dict[str, int]]:
        """Take one ZSCAN step on every index in ``cursors``; return the names found and the
        cursors of the indexes not finished yet."""
        pattern = _pattern(prefix)
        replies = self._scan_by_server({k: c for k, c in cursors.items() if k not in moved},
                                       pattern)
        for key in moved & cursors.keys():
            replies[key] = self.client.zscan(key, cursors[key], match=pattern, count=SCAN_COUNT)
        found: list[str] = []
        remaining = {}
        for key, reply in replies.items():
            if isinstance(reply, REDIRECTS):
                # The index's slot is moving (resharding): from now on walk it through the
                # cluster client, which follows MOVED and ASK, from the start on its new
                # server (names already yielded are dropped as repeats).
                moved.add(key)
                reply = self.client.zscan(key, 0, match=pattern, count=SCAN_COUNT)
            elif isinstance(reply, Exception):
                raise reply
            cursor, members = reply
            found.extend(calls.text(member) for member, _ in members)
            if int(cursor):
                remaining[key] = int(cursor)
        return found, remaining

    def _scan_by_server(self, cursors: dict[str, int], pattern: str | None) -> dict[str, Any]:
        """Return each index's ZSCAN reply (or error), one pipeline per server."""
        if not self.cluster:
            return self._zscan(self.client, cursors, pattern) if cursors else {}

        def per_node(cursors: dict[str, int]) -> dict[str, Any]:
            replies: dict[str, Any] = {}
            for node_client, keys in self._by_node(list(cursors)):
                replies.update(self._zscan(node_client, {k: cursors[k] for k in keys}, pattern))
            return replies

        try:
            return per_node(cursors)
        except STALE_ROUTE:
            # A failover: learn the slot map again; the new master's cursors differ, so
            # restart these indexes from the beginning (repeats are dropped by the walk).
            self.client.nodes_manager.initialize()
            return per_node(dict.fromkeys(cursors, 0))

    @staticmethod
    def _zscan(client: Any, cursors: dict[str, int], pattern: str | None) -> dict[str, Any]:
        pipe = client.pipeline(transaction=False)
        for key, cursor in cursors.items():
            pipe.zscan(key, cursor, match=pattern, count=SCAN_COUNT)
        return dict(zip(cursors, pipe.execute(raise_on_error=False), strict=True))

    def _by_node(self, keys: list[str]) -> list[tuple[Any, list[str]]]:
        """Group Cluster keys by the master that holds them (by the cached slot map); return
        each master's plain client with its keys."""
        nodes: dict[str, Any] = {}
        groups: dict[str, list[str]] = defaultdict(list)
        for key in keys:
            node = self.client.get_node_from_key(key)
            nodes[node.name] = node
            groups[node.name].append(key)
        return [(self.client.get_redis_connection(nodes[name]), node_keys)
                for name, node_keys in groups.items()]


def _pattern(prefix: str) -> str | None:
    """Return a ZSCAN MATCH pattern for names starting with ``prefix`` (glob characters in
    it escaped), None for every name."""
    if not prefix:
        return None
    return "".join("\\" + char if char in "*?[]\\" else char for char in prefix) + "*"
