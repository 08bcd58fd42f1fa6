"""Run distlock's benchmark suite: ``python benchmarks/run.py [--quick]`` (``make bench``).

Starts its own redis-server processes (never a Redis already running), runs every section
with the libraries interleaved, runs ``benchmarks/bench_redlock.py``, ``bench_lock_view.py``
and ``bench_admin.py`` when they exist and merges the JSON files they write, then writes
``benchmarks/results/latest.json``, ``latest.md`` and ``latest.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# the package under test, devkit.redis_server, benchmarks.*
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import (
    contention,
    latency,
    listing,
    memory,
    report,
    scale,
    server_time,
    targets,
    uncontended,
)
from benchmarks.harness import FULL, QUICK, RESULTS, Profile, configure_distlock, environment, log
from devkit.paths import ROOT
from devkit.processes import child_env, run_process
from devkit.redis_server import RedisServer

SECTIONS: dict[str, Callable[[Profile, str], dict[str, Any]]] = {
    "uncontended": uncontended.run,
    "latency": latency.run,
    "server_time": server_time.run,
    "contention": contention.run,
    "memory": memory.run,
    "scale": scale.run,
    "listing": listing.run,
}
# Scripts owned by other issues: run when present, each writing results/<name>.json.
EXTERNAL = {
    "redlock": "bench_redlock.py",
    "lock_view": "bench_lock_view.py",
    "admin": "bench_admin.py",
    "transactions": "bench_transactions.py",
}
# Their arguments for a quick run (each script's own smoke-run options).
EXTERNAL_QUICK_ARGUMENTS = {
    "redlock": ["--quick"],
    "lock_view": ["--quick"],
    "admin": ["--keys", "100000", "--repeat", "5"],
}
EXTERNAL_TIMEOUT = 900


def main(argv: list[str] | None = None) -> int:
    options = _parse(argv)
    profile = QUICK if options.quick else FULL
    chosen = options.only or list(SECTIONS)
    output = Path(
        options.output
        or (RESULTS / "latest" if not options.only else ROOT / "benchmarks" / "out" / "partial")
    )
    started = time.time()
    results: dict[str, Any] = {
        "command": "python benchmarks/run.py "
        + shlex.join(argv if argv is not None else sys.argv[1:]),
        "profile": profile.as_dict(),
        "sections": {},
    }
    for name in chosen:
        log(f"section {name} ({profile.name})")
        with RedisServer() as server:
            if "environment" not in results:
                version = server.client().info("server")["redis_version"]
                results["environment"] = environment(version)
            configure_distlock(server.url)
            results["sections"][name] = SECTIONS[name](profile, server.url)
    if not options.skip_external:
        external = {
            name: _external(name, script, profile, started)
            for name, script in EXTERNAL.items()
            if (ROOT / "benchmarks" / script).exists()
        }
        if external:
            results["sections"]["external"] = external
    if "environment" not in results:
        results["environment"] = environment("not started")
    results["duration_s"] = round(time.time() - started, 1)
    results["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["targets"] = targets.check(results["sections"])
    _write(results, output)
    for target in results["targets"]:
        log(
            f"{'met ' if target['met'] else 'MISS'} {target['target']}: "
            f"{target['value']} (limit {target['limit']})"
        )
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run of about a minute (fewer repeats, up to 100k locks)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=list(SECTIONS),
        help="run only this section (repeatable); writes benchmarks/out/partial.*",
    )
    parser.add_argument(
        "--skip-external",
        action="store_true",
        help="do not run bench_redlock.py, bench_lock_view.py, bench_admin.py",
    )
    parser.add_argument("--output", help="path prefix of the .json/.md/.png outputs")
    return parser.parse_args(argv)


def _external(name: str, script: str, profile: Profile, started: float) -> dict[str, Any]:
    """Run another issue's script; return the JSON it wrote this run, or why there is none."""
    result_file = RESULTS / f"{name}.json"
    command = [sys.executable, str(ROOT / "benchmarks" / script)]
    if profile is QUICK:
        command += EXTERNAL_QUICK_ARGUMENTS.get(name, ["--quick"])
    log(f"external {script}")
    environment_variables = child_env(DISTLOCK_BENCH_PROFILE=profile.name)
    try:
        finished = run_process(
            command,
            cwd=ROOT,
            env=environment_variables,
            timeout=EXTERNAL_TIMEOUT,
            capture_output=True,
            text=True,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"{script} ran longer than {EXTERNAL_TIMEOUT} s"}
    tail = " / ".join((finished.stderr or finished.stdout).strip().splitlines()[-3:])
    if not result_file.exists() or result_file.stat().st_mtime < started:
        return {
            "error": f"{script} exited with {finished.returncode} without writing "
            f"{result_file.relative_to(ROOT)}: {tail}"
        }
    # Written this run: kept even when the script's exit status says a target was missed.
    return {**json.loads(result_file.read_text()), "exit_status": finished.returncode}


def _write(results: dict[str, Any], output: Path) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    json_path = output.with_suffix(".json")
    json_path.write_text(json.dumps(results, indent=2, allow_nan=True) + "\n")
    output.with_suffix(".md").write_text(report.markdown(results))
    report.plot(results, output.with_suffix(".png"))
    log(f"wrote {json_path}, .md and .png")


if __name__ == "__main__":
    sys.exit(main())
