"""Which server answered: what a Redis (or Valkey) server says of itself, for operators
(``manage.py distlock status``, the first line of ``distlock list``, the deploy check).

Read from ``INFO server``, ``INFO replication`` and ``INFO memory`` in one round trip after
a timed PING, never ``CONFIG GET``: managed services often refuse it to clients.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis


@dataclass(frozen=True)
class ServerReport:
    """One server: what it is and how it answered, or why it did not."""

    address: str
    product: str = ""  # "Redis" or "Valkey"
    version: str = ""
    role: str = ""  # "master" or "slave", as INFO replication says
    policy: str = ""  # maxmemory-policy
    maxmemory: int = 0  # bytes; 0: no limit
    latency_ms: float = 0.0  # one PING's round trip
    error: str = ""  # the server did not answer: nothing else is known of it

    def describe(self) -> str:
        """Return one line for people: what answered at the address, or why nothing did."""
        if self.error:
            return f"{self.address}: no answer ({self.error})"
        limit = f"maxmemory {self.maxmemory} bytes" if self.maxmemory else "no maxmemory"
        return (
            f"{self.address}: {self.product} {self.version}, role {self.role}, "
            f"maxmemory-policy {self.policy} ({limit}), latency {self.latency_ms:.1f} ms"
        )

    def as_json_dict(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "product": self.product or None,
            "version": self.version or None,
            "role": self.role or None,
            "maxmemory_policy": self.policy or None,
            "maxmemory": None if self.error else self.maxmemory,
            "latency_ms": None if self.error else round(self.latency_ms, 3),
            "error": self.error or None,
        }


def read_server(client: Any, address: str) -> ServerReport:
    """Return what the server of ``client`` (a plain redis-py client) says of itself; a
    report with ``error`` when it does not answer."""
    try:
        started = time.perf_counter()
        client.ping()
        latency_ms = (time.perf_counter() - started) * 1000
        pipe = client.pipeline(transaction=False)
        pipe.info("server")
        pipe.info("replication")
        pipe.info("memory")
        server, replication, memory = pipe.execute()
    except (redis.RedisError, OSError) as exc:
        return ServerReport(address, error=f"{type(exc).__name__}: {exc}")
    # Valkey says so in server_name (8.0 and later) or valkey_version (7.2 and later); its
    # redis_version is the Redis version it is compatible with (7.2.4), not its own.
    valkey = server.get("server_name") == "valkey" or "valkey_version" in server
    return ServerReport(
        address,
        product="Valkey" if valkey else "Redis",
        version=str(server.get("valkey_version" if valkey else "redis_version", "?")),
        role=str(replication.get("role", "?")),
        policy=str(memory.get("maxmemory_policy", "?")),
        maxmemory=int(memory.get("maxmemory", 0)),
        latency_ms=latency_ms,
    )
