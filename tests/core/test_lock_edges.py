"""The edges between a thread's exclusive and shared holds of one name: the upgrade refusal
asks the server, and a downgrade (the exclusive holder takes the shared lock) is granted at
once and leaves no room for a writer when the exclusive hold is released."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import distlock
from distlock import SharedLockUpgrade
from distlock.handler import locks
from tests.conftest import _use, location_of
from tests.support.lock_helpers import elsewhere

pytestmark = pytest.mark.django_db(databases=[])


@pytest.fixture(params=["redis", "locmem", "cluster"], autouse=True)
def kind(request: pytest.FixtureRequest, settings: Any, redis_url: str) -> str:
    _use(settings, request.param, location_of(request.param, request, redis_url))
    return request.param


# --- the upgrade refusal --------------------------------------------------------------------
def test_a_force_released_shared_hold_does_not_refuse_the_upgrade() -> None:
    mine = distlock.lock("upgrade", shared=True, ttl=6)
    assert mine.acquire()
    assert locks["default"].shared.force_release("upgrade", mine.token or "")
    writer = distlock.lock("upgrade", ttl=5, wait=0)
    assert writer.acquire()  # the server has no holder: granted, not SharedLockUpgrade
    writer.release()


async def test_async_a_force_released_shared_hold_does_not_refuse_the_upgrade() -> None:
    mine = distlock.lock("upgrade", shared=True, ttl=6)
    assert await mine.aacquire()
    assert locks["default"].shared.force_release("upgrade", mine.token or "")
    writer = distlock.lock("upgrade", ttl=5, wait=0)
    assert await writer.aacquire()
    await writer.arelease()


def test_a_live_shared_hold_still_refuses_the_upgrade() -> None:
    mine = distlock.lock("upgrade", shared=True, ttl=6)
    assert mine.acquire()
    with pytest.raises(SharedLockUpgrade):
        distlock.lock("upgrade", ttl=5, wait=0).acquire()
    mine.release()


# --- downgrade ------------------------------------------------------------------------------
def queued_writer(name: str) -> tuple[threading.Thread, list[float]]:
    """Start a writer waiting for ``name`` in another thread; return it and the list its
    grant time goes to (it releases at once)."""
    granted: list[float] = []

    def write() -> None:
        writer = distlock.lock(name, ttl=5, wait=15)
        assert writer.acquire()
        granted.append(time.monotonic())
        writer.release()

    thread = threading.Thread(target=write)
    thread.start()
    deadline = time.monotonic() + 10
    while not getattr(locks["default"].info(name), "waiters", 0):
        assert time.monotonic() < deadline, "the writer never queued"
        time.sleep(0.01)
    return thread, granted


def test_a_downgrade_is_granted_at_once_and_no_writer_comes_in_between() -> None:
    exclusive = distlock.lock("downgrade", ttl=5)
    assert exclusive.acquire()
    thread, granted = queued_writer("downgrade")
    reader = distlock.lock("downgrade", shared=True, ttl=5, wait=3)
    began = time.monotonic()
    assert reader.acquire()  # before: waited for itself, False after 3 s
    assert time.monotonic() - began < 1
    assert (reader.fencing_token or 0) > (exclusive.fencing_token or 0)
    exclusive.release()
    time.sleep(0.3)
    assert not granted, "a writer came in between the exclusive release and the reader"
    assert reader.token in {h.token for h in locks["default"].shared.inspect("downgrade")}
    released = time.monotonic()
    reader.release()
    thread.join(timeout=10)
    assert granted and granted[0] >= released


def test_a_downgraded_reader_released_first_leaves_the_exclusive_hold() -> None:
    exclusive = distlock.lock("downgrade", ttl=5)
    assert exclusive.acquire()
    reader = distlock.lock("downgrade", shared=True, ttl=5, wait=0)
    assert reader.acquire()
    reader.release()
    assert exclusive.owned()
    assert not elsewhere(distlock.lock("downgrade", ttl=5, wait=0).acquire)
    exclusive.release()
    assert elsewhere(distlock.lock("downgrade", ttl=5, wait=0).acquire)


def test_another_thread_is_not_granted_a_downgrade() -> None:
    exclusive = distlock.lock("downgrade", ttl=5)
    assert exclusive.acquire()
    other: list[bool] = []
    thread = threading.Thread(
        target=lambda: other.append(distlock.lock("downgrade", shared=True, wait=0).acquire())
    )
    thread.start()
    thread.join()
    assert other == [False]
    exclusive.release()


async def test_async_downgrade_is_granted_at_once() -> None:
    exclusive = distlock.lock("downgrade", ttl=5)
    assert await exclusive.aacquire()
    reader = distlock.lock("downgrade", shared=True, ttl=5, wait=2)
    began = time.monotonic()
    assert await reader.aacquire()
    assert time.monotonic() - began < 1
    await exclusive.arelease()
    assert not elsewhere(distlock.lock("downgrade", ttl=5, wait=0).acquire)
    await reader.arelease()
    assert elsewhere(distlock.lock("downgrade", ttl=5, wait=0).acquire)


def test_a_downgrade_outlives_the_exclusive_lease() -> None:
    # The exclusive lease runs out (no release) while the downgraded reader's lasts: the
    # lock goes to the reader, not to the next writer.
    exclusive = distlock.lock("downgrade", ttl=0.3)
    assert exclusive.acquire()
    reader = distlock.lock("downgrade", shared=True, ttl=5, wait=0)
    assert reader.acquire()
    time.sleep(0.5)
    assert not elsewhere(distlock.lock("downgrade", ttl=5, wait=0).acquire)
    reader.release()
    assert elsewhere(distlock.lock("downgrade", ttl=5, wait=0).acquire)
