"""What one uncontended acquire+release costs the client, in CPU instructions (callgrind):
a count that does not depend on the machine's load, unlike the times of
``profile_hot_path.py`` (issue 42).

    python benchmarks/cost_pair.py [--tree PATH ...] [--case NAME ...]

Each case runs in a process of its own under ``valgrind --tool=callgrind``, on a
redis-server of its own (the server's work is another process: not counted). The process
runs 200 warm-up pairs on one name, then 300 pairs, then 1,500; a call to ``os.getppid()``
between them makes callgrind dump its counts (``--dump-before=getppid``), and a pair costs
(count of the 1,500 - count of the 300) / 1,200, which cancels what the dumps themselves
cost. Cases: ``distlock.lock()``; the backend's operations alone (``try_acquire`` and
``release``, what the Lock calls); redis-py's ``Lock``; python-redis-lock (when it can be
imported). Each but the faked one also runs on a new name every pair (``... | distinct
names``: a new lock each pair on a name never seen before, the other half of acceptance 1).
``--tree`` runs distlock from other clones too (the same run, e.g. main against a branch).
Prints JSON; writes nothing.
"""

from __future__ import annotations

import argparse
import functools
import gc
import itertools
import json
import os
import re
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
TTL = 10
WARM, SHORT, LONG = 200, 300, 1500
DISTLOCK, FAKED, BACKEND, REDIS_PY, PYTHON_REDIS_LOCK = (
    "distlock.lock()",
    "distlock.lock(), backend faked",
    "backend operations",
    "redis-py Lock",
    "python-redis-lock",
)
DISTINCT = " | distinct names"  # the case on a new name every pair
CASES = (
    DISTLOCK,
    FAKED,
    BACKEND,
    REDIS_PY,
    PYTHON_REDIS_LOCK,
    *(case + DISTINCT for case in (DISTLOCK, BACKEND, REDIS_PY, PYTHON_REDIS_LOCK)),
)
# distlock is not imported: one run is enough
ANCHORS = tuple(case for case in CASES if case.startswith((REDIS_PY, PYTHON_REDIS_LOCK)))


def make_pair(case: str, url: str, name: str) -> Callable[[], None]:
    """Return one acquire+release of ``case`` (in the process valgrind watches): on ``name``,
    or on a new name each call (``name:0``, ``name:1``, ...) for a ``... | distinct names``
    case."""
    import redis

    if case.endswith(DISTINCT):
        case = case.removesuffix(DISTINCT)
        counter = itertools.count()

        def next_name() -> str:
            return f"{name}:{next(counter)}"
    else:

        def next_name() -> str:
            return name

    if case == REDIS_PY:
        client = redis.Redis.from_url(url)

        def redis_py() -> None:
            lock = client.lock(next_name(), timeout=TTL, sleep=0.001)
            lock.acquire()
            lock.release()

        return redis_py
    if case == PYTHON_REDIS_LOCK:
        import redis_lock

        client = redis.Redis.from_url(url)

        def python_redis_lock() -> None:
            lock = redis_lock.Lock(client, next_name(), expire=TTL)
            lock.acquire()
            lock.release()

        return python_redis_lock
    from benchmarks.harness import configure_distlock

    configure_distlock(url)
    import django

    django.setup()
    import distlock
    from distlock.handler import locks

    tree = os.environ["PYTHONPATH"].split(os.pathsep)[0]
    assert distlock.__file__.startswith(tree), distlock.__file__
    if case == FAKED:
        fake_replies(locks["default"])
    if case in (DISTLOCK, FAKED):

        def public_api() -> None:
            lock = distlock.lock(next_name(), ttl=TTL)
            lock.acquire()
            lock.release()

        return public_api
    from distlock.backends.operations import Request
    from distlock.info import holder_metadata

    operations = locks["default"].exclusive
    meta = holder_metadata(None)
    token = "0" * 32

    def backend() -> None:
        this = next_name()
        operations.try_acquire(Request(this, token, TTL * 1000, meta, 2000))
        operations.release(this, token, every_level=True)  # as a Lock's last release

    return backend


def fake_replies(backend: Any) -> None:
    """Answer the backend's steps without a server (the Lock's own Python alone): the
    acquire's grant ("FENCE ACQUIRED_MS"), the release's 1."""
    import time

    from distlock.backends.redis_ops import holds

    def execute(step: Any) -> Any:
        if step.script is holds.ACQUIRE:
            return b"7 %d" % int(time.time() * 1000)
        return 1

    backend.execute = execute


def child(case: str, url: str, name: str) -> None:
    pair = make_pair(case, url, name)
    for _ in range(WARM):  # connected, caches filled
        pair()
    gc.collect()
    gc.freeze()  # start-up's objects out of the collector's way
    for pairs in (SHORT, LONG):
        os.getppid()  # callgrind dumps (and resets) its counts here
        for _ in range(pairs):
            pair()
    os.getppid()


def count(url: str, run: tuple[Path, str]) -> float:
    """Return the instructions of one pair of ``case`` with distlock imported from ``tree``."""
    from devkit.callgrind import dump_totals

    tree, case = run
    path = os.pathsep.join(filter(None, (str(tree), os.environ.get("PYTHONPATH"))))
    env = {**os.environ, "PYTHONPATH": path, "PYTHONHASHSEED": "0"}
    # A name of its own: runs at the same time never contend. Plain (letters, digits, ':'),
    # as uncontended.py's are and most names are: a name with other characters also pays
    # its percent-encoding, once per name (every pair of the distinct-names cases).
    name = re.sub(r"[^A-Za-z0-9:]+", "-", f"cost:pair:{tree.name}:{case}")
    totals = dump_totals([str(HERE), "--child", case, "--url", url, "--name", name], env, tree)
    # Dumps: start-up and warm-up, the short run, the long run; the rest after it.
    return (totals[2] - totals[1]) / (LONG - SHORT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", type=Path, help="a clone to run distlock from")
    parser.add_argument("--case", action="append", choices=CASES, help="default: every one")
    parser.add_argument("--jobs", type=int, default=2, help="valgrind runs at a time")
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--name", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # the tree measured is first on PYTHONPATH, with its benchmarks
        child(args.child, args.url, args.name)
        return 0
    sys.path.insert(0, str(HERE.parent.parent))  # the clone, for its devkit
    from devkit.redis_server import RedisServer

    trees = [tree.resolve() for tree in args.tree or [HERE.parent.parent]]
    cases = args.case or list(CASES)
    runs = [(trees[0], case) for case in cases if case in ANCHORS]
    runs += [(tree, case) for tree in trees for case in cases if case not in ANCHORS]
    server = RedisServer().start()
    try:
        with ThreadPoolExecutor(args.jobs) as pool:  # counts do not depend on the load
            counted = pool.map(functools.partial(count, server.url), runs)
            counts = dict(zip(runs, counted, strict=True))
    finally:
        server.stop()
    results: dict[str, dict[str, int]] = {}
    for (tree, case), instructions in counts.items():
        results.setdefault("anchors" if case in ANCHORS else str(tree), {})[case] = round(
            instructions
        )
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
