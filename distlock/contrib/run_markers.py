"""What a locked task's run leaves behind, so that a later message can tell a run that ended
from one that was killed, and so that the duplicates one run skipped schedule one check, not
one each.

A run is known by its lock token (each acquire has its own). Both markers are locks of their
own, taken with ``wait=0`` (one atomic set-if-absent on the server) and never released: their
lease ends them, so nothing is left behind for long.

- ``distlock-ended:TOKEN:NAME``: the work of the run holding NAME under TOKEN is done or taken
  over. The run takes it when its body ends (returned, raised, retried, revoked), before it
  releases NAME; a message that waited for a killed run takes it when it starts that run's
  work, so that among all the messages waiting for one killed run only one does its work.
  Its absence once the run's lease has ended means the run was killed (SIGKILL, OOM, a host
  lost) and nobody took its work over.
- ``distlock-check:TOKEN:NAME``: a check was scheduled for the end of that run. The first
  duplicate skipped while the run holds NAME takes it; later ones see it taken and schedule
  nothing. A run whose body ends takes it itself if no duplicate did: no check is pending
  then, and none will be scheduled (a duplicate of a run that ended is dropped).

The names start with the token, so that cutting a long lock name to the longest a name may be
never makes two markers one.
"""

from __future__ import annotations

from ..handler import locks
from ..info import PURPOSE_MAX_LENGTH
from ..keys import MAX_NAME_LENGTH
from ..lock import Lock

ENDED_PREFIX = "distlock-ended:"
CHECK_PREFIX = "distlock-check:"
# How long the evidence of an ended run is kept past two leases (a check looks about one
# lease after the skip): a check or a message delivered again that looks later than that
# (a queue backed up for longer) finds none and does the work again.
KEEP_EXTRA_SECONDS = 60.0


def marker_name(prefix: str, token: str, name: str) -> str:
    return f"{prefix}{token}:{name}"[:MAX_NAME_LENGTH]


def _take(prefix: str, lock: Lock, token: str, ttl: float, purpose: str) -> bool:
    marker = Lock(
        marker_name(prefix, token, lock.name),
        ttl=ttl,
        wait=0,
        using=lock.using,
        purpose=purpose[:PURPOSE_MAX_LENGTH],
        hold_until_commit=False,  # a marker, not a hold: it never waits for a transaction
    )
    return marker.acquire()


def _keep(lock: Lock) -> float:
    lease = lock.ttl if lock.ttl is not None else locks[lock.using].default_timeout
    return 2 * lease + KEEP_EXTRA_SECONDS


def claim_check(lock: Lock, token: str, purpose: str) -> bool:
    """Return True if the caller is the first to schedule a check of the run ``token``
    holding ``lock``'s name."""
    return _take(CHECK_PREFIX, lock, token, _keep(lock), purpose)


def mark_ended(lock: Lock, purpose: str, redelivered_too: bool) -> None:
    """Record that the run holding ``lock`` ended its body; call before releasing it.

    ``redelivered_too``: record it even if no check was scheduled (this run's message may be
    delivered again: acks_late). Otherwise taking the check marker first is enough when no
    duplicate did: a duplicate claims it only while it sees this run hold the lock, so it
    needs to outlast the lease by little.
    """
    assert lock.token is not None
    ended = f"{purpose} ended"
    lease = lock.ttl if lock.ttl is not None else locks[lock.using].default_timeout
    if not redelivered_too and _take(CHECK_PREFIX, lock, lock.token, lease, ended):
        return
    _take(ENDED_PREFIX, lock, lock.token, _keep(lock), ended)


def take_over(lock: Lock, token: str, purpose: str) -> bool:
    """Take over the work of the killed run ``token``, holding ``lock``: return False if it
    ended or another message took its work over already."""
    return _take(ENDED_PREFIX, lock, token, _keep(lock), f"{purpose} took over its work")


def has_ended(lock: Lock, token: str) -> bool:
    """Return True if the run ``token`` holding ``lock``'s name ended, or its work was taken
    over (mark_ended, take_over)."""
    return Lock(marker_name(ENDED_PREFIX, token, lock.name), using=lock.using).locked()
