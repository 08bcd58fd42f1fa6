"""Semaphores on the admin's "Held locks" page: one row per semaphore with its holders, each
with a link to free that one permit (its release page, ``release-permit/``:
HeldLockAdmin.release_hold_view).

A permit is named by alias, semaphore name and permit number (its ``fencing_token``); the
holder's token never leaves the server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from django.utils.safestring import SafeString

from ..backends.operations import HeldEntry
from ..info import LockInfo, SemaphoreInfo
from .display import breakable, describe_holder, detail_url, format_remaining, release_url
from .listing import HeldName, held_of_kind


@dataclass(frozen=True)
class PermitRow:
    """One holder of a semaphore or of a shared lock."""

    info: LockInfo
    holder: str
    expires_in: str
    release_url: str


def permit_rows(holders: tuple[LockInfo, ...], release_base: str, filters: str) -> list[PermitRow]:
    return [
        PermitRow(
            info=holder,
            holder=breakable(describe_holder(holder)),
            expires_in=format_remaining(holder.ttl_remaining),
            release_url=release_url(release_base, holder, filters),
        )
        for holder in holders
    ]


Row = TypeVar("Row")


def kind_rows(
    kind: str,
    row: Callable[[str, HeldEntry, list[PermitRow], str], Row],
    aliases: list[str],
    prefix: str,
    bases: tuple[str, str],
    filters: str,
    unavailable: dict[str, str],
) -> list[Row]:
    """Return a row for every held name of ``kind`` (a kind with several holders: semaphores,
    shared locks) of ``aliases`` that starts with ``prefix``, made by ``row(alias, entry,
    holders, detail URL)``; ``bases`` are the URLs of the release and detail pages. An alias
    that cannot be read is added to ``unavailable``."""
    release_base, detail_base = bases
    return [
        row(
            alias,
            entry,
            permit_rows(entry.holders, release_base, filters),
            detail_url(detail_base, alias, entry.name, filters, kind=kind),
        )
        for alias, entry in held_of_kind(aliases, kind, prefix, unavailable)
    ]


def held_name(alias: str, name: str, holders: tuple[LockInfo, ...], waiters: int) -> HeldName:
    """Return the index entry a lock with these holders would have, so that the page's
    orders (distlock.admin.listing.ORDERS) sort every kind alike: its lease ends with the
    first holder's, and it was taken when its newest holder came."""
    return HeldName(
        alias,
        name,
        min(h.expires_at.timestamp() for h in holders),
        max(h.acquired_at.timestamp() for h in holders),
        waiters,
    )


@dataclass(frozen=True)
class SemaphoreRow:
    info: SemaphoreInfo
    permits: list[PermitRow]
    detail_url: str

    @property
    def alias(self) -> str:
        return self.info.alias

    @property
    def name_html(self) -> SafeString:
        return breakable(self.info.name)

    @property
    def holders(self) -> list[PermitRow]:
        """The permits, under the name a shared lock's row gives its holds (the template's)."""
        return self.permits

    @property
    def held(self) -> HeldName:
        return held_name(self.info.alias, self.info.name, self.info.holders, self.info.waiting)


def semaphore_row(alias: str, entry: HeldEntry, permits: list[PermitRow], url: str) -> SemaphoreRow:
    """The row of one held semaphore (kind_rows)."""
    info = SemaphoreInfo(entry.name, entry.limit, entry.holders, entry.waiters, alias)
    return SemaphoreRow(info, permits, url)
