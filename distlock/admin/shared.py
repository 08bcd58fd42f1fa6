"""Shared locks on the admin's "Held locks" page: one row per lock held shared, with its
holders, each with a link to release that one hold (HeldLockAdmin.release_shared_view).

A shared hold is named by alias, lock name and fencing token (unique among the holders);
the holder's token never leaves the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.safestring import SafeString

from ..handler import locks
from .display import breakable, detail_url
from .listing import ALIAS_ERRORS, HeldName
from .semaphores import PermitRow, held_name, permit_rows


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


def shared_rows(
    aliases: list[str],
    prefix: str,
    bases: tuple[str, str],
    filters: str,
    unavailable: dict[str, str],
) -> list[SharedRow]:
    """Return a row for every shared-held lock of ``aliases`` whose name starts with
    ``prefix``; ``bases`` are the URLs of the release and detail pages. An alias that cannot
    be read is added to ``unavailable``."""
    release_base, detail_base = bases
    rows = []
    for alias in aliases:
        try:
            held = locks[alias].shared.list(prefix)  # none where there are no shared locks
        except ALIAS_ERRORS as exc:
            unavailable[alias] = str(exc)
            continue
        rows += [
            SharedRow(
                entry.name,
                alias,
                permit_rows(entry.holders, release_base, filters),
                entry.holders[0].waiters,
                detail_url(detail_base, alias, entry.name, filters, kind="shared"),
            )
            for entry in held
        ]
    return rows
