"""Listing held locks on one Redis server (or Cluster): every bucket's index read in one
round trip per server, many locks read per script call, and a walk with ZSCAN that costs
about one read per held lock. Redlock's nodes share the calls and replies."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from ...info import LockInfo
from ...keys import KeyLayout
from ..base import HeldEntry
from .holds import lock_info_from
from .runner import REDIRECTS, STALE_ROUTE, Runner
from .scripts import load
from .steps import Eval, EvalMany, Scope, Steps, text

HELD_NAMES = load("held_names")
INSPECT_MANY = load("inspect_many")
# Locks one INSPECT_MANY call reads at most (a bucket rarely holds more).
INSPECT_MANY_KEYS = 500
# Index entries one ZSCAN call returns at most (a bucket's index is usually much smaller).
SCAN_COUNT = 1000
# Names read per info_many() while walking: as many as fit, since info_many makes one call
# per bucket whatever the count.
WALK_BATCH = 20_000


def held_names(scope: Scope, prefix: str) -> Steps[list[HeldEntry]]:
    """Return the index entry of every held lock whose name starts with ``prefix``, by
    name."""
    replies = yield EvalMany(held_names_calls(scope.layout), reads=True)
    found = [
        entry for reply in replies for entry in held_entries(reply) if entry.name.startswith(prefix)
    ]
    found.sort()
    return found


def held_names_calls(layout: KeyLayout, waiting: str = "live") -> list[Eval]:
    """One call per bucket: each lists the names held in it, and how many wait for each
    (``waiting``: the kind of key that counts them, "wait" on Redlock's nodes)."""
    return [Eval(HELD_NAMES, [index], [waiting], idempotent=True) for index in layout.index_keys]


def held_entries(reply: list[Any]) -> list[HeldEntry]:
    """Return the entries of one bucket from held_names.lua's reply: name, lease end (ms),
    acquired (ms), waiters, ..."""
    return [
        HeldEntry(
            text(reply[i]), float(reply[i + 1]) / 1000, float(reply[i + 2]) / 1000, reply[i + 3]
        )
        for i in range(0, len(reply), 4)
    ]


def info_many(scope: Scope, names: list[str]) -> Steps[list[LockInfo]]:
    """Return the LockInfo of each name still held, in order. One call per bucket
    (INSPECT_MANY), not per lock: reading 50,000 locks costs about 1,000 calls."""
    groups = inspect_many_calls(scope.layout, names)
    replies = yield EvalMany([call for _, call in groups], reads=True)
    found = {
        info.name: info
        for (group, _), reply in zip(groups, replies, strict=True)
        for info in lock_infos_from(scope.alias, group, reply)
    }
    return [found[name] for name in names if name in found]


def inspect_many_calls(layout: KeyLayout, names: list[str]) -> list[tuple[list[str], Eval]]:
    """Group ``names`` by bucket, at most INSPECT_MANY_KEYS a call; return each call with
    the names it reads."""
    by_bucket: dict[str, list[tuple[str, tuple[str, str]]]] = defaultdict(list)
    for name in names:
        keys = layout.keys_for(name)
        by_bucket[keys.index].append((name, (keys.lock, keys.live)))
    grouped: list[tuple[list[str], Eval]] = []
    for bucket in by_bucket.values():
        for start in range(0, len(bucket), INSPECT_MANY_KEYS):
            chunk = bucket[start : start + INSPECT_MANY_KEYS]
            pairs = [key for _, pair in chunk for key in pair]
            grouped.append(
                ([name for name, _ in chunk], Eval(INSPECT_MANY, pairs, [], idempotent=True))
            )
    return grouped


def lock_infos_from(alias: str, names: list[str], reply: list[Any]) -> list[LockInfo]:
    """Return the LockInfo of each of ``names`` still held, from inspect_many.lua's reply."""
    now, *entries = reply
    return [
        info
        for info in (
            lock_info_from(alias, name, [entry[0], entry[1], now, entry[2]] if entry else entry)
            for name, entry in zip(names, entries, strict=True)
        )
        if info is not None
    ]


# --- the walk -----------------------------------------------------------------------------
def walk(runner: Runner, scope: Scope, prefix: str) -> Iterator[LockInfo]:
    """Yield the LockInfo of every held lock whose name starts with ``prefix``, in no
    particular order: a walk of every bucket's index with ZSCAN (one pipeline per server
    and round), the locks read in pipelined batches as their names arrive.

    A lock held for the whole walk is yielded exactly once, however many others are taken
    and released meanwhile (ZSCAN returns it at least once; repeats are dropped here); one
    taken or released during the walk may or may not be.
    """
    seen: set[str] = set()
    cursors = dict.fromkeys(scope.layout.index_keys, 0)
    moved: set[str] = set()  # indexes whose slot moved: walked through the cluster client
    while cursors:
        with runner.translated_errors():
            found, cursors = _scan_round(runner, cursors, moved, prefix)
        fresh = [
            name for name in dict.fromkeys(found) if name not in seen and name.startswith(prefix)
        ]
        seen.update(fresh)
        for start in range(0, len(fresh), WALK_BATCH):
            yield from runner.run(info_many(scope, fresh[start : start + WALK_BATCH]))


def _scan_round(
    runner: Runner, cursors: dict[str, int], moved: set[str], prefix: str
) -> tuple[list[str], dict[str, int]]:
    """Take one ZSCAN step on every index in ``cursors``; return the names found and the
    cursors of the indexes not finished yet."""
    pattern = _pattern(prefix)
    replies = _scan_by_server(runner, {k: c for k, c in cursors.items() if k not in moved}, pattern)
    for key in moved & cursors.keys():
        replies[key] = runner.client.zscan(key, cursors[key], match=pattern, count=SCAN_COUNT)
    found: list[str] = []
    remaining = {}
    for key, reply in replies.items():
        if isinstance(reply, REDIRECTS):
            # The index's slot is moving (resharding): from now on walk it through the
            # cluster client, which follows MOVED and ASK, from the start on its new server
            # (names already yielded are dropped as repeats).
            moved.add(key)
            reply = runner.client.zscan(key, 0, match=pattern, count=SCAN_COUNT)
        elif isinstance(reply, Exception):
            raise reply
        cursor, members = reply
        found.extend(text(member) for member, _ in members)
        if int(cursor):
            remaining[key] = int(cursor)
    return found, remaining


def _scan_by_server(runner: Runner, cursors: dict[str, int], pattern: str | None) -> dict[str, Any]:
    """Return each index's ZSCAN reply (or error), one pipeline per server."""
    if not runner.cluster:
        return _zscan(runner.client, cursors, pattern) if cursors else {}

    def per_node(cursors: dict[str, int]) -> dict[str, Any]:
        keys = list(cursors)
        replies: dict[str, Any] = {}
        for node_client, positions in runner.by_node(keys):
            replies.update(
                _zscan(node_client, {keys[p]: cursors[keys[p]] for p in positions}, pattern)
            )
        return replies

    try:
        return per_node(cursors)
    except STALE_ROUTE:
        # A failover: learn the slot map again; the new master's cursors differ, so
        # restart these indexes from the beginning (repeats are dropped by the walk).
        runner.client.nodes_manager.initialize()
        return per_node(dict.fromkeys(cursors, 0))


def _zscan(client: Any, cursors: dict[str, int], pattern: str | None) -> dict[str, Any]:
    pipe = client.pipeline(transaction=False)
    for key, cursor in cursors.items():
        pipe.zscan(key, cursor, match=pattern, count=SCAN_COUNT)
    return dict(zip(cursors, pipe.execute(raise_on_error=False), strict=True))


def _pattern(prefix: str) -> str | None:
    """Return a ZSCAN MATCH pattern for names starting with ``prefix`` (glob characters in
    it escaped), None for every name."""
    if not prefix:
        return None
    return "".join("\\" + char if char in "*?[]\\" else char for char in prefix) + "*"
