"""DISTLOCK and CACHES settings for each backend kind the tests run against."""

from __future__ import annotations

import uuid
from typing import Any

SOCKET_TIMEOUT = 1.0
# The Sentinel service name of devkit.redis_server.RedisSentinelGroup.
SENTINEL_SERVICE = "distlock"


def distlock_settings(kind: str, url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return (DISTLOCK, CACHES) for one backend kind against the servers at ``url``.

    ``url`` is a Redis URL, except for "redlock3"/"redlock5" (the nodes' URLs, comma
    separated) and "sentinel" (the sentinels' ``host:port``, comma separated).
    """
    caches = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": url,
            "OPTIONS": {"SOCKET_TIMEOUT": SOCKET_TIMEOUT, "SOCKET_CONNECT_TIMEOUT": SOCKET_TIMEOUT},
        }
    }
    options = {"socket_timeout": SOCKET_TIMEOUT, "socket_connect_timeout": SOCKET_TIMEOUT}
    redis_backend = "distlock.backends.redis.RedisBackend"
    backends = {
        "redis": {"BACKEND": redis_backend, "LOCATION": url, "OPTIONS": options},
        "django_redis": {
            "BACKEND": "distlock.backends.django_redis.DjangoRedisBackend",
            "OPTIONS": {"CACHE": "default"},
        },
        "locmem": {
            "BACKEND": "distlock.backends.locmem.LocMemBackend",
            "LOCATION": uuid.uuid4().hex,
        },
    }
    if kind.startswith("redlock"):
        backends[kind] = {
            "BACKEND": "distlock.backends.redlock.RedlockBackend",
            "LOCATION": url.split(","),
            "OPTIONS": options,
        }
    elif kind == "cluster":
        backends[kind] = {
            "BACKEND": redis_backend,
            "LOCATION": url,
            "OPTIONS": {**options, "CLUSTER": True},
        }
    elif kind == "sentinel":
        sentinels = [
            (host, int(port))
            for host, port in (address.rsplit(":", 1) for address in url.split(","))
        ]
        backends[kind] = {
            "BACKEND": redis_backend,
            "LOCATION": f"redis://{SENTINEL_SERVICE}/0",
            "OPTIONS": {**options, "SENTINELS": sentinels},
        }
    return {"default": {**backends[kind], "KEY_PREFIX": "test"}}, caches


def with_alias_down(url: str, down_url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return (DISTLOCK, CACHES): "default" on the Redis at ``url`` and "down" on the one at
    ``down_url`` (the test stops it), under another key prefix."""
    aliases, caches = distlock_settings("redis", url)
    down = {**aliases["default"], "LOCATION": down_url, "KEY_PREFIX": "down"}
    return {**aliases, "down": down}, caches
