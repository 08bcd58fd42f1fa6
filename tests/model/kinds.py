"""The three kinds of hold as the protocol calls them (docs/protocol.md): which script each
client step runs with which keys and arguments, how a reply reads, and who holds what by
the server's data (the invariants' "as the server sees it")."""

from __future__ import annotations

import dataclasses
from typing import Any

from distlock.keys import KeyLayout

from .server import Call, Data

NAME = "n"  # the one lock (or semaphore) of a run
GRACE = 250
LAYOUT = KeyLayout("m")
LOCK = LAYOUT.keys_for(NAME)
SHARED = LAYOUT.shared_keys_for(NAME)
SEMAPHORE = LAYOUT.semaphore_keys_for(NAME)
BUCKET_KEYS = {LOCK.fence, LOCK.index, SHARED.index, SEMAPHORE.index}  # by design without TTL


@dataclasses.dataclass(frozen=True)
class Grant:
    fence: int
    acquired_ms: int | None  # the server's time of the grant, when the reply says it


@dataclasses.dataclass(frozen=True)
class Held:
    pttl: int
    place: int
    now_ms: int | None  # the server's clock, when the reply says it (not a semaphore's)


class Kind:
    """One kind of hold: ``exclusive``, ``shared`` or ``semaphore``."""

    name = ""
    scripts: tuple[str, ...] = ()

    def acquire(self, token: str, lease: int, patience: int, waited: bool) -> Call:
        raise NotImplementedError

    def release(self, token: str) -> Call:
        raise NotImplementedError

    def leave(self, token: str) -> Call:
        raise NotImplementedError

    def extend(self, token: str, lease: int) -> Call:
        raise NotImplementedError

    def wake_list(self, token: str) -> str:
        raise NotImplementedError

    def read(self, reply: Any) -> Grant | Held:
        """Return what an acquire reply says (a grant, or "held" with what to block on)."""
        if isinstance(reply, str):
            fence, acquired = reply.split(" ")
            return Grant(int(fence), int(acquired))
        _, pttl, place, now_ms = reply
        return Held(int(pttl), int(place), int(now_ms))


class Exclusive(Kind):
    name = "exclusive"
    scripts = ("acquire", "release", "leave_queue", "extend")

    # As a current client calls them: acquire.lua tells by itself whether the token waited,
    # and the three scripts default the grace (GRACE).
    def acquire(self, token: str, lease: int, patience: int, waited: bool) -> Call:
        keys = (LOCK.lock, LOCK.fence, LOCK.waiters, LOCK.live, LOCK.index)
        return Call("acquire", keys, (token, lease, "{}", NAME, patience))

    def release(self, token: str) -> Call:
        return Call("release", (LOCK.lock, LOCK.waiters, LOCK.live, LOCK.index), (token, NAME, "1"))

    def leave(self, token: str) -> Call:
        return Call("leave_queue", (LOCK.lock, LOCK.waiters, LOCK.live), (token,))

    def extend(self, token: str, lease: int) -> Call:
        return Call("extend", (LOCK.lock, LOCK.index), (token, lease, NAME, "1", "0", ""))

    def wake_list(self, token: str) -> str:
        return f"{LOCK.waiters}:{token}"


# Exclusive, Shared and Semaphore stay alike in shape (duplicates pairs them): each fills the
# one shape of Kind with its own scripts, keys and arguments, as docs/protocol.md names them.
class Shared(Kind):
    name = "shared"
    scripts = ("shared_acquire", "shared_release", "shared_leave", "shared_extend")
    k = SHARED

    def acquire(self, token: str, lease: int, patience: int, waited: bool) -> Call:
        k = self.k
        keys = (k.lock, k.fence, k.queue, k.live, k.index, k.readers, k.holders)
        args = (token, lease, "{}", NAME, patience, "01"[waited], GRACE, "")
        return Call("shared_acquire", keys, args)

    def release(self, token: str) -> Call:
        k = self.k
        keys = (k.lock, k.queue, k.live, k.index, k.readers, k.holders)
        return Call("shared_release", keys, (token, NAME, "1", GRACE))

    def leave(self, token: str) -> Call:
        k = self.k
        keys = (k.lock, k.queue, k.live, k.index, k.readers, k.holders)
        return Call("shared_leave", keys, (token, GRACE, NAME))

    def extend(self, token: str, lease: int) -> Call:
        k = self.k
        keys = (k.lock, k.index, k.readers, k.holders)
        return Call("shared_extend", keys, (token, lease, NAME, "1", "0", ""))

    def wake_list(self, token: str) -> str:
        return f"{self.k.queue}:{token}"


class Semaphore(Kind):
    name = "semaphore"
    scripts = ("semaphore_acquire", "semaphore_release", "semaphore_leave", "semaphore_extend")
    k = SEMAPHORE
    limit = 2

    def keys(self) -> tuple[str, ...]:
        k = self.k
        return (k.holders, k.state, k.queue, k.patience, k.reserved, k.signal_prefix, k.index)

    def acquire(self, token: str, lease: int, patience: int, waited: bool) -> Call:
        args = (token, lease, "{}", NAME, self.limit, patience, GRACE)
        return Call("semaphore_acquire", self.keys(), args)

    def release(self, token: str) -> Call:
        return Call("semaphore_release", self.keys(), (token, GRACE, NAME))

    def leave(self, token: str) -> Call:
        return Call("semaphore_leave", self.keys(), (token, GRACE, NAME))

    def extend(self, token: str, lease: int) -> Call:
        return Call("semaphore_extend", self.keys(), (token, lease, "1", "", GRACE, NAME))

    def wake_list(self, token: str) -> str:
        return f"{self.k.signal_prefix}{token}"

    def read(self, reply: Any) -> Grant | Held:
        if int(reply[0]) == 1:
            return Grant(int(reply[1]), None)  # START is t_send: no clock pair (protocol.md)
        return Held(int(reply[1]), -1, None)


KINDS: dict[str, Kind] = {kind.name: kind for kind in (Exclusive(), Shared(), Semaphore())}


# --- who holds what, by the server's data ----------------------------------------------------


def value_of(data: Data, key: str) -> Any:
    for name, _, value, _ in data:
        if name == key:
            return value
    return None


def lock_holder(data: Data) -> str | None:
    """The exclusive holder's token, "=TOKEN" for a reservation, "=~" for shared holders."""
    value = value_of(data, LOCK.lock)
    if value is None:
        return None
    return value if value.startswith("=") else value.split(" ")[0]


def registered_waiters(data: Data, now_ms: int) -> dict[str, float]:
    """The lock's queued tokens whose registration runs still (token -> arrival, µs)."""
    queue = dict(value_of(data, LOCK.waiters) or ())
    live = dict(value_of(data, LOCK.live) or ())
    return {token: arrival for token, arrival in queue.items() if live.get(token, 0) > now_ms}


def shared_holders(data: Data, now_ms: int) -> set[str]:
    """Tokens holding a shared place now (not a reserved one: those have no fields yet)."""
    if value_of(data, LOCK.lock) != "=~":
        return set()
    fields = {field for field, _ in value_of(data, SHARED.holders) or ()}
    readers = value_of(data, SHARED.readers) or ()
    return {token for token, end in readers if end > now_ms and token in fields}


def permit_holders(data: Data, now_ms: int) -> set[str]:
    return {token for token, end in value_of(data, SEMAPHORE.holders) or () if end > now_ms}


def server_holds(kind: Kind, data: Data, token: str, now_ms: int) -> bool:
    if kind.name == "exclusive":
        return lock_holder(data) == token
    if kind.name == "shared":
        return token in shared_holders(data, now_ms)
    return token in permit_holders(data, now_ms)
