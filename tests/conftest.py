"""Fixtures: real redis-server processes on free loopback ports, and DISTLOCK pointed at them.

``backend_kind`` runs a test once per backend in BACKENDS (the contract suite); tests that
need a Redis server of their own (to stop or pause it) take ``private_redis``.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devkit.configs import distlock_settings
from devkit.processes import Start, started_processes
from devkit.redis_server import RedisServer
from distlock.handler import locks
from tests.support import django_redis_pools
from tests.support.lock_helpers import contenders

# A test's CACHES (and its pool options) end with the test: see django_redis_pools.
django_redis_pools.connect()


def chosen(kinds: list[str]) -> list[str]:
    """Return the backend kinds of ``kinds`` that DISTLOCK_TEST_BACKENDS names (a comma-separated
    list; unset: all of them), so that the quick loop (scripts/test-quick) can run the
    contract on one backend."""
    wanted = os.environ.get("DISTLOCK_TEST_BACKENDS", "")
    if not wanted.strip():
        return kinds
    names = {name.strip() for name in wanted.split(",")}
    return [kind for kind in kinds if kind in names]


BACKENDS = chosen(
    ["redis", "django_redis", "locmem", "redlock3", "redlock5", "cluster", "sentinel"]
)
# The contract suite's backends: every backend fair (the default), and non-fair (the alias's
# OPTIONS['FAIR'] False) where the non-fair mode has code of its own: the one-server scripts
# (django-redis and Sentinel run them as one server does), a Cluster (its waiters block on
# their master's own client) and the in-memory store (Redlock has none: CONTRACT "Fair and
# non-fair locks").
NON_FAIR = "-non-fair"
CONTRACT_BACKENDS = [
    *BACKENDS,
    *(kind + NON_FAIR for kind in chosen(["redis", "locmem", "cluster"])),
]
# Backends whose locks live in a server that other processes share.
SHARED_BACKENDS = chosen(["redis", "django_redis", "redlock3", "cluster"])
# Backends that keep every kind of lock: exclusive, shared and semaphore (Redlock keeps only
# the exclusive kind, and refuses the others saying what to use).
EVERY_KIND_BACKENDS = chosen(["redis", "django_redis", "locmem", "cluster", "sentinel"])


@pytest.fixture
def processes() -> Iterator[Start]:
    """``start(command, env=None, **options)``: start a process the one way
    (devkit.processes.start_process, env from child_env); each is ended after the test."""
    with started_processes() as start:
        yield start


QueueThreads = Callable[..., list[threading.Thread]]


@pytest.fixture
def queue_threads() -> QueueThreads:
    """``queue_threads(*targets)``: start a thread running each target, each once the one
    before it has queued for its lock (``lock_contended``: no sleep), so that they queue in
    the targets' order; return the threads, for the test to join."""

    def start(*targets: Callable[[], Any]) -> list[threading.Thread]:
        threads = []
        for target in targets:
            thread = threading.Thread(target=target)
            with contenders(1) as queued:
                thread.start()
                queued()
            threads.append(thread)
        return threads

    return start


async def ahandoff_delay(holder: Any, waiter: Any, settle: float = 0.2) -> float:
    """Async twin of tests.support.lock_helpers.handoff_delay: let ``waiter`` wait in a task
    for ``settle`` seconds, release ``holder``, and return how long after the release the
    waiter held the lock (it releases it then)."""
    task = asyncio.create_task(waiter.aacquire(wait=5))
    await asyncio.sleep(settle)
    released = time.monotonic()
    await holder.arelease()
    assert await task, f"the waiter never got {waiter.name!r}"
    delay = time.monotonic() - released
    await waiter.arelease()
    return delay


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    redis_server.flushall()
    return redis_server.url


def location_of(
    kind: str, request: pytest.FixtureRequest, redis_url: str, flush: bool = True
) -> str:
    from devkit.topologies import location_of  # a plugin: imported by pytest_plugins first

    return location_of(kind, request, redis_url, flush=flush)


def _use(settings: Any, kind: str, url: str, fair: bool = True) -> None:
    settings.DISTLOCK, settings.CACHES = distlock_settings(kind, url)
    if not fair:
        default = settings.DISTLOCK["default"]
        default["OPTIONS"] = {**default.get("OPTIONS", {}), "FAIR": False}
    locks.reset()


@pytest.fixture(params=BACKENDS)
def backend_kind(request: pytest.FixtureRequest, settings: Any, redis_url: str) -> str:
    """Point the default alias at each backend in turn."""
    return use_backend(settings, request, redis_url, request.param)


@pytest.fixture(params=CONTRACT_BACKENDS)
def contract_backend(request: pytest.FixtureRequest, settings: Any, redis_url: str) -> str:
    """Point the default alias at each backend in turn, in each mode it has (see
    CONTRACT_BACKENDS); return the backend's kind."""
    return use_backend(settings, request, redis_url, request.param)


def use_backend(settings: Any, request: pytest.FixtureRequest, redis_url: str, backend: str) -> str:
    """Point the default alias at ``backend``, a kind of BACKENDS or one of CONTRACT_BACKENDS'
    non-fair modes; return its kind."""
    kind = backend.removesuffix(NON_FAIR)
    _use(settings, kind, location_of(kind, request, redis_url), fair=kind == backend)
    return kind


@pytest.fixture(params=chosen(["redis", "locmem"]))
def non_fair_backend(request: pytest.FixtureRequest, settings: Any, redis_url: str) -> str:
    """Point the default alias at each backend with a non-fair mode of its own (FAIR left
    at True: the tests ask with fair=False)."""
    _use(settings, request.param, redis_url)
    return request.param


@pytest.fixture(params=SHARED_BACKENDS)
def shared_backend_kind(request: pytest.FixtureRequest, settings: Any, redis_url: str) -> str:
    """Point the default alias at each backend that other processes can share."""
    return use_backend(settings, request, redis_url, request.param)


@pytest.fixture(params=EVERY_KIND_BACKENDS)
def every_kind_backend(request: pytest.FixtureRequest, settings: Any, redis_url: str) -> str:
    """Point the default alias at each backend that keeps shared locks and semaphores."""
    return use_backend(settings, request, redis_url, request.param)


@pytest.fixture(params=["redis", "locmem"])
def lock_backend(request: pytest.FixtureRequest, settings: Any, redis_url: str) -> str:
    """Point the default alias at a Redis server's backend, then at the in-memory one (each
    has code of its own for the transaction rules that take this fixture)."""
    return use_backend(settings, request, redis_url, request.param)


@pytest.fixture
def backend_location(
    shared_backend_kind: str, request: pytest.FixtureRequest, redis_url: str
) -> str:
    """The location (devkit.configs) of the shared backend the test runs against."""
    return location_of(shared_backend_kind, request, redis_url, flush=False)


@pytest.fixture
def redis_backend(settings: Any, redis_url: str) -> str:
    _use(settings, "redis", redis_url)
    return redis_url


@pytest.fixture
def private_redis(settings: Any) -> Iterator[RedisServer]:
    """A redis-server of this test's own, free to stop, kill or pause; DISTLOCK points at it."""
    server = RedisServer().start()
    _use(settings, "redis", server.url)
    yield server
    server.resume()
    server.stop()
    locks.reset()


@pytest.fixture
def nodes(settings: Any) -> Iterator[list[RedisServer]]:
    """Three redis-servers of this test's own, for a Redlock. DISTLOCK has two aliases on
    them, "default" and "other", with backends of their own: two clients that do not share
    what they know (which nodes failed), as two processes would not."""
    servers: list[RedisServer] = []
    try:
        for _ in range(3):
            servers.append(RedisServer().start())
        config = distlock_settings("redlock3", ",".join(s.url for s in servers))[0]["default"]
        settings.DISTLOCK = {"default": config, "other": config}
        locks.reset()
        yield servers
    finally:
        for alias in ("default", "other"):
            locks[alias].close()
        for server in servers:
            server.resume()
            server.stop()
        locks.reset()


pytest_plugins = [
    "devkit.browser",
    "devkit.database_fixtures",
    "devkit.node",
    "devkit.ruby",
    "devkit.topologies",
]


# Django's live server closes the test database's connection in each request thread as the
# browser drops its keep-alive sockets. Seen once in the middle leg (Django 6.0), at the end of
# a browser test: that close found the shared in-memory SQLite connection no longer shared
# ("DatabaseWrapper objects created in a thread can only be used in that same thread"), and
# the request sockets were left to the garbage collector. Django's harness, after the page had
# answered: ignored in the browser tests only, which still fail on any error in the page.
LIVE_SERVER_TEARDOWN = (
    r"ignore:Exception in thread .*\(process_request_thread\)"
    r":pytest.PytestUnhandledThreadExceptionWarning",
    r"ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("browser") is not None:
            for rule in LIVE_SERVER_TEARDOWN:
                item.add_marker(pytest.mark.filterwarnings(rule))
