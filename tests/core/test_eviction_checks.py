"""``manage.py check --deploy`` warns (distlock.W003) of each Redis server whose
maxmemory-policy may evict lock keys, read from INFO on real servers, for every backend that
talks to Redis; ``distlock list`` and the admin say it too."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.core.checks import Warning
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

import distlock
from devkit.configs import distlock_settings
from devkit.memory import evicting
from devkit.redis_server import RedisServer
from distlock import eviction
from distlock.checks import check_eviction
from distlock.handler import locks
from tests.conftest import location_of

REDIS = "distlock.backends.redis.RedisBackend"
EVICTING = [
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
]
HINT = (
    "Set maxmemory-policy to noeviction on that server (redis.conf, or the managed service's "
    "parameter group), or give the locks a Redis of their own with noeviction; see "
    "docs/deployments.md. Add 'distlock.W003' to SILENCED_SYSTEM_CHECKS to accept the risk."
)


@contextmanager
def server_with(settings: Any, *config: str) -> Iterator[RedisServer]:
    """A redis-server started with ``config``, DISTLOCK's default alias on it."""
    server = RedisServer(list(config)).start()
    settings.DISTLOCK, settings.CACHES = distlock_settings("redis", server.url)
    locks.reset()
    try:
        yield server
    finally:
        locks.reset()
        server.stop()


def deploy_check_output(**options: Any) -> str:
    out = io.StringIO()
    call_command("check", "--deploy", stdout=out, stderr=out, **options)
    return out.getvalue()


@pytest.mark.parametrize("policy", EVICTING)
def test_a_policy_that_evicts_is_named_with_the_alias_and_what_to_do(
    settings: Any, policy: str
) -> None:
    with server_with(settings, "--maxmemory", "8mb", "--maxmemory-policy", policy) as server:
        assert check_eviction() == [
            Warning(
                f"DISTLOCK['default']: the Redis server at {server.url} may evict lock keys: "
                f"its maxmemory-policy is {policy!r} with maxmemory 8388608 bytes. When it is "
                "full it deletes keys, lock keys among them, and a second client can then "
                "take a lock whose holder still works under it.",
                hint=HINT,
                id="distlock.W003",
            )
        ]


def test_noeviction_is_silent(settings: Any) -> None:
    with server_with(settings, "--maxmemory", "8mb", "--maxmemory-policy", "noeviction"):
        assert check_eviction() == []


def test_a_server_without_a_memory_limit_evicts_nothing_whatever_its_policy(
    settings: Any,
) -> None:
    with server_with(settings, "--maxmemory", "0", "--maxmemory-policy", "allkeys-lru"):
        assert check_eviction() == []


def test_it_is_a_deploy_check_users_can_silence(settings: Any) -> None:
    with server_with(settings, "--maxmemory", "8mb", "--maxmemory-policy", "volatile-lru"):
        assert "distlock.W003" in deploy_check_output()
        plain = io.StringIO()
        call_command("check", stdout=plain, stderr=plain)
        assert "distlock.W003" not in plain.getvalue()  # it connects: only with --deploy
        settings.SILENCED_SYSTEM_CHECKS = ["distlock.W003"]
        assert "distlock.W003" not in deploy_check_output()


def test_an_unreachable_server_claims_nothing(settings: Any) -> None:
    with server_with(settings, "--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru") as s:
        s.stop()
        started = time.monotonic()
        assert check_eviction() == []
        assert time.monotonic() - started < 5


def test_a_server_that_does_not_answer_holds_the_check_no_longer_than_its_bound(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(eviction, "CHECK_TIMEOUT", 0.5)
    with server_with(settings, "--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru") as s:
        # No socket timeouts in OPTIONS: a stopped server's reply would be awaited forever.
        settings.DISTLOCK = {"default": {"BACKEND": REDIS, "LOCATION": s.url}}
        locks.reset()
        s.pause()
        try:
            started = time.monotonic()
            assert check_eviction() == []
            assert time.monotonic() - started < 3
        finally:
            s.resume()


def servers_of(kind: str, request: pytest.FixtureRequest) -> list[RedisServer]:
    """The servers ``kind``'s locks are kept on (a Cluster's and a Sentinel's replicas
    too: a failover makes them masters)."""
    if kind in ("redis", "django_redis"):
        return [request.getfixturevalue("redis_server")]
    if kind == "redlock3":
        return list(request.getfixturevalue("redlock3_servers"))
    if kind == "cluster":
        return list(request.getfixturevalue("redis_cluster").nodes)
    group = request.getfixturevalue("sentinel_group")
    return [group.master, *group.replicas]


@pytest.mark.parametrize("kind", ["redis", "django_redis", "redlock3", "cluster", "sentinel"])
def test_every_backend_that_talks_to_redis_reads_each_of_its_servers(
    kind: str, request: pytest.FixtureRequest, settings: Any, redis_url: str
) -> None:
    settings.DISTLOCK, settings.CACHES = distlock_settings(
        kind, location_of(kind, request, redis_url)
    )
    locks.reset()
    servers = servers_of(kind, request)
    assert check_eviction() == []
    with evicting(servers, "volatile-ttl"):
        found = check_eviction()
    expected = {"redlock3": 3, "cluster": 3}.get(kind, 1)  # every node, every master
    assert len(found) == expected
    assert all("DISTLOCK['default']" in w.msg and "'volatile-ttl'" in w.msg for w in found)
    if kind in ("redlock3", "cluster"):
        ports = {f":{server.port}" for server in servers}
        assert all(any(port in w.msg for port in ports) for w in found)


def test_distlock_list_says_it_in_its_header(settings: Any) -> None:
    with server_with(settings, "--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru") as s:
        held = distlock.lock("pay:42", ttl=30)
        assert held.acquire()
        out = io.StringIO()
        call_command("distlock", "list", stdout=out)
        server, header, *rest = out.getvalue().splitlines()  # which server answered, first
        assert server.startswith("DISTLOCK['default']: ")
        assert header.startswith("Warning: DISTLOCK['default'] is on a Redis that may evict")
        assert f"{s.url} (allkeys-lru)" in header
        assert any("pay:42" in line for line in rest)
        as_json, errors = io.StringIO(), io.StringIO()
        call_command("distlock", "list", "--json", stdout=as_json, stderr=errors)
        assert as_json.getvalue().startswith("[")  # the JSON stays JSON
        assert "may evict" in errors.getvalue()
        held.release()


@pytest.mark.django_db
def test_the_admin_shows_it_above_the_held_locks(settings: Any, admin_client: Client) -> None:
    with server_with(settings, "--maxmemory", "8mb", "--maxmemory-policy", "volatile-lru") as s:
        page = admin_client.get(reverse("admin:distlock_heldlock_changelist"))
        assert f"{s.url} (volatile-lru)" in page.content.decode()
    with server_with(settings, "--maxmemory", "8mb", "--maxmemory-policy", "noeviction"):
        page = admin_client.get(reverse("admin:distlock_heldlock_changelist"))
        assert "may evict" not in page.content.decode()
