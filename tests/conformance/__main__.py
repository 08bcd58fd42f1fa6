"""``python -m tests.conformance [--cluster] [--rounds N] [--prefix P] -- CLIENT_COMMAND ...``

Start a real server (or a Cluster), then the client under test (CLIENT_COMMAND, speaking the
line protocol of tests/conformance/README.md) and distlock's own Python processes beside it,
and run the checks; one PASS / FAIL / SKIP line per check. Exit status 0 when none failed.
"""

from __future__ import annotations

import argparse
import sys

from .runner import Run, run_checks, servers

# Fewer acquisitions per process can let the processes of one kind take all theirs before the
# other kind's first call (seen on a Cluster at 3), and the handoff check needs both ways.
MIN_ROUNDS = 10


def rounds(text: str) -> int:
    value = int(text)
    if value < MIN_ROUNDS:
        raise argparse.ArgumentTypeError(
            f"at least {MIN_ROUNDS}: with fewer, the two kinds of process may never hand the "
            "lock to each other, and the queue-order check needs handoffs both ways"
        )
    return value


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance", description=__doc__)
    parser.add_argument("--cluster", action="store_true", help="a 3-master Redis Cluster")
    parser.add_argument(
        "--rounds",
        type=rounds,
        default=100,
        help=f"acquisitions per process, each of the 4 (default 100, at least {MIN_ROUNDS})",
    )
    parser.add_argument("--prefix", default="distlock", help="the KEY_PREFIX to share")
    parser.add_argument("command", nargs="+", help="the client's command line (after --)")
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        print(f"[conformance] {line}", flush=True)

    with servers(args.cluster) as url:
        say(f"server {url}{' (Cluster)' if args.cluster else ''}; client: {' '.join(args.command)}")
        run = Run(args.command, sys.executable, url, args.cluster, args.prefix, args.rounds)
        try:
            passed = run_checks(run, say)
        finally:
            run.close()
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
