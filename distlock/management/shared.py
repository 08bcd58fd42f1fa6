"""Shared locks in ``manage.py distlock``: one row per lock held shared in ``list``, its
holders in ``info``, and ``release NAME --token T`` releasing one shared hold.

Kept apart from the command so that it only calls in here: a backend without shared locks
(RedlockBackend) simply has none to show (its ``shared`` operations list none).
"""

from __future__ import annotations

from typing import Any

from ..backends.base import BaseLockBackend
from ..info import LockInfo, shorten
from .tables import aligned

Held = dict[str, tuple[LockInfo, ...]]  # lock name -> its shared holders


def held_shared(backend: BaseLockBackend, prefix: str) -> Held:
    """Return the shared holders of every lock of ``backend`` whose name starts with
    ``prefix``, by name."""
    return {entry.name: entry.holders for entry in backend.shared.list(prefix)}


def shared_holders(backend: BaseLockBackend, name: str) -> tuple[LockInfo, ...]:
    """Return the shared holders of lock ``name`` of ``backend`` (empty if none, or where
    there are no shared locks)."""
    return backend.shared.inspect(name)


def shared_json(held: list[Held]) -> list[dict[str, Any]]:
    """Return each shared holder as a LockInfo object (the JSON list's shape: ``"shared":
    true`` tells them from exclusive holders)."""
    return [holder.as_json_dict() for one in held for holders in one.values() for holder in holders]


def shared_table(held: list[Held], *, show_alias: bool = False) -> str:
    """Return one aligned row per lock held shared: how many hold it, and who."""
    header = ["SHARED LOCK", "HOLDERS", "WAITERS", "WHO (EXPIRES IN)"]
    rows = [
        [
            holders[0].alias,
            name,
            str(len(holders)),
            "?" if holders[0].waiters is None else str(holders[0].waiters),
            ", ".join(f"{h.host}:{h.pid} ({h.ttl_remaining:.1f}s)" for h in holders),
        ]
        for one in held
        for name, holders in one.items()
    ]
    return aligned(header, rows, show_alias=show_alias)


def describe_shared(name: str, alias: str, holders: tuple[LockInfo, ...]) -> list[str]:
    """Return the lines telling an operator about a lock held shared and each holder."""
    lines = [f"lock:           {name} (alias {alias})", f"held shared by: {len(holders)}"]
    for h in holders:
        lines.append(
            f"  token {h.token}: {h.host} pid {h.pid} thread {h.thread}, fencing token "
            f"{h.fencing_token}, expires in {h.ttl_remaining:.1f}s, depth {h.depth}, "
            f"{shorten(h.purpose, 60)}"
        )
    return lines


def holder_of(name: str, holders: tuple[LockInfo, ...], token: str | None) -> LockInfo | str:
    """Return the shared holder with ``token``, or why none can be released."""
    if token is None:
        return (
            f"{name!r} is held shared by {len(holders)} holders: pass --token with the token "
            "of the hold to release (see `distlock info NAME`)."
        )
    for holder in holders:
        if holder.token == token:
            return holder
    return f"No shared hold of {name!r} has the token {token}."
