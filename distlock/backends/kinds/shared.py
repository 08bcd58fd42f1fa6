"""Shared holds of a lock (``distlock.lock(shared=True)``): many readers or one writer."""

from __future__ import annotations

from typing import Any

from ..operations import SharedKind, UnsupportedShared
from .definition import KindDefinition, OperatorTexts, ReleaseTexts


def _not_supported(backend: Any) -> Exception:
    return backend.shared_locks_not_supported()


# The shared hold's and the semaphore's definitions stay alike in shape (duplicates pairs
# them): each is one kind's words for the same fields; what reads them is written once.
KIND = KindDefinition(
    word="shared",
    operations=SharedKind,
    unsupported=UnsupportedShared,
    not_supported=_not_supported,
    classes={
        "redis": "distlock.backends.redis_ops.kinds.ScriptedShared",
        "locmem": "distlock.backends.locmem.shared.InMemoryShared",
    },
    on_lock=True,
    release=ReleaseTexts(
        gone="The shared hold of {name!r} was released or expired before it could be released.",
        logged=(
            "distlock: released a shared hold of {name!r} (alias {alias!r}, token {h.token}, "
            "fencing token {h.fencing_token}, held by {h.host} pid {h.pid}) with manage.py "
            "distlock release"
        ),
        done=(
            "Released the shared hold of {name!r} (alias {alias!r}) held by {h.host} pid "
            "{h.pid}, fencing token {h.fencing_token}."
        ),
    ),
    operator=OperatorTexts(
        shape="holders",
        title="Shared locks",
        css="shared",
        table_id="shared_list",
        count="readers",
        count_label="Shared holders",
        number="fencing token",
        release_label="Release this hold",
        kind_text=(
            "Shared lock: every holder below holds it at once; an exclusive acquire waits "
            "for all of them"
        ),
        count_field="holders",
        holders_heading="Holders",
        number_heading="Fencing token",
        noun="lock",
        queue_unknown="",
        detail_title="Shared lock",
        url_word="shared",
        release_title="Release a shared hold",
        release_question=(
            "Are you sure you want to release this shared hold of lock “{name}”? Its holder "
            "is not interrupted: it finds out when it next extends or releases the lock, or "
            "at its next automatic renewal. Only this hold is released; the other shared "
            "holders keep theirs."
        ),
        done="released",
        gone=(
            "No shared hold of lock “{name}” (alias {alias}) has fencing token {number} any "
            "more: it was released or expired. Nothing was released."
        ),
        record=(
            "Released the shared hold with fencing token {number} (alias {alias!r}), held by "
            "{who} since {since} UTC (purpose: {purpose})."
        ),
        success=(
            "Released the shared hold {number} of lock “{name}” (alias {alias}) held by {who}."
        ),
        header=("SHARED LOCK", "HOLDERS", "WAITERS", "WHO (EXPIRES IN)"),
        info_name="lock",
        info_count="held shared by: {held}",
        holder_line=(
            "  token {h.token}: {h.host} pid {h.pid} thread {h.thread}, fencing token "
            "{h.fencing_token}, expires in {h.ttl_remaining:.1f}s, depth {h.depth}, {purpose}"
        ),
        token_needed=(
            "{name!r} is held shared by {count} holders: pass --token with the token of the "
            "hold to release (see `distlock info NAME`)."
        ),
        no_such_token="No shared hold of {name!r} has the token {token}.",
    ),
)
