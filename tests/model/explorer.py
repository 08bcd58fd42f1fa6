"""Every interleaving of the clients' steps and the clock's ticks, depth-first to a fixed
depth, each state visited once (by its key) unless reached again with more depth left."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Iterator

from .client import Client, Context
from .clock import EPOCH_MS
from .config import Config
from .invariants import check_state, check_step
from .kinds import KINDS
from .server import CLOCK, Edit, Server
from .state import MS_RANGE, World
from .waking import check_wakes

Step = Callable[[Context], Client]


@dataclasses.dataclass
class Finding:
    """A violation and the steps that led to it."""

    steps: list[str]
    problems: list[str]

    def __str__(self) -> str:
        lines = [f"  {i + 1}. {step}" for i, step in enumerate(self.steps)]
        return "\n".join(["violation:", *(f"  {p}" for p in self.problems), "after:", *lines])


@dataclasses.dataclass
class Result:
    config: str
    depth: int
    states: int = 0
    transitions: int = 0
    seconds: float = 0.0
    finding: Finding | None = None

    def __str__(self) -> str:
        verdict = "PASS" if self.finding is None else "FAIL"
        return (
            f"{verdict} {self.config}: depth {self.depth}, {self.states:,} states, "
            f"{self.transitions:,} transitions, {self.seconds:.1f} s"
        )


class _Found(Exception):
    def __init__(self, finding: Finding) -> None:
        self.finding = finding


class Explorer:
    def __init__(self, config: Config, edit: Edit | None = None) -> None:
        self.config = config
        names = sorted({s for c in config.clients for s in KINDS[c.kind].scripts})
        self.server = Server(names, edit)
        self.seen: dict[str, int] = {}
        self.transitions = 0

    def run(self, depth: int) -> Result:
        result = Result(self.config.name, depth)
        began = time.perf_counter()
        root = World(EPOCH_MS, (), self.config.clients)
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 100 + 4 * depth))
        try:
            self._visit(root, [], depth)
        except _Found as found:
            result.finding = found.finding
        finally:
            sys.setrecursionlimit(limit)
        result.states, result.transitions = len(self.seen), self.transitions
        result.seconds = time.perf_counter() - began
        return result

    def _visit(self, world: World, path: list[str], left: int) -> None:
        key = world.key()
        if self.seen.get(key, -1) >= left:
            return
        self.seen[key] = left
        if left == 0:
            return
        for label, after, problems in self._moves(world):
            self.transitions += 1
            steps = [*path, f"t={world.now_ms - EPOCH_MS} ms  {label}"]
            if problems:
                raise _Found(Finding(steps, problems))
            self._visit(after, steps, left - 1)

    def _moves(self, world: World) -> Iterator[tuple[str, World, list[str]]]:
        for index, client in enumerate(world.clients):
            for label, step in client.actions(world.now_ms, world.data):
                yield self._apply(world, index, f"{client.name}: {label}", step)
        tick = _next_event(world)
        if tick is not None:
            self.server.load(world.data, tick)
            after = dataclasses.replace(world, now_ms=tick, data=self.server.dump(), micro=0)
            yield f"tick +{tick - world.now_ms} ms", after, check_state(after)

    def _apply(
        self, world: World, index: int, label: str, step: Step
    ) -> tuple[str, World, list[str]]:
        actor = world.clients[index]
        self.server.load(world.data, world.now_ms, world.micro)
        context = Context(self.server, world.now_ms, actor.operations)
        moved = step(context)
        clients = (*world.clients[:index], moved, *world.clients[index + 1 :])
        last_fence = max([world.last_fence, *context.grants])
        after = World(world.now_ms, self.server.dump(), clients, last_fence, CLOCK.micro)
        problems = [*context.errors, *check_step(world, after, actor, context.grants)]
        problems += check_wakes(world, after, index, context)
        return label, after, [*problems, *check_state(after)]


def _next_event(world: World) -> int | None:
    """The next server time at which something changes on its own: a key's expiry, a
    registration's or a lease's end (zset scores), a client's block, wait or END."""
    times: list[int] = []
    for _, kind, value, expiry in world.data:
        if expiry is not None:
            times.append(expiry + 1)
        if kind == "zset":
            for _, score in value:
                if MS_RANGE[0] < score < MS_RANGE[1]:
                    times.extend((int(score), int(score) + 1))
    for client in world.clients:
        times.extend(client.events())
    future = [t for t in times if t > world.now_ms]
    return min(future) if future else None
