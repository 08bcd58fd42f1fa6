"""Lock servers for the multi-server backends: started once per test session, and only when
a test asks for that kind (so a run that selects none of them starts none)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devkit.redis_server import RedisCluster, RedisSentinelGroup, RedisServer

# The backend kinds of devkit.configs that need servers of their own, and their fixtures.
TOPOLOGY_FIXTURES = {
    "redlock3": "redlock3_servers",
    "redlock5": "redlock5_servers",
    "cluster": "redis_cluster",
    "sentinel": "sentinel_group",
}


def _independent_servers(count: int) -> Iterator[list[RedisServer]]:
    servers: list[RedisServer] = []
    try:
        for _ in range(count):
            servers.append(RedisServer().start())
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture(scope="session")
def redlock3_servers() -> Iterator[list[RedisServer]]:
    yield from _independent_servers(3)


@pytest.fixture(scope="session")
def redlock5_servers() -> Iterator[list[RedisServer]]:
    yield from _independent_servers(5)


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    with RedisCluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def sentinel_group() -> Iterator[RedisSentinelGroup]:
    with RedisSentinelGroup() as group:
        yield group


def location_of(
    kind: str, request: pytest.FixtureRequest, redis_url: str, flush: bool = True
) -> str:
    """Return the location devkit.configs.distlock_settings takes for ``kind``, its servers
    started (once) and, with ``flush``, emptied."""
    if kind not in TOPOLOGY_FIXTURES:
        return redis_url
    servers = request.getfixturevalue(TOPOLOGY_FIXTURES[kind])
    if kind == "cluster":
        nodes, location = servers.nodes, servers.urls[0]
    elif kind == "sentinel":
        nodes = [servers.master]  # the replica follows
        location = ",".join(f"{host}:{port}" for host, port in servers.sentinels)
    else:
        nodes, location = servers, ",".join(server.url for server in servers)
    for node in nodes if flush else []:
        node.flushall()
    return location
