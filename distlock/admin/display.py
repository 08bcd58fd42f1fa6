"""How the "Held locks" page shows a hold to people, for the lock rows (distlock.admin.options)
and the semaphore rows (distlock.admin.semaphores) alike: the time left, the holder, and the
link to release it that leads back to the same list."""

from __future__ import annotations

import math
from urllib.parse import urlencode

from ..info import LockInfo

# Carries the list's query through the release pages, back to the same list.
FILTERS = "_changelist_filters"


def format_remaining(seconds: float) -> str:
    """Return a lease's remaining time for people ("42 s", "3 min 5 s", "2 h 10 min").

    distlock/static/distlock/admin/heldlock.js counts down in the same format.
    """
    if seconds <= 0:
        return "expired"
    whole = math.ceil(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def describe_holder(info: LockInfo) -> str:
    return f"{info.host}, pid {info.pid}, thread {info.thread}"


def release_url(base: str, info: LockInfo, filters: str) -> str:
    """Return the URL of the page that releases the hold ``info`` (a lock, or one permit of
    a semaphore), named by alias, name and fencing token: the holder's token never leaves the
    server. ``filters`` is the list's query, restored after the release."""
    query = {
        "alias": info.alias,
        "name": info.name,
        "fencing_token": info.fencing_token,
        FILTERS: filters,
    }
    return f"{base}?{urlencode(query)}"
