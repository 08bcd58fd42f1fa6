"""The soak: worker processes take one lock again and again while holders are killed
(SIGKILL) and paused (SIGSTOP, SIGCONT) at random; then the records are checked for any
overlap. ``python -m tests.faults.soak --acquisitions 100000`` runs it on its own;
tests/faults/test_soak.py runs it inside the test suite.

Each worker logs, with CLOCK_MONOTONIC timestamps (one clock for every process on Linux),
when it acquired, the lease deadline it computed (when its acquire request was sent, plus the
lease), each fenced write to the guarded resource (a SQLite table, see roles.soak_worker) and
whether it was accepted, and when it began to release. The resource keeps a ledger of the
writes it accepted, in commit order.

What "no overlapping critical sections" means here, precisely:

* Lease exclusion. A critical section is protected from when acquire() returned until it
  began to release or its lease deadline passed, whichever came first (a killed worker's:
  until the deadline). Protected intervals of different acquisitions never overlap, and their
  order is the order of the fencing tokens. (A process paused between its grant and its
  first timestamp has an empty protected interval: all of its work was outside its lease.)
* The guarded resource. The tokens of accepted writes never decrease in commit order, so the
  writes of two holders never interleave; every write finished within its lease is accepted;
  a write is only ever rejected when it finished after its lease (a paused holder's); the
  ledger and the balance agree with what the workers were told.
* Wall time. A paused holder may wake up after its lease and run on while the next holder
  works: such critical sections overlap in wall time. In every such overlap the older holder
  (by fencing token) outlived its lease, and every write it made after the newer holder's
  first accepted write was rejected.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.faults.procs import Child, Zygote

LOCK_NAME = "soak"
COUNTER = "soak:acquisitions"
# Every way the run can go wrong; each is counted by check() and must stay 0.
VIOLATIONS = (
    "protected_intervals_overlap",
    "tokens_out_of_acquisition_order",
    "resource_accepted_an_older_token",
    "balance_differs_from_ledger",
    "accepted_write_missing_from_ledger",
    "ledger_write_not_accepted",
    "write_rejected_within_its_lease",
    "wall_overlap_within_a_lease",
    "stale_write_accepted_after_newer",
)


@dataclass
class Section:
    """One acquisition, as its worker logged it."""

    token: int
    log: str  # the worker's log: one per process
    acquired: float
    deadline: float
    releasing: float | None = None
    outcome: str | None = None
    writes: list[tuple[str, float, float, bool]] = field(default_factory=list)
    ended: float | None = None  # when it really ended: releasing, else when it was killed

    @property
    def protected_until(self) -> float:
        return min(self.deadline, self.releasing) if self.releasing else self.deadline

    @property
    def protected(self) -> bool:
        """Whether the protected interval is not empty."""
        return self.acquired < self.protected_until

    @property
    def outlived_lease(self) -> bool:
        return self.ended is not None and self.ended > self.deadline


@dataclass
class Faults:
    kills: Counter[str] = field(default_factory=Counter)  # holder, waiter
    pauses: Counter[str] = field(default_factory=Counter)
    pauses_longer_than_lease: int = 0
    killed_at: dict[str, float] = field(default_factory=dict)  # by the worker's log


class Soak:
    """Run ``workers`` processes until ``acquisitions`` were counted, injecting a fault every
    ``fault_every`` seconds on average."""

    def __init__(
        self,
        zygote: Zygote,
        redis_url: str,
        directory: Path,
        *,
        workers: int = 8,
        acquisitions: int = 5000,
        lease: float = 0.4,
        fault_every: float = 1.0,
        seed: int | None = None,
    ) -> None:
        from distlock.backends.redis import RedisBackend

        self.zygote = zygote
        self.url = redis_url
        self.directory = directory
        self.workers = workers
        self.target = acquisitions
        self.lease = lease
        self.fault_every = fault_every
        self.random = random.Random(seed)
        self.db = str(directory / "resource.sqlite3")
        self.logs = directory / "logs"
        self.logs.mkdir(exist_ok=True)
        # KEY_PREFIX as in devkit.configs, which the workers use.
        self.backend = RedisBackend("soak", {"LOCATION": redis_url, "KEY_PREFIX": "test"})
        self.children: dict[int, Child] = {}
        self.log_of: dict[int, str] = {}  # pid -> its log (pids are reused after reaping)
        self.paused: dict[int, float] = {}  # pid -> when to resume
        self.faults = Faults()
        self.worker_errors: list[int] = []

    # --- running --------------------------------------------------------------------
    def spawn(self, role: str, **kwargs: Any) -> Child:
        return self.zygote.spawn(role, {"kind": "redis", "url": self.url, "db": self.db}, **kwargs)

    def start_worker(self) -> None:
        log = str(self.logs / f"{len(self.children)}.log")
        child = self.spawn(
            "soak_worker",
            name=LOCK_NAME,
            lease=self.lease,
            target=self.target,
            counter=COUNTER,
            log=log,
        )
        self.children[child.pid] = child
        self.log_of[child.pid] = log

    def counted(self) -> int:
        return int(self.backend.client.get(COUNTER) or 0)

    def run(self) -> dict[str, Any]:
        setup = self.spawn("create_resource")
        if setup.wait(timeout=60) != 0:
            raise RuntimeError(f"could not create the resource; see {self.zygote.log}")
        started = time.monotonic()
        for _ in range(self.workers):
            self.start_worker()
        next_fault = started + self.random.expovariate(1 / self.fault_every)
        try:
            while self.live_workers():
                now = time.monotonic()
                self.resume_due(now)
                self.reap_exited()
                if now >= next_fault and self.counted() < self.target:
                    self.inject_fault()
                    next_fault = now + self.random.expovariate(1 / self.fault_every)
                time.sleep(0.01)
        finally:
            for pid in list(self.paused):
                self.children[pid].resume()
            self.paused.clear()
            for child in self.children.values():
                if not child.reaped:
                    child.wait(timeout=60)
        seconds = time.monotonic() - started
        return self.verify(seconds)

    def live_workers(self) -> list[Child]:
        return [child for child in self.children.values() if not child.reaped]

    def resume_due(self, now: float) -> None:
        for pid, until in list(self.paused.items()):
            if now >= until:
                self.children[pid].resume()
                del self.paused[pid]

    def reap_exited(self) -> None:
        for child in self.live_workers():
            if child.pid not in self.paused and child.exited():
                status = child.wait()  # (inject_fault reaps the workers it kills itself)
                if status != 0:
                    self.worker_errors.append(status)
                if self.counted() < self.target:
                    self.start_worker()

    def _kill_next(self) -> bool:
        """Kill or pause? The first fault kills and the second pauses, so that a short run
        (a fast lock reaches its count in seconds) has both; after that, a coin decides."""
        if not self.faults.kills:
            return True
        if not self.faults.pauses:
            return False
        return self.random.random() < 0.5

    def inject_fault(self) -> None:
        holder = self.backend.info(LOCK_NAME)
        holder_pid = holder.pid if holder and holder.pid in self.children else None
        target = "holder" if holder_pid and self.random.random() < 0.7 else "waiter"
        if target == "holder":
            pid = holder_pid
        else:
            waiters = [c.pid for c in self.live_workers() if c.pid != holder_pid]
            if not waiters:
                return
            pid = self.random.choice(waiters)
        child = self.children[pid]
        if child.reaped:
            return
        if self._kill_next():
            child.kill()
            # Taken after the signal: the process may have run until then, not longer.
            self.faults.killed_at[self.log_of[pid]] = time.monotonic()
            self.faults.kills[target] += 1
            self.paused.pop(pid, None)
            child.resume()
            child.wait(timeout=30)
            self.start_worker()
        elif pid not in self.paused:
            duration = self.random.uniform(0.05, 3 * self.lease)
            child.pause()
            self.paused[pid] = time.monotonic() + duration
            self.faults.pauses[target] += 1
            self.faults.pauses_longer_than_lease += duration > self.lease

    # --- checking -------------------------------------------------------------------
    def sections(self) -> list[Section]:
        found: dict[int, Section] = {}
        for log in sorted(self.logs.glob("*.log")):
            for line in log.read_text().splitlines():
                kind, token_text, *rest = line.split()
                token = int(token_text)
                if kind == "A":
                    found[token] = Section(token, str(log), float(rest[0]), float(rest[1]))
                    continue
                section = found[token]
                if kind == "W":
                    section.writes.append((rest[0], float(rest[1]), float(rest[2]), rest[3] == "1"))
                elif kind == "R":
                    section.releasing = section.ended = float(rest[0])
                elif kind == "E":
                    section.outcome = rest[0]
        return sorted(found.values(), key=lambda s: s.acquired)

    def verify(self, seconds: float) -> dict[str, Any]:
        sections = self.sections()
        for section in sections:
            if section.ended is None:  # killed inside: it ended when the signal landed
                section.ended = self.faults.killed_at.get(section.log, section.deadline)
        with sqlite3.connect(self.db) as db:
            ledger = db.execute(
                "SELECT token, kind FROM fencingapp_fencedwrite ORDER BY id"
            ).fetchall()
            balance, fence = db.execute(
                "SELECT balance, fence FROM fencingapp_account WHERE id = 1"
            ).fetchone()
        violations = check(sections, ledger, balance)
        writes = [write for section in sections for write in section.writes]
        overlaps = wall_time_overlaps(sections)
        return {
            "workers": self.workers,
            "target": self.target,
            "lease_seconds": self.lease,
            "acquisitions": len(sections),
            "released": sum(s.outcome == "released" for s in sections),
            "release_refused_after_lease": sum(
                s.outcome not in (None, "released") for s in sections
            ),
            "killed_inside": sum(s.releasing is None for s in sections),
            "kills": dict(self.faults.kills),
            "pauses": dict(self.faults.pauses),
            "pauses_longer_than_lease": self.faults.pauses_longer_than_lease,
            "leases_outlived": sum(s.outlived_lease for s in sections),
            "paused_before_first_timestamp": sum(not s.protected for s in sections),
            "writes_accepted": sum(w[3] for w in writes),
            "writes_rejected": sum(not w[3] for w in writes),
            "ledger_writes": len(ledger),
            "balance": balance,
            "last_fence": fence,
            "wall_time_overlaps": len(overlaps),
            "violations": violations,
            "worker_errors": self.worker_errors,
            "seconds": round(seconds, 1),
            "acquisitions_per_second": round(len(sections) / seconds, 1),
        }


def check(sections: list[Section], ledger: list[tuple[int, str]], balance: int) -> dict[str, int]:
    """Count every violation of the properties in the module docstring (all must be 0)."""
    violations: Counter[str] = Counter()
    # Lease exclusion, and the tokens in the order of acquisition.
    latest_end, latest_token = float("-inf"), 0
    for section in filter(lambda s: s.protected, sections):  # sorted by acquire() returning
        violations["protected_intervals_overlap"] += section.acquired < latest_end
        violations["tokens_out_of_acquisition_order"] += section.token <= latest_token
        latest_end = max(latest_end, section.protected_until)
        latest_token = section.token
    # The resource: commit order never goes back to an older token.
    tokens = [token for token, _ in ledger]
    violations["resource_accepted_an_older_token"] = sum(
        later < earlier for earlier, later in itertools.pairwise(tokens)
    )
    violations["balance_differs_from_ledger"] = int(balance != len(ledger))
    accepted = Counter((s.token, w[0]) for s in sections for w in s.writes if w[3])
    in_ledger = Counter(ledger)
    violations["accepted_write_missing_from_ledger"] = sum((accepted - in_ledger).values())
    logged = {(s.token, w[0]) for s in sections for w in s.writes}
    known = {s.token for s in sections}
    violations["ledger_write_not_accepted"] = sum(
        1
        for entry in ledger
        if (entry in logged and entry not in accepted) or entry[0] not in known
    )
    # Fencing rejected exactly the late writes.
    for section in sections:
        for _, _, finished, ok in section.writes:
            if not ok and finished <= section.deadline:
                violations["write_rejected_within_its_lease"] += 1
    # Wall time: overlaps only with a holder that outlived its lease, fenced out.
    first_accepted = {
        s.token: min((w[2] for w in s.writes if w[3]), default=None) for s in sections
    }
    for older, newer in wall_time_overlaps(sections):
        if not older.outlived_lease:
            violations["wall_overlap_within_a_lease"] += 1
        cutoff = first_accepted[newer.token]
        if cutoff is not None:
            violations["stale_write_accepted_after_newer"] += sum(
                1 for _, started, _, ok in older.writes if ok and started > cutoff
            )
    return {name: violations[name] for name in VIOLATIONS}


def wall_time_overlaps(sections: list[Section]) -> list[tuple[Section, Section]]:
    """Pairs (older, newer) of critical sections that overlap in wall time, older and newer
    by fencing token: the grant order. (Not by the logged start: a holder paused between its
    grant and its first timestamp logs a start later than the next holder's.)"""
    pairs = []
    active: list[Section] = []
    for section in sections:  # sorted by start
        active = [s for s in active if (s.ended or s.deadline) > section.acquired]
        for other in active:
            pairs.append((other, section) if other.token < section.token else (section, other))
        active.append(section)
    return pairs


# --- command line ---------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--acquisitions", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--lease", type=float, default=0.4)
    parser.add_argument(
        "--fault-every", type=float, default=1.0, help="mean seconds between faults"
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    arguments = parser.parse_args(argv)
    from devkit.redis_server import RedisServer

    with (
        tempfile.TemporaryDirectory(prefix="distlock-soak-", dir=_fast_tmp()) as directory,
        RedisServer() as server,
    ):
        zygote = Zygote(Path(directory) / "zygote.log").start()
        try:
            figures = Soak(
                zygote,
                server.url,
                Path(directory),
                workers=arguments.workers,
                acquisitions=arguments.acquisitions,
                lease=arguments.lease,
                fault_every=arguments.fault_every,
                seed=arguments.seed,
            ).run()
        finally:
            zygote.close()
    print(json.dumps(figures, indent=2))
    if arguments.json:
        arguments.json.write_text(json.dumps(figures, indent=2))
    failed = any(figures["violations"].values()) or figures["worker_errors"]
    return 1 if failed else 0


def _fast_tmp() -> str | None:
    """/dev/shm when there is one: the resource's commits then cost no disk flushes."""
    return "/dev/shm" if Path("/dev/shm").is_dir() else None


if __name__ == "__main__":
    sys.exit(main())
