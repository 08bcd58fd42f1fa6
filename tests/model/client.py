"""A client as docs/protocol.md tells it to behave ("Exclusive locks, step by step", "Waiting
for a lock", "The drift allowance", "The error path"), one step per script call it sends.

A client is a plain value; each step takes the server (through a Context) and returns the
client's next state. Its clock is its own: local(rate, server ms). ``rule`` "old" is the drift
allowance of protocol version 2 before issue 44 (the wait projected at one rate), kept so the
checker can show what it let through."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .clock import local, server_time_of
from .kinds import KINDS, Grant, Kind, value_of
from .server import Call, Data, Server

MAX_BLOCK = 1000
MARGIN = 1000
SLACK = 1
GRACE = 250
DRIFT_FACTOR = 0.01
DRIFT_MS = 2


@dataclasses.dataclass
class Context:
    """What a step runs against: the server at its time, and what it granted."""

    server: Server
    now_ms: int
    kind: Kind
    grants: list[int] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    scripts: list[str] = dataclasses.field(default_factory=list)  # the calls made, in order

    def run(self, call: Call) -> Any:
        self.scripts.append(call.script)
        reply = self.server.run(call)
        if isinstance(reply, Exception):
            self.errors.append(f"{call.script} answered an error: {reply}")
            return None
        return reply


@dataclasses.dataclass(frozen=True)
class Client:
    name: str  # "A", "B", "C"
    kind: str  # "exclusive", "shared", "semaphore"
    rate: float  # its clock's rate: 0.99 runs 1% slow
    lease: int  # ms
    wait: int  # ms; 0 tries once
    rounds: int  # acquires it may still start
    rule: str = "new"  # the drift allowance: "new" (the wait counted at 0.99) or "old"
    faults: bool = True  # may crash, lose replies, cancel
    discard: bool = True  # the error path closes a pending pipeline's connection (a MUST)
    fair: bool = True  # False: a non-fair exclusive acquirer ('!' tokens, "Non-fair locks")
    pc: str = "idle"
    serial: int = 0
    began: float = 0.0  # local ms the acquire began
    clock: tuple[float, int] | None = None  # (t0, NOW0)
    sent: float = 0.0  # t_send of the call (or pipeline) in flight
    block: float = 0.0
    patience: int = 0
    end: float = 0.0  # the local time the hold is counted on until (END)
    # A pipeline left pending on a connection kept open (discard=False): the serial of its
    # token, the local time its BLPOP times out, its acquire's patience.
    ghost: tuple[int, float, int] | None = None

    @property
    def token(self) -> str:
        return self.token_of(self.serial)

    def token_of(self, serial: int) -> str:
        mark = "~" if self.kind == "shared" else "" if self.fair else "!"
        return f"{mark}t{self.name}{serial:04d}"

    @property
    def operations(self) -> Kind:
        return KINDS[self.kind]

    def now(self, now_ms: int) -> float:
        return local(self.rate, now_ms)

    def believes_it_holds(self, now_ms: int) -> bool:
        return self.pc == "hold" and self.now(now_ms) < self.end

    def relative(self, now_ms: int) -> tuple[Any, ...]:
        """This client with its times relative to its clock's now (the state's key)."""
        now = self.now(now_ms)
        clock = (
            None if self.clock is None else (round(self.clock[0] - now, 3), self.clock[1] - now_ms)
        )
        times = (self.began, self.sent, self.end)
        ghost = None if self.ghost is None else (self.ghost[0], round(self.ghost[1] - now, 3))
        return (self.pc, self.token, self.rounds, clock, *(round(t - now, 3) for t in times),
                self.block, self.patience, ghost)  # fmt: skip

    # --- what it may do next -----------------------------------------------------------

    def actions(self, now_ms: int, data: Data) -> list[tuple[str, Callable[[Context], Client]]]:
        """Return the steps this client may take now: (label, step)."""
        pc = self.pc
        steps: list[tuple[str, Callable[[Context], Client]]] = []
        if pc == "idle" and self.rounds > 0:
            steps.append((f"acquire(wait={self.wait})", lambda c: self.start(c, lost=False)))
            if self.faults:
                steps.append(("acquire, reply lost", lambda c: self.start(c, lost=True)))
        elif pc == "blocked":
            steps += self.wake_ups(now_ms, data)
            if self.faults:
                kept = "discarded" if self.discard else "kept open"
                steps.append((f"cancel (connection {kept})", self.to_error_path))
        elif pc == "hold":
            steps.append(("release", self.release))
            steps.append(("extend", self.extend))
        elif pc == "popped":  # non-fair: the BLPOP answered, the acquire not sent yet
            steps.append(("acquire after the BLPOP", lambda c: self.wake(c, lost=False)))
            if self.faults:
                steps.append(("acquire after the BLPOP, reply lost", lambda c: self.wake(c, True)))
                steps.append(("cancel", self.to_error_path))
        elif pc in CALLS:
            steps.append((pc, lambda c: CALLS[pc](self, c)))
        if self.ghost is not None:
            ghost_token = self.token_of(self.ghost[0])
            woken = bool(value_of(data, self.operations.wake_list(ghost_token)))
            if woken or self.now(now_ms) >= self.ghost[1]:
                steps.append(("the abandoned pipeline's acquire runs", self.run_ghost))
        if self.faults and pc in ("blocked", "popped", "hold"):
            steps.append(("crash", lambda c: dataclasses.replace(self, pc="dead")))
        return steps

    def wake_ups(self, now_ms: int, data: Data) -> list[tuple[str, Callable[[Context], Client]]]:
        """A blocked waiter's BLPOP returns (woken, or its timeout). A fair waiter's pipelined
        acquire runs with it; a non-fair waiter sends its acquire once the BLPOP answered
        (step 2 of "Non-fair locks"), a step of its own, so others may run in between."""
        woken = bool(value_of(data, self.operations.wake_list(self.token)))
        if not woken and self.now(now_ms) < self.sent + self.block:
            return []
        label = "wake" if woken else "BLPOP timed out"
        if not self.fair:
            return [(f"{label} (BLPOP alone)", self.pop)]
        steps = [(label, lambda c: self.wake(c, lost=False))]
        if self.faults:
            steps.append(("wake, reply lost", lambda c: self.wake(c, lost=True)))
        return steps

    def events(self) -> list[int]:
        """Server times at which this client's view changes: a block's end, its wait's end,
        the end of the lease it counts on."""
        times = []
        if self.pc == "blocked":
            times.append(server_time_of(self.rate, self.sent + self.block))
        if self.pc in ("blocked", "popped", "giveback"):
            times.append(server_time_of(self.rate, self.began + self.wait) + 1)
        if self.pc == "hold":
            times.append(server_time_of(self.rate, self.end))
        if self.ghost is not None:
            times.append(server_time_of(self.rate, self.ghost[1]))
        return times

    # --- the steps -----------------------------------------------------------------------

    def start(self, c: Context, lost: bool) -> Client:
        """Step 1-2 of Acquire: a new token, the first call."""
        now = self.now(c.now_ms)
        client = dataclasses.replace(
            self, serial=self.serial + 1, rounds=self.rounds - 1, began=now, sent=now, clock=None
        )
        patience = client.patience_now(now)
        reply = c.run(client.operations.acquire(client.token, self.lease, patience, waited=False))
        if lost or reply is None:
            return client.to_error_path(c)
        return client.after(c, reply, waited=False)

    def wake(self, c: Context, lost: bool) -> Client:
        """The BLPOP returned (woken, or its timeout): the pipelined acquire runs. A non-fair
        waiter popped already (pop), and sends the acquire now: its t_send is now."""
        client = self
        if self.fair:
            c.server.lpop(self.operations.wake_list(self.token))
        else:
            client = dataclasses.replace(self, sent=self.now(c.now_ms))
        call = self.operations.acquire(self.token, self.lease, self.patience, waited=True)
        reply = c.run(call)
        if lost or reply is None:
            return client.to_error_path(c)
        return client.after(c, reply, waited=True)

    def pop(self, c: Context) -> Client:
        """A non-fair waiter's BLPOP returned alone (woken, or its timeout)."""
        c.server.lpop(self.operations.wake_list(self.token))
        return dataclasses.replace(self, pc="popped")

    def after(self, c: Context, reply: Any, waited: bool) -> Client:
        """Step 3 of Acquire and of the loop: read the reply."""
        now = self.now(c.now_ms)
        read = self.operations.read(reply)
        if isinstance(read, Grant):
            c.grants.append(read.fence)
            if waited and now > self.began + self.wait:
                return dataclasses.replace(self, pc="late")  # handed on: release, leave
            end = self.lease_end(read, now)
            if now >= end:
                return dataclasses.replace(self, pc="giveback")  # the drift allowance
            return dataclasses.replace(self, pc="hold", end=end)
        clock = self.clock
        if clock is None and read.now_ms is not None:
            clock = (self.sent, read.now_ms)
        client = dataclasses.replace(self, clock=clock)
        if self.wait == 0:
            return dataclasses.replace(client, pc="idle")
        return client.block_for(now, read.pttl, read.place)

    def block_for(self, now: float, pttl: int, place: int) -> Client:
        """Step 1-2 of the loop: give up when the wait is over, else send the pipeline."""
        left = self.wait - (now - self.began)
        if left <= 0:
            return dataclasses.replace(self, pc="leave")
        block = min(left, max(pttl, 1) + 2, MAX_BLOCK)
        if place == 1:
            block = min(block, GRACE)
        block = max(round(block), 1)  # BLPOP takes ms (at least 1)
        return dataclasses.replace(
            self, pc="blocked", sent=now, block=block, patience=self.patience_now(now)
        )

    def patience_now(self, now: float) -> int:
        if self.wait == 0:
            return 0
        return round(min(self.wait - (now - self.began), MAX_BLOCK) + MARGIN)

    def lease_end(self, grant: Grant, now: float) -> float:
        """The drift allowance: END = START + LEASE - ALLOWANCE (a START projected past
        ``now``, a server clock's step, is the send time)."""
        start = self.sent
        if self.clock is not None and grant.acquired_ms is not None:
            waited = grant.acquired_ms - self.clock[1]
            if self.rule == "new":
                waited *= 1 - DRIFT_FACTOR
            projected = self.clock[0] + waited - 1
            if self.rule == "old" or projected <= now:  # the old rule had no fallback
                start = max(start, projected)
        return start + self.lease - (self.lease * DRIFT_FACTOR + DRIFT_MS)

    def release(self, c: Context) -> Client:
        c.run(self.operations.release(self.token))
        return dataclasses.replace(self, pc="idle")

    def extend(self, c: Context) -> Client:
        sent = self.now(c.now_ms)
        if c.run(self.operations.extend(self.token, self.lease)) != 1:
            return dataclasses.replace(self, pc="idle")  # not held any more
        end = sent + self.lease - (self.lease * DRIFT_FACTOR + DRIFT_MS)
        return dataclasses.replace(self, end=end)

    def to_error_path(self, c: Context) -> Client:
        """A call failed or the caller cancelled: the pipeline's connection is discarded (its
        EVALSHA never runs), then release and leave the queue. Without the discard (a client
        breaking the MUST), a pending pipeline stays, and its acquire runs when its BLPOP
        returns."""
        if self.pc == "blocked" and not self.discard:
            ghost = (self.serial, self.sent + self.block, self.patience)
            return dataclasses.replace(self, pc="err_release", ghost=ghost)
        return dataclasses.replace(self, pc="err_release")

    def run_ghost(self, c: Context) -> Client:
        assert self.ghost is not None
        serial, _, patience = self.ghost
        token = self.token_of(serial)
        c.server.lpop(self.operations.wake_list(token))
        c.run(self.operations.acquire(token, self.lease, patience, waited=True))
        return dataclasses.replace(self, ghost=None)  # its reply is read by nobody


def _release_then(pc: str) -> Callable[[Client, Context], Client]:
    def step(client: Client, c: Context) -> Client:
        c.run(client.operations.release(client.token))
        return dataclasses.replace(client, pc=pc)

    return step


def _leave(client: Client, c: Context) -> Client:
    c.run(client.operations.leave(client.token))
    return dataclasses.replace(client, pc="idle")


def _give_back(client: Client, c: Context) -> Client:
    """A grant that did not count: release it and wait on with the same token (PTTL 0, PLACE
    -1), or leave when the wait is over."""
    c.run(client.operations.release(client.token))
    return client.block_for(client.now(c.now_ms), 0, -1)


# The steps of a client part-way through a sequence of calls (one call each).
CALLS: dict[str, Callable[[Client, Context], Client]] = {
    "giveback": _give_back,
    "late": _release_then("leave"),
    "leave": _leave,
    "err_release": _release_then("err_leave"),
    "err_leave": _leave,
}
