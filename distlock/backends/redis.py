"""RedisBackend: locks on one Redis server, a Redis Cluster, or a Sentinel-managed master.

Settings are parsed in distlock.backends.redis_settings; the operations, their scripts and
how they run are in distlock.backends.redis_ops. This module builds the clients: a sync one,
and an async one per event loop.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.retry
import redis.sentinel
from redis.backoff import NoBackoff

from .base import BaseLockBackend
from .redis_ops.backend import ScriptedBackend
from .redis_settings import OWN_OPTIONS, RedisSettings, parse_settings
from .settings import Problems


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
            self.alias, params.get("LOCATION"), self.options, problems
        )
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
                self.settings.service_name,
                db=int(parts.path.strip("/") or 0),
                **credentials,
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

    async def async_client(self) -> Any:
        """Return this event loop's async client (redis.asyncio connections are loop-bound)."""
        loop = asyncio.get_running_loop()
        entry = self._async.get(loop)
        if entry is None:
            entry = self._async[loop] = _LoopClient(self.build_client(redis.asyncio))
            await entry.close_with_loop(functools.partial(self._forget_loop, loop))
        return entry.client

    def _forget_loop(self, loop: Any) -> None:
        # The client's connections refer to their loop, so the weak key alone would never
        # let go: each async_to_sync call from sync code (a new loop each) kept a client,
        # a pool and a closed loop. Forgotten as the loop shuts down.
        self._async.pop(loop, None)

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

    async def close_with_loop(self, forget: Callable[[], None]) -> None:
        # An async generator started in a loop is finalised by the loop's shutdown_asyncgens()
        # (asyncio.run, asgiref and pytest-asyncio all call it): its ``finally`` then closes
        # the connections while the loop can still run, instead of leaking them, and has
        # the backend forget this loop's client.
        self._closer = self._close_at_shutdown(forget)
        await self._closer.__anext__()

    async def _close_at_shutdown(self, forget: Callable[[], None]) -> AsyncIterator[None]:
        try:
            yield
        finally:
            forget()
            try:
                await _aclose(self.client)
                for sentinel in _sentinel_clients(self.client):
                    await _aclose(sentinel)
            finally:
                self._closer = None  # the generator itself: no cycle left behind


async def _aclose(client: Any) -> None:
    # aclose() arrived in redis-py 5.0.1; close() before it (deprecated since).
    close = getattr(client, "aclose", None) or client.close
    await close()


def _sentinel_clients(client: Any) -> list[Any]:
    """Return the clients a Sentinel-managed master client asks where the master is (closing
    the master's client leaves them open)."""
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    return list(manager.sentinels) if manager is not None else []
