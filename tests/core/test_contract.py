"""The lock contract, run against every backend, fair and, where there is a non-fair mode,
non-fair (see conftest.CONTRACT_BACKENDS)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from datetime import UTC

import pytest

import distlock
from distlock import LockError, LockLost, LockNotAcquired, LockNotOwned
from distlock.renewal import renewer
from distlock.signals import (
    lock_acquired,
    lock_contended,
    lock_force_released,
    lock_lost,
    lock_released,
)
from tests.conftest import ahandoff_delay
from tests.support.lock_helpers import elsewhere, handoff_delay, renewer_threads

pytestmark = pytest.mark.django_db(databases=[])


@pytest.fixture(autouse=True)
def _every_backend(contract_backend: str) -> str:
    return contract_backend


def test_acquire_release_and_state() -> None:
    lk = distlock.lock("jobs:daily", ttl=5)
    assert not lk.locked() and not lk.owned() and lk.ttl_remaining() is None
    assert lk.acquire() is True
    assert lk.locked() and lk.owned()
    assert 4.5 < lk.ttl_remaining() <= 5
    assert isinstance(lk.token, str) and isinstance(lk.fencing_token, int)
    other = distlock.lock("jobs:daily", wait=0)
    assert other.acquire() is False
    assert other.locked() and not other.owned()
    lk.release()
    assert not lk.locked() and lk.token is None
    assert other.acquire() is True
    other.release()


def test_context_manager_raises_lock_not_acquired_with_holder() -> None:
    with (
        distlock.lock("report", ttl=5, purpose="nightly report"),
        pytest.raises(LockNotAcquired) as caught,
        distlock.lock("report", wait=0),
    ):
        pytest.fail("entered a held lock")
    assert caught.value.name == "report"
    assert caught.value.holder is not None
    assert caught.value.holder.purpose == "nightly report"
    assert "held by" in str(caught.value)
    assert re.search(
        r"; held by \S+ pid \d+ since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC "
        r"\(nightly report\)\.\Z",
        str(caught.value),
    ), str(caught.value)


def test_wait_gives_up_after_wait_seconds() -> None:
    with distlock.lock("slow", ttl=10):
        started = time.monotonic()
        assert distlock.lock("slow").acquire(wait=0.3) is False
        assert 0.25 < time.monotonic() - started < 1.5


def test_wait_none_waits_until_released() -> None:
    holder = distlock.lock("queue", ttl=10)
    holder.acquire()
    threading.Timer(0.2, holder.release).start()
    waiter = distlock.lock("queue", ttl=5, wait=None)
    started = time.monotonic()
    assert waiter.acquire() is True
    assert time.monotonic() - started < 1.0
    waiter.release()


def test_waiter_wakes_when_the_holders_lease_ends() -> None:
    distlock.lock("crashed", ttl=0.3).acquire()  # never released: a crashed holder
    started = time.monotonic()
    waiter = distlock.lock("crashed", ttl=5)
    assert waiter.acquire(wait=3) is True
    assert time.monotonic() - started < 0.3 + 0.25
    waiter.release()


def test_release_and_extend_after_expiry_raise_and_leave_new_holder_alone() -> None:
    old = distlock.lock("lease", ttl=0.1)
    old.acquire()
    time.sleep(0.2)
    new = distlock.lock("lease", ttl=5, wait=0)
    assert new.acquire()
    with pytest.raises(LockNotOwned):
        old.release()
    stale = distlock.lock("lease", ttl=0.1)
    stale.acquire(wait=0)  # not acquired: new holds it
    assert new.owned()
    old2 = distlock.lock("lease2", ttl=0.1)
    old2.acquire()
    time.sleep(0.2)
    with pytest.raises(LockNotOwned):
        old2.extend()
    assert new.owned() and new.ttl_remaining() > 4
    new.release()


def test_extend_resets_the_lease() -> None:
    lk = distlock.lock("extend", ttl=1)
    lk.acquire()
    time.sleep(0.3)
    lk.extend()
    assert lk.ttl_remaining() > 0.9
    lk.extend(ttl=10)
    assert lk.ttl_remaining() > 9
    lk.release()
    with pytest.raises(LockNotOwned):
        lk.extend()


def test_fencing_tokens_strictly_increase() -> None:
    tokens = []
    for _ in range(20):
        with distlock.lock("fenced", ttl=5) as lk:
            tokens.append(lk.fencing_token)
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    expired = distlock.lock("fenced", ttl=0.05)
    expired.acquire()
    time.sleep(0.1)
    with distlock.lock("fenced", ttl=5) as lk:
        assert lk.fencing_token > expired.fencing_token > tokens[-1]


def test_reentrant_lock_counts_levels() -> None:
    lk = distlock.lock("re", ttl=5, reentrant=True)
    assert lk.acquire() and lk.acquire()
    assert distlock.locks["default"].info("re").depth == 2
    lk.release()
    assert lk.owned()
    assert distlock.locks["default"].info("re").depth == 1
    lk.release()
    assert not lk.locked()


def test_non_reentrant_second_acquire_raises_instead_of_deadlocking() -> None:
    lk = distlock.lock("once", ttl=5, wait=None)
    lk.acquire()
    with pytest.raises(LockError, match="already holds"):
        lk.acquire()
    lk.release()


async def test_a_force_released_holder_acquires_again_async() -> None:
    lk = distlock.lock("forced-out-async", ttl=5, wait=0)
    assert await lk.aacquire()
    assert await distlock.locks["default"].aforce_release("forced-out-async")
    assert not await lk.aowned()
    assert await lk.aacquire() and await lk.aowned()
    await lk.arelease()


def test_a_holder_whose_lease_ran_out_on_the_server_acquires_again() -> None:
    # A lease long enough for a slow first round trip (a shorter one, outlived by its own
    # reply, is rightly refused), then cut short: it runs out on the server.
    lk = distlock.lock("ran-out", ttl=5, wait=0)
    assert lk.acquire()
    lk.extend(ttl=0.1)
    time.sleep(0.2)
    assert not lk.owned()
    assert lk.acquire() and lk.owned()
    lk.release()


def test_reentrant_lock_refuses_another_thread() -> None:
    lk = distlock.lock("re-thread", ttl=5, reentrant=True)
    lk.acquire()
    errors = []

    def other() -> None:
        try:
            lk.acquire()
        except LockError as exc:
            errors.append(exc)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert errors and "another thread" in str(errors[0])
    lk.release()


def test_two_threads_cannot_release_each_others_lock() -> None:
    mine = distlock.lock("threads", ttl=0.2)
    mine.acquire()
    time.sleep(0.3)  # lease gone
    theirs = distlock.lock("threads", ttl=5)
    outcome = {}

    def take() -> None:
        outcome["acquired"] = theirs.acquire(wait=1)

    thread = threading.Thread(target=take)
    thread.start()
    thread.join()
    assert outcome["acquired"]
    with pytest.raises(LockNotOwned):
        mine.release()
    assert theirs.owned()
    theirs.release()


def test_token_belongs_to_the_object_not_the_thread() -> None:
    lk = distlock.lock("handover", ttl=5)
    lk.acquire()
    thread = threading.Thread(target=lk.release)
    thread.start()
    thread.join()
    assert not lk.locked()


async def test_two_tasks_cannot_release_each_others_lock() -> None:
    first = distlock.lock("tasks", ttl=0.2)
    second = distlock.lock("tasks", ttl=5)
    assert await first.aacquire()

    async def take_over() -> bool:
        return await second.aacquire(wait=2)

    assert await asyncio.create_task(take_over())
    with pytest.raises(LockNotOwned):
        await first.arelease()
    assert await second.aowned()
    await second.arelease()
    assert not await second.alocked()


async def test_async_api_and_async_with() -> None:
    async with distlock.lock("async", ttl=2) as lk:
        assert await lk.aowned() and await lk.alocked()
        await lk.aextend(ttl=5)
        assert lk.ttl_remaining() > 4
        assert not await distlock.lock("async", wait=0).aacquire()
    assert not await lk.alocked()


async def test_async_waiter_is_woken_by_release() -> None:
    holder = distlock.lock("async-wait", ttl=10)
    await holder.aacquire()
    waiter = distlock.lock("async-wait", ttl=5)
    assert await ahandoff_delay(holder, waiter) < 0.3


def test_decorator_holds_the_lock_per_call() -> None:
    seen = []

    @distlock.lock("decorated", ttl=5, wait=0)
    def job(value: int) -> int:
        seen.append(distlock.lock("decorated").locked())
        return value * 2

    assert job(21) == 42 and job(1) == 2
    assert seen == [True, True]
    assert not distlock.lock("decorated").locked()
    with distlock.lock("decorated", ttl=5), pytest.raises(LockNotAcquired):
        job(1)


async def test_decorator_on_async_function() -> None:
    @distlock.lock("adecorated", ttl=5, wait=0)
    async def job() -> str:
        return "ran"

    assert await job() == "ran"
    assert job.__name__ == "job"


def test_auto_renew_keeps_a_short_lease_alive() -> None:
    lk = distlock.lock("renewed", ttl=1, auto_renew=True)
    lk.acquire()
    time.sleep(2.5)
    assert lk.owned()
    assert distlock.locks["default"].info("renewed").renewals >= 4
    lk.release()
    assert not lk.locked()


def test_auto_renew_reports_a_lost_lease() -> None:
    lost_signals, callbacks = [], []

    def receiver(sender, **kwargs):
        lost_signals.append(kwargs)

    lock_lost.connect(receiver)
    try:
        lk = distlock.lock("fragile", ttl=0.6, auto_renew=True, on_lost=callbacks.append)
        lk.acquire()
        assert distlock.locks["default"].force_release("fragile")
        deadline = time.monotonic() + 2
        while not callbacks and time.monotonic() < deadline:
            time.sleep(0.02)
        assert callbacks == [lk]
        assert lost_signals[0]["name"] == "fragile" and lost_signals[0]["alias"] == "default"
        with pytest.raises(LockLost):
            lk.extend()
        with pytest.raises(LockNotOwned):
            lk.release()
    finally:
        lock_lost.disconnect(receiver)


def test_auto_renew_sends_no_renewal_after_release() -> None:
    backend = distlock.locks["default"].exclusive  # kept alive here: the lock gets this one
    calls = []
    original = backend.extend

    def counting_extend(*args, **kwargs):
        calls.append(time.monotonic())
        return original(*args, **kwargs)

    backend.extend = counting_extend  # type: ignore[method-assign]
    try:
        lk = distlock.lock("quiet", ttl=0.3, auto_renew=True)
        lk.acquire()
        time.sleep(0.35)
        assert calls, "no renewal happened while held"
        lk.release()
        released = time.monotonic()
        time.sleep(0.5)
        assert all(when < released for when in calls)
        assert renewer.active() == 0
    finally:
        del backend.extend


def test_renewal_threads_return_to_baseline_after_many_cycles() -> None:
    deadline = time.monotonic() + 5
    while renewer_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    baseline = threading.active_count()
    for _ in range(1000):
        lk = distlock.lock("cycle", ttl=30, auto_renew=True)
        lk.acquire()
        assert renewer_threads() <= 1
        lk.release()
    deadline = time.monotonic() + 5
    while threading.active_count() > baseline and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == baseline
    assert renewer.active() == 0


def test_garbage_collected_lock_is_no_longer_renewed() -> None:
    import gc

    lk = distlock.lock("dropped", ttl=3, auto_renew=True)  # the renewer looks every 1 s
    lk.acquire()
    assert renewer.active() == 1
    del lk
    gc.collect()
    deadline = time.monotonic() + 5
    while renewer.active() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert renewer.active() == 0


def test_signals_carry_name_alias_and_info() -> None:
    received = []

    def receiver(signal, sender, **kwargs):
        received.append((signal, sender, kwargs))

    for signal in (lock_acquired, lock_released, lock_contended, lock_force_released):
        signal.connect(receiver)
    try:
        backend_class = type(distlock.locks["default"])
        with distlock.lock("signalled", ttl=5, purpose="test") as lk:
            token = lk.token
            distlock.lock("signalled", wait=0).acquire()
        distlock.lock("forced", ttl=5).acquire()
        distlock.locks["default"].force_release("forced")
    finally:
        for signal in (lock_acquired, lock_released, lock_contended, lock_force_released):
            signal.disconnect(receiver)
    kinds = [signal for signal, _, _ in received]
    assert kinds == [
        lock_acquired,
        lock_contended,
        lock_released,
        lock_acquired,
        lock_force_released,
    ]
    assert all(sender is backend_class for _, sender, _ in received)
    acquired = received[0][2]
    assert acquired["name"] == "signalled" and acquired["alias"] == "default"
    assert acquired["info"].token == token and acquired["info"].purpose == "test"
    assert received[2][2]["info"].token == token
    assert received[1][2]["info"] is None
    assert received[4][2]["info"].name == "forced"


def test_info_held_and_force_release() -> None:
    backend = distlock.locks["default"]
    assert backend.info("x") is None and backend.held() == []
    a = distlock.lock("app:a", ttl=5)
    a.acquire()
    with distlock.lock("app:b", ttl=5, purpose="second"):
        distlock.lock("other", ttl=5).acquire()
        info = backend.info("app:a")
        assert info.name == "app:a" and info.token == a.token
        assert info.fencing_token == a.fencing_token
        assert info.acquired_at.tzinfo == UTC
        assert info.expires_at > info.acquired_at
        assert 4 < info.ttl_remaining <= 5
        assert info.pid > 0 and info.host and info.thread == "MainThread"
        assert info.renewals == 0 and info.depth == 1
        assert [i.name for i in backend.held()] == ["app:a", "app:b", "other"]
        assert [i.name for i in backend.held(prefix="app:")] == ["app:a", "app:b"]
        assert [i.name for i in backend.held(limit=1, offset=1)] == ["app:b"]
        assert backend.held(prefix="app:b")[0].purpose == "second"
        assert backend.force_release("app:a", token="not-the-token") is False
        assert backend.force_release("app:a", token=a.token) is True
        assert not a.owned()
        with pytest.raises(LockNotOwned):
            a.release()
    assert backend.force_release("other") is True
    assert backend.force_release("other") is False
    assert backend.held() == []


def test_shared_holders_exclude_the_writer_or_the_backend_says_what_to_use(
    contract_backend: str,
) -> None:
    readers = [distlock.lock("rw", shared=True, ttl=5, wait=0) for _ in range(2)]
    if contract_backend.startswith("redlock"):  # no quorum protocol for shared holders
        with pytest.raises(distlock.SharedLocksNotSupported, match="RedisBackend"):
            readers[0].acquire()
        return
    assert all(lk.acquire() for lk in readers)
    writer = distlock.lock("rw", ttl=5, wait=0)
    outcome: list[bool] = []
    thread = threading.Thread(target=lambda: outcome.append(writer.acquire()))
    thread.start()
    thread.join(5)
    assert outcome == [False]  # another thread: this one holds shared (an upgrade)
    for lk in readers:
        lk.release()
    assert writer.acquire()
    # Another thread: this one, holding the exclusive lock, would be granted it (a downgrade).
    assert not elsewhere(distlock.lock("rw", shared=True, wait=0).acquire)
    writer.release()


def test_lock_names_with_any_text_are_distinct() -> None:
    names = ["a:b", "a{b}", "a*", "a b", "ключ", "a/b", "a%3Ab", "{", "}", "a?[x]"]
    held = [distlock.lock(name, ttl=5) for name in names]
    for lk in held:
        assert lk.acquire(wait=0), lk.name
    assert sorted(i.name for i in distlock.locks["default"].held(limit=100)) == sorted(names)
    for lk in held:
        lk.release()


def test_handoff_between_threads_is_fast() -> None:
    delays = []
    for _ in range(10):
        holder = distlock.lock("handoff", ttl=10)
        holder.acquire()
        delays.append(handoff_delay(holder, distlock.lock("handoff", ttl=10), settle=0.05))
    delays.sort()
    assert delays[len(delays) // 2] < 0.05
