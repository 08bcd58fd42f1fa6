"""What a locked task's run leaves behind, so that a later message can tell a run that ended
from one that was killed, and so that the duplicates one run skipped schedule one check, not
one each.

A run is one delivery of a message: the task's id and try, as its lock's purpose names them
(``celery task NAME[ID]``, ``... retry N``); a message delivered again is the same delivery.
The markers are locks of their own, taken with ``wait=0`` (one atomic set-if-absent on the
server) and never released: their lease ends them, so nothing is left behind for long.

- ``distlock-ended:DELIVERY:NAME``: a run of DELIVERY ended its body (returned, raised,
  retried, was revoked); taken before the run releases NAME. Its absence once the run's lease
  has ended means the run was killed (SIGKILL, OOM, a host lost). A run that sends its retry
  takes it then (its purpose ends with HANDED_OVER), before its message is acknowledged: its
  work is the retry's even if it is killed before its body ends.
- ``distlock-taken:DELIVERY:NAME``: the work of DELIVERY, whose run was killed, is done by the
  delivery this marker's purpose names: a check of the killed run, or its message delivered
  again. Among all the messages waiting for one killed run only the first does its work (or
  the same delivery again, if it was killed in turn).
- ``distlock-check:TOKEN:NAME``: a check was scheduled for the end of the run holding NAME
  under TOKEN (its lock token). The first duplicate skipped while the run holds NAME takes
  it; later ones see it taken and schedule nothing. A run whose body ends takes it itself if
  no duplicate did: no check is pending then, and none will be scheduled (a duplicate of a
  run that ended is dropped).

The names start with the delivery or token, so that cutting a long lock name to the longest
a name may be never makes two markers one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..exceptions import LockError
from ..handler import locks
from ..info import PURPOSE_MAX_LENGTH
from ..keys import MAX_NAME_LENGTH
from ..lock import Lock

ENDED_PREFIX = "distlock-ended:"
TAKEN_PREFIX = "distlock-taken:"
CHECK_PREFIX = "distlock-check:"
# How a try that sent its retry ended (the purpose of its ended marker ends with it).
HANDED_OVER = "handed over to its retry"
# How long the evidence of an ended run is kept past two leases (a check looks about one
# lease after the skip): a check or a message delivered again that looks later than that
# (a queue backed up for longer) finds none and does the work again.
KEEP_EXTRA_SECONDS = 60.0
# How long a duplicate's claim to send the check lasts before it is sent, and a run's own
# claim when it ends with no check pending.
CLAIM_SECONDS = 10.0


def marker_name(prefix: str, key: str, name: str) -> str:
    return f"{prefix}{key}:{name}"[:MAX_NAME_LENGTH]


def _marker(prefix: str, lock: Lock, key: str, ttl: float, purpose: str) -> Lock:
    return Lock(
        marker_name(prefix, key, lock.name),
        ttl=ttl,
        wait=0,
        using=lock.using,
        purpose=purpose[:PURPOSE_MAX_LENGTH],
        hold_until_commit=False,  # a marker, not a hold: it never waits for a transaction
    )


def _take(prefix: str, lock: Lock, key: str, ttl: float, purpose: str) -> bool:
    return _marker(prefix, lock, key, ttl, purpose).acquire()


def _keep(lock: Lock) -> float:
    lease = lock.ttl if lock.ttl is not None else locks[lock.using].default_timeout
    return 2 * lease + KEEP_EXTRA_SECONDS


@contextlib.contextmanager
def claim_check(lock: Lock, token: str, purpose: str) -> Iterator[bool]:
    """Yield True if the caller is the first to schedule a check of the run ``token``
    holding ``lock``'s name; it sends the check inside the block.

    The claim is short until the block ends without an error: a duplicate killed between
    its claim and the sending lets a later duplicate claim again.
    """
    marker = _marker(CHECK_PREFIX, lock, token, CLAIM_SECONDS, purpose)
    claimed = marker.acquire()
    yield claimed
    if claimed:
        with contextlib.suppress(LockError):  # it ran out: another check at worst
            marker.extend(_keep(lock))


def mark_ended(lock: Lock, delivery: str, redelivered_too: bool, how: str = "ended") -> None:
    """Record that the run of ``delivery`` holding ``lock`` ended its body (``how``: "ended",
    or HANDED_OVER: it sent its retry, which does its work); call before releasing it.

    ``redelivered_too``: record it even if no check was scheduled (this run's message may be
    delivered again: acks_late). Otherwise taking the check marker first is enough when no
    duplicate did: a duplicate claims it right after it saw this run hold the lock, so it
    needs to last only a little (a duplicate paused longer between the two schedules a check
    that runs the work again).
    """
    assert lock.token is not None
    ended = f"{delivery} {how}"
    if not redelivered_too and _take(CHECK_PREFIX, lock, lock.token, CLAIM_SECONDS, ended):
        return
    _take(ENDED_PREFIX, lock, delivery, _keep(lock), ended)


def take_over(lock: Lock, delivery: str, me: str) -> bool:
    """Take over the work of ``delivery``, whose run was killed, holding ``lock`` (``me``:
    the taker's own delivery). Return False if a run of it ended its body, or another
    delivery took its work over; True if nobody did, or ``me`` did before (and was killed:
    this process holds the lock now).
    """
    if has_ended(lock, delivery):
        return False
    marker = _marker(TAKEN_PREFIX, lock, delivery, _keep(lock), me)
    if marker.acquire():
        return True
    taker = marker.operations.holder(marker.name)  # an error raises: never a silent drop
    return taker is not None and taker.purpose == me[:PURPOSE_MAX_LENGTH]


def handed_over(lock: Lock, delivery: str) -> bool:
    """Return True if the run of ``delivery`` handed its work to its retry (False if that
    cannot be read: the caller then only records a state that the retry's replaces)."""
    marker = marker_name(ENDED_PREFIX, delivery, lock.name)
    try:
        ended = lock.operations.holder(marker)
    except LockError:
        return False
    return ended is not None and ended.purpose.endswith(f" {HANDED_OVER}")


def has_ended(lock: Lock, delivery: str) -> bool:
    """Return True if a run of ``delivery`` holding ``lock``'s name ended its body."""
    return Lock(marker_name(ENDED_PREFIX, delivery, lock.name), using=lock.using).locked()
