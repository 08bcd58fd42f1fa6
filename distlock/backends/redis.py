"""RedisBackend: locks on one Redis server, a Redis Cluster, or a Sentinel-managed master.

Settings are parsed in distlock.backends.redis_settings, the scripts' calls and replies live
in distlock.backends.calls, and the sync operations in ScriptedBackend; this module builds
the clients (sync, and one async client per event loop) and runs the async twins natively.
"""
from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.retry
import redis.sentinel
from redis.backoff import NoBackoff

from ..exceptions import BackendUnavailable
from ..info import LockInfo
from ..names import validate_name
from . import calls
from .base import Attempt, BaseLockBackend
from .calls import SCRIPT_SHAS, SCRIPT_SOURCES, held_entries, text
from .problems import Problems
from .redis_settings import OWN_OPTIONS, RedisSettings, parse_settings, redact
from .scripted import CLIENT_ERRORS, ScriptedBackend

__all__ = ["SCRIPT_SOURCES", "RedisBackend", "held_entries", "redact", "text"]


class RedisBackend(ScriptedBackend):
    """Locks on Redis: standalone (default), ``OPTIONS['CLUSTER']`` or ``OPTIONS['SENTINELS']``.

    ``OPTIONS['WAIT_REPLICAS']`` (with ``WAIT_TIMEOUT`` in ms) makes every acquire and extend
    wait, in the same round trip, until that many replicas confirmed the write; when fewer
    do, an acquire is undone and BackendUnavailable raised (fail closed).
    """

    own_options = BaseLockBackend.own_options | OWN_OPTIONS

    def configure(self, params: dict[str, Any], problems: Problems) -> None:
        super().configure(params, problems)
        self.settings: RedisSettings = parse_settings(
            self.alias, params.get("LOCATION"), self.options, problems)
        self.location = self.settings.location
        self.cluster = self.settings.cluster
        self.sentinels = self.settings.sentinels
        self.client_options = self.settings.client_options
        self.wait_replicas = self.settings.wait_replicas
        self.wait_timeout_ms = self.settings.wait_timeout_ms
        self._client: Any = None
        self._client_guard = threading.Lock()
        self._async: weakref.WeakKeyDictionary[Any, _LoopClient] = weakref.WeakKeyDictionary()
        timeout = self.client_options.get("socket_timeout")
        if timeout:
            # A blocking read must return before the socket gives up on it.
            self.max_block = min(self.max_block, timeout / 2)

    @property
    def address(self) -> str:
        return self.settings.address

    # --- clients ------------------------------------------------------------------------
    def build_client(self, module: Any = redis) -> Any:
        """Return a new redis-py client (sync with ``module=redis``, async with
        ``redis.asyncio``) for these settings. It never replays a failed call on its own: a
        retried acquire must be decided by distlock, not repeated blindly."""
        options = self.client_options
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
                sentinel_kwargs=self.settings.sentinel_kwargs,
                **options,
            )
            return sentinel.master_for(
                self.settings.service_name, db=int(parts.path.strip("/") or 0), **credentials,
            )
        return module.Redis.from_url(self.location, **options)

    @property
    def client(self) -> Any:
        client = self._client
        if client is None:
            with self._client_guard:  # one pool per backend, however many threads start
                if self._client is None:
                    self._client = self.build_client()
                client = self._client
        return client

    async def _loop_client(self) -> _LoopClient:
        """Return this event loop's async client (redis.asyncio connections are loop-bound)."""
        loop = asyncio.get_running_loop()
        entry = self._async.get(loop)
        if entry is None:
            entry = self._async[loop] = _LoopClient(self.build_client(redis.asyncio))
            await entry.close_with_loop()
        return entry

    async def arun_script(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Async twin of run_script()."""
        client = (await self._loop_client()).client
        with self._translate_errors():
            try:
                return await client.evalsha(SCRIPT_SHAS[name], len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                return await client.eval(SCRIPT_SOURCES[name], len(keys), *keys, *args)

    async def _arun_confirmed(self, name: str, keys: list[str],
                              args: list[Any]) -> tuple[Any, int]:
        if self.cluster:
            # Only a node's own client can keep the script and WAIT on one connection.
            return await asyncio.to_thread(self.run_confirmed, name, keys, args)
        client = (await self._loop_client()).client
        with self._translate_errors():
            for _ in range(2):
                pipe = client.pipeline(transaction=False)
                pipe.evalsha(SCRIPT_SHAS[name], len(keys), *keys, *args)
                pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
                try:
                    reply, confirmed = await pipe.execute()
                    return reply, int(confirmed)
                except redis.exceptions.NoScriptError:
                    await client.script_load(SCRIPT_SOURCES[name])
        raise AssertionError("unreachable: the script was loaded")  # pragma: no cover

    # --- async twins of the primitives ----------------------------------------------------
    async def atry_acquire(self, name: str, token: str, ttl_ms: int, meta: str,
                           grant: str | None, patience_ms: int) -> Attempt:
        return await self._aacquire(name, token, calls.acquire_call(
            self.layout, name, token, ttl_ms, meta, patience_ms))

    async def _aacquire(self, name: str, token: str, call: calls.Call) -> Attempt:
        if not self.wait_replicas:
            return calls.attempt_from(await self.arun_script("acquire", *call))
        return await self._aconfirmed_attempt(name, token,
                                              *await self._arun_confirmed("acquire", *call))

    async def _aconfirmed_attempt(self, name: str, token: str, reply: Any,
                                  confirmed: int) -> Attempt:
        attempt = calls.attempt_from(reply)
        if attempt.acquired and confirmed < self.wait_replicas:
            with contextlib.suppress(BackendUnavailable):
                await self.arelease(name, token)
            raise self._unconfirmed(name, confirmed)
        return attempt

    async def await_and_acquire(self, timeout: float, name: str, token: str, ttl_ms: int,
                                meta: str, patience_ms: int) -> Attempt:
        """Async twin of wait_and_acquire() (ScriptedBackend)."""
        call = calls.acquire_call(self.layout, name, token, ttl_ms, meta, patience_ms,
                                  waited=True)
        sent = time.monotonic()
        replies = await self.apop_then_run(calls.wake_key(self.layout, name, token), timeout,
                                           "acquire", call, confirm=bool(self.wait_replicas))
        if replies is None:
            await self.arelease(name, token)  # see _late()
            return Attempt(False)
        if any(isinstance(reply, Exception) for reply in replies):
            del replies  # no cycle through this frame (see detached.py)
            attempt = await self._aacquire(name, token, call)
        elif self.wait_replicas:
            attempt = await self._aconfirmed_attempt(name, token, replies[1], int(replies[2]))
        else:
            attempt = calls.attempt_from(replies[1])
        return attempt._replace(sent=sent)

    async def apop_then_run(self, wake: str, timeout: float, name: str, call: calls.Call, *,
                            confirm: bool = False) -> list[Any] | None:
        """Async twin of pop_then_run() (ScriptedBackend), on this loop's client."""
        if self.cluster:  # a node's own client pipelines BLPOP and the script together
            return await asyncio.to_thread(self.pop_then_run, wake, timeout, name, call,
                                           confirm=confirm)
        keys, args = call
        client = (await self._loop_client()).client
        try:
            pipe = client.pipeline(transaction=False)
            pipe.blpop([wake], calls.block_seconds(timeout))
            pipe.evalsha(SCRIPT_SHAS[name], len(keys), *keys, *args)
            if confirm:
                pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        except redis.exceptions.TimeoutError:
            return None
        except CLIENT_ERRORS as exc:
            raise self._unavailable(exc) from exc
        return replies

    async def await_for_turn(self, name: str, timeout: float) -> str | None:
        client = (await self._loop_client()).client
        try:
            popped = await client.blpop([self.layout.keys_for(name).signal],
                                        calls.block_seconds(timeout))
        except CLIENT_ERRORS as exc:
            self._unless_late(exc)
            return None
        return text(popped[1]) if popped else None

    async def aleave_queue(self, name: str, token: str) -> None:
        await self.arun_script("leave_queue", *calls.leave_call(self.layout, name, token))

    async def arelease(self, name: str, token: str, *, every_level: bool = False) -> int:
        call = calls.release_call(self.layout, name, token, every_level)
        return int(await self.arun_script("release", *call))

    async def aextend(self, name: str, token: str, ttl_ms: int, *, renewal: bool = False,
                      reenter: bool = False) -> bool:
        call = calls.extend_call(self.layout, name, token, ttl_ms, renewal, reenter,
                                 self.max_renewals)
        if not self.wait_replicas:
            return self._extended(name, await self.arun_script("extend", *call))
        return self._confirmed_extension(name, *await self._arun_confirmed("extend", *call))

    async def ainfo(self, name: str) -> LockInfo | None:
        validate_name(name)
        reply = await self.arun_script("inspect", *calls.inspect_call(self.layout, name))
        return calls.lock_info_from(self.alias, name, reply)

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()
            for sentinel in _sentinel_clients(client):
                sentinel.close()


class _LoopClient:
    """An async client for one event loop, closed when that loop shuts down."""

    def __init__(self, client: Any) -> None:
        self.client = client
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
            await _aclose(self.client)
            for sentinel in _sentinel_clients(self.client):
                await _aclose(sentinel)


async def _aclose(client: Any) -> None:
    # aclose() arrived in redis-py 5.0.1; close() before it (deprecated since).
    close = getattr(client, "aclose", None) or client.close
    await close()


def _sentinel_clients(client: Any) -> list[Any]:
    """Return the clients a Sentinel-managed master client asks where the master is (closing
    the master's client leaves them open)."""
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    return list(manager.sentinels) if manager is not None else []
