"""Runner: how an operation's steps run on one Redis server (or Cluster) through redis-py.

Every call goes through the client's public API: EVALSHA (EVAL when the server forgot the
script), BLPOP and pipelines. Each call takes a connection from the client's pool and gives
it back before it returns, so between calls distlock holds none; a waiter blocked on BLPOP
holds one while it waits.

Each kind of step (distlock.backends.redis_ops.steps) runs two ways, side by side below: on
the sync client and on this event loop's async client. A step with no native async form (a
Cluster node's own pipeline, a listing) runs its sync form in a worker thread (.threads:
what it acquires for a task cancelled meanwhile is given back). What every
step shares (the resend after a dropped connection, the errors) is in ``execute`` and
``aexecute``, twins of a few lines.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import redis

from ...exceptions import BackendUnavailable
from ...offload import in_thread
from .memory import MemoryReport, is_out_of_memory, out_of_memory_message, read_memory
from .server_info import ServerReport, read_server
from .steps import (
    Confirmed,
    Eval,
    EvalMany,
    Pop,
    PopThenEval,
    Steps,
    adrive,
    block_seconds,
    drive,
    text,
)

T = TypeVar("T")
R = TypeVar("R")
# The operation that gives back what an acquire may have taken (a release of its token).
GiveBack = Callable[[], Steps[Any]] | None

# How long after a BLPOP's timeout the client ends it itself (see Runner.blocking), and
# how many nudges it sends at most, each after twice the wait of the one before.
UNBLOCK_SLACK = 0.001
MAX_NUDGES = 8
# ConnectionPool.get_connection() took a command name before redis-py 5.3 and warns about
# one since (DeprecationWarning): pass it only to the releases that need it.
POOL_ARGS: tuple[str, ...] = (
    () if tuple(int(part) for part in redis.__version__.split(".")[:2]) >= (5, 3) else ("BLPOP",)
)
# What the client raises when a call's outcome is unknown. RedisClusterException (an
# unreachable cluster, while the client is built) is not a RedisError.
CLIENT_ERRORS = (redis.RedisError, redis.exceptions.RedisClusterException)
# Cluster errors that mean "route this call again" (MovedError is an AskError).
REDIRECTS = (redis.exceptions.AskError, redis.exceptions.TryAgainError)
# What a Cluster node's failure looks like to a call routed by the cached slot map: the
# master died (and a replica may have taken its slots since), or the cluster is failing over.
STALE_ROUTE = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterDownError,
)


class Runner:
    """Run operations (generators of steps) on ``self.client``, which a subclass provides,
    and on the async client of ``async_client()``, if it has one."""

    # Set from RedisBackend's settings; a borrowed client never waits for replicas.
    cluster = False
    wait_replicas = 0
    wait_timeout_ms = 0

    @property
    def client(self) -> Any:
        raise NotImplementedError("subclasses of Runner must provide a client")

    @property
    def address(self) -> str:
        """Where the server is, for messages (never a password)."""
        raise NotImplementedError("subclasses of Runner must provide an address")

    async def async_client(self) -> Any | None:
        """Return this event loop's async client; None if there is none (django-redis has
        none): async operations then run on the sync client in a worker thread."""
        return None

    # --- operations ---------------------------------------------------------------------
    def run(self, steps: Steps[T]) -> T:
        """Run an operation; return its outcome."""
        return drive(steps, self.execute)

    async def arun(self, steps: Steps[T], give_back: GiveBack = None) -> T:
        """Run an operation on this event loop's client; return its outcome.

        An operation that may acquire names the one that gives it back (``give_back``): a
        part of it run in a worker thread goes on after its task is cancelled, and that
        thread then runs ``give_back`` (see .threads).
        """
        undo = None if give_back is None else lambda: self.run(give_back())
        client = await self.async_client()
        if client is None:
            return await in_thread(self.run, steps, give_back=undo)
        return await adrive(steps, lambda step: self.aexecute(step, client, undo))

    # --- one step -----------------------------------------------------------------------
    def execute(self, step: Any) -> Any:
        """Run one step; return its reply. BackendUnavailable when the server cannot be
        reached (the outcome is then unknown).

        An idempotent step (running it twice does what running it once does) is sent once
        more on a fresh connection after a connection error: a pooled connection the server
        or a middlebox dropped after the pool checked it fails the write, and the caller
        should not pay for that. Other steps (a release, a reentrant extend) are never sent
        twice: their outcome is then left for the operation's caller to settle.
        """
        try:
            return SYNC[type(step)](self, step)
        except CLIENT_ERRORS as exc:
            self.resend_or_raise(step, exc)
        with self.translated_errors():  # the one resend, on a fresh connection
            return SYNC[type(step)](self, step)

    async def aexecute(
        self, step: Any, client: Any, give_back: Callable[[], object] | None = None
    ) -> Any:
        """Async twin of execute(), on ``client``: the same resend, the same errors."""
        if self.cluster and type(step) in NODE_PIPELINED:
            # Only a node's own (sync) client keeps a script and BLPOP or WAIT on one
            # connection: execute() in a thread, given back if its task is cancelled.
            return await in_thread(self.execute, step, give_back=give_back)
        try:
            return await ASYNC[type(step)](self, step, client)
        except CLIENT_ERRORS as exc:
            self.resend_or_raise(step, exc)
        with self.translated_errors():
            return await ASYNC[type(step)](self, step, client)

    def resend_or_raise(self, step: Any, exc: Exception) -> None:
        """Return if ``step`` is sent once more after ``exc`` (an idempotent step whose
        connection dropped); else raise BackendUnavailable for it."""
        if not (step.idempotent and isinstance(exc, redis.exceptions.ConnectionError)):
            raise self.unavailable(exc) from exc

    def unavailable(self, exc: Exception) -> BackendUnavailable:
        if is_out_of_memory(exc):
            return BackendUnavailable(out_of_memory_message(self.address))
        return BackendUnavailable(
            f"Redis at {self.address} did not answer ({type(exc).__name__}: {exc}); "
            "the lock state is unknown, so nothing was assumed.",
        )

    @contextmanager
    def translated_errors(self) -> Iterator[None]:
        """Raise BackendUnavailable for the client's errors in the block."""
        try:
            yield
        except CLIENT_ERRORS as exc:
            raise self.unavailable(exc) from exc

    # --- memory and identity -----------------------------------------------------------
    def memory_reports(self) -> list[MemoryReport]:
        """Return what each server keeping this backend's locks (every master of a Cluster)
        says of its memory; a server that cannot be read has a report with its error."""
        return self._each_server(read_memory, MemoryReport)

    def server_reports(self) -> list[ServerReport]:
        """Return what each server keeping this backend's locks (every master of a Cluster)
        says of itself (Redis or Valkey, version, role, latency); a server that does not
        answer has a report with its error."""
        return self._each_server(read_server, ServerReport)

    def _each_server(self, read: Callable[[Any, str], R], failed: Callable[..., R]) -> list[R]:
        """Return ``read(client, address)`` for each server (every master of a Cluster);
        ``failed(address, error=...)`` when the servers cannot even be found."""
        try:
            client = self.client  # a Redis Cluster's connects to learn its masters
            masters = client.get_primaries() if self.cluster else None
        except CLIENT_ERRORS as exc:
            return [failed(self.address, error=f"{type(exc).__name__}: {exc}")]
        if masters is None:
            return [read(client, self.address)]
        return [read(client.get_redis_connection(node), node.name) for node in masters]

    # --- Eval: one script ---------------------------------------------------------------
    # EVALSHA through execute_command(), what client.evalsha() calls after two wrappers that
    # each pack the dozen arguments again: every uncontended pair sends two. The digest and
    # the number of keys go encoded (ASCII), which redis-py passes on as they are; a Cluster
    # client reads the number as int() does (int(b"5") == 5).
    def eval(self, step: Eval) -> Any:
        client = self.client  # a Redis Cluster's connects to learn its slots
        keys = step.keys
        try:
            return client.execute_command(
                "EVALSHA", step.script.encoded_sha, b"%d" % len(keys), *keys, *step.args
            )
        except redis.exceptions.NoScriptError:  # the server restarted or was flushed
            return client.eval(step.script.source, len(keys), *keys, *step.args)

    async def aeval(self, step: Eval, client: Any) -> Any:
        keys = step.keys
        try:
            return await client.execute_command(
                "EVALSHA", step.script.encoded_sha, b"%d" % len(keys), *keys, *step.args
            )
        except redis.exceptions.NoScriptError:
            return await client.eval(step.script.source, len(step.keys), *step.keys, *step.args)

    # --- Confirmed: a script, then WAIT for replicas ------------------------------------
    def confirmed(self, step: Confirmed) -> tuple[Any, int]:
        call = step.call
        for attempt in range(3):
            node = self.node_client(call.keys[0])
            pipe = node.pipeline(transaction=False)
            pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
            pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
            try:
                reply, confirmed = pipe.execute()
                return reply, int(confirmed)
            except redis.exceptions.NoScriptError:
                node.script_load(call.script.source)  # a restarted server: load, run again
            except REDIRECTS:
                if attempt == 2:
                    raise
                self.client.nodes_manager.initialize()  # the slot moved: learn where
        raise AssertionError("unreachable: the script is loaded")  # pragma: no cover

    async def aconfirmed(self, step: Confirmed, client: Any) -> tuple[Any, int]:
        call = step.call
        for _ in range(2):
            pipe = client.pipeline(transaction=False)
            pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
            pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
            try:
                reply, confirmed = await pipe.execute()
                return reply, int(confirmed)
            except redis.exceptions.NoScriptError:
                await client.script_load(call.script.source)
        raise AssertionError("unreachable: the script was loaded")  # pragma: no cover

    # --- Pop and PopThenEval: BLPOP (and a script), ended on time -----------------------
    # A server ends a BLPOP's timeout on its own timer, which runs hz times a second (10 by
    # default): a wait of 10 ms came back after up to 110 ms. But it also checks blocked
    # clients' timeouts each time it wakes for a command (Redis 6.0+, Valkey). So the
    # client keeps its own time: when no reply has come UNBLOCK_SLACK after the timeout, it
    # sends a PING on the blocked connection itself (a nudge), which wakes the server: the
    # BLPOP, past its timeout, ends at once, whatever was pipelined behind it runs as after
    # a timeout, and the PING's reply comes last. Nothing is pushed to any list, and no
    # second connection is needed: a waiter holds one connection, as before (a pool bounded
    # by max_connections would otherwise run out when waiters fill it; and Redlock's
    # waiters share one signal list, where a pushed element would wake another waiter).
    def pop(self, step: Pop) -> str | None:
        # On a Cluster, the plain client of the list's master (a non-fair waiter's BLPOP).
        replies = self.blocking(self.node_client(step.key), step.key, step.timeout, [])
        return popped(replies)

    async def apop(self, step: Pop, client: Any) -> str | None:
        replies = await self.ablocking(client, step.key, step.timeout, [])
        return popped(replies)

    def pop_then_eval(self, step: PopThenEval) -> list[Any] | None:
        node = self.node_client(step.call.keys[0])
        return self.blocking(node, step.wake, step.timeout, self.after_pop(step))

    async def apop_then_eval(self, step: PopThenEval, client: Any) -> list[Any] | None:
        return await self.ablocking(client, step.wake, step.timeout, self.after_pop(step))

    def after_pop(self, step: PopThenEval) -> list[tuple[Any, ...]]:
        """The commands pipelined behind the BLPOP of ``step``."""
        commands = [step.call.command()]
        if step.confirm:
            commands.append(("WAIT", self.wait_replicas, self.wait_timeout_ms))
        return commands

    def blocking(
        self, node: Any, key: str | bytes, timeout: float, behind: list[tuple[Any, ...]]
    ) -> list[Any] | None:
        """Send BLPOP ``key`` and the commands ``behind`` it on one connection of ``node``'s
        pool; return their replies (errors among them as values), None when they came later
        than the socket timeout."""
        # The timeout as redis-py would encode the float (its repr), without its encoder call.
        commands = [("BLPOP", key, b"%r" % block_seconds(timeout)), *behind]
        pool = node.connection_pool
        connection = pool.get_connection(*POOL_ARGS)
        try:
            connection.send_packed_command(connection.pack_commands(commands))
            nudges, wait = 0, timeout + UNBLOCK_SLACK
            while nudges < MAX_NUDGES and not connection.can_read(timeout=wait):
                nudge(connection)
                nudges += 1
                wait = UNBLOCK_SLACK * 2**nudges
            replies = [read_reply(connection) for _ in commands]
            for _ in range(nudges):
                read_reply(connection)  # PONG
            return replies
        except redis.exceptions.TimeoutError:
            connection.disconnect()  # replies may still come: the connection is spoilt
            return None
        except BaseException:
            connection.disconnect()
            raise
        finally:
            pool.release(connection)

    async def ablocking(
        self, client: Any, key: str | bytes, timeout: float, behind: list[tuple[Any, ...]]
    ) -> list[Any] | None:
        """Async twin of blocking()."""
        commands = [("BLPOP", key, b"%r" % block_seconds(timeout)), *behind]
        pool = client.connection_pool
        connection = await pool.get_connection(*POOL_ARGS)
        try:
            await connection.send_packed_command(connection.pack_commands(commands))
            first = asyncio.ensure_future(aread_reply(connection))
            nudges, wait = 0, timeout + UNBLOCK_SLACK
            try:
                while nudges < MAX_NUDGES and not (await asyncio.wait({first}, timeout=wait))[0]:
                    await anudge(connection)
                    nudges += 1
                    wait = UNBLOCK_SLACK * 2**nudges
                replies = [await first]
            except BaseException:
                first.cancel()
                raise
            replies += [await aread_reply(connection) for _ in behind]
            for _ in range(nudges):
                await aread_reply(connection)  # PONG
            return replies
        except redis.exceptions.TimeoutError:
            await connection.disconnect()
            return None
        except BaseException:
            await connection.disconnect()
            raise
        finally:
            await pool.release(connection)

    # --- EvalMany: scripts pipelined, one round trip per server -------------------------
    def eval_many(self, step: EvalMany) -> list[Any]:
        if not step.calls:
            return []
        if not self.cluster:
            return self._pipelined(self.client, step.calls)
        if not step.reads:
            return self._pipelined_per_node(step.calls)
        return self.rerouted(lambda: self._pipelined_per_node(step.calls))

    async def aeval_many(self, step: EvalMany, client: Any) -> list[Any]:
        return await in_thread(self.eval_many, step)  # listings: in a thread

    def _pipelined(self, client: Any, calls: list[Eval]) -> list[Any]:
        for _ in range(2):
            pipe = client.pipeline(transaction=False)
            for call in calls:
                pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
            replies = pipe.execute(raise_on_error=False)
            forgot = {
                call.script
                for call, reply in zip(calls, replies, strict=True)
                if isinstance(reply, redis.exceptions.NoScriptError)
            }
            if not forgot:
                break
            for script in forgot:
                client.script_load(script.source)  # then run them all again
        for reply in replies:
            if isinstance(reply, Exception) and not isinstance(reply, REDIRECTS):
                try:
                    raise reply
                finally:
                    del reply, replies  # no cycle through this frame (see detached.py)
        return replies

    def _pipelined_per_node(self, calls: list[Eval]) -> list[Any]:
        # A cluster pipeline cannot run scripts, so each master gets a plain pipeline of the
        # calls whose keys it holds; a call redirected by a moving slot is sent again
        # through the cluster client, which follows the redirection.
        replies: list[Any] = [None] * len(calls)
        for node_client, positions in self.by_node([call.keys[0] for call in calls]):
            node_replies = self._pipelined(node_client, [calls[p] for p in positions])
            for position, reply in zip(positions, node_replies, strict=True):
                replies[position] = (
                    self.eval(calls[position]) if isinstance(reply, REDIRECTS) else reply
                )
        return replies

    # --- Cluster routing ----------------------------------------------------------------
    def node_client(self, key: str | bytes) -> Any:
        """Return the plain client of the server that holds ``key``."""
        if self.cluster:
            return self.client.get_redis_connection(self.client.get_node_from_key(key))
        return self.client

    def by_node(self, keys: list[str]) -> list[tuple[Any, list[int]]]:
        """Group Cluster keys by the master that holds them (by the cached slot map); return
        each master's plain client with the positions of its keys in ``keys``."""
        nodes: dict[str, Any] = {}
        groups: dict[str, list[int]] = defaultdict(list)
        for position, key in enumerate(keys):
            node = self.client.get_node_from_key(key)
            nodes[node.name] = node
            groups[node.name].append(position)
        return [
            (self.client.get_redis_connection(nodes[name]), positions)
            for name, positions in groups.items()
        ]

    def rerouted(self, call: Callable[[], T]) -> T:
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


def popped(replies: list[Any] | None) -> str | None:
    """The element a BLPOP popped, as a str; None for a late reply or no element in time.
    An error reply (read_reply returns it) is raised, as redis-py's blpop() raises it."""
    if replies is None:
        return None
    reply = replies[0]
    replies.clear()
    if isinstance(reply, Exception):
        try:
            raise reply
        finally:
            del reply  # its traceback holds this frame: no cycle through the local
    return text(reply[1]) if reply else None


# unasync: the async source of the sync code after it
async def anudge(connection: Any) -> None:
    """Send PING on ``connection``, blocked in a BLPOP past its timeout (Runner.blocking).
    No health check: it would read a reply, and the BLPOP's is still to come."""
    await connection.send_packed_command(connection.pack_command("PING"), check_health=False)


# Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
def nudge(connection: Any) -> None:
    """Send PING on ``connection``, blocked in a BLPOP past its timeout (Runner.blocking).
    No health check: it would read a reply, and the BLPOP's is still to come."""
    connection.send_packed_command(connection.pack_command("PING"), check_health=False)


# unasync: end


# unasync: the async source of the sync code after it
async def aread_reply(connection: Any) -> Any:
    """Read one reply of a pipeline sent by hand; an error reply is returned, not raised."""
    try:
        return await connection.read_response()
    except redis.exceptions.ResponseError as exc:
        return exc


# Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
def read_reply(connection: Any) -> Any:
    """Read one reply of a pipeline sent by hand; an error reply is returned, not raised."""
    try:
        return connection.read_response()
    except redis.exceptions.ResponseError as exc:
        return exc


# unasync: end


# The steps a Cluster runs on one node's sync client (aexecute runs them in a thread).
NODE_PIPELINED = (Confirmed, PopThenEval, Pop)
# How each kind of step runs: on the sync client, and on an async one.
SYNC: dict[type, Callable[[Any, Any], Any]] = {
    Eval: Runner.eval,
    Confirmed: Runner.confirmed,
    Pop: Runner.pop,
    PopThenEval: Runner.pop_then_eval,
    EvalMany: Runner.eval_many,
}
ASYNC: dict[type, Callable[[Any, Any, Any], Any]] = {
    Eval: Runner.aeval,
    Confirmed: Runner.aconfirmed,
    Pop: Runner.apop,
    PopThenEval: Runner.apop_then_eval,
    EvalMany: Runner.aeval_many,
}
