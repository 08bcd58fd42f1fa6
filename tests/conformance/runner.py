"""The conformance checks: the client under test beside distlock's own Python processes, all
speaking the line protocol, on one real server (or a Cluster). Each check prints one line,
PASS, FAIL or SKIP (a feature the client does not claim), and what it saw."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from devkit.paths import ROOT
from distlock.backends.redis_ops.scripts import LUA
from distlock.keys import KeyLayout

from .line_client import ClientFailed, LineClient

PYTHON_CLIENT = ["-m", "tests.conformance.python_client"]
PURPOSE = "conformance: metadata ✓ with spaces"


class CheckFailed(Exception):
    pass


class Skipped(Exception):
    pass


@dataclass
class Run:
    """The servers, the client under test's command, and the processes started so far."""

    command: Sequence[str]
    python: str
    url: str
    cluster: bool
    prefix: str = "distlock"
    rounds: int = 100
    started: list[LineClient] = field(default_factory=list)
    features: list[str] = field(default_factory=list)
    serial: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def env(self) -> dict[str, str]:
        return {
            "DISTLOCK_URL": self.url,
            "DISTLOCK_KEY_PREFIX": self.prefix,
            "DISTLOCK_SCRIPTS": str(LUA),
            "DISTLOCK_CLUSTER": "1" if self.cluster else "0",
            "PYTHONPATH": str(ROOT),
        }

    def client(self) -> LineClient:
        """Start one more client under test (ready: it has answered ``hello``)."""
        label = f"client #{next(self.serial)}"
        return self._ready(LineClient(label, self.command, self.env, Path.cwd()))

    def distlock(self) -> LineClient:
        """Start one more Python distlock process (ready)."""
        command = [self.python, *PYTHON_CLIENT]
        return self._ready(LineClient(f"python #{next(self.serial)}", command, self.env, ROOT))

    def _ready(self, started: LineClient) -> LineClient:
        self.started.append(started)
        started.call("hello", timeout=60)  # started up: timings count from here
        return started

    def data(self) -> Any:
        """A plain Redis client, to look at the queue."""
        if self.cluster:
            return redis.RedisCluster.from_url(self.url, decode_responses=True)
        return redis.Redis.from_url(self.url, decode_responses=True)

    def keys_for(self, name: str) -> Any:
        return KeyLayout(self.prefix).keys_for(name)

    def name(self, what: str) -> str:
        return f"conformance:{what}:{time.time_ns()}"

    def close(self) -> None:
        """End every process started so far (each check starts its own)."""
        for started in self.started:
            started.close()
        self.started.clear()


def first_live_waiter(data: Any, queue: str, live: str) -> str | None:
    """The waiter a release would hand the lock to now: the first queued token whose
    registration (its score in ``live``) has not ended by the server's clock (a client that
    decodes replies or not: interop/python_worker.py's does not)."""
    tokens = data.zrange(queue, 0, 15)
    if not tokens:
        return None
    ends = data.zmscore(live, tokens)
    seconds, micros = data.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    head = next((t for t, end in zip(tokens, ends, strict=True) if end and end > now_ms), None)
    return head.decode() if isinstance(head, bytes) else head


def in_thread(call: Callable[[], Any]) -> Callable[[], Any]:
    """Start ``call`` in a thread; return a function that waits and returns (or raises) it."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the caller of the returned function
            outcome.append((False, exc))

    thread = threading.Thread(target=target, daemon=True)
    thread.start()

    def result() -> Any:
        thread.join()
        ok, value = outcome[0]
        if not ok:
            raise value
        return value

    return result


# --- the checks ---------------------------------------------------------------------------


def check_hello(run: Run) -> str:
    reply = run.client().call("hello")
    features = reply.get("features")
    if not isinstance(features, list) or "exclusive" not in features:
        raise CheckFailed(f"features {features!r} must list 'exclusive'")
    run.features = features
    return f"{reply.get('client')!r}, features {features}"


@dataclass
class Grant:
    seq: int
    fence: int
    token: str
    who: str
    head: str | None = None  # the first live waiter just before this holder released


def kinds(run: Run) -> list[tuple[Callable[[], LineClient], str]]:
    return [(run.client, "client"), (run.distlock, "python")]


def check_exclusion_order_fencing(run: Run) -> str:
    """2 clients under test + 2 distlock processes x rounds on one lock: never two inside,
    every handoff to the first live waiter (across both kinds), fencing strictly rising."""
    name = run.name("counter")
    keys = run.keys_for(name)
    workers = [(start(), who) for _ in range(2) for start, who in kinds(run)]
    guard = threading.Lock()
    grants: list[Grant] = []
    state = {"inside": 0, "overlaps": 0}
    seq = itertools.count(1)

    def work(worker: LineClient, who: str) -> None:
        data = run.data()
        for _ in range(run.rounds):
            reply = worker.acquire(name, 10_000, None, purpose=f"{who} counter")
            if not reply["acquired"]:
                raise CheckFailed(f"{worker.label}: acquire with wait_ms null answered false")
            with guard:
                state["overlaps"] += state["inside"]
                state["inside"] += 1
                grant = Grant(next(seq), int(reply["fencing"]), reply["token"], who)
                grants.append(grant)
            grant.head = first_live_waiter(data, keys.waiters, keys.live)
            with guard:
                state["inside"] -= 1
            if not worker.release(name, reply["token"]):
                raise CheckFailed(f"{worker.label}: release of its own hold answered false")

    waits = [in_thread(lambda w=w, k=k: work(w, k)) for w, k in workers]
    for wait in waits:
        wait()
    if state["overlaps"]:
        raise CheckFailed(f"{state['overlaps']} times two holders were inside at once")
    grants.sort(key=lambda grant: grant.seq)
    rising = all(a.fence < b.fence for a, b in itertools.pairwise(grants))
    if not rising:
        raise CheckFailed("fencing tokens did not strictly rise from holder to holder")
    handoffs = [(a, b) for a, b in itertools.pairwise(grants) if a.head is not None]
    wrong = [(a, b) for a, b in handoffs if b.token != a.head]
    if wrong:
        a, b = wrong[0]
        raise CheckFailed(
            f"{len(wrong)} of {len(handoffs)} handoffs skipped the first waiter (e.g. grant "
            f"{b.seq} went to {b.who} {b.token}, the queue's head was {a.head})"
        )
    crossed = {(a.who, b.who) for a, b in handoffs if a.who != b.who}
    if crossed != {("client", "python"), ("python", "client")}:
        raise CheckFailed(f"no handoff between the two kinds both ways (only {crossed})")
    return (
        f"{len(grants)} grants by 4 processes, 0 overlaps, {len(handoffs)} handoffs all to "
        "the queue's head, both ways across clients, fencing strictly rising"
    )


def _same_holder(seen: dict[str, Any] | None, expected: dict[str, Any], who: str) -> None:
    if seen is None:
        raise CheckFailed(f"{who} sees no holder")
    differ = {
        key: (seen.get(key), value) for key, value in expected.items() if seen.get(key) != value
    }
    if differ:
        raise CheckFailed(f"{who} sees a holder whose fields differ (seen, expected): {differ}")


def check_metadata(run: Run) -> str:
    """What a client under test writes, distlock reads (backend.info), and the reverse; a
    purpose over 200 characters is cut to its first 200."""
    client, python = run.client(), run.distlock()
    name, other, long_name = run.name("meta"), run.name("meta-py"), run.name("meta-long")
    mine = client.acquire(name, 30_000, 0, purpose=PURPOSE)
    expected = {
        "token": mine["token"],
        "fencing": mine["fencing"],
        "host": socket.gethostname(),
        "pid": client.pid,
        "purpose": PURPOSE,
        "shared": False,
    }
    _same_holder(python.call("holder", name=name)["holder"], expected, "distlock")
    _same_holder(client.call("holder", name=name)["holder"], expected, "the client")
    theirs = python.acquire(other, 30_000, 0, purpose="python holds it")
    seen = client.call("holder", name=other)["holder"]
    _same_holder(seen, {"token": theirs["token"], "fencing": theirs["fencing"]}, "the client")
    _same_holder(seen, {"pid": python.pid, "purpose": "python holds it"}, "the client")
    long_purpose = "é" * 150 + "x" * 150
    held = client.acquire(long_name, 30_000, 0, purpose=long_purpose)
    seen = python.call("holder", name=long_name)["holder"]
    _same_holder(seen, {"purpose": long_purpose[:200]}, "distlock")
    for worker, lock, token in (
        (client, name, mine),
        (python, other, theirs),
        (client, long_name, held),
    ):
        worker.release(lock, token["token"])
    return "host, pid, purpose, token and fencing token read the same by both, both ways"


def check_client_gives_up(run: Run) -> str:
    """A client whose wait runs out answers false in time and leaves the queue."""
    client, python = run.client(), run.distlock()
    name = run.name("give-up")
    held = python.acquire(name, 30_000, 0)
    started = time.monotonic()
    reply = client.acquire(name, 10_000, 300)
    took = time.monotonic() - started
    if reply["acquired"]:
        raise CheckFailed("acquired a lock another process held")
    if not 0.29 <= took <= 1.0:
        raise CheckFailed(f"acquire with wait_ms 300 answered after {took:.3f} s")
    queued = run.data().zcard(run.keys_for(name).waiters)
    python.release(name, held["token"])
    if queued:
        raise CheckFailed(f"{queued} token(s) left in the queue after the wait ran out")
    stale = client.acquire(name, 200, 0)
    time.sleep(0.4)
    extended = client.call("extend", name=name, token=stale["token"], ttl_ms=1000, shared=False)
    if extended["extended"] or client.release(name, stale["token"]):
        raise CheckFailed("extend or release of a hold whose lease ended answered true")
    return f"gave up after {took:.3f} s (wait 300 ms), out of the queue; a lapsed hold is not held"


def _takeover(run: Run, crashing: LineClient, successor: LineClient) -> str:
    name = run.name("crash")
    sent = time.monotonic()
    held = crashing.acquire(name, 1000, 0)
    if not held["acquired"]:
        raise CheckFailed("the lock was not free")
    crashing.kill()
    taken = successor.acquire(name, 5000, 5000)
    after = time.monotonic() - sent
    if not taken["acquired"]:
        raise CheckFailed("not taken over within 5 s of a 1 s lease")
    if after < 0.99:
        raise CheckFailed(f"taken {after:.3f} s after a 1 s lease began: before it ended")
    if after > 2.0:
        raise CheckFailed(f"taken {after:.3f} s after a 1 s lease began (more than 1 s late)")
    if int(taken["fencing"]) <= int(held["fencing"]):
        raise CheckFailed("the successor's fencing token is not greater")
    successor.release(name, taken["token"])
    return f"taken {after:.3f} s after the 1 s lease began, fencing token greater"


def check_client_holder_killed(run: Run) -> str:
    """A client under test SIGKILLed while holding: distlock takes the lock when its lease ends."""
    return _takeover(run, run.client(), run.distlock())


def check_python_holder_killed(run: Run) -> str:
    """A distlock process SIGKILLed while holding: the client takes the lock when its lease
    ends (its blocking wait ends with the holder's lease, not later)."""
    return _takeover(run, run.distlock(), run.client())


def check_exclusive_respects_shared(run: Run) -> str:
    """distlock readers hold: the client's exclusive acquire waits, and gets the lock once
    they release; its holder() says shared."""
    client, readers = run.client(), [run.distlock(), run.distlock()]
    name = run.name("readers")
    holds = [reader.acquire(name, 30_000, 0, shared=True) for reader in readers]
    if not all(hold["acquired"] for hold in holds):
        raise CheckFailed("two distlock readers could not hold together")
    if client.acquire(name, 10_000, 0)["acquired"]:
        raise CheckFailed("the client took the lock exclusively while readers held it")
    seen = client.call("holder", name=name)["holder"]
    if not seen or seen.get("shared") is not True:
        raise CheckFailed(f"holder() while readers hold answered {seen!r}, not shared")
    waiting = in_thread(lambda: client.acquire(name, 10_000, 5000))
    time.sleep(0.3)
    released = time.monotonic()
    for reader, hold in zip(readers, holds, strict=True):
        reader.release(name, hold["token"], shared=True)
    got = waiting()
    took = time.monotonic() - released
    if not got["acquired"] or took > 1.0:
        raise CheckFailed(f"the queued writer got {got['acquired']} {took:.3f} s after release")
    client.release(name, got["token"])
    return f"excluded while readers held, granted {took:.3f} s after they released"


def check_shared_locks(run: Run) -> str:
    """Readers of both kinds together; writers excluded; a queued writer keeps later readers
    out (first come, first served); readers queued behind a writer let in together."""
    if "shared" not in run.features:
        raise Skipped("the client does not claim 'shared'")
    client, holder, python, writer = run.client(), run.client(), run.distlock(), run.distlock()
    name = run.name("shared")
    a = client.acquire(name, 30_000, 0, shared=True)
    b = python.acquire(name, 30_000, 0, shared=True)
    if not (a["acquired"] and b["acquired"]):
        raise CheckFailed("a client reader and a distlock reader could not hold together")
    if writer.acquire(name, 10_000, 0)["acquired"] or holder.acquire(name, 10_000, 0)["acquired"]:
        raise CheckFailed("a writer took the lock while readers held it")
    queued_writer = in_thread(lambda: writer.acquire(name, 10_000, 5000))
    time.sleep(0.3)
    late_reader = in_thread(lambda: holder.acquire(name, 10_000, 5000, shared=True))
    time.sleep(0.3)
    client.release(name, a["token"], shared=True)
    python.release(name, b["token"], shared=True)
    w = queued_writer()
    time.sleep(0.3)
    writer_released = time.monotonic()
    writer.release(name, w["token"])
    r = late_reader()
    if not (w["acquired"] and r["acquired"]):
        raise CheckFailed("the queued writer or the later reader was not granted")
    if time.monotonic() < writer_released or int(r["fencing"]) <= int(w["fencing"]):
        raise CheckFailed("the later reader got in before the queued writer")
    holder.release(name, r["token"], shared=True)
    # an exclusive holder; two readers (one of each kind) queue; one release lets both in
    x = holder.acquire(name, 30_000, 0)
    readers = [
        in_thread(lambda c=c: c.acquire(name, 10_000, 5000, shared=True)) for c in (client, python)
    ]
    time.sleep(0.3)
    holder.release(name, x["token"])
    r1, r2 = readers[0](), readers[1]()
    if not (r1["acquired"] and r2["acquired"]):
        raise CheckFailed("readers queued behind a writer were not both let in")
    if writer.acquire(name, 10_000, 0)["acquired"]:
        raise CheckFailed("a writer took the lock while the readers let in held it")
    client.release(name, r1["token"], shared=True)
    python.release(name, r2["token"], shared=True)
    return "readers together, writers excluded, queued writer first, readers let in together"


CHECKS: list[tuple[str, Callable[[Run], str]]] = [
    ("hello", check_hello),
    ("mutual exclusion, queue order, fencing", check_exclusion_order_fencing),
    ("holder metadata", check_metadata),
    ("giving up a wait; a lapsed lease", check_client_gives_up),
    ("SIGKILLed client holder taken over", check_client_holder_killed),
    ("SIGKILLed distlock holder taken over by the client", check_python_holder_killed),
    ("exclusive acquire respects shared holders", check_exclusive_respects_shared),
    ("shared locks", check_shared_locks),
]


def run_checks(run: Run, say: Callable[[str], None]) -> bool:
    """Run every check; print one line each; return True if none failed."""
    failed = 0
    for title, check in CHECKS:
        started = time.monotonic()
        try:
            try:
                detail = check(run)
            finally:
                run.close()
        except Skipped as skip:
            say(f"SKIP  {title}: {skip}")
            continue
        except (CheckFailed, ClientFailed) as failure:
            failed += 1
            say(f"FAIL  {title}: {failure}")
            if title == "hello":
                break
            continue
        say(f"PASS  {title}: {detail} ({time.monotonic() - started:.1f} s)")
    say(f"{'FAILED' if failed else 'PASSED'}: {failed} of {len(CHECKS)} checks failed")
    return not failed


@contextmanager
def servers(cluster: bool) -> Iterator[str]:
    """Start a real server (or a 3-master Cluster) on free ports; yield a node's URL."""
    from devkit.redis_server import RedisCluster, RedisServer

    started: Any = RedisCluster(masters=3) if cluster else RedisServer()
    with started:
        yield started.urls[0] if cluster else started.url
