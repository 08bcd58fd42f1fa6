"""Tasks of Django's Tasks framework (``django.tasks``, Django >= 6.0) that run once at a
time per lock name.

    from django.tasks import task
    from distlock.contrib.tasks import locked

    @locked("charge:{order_id}", ttl=60)
    @task
    def charge(order_id): ...

``locked`` takes the Task that ``@task`` made and returns one that holds a distributed lock
while it runs, named from its arguments (escaped like ``@lock_view``'s request values). The
lease is renewed while the task runs and released when it ends, however it ends; a worker
killed mid-task frees the lock when its lease ends. A duplicate that starts while the lock is
held returns ``{"distlock": "skipped", "lock": NAME, "holder": ...}`` (``was_skipped()``)
and logs it; with ``on_duplicate="retry"`` it also enqueues itself again to run
``retry_after`` seconds later (the backend must support ``run_after``; the result names the
new one under ``"retried_as"``). The holder's purpose is ``"django task NAME[RESULT_ID]"``.

A task made with ``@task(takes_context=True)`` reaches its lock as ``context.lock`` (a
:class:`LockedTaskContext`): its ``fencing_token``, ``lease_left()``, ``extend()``.
``fence=True`` claims the fencing token in each database transaction the task runs: a run
whose lease ended is refused (``FencedUpdateRejected``) and its transaction rolled back once
a newer run claimed it.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

try:
    from django.tasks import Task, TaskContext
except ImportError as exc:  # Django < 6.0
    raise ImproperlyConfigured(
        "distlock.contrib.tasks needs Django's Tasks framework (django.tasks, Django >= 6.0)."
    ) from exc

from ..lock import Lock
from .task_lock import (
    TaskLockName,
    arelease_quietly,
    check_on_duplicate,
    holder_text,
    release_quietly,
    running_under,
    skipped,
    was_skipped,
)

__all__ = ["LockedTaskContext", "locked", "was_skipped"]


# TaskContext is a frozen dataclass (django/tasks/base.py); the stubs do not say so.
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LockedTaskContext(TaskContext):  # type: ignore[misc]
    """The context a locked task takes (``takes_context=True``): Django's, and its lock."""

    lock: Lock


def locked(
    name: str | None = None,
    *,
    ttl: float | None = None,
    on_duplicate: str = "skip",
    retry_after: float = 5,
    using: str = "default",
    hold_until_commit: bool = True,
    fence: bool = False,
) -> Callable[[Task], Task]:
    """Return a decorator that makes a ``django.tasks`` Task hold a lock while it runs.

    ``name`` is a template over the task function's parameters (default: the task's module
    path, one run at a time overall); ``ttl`` the lease in seconds, renewed while the task
    runs (default: the alias's TIMEOUT); ``on_duplicate`` ``"skip"`` or ``"retry"``;
    ``hold_until_commit``: a release inside a database transaction waits for it to end;
    ``fence``: claim the fencing token in each database transaction the task runs.
    """
    if not isinstance(fence, bool):
        raise TypeError(f"fence must be True or False, not {fence!r}.")

    def decorate(task: Task) -> Task:
        if not isinstance(task, Task):
            raise TypeError("locked() decorates a django.tasks Task: put @locked(...) above @task.")
        where = f"locked task {task.module_path}"
        check_on_duplicate(on_duplicate, where)
        if on_duplicate == "retry" and not task.get_backend().supports_defer:
            raise ImproperlyConfigured(
                f"{where}: on_duplicate='retry' enqueues the duplicate again with run_after, "
                f"which the task backend {task.backend!r} does not support."
            )
        namer = TaskLockName(name or task.module_path, task.func, where)
        run = _LockedRun(
            task, namer, ttl, on_duplicate, retry_after, using, hold_until_commit, fence
        )
        return dataclasses.replace(task, func=run.wrapper(), takes_context=True)

    return decorate


@dataclasses.dataclass(frozen=True)
class _LockedRun:
    """Run one task function under its lock; called by the worker with the task context."""

    task: Task  # as it was decorated: its function, before the wrapper replaces it
    namer: TaskLockName
    ttl: float | None
    on_duplicate: str
    retry_after: float
    using: str
    hold_until_commit: bool
    fence: bool

    def wrapper(self) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(self.task.func):

            async def arun(context: TaskContext, *args: Any, **kwargs: Any) -> Any:
                lock = self._lock(context, args, kwargs)
                if not await lock.aacquire():
                    return self._duplicate(lock, context, args, kwargs)
                try:
                    with running_under(lock):
                        arguments = self._arguments(context, args, lock)
                        return await self.task.func(*arguments, **kwargs)
                finally:
                    await arelease_quietly(lock, self.task.module_path, context.task_result.id)

            return self._dress(arun)

        def run(context: TaskContext, *args: Any, **kwargs: Any) -> Any:
            lock = self._lock(context, args, kwargs)
            if not lock.acquire():
                return self._duplicate(lock, context, args, kwargs)
            try:
                with running_under(lock):
                    return self.task.func(*self._arguments(context, args, lock), **kwargs)
            finally:
                release_quietly(lock, self.task.module_path, context.task_result.id)

        return self._dress(run)

    def _dress(self, run: Callable[..., Any]) -> Callable[..., Any]:
        """Give ``run`` the task function's name (the worker imports the task by it) and a
        signature with ``context`` first (the framework checks it)."""
        functools.update_wrapper(run, self.task.func)
        signature = inspect.signature(self.task.func)
        parameters = list(signature.parameters.values())
        if not self.task.takes_context:
            parameters.insert(
                0, inspect.Parameter("context", inspect.Parameter.POSITIONAL_OR_KEYWORD)
            )
        run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        return run

    def _arguments(
        self, context: TaskContext, args: tuple[Any, ...], lock: Lock | None = None
    ) -> tuple[Any, ...]:
        """The task function's arguments: with its context first when it takes one (with the
        lock in it, once held)."""
        if not self.task.takes_context:
            return args
        if lock is not None:
            context = LockedTaskContext(task_result=context.task_result, lock=lock)
        return (context, *args)

    def _lock(self, context: TaskContext, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Lock:
        name = self.namer.render(self._arguments(context, args), kwargs)
        purpose = f"django task {self.task.module_path}[{context.task_result.id}]"
        return Lock(
            name,
            ttl=self.ttl,
            wait=0,
            auto_renew=True,
            using=self.using,
            purpose=purpose,
            hold_until_commit=self.hold_until_commit,
            metric_name=self.namer.template,  # bounded, unlike the name made from it
            fence=self.fence,
        )

    def _duplicate(
        self, lock: Lock, context: TaskContext, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        result = skipped(lock, self.task.module_path, context.task_result.id, holder_text(lock))
        if self.on_duplicate == "retry":
            task = context.task_result.task
            later = timezone.now() + timedelta(seconds=self.retry_after)
            result["retried_as"] = task.using(run_after=later).enqueue(*args, **kwargs).id
        return result
