"""The kinds with several holders per name (shared locks, semaphores, any kind defined in
distlock.backends.kinds) in ``manage.py distlock``: one row per held name in ``list``, its
holders in ``info``, and ``release NAME --token T`` releasing one hold, in the words of each
kind's definition (OperatorTexts).

A kind's "shape" decides its count column: "permits" (held of a limit, and how many wait)
or "holders" (how many hold, and how many wait for the lock). A backend without a kind
(RedlockBackend: shared locks, semaphores) simply has none of it to show.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..backends.base import BaseLockBackend
from ..backends.kinds import KindDefinition, OperatorTexts
from ..backends.operations import HeldEntry
from ..info import LockInfo, shorten
from .tables import aligned


class Held(NamedTuple):
    """One held name of a kind with several holders, of one alias."""

    alias: str
    entry: HeldEntry


def texts_of(kind: KindDefinition) -> OperatorTexts:
    assert kind.operator is not None  # several_holders() gives only kinds that have them
    return kind.operator


def held_of(backend: BaseLockBackend, kind: KindDefinition, prefix: str) -> list[Held]:
    """Return the held names of ``kind`` of ``backend`` starting with ``prefix``."""
    return [Held(backend.alias, entry) for entry in backend.of_kind(kind.word).list(prefix)]


def one_held(backend: BaseLockBackend, kind: KindDefinition, name: str) -> HeldEntry | None:
    """Return ``name`` as ``kind`` holds it, None if it does not. A kind held on the lock
    itself (shared) counts those waiting for the lock, as its holders say."""
    if not kind.on_lock:
        return backend.of_kind(kind.word).entry(name)
    holders = backend.of_kind(kind.word).inspect(name)
    return HeldEntry(name, 0.0, 0.0, 0, holders) if holders else None


def waiting(kind: KindDefinition, entry: HeldEntry) -> int | None:
    """How many wait: a permit's queue counts them; the lock's holders tell how many wait for
    the lock (None: the backend cannot say)."""
    if texts_of(kind).shape == "permits" or not entry.holders:
        return entry.waiters
    return entry.holders[0].waiters


def _count(kind: KindDefinition, entry: HeldEntry) -> str:
    if texts_of(kind).shape == "permits":
        return f"{len(entry.holders)}/{entry.limit}"
    return str(len(entry.holders))


def table(kind: KindDefinition, held: list[Held], *, show_alias: bool = False) -> str:
    """Return one aligned row per held name: how many hold it, how many wait, and who."""
    rows = [
        [
            alias,
            entry.name,
            _count(kind, entry),
            "?" if (count := waiting(kind, entry)) is None else str(count),
            ", ".join(f"{h.host}:{h.pid} ({h.ttl_remaining:.1f}s)" for h in entry.holders),
        ]
        for alias, entry in held
    ]
    return aligned(list(texts_of(kind).header), rows, show_alias=show_alias)


def list_json(kind: KindDefinition, held: list[Held]) -> list[dict[str, Any]]:
    """Return each holder as a LockInfo object (the JSON list's shape); a permit's with its
    limit and how many wait, under the kind's word."""
    if texts_of(kind).shape != "permits":
        return [holder.as_json_dict() for _, entry in held for holder in entry.holders]
    return [
        {**holder.as_json_dict(), kind.word: {"limit": entry.limit, "waiting": entry.waiters}}
        for _, entry in held
        for holder in entry.holders
    ]


def info_json(kind: KindDefinition, alias: str, entry: HeldEntry) -> dict[str, Any]:
    """``info --json`` of a name of ``kind`` (the waiters, when known, are added by the
    command)."""
    holders = [h.as_json_dict() for h in entry.holders]
    if texts_of(kind).shape == "permits":
        return {
            "name": entry.name,
            "limit": entry.limit,
            "waiting": entry.waiters,
            "alias": alias,
            "holders": holders,
        }
    return {"name": entry.name, "alias": alias, kind.word: True, "holders": holders}


def describe(kind: KindDefinition, alias: str, entry: HeldEntry) -> list[str]:
    """Return the lines telling an operator about a held name and each of its holders."""
    texts = texts_of(kind)
    count = texts.info_count.format(
        held=len(entry.holders), limit=entry.limit, waiting=entry.waiters
    )
    lines = [f"{texts.info_name + ':':<15} {entry.name} (alias {alias})", count]
    lines += [texts.holder_line.format(h=h, purpose=shorten(h.purpose, 60)) for h in entry.holders]
    return lines


def holder_of(kind: KindDefinition, entry: HeldEntry, token: str | None) -> LockInfo | str:
    """Return the holder with ``token``, or why none can be released."""
    texts = texts_of(kind)
    if token is None:
        return texts.token_needed.format(name=entry.name, count=len(entry.holders))
    for holder in entry.holders:
        if holder.token == token:
            return holder
    return texts.no_such_token.format(name=entry.name, token=token)
