"""Semaphores (``distlock.semaphore``): up to ``limit`` holders of one name at once."""

from __future__ import annotations

from typing import Any

from ..operations import SemaphoreKind, UnsupportedSemaphore
from .definition import KindDefinition, OperatorTexts, ReleaseTexts


def _not_supported(backend: Any) -> Exception:
    return backend.semaphores_not_supported()


# The shared hold's and the semaphore's definitions stay alike in shape (duplicates pairs
# them): each is one kind's words for the same fields; what reads them is written once.
KIND = KindDefinition(
    word="semaphore",
    operations=SemaphoreKind,
    unsupported=UnsupportedSemaphore,
    not_supported=_not_supported,
    classes={
        "redis": "distlock.backends.redis_ops.kinds.ScriptedSemaphore",
        "locmem": "distlock.backends.locmem.semaphores.InMemorySemaphore",
    },
    release=ReleaseTexts(
        gone="The permit of {name!r} was released or expired before it could be freed.",
        logged=(
            "distlock: freed a permit of the semaphore {name!r} (alias {alias!r}, token "
            "{h.token}, held by {h.host} pid {h.pid}) with manage.py distlock release"
        ),
        done=(
            "Freed the permit of the semaphore {name!r} (alias {alias!r}) held by {h.host} "
            "pid {h.pid}."
        ),
    ),
    operator=OperatorTexts(
        shape="permits",
        title="Semaphores",
        css="semaphores",
        table_id="semaphore_list",
        count="permits",
        count_label="Permits held",
        number="permit",
        release_label="Free permit",
        kind_text="Semaphore",
        count_field="permits",
        holders_heading="Permits",
        number_heading="Permit",
        noun="semaphore",
        queue_unknown="A semaphore's queue keeps how many wait ({waiting}), not who.",
        detail_title="Semaphore",
        url_word="permit",
        release_title="Free a permit of a semaphore",
        release_question=(
            "Are you sure you want to free this permit of the semaphore “{name}”? Its holder "
            "is not interrupted: it finds out when it next extends or releases the permit, "
            "or at its next automatic renewal. Only this permit is freed; the other holders "
            "keep theirs."
        ),
        done="freed",
        gone=(
            "No permit of the semaphore “{name}” (alias {alias}) is held with number "
            "{number} any more: it was released or expired. Nothing was freed."
        ),
        record=(
            "Freed permit {number} of the semaphore (alias {alias!r}), held by {who} since "
            "{since} UTC (purpose: {purpose})."
        ),
        success="Freed permit {number} of the semaphore “{name}” (alias {alias}) held by {who}.",
        header=("SEMAPHORE", "HELD", "WAITING", "HOLDERS (EXPIRES IN)"),
        info_name="semaphore",
        info_count="permits:        {held} of {limit} held, {waiting} waiting",
        holder_line=(
            "  token {h.token}: {h.host} pid {h.pid} thread {h.thread}, permit "
            "{h.fencing_token}, expires in {h.ttl_remaining:.1f}s, {purpose}"
        ),
        token_needed=(
            "{name!r} is a semaphore with {count} holders: pass --token with the token of the "
            "permit to free (see `distlock info NAME`)."
        ),
        no_such_token="No permit of the semaphore {name!r} is held with the token {token}.",
    ),
)
