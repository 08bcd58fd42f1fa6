"""The scenarios that every kind of lock shares, written once and run for each kind: the
exclusive lock on every backend of the contract (conftest.CONTRACT_BACKENDS, as
test_contract.py), the shared lock and the semaphore on every backend that keeps them
(conftest.EVERY_KIND_BACKENDS, as test_shared_locks.py and test_semaphore.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

import distlock
from distlock import LockError
from distlock.handler import locks
from tests.conftest import CONTRACT_BACKENDS, EVERY_KIND_BACKENDS, use_backend
from tests.support.lock_helpers import elsewhere

pytestmark = pytest.mark.django_db(databases=[])


@dataclass(frozen=True)
class Kind:
    """One kind of lock, as the scenarios below take and give back its holds."""

    name: str
    make: Callable[..., distlock.Lock]  # (name, **options): a hold of this kind
    rival: Callable[..., distlock.Lock]  # (name, **options): what one hold of it keeps out
    force_release: Callable[[distlock.Lock], bool]  # an operator's release of that one hold


EXCLUSIVE = Kind(
    "exclusive",
    make=distlock.lock,
    rival=distlock.lock,
    force_release=lambda lk: locks["default"].force_release(lk.name),
)
KINDS = {
    kind.name: kind
    for kind in (
        EXCLUSIVE,
        Kind(
            "exclusive-reentrant",
            make=lambda name, **options: distlock.lock(name, reentrant=True, **options),
            rival=distlock.lock,
            force_release=EXCLUSIVE.force_release,
        ),
        Kind(
            "shared",
            make=lambda name, **options: distlock.lock(name, shared=True, **options),
            rival=distlock.lock,  # a writer
            force_release=lambda lk: locks["default"].shared.force_release(lk.name, lk.token or ""),
        ),
        Kind(
            "semaphore",
            make=lambda name, **options: distlock.semaphore(name, 1, **options),
            rival=lambda name, **options: distlock.semaphore(name, 1, **options),
            force_release=lambda lk: locks["default"].semaphores.force_release(
                lk.name, lk.token or ""
            ),
        ),
    )
}


def on_its_backends(*kinds: str) -> list[Any]:
    """Return the cases of the ``kind`` fixture for ``kinds``: each on each of its backends."""
    return [
        pytest.param((kind, backend), id=f"{kind}-{backend}")
        for kind in kinds
        for backend in (CONTRACT_BACKENDS if kind.startswith("exclusive") else EVERY_KIND_BACKENDS)
    ]


@pytest.fixture
def kind(request: pytest.FixtureRequest, settings: Any, redis_url: str) -> Kind:
    """Point the default alias at the case's backend; return the case's kind of lock."""
    name, backend = request.param
    use_backend(settings, request, redis_url, backend)
    return KINDS[name]


@pytest.mark.parametrize("kind", on_its_backends("exclusive", "shared", "semaphore"), indirect=True)
async def test_an_async_wait_cancelled_takes_no_hold(kind: Kind) -> None:
    """A wait that blocks in a worker thread (django_redis, a Cluster's, locmem's) goes on
    after its task is cancelled; whatever it takes then is given back."""
    holder = kind.rival("async-cancel", ttl=5, wait=0)
    # Taken in another thread: this task's reader would downgrade a writer it held itself.
    assert elsewhere(holder.acquire)
    waiting = kind.make("async-cancel", ttl=10, wait=5)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(waiting.aacquire(), 0.2)  # cancelled while it waits
    assert waiting.token is None
    await holder.arelease()
    # A hold taken anyway would keep the next rival out for its whole 10 s lease.
    late = kind.rival("async-cancel", ttl=5, wait=3)
    assert await late.aacquire()
    await late.arelease()


@pytest.mark.parametrize(
    "kind",
    on_its_backends("exclusive", "exclusive-reentrant", "shared", "semaphore"),
    indirect=True,
)
def test_a_force_released_holder_acquires_again(kind: Kind) -> None:
    lk = kind.make("forced-out", ttl=5, wait=0)
    assert lk.acquire()
    first = lk.fencing_token
    assert kind.force_release(lk)
    assert not lk.owned()
    assert lk.acquire(), "owned() said False, yet acquire() refused"
    assert lk.owned() and lk.fencing_token > first
    if not lk.reentrant:  # the holder asking again is refused at once, not queued behind itself
        with pytest.raises(LockError, match="already holds"):
            lk.acquire()
    lk.release()
    assert not lk.locked()
