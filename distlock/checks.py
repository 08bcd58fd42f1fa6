"""System checks: a bad DISTLOCK fails at ``manage.py check``, never at the first lock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from . import eviction, transactions
from .backends.base import BaseLockBackend
from .backends.locmem import LocMemBackend
from .backends.redis import RedisBackend
from .exceptions import InvalidLockBackendError
from .handler import configured_aliases, create_backend

LOCMEM_IN_PRODUCTION = (
    "DISTLOCK[{alias!r}] uses LocMemBackend with DEBUG = False: its locks exist in one "
    "process only and do not exclude other processes or hosts."
)
LOCMEM_HINT = "Use distlock.backends.redis.RedisBackend (or another Redis backend) in production."
REPLICATED_WITHOUT_WAIT = (
    "DISTLOCK[{alias!r}] uses {deployment} without OPTIONS['WAIT_REPLICAS']: a lock is "
    "reported as acquired before any replica has it. Replication is asynchronous, so when a "
    "master fails over while its replicas lag, acknowledged locks are lost and a second "
    "client can take a lock its holder still works under."
)
DJANGO_INTERNALS = (
    "Locks released inside a transaction may be freed before it ends: {problem} distlock ties "
    'locks to transactions through these Django internals (docs/transactions.md, "What is '
    "wrapped\"); Django's own transactions are not affected."
)
DJANGO_INTERNALS_HINT = (
    "Use a Django version distlock supports (setup.cfg), or a distlock release made for this "
    "one. A library that patches these methods must do so before distlock's AppConfig.ready() "
    "(list it before 'distlock' in INSTALLED_APPS), or call distlock.transactions.install() "
    "after it."
)
NO_ANSWER = "DISTLOCK[{alias!r}]: no lock server answered at {address}: {error}"
NO_ANSWER_HINT = (
    "Start the server, or correct LOCATION and OPTIONS. `manage.py distlock status` says "
    "which server answers for each alias (`manage.py check` without --deploy never connects)."
)
REPLICATED_HINT = (
    "Set OPTIONS['WAIT_REPLICAS'] to the number of replicas of each master (e.g. 1) and "
    "OPTIONS['WAIT_TIMEOUT'] (ms), see docs/deployments.md; or add 'distlock.W002' to "
    "SILENCED_SYSTEM_CHECKS if losing locks at a failover is acceptable."
)


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
                Warning(
                    LOCMEM_IN_PRODUCTION.format(alias=alias), hint=LOCMEM_HINT, id="distlock.W001"
                )
            )
        messages.extend(_replication_warnings(alias, backend))
    return messages


def _replication_warnings(alias: str, backend: BaseLockBackend) -> list[CheckMessage]:
    """Warn when a replicated deployment acknowledges locks before a replica has them."""
    if not isinstance(backend, RedisBackend) or backend.wait_replicas:
        return []
    if backend.cluster:
        deployment = "Redis Cluster"
    elif backend.sentinels:
        deployment = "Redis Sentinel"
    else:
        return []  # one server: whether it has replicas is not known without connecting
    return [
        Warning(
            REPLICATED_WITHOUT_WAIT.format(alias=alias, deployment=deployment),
            hint=REPLICATED_HINT,
            id="distlock.W002",
        )
    ]


@register("distlock")
def check_transaction_internals(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The Django internals that tie locks to transactions are there, shaped as expected."""
    return [
        Error(
            DJANGO_INTERNALS.format(problem=problem), hint=DJANGO_INTERNALS_HINT, id="distlock.E010"
        )
        for problem in transactions.django_problems()
    ]


@register("distlock", deploy=True)
def check_eviction(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn, for ``manage.py check --deploy``, of each Redis server whose maxmemory-policy
    may evict lock keys (read from INFO: it connects, so it is a deploy check). A server
    that cannot be reached is passed over: nothing is claimed of it."""
    return _on_each_backend(
        lambda alias, backend: [
            Warning(message, hint=eviction.CHECK_HINT, id=eviction.CHECK_ID)
            for message in eviction.check_messages(alias, backend)
        ]
    )


@register("distlock", deploy=True)
def check_servers_answer(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn, for ``manage.py check --deploy`` (it connects, so it is a deploy check), of
    each server of each alias that does not answer within eviction.CHECK_TIMEOUT."""
    return _on_each_backend(_silent_servers)


def _silent_servers(alias: str, backend: BaseLockBackend) -> list[CheckMessage]:
    reports = eviction.read_within(backend.server_reports, eviction.CHECK_TIMEOUT)
    silent = (
        [(getattr(backend, "address", ""), f"no answer within {eviction.CHECK_TIMEOUT:g} s")]
        if reports is None
        else [(report.address, report.error) for report in reports if report.error]
    )
    return [
        Warning(
            NO_ANSWER.format(alias=alias, address=where, error=error),
            hint=NO_ANSWER_HINT,
            id="distlock.W004",
        )
        for where, error in silent
    ]


def _on_each_backend(
    check: Callable[[str, BaseLockBackend], list[CheckMessage]],
) -> list[CheckMessage]:
    """Return ``check(alias, backend)`` for each alias, on a backend made for it and closed
    after; aliases that cannot be made are check_settings' to report."""
    try:
        aliases = configured_aliases()
    except InvalidLockBackendError:
        return []
    messages: list[CheckMessage] = []
    for alias in aliases:
        try:
            backend = create_backend(alias, aliases)
        except InvalidLockBackendError:
            continue
        try:
            messages += check(alias, backend)
        finally:
            backend.close()
    return messages


def create_backend_error(alias: str, aliases: dict[str, Any]) -> InvalidLockBackendError:
    try:
        create_backend(alias, aliases)
    except InvalidLockBackendError as exc:
        return exc
    raise AssertionError("unreachable: the alias is missing")


def _error(exc: InvalidLockBackendError) -> Error:
    return Error(str(exc), hint=exc.hint, id=exc.check_id)
