"""DjangoRedisBackend: locks on the connection pool of a django-redis cache alias."""

from __future__ import annotations

from typing import Any

from ..exceptions import InvalidLockBackendError
from .base import BaseLockBackend
from .redis_ops.backend import ScriptedBackend
from .settings import Problems


class DjangoRedisBackend(ScriptedBackend):
    """Share the Redis client of ``CACHES[OPTIONS['CACHE']]`` (a django-redis cache).

    No second pool is opened, and each call gives its connection back to the cache's pool
    before it returns. django-redis has no async client, so the async methods run the sync
    ones in a worker thread.
    """

    own_options = BaseLockBackend.own_options | {"CACHE"}

    def configure(self, params: dict[str, Any], problems: Problems) -> None:
        super().configure(params, problems)
        self.cache_alias = problems.parse(self._parse_cache_alias, "default")
        self.location = f"django-redis cache {self.cache_alias!r}"
        cache_options = settings_caches().get(self.cache_alias, {}).get("OPTIONS", {})
        socket_timeout = cache_options.get("SOCKET_TIMEOUT")
        if isinstance(socket_timeout, (int, float)) and socket_timeout > 0:
            self.max_block = min(self.max_block, socket_timeout / 2)

    def _parse_cache_alias(self) -> str:
        cache_alias = self.options.get("CACHE", "default")
        caches = settings_caches()
        config = caches.get(cache_alias, {}) if isinstance(cache_alias, str) else {}
        backend = str(config.get("BACKEND", ""))
        if not backend.startswith("django_redis."):
            raise InvalidLockBackendError(
                f"DISTLOCK[{self.alias!r}] uses CACHES[{cache_alias!r}], which is not a "
                "django-redis cache.",
                check_id="distlock.E005",
                hint="Set OPTIONS={'CACHE': '<alias>'} to a cache whose BACKEND is "
                "'django_redis.cache.RedisCache', or use distlock.backends.redis.RedisBackend.",
            )
        return str(cache_alias)

    @property
    def client(self) -> Any:
        # django-redis keeps one client per cache alias (and per thread with its default
        # connection factory); asking each time follows it when settings change.
        from django_redis import get_redis_connection

        return get_redis_connection(self.cache_alias)

    @property
    def address(self) -> str:
        kwargs = self.client.connection_pool.connection_kwargs
        where = kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}"
        return f"{where} (cache {self.cache_alias!r})"


def settings_caches() -> dict[str, Any]:
    from django.conf import settings

    return getattr(settings, "CACHES", {})
