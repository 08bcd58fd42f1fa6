"""What ``manage.py distlock release`` says when it releases a hold, for each kind: one
release path in the command (Command._release_hold), these words per kind.

Each text is formatted with ``name``, ``alias``, ``h`` (the holder's LockInfo) and ``since``
(when it was acquired, UTC).
"""

from __future__ import annotations

from typing import NamedTuple


class ReleaseTexts(NamedTuple):
    gone: str  # the hold ended (or changed hands) before it could be released
    logged: str  # the log record of the release
    done: str  # the line on stdout


RELEASE_TEXTS = {
    "lock": ReleaseTexts(
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
    "semaphore": ReleaseTexts(
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
    "shared": ReleaseTexts(
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
}
