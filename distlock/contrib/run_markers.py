"""What a locked task's run leaves behind, so that a later message can tell a run that ended
from one that died, and so that the duplicates one run made schedule one check, not many.

A run is known by its lock token (each acquire has its own). Both markers are locks of their
own, taken with ``wait=0`` (one atomic set-if-absent on the server) and never released: their
lease ends them, so a process that dies leaves nothing behind for longer than that.

- ``distlock-ended:TOKEN:NAME``: the run holding NAME under TOKEN ended its body (returned,
  raised, retried, was revoked); taken before the run releases NAME. Its absence after the
  run's lease ended means the run was killed (SIGKILL, OOM, a lost host).
- ``distlock-check:TOKEN:NAME``: one check was scheduled for the end of the run holding NAME
  under TOKEN. The first duplicate skipped while that run holds NAME takes it; the others see
  it taken and schedule nothing. A run that ends takes it itself when no duplicate did, so
  that no check is scheduled from then on (the run ended; a late duplicate is dropped).

The names start with the token so that cutting a long lock name to the longest name a lock
may have never makes two markers one.
"""

from __future__ import annotations

from ..keys import MAX_NAME_LENGTH
from ..lock import Lock

ENDED_PREFIX = "distlock-ended:"
CHECK_PREFIX = "distlock-check:"
# How long the evidence of an ended run is kept: a check or a redelivered message that looks
# later than that (a queue backed up for this long) finds none and runs the work again.
KEEP_SECONDS = 600.0


def marker_name(prefix: str, token: str, name: str) -> str:
    return f"{prefix}{token}:{name}"[:MAX_NAME_LENGTH]


def _take(prefix: str, token: str, name: str, using: str, purpose: str) -> bool:
    marker = Lock(
        marker_name(prefix, token, name),
        ttl=KEEP_SECONDS,
        wait=0,
        using=using,
        purpose=purpose[:200],
        hold_until_commit=False,  # a marker, not a hold: never waits for a transaction
    )
    return marker.acquire()


def claim_check(token: str, name: str, using: str, purpose: str) -> bool:
    """Return True if the caller is the first to schedule a check for the run ``token``."""
    return _take(CHECK_PREFIX, token, name, using, purpose)


def mark_ended(lock: Lock, purpose: str, keep: bool) -> None:
    """Record that the run holding ``lock`` ended its body; call before releasing it.

    ``keep``: record it even if no check was scheduled (a message of this run may be
    delivered again: acks_late). Otherwise taking the check marker is enough: no check is
    pending, and none will be scheduled for this run.
    """
    assert lock.token is not None
    ended = f"{purpose} ended"
    if not keep and claim_check(lock.token, lock.name, lock.using, ended):
        return
    _take(ENDED_PREFIX, lock.token, lock.name, lock.using, ended)


def has_ended(token: str, name: str, using: str) -> bool:
    """Return True if the run ``token`` recorded that it ended (see mark_ended)."""
    marker = Lock(marker_name(ENDED_PREFIX, token, name), using=using)
    return marker.locked()
