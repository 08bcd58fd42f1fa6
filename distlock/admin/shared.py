"""Shared locks on the admin's "Held locks" page: one row per lock held shared, with its
holders, each with a link to release that one hold (its release page, ``release-shared/``:
HeldLockAdmin.release_hold_view).

A shared hold is named by alias, lock name and fencing token (unique among the holders);
the holder's token never leaves the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.safestring import SafeString

from ..backends.operations import HeldEntry
from .display import breakable
from .listing import HeldName
from .semaphores import PermitRow, held_name


@dataclass(frozen=True)
class SharedRow:
    name: str
    alias: str
    holders: list[PermitRow]
    waiters: int | None  # how many are queued (None: the backend cannot say)
    detail_url: str

    @property
    def name_html(self) -> SafeString:
        return breakable(self.name)

    @property
    def held(self) -> HeldName:
        infos = tuple(h.info for h in self.holders)
        return held_name(self.alias, self.name, infos, self.waiters or 0)


def shared_row(alias: str, entry: HeldEntry, holders: list[PermitRow], url: str) -> SharedRow:
    """The row of one lock held shared (semaphores.kind_rows)."""
    return SharedRow(entry.name, alias, holders, entry.holders[0].waiters, url)
