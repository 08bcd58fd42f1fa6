"""What @lock_view costs a request, against the lock it takes.

Through a real server process (uvicorn, devkit/live_project) on a private redis-server, the
same trivial view is requested with and without @lock_view, interleaved with bare
acquire()+release() pairs timed inside the same server process. The view's own time (from the
X-View-Seconds header, measured around the view in the server) gives

    added = median(decorated) - median(undecorated)      ratio = added / median(raw)

where raw is one acquire() plus one release() on a fresh Lock: the two round trips to Redis
that lock_view cannot avoid. Target: ratio <= 1.2. Round-trip times seen by the client are
reported too; they are noisier (HTTP, the event loop, the thread hop of a sync view).

    python benchmarks/bench_lock_view.py [--quick] [--requests N]

Writes benchmarks/results/lock_view.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the clone, for its imports
from devkit.live_server_process import LiveServerProcess
from devkit.paths import ROOT
from devkit.processes import distlock_variables
from devkit.redis_server import RedisServer

RESULTS = ROOT / "benchmarks" / "results" / "lock_view.json"
TARGET = 1.2
# Each kind is requested in turn, so that a burst of noise from the shared machine hits all.
MODES = {
    "sync": {"plain": "/bench/plain/1/", "locked": "/bench/locked/1/", "raw": "/bench/raw/?n=1"},
    "async": {
        "plain": "/bench/aplain/1/",
        "locked": "/bench/alocked/1/",
        "raw": "/bench/araw/?n=1",
    },
}


class Client:
    """One keep-alive HTTP connection to the server."""

    def __init__(self, server: LiveServerProcess) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)

    def call(self, path: str) -> tuple[float, http.client.HTTPResponse, bytes]:
        method = (
            "GET" if path.startswith("/bench/raw") or path.startswith("/bench/araw") else "POST"
        )
        started = time.perf_counter()
        self.connection.request(method, path, headers={"Content-Length": "0"})
        response = self.connection.getresponse()
        body = response.read()
        elapsed = time.perf_counter() - started
        if response.status != 200:
            raise RuntimeError(f"{method} {path} answered {response.status}: {body[:200]!r}")
        return elapsed, response, body


def measure(client: Client, paths: dict[str, str], requests: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {
        "plain": [],
        "locked": [],
        "raw": [],
        "plain_rtt": [],
        "locked_rtt": [],
    }
    kinds = list(paths)
    for index in range(requests):
        for kind in kinds[index % 3 :] + kinds[: index % 3]:  # rotate who goes first
            rtt, response, body = client.call(paths[kind])
            if kind == "raw":
                samples["raw"].extend(json.loads(body)["seconds"])
            else:
                samples[kind].append(float(response.getheader("X-View-Seconds")))
                samples[f"{kind}_rtt"].append(rtt)
    return samples


def summarize(samples: dict[str, list[float]]) -> dict[str, Any]:
    median = {kind: statistics.median(values) for kind, values in samples.items()}
    added = median["locked"] - median["plain"]
    added_rtt = median["locked_rtt"] - median["plain_rtt"]
    micro = {f"{kind}_median_us": round(value * 1e6, 1) for kind, value in median.items()}
    return {
        **micro,
        "added_us": round(added * 1e6, 1),
        "ratio": round(added / median["raw"], 3),
        "added_rtt_us": round(added_rtt * 1e6, 1),
        "ratio_rtt": round(added_rtt / median["raw"], 3),
        "samples": len(samples["raw"]),
        "meets_target": added / median["raw"] <= TARGET,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 requests per kind")
    parser.add_argument("--requests", type=int, default=2000, help="requests per kind")
    arguments = parser.parse_args()
    requests = 300 if arguments.quick else arguments.requests

    results: dict[str, Any] = {}
    with (
        RedisServer() as redis_server,
        LiveServerProcess(
            "devkit.live_project.asgi:application",
            settings="devkit.live_project.settings",
            env=distlock_variables(url=redis_server.url),
            ready_path="/health/",
        ) as server,
    ):
        client = Client(server)
        for mode, paths in MODES.items():
            measure(client, paths, 50)  # warm up: connections, scripts, caches
            results[mode] = summarize(measure(client, paths, requests))
    report = {
        "benchmark": "lock_view",
        "what": "time @lock_view adds to a trivial view through uvicorn, vs one bare "
        "acquire()+release() in the same server process; medians",
        "target_ratio": TARGET,
        "requests_per_kind": requests,
        "machine": {
            "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
            "platform": platform.platform(),
            "note": "a shared 2-core machine with other test runs going on: figures are noisy",
        },
        "modes": results,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    for mode, figures in results.items():
        print(
            f"{mode:5}: raw acquire+release {figures['raw_median_us']:7.1f} us | "
            f"view time added {figures['added_us']:7.1f} us -> ratio {figures['ratio']:.2f} "
            f"(target <= {TARGET}) | round trip added {figures['added_rtt_us']:7.1f} us -> "
            f"ratio {figures['ratio_rtt']:.2f}"
        )
    print(f"load average {report['machine']['load_average']}; wrote {RESULTS}")
    return 0 if all(figures["meets_target"] for figures in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
