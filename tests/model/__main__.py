"""Run the checker by hand: ``python -m tests.model [--depth N] [--config NAME ...]
[--mutants] [--old-rule]``. Without options: every configuration at its CI depth, then the
mutants; ``--depth`` goes deeper (or shallower) for every configuration."""

from __future__ import annotations

import argparse
import sys

from .config import CONFIGS, no_discard, rate
from .explorer import Explorer
from .mutants import MUTANTS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.model", description=__doc__)
    parser.add_argument(
        "--depth", type=int, help="depth for every configuration (default: its CI depth)"
    )
    parser.add_argument("--config", action="append", choices=sorted(CONFIGS), help="run only these")
    parser.add_argument("--mutants", action="store_true", help="only the mutants")
    parser.add_argument(
        "--old-rule",
        action="store_true",
        help="the client rules before issue 44 (the drift rule, a cancel without discard)",
    )
    options = parser.parse_args(argv)
    failed = False
    if options.old_rule:
        for config in (rate("old"), no_discard()):
            result = Explorer(config).run(options.depth or config.depth)
            print(result)
            print(result.finding or "NOT caught")
            failed |= result.finding is None  # each must be caught
        return 1 if failed else 0
    if not options.mutants:
        for name in options.config or sorted(CONFIGS):
            config = CONFIGS[name]
            result = Explorer(config).run(options.depth or config.depth)
            print(result, flush=True)
            if result.finding:
                print(result.finding)
                failed = True
    if options.mutants or not options.config:
        for mutant in MUTANTS:
            config = CONFIGS[mutant.config]
            result = Explorer(config, mutant.edit).run(options.depth or config.depth)
            caught = result.finding is not None
            failed |= not caught
            what = f"at step {len(result.finding.steps)}" if result.finding else "NOT CAUGHT"
            verdict = "caught" if caught else "MISSED"
            print(f"mutant {verdict}: {mutant.name} ({mutant.config}, {what})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
