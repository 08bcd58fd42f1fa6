"""distlock talks to Redis only through redis-py's public API, and never keeps a connection
of a pool it shares (a django-redis cache's) checked out between calls.

Whatever redis-py does on its own path (reconnecting, reloading nothing, fork safety, its
pool limits) then holds for distlock's calls too; the tests below check the cases that bit
a library driving sockets itself.
"""

from __future__ import annotations

import ast
import asyncio
import os
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.core.cache import caches

import distlock
from devkit.configs import distlock_settings
from distlock.handler import locks

pytestmark = pytest.mark.django_db(databases=[])

PACKAGE = Path(distlock.__file__).parent
# Reading the host name for a holder's metadata is the one use of the socket module allowed.
ALLOWED_SOCKET_CALLS = {"gethostname"}
SOCKET_MODULES = {"socket", "select", "selectors", "ssl"}
# (Not .send(): Django's signals have one.)
IO_METHODS = {"recv", "recv_into", "recvfrom", "sendall", "sendto", "readv", "writev", "makefile"}
# Names with an underscore that are public by documentation (named tuples' methods).
DOCUMENTED = {"_replace", "_asdict", "_fields", "_make"}
OS_IO = {"read", "write", "readv", "writev", "pread", "pwrite", "sendfile"}
# Names that redis-py happens to define too, read here off another library's objects: the
# module that reads each, and whose the name is. transactions.py reads asgiref's
# CurrentThreadExecutor._broken (a task that outlived its async_to_sync call; checked by
# distlock.E010), never a redis-py object's.
NOT_REDIS_PY = {"distlock/transactions.py": {"_broken"}}


# --- acceptance 2: no private names of redis-py or hiredis, no socket I/O ---------------
def _private_names(*modules: Any) -> set[str]:
    """Every private (single-underscore) attribute name the classes of ``modules`` define."""
    import inspect
    import pkgutil

    names: set[str] = set()
    for module in modules:
        found = [module]
        for info in pkgutil.walk_packages(getattr(module, "__path__", []), module.__name__ + "."):
            try:
                found.append(__import__(info.name, fromlist=["_"]))
            except Exception:  # optional parts (ocsp, ...) need packages not installed
                continue
        for mod in found:
            for _, member in inspect.getmembers(mod, inspect.isclass):
                for klass in member.__mro__:
                    names |= {
                        name
                        for name in vars(klass)
                        if name.startswith("_") and not name.startswith("__")
                    }
                    init = vars(klass).get("__init__")
                    code = getattr(init, "__code__", None)
                    if code is not None:
                        names |= {
                            n for n in code.co_names if n.startswith("_") and not n.startswith("__")
                        }
    return names


def _redis_private_names() -> set[str]:
    modules: list[Any] = [redis]
    try:
        import hiredis

        modules.append(hiredis)
    except ImportError:
        pass
    return _private_names(*modules)


def violations(source: str, private: set[str]) -> list[str]:
    """Return what ``source`` does that only redis-py's or hiredis's internals or a socket
    of our own would do."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[0] in ("redis", "hiredis") and any(p.startswith("_") for p in parts):
                found.append(f"{where}: imports {node.module}")
            if parts[0] in ("redis", "hiredis"):
                found += [
                    f"{where}: imports {alias.name} from {node.module}"
                    for alias in node.names
                    if alias.name.startswith("_")
                ]
            if parts[0] in SOCKET_MODULES:
                found.append(f"{where}: imports from {node.module}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in ("redis", "hiredis") and any(p.startswith("_") for p in parts):
                    found.append(f"{where}: imports {alias.name}")
                if parts[0] in ("select", "selectors", "ssl"):
                    found.append(f"{where}: imports {alias.name}")
        elif isinstance(node, ast.Attribute):
            base = node.value
            is_self = isinstance(base, ast.Name) and base.id in ("self", "cls")
            if node.attr in private - DOCUMENTED and not is_self:
                found.append(f"{where}: uses the private name {node.attr}")
            if node.attr in IO_METHODS:
                found.append(f"{where}: calls .{node.attr}() (socket I/O)")
            if (
                isinstance(base, ast.Name)
                and base.id == "socket"
                and (node.attr not in ALLOWED_SOCKET_CALLS)
            ):
                found.append(f"{where}: uses socket.{node.attr}")
            if isinstance(base, ast.Name) and base.id == "os" and node.attr in OS_IO:
                found.append(f"{where}: uses os.{node.attr} (descriptor I/O)")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and (node.func.id in ("getattr", "setattr", "hasattr"))
            and len(node.args) >= 2
        ):
            name = node.args[1]
            if (
                isinstance(name, ast.Constant)
                and isinstance(name.value, str)
                and (name.value in private)
            ):
                found.append(f"{where}: {node.func.id}(..., {name.value!r})")
    return found


@pytest.fixture(scope="module")
def redis_private() -> set[str]:
    names = _redis_private_names()
    assert {"_sock", "_parser"} <= names  # the scan knows what it looks for
    return names


def test_the_scan_catches_what_the_old_socket_path_did(redis_private: set[str]) -> None:
    old = (
        "from redis._parsers import BaseParser\n"
        "import select\n"
        "def f(connection, sock):\n"
        "    sock = connection._sock\n"
        "    sock.recv_into(bytearray(10))\n"
        "    getattr(connection, '_sock')\n"
        "    import os\n"
        "    os.write(sock.fileno(), b'')\n"
    )
    found = violations(old, redis_private)
    assert len(found) >= 6, found
    assert violations("import socket\nhost = socket.gethostname()\n", redis_private) == []


def test_distlock_uses_no_private_name_of_redis_py_and_no_socket_of_its_own(
    redis_private: set[str],
) -> None:
    report = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE.parent))
        private = redis_private - NOT_REDIS_PY.get(where, set())
        found = violations(path.read_text(encoding="utf-8"), private)
        if found:
            report[where] = found
    assert report == {}


def test_each_name_let_through_is_still_read_where_it_is_named(redis_private: set[str]) -> None:
    """NOT_REDIS_PY lets through only names still read in their module. (Whether redis-py
    defines the name too depends on its version: 5.0 has no ``_broken``.)"""
    for where, names in NOT_REDIS_PY.items():
        text = (PACKAGE.parent / where).read_text(encoding="utf-8")
        found = violations(text, redis_private | names)
        for name in names:
            assert any(repr(name) in line for line in found), (where, name)


# --- acceptance 1: a shared pool is never starved ------------------------------------------
def in_use(pool: Any) -> int:
    """How many of ``pool``'s connections are checked out (redis-py keeps no public count;
    the test may look inside, distlock may not)."""
    if isinstance(pool, redis.BlockingConnectionPool):
        idle = sum(1 for connection in list(pool.pool.queue) if connection is not None)
        return len(pool._connections) - idle
    return len(pool._in_use_connections)


@pytest.fixture(params=["max_connections=4", "blocking, 2 connections"])
def small_cache_pool(
    request: pytest.FixtureRequest, settings: Any, redis_url: str
) -> Iterator[Any]:
    """The default route (no DISTLOCK): locks share a django-redis cache with a small pool."""
    _, cache_settings = distlock_settings("django_redis", redis_url)
    options = cache_settings["default"]["OPTIONS"]
    if request.param.startswith("blocking"):
        # django-redis's option for the pool's class (a kwarg of the pool's would reach
        # the connections).
        options["CONNECTION_POOL_CLASS"] = "redis.BlockingConnectionPool"
        options["CONNECTION_POOL_KWARGS"] = {"max_connections": 2, "timeout": 20}
    else:
        options["CONNECTION_POOL_KWARGS"] = {"max_connections": 4}
    settings.CACHES = cache_settings
    del settings.DISTLOCK
    locks.reset()
    cache = caches["default"]
    pool = cache.client.get_client(True).connection_pool
    # The pool this test asked for, not one an earlier test built for the same URL.
    assert isinstance(pool, redis.BlockingConnectionPool) == request.param.startswith("blocking")
    assert pool.max_connections == options["CONNECTION_POOL_KWARGS"]["max_connections"]
    yield pool
    pool.disconnect()
    locks.reset()


def test_locks_never_starve_the_cache_they_share(small_cache_pool: Any) -> None:
    cache = caches["default"]
    assert type(locks["default"]).__name__ == "DjangoRedisBackend"
    errors: list[BaseException] = []

    def work(number: int) -> None:
        try:
            for cycle in range(1000):
                # A long lease: a reply that waited seconds for one of the pool's connections
                # on a loaded machine must not outlive it (a grant reported unusable, then
                # LockNotAcquired: seen twice beside callgrind and busy loops).
                with distlock.lock(f"starve:{number}", ttl=60, wait=0):
                    caches["default"].set(f"starve:{number}", cycle, timeout=30)
                assert caches["default"].get(f"starve:{number}") == cycle
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert in_use(small_cache_pool) == 0
    cache.set("still-works", 1)
    assert cache.get("still-works") == 1


def test_every_call_gives_its_connection_back(small_cache_pool: Any) -> None:
    baseline = in_use(small_cache_pool)
    lk = distlock.lock("baseline", ttl=5, auto_renew=False)
    steps = [
        lambda: lk.acquire(wait=0),
        lk.extend,
        lk.owned,
        lk.locked,
        lk.ttl_remaining,
        lk.release,
        lambda: locks["default"].held(),
        lambda: locks["default"].count(),
        lambda: locks["default"].info("baseline"),
    ]
    for step in steps:
        step()
        assert in_use(small_cache_pool) == baseline, step


def test_a_waiter_holds_one_connection_while_it_waits_and_none_after(small_cache_pool: Any) -> None:
    baseline = in_use(small_cache_pool)
    holder = distlock.lock("waited", ttl=5)
    holder.acquire()
    during: list[int] = []
    waiter = distlock.lock("waited", ttl=5, wait=5)
    thread = threading.Thread(target=lambda: (waiter.acquire(), waiter.release()))
    thread.start()
    try:
        for _ in range(200):  # until the waiter blocks on its notification
            if in_use(small_cache_pool) == baseline + 1:
                break
            threading.Event().wait(0.01)
        during.append(in_use(small_cache_pool))
    finally:
        holder.release()
        thread.join()
    assert during == [baseline + 1]
    assert in_use(small_cache_pool) == baseline


# --- what redis-py now does for distlock -----------------------------------------------------
def cycle(name: str = "calls") -> int:
    with distlock.lock(name, ttl=5) as lk:
        return int(lk.fencing_token or 0)


def test_scripts_are_loaded_again_after_the_server_forgets_them(redis_backend: str) -> None:
    cycle()
    redis.Redis.from_url(redis_backend).script_flush()
    assert cycle() > 0
    assert distlock.lock("calls").locked() is False


@pytest.mark.parametrize("fair", [True, False], ids=["fair", "non-fair"])
def test_a_waiter_whose_turn_finds_the_scripts_forgotten_still_gets_the_lock(
    redis_backend: str, fair: bool
) -> None:
    """The turn runs straight (ScriptedOnLock.acquire_when_free): a NOSCRIPT reply behind
    the BLPOP goes on as the steps generator's did, asking again by source."""
    cycle()
    admin = redis.Redis.from_url(redis_backend)
    holder = distlock.lock("turn", ttl=5)
    holder.acquire()
    got: list[int | None] = []

    def wait() -> None:
        with distlock.lock("turn", ttl=5, wait=5, fair=fair) as lk:
            got.append(lk.fencing_token)

    thread = threading.Thread(target=wait)
    thread.start()
    try:
        for _ in range(500):  # until the waiter blocks in its BLPOP
            if any("b" in client["flags"] for client in admin.client_list()):
                break
            threading.Event().wait(0.01)
        admin.script_flush()
    finally:
        holder.release()
        thread.join(10)
    assert got and got[0] is not None and got[0] > (holder.fencing_token or 0)
    assert distlock.lock("turn").locked() is False


def test_a_connection_the_server_closed_is_replaced_before_use(redis_backend: str) -> None:
    cycle()
    admin = redis.Redis.from_url(redis_backend)
    assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
    assert cycle() > 0  # not BackendUnavailable: the pool checks an idle connection first


def test_a_forked_child_never_shares_the_parents_connection(redis_backend: str) -> None:
    cycle()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
        child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        status = 0
        try:
            for _ in range(200):
                cycle("fork:child")
        except BaseException:
            status = 1
        os._exit(status)
    for _ in range(200):
        cycle("fork:parent")  # interleaved replies would break one side or the other
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_no_connection_stays_checked_out_of_its_own_pool(redis_backend: str) -> None:
    pool = locks["default"].client.connection_pool
    for number in range(20):
        cycle(f"own:{number % 3}")
    assert in_use(pool) == 0


# --- acceptance 5: a Lock object whose lease ran out competes again ---------------------------
# The backend is warmed first (cycle()): its first call sets the client up (a Cluster client
# reads the slots and COMMAND, a script is loaded), which on redis-py 5.0 without hiredis once
# took longer than the 0.2 s lease, so that the first acquire came back not acquired.
def test_acquire_after_the_lease_ran_out_acquires_again(backend_kind: str) -> None:
    cycle()
    lk = distlock.lock("ran-out", ttl=0.2)
    assert lk.acquire(wait=0)
    first = lk.fencing_token
    threading.Event().wait(0.35)
    assert not lk.owned() and not lk.locked()
    assert lk.acquire(wait=0)  # not "already holds"
    assert lk.owned()
    assert lk.fencing_token is not None and first is not None and lk.fencing_token > first
    lk.release()


def test_acquire_after_the_lease_ran_out_waits_like_any_contender(backend_kind: str) -> None:
    cycle()  # warmed first, as above
    lk = distlock.lock("ran-out-taken", ttl=0.2)
    assert lk.acquire(wait=0)
    threading.Event().wait(0.35)
    other = distlock.lock("ran-out-taken", ttl=0.5)
    assert other.acquire(wait=0)
    assert lk.acquire(wait=0) is False  # held by the other: a contender, not an error
    assert lk.acquire(wait=2)  # the other's lease ends: acquired by waiting
    lk.release()


def test_acquire_while_the_lease_runs_still_refuses(redis_backend: str) -> None:
    lk = distlock.lock("still-held", ttl=5)
    assert lk.acquire(wait=0)
    with pytest.raises(distlock.LockError, match="already holds"):
        lk.acquire(wait=0)
    lk.release()


def test_the_last_release_frees_the_lock_even_if_the_server_counted_one_more_level(
    backend_kind: str,
) -> None:
    """A reentrant acquire whose reply was lost leaves the server one level deeper than the
    Lock object knows. The object's last release() frees the lock all the same: it releases
    every level, not one, rather than leave the lock held until its lease ends."""
    lk = distlock.lock("re-lost", ttl=5, reentrant=True)
    lk.acquire()
    backend = distlock.locks["default"]
    assert lk.token is not None
    # The level that was lost:
    assert backend.exclusive.extend("re-lost", lk.token, 5000, reenter=True)
    lk.release()
    assert backend.info("re-lost") is None
    assert distlock.lock("re-lost", ttl=5).acquire(wait=0)


def test_an_acquire_cut_short_after_the_grant_gives_the_lock_back(
    backend_kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C (or a stop signal a command turns into KeyboardInterrupt) can land after the
    server granted the lock and before acquire() returned: the lock must not stay held until
    its lease ends by a holder that never knew it held it."""
    backend = locks["default"]
    grant = backend.exclusive.try_acquire

    def grant_then_interrupt(*args: Any) -> Any:
        grant(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(backend.exclusive, "try_acquire", grant_then_interrupt)
    lk = distlock.lock("cut-short", ttl=30)
    with pytest.raises(KeyboardInterrupt):
        lk.acquire()
    assert lk.token is None
    assert backend.info("cut-short") is None


async def test_an_async_acquire_cancelled_after_the_grant_gives_the_lock_back(
    backend_kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = locks["default"]
    grant = backend.exclusive.atry_acquire

    async def grant_then_cancel(*args: Any) -> Any:
        await grant(*args)
        raise asyncio.CancelledError

    monkeypatch.setattr(backend.exclusive, "atry_acquire", grant_then_cancel)
    lk = distlock.lock("cut-short-async", ttl=30)
    with pytest.raises(asyncio.CancelledError):
        await lk.aacquire()
    assert lk.token is None
    assert await backend.ainfo("cut-short-async") is None
