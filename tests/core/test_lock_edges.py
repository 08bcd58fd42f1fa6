"""The edges between a thread's exclusive and shared holds of one name: the upgrade refusal
asks the server, and a downgrade (the exclusive holder takes the shared lock) is granted at
once and leaves no room for a writer when the exclusive hold is released."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import distlock
from distlock import SharedLockUpgrade
from distlock.handler import locks
from tests.conftest import _use, location_of

pytestmark = pytest.mark.django_db(databases=[])


@pytest.fixture(params=["redis", "locmem", "cluster"], autouse=True)
def kind(request: pytest.FixtureRequest, settings: Any, redis_url: str) -> str:
    _use(settings, request.param, location_of(request.param, request, redis_url))
    return request.param


# --- the upgrade refusal --------------------------------------------------------------------
def test_a_force_released_shared_hold_does_not_refuse_the_upgrade() -> None:
    mine = distlock.lock("upgrade", shared=True, ttl=6)
    assert mine.acquire()
    assert locks["default"].force_release_shared("upgrade", mine.token or "")
    writer = distlock.lock("upgrade", ttl=5, wait=0)
    assert writer.acquire()  # the server has no holder: granted, not SharedLockUpgrade
    writer.release()


async def test_async_a_force_released_shared_hold_does_not_refuse_the_upgrade() -> None:
    mine = distlock.lock("upgrade", shared=True, ttl=6)
    assert await mine.aacquire()
    assert locks["default"].force_release_shared("upgrade", mine.token or "")
    writer = distlock.lock("upgrade", ttl=5, wait=0)
    assert await writer.aacquire()
    await writer.arelease()


def test_a_live_shared_hold_still_refuses_the_upgrade() -> None:
    mine = distlock.lock("upgrade", shared=True, ttl=6)
    assert mine.acquire()
    with pytest.raises(SharedLockUpgrade):
        distlock.lock("upgrade", ttl=5, wait=0).acquire()
    mine.release()
