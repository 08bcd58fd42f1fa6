"""What the admin's "Held locks" page costs with many locks in a busy Redis.

    python benchmarks/bench_admin.py [--locks 10000] [--keys 1000000] [--repeat 15]

Starts a redis-server of its own (devkit/redis_server.py), fills it with ``--keys`` unrelated
keys (DEBUG POPULATE) and ``--locks`` held locks (real distlock.lock() acquisitions, with
metadata), then renders the changelist through the Django test client as a logged-in
superuser: the whole request (session, permissions, Redis reads, template), as an operator
gets it. Prints the figures and writes them to benchmarks/results/admin.json.

The target is a page in under 1 second. Timings are wall-clock on whatever machine runs
this; the JSON records the load average so a noisy run can be recognised.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the clone, for its imports
from devkit.paths import ROOT

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "devkit.settings")

TARGET_SECONDS = 1.0
RESULTS = ROOT / "benchmarks" / "results" / "admin.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--locks", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--output", type=Path, default=RESULTS)
    options = parser.parse_args()

    import django

    django.setup()
    from devkit.redis_server import RedisServer

    with RedisServer() as server:
        client = setup_django(server.url)
        fill(server, options.locks, options.keys)
        pages = {
            "newest first, page 1": {},
            "by expiry, page 50": {"o": "expiry", "p": 50},
            "search by prefix": {"q": "jobs:0042"},
            "alias filter, last page": {"alias": "default", "p": 10_000},
        }
        timings = {
            label: time_page(client, params, options.repeat) for label, params in pages.items()
        }
        server_keys = server.client().dbsize()

    headline = timings["newest first, page 1"]
    result = {
        "benchmark": "admin held locks changelist, Django test client, superuser",
        "held_locks": options.locks,
        "unrelated_keys": options.keys,
        "keys_in_redis": server_keys,
        "repeat": options.repeat,
        "target_seconds": TARGET_SECONDS,
        "page_render_median_seconds": headline["median"],
        "meets_target": headline["median"] < TARGET_SECONDS,
        "pages": timings,
        "machine": {
            "python": platform.python_version(),
            "django": django.get_version(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "note": "wall-clock; load average read at the end (the machine may be shared)",
        },
    }
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(json.dumps(result, indent=2) + "\n")
    for label, figures in timings.items():
        print(
            f"{label:28} median {figures['median'] * 1000:7.1f} ms   "
            f"min {figures['min'] * 1000:7.1f} ms   max {figures['max'] * 1000:7.1f} ms"
        )
    verdict = "meets" if result["meets_target"] else "MISSES"
    print(
        f"page render with {options.locks:,} held locks and {server_keys:,} keys in Redis: "
        f"{headline['median'] * 1000:.0f} ms median ({verdict} the {TARGET_SECONDS:g} s "
        f"target); written to {options.output}"
    )


def setup_django(url: str):  # type: ignore[no-untyped-def]
    """Point DISTLOCK at ``url``, make an in-memory database and a logged-in superuser."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    from distlock.handler import locks

    settings.DEBUG = False  # as in production: no query log, no template debug info
    settings.DISTLOCK = {
        "default": {
            "BACKEND": "distlock.backends.redis.RedisBackend",
            "LOCATION": url,
            "OPTIONS": {"socket_timeout": 10},
        },
    }
    locks.reset()
    setup_test_environment()
    connection.creation.create_test_db(verbosity=0)
    user = get_user_model().objects.create_superuser("bench", password="bench")
    client = Client()
    client.force_login(user)
    return client


def fill(server, locks: int, keys: int) -> None:  # type: ignore[no-untyped-def]
    import distlock

    started = time.perf_counter()
    if keys:
        server.client(socket_timeout=120).execute_command("DEBUG", "POPULATE", keys, "unrelated")
    for number in range(locks):
        # Leases of 10 to 20 minutes, so the orders by lease end differ from the name order.
        lock = distlock.lock(
            f"jobs:{number:05d}", ttl=600 + (number * 7919) % 600, purpose=f"batch {number % 37}"
        )
        if not lock.acquire(wait=0):
            raise SystemExit(f"could not acquire {lock.name}")
    print(
        f"filled Redis with {keys:,} keys and {locks:,} held locks in "
        f"{time.perf_counter() - started:.1f} s"
    )


def time_page(client, params: dict, repeat: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    from django.urls import reverse

    url = reverse("admin:distlock_heldlock_changelist")
    response = client.get(url, params)  # warm up: templates, scripts, connections
    if response.status_code != 200 or not response.context["cl"].rows:
        raise SystemExit(f"the page did not render locks: {response.status_code}")
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(url, params)
        response.content  # noqa: B018 - rendered
        seconds.append(time.perf_counter() - started)
    return {
        "median": round(statistics.median(seconds), 4),
        "min": round(min(seconds), 4),
        "max": round(max(seconds), 4),
        "rows": len(response.context["cl"].rows),
        "result_count": response.context["cl"].result_count,
    }


if __name__ == "__main__":
    main()
