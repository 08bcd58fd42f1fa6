"""The semaphore contract, on every backend that keeps semaphores (Redlock refuses them)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import distlock
from devkit.servers import wait_until
from distlock import LockError, LockLost, LockNotAcquired, LockNotOwned
from distlock.exceptions import SemaphoreFull
from distlock.signals import lock_force_released, lock_lost

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.usefixtures("every_kind_backend")]


def test_up_to_limit_holders_each_with_its_own_lease() -> None:
    permits = [distlock.semaphore("exports", 3, ttl=5, wait=0) for _ in range(4)]
    assert [p.acquire() for p in permits] == [True, True, True, False]
    assert len({p.token for p in permits[:3]}) == 3
    fences = [p.fencing_token for p in permits[:3]]
    assert fences == sorted(fences) and len(set(fences)) == 3
    assert permits[0].locked() and permits[0].owned() and not permits[3].owned()
    assert 4.5 < permits[1].ttl_remaining() <= 5
    permits[1].extend(ttl=20)
    assert 19 < permits[1].ttl_remaining() <= 20
    permits[0].release()
    assert not permits[0].owned() and not permits[3].locked()
    assert permits[3].acquire()
    info = permits[3].holders()
    assert info.limit == 3 and len(info.holders) == 3 and info.waiting == 0
    assert {h.token for h in info.holders} == {p.token for p in permits[1:]}
    for permit in permits[1:]:
        permit.release()
    assert permits[0].holders() is None
    with pytest.raises(LockNotOwned):
        permits[1].release()


def test_context_manager_decorator_and_not_acquired() -> None:
    with distlock.semaphore("calls", 1, ttl=5) as held:
        assert held.owned()
        with pytest.raises(LockNotAcquired), distlock.semaphore("calls", 1, wait=0.1):
            pass
        with pytest.raises(LockError, match="already holds a permit"):
            held.acquire()

    @distlock.semaphore("calls", 2, ttl=5, wait=0)
    def work() -> bool:
        return distlock.semaphore("calls", 2).locked()

    assert work() is False  # one of two permits held inside


def test_a_full_semaphore_says_so_naming_the_first_permit_to_end() -> None:
    held = [distlock.semaphore("exports2", 2, ttl=ttl, purpose=f"export {ttl}") for ttl in (30, 10)]
    assert all(permit.acquire(wait=0) for permit in held)
    hint = (
        "Wait longer (wait=...), raise its limit, or see who holds the permits: "
        "manage.py distlock info exports2"
    )
    with pytest.raises(LockNotAcquired) as raised, distlock.semaphore("exports2", 2, wait=0.1):
        pass
    full = raised.value
    assert isinstance(full, SemaphoreFull) and full.name == "exports2"
    assert (full.limit, full.held, full.wait) == (2, 2, 0.1)
    assert full.holder is not None and full.holder.token == held[1].token, "ends first"
    assert str(full) == (
        "Semaphore 'exports2' is full: 2 of 2 permits held, none free within 0.1s; the first "
        f"to end is held by {full.holder.host} pid {full.holder.pid} since "
        f"{full.holder.acquired_at:%Y-%m-%d %H:%M:%S} UTC (export 10). {hint}"
    )

    @distlock.semaphore("exports2", 2, wait=0)
    def export() -> None: ...

    with pytest.raises(
        SemaphoreFull,
        match=r"^Semaphore 'exports2' is full: 2 of 2 permits "
        r"held, none free; the first to end is held by ",
    ):
        export()

    async def in_async() -> None:
        async with distlock.semaphore("exports2", 2, wait=0):
            pass

    with pytest.raises(SemaphoreFull) as raised:
        asyncio.run(in_async())
    assert str(raised.value).startswith("Semaphore 'exports2' is full: 2 of 2 permits held")
    assert str(raised.value).endswith(hint)


def test_released_permit_goes_to_the_longest_waiter_first() -> None:
    holder = distlock.semaphore("fifo", 1, ttl=10)
    assert holder.acquire()
    order: list[int] = []

    def wait(position: int) -> None:
        permit = distlock.semaphore("fifo", 1, ttl=10, wait=10)
        assert permit.acquire()
        order.append(position)
        permit.release()

    threads = []
    for position in range(4):
        threads.append(threading.Thread(target=wait, args=(position,)))
        threads[-1].start()
        # Queued in this order: the next one starts once this one waits (not after a fixed
        # pause, which a loaded machine can outlast).
        wait_until(
            lambda position=position: holder.holders().waiting >= position + 1,
            5,
            f"waiter {position} to queue",
            0.01,
        )
    holder.release()
    for thread in threads:
        thread.join()
    assert order == [0, 1, 2, 3]


def test_waiter_wakes_when_a_holders_lease_ends() -> None:
    assert distlock.semaphore("crashy", 1, ttl=0.4).acquire()  # never released
    started = time.monotonic()
    assert distlock.semaphore("crashy", 1, ttl=5, wait=3).acquire()
    assert 0.3 < time.monotonic() - started < 1.0


def test_a_waiter_that_gives_up_leaves_the_queue() -> None:
    holder = distlock.semaphore("patience", 1, ttl=10)
    assert holder.acquire()
    assert not distlock.semaphore("patience", 1, wait=0.2).acquire()
    assert holder.holders().waiting == 0
    holder.release()
    assert holder.holders() is None


def test_limit_change_keeps_holders_and_applies_to_new_acquisitions() -> None:
    wide = [distlock.semaphore("resize", 3, ttl=10, wait=0) for _ in range(3)]
    assert all(p.acquire() for p in wide)
    narrow = distlock.semaphore("resize", 2, ttl=10, wait=0)
    assert not narrow.acquire()  # 3 held, new limit 2: wait until fewer than 2 hold
    wide[0].release()
    assert not narrow.acquire()
    wide[1].release()
    assert narrow.acquire()
    assert wide[2].owned()  # a holder keeps its permit whatever the limit
    grown = [distlock.semaphore("resize", 4, ttl=10, wait=0) for _ in range(2)]
    assert all(p.acquire() for p in grown)
    for permit in [wide[2], narrow, *grown]:
        permit.release()


def test_auto_renew_and_lost_permit() -> None:
    lost, callbacks = [], []

    def receiver(sender, **kwargs):
        lost.append({"sender": sender, **kwargs})

    lock_lost.connect(receiver)
    try:
        renewed = distlock.semaphore("renew", 2, ttl=0.6, auto_renew=True)
        renewed.acquire()
        time.sleep(1.5)
        assert renewed.owned()
        fragile = distlock.semaphore("renew", 2, ttl=0.6, auto_renew=True, on_lost=callbacks.append)
        fragile.acquire()
        backend = distlock.locks["default"]
        assert backend.semaphores.force_release("renew", fragile.token)
        deadline = time.monotonic() + 2
        while not callbacks and time.monotonic() < deadline:
            time.sleep(0.02)
        assert callbacks == [fragile] and lost[0]["name"] == "renew"
        assert lost[0]["sender"] is type(backend)  # the backend, not the Permits adapter
        with pytest.raises(LockLost):
            fragile.extend()
        renewed.release()
    finally:
        lock_lost.disconnect(receiver)


def test_force_release_frees_one_permit_and_signals() -> None:
    received = []

    def receiver(sender, **kwargs):
        received.append((sender, kwargs))

    permits = [distlock.semaphore("ops", 2, ttl=10) for _ in range(2)]
    for permit in permits:
        permit.acquire()
    backend = distlock.locks["default"]
    lock_force_released.connect(receiver)
    try:
        assert backend.semaphores.force_release("ops", permits[0].token)
        assert not backend.semaphores.force_release("ops", permits[0].token)
    finally:
        lock_force_released.disconnect(receiver)
    [(sender, kwargs)] = received
    assert sender is type(backend) and kwargs["info"].token == permits[0].token
    [only] = backend.semaphores.list("op")
    assert only.name == "ops" and [h.token for h in only.holders] == [permits[1].token]
    assert backend.semaphores.list("nope") == []
    permits[1].release()
    assert backend.semaphores.list() == []


def test_async() -> None:
    async def main() -> None:
        async with distlock.semaphore("async", 1, ttl=5) as held:
            assert await held.aowned()
            await held.aextend()
            other = distlock.semaphore("async", 1, ttl=5, wait=2)
            waiting = asyncio.ensure_future(other.aacquire())
            await asyncio.sleep(0.2)
            assert not waiting.done()
        assert await waiting
        assert await other.alocked()
        await other.arelease()
        assert not await other.alocked()

    asyncio.run(main())


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "2"])
def test_bad_limits(limit: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        distlock.semaphore("bad", limit)  # type: ignore[arg-type]
