"""What the Celery and django.tasks integrations share: a task's lock name, filled in from
its arguments, and the result a skipped duplicate returns.

A name template names the task function's parameters (``"charge:{order_id}"``); each call's
arguments are bound to the signature (defaults included) and escaped like ``@lock_view``'s
request values (distlock.naming), so no argument can change the name's structure.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
from collections.abc import Callable, Iterator
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from ..exceptions import LockError
from ..info import LockInfo, shorten
from ..lock import Lock
from ..naming import fill_template, template_fields

logger = logging.getLogger("distlock")
ON_DUPLICATE = ("skip", "retry")
# The lock the running task holds: its own in each thread, greenlet or asyncio task.
_running_lock: contextvars.ContextVar[Lock | None] = contextvars.ContextVar(
    "distlock_task_lock", default=None
)
# The key of the dict a skipped run returns: {"distlock": "skipped", "lock": ..., ...}.
RESULT_KEY = "distlock"


class TaskLockName:
    """The lock name template of one task function, checked against its parameters once."""

    def __init__(self, template: str, func: Callable[..., Any], where: str) -> None:
        self.template = template
        self.where = where
        self.signature = inspect.signature(func)
        parameters = self.signature.parameters
        self._var_keyword = next(
            (p.name for p in parameters.values() if p.kind is p.VAR_KEYWORD), None
        )
        try:
            fields = template_fields(template)
        except ValueError as exc:
            raise ImproperlyConfigured(f"{where}: {exc}") from None
        for field in fields:
            if field not in parameters and self._var_keyword is None:
                raise ImproperlyConfigured(
                    f"{where}: the lock name {template!r} uses {{{field}}}, which is not a "
                    f"parameter of the task (it takes {', '.join(parameters) or 'none'})."
                )

    def render(self, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]) -> str:
        """Return the lock name for one call of the task."""
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        if self._var_keyword is not None:
            values.update(values.pop(self._var_keyword, {}))
        try:
            return fill_template(self.template, values)
        except KeyError as exc:
            raise ImproperlyConfigured(
                f"{self.where}: the lock name {self.template!r} uses {{{exc.args[0]}}}, which "
                "this call did not pass."
            ) from None


def check_on_duplicate(value: object, where: str) -> str:
    if value not in ON_DUPLICATE:
        raise ImproperlyConfigured(
            f"{where}: on_duplicate must be 'skip' or 'retry', not {value!r}."
        )
    return str(value)


def holder_text(lock: Lock) -> str:
    """Return who holds ``lock`` (host, pid, purpose), for logs and skipped results."""
    try:
        info = lock.operations.holder(lock.name)
    except LockError:
        info = None
    return holder_line(info)


def holder_line(info: LockInfo | None) -> str:
    """Return who ``info`` says holds a lock (host, pid, purpose), for logs and results."""
    if info is None:
        return "another run (it has just finished)"
    return f"{info.host} pid {info.pid} ({shorten(info.purpose, 80)})"


def skipped(lock: Lock, task: str, task_id: str | None, holder: str) -> dict[str, Any]:
    """Log a skipped duplicate and return the result that says so."""
    logger.info(
        "distlock: skipped %s[%s]: the lock %r is held by %s", task, task_id, lock.name, holder
    )
    return {RESULT_KEY: "skipped", "lock": lock.name, "holder": holder}


def was_skipped(result: object) -> bool:
    """Return True if ``result`` (a task's return value) says the run was a skipped duplicate."""
    return isinstance(result, dict) and result.get(RESULT_KEY) == "skipped"


# unasync: the async source of the sync code after it
async def arelease_quietly(lock: Lock, task: str, task_id: str | None) -> None:
    """Release a task's lock when the task ends; a lease already gone is only logged (the
    task's own outcome matters more than the lock's)."""
    try:
        await lock.arelease()
    except LockError as exc:
        _not_released(lock, task, task_id, exc)


# Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
def release_quietly(lock: Lock, task: str, task_id: str | None) -> None:
    """Release a task's lock when the task ends; a lease already gone is only logged (the
    task's own outcome matters more than the lock's)."""
    try:
        lock.release()
    except LockError as exc:
        _not_released(lock, task, task_id, exc)


# unasync: end


def _not_released(lock: Lock, task: str, task_id: str | None, exc: LockError) -> None:
    # If the lease was lost while the task ran, the renewer has already warned.
    logger.warning("distlock: %s[%s] ended without its lock %r: %s", task, task_id, lock.name, exc)


def running_lock() -> Lock | None:
    """Return the Lock the running task body holds (LockedTask.lock, the locked() task's
    context.lock), None outside one."""
    return _running_lock.get()


@contextlib.contextmanager
def running_under(lock: Lock) -> Iterator[None]:
    """Make ``lock`` the running task's lock for the block."""
    reset = _running_lock.set(lock)
    try:
        yield
    finally:
        _running_lock.reset(reset)
