"""What one contended acquisition costs the waiting client, in CPU instructions (callgrind),
and the server, in commands: counts that do not depend on the machine's load (issue 42,
acceptance 3).

    python benchmarks/cost_contended.py [--tree PATH ...] [--case NAME ...]

Each case runs two processes on a redis-server of their own: the measured one under
``valgrind --tool=callgrind``, and a holder, not under valgrind, that takes and releases the
same lock with the same library. They take turns through two named pipes, so that every
acquisition of the measured process waits and is handed the lock:

    measured: read "held" <- | acquire() (tries, fails, blocks) | write "acquired" | release()
    holder:   acquire() | write "held" | until a client blocks (CLIENT LIST) | release()
              | read "acquired" | (its next acquire waits for the measured release)

The measured process runs 30 warm-up cycles, then 50, then 250; a call to ``os.getppid()``
between them makes callgrind dump its counts (``--dump-before=getppid``), and an acquisition
(acquire() and release() of the measured process, a contended acquire: one failed try, one
wait, the grant) costs (count of the 250 - count of the 50) / 200. The pipes cost the same
two small system calls for every library. Server commands per measured cycle (both
processes' commands, both acquisitions: the holder's is contended too) come from INFO
commandstats over the same window, the holder's CLIENT LIST polls left out. Cases: distlock
(fair, the default), distlock ``fair=False``, python-redis-lock (when it can be imported),
and both distlock modes with the backend faked (its steps answered as a contended
acquisition's are, with no server and no holder: distlock's own Python alone).
``--tree`` runs distlock from other clones too (the same run). Prints JSON; writes nothing.
``--plain`` runs the measured process without valgrind and reports its user and system
CPU time and context switches per acquisition instead (times: the load moves them; run one
case at a time, ``--jobs 1``). With ``COST_CONTENDED_PROFILE=FILE`` in the environment, and
``--plain``, the measured process also writes a cProfile of the measured cycles there.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import resource
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
TTL = 10
WARM, SHORT, LONG = 30, 50, 250
FAIR, NON_FAIR, PYTHON_REDIS_LOCK = "distlock", "distlock fair=False", "python-redis-lock"
FAIR_FAKED, NON_FAIR_FAKED = "distlock, backend faked", "distlock fair=False, backend faked"
CASES = (FAIR, NON_FAIR, PYTHON_REDIS_LOCK, FAIR_FAKED, NON_FAIR_FAKED)
FAKED = {FAIR_FAKED: FAIR, NON_FAIR_FAKED: NON_FAIR}
ANCHORS = (PYTHON_REDIS_LOCK,)  # distlock is not imported: one run is enough
POLL = 0.0005  # s between the holder's looks for a blocked client


def make_lock(case: str, url: str) -> Callable[[str], Any]:
    """Return ``make(name)`` building an unheld lock of ``case``."""
    import redis

    if case == PYTHON_REDIS_LOCK:
        import redis_lock

        client = redis.Redis.from_url(url)
        return lambda name: redis_lock.Lock(client, name, expire=TTL)
    from benchmarks.harness import configure_distlock

    configure_distlock(url)
    import django

    django.setup()
    import distlock

    tree = os.environ["PYTHONPATH"].split(os.pathsep)[0]
    assert distlock.__file__.startswith(tree), distlock.__file__
    if case in FAKED:
        from distlock.handler import locks

        fake_replies(locks["default"])
    fair = None if FAKED.get(case, case) == FAIR else False
    return lambda name: distlock.lock(name, ttl=TTL, fair=fair)


def fake_replies(backend: Any) -> None:
    """Answer the backend's steps without a server, as a contended acquisition's are
    answered (distlock's own Python alone): a try queued, next in line; the turn's grant
    (fair: the acquire pipelined behind the BLPOP; non-fair: the acquire after it); the
    release's 1."""
    from distlock.backends.redis_ops import holds
    from distlock.backends.redis_ops.steps import Pop, PopThenEval

    woken = False

    def execute(step: Any) -> Any:
        nonlocal woken
        now_ms = int(time.time() * 1000)
        if type(step) is PopThenEval:
            return [[step.wake, b"1"], b"7 %d" % now_ms]
        if type(step) is Pop:
            woken = True
            return "1"
        if step.script is holds.ACQUIRE:
            if woken:
                woken = False
                return b"7 %d" % now_ms
            return [0, TTL * 1000, 1, now_ms]
        return 1

    backend.execute = execute


def measured(case: str, url: str, name: str, pipes: Path) -> None:
    import redis

    make = make_lock(case, url)
    if case not in FAKED:
        # The holder opens its ends in the same order: neither open blocks for good.
        held = os.open(pipes / "held", os.O_RDONLY)
        acquired = os.open(pipes / "acquired", os.O_WRONLY)

    def cycle() -> None:
        os.read(held, 1)  # the holder holds the lock: this acquire waits
        lock = make(name)
        lock.acquire()
        os.write(acquired, b"a")
        lock.release()

    if case in FAKED:  # no holder: the pipes are not opened

        def cycle() -> None:
            lock = make(name)
            lock.acquire()
            lock.release()

    for _ in range(WARM):  # connected, caches filled
        cycle()
    gc.collect()
    gc.freeze()  # start-up's objects out of the collector's way
    stats = redis.Redis.from_url(url)
    before = commands(stats)  # (counted in the warm-up's dump)
    profile = None
    if os.environ.get("COST_CONTENDED_PROFILE"):  # with --plain
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    used = resource.getrusage(resource.RUSAGE_SELF)
    for cycles in (SHORT, LONG):
        os.getppid()  # callgrind dumps (and resets) its counts here
        for _ in range(cycles):
            cycle()
    os.getppid()
    ended = resource.getrusage(resource.RUSAGE_SELF)
    if profile is not None:
        profile.disable()
        profile.dump_stats(os.environ["COST_CONTENDED_PROFILE"])
    after = commands(stats)
    spent = {key: after[key] - before.get(key, 0) for key in after}
    for ignored in ("info", "client|list", "client"):  # the look, the holder's polls
        spent.pop(ignored, None)
    cpu = {  # what the process used (meaningful with --plain only: valgrind's otherwise)
        "user": ended.ru_utime - used.ru_utime,
        "system": ended.ru_stime - used.ru_stime,
        "context switches": ended.ru_nvcsw - used.ru_nvcsw + ended.ru_nivcsw - used.ru_nivcsw,
    }
    spent = {key: value for key, value in spent.items() if value}
    (pipes / "commands.json").write_text(json.dumps({"commands": spent, "cpu": cpu}))
    if case not in FAKED:
        os.close(acquired)  # the holder's read ends: it stops


def holder(case: str, url: str, name: str, pipes: Path) -> None:
    import redis

    make = make_lock(case, url)
    held = os.open(pipes / "held", os.O_WRONLY)
    acquired = os.open(pipes / "acquired", os.O_RDONLY)
    watcher = redis.Redis.from_url(url)
    while True:
        lock = make(name)
        lock.acquire()
        try:
            os.write(held, b"h")
        except BrokenPipeError:  # the measured process is done
            lock.release()
            return
        while not any("b" in client["flags"] for client in watcher.client_list()):
            # Until the measured process waits (blocked: BLPOP), or is done.
            if select.select([acquired], [], [], POLL)[0]:
                lock.release()
                return  # (the measured process writes only once it holds the lock)
        lock.release()
        if not os.read(acquired, 1):
            return


def commands(client: Any) -> dict[str, int]:
    stats = client.info("commandstats")
    return {key.removeprefix("cmdstat_"): value["calls"] for key, value in stats.items()}


def count(run: tuple[Path, str], plain: bool = False) -> dict[str, Any]:
    """Return the instructions of one contended acquisition of ``case`` with distlock
    imported from ``tree``, and the server's commands per cycle (on a server of its own)."""
    from devkit.callgrind import dump_totals
    from devkit.processes import run_process, start_process
    from devkit.redis_server import RedisServer

    tree, case = run
    path = os.pathsep.join(filter(None, (str(tree), os.environ.get("PYTHONPATH"))))
    env = {**os.environ, "PYTHONPATH": path, "PYTHONHASHSEED": "0"}
    name = f"cost:contended:{case}"
    server = RedisServer().start()
    try:
        with tempfile.TemporaryDirectory() as directory:
            pipes = Path(directory)
            os.mkfifo(pipes / "held")
            os.mkfifo(pipes / "acquired")
            arguments = ["--case", case, "--url", server.url, "--name", name, "--pipes", directory]
            other = None  # a faked backend needs no holder
            if case not in FAKED:
                command = [sys.executable, str(HERE), "--holder", *arguments]
                other = start_process(command, env, cwd=tree)
            try:
                if plain:
                    run_process(
                        [sys.executable, str(HERE), "--measured", *arguments],
                        env,
                        cwd=tree,
                        check=True,
                        capture_output=True,
                        text=True,
                    )
                else:
                    totals = dump_totals([str(HERE), "--measured", *arguments], env, tree)
            except subprocess.CalledProcessError as error:
                raise RuntimeError(f"{case} in {tree}: {error.stderr[-3000:]}") from None
            finally:
                try:
                    if other is not None:
                        other.wait(30)
                except subprocess.TimeoutExpired:
                    other.kill()
                    other.wait()
            measures = json.loads((pipes / "commands.json").read_text())
    finally:
        server.stop()
    spent, cycles = measures["commands"], SHORT + LONG
    figures: dict[str, Any] = {}
    if plain:  # times: the load moves them
        cpu = measures["cpu"]
        figures["user CPU us per acquisition"] = round(cpu["user"] * 1e6 / cycles, 1)
        figures["system CPU us per acquisition"] = round(cpu["system"] * 1e6 / cycles, 1)
        figures["context switches per acquisition"] = round(cpu["context switches"] / cycles, 2)
    else:
        # Dumps: start-up and warm-up, the short run, the long run; the rest after it.
        figures["instructions"] = round((totals[2] - totals[1]) / (LONG - SHORT))
    return {
        **figures,
        "server commands per cycle": round(sum(spent.values()) / cycles, 2),
        # Two acquisitions a cycle, nearly always both waited for ("blpop" per cycle).
        "server commands per acquisition": round(sum(spent.values()) / cycles / 2, 2),
        "by command": {key: round(value / cycles, 2) for key, value in sorted(spent.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", type=Path, help="a clone to run distlock from")
    parser.add_argument("--case", action="append", choices=CASES, help="default: every one")
    parser.add_argument("--jobs", type=int, default=2, help="valgrind runs at a time")
    parser.add_argument(
        "--plain", action="store_true", help="no valgrind: CPU times per acquisition instead"
    )
    parser.add_argument("--measured", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--holder", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--name", help=argparse.SUPPRESS)
    parser.add_argument("--pipes", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measured or args.holder:  # the tree measured is first on PYTHONPATH
        role = measured if args.measured else holder
        role(args.case[0], args.url, args.name, args.pipes)
        return 0
    sys.path.insert(0, str(HERE.parent.parent))  # the clone, for its devkit
    trees = [tree.resolve() for tree in args.tree or [HERE.parent.parent]]
    cases = args.case or list(CASES)
    runs = [(trees[0], case) for case in cases if case in ANCHORS]
    runs += [(tree, case) for tree in trees for case in cases if case not in ANCHORS]
    with ThreadPoolExecutor(args.jobs) as pool:  # counts do not depend on the load
        counted = list(pool.map(functools.partial(count, plain=args.plain), runs))
    results: dict[str, dict[str, Any]] = {}
    for (tree, case), figures in zip(runs, counted, strict=True):
        results.setdefault("anchors" if case in ANCHORS else str(tree), {})[case] = figures
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
