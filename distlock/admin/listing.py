"""The held locks of every alias, searched, sorted and paginated without reading every lock.

Backends list held names with their lease ends cheaply (``exclusive.list``: a sorted index, no
scan of the keyspace); the full LockInfo is read only for the locks of the page shown
(``info_many``: one round trip per alias). A backend that cannot be reached is reported,
never raised, so one broken alias does not hide the locks of the others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..eviction import status_line
from ..exceptions import BackendUnavailable, InvalidLockBackendError
from ..handler import locks
from ..info import LockInfo

# What can go wrong when reading an alias: its server is down, or its settings are broken.
ALIAS_ERRORS = (BackendUnavailable, InvalidLockBackendError)


class HeldName(NamedTuple):
    """One held lock as a backend's index knows it."""

    alias: str
    name: str
    lease_end: float  # POSIX timestamp
    acquired: float  # POSIX timestamp
    waiters: int = 0  # how many are queued for it


class Order(NamedTuple):
    label: str
    key: Callable[[HeldName], Any]


# The index keeps each lock's lease end and acquisition time, so sorting every held lock
# needs no read of the locks themselves; only the page shown is read in full.
# The default puts contended locks first, the most waiters first (then newest first): the
# lock an operator is asked about ("why is this slow?") is at the top of its alias's list.
ORDERS: dict[str, Order] = {
    "waiters": Order(
        "Most waiters first", lambda held: (-held.waiters, -held.acquired, held.name, held.alias)
    ),
    "newest": Order("Newest first", lambda held: (-held.acquired, held.name, held.alias)),
    "expiry": Order("Expiring first", lambda held: (held.lease_end, held.name, held.alias)),
    "name": Order("Name", lambda held: (held.name, held.alias)),
}
DEFAULT_ORDER = "waiters"


@dataclass
class HeldLocks:
    """What the aliases answered: the held names, and why some alias could not be read."""

    names: list[HeldName] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)


def aliases_or_problem() -> tuple[list[str], str | None]:
    """Return the DISTLOCK aliases, and why there are none when the setting is broken."""
    try:
        return list(locks), None
    except InvalidLockBackendError as exc:
        return [], str(exc)


def eviction_warnings(aliases: Iterable[str]) -> list[str]:
    """Return the status line of each alias whose Redis may evict lock keys."""
    lines = []
    for alias in aliases:
        try:
            lines.append(status_line(alias, locks[alias]))
        except ALIAS_ERRORS:
            continue  # its listing says what is wrong
    return [line for line in lines if line]


def find_held(aliases: Iterable[str], prefix: str = "") -> HeldLocks:
    """Return the locks held in ``aliases`` whose name starts with ``prefix``, by alias then
    name."""
    found = HeldLocks()
    for alias in aliases:
        try:
            held = locks[alias].exclusive.list(prefix)
        except ALIAS_ERRORS as exc:
            found.unavailable[alias] = str(exc)
            continue
        found.names.extend(HeldName(alias, *entry[:4]) for entry in held)
    return found


def sort_held(names: list[HeldName], order: str) -> list[HeldName]:
    return sorted(names, key=ORDERS[order].key)


def read_infos(names: Sequence[HeldName], unavailable: dict[str, str]) -> list[LockInfo]:
    """Return the LockInfo of each of ``names`` still held, in the same order.

    Locks released since they were listed are left out; an alias that stopped answering is
    added to ``unavailable``.
    """
    names_by_alias: dict[str, list[str]] = {}
    for held in names:
        names_by_alias.setdefault(held.alias, []).append(held.name)
    infos: dict[tuple[str, str], LockInfo] = {}
    for alias, alias_names in names_by_alias.items():
        try:
            for info in locks[alias].info_many(alias_names):
                infos[alias, info.name] = info
        except ALIAS_ERRORS as exc:
            unavailable[alias] = str(exc)
    return [infos[key] for key in ((held.alias, held.name) for held in names) if key in infos]
