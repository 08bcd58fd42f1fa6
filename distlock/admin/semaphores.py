"""Semaphores on the admin's "Held locks" page: one row per semaphore with its holders, each
with a link to free that one permit (HeldLockAdmin.release_permit_view).

A permit is named by alias, semaphore name and permit number (its ``fencing_token``); the
holder's token never leaves the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..exceptions import SemaphoresNotSupported
from ..handler import locks
from ..info import LockInfo, SemaphoreInfo
from .display import describe_holder, format_remaining, release_url
from .listing import ALIAS_ERRORS


@dataclass(frozen=True)
class PermitRow:
    info: LockInfo
    holder: str
    expires_in: str
    release_url: str


@dataclass(frozen=True)
class SemaphoreRow:
    info: SemaphoreInfo
    permits: list[PermitRow]


def semaphore_rows(
    aliases: list[str], prefix: str, release_base: str, filters: str, unavailable: dict[str, str]
) -> list[SemaphoreRow]:
    """Return a row for every held semaphore of ``aliases`` whose name starts with
    ``prefix``; an alias that cannot be read is added to ``unavailable``."""
    rows = []
    for alias in aliases:
        try:
            held = locks[alias].held_semaphores(prefix)
        except SemaphoresNotSupported:
            continue  # a backend without semaphores holds none
        except ALIAS_ERRORS as exc:
            unavailable[alias] = str(exc)
            continue
        for info in held:
            permits = [
                PermitRow(
                    info=holder,
                    holder=describe_holder(holder),
                    expires_in=format_remaining(holder.ttl_remaining),
                    release_url=release_url(release_base, holder, filters),
                )
                for holder in info.holders
            ]
            rows.append(SemaphoreRow(info, permits))
    return rows
