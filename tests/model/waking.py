"""What must hold across a step about waking waiters and the non-fair mode (docs/protocol.md,
"Waiting for a lock" step 4, "Non-fair locks"). Each check returns the sentences that say
what broke (none: all held).

Liveness in a bounded model: a waiter never sleeps on a free lock that a client's script
freed without waking anyone (a release hands the lock to the head or, non-fair, wakes it); a
lock that lapses frees itself, and its waiters wake on their own timers (their BLPOP ends at
the lease's end + 2 ms), so a tick is not checked here."""

from __future__ import annotations

from distlock.tokens import NON_FAIR_MARK, SHARED_MARK

from .client import DRIFT_MS, Client, Context
from .clock import server_time_of
from .kinds import LOCK, lock_holder, registered_waiters, value_of
from .state import World

# A client at one of these steps sends leave_queue.lua before it does anything else (the
# error path, a wait that ended, a grant that came too late: client.CALLS).
LEAVING = frozenset({"late", "leave", "err_release", "err_leave"})


def check_wakes(before: World, after: World, index: int, context: Context) -> list[str]:
    """The checks of one step of client ``index``."""
    return [
        *_woken_is_head(before, after, before.clients[index]),
        *_freed_wakes(before, after),
        *_idle_free_lock(before, after),
        *_non_fair_release(before, after, before.clients[index], context),
        *_non_fair_acquire(before, after, after.clients[index], context),
    ]


def _wake_lengths(world: World) -> dict[str, int]:
    """Each exclusive waiter's wake-up list (token -> elements); shared ones are woken in runs."""
    prefix = f"{LOCK.waiters}:"
    return {
        name[len(prefix) :]: len(value)
        for name, kind, value, _ in world.data
        if kind == "list" and name.startswith(prefix) and name[len(prefix)] != SHARED_MARK
    }


def _woken_is_head(before: World, after: World, actor: Client) -> list[str]:
    """A wake-up (a handoff's, a non-fair release's, or a leave's from a free lock) goes to the
    first registered waiter: of those registered before the step, but for the acting client
    if it left the queue in it unwoken (it gave up; a waiter whose own acquire hands it the
    lock is woken by it, and leaves as the head)."""
    earlier, now = _wake_lengths(before), _wake_lengths(after)
    queue = registered_waiters(before.data, before.now_ms)
    token = actor.token
    gone = token not in registered_waiters(after.data, after.now_ms)
    if gone and now.get(token, 0) <= earlier.get(token, 0):
        queue.pop(token, None)
    head = min(queue, key=queue.__getitem__) if queue else None
    return [
        f"{token} was woken while {head}, registered, arrived first"
        for token, length in now.items()
        if length > earlier.get(token, 0) and head is not None and token != head
    ]


def _freed_wakes(before: World, after: World) -> list[str]:
    """A script that frees the lock while a live waiter sleeps on it wakes a registered waiter
    (or hands the lock on): else that waiter sleeps on a free lock until its BLPOP ends."""
    if lock_holder(before.data) is None or value_of(after.data, LOCK.lock) is not None:
        return []
    queue = registered_waiters(after.data, after.now_ms)
    woken = _wake_lengths(after)
    if any(woken.get(token) for token in queue):
        return []
    asleep = [
        c.name
        for c in after.clients
        if c.pc == "blocked" and c.token in queue and not woken.get(c.token)
    ]
    return [
        f"the lock was freed while waiter {name} sleeps, and nobody was woken" for name in asleep
    ]


def _on_the_way(world: World) -> bool:
    """Someone is coming for the lock: it is not free, or a registered waiter was woken (an
    element on its list), or a client is between its BLPOP and its acquire, or a client is
    yet to send leave_queue.lua (which wakes the head of a free lock: the leave is the step
    checked)."""
    if value_of(world.data, LOCK.lock) is not None:
        return True
    woken = _wake_lengths(world)
    if any(woken.get(token) for token in registered_waiters(world.data, world.now_ms)):
        return True
    return any(c.pc == "popped" or c.pc in LEAVING for c in world.clients)


def _idle_free_lock(before: World, after: World) -> list[str]:
    """A live client's step never leaves a live waiter asleep on a free lock with nobody
    coming for it (its BLPOP would end only at its timeout, the lock idle until then). A lock
    that lapses (a tick) and a crashed client's wasted wake-up are the exceptions the protocol
    accepts: their waiters' BLPOPs end at the lease's end, or the grace's."""
    if _on_the_way(after) or not _on_the_way(before):
        return []
    if any(c.pc == "dead" for c in after.clients):
        return []
    queue = registered_waiters(after.data, after.now_ms)
    found = []
    for c in after.clients:
        if c.pc == "blocked" and c.token in queue:
            left = server_time_of(c.rate, c.sent + c.block) - after.now_ms
            if left > DRIFT_MS + 10:  # not a BLPOP ending about now
                found.append(
                    f"the lock is free and waiter {c.name} sleeps {left} ms more: nobody was "
                    "woken, nobody is coming for it"
                )
    return found


def _non_fair_release(before: World, after: World, actor: Client, context: Context) -> list[str]:
    """A non-fair hold's release only wakes the head: it reserves the lock for nobody."""
    token = actor.token
    if not token.startswith(NON_FAIR_MARK) or "release" not in context.scripts:
        return []
    new = lock_holder(after.data) or ""
    # "=~": handed to a run of shared waiters at the head, as a fair release does.
    reserved = new.startswith("=") and new != f"={SHARED_MARK}"
    if lock_holder(before.data) == token and reserved:
        return [f"the release of non-fair hold {token} reserved the lock ({new})"]
    return []


def _non_fair_acquire(before: World, after: World, actor: Client, context: Context) -> list[str]:
    """A non-fair acquirer takes a free lock whoever is queued."""
    token = actor.token
    if not token.startswith(NON_FAIR_MARK) or context.scripts[:1] != ["acquire"]:
        return []
    if value_of(before.data, LOCK.lock) is None and lock_holder(after.data) != token:
        return [f"non-fair {token} found the lock free and did not take it"]
    return []
