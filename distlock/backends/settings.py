"""The settings every backend shares (KEY_PREFIX, TIMEOUT, OPTIONS and its limits), parsed
with every problem collected, so that one `manage.py check` names them all."""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from ..exceptions import InvalidLockBackendError
from ..validation import lease_milliseconds, seconds

T = TypeVar("T")
DEFAULT_KEY_PREFIX = "distlock"
DEFAULT_TIMEOUT = 60
KNOWN_SETTINGS = {"BACKEND", "LOCATION", "KEY_PREFIX", "TIMEOUT", "OPTIONS"}
# Upper-case OPTIONS every backend in distlock understands: limits that keep one holder from
# hogging a lock. MAX_TTL caps the lease of any acquire or extend (seconds); MAX_RENEWALS caps
# how often one hold may be renewed (auto-renewals and extend() calls), so that a lock is held
# at most about MAX_TTL x (MAX_RENEWALS + 1) seconds. The Lua scripts enforce MAX_RENEWALS
# atomically (redis_ops/lua/extend.lua).
LIMIT_OPTIONS = frozenset({"MAX_TTL", "MAX_RENEWALS"})
# FAIR: how the alias's exclusive locks serve waiters when a Lock does not say (fair=None):
# True (the default) first come, first served; False a free lock goes to whoever asks first.
COMMON_OPTIONS = LIMIT_OPTIONS | {"FAIR"}
_PREFIX_FORBIDDEN = re.compile(r"[{}\s\x00-\x1f\x7f*?\[\]]")


class Problems:
    """The configuration problems found so far while a backend parses its settings."""

    def __init__(self) -> None:
        self.found: list[InvalidLockBackendError] = []

    def parse(self, parse: Callable[[], T], fallback: T) -> T:
        """Return ``parse()``; if it raises InvalidLockBackendError, note the problems and
        return ``fallback``, so that parsing can go on to find the others."""
        try:
            return parse()
        except InvalidLockBackendError as exc:
            self.found.extend(exc.problems)
            return fallback

    def add(self, problem: InvalidLockBackendError) -> None:
        self.found.extend(problem.problems)

    def raise_any(self) -> None:
        """Raise the first problem, carrying all of them, if any was found."""
        if not self.found:
            return
        first, others = self.found[0], self.found[1:]
        message = str(first)
        if others:
            message += (
                f" (and {len(others)} more problem(s): "
                + " ".join(str(problem) for problem in others)
                + ")"
            )
        raise InvalidLockBackendError(
            message, check_id=first.check_id, hint=first.hint, problems=list(self.found)
        )


class CommonSettings(NamedTuple):
    """What every backend reads from its alias's settings."""

    key_prefix: str
    default_timeout: float
    options: dict[str, Any]
    max_ttl: float | None
    max_renewals: int | None
    fair: bool


def parse_common(
    alias: str,
    params: dict[str, Any],
    own_options: frozenset[str],
    backend: str,
    problems: Problems,
) -> CommonSettings:
    """Return the settings common to every backend of ``alias`` (for a ``backend`` that
    understands the upper-case ``own_options``); note every problem in ``problems``, with
    defaults instead."""
    unknown = set(params) - KNOWN_SETTINGS
    if unknown:
        problems.add(
            InvalidLockBackendError(
                f"DISTLOCK[{alias!r}] has unknown keys: {', '.join(sorted(unknown))}.",
                check_id="distlock.E009",
                hint=f"Use only {', '.join(sorted(KNOWN_SETTINGS))}; check for typos.",
            )
        )
    key_prefix = problems.parse(
        lambda: _parse_prefix(alias, params.get("KEY_PREFIX", DEFAULT_KEY_PREFIX)),
        DEFAULT_KEY_PREFIX,
    )
    timeout = problems.parse(
        lambda: _parse_timeout(alias, params.get("TIMEOUT", DEFAULT_TIMEOUT)),
        float(DEFAULT_TIMEOUT),
    )
    options = _parse_options(alias, params.get("OPTIONS", {}), own_options, backend, problems)
    no_limits: tuple[float | None, int | None] = (None, None)
    max_ttl, max_renewals = problems.parse(
        lambda: _parse_limits(alias, options, timeout), no_limits
    )
    fair = problems.parse(lambda: _parse_fair(alias, options), True)
    problems.parse(lambda: _check_prefix_encoding(alias, key_prefix, options), None)
    return CommonSettings(key_prefix, timeout, options, max_ttl, max_renewals, fair)


def _parse_options(
    alias: str, options: object, own_options: frozenset[str], backend: str, problems: Problems
) -> dict[str, Any]:
    """Return OPTIONS ({} if it is no dict). Upper-case options the backend does not know
    are noted, and the rest read on, so that their problems are reported too."""
    if not isinstance(options, dict):
        problems.add(
            InvalidLockBackendError(
                f"DISTLOCK[{alias!r}]['OPTIONS'] must be a dict, not {type(options).__name__}.",
                check_id="distlock.E006",
                hint="For example 'OPTIONS': {'socket_timeout': 2}.",
            )
        )
        return {}
    unknown_own = {k for k in options if k.isupper()} - own_options
    if unknown_own:
        problems.add(
            InvalidLockBackendError(
                f"DISTLOCK[{alias!r}]['OPTIONS'] has options this backend does not know: "
                f"{', '.join(sorted(unknown_own))}.",
                check_id="distlock.E006",
                hint=f"{backend} understands "
                f"{', '.join(sorted(own_options)) or 'no upper-case options'}; "
                "lower-case options go to the Redis client.",
            )
        )
    return options


def _parse_prefix(alias: str, prefix: object) -> str:
    if not isinstance(prefix, str) or not prefix or _PREFIX_FORBIDDEN.search(prefix):
        raise InvalidLockBackendError(
            f"DISTLOCK[{alias!r}]['KEY_PREFIX'] must be a non-empty string without braces, "
            f"wildcards, spaces or control characters, not {prefix!r}.",
            check_id="distlock.E008",
            hint="For example 'KEY_PREFIX': 'distlock' or 'myproject:locks'.",
        )
    return prefix


def _check_prefix_encoding(alias: str, prefix: str, options: dict[str, Any]) -> None:
    """Keys are UTF-8 on the wire (docs/protocol.md): a client ``encoding`` other than
    UTF-8 would write a non-ASCII prefix as other bytes in the calls it encodes, so one lock
    would have keys under two prefixes (and other languages' clients a third)."""
    if prefix.isascii():
        return
    encoding = options.get("encoding", "utf-8")
    try:
        utf8 = isinstance(encoding, str) and codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        utf8 = False
    if not utf8:
        raise InvalidLockBackendError(
            f"DISTLOCK[{alias!r}]['KEY_PREFIX'] {prefix!r} has non-ASCII characters, and "
            f"OPTIONS['encoding'] is {encoding!r}: keys are UTF-8 on the wire, so the "
            "client would write the prefix as other bytes in some calls.",
            check_id="distlock.E008",
            hint="Leave OPTIONS['encoding'] at its default ('utf-8'), or use an ASCII KEY_PREFIX.",
        )


def _parse_timeout(alias: str, timeout: object) -> float:
    label = f"DISTLOCK[{alias!r}]['TIMEOUT']"
    try:
        value = seconds(label, timeout)
        assert value is not None
        lease_milliseconds(label, value)
    except (TypeError, ValueError) as exc:
        raise InvalidLockBackendError(
            str(exc),
            check_id="distlock.E007",
            hint="TIMEOUT is the default lease in seconds, e.g. 60.",
        ) from None
    return value


def _parse_limits(
    alias: str, options: dict[str, Any], timeout: float
) -> tuple[float | None, int | None]:
    """Return (MAX_TTL, MAX_RENEWALS) from OPTIONS; None where no limit is set."""

    def invalid(option: str, problem: str, hint: str) -> InvalidLockBackendError:
        return InvalidLockBackendError(
            f"DISTLOCK[{alias!r}]['OPTIONS'][{option!r}] {problem}",
            check_id="distlock.E006",
            hint=hint,
        )

    max_ttl = options.get("MAX_TTL")
    if max_ttl is not None:
        try:
            max_ttl = seconds("MAX_TTL", max_ttl)
            assert max_ttl is not None
            lease_milliseconds("MAX_TTL", max_ttl)
        except (TypeError, ValueError) as exc:
            raise invalid(
                "MAX_TTL",
                f"is invalid: {exc}",
                "MAX_TTL is the longest lease in seconds, e.g. 300.",
            ) from None
        if timeout > max_ttl:
            raise invalid(
                "MAX_TTL",
                f"is {max_ttl:g} seconds, shorter than the alias's TIMEOUT "
                f"({timeout:g}), the default lease.",
                "Set TIMEOUT to at most MAX_TTL.",
            )
    max_renewals = options.get("MAX_RENEWALS")
    if max_renewals is not None and (
        isinstance(max_renewals, bool) or not isinstance(max_renewals, int) or max_renewals < 0
    ):
        raise invalid(
            "MAX_RENEWALS",
            f"must be a whole number >= 0 or None, not {max_renewals!r}.",
            "MAX_RENEWALS counts renewals of one hold (auto_renew and extend()), e.g. 100; "
            "None for no limit.",
        )
    return max_ttl, max_renewals


def _parse_fair(alias: str, options: dict[str, Any]) -> bool:
    """Return OPTIONS['FAIR'] (True when it is not set)."""
    fair = options.get("FAIR", True)
    if not isinstance(fair, bool):
        raise InvalidLockBackendError(
            f"DISTLOCK[{alias!r}]['OPTIONS']['FAIR'] must be True or False, not {fair!r}.",
            check_id="distlock.E006",
            hint="True (the default): waiters are served first come, first served; False: a "
            "free lock goes to whoever asks first (more throughput, waiters may be overtaken).",
        )
    return fair
