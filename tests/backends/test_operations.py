"""One operations object per kind (distlock.backends.operations): every backend exposes the
three kinds with the same names and signatures; a kind a backend lacks refuses to acquire,
with its error, and lists nothing; a force release of any kind is told once."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

import distlock
from devkit.configs import distlock_settings
from distlock import SemaphoresNotSupported, SharedLocksNotSupported, metrics
from distlock.backends.operations import Operations, Request, SemaphoreKind, Unsupported
from distlock.handler import locks
from distlock.signals import lock_force_released

pytestmark = pytest.mark.django_db(databases=[])

# What a surface or a Lock may call on any kind. (A list of strings, alike in shape to
# tests/views/test_lock_view_names.py's NASTY, which duplicates pairs with it: data.)
OPERATIONS = [
    "try_acquire",
    "acquire_when_free",
    "leave",
    "release",
    "extend",
    "inspect",
    "holder",
    "info",
    "force_release",
    "list",
]
TWINS = ["a" + name for name in OPERATIONS]


def signature_of(operations: Operations, name: str) -> list[tuple[str, Any, Any]]:
    """The parameters of ``operations.name``: names, kinds and defaults (the annotations
    name one type in words that differ: ``list`` is a method name in the class)."""
    parameters = inspect.signature(getattr(operations, name)).parameters.values()
    return [(p.name, p.kind, p.default) for p in parameters]


@pytest.fixture(params=["redis", "locmem", "redlock3"])
def any_backend(request: pytest.FixtureRequest, settings: Any, redis_url: str) -> str:
    """The default alias on one server, in memory, and on a Redlock of three nodes."""
    from tests.conftest import location_of

    kind = request.param
    settings.DISTLOCK, settings.CACHES = distlock_settings(
        kind, location_of(kind, request, redis_url)
    )
    locks.reset()
    return str(kind)


def test_every_backend_has_the_three_kinds_with_one_set_of_names(any_backend: str) -> None:
    backend = locks["default"]
    kinds = backend.kinds()
    assert [ops.kind for ops in kinds] == ["lock", "shared", "semaphore"]
    assert (backend.exclusive, backend.shared, backend.semaphores) == kinds
    assert all(ops.backend is backend for ops in kinds)
    reference = Operations(backend)
    for ops in kinds:
        for name in OPERATIONS + TWINS:
            assert signature_of(ops, name) == signature_of(reference, name), (ops, name)
        for name in TWINS:
            assert inspect.iscoroutinefunction(getattr(ops, name)), (ops, name)
    assert isinstance(backend.semaphores, SemaphoreKind)
    assert [name for name, *_ in signature_of(backend.semaphores, "describe")] == ["name"]


def test_redlock_keeps_no_shared_locks_nor_semaphores(any_backend: str) -> None:
    backend = locks["default"]
    unsupported = [ops.kind for ops in backend.kinds() if isinstance(ops, Unsupported)]
    assert unsupported == (["shared", "semaphore"] if any_backend == "redlock3" else [])


@pytest.mark.parametrize(
    ("kind", "error", "says"),
    [
        ("shared", SharedLocksNotSupported, "which has no shared locks"),
        ("semaphore", SemaphoresNotSupported, "which has no semaphores"),
    ],
)
async def test_unsupported_refuses_to_acquire_and_finds_nothing_held(
    nodes: Any, kind: str, error: type[Exception], says: str
) -> None:
    ops = locks["default"].of_kind(kind)
    assert isinstance(ops, Unsupported)
    request = Request("catalogue", "~token", 5000, "{}", 0)
    message = re.escape(f"DISTLOCK['default'] uses RedlockBackend, {says}")
    for call in (
        lambda: ops.try_acquire(request),
        lambda: ops.acquire_when_free(request, 0.1),
        lambda: ops.leave("catalogue", "~token"),
        lambda: ops.release("catalogue", "~token"),
        lambda: ops.extend("catalogue", "~token", 5000),
    ):
        with pytest.raises(error, match=message):
            call()
    with pytest.raises(error, match=message):
        await ops.atry_acquire(request)
    with pytest.raises(error, match=message):
        await ops.aacquire_when_free(request, 0.1)
    assert ops.inspect("catalogue") == () and await ops.ainspect("catalogue") == ()
    assert ops.list() == [] and await ops.alist() == []
    assert ops.force_release("catalogue", "~token") is False
    if kind == "shared":  # a shared Lock's locked() raises, as it did in release 5f7026b
        with pytest.raises(error, match=message):
            ops.holder("catalogue")
        with pytest.raises(error, match=message):
            await ops.aholder("catalogue")
    else:  # a Semaphore's own display raises (describe(), test below): nothing held here
        assert ops.holder("catalogue") is None


def test_a_semaphore_on_redlock_says_what_to_use(nodes: Any) -> None:
    with pytest.raises(SemaphoresNotSupported, match="RedisBackend"):
        distlock.semaphore("pool", 2).acquire()
    with pytest.raises(SemaphoresNotSupported):
        distlock.semaphore("pool", 2).holders()


def hold(kind: str) -> distlock.Lock:
    if kind == "semaphore":
        held: distlock.Lock = distlock.semaphore("forced", 2, ttl=30)
    else:
        held = distlock.lock("forced", ttl=30, shared=kind == "shared")
    assert held.acquire(wait=0)
    return held


@pytest.mark.parametrize("kind", ["lock", "shared", "semaphore"])
def test_a_force_release_of_each_kind_is_signalled_and_counted_once(
    redis_backend: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = hold(kind)
    counted: list[tuple[str, str, str]] = []
    # Counted where the metrics would count it (only the force release runs from here on).
    monkeypatch.setattr(metrics, "ENABLED", True)
    monkeypatch.setattr(metrics, "force_released", lambda *args: counted.append(args))
    received: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        received.append(kwargs)

    backend = locks["default"]
    ops = backend.of_kind(kind)
    assert [h.token for h in ops.inspect("forced")] == [held.token]
    lock_force_released.connect(receiver)
    try:
        assert ops.force_release("forced", held.token or "")
        assert not ops.force_release("forced", held.token or "")
    finally:
        lock_force_released.disconnect(receiver)
    assert counted == [("default", kind, "forced")]
    [sent] = received
    assert sent["info"].token == held.token and sent["alias"] == "default"
    monkeypatch.undo()
    assert ops.inspect("forced") == () and ops.list() == []


def test_the_backends_force_release_routes_a_shared_token(redis_backend: str) -> None:
    reader = hold("shared")
    assert locks["default"].force_release("forced", reader.token)
    assert locks["default"].shared.inspect("forced") == ()


@pytest.mark.parametrize("kind", ["lock", "shared", "semaphore"])
def test_list_gives_name_sorted_entries_with_the_holders_read(
    redis_backend: str, kind: str
) -> None:
    held = [hold(kind)]
    ops = locks["default"].of_kind(kind)
    [entry] = ops.list("for")
    assert entry.name == "forced" and entry.lease_end > entry.acquired > 0
    if kind != "lock":  # the exclusive kind reads its index only
        assert [h.token for h in entry.holders] == [held[0].token]
    assert entry.limit == (2 if kind == "semaphore" else 1)
    assert ops.list("other") == []


@pytest.mark.parametrize("kind", ["lock", "shared", "semaphore"])
async def test_the_async_twins_agree_with_the_sync_operations(
    redis_backend: str, kind: str
) -> None:
    ops = locks["default"].of_kind(kind)
    request = Request("twins", "~t1" if kind == "shared" else "t1", 5000, "{}", 0, limit=1)
    attempt = await ops.atry_acquire(request)
    assert attempt.acquired
    assert [h.token for h in await ops.ainspect("twins")] == [request.token]
    assert (await ops.aholder("twins", request.token)).token == request.token
    assert await ops.aextend("twins", request.token, 5000, renewal=True)
    assert [e.name for e in await ops.alist()] == ["twins"]
    assert await ops.arelease("twins", request.token, every_level=True) == 1
    assert await ops.ainspect("twins") == ()
