"""Checks of the numbers users pass in: leases, waits, timeouts."""

from __future__ import annotations

import math

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
