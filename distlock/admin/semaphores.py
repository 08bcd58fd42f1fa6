"""Semaphores on the admin's "Held locks" page: one row per semaphore with its holders, each
with a link to free that one permit (HeldLockAdmin.release_permit_view).

A permit is named by alias, semaphore name and permit number (its ``fencing_token``); the
holder's token never leaves the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.safestring import SafeString

from ..handler import locks
from ..info import LockInfo, SemaphoreInfo
from .display import breakable, describe_holder, detail_url, format_remaining, release_url
from .listing import ALIAS_ERRORS, HeldName


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
            holder=describe_holder(holder),
            expires_in=format_remaining(holder.ttl_remaining),
            release_url=release_url(release_base, holder, filters),
        )
        for holder in holders
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
    def held(self) -> HeldName:
        return held_name(self.info.alias, self.info.name, self.info.holders, self.info.waiting)


def semaphore_rows(
    aliases: list[str],
    prefix: str,
    bases: tuple[str, str],
    filters: str,
    unavailable: dict[str, str],
) -> list[SemaphoreRow]:
    """Return a row for every held semaphore of ``aliases`` whose name starts with
    ``prefix``; ``bases`` are the URLs of the release and detail pages. An alias that cannot
    be read is added to ``unavailable``."""
    release_base, detail_base = bases
    rows = []
    for alias in aliases:
        try:
            held = locks[alias].semaphores.list(prefix)  # none where there are no semaphores
        except ALIAS_ERRORS as exc:
            unavailable[alias] = str(exc)
            continue
        rows += [
            SemaphoreRow(
                SemaphoreInfo(entry.name, entry.limit, entry.holders, entry.waiters, alias),
                permit_rows(entry.holders, release_base, filters),
                detail_url(detail_base, alias, entry.name, filters, kind="semaphore"),
            )
            for entry in held
        ]
    return rows
