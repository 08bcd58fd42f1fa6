"""Who waits for a lock, as ``manage.py distlock info`` shows it."""

from __future__ import annotations

from typing import Any

from ..info import LockInfo, WaiterInfo, shorten


def count_text(info: LockInfo) -> str:
    """Return how many wait for ``info``'s lock: a number, or "?" when the backend cannot
    say."""
    return "?" if info.waiters is None else str(info.waiters)


def waiter_lines(waiters: list[WaiterInfo] | None, total: int | None = None) -> list[str]:
    """Return one line per waiter, oldest first, for the ``info`` text; ``total`` is how many
    wait (the list read is cut at MAX_WAITERS_LISTED: the rest is counted, not listed)."""
    if waiters is None:
        return ["  (this backend keeps how many wait, not who)"]
    lines = [
        f"  {place}. {w.host} pid {w.pid} thread {w.thread}, waiting {w.waited:.1f}s, "
        f"{shorten(w.purpose, 60)}"
        for place, w in enumerate(waiters, start=1)
    ]
    if total is not None and total > len(waiters):
        lines.append(f"  ... and {total - len(waiters)} more")
    return lines


def waiters_json(waiters: list[WaiterInfo] | None) -> list[dict[str, Any]] | None:
    """Return the waiters for ``info --json``'s ``"waiting"`` (None: the backend cannot
    say who)."""
    return None if waiters is None else [w.as_json_dict() for w in waiters]
