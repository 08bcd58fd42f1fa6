"""The checker's figures for docs/RELIABILITY.md (tests/faults/reliability.py writes them):
each configuration at its CI depth, each mutant, and the drift rule before issue 44."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

from .config import CONFIGS, Config, no_discard, rate
from .explorer import Explorer
from .mutants import MUTANTS


def measure() -> dict[str, Any]:
    """Run the checker as CI does and return what it found, as plain values."""
    began = time.perf_counter()
    configs = []
    for name in sorted(CONFIGS):
        result = Explorer(CONFIGS[name]).run(CONFIGS[name].depth)
        configs.append(
            {
                "config": name,
                "clients": len(CONFIGS[name].clients),
                "depth": result.depth,
                "states": result.states,
                "transitions": result.transitions,
                "seconds": round(result.seconds, 1),
                "verdict": "PASS" if result.finding is None else "FAIL",
            }
        )
    mutants = []
    for mutant in MUTANTS:
        result = Explorer(CONFIGS[mutant.config], mutant.edit).run(CONFIGS[mutant.config].depth)
        found = result.finding
        mutants.append(
            {"mutant": mutant.name, "file": mutant.edit.file, "caught": found is not None}
        )
    old_rules = [_found(rate("old")), _found(no_discard())]
    seconds = round(time.perf_counter() - began)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    return {
        "configs": configs,
        "mutants": mutants,
        "old_rules": old_rules,
        "total_seconds": seconds,
        "when": when,
        "load": round(os.getloadavg()[0], 1),
    }


def _found(config: Config) -> dict[str, Any]:
    finding = Explorer(config).run(config.depth).finding
    if finding is None:
        return {"config": config.name, "steps": 0, "problem": None}
    return {"config": config.name, "steps": len(finding.steps), "problem": finding.problems[0]}


def section(figures: dict[str, Any]) -> list[str]:
    """The markdown section of ``figures`` (measure()'s)."""
    lines = [
        "## The protocol model checker",
        "",
        "`tests/model/` (issue 44): docs/protocol.md's client rules run against the real Lua "
        "scripts (expanded as `scripts.load` expands them) in fakeredis with Lua on a virtual "
        "clock; every interleaving of the clients' steps (acquire with a wait, the BLPOP "
        "wake-up, re-run, release, extend, give back, the error path, crash, lost reply, "
        "cancel, try once) and of the clock's ticks (a lease, reservation or registration "
        "ending) explored depth-first to the depth below, states hashed; client clocks run 1% "
        "slow or fast. Exclusive clients are fair or non-fair (`nonfair`: two non-fair "
        "clients; `mixed3`: both modes on one name; a non-fair waiter sends its BLPOP alone, "
        "then its acquire, as docs/protocol.md's section on non-fair locks says). Invariants at "
        "every state: a client that believes it holds holds by the server's data (mutual "
        "exclusion and the readers-writer rule as clients see them), the semaphore's limit, "
        "no lock held for a token its client gave up on, a TTL on every key, nothing left but "
        "the bucket's keys once every client is done. Across every step: rising fencing "
        "tokens, a reservation taken by no one else, registered waiters' places kept, a "
        "wake-up sent to the first registered waiter, no live waiter left asleep on a free "
        "lock with nobody woken, a non-fair release that reserves nothing and a non-fair "
        "acquirer that takes a free lock; FIFO among registered waiters for every take by a "
        "fair token and every reservation (whole FIFO in the fair-only configurations: only "
        "a non-fair token may overtake). CI runs these "
        "(`pytest tests/model`); deeper by hand: `python -m tests.model --depth N`.",
        "",
        f"Run of {figures['when']} UTC, one process on a shared two-core machine (load "
        f"average {figures['load']} as it ended): all of it (the configurations, the mutants "
        f"and the rules below) took {figures['total_seconds']} s.",
        "",
        "| Configuration | Clients | Depth | States | Transitions | Seconds | Verdict |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {c['config']} | {c['clients']} | {c['depth']} | {c['states']:,} | "
            f"{c['transitions']:,} | {c['seconds']} | {c['verdict']} |"
            for c in figures["configs"]
        ),
        "",
        "| Mutant of the scripts | File | Caught |",
        "|---|---|---|",
        *(
            f"| {m['mutant']} | `{m['file']}` | {'yes' if m['caught'] else 'NO'} |"
            for m in figures["mutants"]
        ),
        "",
    ]
    lines += [
        "The client rules before issue 44, each caught (a test in `tests/model/test_model.py`):",
        "",
    ]
    for old in figures["old_rules"]:
        found = f"{old['steps']} steps: {old['problem']}" if old["problem"] else "NOT caught"
        lines.append(f"- {old['config']}: {found}.")
    return lines
