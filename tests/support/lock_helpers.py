"""Measurements several lock test modules share."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import distlock
from benchmarks import held
from devkit.processes import started_processes
from distlock import BackendUnavailable
from distlock.backends.operations import Request
from distlock.backends.redis_ops.backend import ScriptedBackend
from distlock.handler import locks
from distlock.info import holder_metadata


def renewer_threads() -> int:
    """How many renewal threads run in this process (distlock keeps at most one)."""
    return sum(1 for t in threading.enumerate() if t.name == "distlock-renewer")


def handoff_delay(holder: distlock.Lock, waiter: distlock.Lock, settle: float) -> float:
    """Let ``waiter`` wait in another thread for ``settle`` seconds, release ``holder``, and
    return how long after the release the waiter held the lock (it releases it at once).

    Raise AssertionError if the waiter did not get the lock within 5 seconds.
    """
    acquired_at: list[float] = []

    def wait_for_it() -> None:
        if waiter.acquire(wait=5):
            acquired_at.append(time.monotonic())
            waiter.release()

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    time.sleep(settle)
    released = time.monotonic()
    holder.release()
    thread.join()
    assert acquired_at, f"the waiter never got {waiter.name!r}"
    return acquired_at[0] - released


def holder_index(
    name: str, processes: list, other_than: int | None = None, timeout: float = 15
) -> int:
    """Return the index in ``processes`` (Popen objects) of the one that holds ``name``, once
    it is not ``other_than``; raise AssertionError if none does within ``timeout`` seconds."""
    pids = [process.pid for process in processes]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = distlock.locks["default"].info(name)
        if info is not None and info.pid in pids and pids.index(info.pid) != other_than:
            return pids.index(info.pid)
        time.sleep(0.02)
    raise AssertionError(f"none of the processes held {name!r} within {timeout}s")


@contextmanager
def spawner(
    module: str, env: dict[str, str], *, stdin: bool = False
) -> Iterator[Callable[..., subprocess.Popen]]:
    """Yield ``start(*arguments)``, which runs ``python -m module *arguments`` with ``env``
    (child_env()) through start_process (stdout, and stdin if asked, piped as text); every
    process started is killed and reaped at the end."""
    with started_processes() as start_one:

        def start(*arguments: str) -> subprocess.Popen:
            return start_one(
                [sys.executable, "-m", module, *arguments],
                env,
                stdout=subprocess.PIPE,
                stdin=subprocess.PIPE if stdin else None,
                text=True,
            )

        yield start


def read_line(process: subprocess.Popen, expected: str) -> str:
    """Return the next line a worker printed; AssertionError unless it starts with
    ``expected``."""
    line = process.stdout.readline().strip()
    assert line.startswith(expected), f"worker said {line!r}, expected {expected!r}"
    return line


def assert_counted_exactly(workers: list[subprocess.Popen], data_url: str, expected: int) -> None:
    """Let the ``counter`` workers (tests.support.workers) run to the end; assert that their
    counter on the Redis at ``data_url`` is ``expected`` (no update lost: no two holders at
    once) and that the fencing tokens they saw only went up."""
    import redis

    for process in workers:
        read_line(process, "ready")
    for process in workers:
        assert process.wait(timeout=240) == 0
    data = redis.Redis.from_url(data_url)
    assert int(data.get("counter")) == expected, "lost updates: two holders overlapped"
    assert data.get("fence_violations") is None, "a fencing token did not increase"


def hold_many(names: list[str], ttl: float) -> dict[str, str]:
    """Hold every lock in ``names`` (free before) for ``ttl`` seconds on the default alias,
    fast; return their tokens by name. Scripted backends take them with their own acquire
    script, pipelined (benchmarks/held.py); the others one primitive call each."""
    backend = locks["default"]
    if isinstance(backend, ScriptedBackend):
        return held.acquire_all(names, round(ttl * 1000))
    meta = holder_metadata(None)
    tokens = {name: os.urandom(16).hex() for name in names}
    for name, token in tokens.items():
        if not backend.exclusive.try_acquire(
            Request(name, token, round(ttl * 1000), meta, 0)
        ).acquired:
            raise RuntimeError(f"{name!r} was meant to be free")
    return tokens


def release_many(tokens: dict[str, str]) -> None:
    """Release the locks hold_many() took."""
    backend = locks["default"]
    if isinstance(backend, ScriptedBackend):
        held.release_all(tokens)
        return
    for name, token in tokens.items():
        backend.exclusive.release(name, token)


@contextmanager
def churning(names: int = 200) -> Iterator[Counter[str]]:
    """Take and release ``churn:<n>`` locks on the default alias in a thread while the
    block runs; yield a Counter whose "locks" counts them."""
    done = threading.Event()
    churned: Counter[str] = Counter()

    def churn() -> None:
        for number in itertools.cycle(range(names)):
            if done.is_set():
                return
            with distlock.lock(f"churn:{number}", ttl=5):
                churned["locks"] += 1

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        yield churned
    finally:
        done.set()
        worker.join()


class Holds:
    """When each client believed it held the lock: from its acquire's reply to its release
    (or, when the release failed, to the end of the lease counted from the acquire's start)."""

    def __init__(self) -> None:
        self.intervals: list[tuple[str, float, float]] = []
        self.unavailable: Counter[str] = Counter()

    def hold_once(self, client: str, backend: Any, name: str, ttl: float) -> None:
        token = uuid.uuid4().hex
        asked = time.monotonic()
        try:
            attempt = backend.exclusive.try_acquire(
                Request(name, token, round(ttl * 1000), "{}", 0)
            )
        except BackendUnavailable:
            self.unavailable[client] += 1
            return
        if not attempt.acquired:
            return
        held_from = time.monotonic()
        time.sleep(0.01)
        held_until = time.monotonic()
        try:
            backend.exclusive.release(name, token)
        except BackendUnavailable:
            held_until = asked + ttl  # the holder must assume it holds it until then
        self.intervals.append((client, held_from, held_until))

    def two_holders(self) -> list[tuple[tuple[str, float, float], ...]]:
        ordered = sorted(self.intervals, key=lambda interval: interval[1])
        return [
            (first, second)
            for first, second in itertools.combinations(ordered, 2)
            if first[0] != second[0] and second[1] < first[2]
        ]


class Acknowledged:
    """A thread taking a new lock (``acked:<n>``, a 60 s lease) on ``backend`` again and
    again while the block runs: ``tokens`` of those acquired, ``refused`` counts the
    attempts that raised BackendUnavailable."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.tokens: dict[str, str] = {}
        self.refused = 0
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._keep_locking)

    def _keep_locking(self) -> None:
        for number in itertools.count():
            if self._stop.is_set():
                return
            name, token = f"acked:{number}", uuid.uuid4().hex
            try:
                if self.backend.exclusive.try_acquire(
                    Request(name, token, 60_000, "{}", 0)
                ).acquired:
                    self.tokens[name] = token
            except BackendUnavailable:
                self.refused += 1
                time.sleep(0.01)

    def __enter__(self) -> Acknowledged:
        self._worker.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._worker.join()

    def lost(self, reader: Any) -> list[str]:
        """Return the acquired locks that ``reader`` (another backend) does not see held
        with the same token."""
        held = {info.name: info.token for info in reader.iter_held("acked:")}
        return [name for name, token in self.tokens.items() if held.get(name) != token]


def is_held(name: str, using: str = "default") -> bool:
    """Return True if anyone holds the lock ``name`` of alias ``using``."""
    return locks[using].info(name) is not None


def free_within(name: str, seconds: float = 0.1) -> bool:
    """Return True if ``name`` is free now or becomes free within ``seconds``."""
    deadline = time.monotonic() + seconds
    while is_held(name):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def queued_in_turn(name: str, count: int, join: Callable[[int], Any]) -> list[Any]:
    """Call ``join(i)`` for i in 0..count-1, each once the one before it is counted among
    the lock's waiters (so their queue order is the order of the calls); return what each
    call returned."""
    joined = []
    for place in range(count):
        joined.append(join(place))
        deadline = time.monotonic() + 20
        while (distlock.locks["default"].info(name).waiters or 0) < place + 1:
            assert time.monotonic() < deadline, f"waiter {place + 1} never queued for {name!r}"
            time.sleep(0.01)
    return joined


@contextmanager
def contenders(count: int, timeout: float = 10.0) -> Iterator[Callable[[], None]]:
    """Yield ``wait()``, which returns once ``count`` acquires have found their lock held
    (``lock_contended``: sent after the attempt that queued them), so a test knows its
    waiters are queued without sleeping for it."""
    from distlock.signals import lock_contended

    seen = threading.Semaphore(0)

    def on_contended(sender: Any, **kwargs: Any) -> None:
        seen.release()

    def wait() -> None:
        for _ in range(count):
            assert seen.acquire(timeout=timeout), "a waiter never queued"

    lock_contended.connect(on_contended, weak=False)
    try:
        yield wait
    finally:
        lock_contended.disconnect(on_contended)


def elsewhere(func: Any, *args: Any) -> Any:
    """Return ``func(*args)`` run in another thread: a thread holding the shared lock may
    not ask for the exclusive one (an upgrade), another thread may."""
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(func(*args))
        except BaseException as exc:  # raised again in the caller's thread
            result.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


def seen_from_inside(lock: distlock.Lock, name: str) -> dict[str, Any]:
    """What code running under ``lock`` (held as ``name`` on the default alias) reaches of it:
    its fencing token (and the server's, to compare), ``lease_left()`` after an
    ``extend()``, and whether it is fenced (issue 40: each surface's own lock)."""
    held = locks["default"].info(name)
    assert held is not None
    lock.extend()
    return {
        "token": lock.fencing_token,
        "server_token": held.fencing_token,
        "lease_left": lock.lease_left(),
        "fence": lock.fence,
    }


class BrokenCounter:
    """Stands for distlock.transactions._numbers, the counter of transactions, raising at
    each number asked: the bookkeeping of every BEGIN fails (the set_autocommit wrapper
    numbers the usual one itself, without calling _began)."""

    def __init__(self, where: str) -> None:
        self.where = where

    def __iter__(self) -> BrokenCounter:
        return self

    def __next__(self) -> int:
        raise RuntimeError(f"injected into {self.where}")


def take_timed(name: str, seen: dict[str, Any], *, ttl: float = 5, wait: float | None) -> None:
    """Ask for ``name`` (waiting up to ``wait``) in sync code; note in ``seen`` whether it was
    granted (``got``) and how long that took (``took``, s), and release it if so."""
    lk = distlock.lock(name, ttl=ttl, wait=wait)
    began = time.monotonic()
    seen["got"] = lk.acquire()
    seen["took"] = round(time.monotonic() - began, 2)
    if seen["got"]:
        lk.release()


async def atake_timed(
    name: str, seen: dict[str, Any], *, ttl: float = 5, wait: float | None
) -> None:
    """The same as take_timed, in a coroutine."""
    lk = distlock.lock(name, ttl=ttl, wait=wait)
    began = time.monotonic()
    seen["got"] = await lk.aacquire()
    seen["took"] = round(time.monotonic() - began, 2)
    if seen["got"]:
        await lk.arelease()


@contextmanager
def forced_free_after(name: str, seconds: float, noted: dict[str, Any]) -> Iterator[None]:
    """Run the block; if it has not ended within ``seconds`` (a wait=None that must not hang
    did), note in ``noted`` whether ``name`` was held then (``held_then``) and force it free
    on the server, so that the test ends all the same. Nothing is forced after the block."""
    finished = threading.Event()

    def watchdog() -> None:
        if finished.wait(seconds):
            return
        noted["held_then"] = locks["default"].info(name) is not None
        locks["default"].force_release(name)

    watching = threading.Thread(target=watchdog, daemon=True)
    watching.start()
    try:
        yield
    finally:
        finished.set()
        watching.join()
