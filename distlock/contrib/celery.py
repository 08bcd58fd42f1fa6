"""Celery tasks that run once at a time per lock name.

    from distlock.contrib.celery import LockedTask

    @app.task(base=LockedTask, lock_name="charge:{order_id}", lock_ttl=60)
    def charge(order_id): ...

The options are task options (class attributes of the task), all optional:

- ``lock_name``: a template over the task function's parameters, escaped like
  ``@lock_view``'s request values; default: the task's name (one run at a time overall).
- ``lock_ttl``: the lease in seconds, renewed while the task runs (default: the alias's
  TIMEOUT). A worker killed mid-task frees the lock when the lease ends.
- ``lock_on_duplicate``: ``"skip"`` (default: the duplicate returns
  ``{"distlock": "skipped", "lock": NAME, "holder": ...}``, see :func:`was_skipped`, and logs
  it) or ``"retry"`` (the duplicate calls ``self.retry(countdown=lock_retry_after)``, up to
  ``lock_max_retries``, default the task's ``max_retries``).
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
``"celery task NAME[ID]"``, as the admin and ``manage.py distlock list`` show it.
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
    from celery.utils import uuid
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImproperlyConfigured(
        "distlock.contrib.celery needs Celery: pip install 'celery>=5.3' (or the celery "
        "extra of a distlock clone: pip install './distlock[celery]')."
    ) from exc

from ..exceptions import LockError, LockNotAcquired
from ..handler import locks
from ..lock import Lock
from .task_lock import (
    TaskLockName,
    check_on_duplicate,
    holder_text,
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

    # --- running ------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        task_id = self.request.id
        lock = Lock(
            self.lock_name_for(args, kwargs),
            ttl=self.lock_ttl,
            wait=0,
            auto_renew=True,
            using=self.lock_using,
            purpose=self._purpose(task_id),
            hold_until_commit=self.lock_hold_until_commit,
            metric_name=self.lock_name if self.lock_name is not None else self.name,
            fence=self.lock_fence,
        )
        if not lock.acquire():
            return self._duplicate(lock, task_id)
        self._forget_queued()
        terminated: _Terminated | None = None
        try:
            with _release_on_sigterm(), running_under(lock):
                return super().__call__(*args, **kwargs)
        except _Terminated as exc:
            terminated = exc
            raise
        finally:
            release_quietly(lock, self.name, task_id)
            if terminated is not None:
                _die_of(terminated.signum)

    def _duplicate(self, lock: Lock, task_id: str | None) -> Any:
        holder = holder_text(lock)
        if self.lock_on_duplicate != "retry":
            self._forget_queued()
            return skipped(lock, self.name, task_id, holder)
        raise self.retry(
            countdown=self.lock_retry_after,
            max_retries=self.lock_max_retries,
            exc=LockNotAcquired(lock.name),
        )

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
        if not self.lock_at_enqueue or retry or QUEUED_HEADER in headers:
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
