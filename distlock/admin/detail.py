"""One held lock in full on the "Held locks" page, of any kind: the exclusive holder, every
shared holder, or every permit of a semaphore with its limit; and who waits for it, oldest
first (the waiters' metadata is stored by the acquire script when they queue)."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from ..backends.base import BaseLockBackend
from ..backends.kinds import OperatorTexts, definition, several_holders
from ..backends.operations import HeldEntry
from ..handler import locks
from ..info import LockInfo, WaiterInfo
from .display import breakable, describe_holder, format_remaining
from .semaphores import PermitRow, permit_rows

# What the page says of who waits when the backend keeps how many, not who.
COUNT_ONLY = "This alias's backend keeps how many wait, not who."


@dataclass(frozen=True)
class LockDetail:
    """What the detail page shows. ``kind`` is "" when nothing of that name is held any
    more; ``info`` is the exclusive holder (kind "lock"); ``holders`` the holders of a kind
    with several (shared holders, a semaphore's permits), ``texts`` its words; ``waiters``
    None when the backend keeps how many wait, not who."""

    alias: str
    name: str
    kind: str = ""
    info: LockInfo | None = None
    holders: list[PermitRow] = field(default_factory=list)
    limit: int | None = None  # a semaphore's
    waiting: int | None = None  # how many wait (None: the backend cannot say)
    waiters: list[WaiterInfo] | None = field(default_factory=list)
    texts: OperatorTexts | None = None

    @property
    def title(self) -> str:
        return self.texts.detail_title if self.texts is not None else "Lock"

    @property
    def noun(self) -> str:
        """What "Nobody waits for this ..." names."""
        return self.texts.noun if self.texts is not None else "lock"

    @property
    def count_only(self) -> SafeString:
        """What the page says when it knows how many wait, not who (the kinds' own words:
        no markup in them, so an apostrophe stays one)."""
        if self.texts is not None and self.texts.queue_unknown:
            return format_html(self.texts.queue_unknown, waiting=self.waiting)
        return mark_safe(COUNT_ONLY)  # a constant

    @property
    def name_html(self) -> SafeString:
        return breakable(self.name)

    @property
    def holder(self) -> str:
        return describe_holder(self.info) if self.info is not None else ""

    @property
    def expires_in(self) -> str:
        return format_remaining(self.info.ttl_remaining) if self.info is not None else ""

    @property
    def waiting_for(self) -> list[tuple[int, WaiterInfo, str]]:
        """Each waiter with its place in the queue (1: next) and how long it has waited."""
        return [
            (place, waiter, format_remaining(waiter.waited))
            for place, waiter in enumerate(self.waiters or [], start=1)
        ]


def read_detail(
    alias: str, name: str, kind: str, release_bases: dict[str, str], filters: str
) -> LockDetail:
    """Read ``name`` of ``alias`` as ``kind`` (any kind held under that name when "") with
    its waiters; ``release_bases`` are the release pages of one hold of each kind with
    several holders, by word. Raise what the backend raises."""
    backend = locks[alias]
    # The lock's own kinds first (backend.info shows its exclusive holder or a shared one).
    info = backend.info(name) if kind == "" or definition(kind).on_lock else None
    if info is not None and not info.shared:
        queued = backend.waiters(name)
        return LockDetail(alias, name, "lock", info, waiting=info.waiters, waiters=queued)
    found = _several(backend, name, kind, info)
    if found is None:
        return LockDetail(alias, name)
    word, entry, queued = found
    texts = definition(word).operator
    assert texts is not None
    return LockDetail(
        alias,
        name,
        word,
        holders=permit_rows(entry.holders, release_bases[word], filters),
        limit=entry.limit if texts.shape == "permits" else None,
        waiting=entry.waiters if info is None else info.waiters,
        waiters=queued,
        texts=texts,
    )


def _several(
    backend: BaseLockBackend, name: str, kind: str, info: LockInfo | None
) -> tuple[str, HeldEntry, list[WaiterInfo] | None] | None:
    """Return the kind with several holders that holds ``name`` (``kind``, or any when ""),
    its entry, and who waits; None if none holds it. ``info``: the lock's holder, shared."""
    if info is not None:  # held shared: its holders, and the lock's queue
        holders = backend.shared.inspect(name)
        return "shared", HeldEntry(name, 0.0, 0.0, 0, holders), backend.waiters(name)
    for other in several_holders():
        if other.on_lock or kind not in ("", other.word):
            continue
        entry = backend.of_kind(other.word).entry(name)
        if entry is not None:
            # Its queue keeps tokens, not who they are: how many, then.
            return other.word, entry, None if entry.waiters else []
    return None
