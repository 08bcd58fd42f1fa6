"""Celery tasks that run once at a time per lock name.

    from distlock.contrib.celery import LockedTask

    @app.task(base=LockedTask, lock_name="charge:{order_id}", lock_ttl=60)
    def charge(order_id): ...

The options are task options (class attributes of the task), all optional:

- ``lock_name``: a template over the task function's parameters, escaped like
  ``@lock_view``'s request values; default: the task's name (one run at a time overall).
- ``lock_ttl``: the lease in seconds, renewed while the task runs (default: the alias's
  TIMEOUT). A worker killed mid-task frees the lock when the lease ends.
- ``lock_on_duplicate``: ``"skip"`` (default: the duplicate logs it, stores the state
  IGNORED with ``{"distlock": "skipped", "lock": NAME, "holder": ...}`` as its info, see
  :func:`was_skipped`, and raises Celery's ``Ignore``; run in the caller's process it returns
  that dict) or ``"retry"`` (the duplicate calls ``self.retry(countdown=lock_retry_after)``,
  up to ``lock_max_retries``, default the task's ``max_retries``).
- ``lock_retry_after``, ``lock_max_retries`` also retry a task that found Redis unreachable
  when it started (BackendUnavailable).
- ``lock_at_enqueue``: also refuse a duplicate when it is enqueued (celery-once's model):
  ``apply_async``/``delay`` raise :class:`TaskAlreadyQueued` while a copy with the same lock
  name is queued (for up to ``lock_queued_ttl`` seconds, default 3600) or running.
- ``lock_using``: the DISTLOCK alias.
- ``lock_fence``: claim the lock's fencing token in each database transaction the task
  runs (``fence=True`` of distlock.lock): a run whose lease ended is refused
  (``FencedUpdateRejected``) and its transaction rolled back once a newer run claimed it.

The task body reaches its lock as ``self.lock`` (``bind=True``): its ``fencing_token``,
``lease_left()``, ``extend()``; None outside a run.

The lock is released when the task ends: success, exception, retry, and revoke with
``terminate=True`` (SIGTERM) in the prefork pool. The holder's purpose is
``"celery task NAME[ID]"`` (``... retry N`` for a retry), as the admin and ``manage.py
distlock list`` show it.

Delivery (docs/tasks-and-leaders.md): a message the broker flags redelivered that finds the
lock held by its own task id and try is a message delivered again, not a duplicate: it waits
for that run's lease and runs if the run was killed (the same id sent twice, not flagged, is
a duplicate). A try that sends its retry records that its work is the retry's. The first
duplicate a run skips schedules one check of that run, which does the work once if the run
was killed. What tells a killed run from one that ended is in run_markers.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

from django.core.exceptions import ImproperlyConfigured

try:
    import celery
    from celery import states
    from celery.backends.base import DisabledBackend
    from celery.exceptions import Ignore, Retry
    from celery.utils import uuid
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImproperlyConfigured(
        "distlock.contrib.celery needs Celery: pip install 'celery>=5.3' (or the celery "
        "extra of a distlock clone: pip install './distlock[celery]')."
    ) from exc

from ..exceptions import BackendUnavailable, LockError, LockNotAcquired
from ..handler import locks
from ..info import PURPOSE_MAX_LENGTH, LockInfo
from ..lock import Lock
from .run_markers import (
    HANDED_OVER,
    claim_check,
    handed_over,
    has_ended,
    mark_ended,
    take_over,
)
from .task_lock import (
    TaskLockName,
    check_on_duplicate,
    holder_line,
    logger,
    release_quietly,
    running_lock,
    running_under,
    skipped,
    was_skipped,
)

__all__ = ["LockedTask", "TaskAlreadyQueued", "was_skipped"]

# The message header that carries the token of the lock taken at enqueue time.
QUEUED_HEADER = "distlock_queued"
QUEUED_PREFIX = "distlock-queued:"
# The message header of a message that waits for a run to end: {"token": the run's lock
# token, "why": "redelivered" | "retried" | "skipped"} (see LockedTask._held_by).
AFTER_HEADER = "distlock_after"
# Seconds past the end of a lease before a waiting message looks again.
AFTER_MARGIN = 0.2


class TaskAlreadyQueued(LockNotAcquired):
    """apply_async() refused a task: a copy with the same lock name is queued or running."""


class _Terminated(BaseException):
    """Raised in the task by SIGTERM (revoke with terminate), so that the lock is released."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class LockedTask(celery.Task):
    """A Celery task base class: each run holds a distributed lock named from its arguments."""

    lock_name: str | None = None
    lock_ttl: float | None = None
    lock_on_duplicate: str = "skip"
    lock_retry_after: float = 5
    lock_max_retries: int | None = None
    lock_at_enqueue: bool = False
    lock_queued_ttl: float = 3600
    lock_using: str = "default"
    lock_hold_until_commit: bool = True  # a release inside a transaction waits for it
    lock_fence: bool = False  # claim the fencing token in each database transaction

    _lock_namer: TaskLockName | None = None

    @property
    def lock(self) -> Lock | None:
        """The Lock this run of the task holds (None outside a run)."""
        return running_lock()

    # --- naming -------------------------------------------------------------------------
    def lock_name_for(self, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]) -> str:
        """Return the lock name of a call of this task with ``args`` and ``kwargs``."""
        namer = self._lock_namer
        if namer is None:
            template = self.lock_name if self.lock_name is not None else self.name
            where = f"LockedTask {self.name}"
            check_on_duplicate(self.lock_on_duplicate, where)
            namer = self._lock_namer = TaskLockName(template, self.run, where)
        return namer.render(args, kwargs)

    def _purpose(self, task_id: str | None, suffix: str = "") -> str:
        return f"celery task {self.name}[{task_id}]{suffix}"

    def _run_purpose(self) -> str:
        """The purpose of this delivery's lock: a retry names its number, so that a message
        delivered again (same id, same try) is told from a retry (same id, next try)."""
        retries = self.request.retries or 0
        return self._purpose(self.request.id, f" retry {retries}" if retries else "")

    # --- running ------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        task_id = self.request.id
        lock = Lock(
            self.lock_name_for(args, kwargs),
            ttl=self.lock_ttl,
            wait=0,
            auto_renew=True,
            using=self.lock_using,
            purpose=self._run_purpose(),
            hold_until_commit=self.lock_hold_until_commit,
            metric_name=self.lock_name if self.lock_name is not None else self.name,
            fence=self.lock_fence,
        )
        try:
            settled = self._acquire_or_settle(lock, args, kwargs)
        except BackendUnavailable as exc:  # Celery's retry, lock_retry_after seconds later
            raise self.retry(
                countdown=self.lock_retry_after, max_retries=self.lock_max_retries, exc=exc
            ) from exc
        if settled is not _RUN:
            return settled
        self._forget_queued()
        terminated: _Terminated | None = None
        try:
            with _release_on_sigterm(), running_under(lock):
                return super().__call__(*args, **kwargs)
        except _Terminated as exc:
            terminated = exc
            raise
        finally:
            self._mark_ended(lock)
            release_quietly(lock, self.name, task_id)
            if terminated is not None:
                _die_of(terminated.signum)

    # --- delivery: who holds the lock, and what this message then does -----------------
    def _acquire_or_settle(self, lock: Lock, args: Any, kwargs: Any) -> Any:
        """Return _RUN once ``lock`` is held and the body should run; otherwise settle this
        message (skip, retry, wait for a run to end) and return its result or raise."""
        after = _after(self.request)
        for _ in range(3):  # the holder may end between the attempt and the look at it
            if lock.acquire():
                return self._acquired(lock, after)
            info = lock.operations.holder(lock.name)
            if info is not None:
                return self._held_by(lock, info, after, args, kwargs)
        return self._duplicate(lock, None, args, kwargs)

    def _acquired(self, lock: Lock, after: dict[str, str] | None) -> Any:
        """The lock is held: return _RUN, unless this message waited for a killed run whose
        work is done (it ended after all, or another message took it over)."""
        if after is not None and after["why"] != "retried":
            delivery, why = after["purpose"], after["why"]
        elif after is None and _redelivered(self.request):
            # Delivered again after its run's lease ended: its run may have ended its body
            # before it was killed, or a check of that run may have taken its work over.
            delivery, why = _delivery(lock), "redelivered"
        else:
            return _RUN
        try:
            taken = take_over(lock, delivery, _delivery(lock))
        except LockError:
            release_quietly(lock, self.name, self.request.id)
            raise
        if not taken:
            release_quietly(lock, self.name, self.request.id)
            return self._drop(lock, why, delivery)
        if after is not None:
            logger.info(
                "distlock: %s[%s] runs: the run of %r it waited for was killed (%s)",
                self.name,
                self.request.id,
                lock.name,
                why,
            )
        return _RUN

    def _held_by(
        self, lock: Lock, info: LockInfo, after: dict[str, str] | None, args: Any, kwargs: Any
    ) -> Any:
        eager = self.request.is_eager or self.request.called_directly
        held_try = None if eager else _try_of(info.purpose, self._purpose(self.request.id))
        my_try = self.request.retries or 0
        again = _redelivered(self.request) or (after is not None and after["why"] == "redelivered")
        if held_try == my_try and again:
            # This very message holds the lock: delivered again (acks_late and its worker
            # lost, a broker's visibility timeout: the broker flags it redelivered). Never a
            # duplicate of itself: it waits for that run's lease, then runs unless the run
            # ended. The same id sent twice (not flagged) is a duplicate, below.
            return self._wait_for(info, "redelivered", info.ttl_remaining)
        if held_try is not None and held_try < my_try:
            # Its earlier try is releasing the lock (or was killed): look again soon.
            return self._wait_for(info, "retried", min(info.ttl_remaining, 1.0))
        if held_try is not None and held_try > my_try:
            # A later try of this task holds the lock: this try handed its work to its
            # retry (and was killed before its message was acknowledged).
            return self._drop(lock, HANDED_OVER, None)
        if after is not None and info.token == after["token"]:
            return self._wait_for(info, after["why"], info.ttl_remaining)  # still there
        if after is not None and after["why"] != "retried" and has_ended(lock, after["purpose"]):
            return self._drop(lock, after["why"], after["purpose"])
        return self._duplicate(lock, info, args, kwargs)

    def _duplicate(self, lock: Lock, info: LockInfo | None, args: Any, kwargs: Any) -> Any:
        if self.lock_on_duplicate == "retry":
            raise self.retry(
                countdown=self.lock_retry_after,
                max_retries=self.lock_max_retries,
                exc=LockNotAcquired(lock.name),
            )
        self._forget_queued()
        result = skipped(lock, self.name, self.request.id, holder_line(info))
        if self.request.is_eager or self.request.called_directly:
            return result  # in the caller's process: nothing to record, nobody to recover
        if info is not None:
            with claim_check(lock, info.token, f"check after {info.purpose}") as first:
                if first:
                    self._check_after(info, args, kwargs)
        if info is None or not info.purpose.startswith(self._purpose(self.request.id)):
            self._record_ignored(result)  # the same id sent twice: its state is the run's
        raise Ignore()

    def _check_after(self, info: LockInfo, args: Any, kwargs: Any) -> None:
        """Schedule the one check of the run ``info`` names: when its lease has ended, it
        runs the work if that run died, and is dropped if it ended."""
        check = self.signature_from_request(
            self.request,
            args,
            kwargs,
            task_id=uuid(),
            retries=0,
            chord=None,  # the work again, on its own: not a member of the duplicate's group
            group_id=None,
            group_index=None,
            countdown=info.ttl_remaining + AFTER_MARGIN,
            headers=self._headers_waiting_for(info, "skipped"),
        )
        sent = check.apply_async()
        logger.info(
            "distlock: %s[%s] will check, as %s[%s], that the run holding %r ended",
            self.name,
            self.request.id,
            self.name,
            sent.id,
            info.name,
        )

    def _wait_for(self, info: LockInfo, why: str, seconds: float) -> Any:
        """Send this message again (same id, same try) to look at the run ``info`` names
        ``seconds`` later (when its lease has ended), and let go of this delivery."""
        again = self.signature_from_request(
            self.request,
            countdown=seconds + AFTER_MARGIN,
            headers=self._headers_waiting_for(info, why),
        )
        again.apply_async()
        raise Ignore()

    def _headers_waiting_for(self, info: LockInfo, why: str) -> dict[str, Any]:
        """This message's headers (as a retry keeps them), and AFTER_HEADER naming the run
        ``info`` describes."""
        headers = self.request.as_execution_options().get("headers") or {}  # no x-death
        return {**headers, AFTER_HEADER: _waiting_for(info, why)}

    def _drop(self, lock: Lock, why: str, delivery: str | None) -> Any:
        logger.info(
            "distlock: %s[%s] not run: the run of %r it waited for ended, or another took its "
            "work over (%s)",
            self.name,
            self.request.id,
            lock.name,
            why,
        )
        # A check has an id of its own; a message delivered again keeps the result its run
        # stored, if that run ended (its work taken over by another message, it has none);
        # one whose try handed its work to a retry leaves the id's state to that retry.
        if why == "skipped" or (
            delivery is not None
            and not handed_over(lock, delivery)
            and not isinstance(self.backend, DisabledBackend)
            and self.AsyncResult(self.request.id).state not in states.READY_STATES
        ):
            self._record_ignored(
                {"distlock": "skipped", "lock": lock.name, "holder": "a run that ended"}
            )
        raise Ignore()

    def _record_ignored(self, result: dict[str, Any]) -> None:
        """Store the IGNORED state, the skipped result as its info: a skip is not a success."""
        if not self.ignore_result and self.request.id:
            self.update_state(state=states.IGNORED, meta=result)

    def _mark_ended(self, lock: Lock, how: str = "ended") -> None:
        if lock.token is None or self.request.is_eager or self.request.called_directly:
            return  # in the caller's process: no message to deliver again, no check
        try:
            # A try that hands its work to its retry records it whatever its acks: its
            # message delivered again, or a check of its duplicates, then leave the work
            # to the retry.
            redelivered_too = bool(self.acks_late) or how == HANDED_OVER
            mark_ended(lock, _delivery(lock), redelivered_too, how)
        except LockError as exc:  # a check of this run will then run the work again
            logger.warning("distlock: %s could not record that it ended: %s", lock.purpose, exc)

    def retry(  # Celery's own signature (the public API pins it)
        self,
        args=None,
        kwargs=None,
        exc=None,
        throw=True,
        eta=None,
        countdown=None,
        max_retries=None,
        **options,
    ):
        """Celery's retry; a run holding its lock then records that its work is its retry's
        (before its message is acknowledged)."""
        try:
            sent = super().retry(args, kwargs, exc, throw, eta, countdown, max_retries, **options)
        except Retry:  # sent (throw=True)
            self._hand_over()
            raise
        self._hand_over()
        return sent

    def _hand_over(self) -> None:
        lock = running_lock()
        if lock is not None and _delivery(lock) == self._run_purpose()[:PURPOSE_MAX_LENGTH]:
            self._mark_ended(lock, HANDED_OVER)

    def _forget_queued(self) -> None:
        """Release the lock taken when this message was enqueued (lock_at_enqueue): from now
        on the running copy's own lock refuses duplicates."""
        token = _queued_token(self.request)
        if token and self.lock_at_enqueue:
            name = self.lock_name_for(self.request.args or (), self.request.kwargs or {})
            with contextlib.suppress(LockError):  # otherwise its lease ends it
                locks[self.lock_using].force_release(QUEUED_PREFIX + name, token)

    # --- enqueueing ---------------------------------------------------------------------
    def apply_async(
        self, args: Any = None, kwargs: Any = None, task_id: str | None = None, **options: Any
    ) -> Any:
        """Enqueue the task; with lock_at_enqueue, raise TaskAlreadyQueued if a copy with the
        same lock name is queued or running."""
        headers = options.get("headers") or {}
        # A retry (the running task enqueueing itself again) was let in already.
        retry = task_id is not None and task_id == self.request.id
        if not self.lock_at_enqueue or retry or QUEUED_HEADER in headers or AFTER_HEADER in headers:
            return super().apply_async(args, kwargs, task_id=task_id, **options)
        task_id = task_id or uuid()
        name = self.lock_name_for(args or (), kwargs or {})
        queued = Lock(
            QUEUED_PREFIX + name,
            ttl=self.lock_queued_ttl,
            wait=0,
            using=self.lock_using,
            purpose=self._purpose(task_id, " (queued)"),
        )
        backend = queued.operations
        running = backend.holder(name)
        if running is not None or not queued.acquire():
            raise TaskAlreadyQueued(name, holder=running or backend.holder(queued.name))
        options["headers"] = {**headers, QUEUED_HEADER: queued.token}
        try:
            return super().apply_async(args, kwargs, task_id=task_id, **options)
        except BaseException:
            queued.release()
            raise


_RUN = object()  # _acquire_or_settle(): the lock is held, run the body


def _delivery(lock: Lock) -> str:
    """The delivery a run's lock names (task, id, try): its purpose, as the server keeps it."""
    return (lock.purpose or "")[:PURPOSE_MAX_LENGTH]


def _waiting_for(info: LockInfo, why: str) -> dict[str, str]:
    """The AFTER_HEADER of a message that waits for the run ``info`` names."""
    return {"token": info.token, "purpose": info.purpose, "why": why}


def _try_of(purpose: str, task: str) -> int | None:
    """The try (0 for the first) of the task ``task`` (its purpose without a try) that the
    lock purpose ``purpose`` names; None if it names another task or id."""
    if purpose == task:
        return 0
    number = purpose.removeprefix(f"{task} retry ")
    return int(number) if number != purpose and number.isdigit() else None


def _redelivered(request: Any) -> bool:
    """Whether the broker says it delivered this message before (RabbitMQ, Redis)."""
    return bool((request.delivery_info or {}).get("redelivered"))


def _after(request: Any) -> dict[str, str] | None:
    """Return the run this message waits for (AFTER_HEADER), or None."""
    after = getattr(request, AFTER_HEADER, None) or (request.headers or {}).get(AFTER_HEADER)
    return after if isinstance(after, dict) else None


def _queued_token(request: Any) -> str | None:
    # Celery makes a message's custom headers attributes of the request; look in
    # request.headers too, where older message formats keep them.
    token = getattr(request, QUEUED_HEADER, None) or (request.headers or {}).get(QUEUED_HEADER)
    return token if isinstance(token, str) else None


@contextlib.contextmanager
def _release_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into an exception while the task runs, if it would kill the process.

    A prefork pool child resets SIGTERM to its default action, and ``revoke(terminate=True)``
    sends it: without this the child would die holding the lock until its lease ends. Where
    SIGTERM has a handler of its own (the worker's main process: warm shutdown) it is left
    alone.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return

    def terminate(signum: int, frame: object) -> None:
        raise _Terminated(signum)

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _die_of(signum: int) -> None:
    """Let the signal do what it would have done (the lock is released by now)."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
