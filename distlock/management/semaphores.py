"""Semaphores in ``manage.py distlock``: one row per semaphore in ``list``, its holders in
``info``, and ``release NAME --token T`` freeing one permit.

Kept apart from the command so that it only calls in here: a backend without semaphores
(RedlockBackend) simply has none to show.
"""

from __future__ import annotations

from typing import Any

from ..backends.base import BaseLockBackend
from ..exceptions import SemaphoresNotSupported
from ..info import LockInfo, SemaphoreInfo, shorten
from .tables import aligned


def held_semaphores(backend: BaseLockBackend, prefix: str) -> list[SemaphoreInfo]:
    """Return the held semaphores of ``backend`` whose name starts with ``prefix`` (none
    where there are no semaphores)."""
    return [
        SemaphoreInfo(entry.name, entry.limit, entry.holders, entry.waiters, backend.alias)
        for entry in backend.semaphores.list(prefix)
    ]


def semaphore_of(backend: BaseLockBackend, name: str) -> SemaphoreInfo | None:
    """Return semaphore ``name`` of ``backend`` if someone holds a permit, else None."""
    try:
        info = backend.semaphores.describe(name)
    except SemaphoresNotSupported:
        return None
    return info if info is not None and info.holders else None


def semaphore_json(semaphores: list[SemaphoreInfo]) -> list[dict[str, Any]]:
    """Return each permit as a LockInfo object (the JSON list's shape), with its semaphore's
    ``limit`` and ``waiting`` under ``"semaphore"``."""
    return [
        {**holder.as_json_dict(), "semaphore": {"limit": info.limit, "waiting": info.waiting}}
        for info in semaphores
        for holder in info.holders
    ]


def _holders(info: SemaphoreInfo) -> str:
    return ", ".join(f"{h.host}:{h.pid} ({h.ttl_remaining:.1f}s)" for h in info.holders)


def semaphore_table(semaphores: list[SemaphoreInfo], *, show_alias: bool = False) -> str:
    """Return one aligned row per semaphore: held permits of the limit, and the holders."""
    header = ["SEMAPHORE", "HELD", "WAITING", "HOLDERS (EXPIRES IN)"]
    rows = [
        [
            info.alias,
            info.name,
            f"{len(info.holders)}/{info.limit}",
            str(info.waiting),
            _holders(info),
        ]
        for info in semaphores
    ]
    return aligned(header, rows, show_alias=show_alias)


def describe_semaphore(info: SemaphoreInfo) -> list[str]:
    """Return the lines telling an operator about a semaphore and each of its holders."""
    lines = [
        f"semaphore:      {info.name} (alias {info.alias})",
        f"permits:        {len(info.holders)} of {info.limit} held, {info.waiting} waiting",
    ]
    for holder in info.holders:
        lines.append(f"  token {holder.token}: {_holder(holder)}")
    # Labelled as for the other kinds; a semaphore's queue keeps how many wait, not who.
    lines.append(f"{'waiters:':<15} {info.waiting}")
    return lines


def _holder(holder: LockInfo) -> str:
    return (
        f"{holder.host} pid {holder.pid} thread {holder.thread}, permit "
        f"{holder.fencing_token}, expires in {holder.ttl_remaining:.1f}s, "
        f"{shorten(holder.purpose, 60)}"
    )


def permit_of(info: SemaphoreInfo, token: str | None) -> LockInfo | str:
    """Return the holder of ``token``, or why none can be released."""
    if token is None:
        return (
            f"{info.name!r} is a semaphore with {len(info.holders)} holders: pass --token "
            "with the token of the permit to free (see `distlock info NAME`)."
        )
    for holder in info.holders:
        if holder.token == token:
            return holder
    return f"No permit of the semaphore {info.name!r} is held with the token {token}."
