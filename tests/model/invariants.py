"""What must hold at every state, and across every step (docs/protocol.md, "What is
promised"). Each check returns the sentences that say what broke (none: all held)."""

from __future__ import annotations

from distlock.tokens import NON_FAIR_MARK

from .client import Client
from .kinds import (
    BUCKET_KEYS,
    GRACE,
    KINDS,
    LOCK,
    NAME,
    Semaphore,
    lock_holder,
    permit_holders,
    registered_waiters,
    server_holds,
    value_of,
)
from .state import World


def check_state(world: World) -> list[str]:
    """The invariants of one state."""
    return [
        *_believers(world),
        *_ttls(world),
        *_limit(world),
        *_orphans(world),
        *_leaks(world),
    ]


def _leaks(world: World) -> list[str]:
    """Once every client is done (idle, no acquire left, none crashed), nothing is left of the
    lock but the bucket's keys (the name held in no index) and wake-up lists that end within
    the grace (a waiter woken as it gave up)."""
    done = all(c.pc == "idle" and c.rounds == 0 and c.ghost is None for c in world.clients)
    if not done:
        return []
    found = []
    for name, kind, value, expiry in world.data:
        if name in BUCKET_KEYS:
            # An entry whose lease end passed is stale, and dropped by the next listing.
            if kind == "zset" and any(m == NAME and end > world.now_ms for m, end in value):
                found.append(f"everybody is done, and {name} still lists the name as held")
        elif kind != "list" or expiry is None or expiry > world.now_ms + GRACE:
            found.append(f"everybody is done, and key {name} ({kind}) is left")
    return found


def _orphans(world: World) -> list[str]:
    """The lock is held (or reserved) only by a token whose acquire or hold is still going
    on, or whose client died: a token its client gave up on is released by nobody, and keeps
    the lock from everyone until its lease ends."""
    holder = lock_holder(world.data)
    if holder is None or holder == "=~":
        return []
    token = holder.lstrip("=")
    for client in world.clients:
        ours = any(token == client.token_of(n) for n in range(client.serial + 1))
        if not ours or client.pc == "dead":
            continue
        if token != client.token or client.pc == "idle":
            return [f"the lock is held by {holder}, which client {client.name} gave up on"]
    return []


def check_step(before: World, after: World, actor: Client | None, grants: list[int]) -> list[str]:
    """The invariants of one step: fencing order, FIFO while registered."""
    return [*_fences(before, grants), *_order(before, after, actor)]


def _believers(world: World) -> list[str]:
    """A client that believes it holds (its END not passed on its own clock) holds by the
    server's data: mutual exclusion as the clients see it, the readers-writer rule."""
    found = []
    for client in world.clients:
        if not client.believes_it_holds(world.now_ms):
            continue
        if not server_holds(client.operations, world.data, client.token, world.now_ms):
            left = client.end - client.now(world.now_ms)
            found.append(
                f"client {client.name} ({client.kind}) believes it holds for {left:.1f} ms more "
                f"by its clock (rate {client.rate}), but by the server's data it does not "
                f"(lock: {lock_holder(world.data)!r})"
            )
    return found


def _ttls(world: World) -> list[str]:
    """Every key of a lock or semaphore ends on its own (only the bucket's keys do not)."""
    return [
        f"key {name} ({kind}) has no TTL"
        for name, kind, _, expiry in world.data
        if expiry is None and name not in BUCKET_KEYS
    ]


def _limit(world: World) -> list[str]:
    semaphore = KINDS["semaphore"]
    assert isinstance(semaphore, Semaphore)
    holders = permit_holders(world.data, world.now_ms)
    believers = [
        c for c in world.clients if c.kind == "semaphore" and c.believes_it_holds(world.now_ms)
    ]
    found = []
    if len(holders) > semaphore.limit:
        found.append(f"{len(holders)} permits held on the server, limit {semaphore.limit}")
    if len(believers) > semaphore.limit:
        found.append(
            f"{len(believers)} clients believe they hold a permit, limit {semaphore.limit}"
        )
    return found


def _fences(before: World, grants: list[int]) -> list[str]:
    """Fencing tokens rise strictly across every grant."""
    found, last = [], before.last_fence
    for fence in grants:
        if fence <= last:
            found.append(f"fencing token {fence} granted after {last}: not rising")
        last = max(last, fence)
    return found


def _order(before: World, after: World, actor: Client | None) -> list[str]:
    """A lock goes to the waiter that arrived first among those still registered, and a
    registered waiter keeps its place (it leaves the queue only with the lock, or by its own
    call)."""
    registered = registered_waiters(before.data, before.now_ms)
    own = actor.token if actor is not None else None
    found = []
    old, new = lock_holder(before.data), lock_holder(after.data)
    taker = None if new is None or new == "=~" else new.lstrip("=")
    # Newly granted or reserved. A non-fair acquirer ('!') taking a free lock may overtake
    # the queue (whoever asks first); a fair one, or any reservation, goes to the head.
    overtakes = (taker or "").startswith(NON_FAIR_MARK) and not (new or "").startswith("=")
    if taker is not None and old not in (taker, f"={taker}") and not overtakes:
        mine = registered.get(taker, float("inf"))
        ahead = [t for t, arrival in registered.items() if arrival < mine and t != taker]
        if ahead:
            found.append(f"the lock went to {taker} while {ahead[0]}, registered, arrived first")
    reserved = old is not None and old.startswith("=") and old != "=~"
    if reserved and taker not in (None, old[1:]) and not (new or "").startswith("="):
        found.append(f"the lock reserved for {old[1:]} was taken by {taker}")
    after_queue = {t for t, _ in value_of(after.data, LOCK.waiters) or ()}
    readers = {t for t, _ in value_of(after.data, f"{LOCK.waiters}|readers") or ()}
    for token in registered:
        kept = token in after_queue or token == taker or token in readers
        if not kept and token != own:
            found.append(
                f"registered waiter {token} lost its place (not queued, not handed the lock)"
            )
    return found
