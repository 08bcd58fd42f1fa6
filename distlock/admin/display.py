"""How the "Held locks" page shows a hold to people, for the lock rows (distlock.admin.options)
and the semaphore and shared rows alike: the time left, the holder, a name that wraps between
its parts, and the links to its page and to release it that lead back to the same list."""

from __future__ import annotations

import math
import re
from urllib.parse import urlencode

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

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


def detail_url(base: str, alias: str, name: str, filters: str, *, kind: str = "") -> str:
    """Return the URL of the page of lock ``name`` of ``alias`` with its holders and waiters;
    ``kind`` ("lock", "shared", "semaphore") tells which when the name is both a lock and a
    semaphore, and ``filters`` is the list's query, for the way back."""
    query = {"alias": alias, "name": name, **({"kind": kind} if kind else {}), "f": filters}
    return f"{base}?{urlencode(query)}"


# Where a long name may wrap: after these separators, so that "reports:daily:tenant-42"
# breaks between its parts, never inside one (a hyphen is a break already).
BREAK_AFTER = re.compile(r"([:/._@])")


def breakable(text: str) -> SafeString:
    """Return ``text`` escaped, with a line-break opportunity (<wbr>) after each separator."""
    return mark_safe(BREAK_AFTER.sub(r"\1<wbr>", str(escape(text))))  # escaped first
