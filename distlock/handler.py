"""``distlock.locks``: the backends of the DISTLOCK setting, by alias, like ``caches``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from .backends.base import BaseLockBackend
from .backends.kinds import words
from .backends.operations import Operations
from .exceptions import InvalidLockBackendError

DEFAULT_ALIAS = "default"
MINIMAL_SETTING = (
    "DISTLOCK = {'default': {'BACKEND': 'distlock.backends.redis.RedisBackend', "
    "'LOCATION': 'redis://127.0.0.1:6379/0'}}"
)


def configured_aliases() -> dict[str, dict[str, Any]]:
    """Return the DISTLOCK setting, or the one derived from a django-redis default cache.

    Raise InvalidLockBackendError (with the check id and a hint) when neither is usable.
    """
    if not hasattr(settings, "DISTLOCK"):
        cache = getattr(settings, "CACHES", {}).get(DEFAULT_ALIAS, {})
        if str(cache.get("BACKEND", "")).startswith("django_redis."):
            return {
                DEFAULT_ALIAS: {
                    "BACKEND": "distlock.backends.django_redis.DjangoRedisBackend",
                    "OPTIONS": {"CACHE": DEFAULT_ALIAS},
                }
            }
        raise InvalidLockBackendError(
            "The DISTLOCK setting is missing and CACHES['default'] is not a django-redis "
            "cache, so distlock has no lock server.",
            check_id="distlock.E001",
            hint=f"Add to your settings: {MINIMAL_SETTING}",
        )
    aliases = settings.DISTLOCK
    if not isinstance(aliases, dict) or not all(
        isinstance(alias, str) and isinstance(config, dict) for alias, config in aliases.items()
    ):
        raise InvalidLockBackendError(
            "DISTLOCK must be a dict mapping alias names to dicts, like CACHES.",
            check_id="distlock.E002",
            hint=f"For example: {MINIMAL_SETTING}",
        )
    return aliases


def create_backend(alias: str, aliases: dict[str, dict[str, Any]]) -> BaseLockBackend:
    """Build the backend of ``alias`` from its settings, without connecting to anything."""
    if alias not in aliases:
        check_id = "distlock.E003" if alias == DEFAULT_ALIAS else "distlock.E004"
        raise InvalidLockBackendError(
            f"DISTLOCK has no alias {alias!r} (it has: {', '.join(aliases) or 'none'}).",
            check_id=check_id,
            hint=f"Add DISTLOCK[{alias!r}] or pass an existing alias as using=.",
        )
    params = dict(aliases[alias])
    path = params.get("BACKEND")
    try:
        backend_class = import_string(path) if isinstance(path, str) else None
    except ImportError as exc:
        raise InvalidLockBackendError(
            f"DISTLOCK[{alias!r}]['BACKEND'] {path!r} could not be imported: {exc}",
            check_id="distlock.E004",
            hint="Use one of distlock.backends.redis.RedisBackend, "
            "distlock.backends.redlock.RedlockBackend, "
            "distlock.backends.django_redis.DjangoRedisBackend, "
            "distlock.backends.locmem.LocMemBackend.",
        ) from exc
    if not (isinstance(backend_class, type) and issubclass(backend_class, BaseLockBackend)):
        raise InvalidLockBackendError(
            f"DISTLOCK[{alias!r}]['BACKEND'] must be the dotted path of a lock backend class, "
            f"not {path!r}.",
            check_id="distlock.E004",
            hint="For example 'distlock.backends.redis.RedisBackend'.",
        )
    return backend_class(alias, params)


class LockHandler:
    """Give the backend of each alias; one instance per process (backends are thread-safe).

    Re-read the setting when DISTLOCK or CACHES change (override_settings in tests).
    """

    def __init__(self) -> None:
        self._backends: dict[str, BaseLockBackend] = {}
        # Each backend's operations objects, kept alive here: the backend holds them only
        # weakly (they hold it: no cycle), and a Lock would otherwise build them anew at
        # every acquire.
        self._kinds: dict[str, tuple[Operations, ...]] = {}
        # The same, by alias and kind: what every acquire of a new Lock looks up (operations()).
        self._operations: dict[tuple[str, str], Operations] = {}
        self._guard = threading.Lock()

    def __getitem__(self, alias: str) -> BaseLockBackend:
        try:
            return self._backends[alias]
        except KeyError:
            pass
        with self._guard:
            if alias not in self._backends:
                backend = create_backend(alias, configured_aliases())
                self._kinds[alias] = kinds = backend.kinds()
                for word, operations in zip(words(), kinds, strict=True):
                    self._operations[alias, word] = operations
                self._backends[alias] = backend
            return self._backends[alias]

    def operations(self, alias: str, kind: str) -> Operations:
        """Return ``self[alias].of_kind(kind)``: a Lock's operations, in one look-up once the
        alias's backend is built (the backend's own look-up dereferences a weak reference)."""
        try:
            return self._operations[alias, kind]
        except KeyError:
            return self[alias].of_kind(kind)

    def __iter__(self) -> Iterator[str]:
        return iter(configured_aliases())

    def all(self) -> list[BaseLockBackend]:
        """Return the backend of every configured alias."""
        return [self[alias] for alias in self]

    def reset(self) -> None:
        """Forget built backends; locks still held keep the backend they were acquired on."""
        with self._guard:
            self._backends, self._kinds, self._operations = {}, {}, {}


locks = LockHandler()


def _reset_on_setting_change(*, setting: str, **kwargs: Any) -> None:
    if setting in ("DISTLOCK", "CACHES"):
        locks.reset()


setting_changed.connect(_reset_on_setting_change)
