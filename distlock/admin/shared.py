"""Shared locks on the admin's "Held locks" page: one row per lock held shared, with its
holders, each with a link to release that one hold (HeldLockAdmin.release_shared_view).

A shared hold is named by alias, lock name and fencing token (unique among the holders);
the holder's token never leaves the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..exceptions import SharedLocksNotSupported
from ..handler import locks
from .display import describe_holder, format_remaining, release_url
from .listing import ALIAS_ERRORS
from .semaphores import PermitRow


@dataclass(frozen=True)
class SharedRow:
    name: str
    alias: str
    holders: list[PermitRow]
    waiters: int | None  # how many are queued (None: the backend cannot say)


def shared_rows(
    aliases: list[str], prefix: str, release_base: str, filters: str, unavailable: dict[str, str]
) -> list[SharedRow]:
    """Return a row for every shared-held lock of ``aliases`` whose name starts with
    ``prefix``; an alias that cannot be read is added to ``unavailable``."""
    rows = []
    for alias in aliases:
        try:
            held = locks[alias].held_shared(prefix)
        except SharedLocksNotSupported:
            continue  # a backend without shared locks holds none
        except ALIAS_ERRORS as exc:
            unavailable[alias] = str(exc)
            continue
        for name, holders in held.items():
            rows.append(
                SharedRow(
                    name,
                    alias,
                    [
                        PermitRow(
                            info=holder,
                            holder=describe_holder(holder),
                            expires_in=format_remaining(holder.ttl_remaining),
                            release_url=release_url(release_base, holder, filters),
                        )
                        for holder in holders
                    ],
                    holders[0].waiters,
                )
            )
    return rows
