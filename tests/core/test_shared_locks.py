"""Shared locks (distlock.lock(name, shared=True)), run against every backend that keeps
them; Redlock refuses them with an error that says what to use."""

from __future__ import annotations

import asyncio
import threading
import time
from functools import partial
from typing import Any

import pytest

import distlock
from distlock import LockError, LockLost, LockNotAcquired, LockNotOwned, SharedLockUpgrade
from distlock import shared as owners
from distlock.handler import locks
from tests.conftest import QueueThreads
from tests.support.lock_helpers import contenders, elsewhere

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.usefixtures("every_kind_backend")]


def reader(name: str = "catalogue", **options: Any) -> distlock.Lock:
    return distlock.lock(name, shared=True, **{"ttl": 5, "wait": 0, **options})


def test_many_readers_hold_at_once_and_a_writer_waits_for_all() -> None:
    first, second = reader(), reader()
    assert first.acquire() and second.acquire()
    assert first.shared and first.token and first.token.startswith("~")
    writer = distlock.lock("catalogue", ttl=5, wait=0)
    assert not elsewhere(writer.acquire)
    first.release()
    assert not elsewhere(writer.acquire)  # the second reader still holds
    second.release()
    assert writer.acquire()
    # No reader while the writer holds (another thread's: this one's would be a downgrade).
    assert not elsewhere(reader().acquire)
    writer.release()


def test_lock_info_lists_each_holder_as_shared() -> None:
    first, second = reader(purpose="one"), reader(purpose="two")
    assert first.acquire() and second.acquire()
    holders = locks["default"].shared.inspect("catalogue")
    assert {h.purpose for h in holders} == {"one", "two"}
    assert all(h.shared for h in holders)
    assert {h.token for h in holders} == {first.token, second.token}
    mine = first.holder()
    assert mine is not None and mine.token == first.token and mine.shared
    first.release()
    second.release()
    assert locks["default"].shared.inspect("catalogue") == ()


def test_a_queued_writer_keeps_later_readers_out(queue_threads: QueueThreads) -> None:
    first = reader()
    assert first.acquire()
    writer = distlock.lock("catalogue", ttl=5, wait=5)
    got: list[bool] = []
    [thread] = queue_threads(lambda: got.append(writer.acquire()))
    late = reader()
    assert not late.acquire()  # the writer came first
    first.release()
    thread.join(5)
    assert got == [True]
    writer.release()
    assert late.acquire()
    late.release()


def test_one_release_lets_the_queued_run_of_readers_in_together() -> None:
    writer = distlock.lock("catalogue", ttl=5)
    assert writer.acquire()
    held = threading.Barrier(5, timeout=5)
    waiting = [reader(wait=5) for _ in range(4)]
    fences: list[int] = []

    def read(lk: distlock.Lock) -> None:
        assert lk.acquire()
        fences.append(lk.fencing_token or 0)
        held.wait()  # all four hold at the same time, or this times out
        lk.release()

    threads = [threading.Thread(target=read, args=(lk,)) for lk in waiting]
    with contenders(4) as queued:
        for thread in threads:
            thread.start()
        queued()
    writer_fence = writer.fencing_token or 0
    writer.release()
    held.wait()
    for thread in threads:
        thread.join(5)
    assert len(fences) == 4 and min(fences) > writer_fence


def test_fencing_tokens_rise_across_kinds() -> None:
    tokens = []
    for shared in (True, False, True, True, False):
        lk = distlock.lock("catalogue", shared=shared, ttl=5)
        assert lk.acquire()
        tokens.append(lk.fencing_token)
        lk.release()
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


def test_each_holder_extends_and_releases_its_own_hold() -> None:
    first, second = reader(ttl=0.4), reader(ttl=5)
    assert first.acquire() and second.acquire()
    first.extend(5)
    assert first.lease_left() > 4
    second.release()
    with pytest.raises(LockNotOwned):
        second.release()
    assert first.owned()
    first.release()


def test_a_readers_lease_ends_on_its_own_and_the_writer_gets_in() -> None:
    crashed = reader(ttl=0.3)
    assert crashed.acquire()
    writer = distlock.lock("catalogue", ttl=5, wait=3)
    started = time.monotonic()
    assert elsewhere(writer.acquire)
    assert time.monotonic() - started < 1.0  # at the lease's end, not a polling interval
    elsewhere(writer.release)


def test_auto_renew_keeps_a_shared_lease_and_reports_its_loss() -> None:
    lost: list[distlock.Lock] = []
    lk = reader(ttl=0.3, auto_renew=True, on_lost=lost.append)
    assert lk.acquire()
    time.sleep(0.6)
    assert lk.owned() and not lost
    locks["default"].shared.force_release("catalogue", lk.token or "")
    deadline = time.monotonic() + 2
    while not lost and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lost == [lk]
    with pytest.raises(LockLost):
        lk.release()


def test_reentrant_reader_reenters_its_own_kind() -> None:
    lk = reader(reentrant=True)
    assert lk.acquire() and lk.acquire()
    holders = locks["default"].shared.inspect("catalogue")
    assert [h.depth for h in holders] == [2]
    lk.release()
    assert locks["default"].shared.inspect("catalogue")
    lk.release()
    assert locks["default"].shared.inspect("catalogue") == ()


def test_asking_for_the_exclusive_lock_while_holding_the_shared_one_raises_at_once() -> None:
    with reader():
        started = time.monotonic()
        with pytest.raises(SharedLockUpgrade, match=r"[Rr]elease the shared lock first"):
            distlock.lock("catalogue", wait=None).acquire()
        assert time.monotonic() - started < 0.5
        assert isinstance(SharedLockUpgrade("x"), LockError)
        other = distlock.lock("other-name", ttl=5)
        assert other.acquire()  # only the same name is refused
        other.release()
        with distlock.semaphore("catalogue", 1, ttl=5, wait=0):
            pass  # a semaphore of the same name is another thing
    writer = distlock.lock("catalogue", ttl=5)
    assert writer.acquire()  # released: no longer refused
    writer.release()


def test_with_decorator_copy_and_repr() -> None:
    lk = reader()

    @lk
    def job() -> list[Any]:
        return locks["default"].shared.inspect("catalogue")  # type: ignore[return-value]

    assert len(job()) == 1
    with lk:
        assert "shared" in repr(lk)
        copy = lk.copy()
        assert copy.shared and copy.acquire()  # another reader
        copy.release()
    writer = distlock.lock("catalogue", ttl=5, wait=0)
    with writer, pytest.raises(LockNotAcquired) as caught:
        elsewhere(reader().__enter__)  # another thread: this one's would be a downgrade
    assert caught.value.holder is not None and not caught.value.holder.shared


async def test_async_upgrade_is_refused_at_once() -> None:
    async with reader():
        with pytest.raises(SharedLockUpgrade):
            await distlock.lock("catalogue", wait=None).aacquire()


async def test_async_twins() -> None:
    first = reader()
    async with first:
        second = reader(wait=3)
        assert await second.aacquire()
        await second.arelease()
    writer = distlock.lock("catalogue", ttl=5)
    assert await writer.aacquire()
    waiting = asyncio.ensure_future(reader(wait=3).aacquire())
    await asyncio.sleep(0.2)
    await writer.arelease()
    assert await waiting


def test_the_exclusive_lock_is_locked_while_readers_hold_and_names_one() -> None:
    first = reader(purpose="reading")
    writer = distlock.lock("catalogue", ttl=5, wait=0)
    assert not writer.locked()
    assert first.acquire()
    assert writer.locked()
    holder = writer.holder()
    assert holder is not None and holder.shared and holder.purpose == "reading"
    with pytest.raises(LockNotAcquired, match="reading"):
        elsewhere(writer.__enter__)
    first.release()
    assert not writer.locked()


def test_an_earlier_writer_goes_before_a_later_reader(queue_threads: QueueThreads) -> None:
    """First come, first served across kinds, also when the writer queued while no shared
    hold was in use (an exclusive holder only)."""
    holder = distlock.lock("catalogue", ttl=5, wait=0)
    assert holder.acquire()
    order: list[str] = []

    def take(lk: distlock.Lock) -> None:
        assert lk.acquire()
        order.append("reader" if lk.shared else "writer")
        time.sleep(0.2)  # holds long enough for the other to be kept out, if it is
        lk.release()

    # The writer queues first, then the reader.
    writer = distlock.lock("catalogue", ttl=5, wait=5)
    threads = queue_threads(partial(take, writer), partial(take, reader(wait=5)))
    holder.release()
    for thread in threads:
        thread.join(10)
    assert order == ["writer", "reader"]


def test_an_event_loop_run_by_the_holding_thread_is_refused_the_upgrade() -> None:
    """The shared lock held by this thread outside any task; the exclusive one asked from
    a coroutine this thread runs (asyncio.run from sync code): it would wait for itself."""

    async def upgrade() -> bool:
        return await distlock.lock("catalogue", ttl=5, wait=2).aacquire()

    with reader():
        started = time.monotonic()
        with pytest.raises(SharedLockUpgrade):
            asyncio.run(upgrade())
        assert time.monotonic() - started < 0.5


def test_a_thread_given_an_ended_holders_ident_is_not_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A thread that ended still holding (its caller forgot to release): a new thread may
    be given its ident, and is not the holder."""
    kept: list[distlock.Lock] = []
    ended: list[tuple[int, int | None]] = []

    def hold_and_end() -> None:
        lk = reader(ttl=10)
        assert lk.acquire()
        kept.append(lk)
        ended.append(owners.current_owner())

    thread = threading.Thread(target=hold_and_end)
    thread.start()
    thread.join(5)
    # The new thread is given the ended one's ident (as the OS may do).
    monkeypatch.setattr(owners, "current_owner", lambda: ended[0])
    assert elsewhere(distlock.lock("catalogue", ttl=5, wait=0).acquire) is False  # not refused
    kept[0].release()
