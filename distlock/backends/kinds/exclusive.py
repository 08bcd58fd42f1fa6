"""The exclusive lock: one holder of a name at a time."""

from __future__ import annotations

from ..operations import ExclusiveKind, Unsupported
from .definition import KindDefinition, ReleaseTexts


def _never(backend: object) -> Exception:
    # Every backend keeps the exclusive lock (BaseLockBackend.kind_classes names it).
    return LookupError(f"{backend!r} keeps no exclusive locks")


KIND = KindDefinition(
    word="lock",
    operations=ExclusiveKind,
    unsupported=Unsupported,
    not_supported=_never,
    classes={
        "redis": "distlock.backends.redis_ops.kinds.ScriptedExclusive",
        "locmem": "distlock.backends.locmem.exclusive.InMemoryExclusive",
    },
    on_lock=True,
    release=ReleaseTexts(
        gone=(
            "The lock {name!r} was released or its holder changed before it could be "
            "force-released. Nothing was released."
        ),
        logged=(
            "distlock: force-released {name!r} (alias {alias!r}, token {h.token}, fencing "
            "token {h.fencing_token}, held by {h.host} pid {h.pid}) with manage.py distlock "
            "release"
        ),
        done=(
            "Released the lock {name!r} (alias {alias!r}), held by {h.host} pid {h.pid} "
            "since {since}, fencing token {h.fencing_token}."
        ),
    ),
)
