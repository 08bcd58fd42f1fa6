"""RedisBackend: locks on one Redis server, a Redis Cluster, or a Sentinel-managed master."""
from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import re
import weakref
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.retry
import redis.sentinel
from redis.backoff import NoBackoff

from ..exceptions import BackendUnavailable, InvalidLockBackendError
from ..info import LockInfo
from ..names import validate_name
from . import scripts
from .base import HANDOFF_GRACE_MS, Attempt, BaseLockBackend, HeldEntry
from .direct import DirectCalls

SCHEMES = ("redis", "rediss", "unix")
# The path of a redis:// or rediss:// URL names the database: redis-py silently ignores one
# that is not a number and uses database 0, so distlock refuses it.
_DB_PATH = re.compile(r"/?\d*")
_UNSAFE_IN_URL = re.compile(r"[\s\x00-\x1f\x7f]")
# Applied unless OPTIONS say otherwise: fail within seconds, and never let the client retry a
# command on its own (a retried acquire must be decided by distlock, not replayed blindly).
CLIENT_DEFAULTS: dict[str, Any] = {"socket_timeout": 2.0, "socket_connect_timeout": 2.0}
# How long WAIT waits for replicas by default (ms), at most half the socket timeout.
DEFAULT_WAIT_TIMEOUT_MS = 500
# Keyword arguments only a RedisCluster takes (read_from_replicas, require_full_coverage...).
CLUSTER_ARGUMENTS = frozenset(inspect.signature(redis.RedisCluster.__init__).parameters) - (
    frozenset(inspect.signature(redis.Redis.__init__).parameters)
)
# What the client raises when a call's outcome is unknown. RedisClusterException (an
# unreachable cluster, while the client is built) is not a RedisError.
CLIENT_ERRORS = (redis.RedisError, redis.exceptions.RedisClusterException)
# Cluster errors that mean "route this call again" (MovedError is an AskError).
REDIRECTS = (redis.exceptions.AskError, redis.exceptions.TryAgainError)
SCRIPT_SOURCES = {
    "acquire": scripts.ACQUIRE,
    "release": scripts.RELEASE,
    "extend": scripts.EXTEND,
    "inspect": scripts.INSPECT,
    "held_names": scripts.HELD_NAMES,
    "leave_queue": scripts.LEAVE_QUEUE,
    "undo_acquire": scripts.UNDO_ACQUIRE,
}


def text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class RedisBackend(BaseLockBackend):
    """Locks on Redis: standalone (default), ``OPTIONS['CLUSTER']`` or ``OPTIONS['SENTINELS']``.

    ``OPTIONS['WAIT_REPLICAS']`` (with ``WAIT_TIMEOUT`` in ms) makes every acquire and extend
    wait, in the same round trip, until that many replicas confirmed the write; when fewer
    do, an acquire is undone and BackendUnavailable raised (fail closed).
    """

    own_options = BaseLockBackend.own_options | {
        "CLUSTER", "SENTINELS", "SENTINEL_KWARGS", "WAIT_REPLICAS", "WAIT_TIMEOUT"
    }
    # Set by __init__; class defaults keep subclasses that configure themselves working.
    cluster = False
    sentinels: list[tuple[str, int]] | None = None
    wait_replicas = 0
    wait_timeout_ms = DEFAULT_WAIT_TIMEOUT_MS

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.cluster = self._parse_cluster()
        self.sentinels = self._parse_sentinels()
        self.location = self._parse_location(params.get("LOCATION"))
        self.client_options = self._parse_client_options()
        self.wait_replicas, self.wait_timeout_ms = self._parse_wait()
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._direct: DirectCalls | None = None
        self._async: weakref.WeakKeyDictionary[Any, _LoopClient] = weakref.WeakKeyDictionary()
        timeout = self.client_options.get("socket_timeout")
        if timeout:
            # A blocking read must return before the socket gives up on it.
            self.max_block = min(self.max_block, timeout / 2)

    # --- configuration --------------------------------------------------------------
    def _option_error(self, message: str, hint: str) -> InvalidLockBackendError:
        return InvalidLockBackendError(
            f"DISTLOCK[{self.alias!r}]['OPTIONS']{message}", check_id="distlock.E006", hint=hint
        )

    def _parse_cluster(self) -> bool:
        cluster = self.options.get("CLUSTER", False)
        if not isinstance(cluster, bool):
            raise self._option_error(
                f"['CLUSTER'] must be True or False, not {cluster!r}.",
                "Set 'CLUSTER': True when LOCATION names a node of a Redis Cluster.",
            )
        if cluster and "SENTINELS" in self.options:
            raise self._option_error(
                " sets both CLUSTER and SENTINELS.",
                "A Redis Cluster fails over by itself: use CLUSTER or SENTINELS, not both.",
            )
        return cluster

    def _parse_sentinels(self) -> list[tuple[str, int]] | None:
        sentinels = self.options.get("SENTINELS")
        if sentinels is None:
            if "SENTINEL_KWARGS" in self.options:
                raise self._option_error(
                    " sets SENTINEL_KWARGS without SENTINELS.",
                    "Add 'SENTINELS': [('sentinel-host', 26379), ...] or drop SENTINEL_KWARGS.",
                )
            return None
        hint = "For example 'SENTINELS': [('10.0.0.1', 26379), ('10.0.0.2', 26379)]."
        if not isinstance(sentinels, (list, tuple)) or not sentinels:
            raise self._option_error(
                f"['SENTINELS'] must be a non-empty list of (host, port), not {sentinels!r}.", hint
            )
        parsed = []
        for address in sentinels:
            if not (
                isinstance(address, (list, tuple)) and len(address) == 2
                and isinstance(address[0], str) and address[0]
                and isinstance(address[1], int) and not isinstance(address[1], bool)
                and 0 < address[1] < 65536
            ):
                raise self._option_error(
                    f"['SENTINELS'] has {address!r}, which is not a (host, port) pair.", hint
                )
            parsed.append((address[0], address[1]))
        sentinel_kwargs = self.options.get("SENTINEL_KWARGS", {})
        if not isinstance(sentinel_kwargs, dict):
            raise self._option_error(
                f"['SENTINEL_KWARGS'] must be a dict, not {sentinel_kwargs!r}.",
                "For example 'SENTINEL_KWARGS': {'password': '...'} (the sentinels' own "
                "password; by default they get the socket timeouts of OPTIONS).",
            )
        return parsed

    def _parse_location(self, location: object) -> str:
        hint = "For example 'LOCATION': 'redis://127.0.0.1:6379/0' (or rediss://, unix://)."
        if self.sentinels:
            hint = "With SENTINELS, LOCATION is 'redis://SERVICE_NAME/DB', e.g. 'redis://mymaster/0'."
        elif self.cluster:
            hint = "With CLUSTER, LOCATION names any node, e.g. 'redis://10.0.0.1:7000'."
        if not isinstance(location, str) or not location:
            raise InvalidLockBackendError(
                f"DISTLOCK[{self.alias!r}]['LOCATION'] must be a Redis URL string, "
                f"not {location!r}.",
                check_id="distlock.E005",
                hint=hint,
            )
        if _UNSAFE_IN_URL.search(location):
            # urlsplit strips these, redis-py does not: the check passed, the client failed.
            raise InvalidLockBackendError(
                f"DISTLOCK[{self.alias!r}]['LOCATION'] {redact(location)!r} contains spaces or "
                "control characters.",
                check_id="distlock.E005",
                hint=hint,
            )
        parts = urlsplit(location)

        def invalid(why: str) -> InvalidLockBackendError:
            return InvalidLockBackendError(
                f"DISTLOCK[{self.alias!r}]['LOCATION'] {redact(location)!r} {why}.",
                check_id="distlock.E005",
                hint=hint,
            )

        if parts.scheme not in SCHEMES or not (parts.netloc or parts.path):
            raise invalid(f"is not a Redis URL (scheme must be one of {', '.join(SCHEMES)})")
        try:
            parts.port  # noqa: B018 - raises ValueError on a malformed port
        except ValueError:
            raise invalid("has an invalid port") from None
        database = parts.path.strip("/")
        if (self.sentinels or self.cluster) and parts.scheme == "unix":
            raise invalid("is a unix socket, which Sentinel and Cluster cannot use")
        valid_database = database.isdigit() or not database
        if self.sentinels and not (_service_name(location) and valid_database):
            raise invalid("does not name a Sentinel service and database")
        if self.cluster and database not in ("", "0"):
            raise invalid("selects a database, but a Redis Cluster only has database 0")
        if parts.scheme != "unix" and not self.sentinels and not _DB_PATH.fullmatch(parts.path):
            raise invalid(f"names the database {database!r}; Redis databases are numbers")
        return location

    def _parse_client_options(self) -> dict[str, Any]:
        client_options = {k: v for k, v in self.options.items() if not k.isupper()}
        for name in ("socket_timeout", "socket_connect_timeout"):
            value = client_options.get(name, CLIENT_DEFAULTS[name])
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or value <= 0
            ):
                raise self._option_error(
                    f"[{name!r}] must be a finite number of seconds > 0, not {value!r}.",
                    f"For example '{name}': 2.",
                )
        merged = {**CLIENT_DEFAULTS, **client_options}
        try:
            # Building a client connects to nothing, but rejects unknown options now, at
            # `manage.py check`, rather than at the first lock. A RedisCluster would connect
            # as it is built, so its node connections are checked on a plain client instead.
            if self.cluster:
                node_options = {k: v for k, v in merged.items() if k not in CLUSTER_ARGUMENTS}
                client = redis.Redis.from_url(self.location, **node_options)
            else:
                client = self._build_client(merged, redis)
            client.connection_pool.make_connection()  # applies the options, no I/O
            client.close()
        except (TypeError, ValueError) as exc:
            raise self._option_error(
                f" are not valid for the Redis client: {exc}",
                "Lower-case OPTIONS are redis-py client arguments (password, "
                "socket_timeout, ssl_ca_certs, ...).",
            ) from None
        return merged

    def _parse_wait(self) -> tuple[int, int]:
        replicas = self.options.get("WAIT_REPLICAS", 0)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise self._option_error(
                f"['WAIT_REPLICAS'] must be a whole number of replicas >= 0, not {replicas!r}.",
                "For example 'WAIT_REPLICAS': 1 to confirm every acquire on one replica "
                "(0 turns it off).",
            )
        socket_timeout = self.client_options.get("socket_timeout")
        ceiling = round(socket_timeout * 1000) if socket_timeout else None
        default = DEFAULT_WAIT_TIMEOUT_MS if ceiling is None else min(DEFAULT_WAIT_TIMEOUT_MS,
                                                                      ceiling // 2)
        timeout = self.options.get("WAIT_TIMEOUT", default)
        if (
            isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0
            or (ceiling is not None and timeout >= ceiling)
        ):
            bound = f" and below socket_timeout ({ceiling} ms)" if ceiling else ""
            raise self._option_error(
                f"['WAIT_TIMEOUT'] must be a whole number of milliseconds > 0{bound}, "
                f"not {timeout!r}.",
                "For example 'WAIT_TIMEOUT': 100: how long an acquire waits for replicas "
                "before it fails closed.",
            )
        if "WAIT_TIMEOUT" in self.options and not replicas:
            raise self._option_error(
                " sets WAIT_TIMEOUT without WAIT_REPLICAS.",
                "Add 'WAIT_REPLICAS': 1 (or more), or drop WAIT_TIMEOUT.",
            )
        return replicas, timeout

    def _build_client(self, options: dict[str, Any], module: Any) -> Any:
        """Return a redis-py client (sync with ``module=redis``, async with redis.asyncio)."""
        no_retry = module.retry.Retry(NoBackoff(), 0)
        if self.cluster:
            # Redirects (MOVED) are still followed; only failed calls are not replayed.
            return module.RedisCluster.from_url(self.location, retry=no_retry, **options)
        options = {**options, "retry": no_retry}
        if self.sentinels:
            parts = urlsplit(self.location)
            credentials = {"username": parts.username, "password": parts.password}
            credentials = {k: unquote(v) for k, v in credentials.items() if v is not None}
            sentinel = module.sentinel.Sentinel(
                self.sentinels,
                # None: the sentinels get the socket timeouts of OPTIONS too.
                sentinel_kwargs=self.options.get("SENTINEL_KWARGS"),
                **options,
            )
            return sentinel.master_for(
                _service_name(self.location),
                db=int(parts.path.strip("/") or 0),
                **credentials,
            )
        return module.Redis.from_url(self.location, **options)

    # --- clients and scripts ----------------------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._build_client(self.client_options, redis)
        return self._client

    def _script(self, name: str) -> Any:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self.client.register_script(SCRIPT_SOURCES[name])
        return script

    @property
    def direct(self) -> DirectCalls:
        """The hot path's way to the server (see distlock.backends.direct)."""
        direct = self._direct
        if direct is None:
            direct = self._direct = DirectCalls(self.client, SCRIPT_SOURCES)
        return direct

    def _run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        # The hot path: _translate_errors spelt out, since a generator-based context manager
        # costs more than the rest of this method.
        try:
            return self.direct.script(name, keys, args)
        except redis.exceptions.NoScriptError:
            raise
        except CLIENT_ERRORS as exc:
            raise self._unavailable(exc) from exc

    async def _loop_client(self) -> _LoopClient | None:
        """Return this event loop's async client (redis.asyncio connections are loop-bound)."""
        loop = asyncio.get_running_loop()
        entry = self._async.get(loop)
        if entry is None:
            entry = self._async[loop] = _LoopClient(
                self._build_client(self.client_options, redis.asyncio)
            )
            await entry.close_with_loop()
        return entry

    async def _arun(self, name: str, keys: list[str], args: list[Any]) -> Any:
        entry = await self._loop_client()
        if entry is None:
            return await asyncio.to_thread(self._run, name, keys, args)
        with self._translate_errors():
            return await entry.scripts[name](keys, args)

    @contextmanager
    def _translate_errors(self) -> Iterator[None]:
        try:
            yield
        except redis.exceptions.NoScriptError:
            raise
        except CLIENT_ERRORS as exc:
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: Exception) -> BackendUnavailable:
        return BackendUnavailable(
            f"Redis at {self.address} did not answer ({type(exc).__name__}: {exc}); "
            "the lock state is unknown, so nothing was assumed.",
        )

    @property
    def address(self) -> str:
        """The server's address for messages: never the password."""
        if self.sentinels:
            sentinels = ", ".join(f"{host}:{port}" for host, port in self.sentinels)
            return f"service {_service_name(self.location)!r} of Sentinels {sentinels}"
        if self.cluster:
            return f"the Redis Cluster of {redact(self.location)}"
        return redact(self.location)

    # --- replica acknowledgement (WAIT_REPLICAS) ----------------------------------------
    def _node_client(self, key: str) -> Any:
        """Return the plain client of the server that holds ``key``."""
        if self.cluster:
            return self.client.get_redis_connection(self.client.get_node_from_key(key))
        return self.client

    def _run_confirmed(self, name: str, keys: list[str], args: list[Any]) -> tuple[Any, int]:
        """Run a script and WAIT for replicas on the same connection, in one round trip;
        return the script's reply and how many replicas confirmed it."""
        with self._translate_errors():
            script = self._script(name)
            for attempt in range(3):
                node = self._node_client(keys[0])
                pipe = node.pipeline(transaction=False)
                pipe.evalsha(script.sha, len(keys), *keys, *args)
                pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
                try:
                    reply, confirmed = pipe.execute()
                    return reply, int(confirmed)
                except redis.exceptions.NoScriptError:
                    node.script_load(script.script)  # a restarted server: load, run again
                except REDIRECTS:
                    if attempt == 2:
                        raise
                    self.client.nodes_manager.initialize()  # the slot moved: learn where
        raise AssertionError("unreachable: the script is loaded")  # pragma: no cover

    async def _arun_confirmed(self, name: str, keys: list[str],
                              args: list[Any]) -> tuple[Any, int]:
        entry = await self._loop_client()
        if entry is None or self.cluster:
            # Only a node's own client can keep the script and WAIT on one connection.
            return await asyncio.to_thread(self._run_confirmed, name, keys, args)
        with self._translate_errors():
            script = entry.scripts[name]
            for _ in range(3):
                pipe = entry.client.pipeline(transaction=False)
                pipe.evalsha(script.sha, len(keys), *keys, *args)
                pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
                try:
                    reply, confirmed = await pipe.execute()
                    return reply, int(confirmed)
                except redis.exceptions.NoScriptError:
                    await entry.client.script_load(script.script)
        raise AssertionError("unreachable: the script was loaded")  # pragma: no cover

    def _unconfirmed(self, name: str, confirmed: int) -> BackendUnavailable:
        return BackendUnavailable(
            f"Only {confirmed} of the {self.wait_replicas} replicas required by WAIT_REPLICAS "
            f"confirmed the lease on {name!r} within {self.wait_timeout_ms} ms at "
            f"{self.address}; a failover could lose it, so it is not reported as held.",
            name=name,
        )

    # --- primitives -------------------------------------------------------------------
    def _acquire_call(self, name: str, token: str, ttl_ms: int, meta: str, grant: str | None,
                      patience_ms: int) -> tuple[list[str], list[Any]]:
        k = self.layout.keys_for(name)
        return (
            [k.lock, k.fence, k.waiters, k.signal, k.index, k.since],
            [token, ttl_ms, meta, name, grant or "", patience_ms],
        )

    def try_acquire(self, name: str, token: str, ttl_ms: int, meta: str, grant: str | None,
                    patience_ms: int) -> Attempt:
        call = self._acquire_call(name, token, ttl_ms, meta, grant, patience_ms)
        if not self.wait_replicas:
            return _attempt(self._run("acquire", *call))
        reply, confirmed = self._run_confirmed("acquire", *call)
        attempt = _attempt(reply)
        if attempt.acquired and confirmed < self.wait_replicas:
            with contextlib.suppress(BackendUnavailable):
                self.release(name, token)  # fail closed: give back what was not confirmed
            raise self._unconfirmed(name, confirmed)
        return attempt

    async def atry_acquire(self, name: str, token: str, ttl_ms: int, meta: str,
                           grant: str | None, patience_ms: int) -> Attempt:
        call = self._acquire_call(name, token, ttl_ms, meta, grant, patience_ms)
        if not self.wait_replicas:
            return _attempt(await self._arun("acquire", *call))
        reply, confirmed = await self._arun_confirmed("acquire", *call)
        attempt = _attempt(reply)
        if attempt.acquired and confirmed < self.wait_replicas:
            with contextlib.suppress(BackendUnavailable):
                await self.arelease(name, token)
            raise self._unconfirmed(name, confirmed)
        return attempt

    def wait_for_turn(self, name: str, timeout: float) -> str | None:
        popped = None
        with self._late_reply_is_no_signal():
            popped = self.direct.command("BLPOP", self.layout.keys_for(name).signal,
                                         _block(timeout))
        return text(popped[1]) if popped else None

    async def await_for_turn(self, name: str, timeout: float) -> str | None:
        entry = await self._loop_client()
        if entry is None:
            return await super().await_for_turn(name, timeout)
        popped = None
        with self._late_reply_is_no_signal():
            popped = await entry.client.blpop([self.layout.keys_for(name).signal],
                                              _block(timeout))
        return text(popped[1]) if popped else None

    @contextmanager
    def _late_reply_is_no_signal(self) -> Iterator[None]:
        """Translate a BLPOP's errors, except a reply later than the socket timeout (a loaded
        server or client): that is "no signal", not an outage. Waiting changes no lock state,
        and the acquire attempt that follows at once finds out whether the server is there
        (raising BackendUnavailable within its own socket timeout if not). A grant popped by
        the late reply is not lost for good: the server takes it back after HANDOFF_GRACE_MS.
        """
        try:
            with self._translate_errors():
                yield
        except BackendUnavailable as exc:
            if not isinstance(exc.__cause__, redis.exceptions.TimeoutError):
                raise

    def _leave_call(self, name: str, token: str) -> tuple[list[str], list[Any]]:
        return [self.layout.keys_for(name).waiters], [token]

    def leave_queue(self, name: str, token: str) -> None:
        self._run("leave_queue", *self._leave_call(name, token))

    async def aleave_queue(self, name: str, token: str) -> None:
        await self._arun("leave_queue", *self._leave_call(name, token))

    def _release_call(self, name: str, token: str, force: bool) -> tuple[list[str], list[Any]]:
        k = self.layout.keys_for(name)
        return (
            [k.lock, k.waiters, k.signal, k.index, k.since],
            [token, name, "1" if force else "0", HANDOFF_GRACE_MS],
        )

    def release(self, name: str, token: str, *, force: bool = False) -> int:
        return int(self._run("release", *self._release_call(name, token, force)))

    async def arelease(self, name: str, token: str, *, force: bool = False) -> int:
        return int(await self._arun("release", *self._release_call(name, token, force)))

    def _extend_call(self, name: str, token: str, ttl_ms: int, renewal: bool,
                     reenter: bool) -> tuple[list[str], list[Any]]:
        k = self.layout.keys_for(name)
        return (
            [k.lock, k.index],
            [token, ttl_ms, name, "1" if renewal else "0", "1" if reenter else "0",
             "" if self.max_renewals is None else self.max_renewals],
        )

    def _extended(self, name: str, outcome: Any) -> bool:
        if outcome == 2:
            raise self.renewal_limit_reached(name)
        return outcome == 1

    def extend(self, name: str, token: str, ttl_ms: int, *, renewal: bool = False,
               reenter: bool = False) -> bool:
        call = self._extend_call(name, token, ttl_ms, renewal, reenter)
        if not self.wait_replicas:
            return self._extended(name, self._run("extend", *call))
        return self._confirmed_extension(name, *self._run_confirmed("extend", *call))

    async def aextend(self, name: str, token: str, ttl_ms: int, *, renewal: bool = False,
                      reenter: bool = False) -> bool:
        call = self._extend_call(name, token, ttl_ms, renewal, reenter)
        if not self.wait_replicas:
            return self._extended(name, await self._arun("extend", *call))
        return self._confirmed_extension(name, *await self._arun_confirmed("extend", *call))

    def _confirmed_extension(self, name: str, reply: Any, confirmed: int) -> bool:
        # An unconfirmed extension leaves the holder its earlier, replicated lease: the lock
        # keeps its token and renewals retry while that lease lasts.
        if reply == 1 and confirmed < self.wait_replicas:
            raise self._unconfirmed(name, confirmed)
        return self._extended(name, reply)

    # --- introspection ----------------------------------------------------------------
    def info(self, name: str) -> LockInfo | None:
        validate_name(name)  # operators pass names by hand: a clear error, not an AttributeError
        return self._lock_info(name, self._run("inspect", [self.layout.keys_for(name).lock], []))

    async def ainfo(self, name: str) -> LockInfo | None:
        validate_name(name)
        reply = await self._arun("inspect", [self.layout.keys_for(name).lock], [])
        return self._lock_info(name, reply)

    def info_many(self, names: list[str]) -> list[LockInfo]:
        replies = self._pipelined(
            "inspect", [([self.layout.keys_for(name).lock], []) for name in names]
        )
        infos = (self._lock_info(name, reply) for name, reply in zip(names, replies, strict=False))
        return [info for info in infos if info is not None]

    def held_names(self, prefix: str = "") -> list[HeldEntry]:
        calls = [([index, since], []) for index, since in
                 zip(self.layout.index_keys, self.layout.since_keys, strict=True)]
        found = [entry for reply in self._pipelined("held_names", calls)
                 for entry in held_entries(reply) if entry.name.startswith(prefix)]
        found.sort()
        return found

    def _pipelined(self, script: str, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        """Run one script many times in one round trip (one per node on a cluster)."""
        if not calls:
            return []
        with self._translate_errors():
            self._script(script)  # registered before the pipeline needs it
            if self.cluster:
                return self._pipelined_per_node(script, calls)
            pipe = self.client.pipeline(transaction=False)
            for keys, args in calls:
                self._scripts[script](keys, args, client=pipe)
            return pipe.execute()

    def _pipelined_per_node(self, script: str,
                            calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        # A cluster pipeline cannot run scripts, so each master gets a plain pipeline of the
        # calls whose keys it holds; a call redirected by a moving slot is sent again
        # through the cluster client, which follows the redirection.
        run = self._scripts[script]
        nodes: dict[str, Any] = {}
        positions: dict[str, list[int]] = defaultdict(list)
        for position, (keys, _) in enumerate(calls):
            node = self.client.get_node_from_key(keys[0])
            nodes[node.name] = node
            positions[node.name].append(position)
        replies: list[Any] = [None] * len(calls)
        for node_name, node_positions in positions.items():
            pipe = self.client.get_redis_connection(nodes[node_name]).pipeline(transaction=False)
            for position in node_positions:
                run(*calls[position], client=pipe)
            for position, reply in zip(node_positions, pipe.execute(raise_on_error=False),
                                       strict=True):
                if isinstance(reply, REDIRECTS):
                    reply = run(*calls[position])
                elif isinstance(reply, Exception):
                    try:
                        raise reply
                    finally:
                        del reply  # no cycle through this frame (see detached.py)
                replies[position] = reply
        return replies

    def _lock_info(self, name: str, reply: list[Any]) -> LockInfo | None:
        if not reply:
            return None
        token, fence, meta, acquired, renewals, depth, pttl, now = reply
        return LockInfo.from_stored(
            name=name, token=text(token), fence=int(fence), meta_json=text(meta),
            acquired_ms=int(acquired), now_ms=int(now), pttl_ms=int(pttl),
            renewals=int(renewals or 0), depth=int(depth or 1), alias=self.alias,
        )

    def close(self) -> None:
        self._close_direct()
        if self._client is not None:
            self._client.close()
            for sentinel in _sentinel_clients(self._client):
                sentinel.close()
            self._client = None
            self._scripts.clear()

    def _close_direct(self) -> None:
        if self._direct is not None:
            self._direct.close()
            self._direct = None


class _LoopClient:
    """An async client and its scripts, for one event loop, closed when that loop shuts down."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.scripts = {name: client.register_script(src) for name, src in SCRIPT_SOURCES.items()}
        self._closer: Any = None

    async def close_with_loop(self) -> None:
        # An async generator started in a loop is finalised by the loop's shutdown_asyncgens()
        # (asyncio.run, asgiref and pytest-asyncio all call it): its ``finally`` then closes
        # the connections while the loop can still run, instead of leaking them.
        self._closer = self._close_at_shutdown()
        await self._closer.__anext__()

    async def _close_at_shutdown(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await self.client.aclose()
            for sentinel in _sentinel_clients(self.client):
                await sentinel.aclose()


def _sentinel_clients(client: Any) -> list[Any]:
    """Return the clients a Sentinel-managed master client asks where the master is (closing
    the master's client leaves them open)."""
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    return list(manager.sentinels) if manager is not None else []


def _attempt(reply: list[Any]) -> Attempt:
    if int(reply[0]) == 1:
        return Attempt(True, fencing_token=int(reply[1]), acquired_ms=int(reply[2]))
    return Attempt(False, holder_pttl_ms=int(reply[1]))


def held_entries(reply: list[Any]) -> list[HeldEntry]:
    """Return the entries of one bucket from HELD_NAMES's reply {index, since}."""
    index, since = reply
    acquired = {text(since[i]): float(since[i + 1]) / 1000 for i in range(0, len(since), 2)}
    entries = []
    for position in range(0, len(index), 2):
        name = text(index[position])
        entries.append(HeldEntry(name, float(index[position + 1]) / 1000,
                                 acquired.get(name, 0.0)))
    return entries


def _block(timeout: float) -> float:
    # BLPOP takes seconds with millisecond resolution; 0 would mean "forever".
    return max(round(timeout, 3), 0.001)


def _service_name(location: str) -> str:
    """Return the Sentinel service named by ``redis://[[user]:password@]SERVICE/DB``."""
    return unquote(urlsplit(location).netloc.rsplit("@", 1)[-1])


def redact(url: str) -> str:
    """Return ``url`` with any password replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return parts._replace(netloc=user + netloc).geturl()

