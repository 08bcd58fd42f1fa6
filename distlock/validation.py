"""Checks of the numbers users pass in: leases, waits, timeouts."""

from __future__ import annotations

import math
from typing import Any

# The longest lease anyone may ask for. A longer one is a lock that never expires in practice,
# and its end no longer fits a datetime (LockInfo.expires_at) or a Redis expiry: a ttl of 1e12
# seconds made held() raise OverflowError for every operator, and larger ones were refused by
# Redis and reported as an unreachable server.
MAX_LEASE_SECONDS = 10 * 365 * 24 * 3600


def seconds(
    label: str, value: object, *, allow_none: bool = False, allow_zero: bool = False
) -> float | None:
    """Return ``value`` as float seconds, or raise TypeError/ValueError saying what is wrong."""
    if (value.__class__ is float or value.__class__ is int) and 0 < value < math.inf:
        return float(value)  # the usual case (every Lock made checks two): a plain number > 0
    if value is None:
        if allow_none:
            return None
        raise TypeError(f"{label} must be a number of seconds, not None.")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = type(value).__name__
        raise TypeError(f"{label} must be a number of seconds, not {kind} {value!r}.")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{label} must be a finite number of seconds, not {value!r}.")
    if number < 0 or (number == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{label} must be {bound} seconds, not {value!r}.")
    return number


def lease_seconds(label: str, value: object) -> float | None:
    """Return a lease given in seconds (None: the alias's TIMEOUT) as float seconds, or raise
    what seconds() or lease_milliseconds() raises for it: both checks in one call."""
    if (value.__class__ is float or value.__class__ is int) and (
        0.001 <= value <= MAX_LEASE_SECONDS
    ):
        return float(value)  # the usual lease (every Lock made): a plain number in range
    number = seconds(label, value, allow_none=True)
    if number is not None:
        lease_milliseconds(label, number)
    return number


def lease_milliseconds(label: str, value: float) -> int:
    """Return a lease in whole milliseconds (at least 1, at most MAX_LEASE_SECONDS)."""
    if value > MAX_LEASE_SECONDS:
        raise ValueError(
            f"{label} must be at most {MAX_LEASE_SECONDS} seconds (10 years), not {value!r}: "
            "every lock needs a lease that ends. For long work use a shorter ttl with "
            "auto_renew=True."
        )
    milliseconds = round(value * 1000)
    if milliseconds < 1:
        raise ValueError(
            f"{label} must be at least 0.001 seconds (millisecond precision), not {value!r}."
        )
    return milliseconds


def check_options(
    auto_renew: Any,
    reentrant: Any,
    on_lost: Any,
    using: Any,
    purpose: Any,
    hold_until_commit: Any,
    shared: Any,
    metric_name: Any,
    fence: Any,
    fair: Any,
) -> None:
    """Raise TypeError/ValueError saying what is wrong with a Lock's keyword arguments (other
    than its name, ttl and wait), given in the order of Lock's signature."""
    if (
        # The usual Lock (every one made checks these): the defaults, or plain bools and
        # strs, answered in one test before the checks that say what is wrong.
        auto_renew.__class__ is bool
        and reentrant.__class__ is bool
        and hold_until_commit.__class__ is bool
        and shared.__class__ is bool
        and fence is False
        and on_lost is None
        and using.__class__ is str
        and purpose is None
        and metric_name is None
        and (fair is None or (fair is True or (fair is False and shared is False)))
    ):
        return
    for label, flag in (
        ("auto_renew", auto_renew),
        ("reentrant", reentrant),
        ("hold_until_commit", hold_until_commit),
        ("shared", shared),
        ("fence", fence),
    ):
        if not isinstance(flag, bool):
            raise TypeError(f"{label} must be True or False, not {flag!r}.")
    if on_lost is not None and not callable(on_lost):
        raise TypeError(f"on_lost must be a callable taking the lock, not {on_lost!r}.")
    check_fair(fair, shared)
    if not isinstance(using, str):
        raise TypeError(f"using must be a DISTLOCK alias (str), not {using!r}.")
    if purpose is not None and not isinstance(purpose, str):
        raise TypeError(f"purpose must be a str or None, not {purpose!r}.")
    if metric_name is not None and (not isinstance(metric_name, str) or not metric_name):
        raise TypeError(
            f"metric_name must be a non-empty str or None, not {metric_name!r}: a bounded "
            "name for the metrics, such as the template the lock names are made from."
        )
    if fence and shared:
        raise ValueError(
            "fence=True fences one holder at a time; shared holders run together, so a "
            "newer reader's claim would refuse an older one. Fence the exclusive lock."
        )


def check_fair(fair: object, shared: bool) -> None:
    if fair is not None and not isinstance(fair, bool):
        raise TypeError(f"fair must be True, False or None (the alias's FAIR), not {fair!r}.")
    if fair is False and shared:
        raise ValueError(
            "fair=False applies to exclusive locks: shared holds are always served first "
            "come, first served (a queued writer keeps later readers out). Leave fair out, "
            "or take the exclusive lock (shared=False)."
        )
