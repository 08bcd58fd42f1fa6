"""System checks: a bad DISTLOCK fails at ``manage.py check``, never at the first lock."""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from .backends.locmem import LocMemBackend
from .exceptions import InvalidLockBackendError
from .handler import configured_aliases, create_backend

LOCMEM_IN_PRODUCTION = (
    "DISTLOCK[{alias!r}] uses LocMemBackend with DEBUG = False: its locks exist in one "
    "process only and do not exclude other processes or hosts."
)
LOCMEM_HINT = "Use distlock.backends.redis.RedisBackend (or another Redis backend) in production."


@register("distlock")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Build every configured backend (without connecting) and report what is wrong."""
    try:
        aliases = configured_aliases()
    except InvalidLockBackendError as exc:
        return [_error(problem) for problem in exc.problems]
    messages: list[CheckMessage] = []
    if "default" not in aliases:
        messages.append(_error(create_backend_error("default", aliases)))
    for alias in aliases:
        try:
            backend = create_backend(alias, aliases)
        except InvalidLockBackendError as exc:
            messages.extend(_error(problem) for problem in exc.problems)
            continue
        if isinstance(backend, LocMemBackend) and not settings.DEBUG:
            messages.append(
                Warning(LOCMEM_IN_PRODUCTION.format(alias=alias), hint=LOCMEM_HINT,
                        id="distlock.W001")
            )
    return messages


def create_backend_error(alias: str, aliases: dict[str, Any]) -> InvalidLockBackendError:
    try:
        create_backend(alias, aliases)
    except InvalidLockBackendError as exc:
        return exc
    raise AssertionError("unreachable: the alias is missing")


def _error(exc: InvalidLockBackendError) -> Error:
    return Error(str(exc), hint=exc.hint, id=exc.check_id)
