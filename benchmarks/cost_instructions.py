"""What an ``atomic()`` block with no lock costs, in CPU instructions (valgrind's callgrind):
a count that does not depend on the machine's load, unlike the times of
``bench_transactions.py --cost``.

    python benchmarks/cost_instructions.py [--blocks N] [--tree PATH ...]

Each mode runs in a process of its own under ``valgrind --tool=callgrind``: plain Django
(distlock never imported), distlock (installed, nothing tied), and distlock while another
thread's release waits for its COMMIT. The process runs ``N`` outermost blocks, then ``N``
outermost blocks with ten nested ``savepoint=False`` ones, then ``N`` running one query; a
call to ``os.getppid()`` between the cases makes callgrind dump its counts
(``--dump-before=getppid``), so each case is counted apart from Django's start-up. On an
SQLite file and on a PostgreSQL server of its own (the server's own work is not counted:
it is another process). ``--tree`` runs distlock from other clones too (the same run, e.g.
main against a branch). Prints JSON; writes nothing.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
CASES = ("outermost", "nested", "one query")
MODES = ("plain", "distlock", "distlock, a release waiting in another thread")


def child(mode: str, blocks: int) -> None:
    """Run the blocks (in the process valgrind watches): DATABASES from the environment."""
    import threading

    import django
    from django.conf import settings

    databases = json.loads(os.environ["COST_DATABASES"])
    settings.configure(
        DATABASES=databases,
        INSTALLED_APPS=[] if mode == MODES[0] else ["distlock"],
        DISTLOCK={"default": {"BACKEND": "distlock.backends.locmem.LocMemBackend"}},
        USE_TZ=True,
    )
    django.setup()
    from django.db import connections, transaction

    if mode != MODES[0]:
        import distlock

        assert "distlock.transactions" in sys.modules
        assert distlock.__file__.startswith(os.environ["PYTHONPATH"]), distlock.__file__
    else:
        assert not any(name.startswith("distlock") for name in sys.modules)

    # The cases as the timed harness runs them; this script's folder is first on sys.path.
    from transactions_cost import atomic_blocks

    outermost, nested, one_query = atomic_blocks()
    waiting, done = threading.Event(), threading.Event()

    def hold() -> None:  # another request's
        with transaction.atomic():
            with distlock.lock("cost:waiting", ttl=600):
                pass  # released inside the transaction: the release waits for its COMMIT
            waiting.set()
            done.wait()
        connections.close_all()

    other = None
    if mode == MODES[2]:
        other = threading.Thread(target=hold)
        other.start()
        waiting.wait()
        assert distlock.transactions._tied  # the wrappers' slow path is armed
    for block in (outermost, nested, one_query):  # warm: connected, caches filled
        for _ in range(20):
            block()
    # Start-up's objects out of the collector's way: a full collection landing in one
    # mode's count and not in another's would outweigh what is measured.
    gc.collect()
    gc.freeze()
    for block in (outermost, nested, one_query):
        os.getppid()  # callgrind dumps (and resets) its counts here
        for _ in range(blocks):
            block()
    os.getppid()
    if other is not None:
        done.set()
        other.join()
    connections.close_all()


def count(tree: Path, mode: str, blocks: int, databases: dict[str, Any]) -> list[int]:
    """Return the instructions of each case (CASES) in one callgrind run of ``mode`` with
    distlock imported from ``tree``."""
    from devkit.callgrind import dump_totals

    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "PYTHONHASHSEED": "0",
        "COST_DATABASES": json.dumps(databases),
    }
    totals = dump_totals([str(HERE), "--child", mode, "--blocks", str(blocks)], env)
    # Dumps: start-up (before the first case), then one per case; the rest after the last.
    return totals[1 : 1 + len(CASES)]


def _count(blocks: int, databases: dict[str, Any], run: tuple[Path, str]) -> list[int]:
    return count(*run, blocks, databases)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=2000, help="blocks of each case")
    parser.add_argument("--tree", action="append", type=Path, help="a clone to run distlock from")
    parser.add_argument("--jobs", type=int, default=2, help="valgrind runs at a time")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.blocks)
        return 0
    sys.path.insert(0, str(HERE.parent.parent))  # the clone, for its devkit
    from devkit.databases import PostgresServer

    trees = args.tree or [HERE.parent.parent]
    results: dict[str, Any] = {}
    with PostgresServer() as postgres, tempfile.TemporaryDirectory() as directory:
        for vendor, database in (
            ("sqlite", {"ENGINE": "django.db.backends.sqlite3", "NAME": f"{directory}/c.db"}),
            ("postgresql", postgres.django_settings()),
        ):
            databases = {"default": database}
            runs = [(trees[0], MODES[0])] + [(tree, mode) for tree in trees for mode in MODES[1:]]
            with ThreadPoolExecutor(args.jobs) as pool:  # counts do not depend on the load
                counts = dict(
                    zip(
                        runs,
                        pool.map(functools.partial(_count, args.blocks, databases), runs),
                        strict=True,
                    )
                )
            plain = counts[trees[0], MODES[0]]
            for tree in trees:
                counted = {mode: counts[tree, mode] for mode in MODES[1:]}
                results.setdefault(str(tree), {})[vendor] = {
                    case: {
                        "plain_instructions": round(plain[index] / args.blocks),
                        **{
                            f"{mode}: instructions": round(counted[mode][index] / args.blocks)
                            for mode in MODES[1:]
                        },
                        **{
                            f"{mode}: ratio": round(counted[mode][index] / plain[index], 4)
                            for mode in MODES[1:]
                        },
                    }
                    for index, case in enumerate(CASES)
                }
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
