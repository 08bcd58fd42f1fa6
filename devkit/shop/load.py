"""Serve the shop (devkit/shop) on a real database and send it the clicks of many buyers at
once: for tests/core/test_transactions_databases.py and benchmarks/transactions.py."""

from __future__ import annotations

import contextlib
import http.client
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from devkit.databases import DatabaseServer
from devkit.live_server_process import LiveServerProcess
from devkit.processes import child_env, distlock_variables, run_process
from devkit.servers import HOST

SETTINGS = "devkit.shop.settings"
CLIENTS = 18  # requests in flight at once: three per gunicorn worker


class Answer(NamedTuple):
    status: int
    result: str
    waited: bool  # the request's lock was held by another when it asked


class Shop:
    """One shop: its own database on ``database``, served by ``server`` (None: not served)."""

    def __init__(
        self, database: DatabaseServer, name: str, server: LiveServerProcess | None
    ) -> None:
        self.server = server
        self.database = name
        self._db = database

    # --- requests -----------------------------------------------------------------------
    def post(self, path: str) -> Answer:
        assert self.server is not None
        conn = http.client.HTTPConnection(HOST, self.server.port, timeout=60)
        try:
            conn.request("POST", path)
            response = conn.getresponse()
            body = response.read()
            result = json.loads(body).get("result", "") if response.status == 200 else ""
            return Answer(response.status, result, response.getheader("X-Waited") == "1")
        finally:
            conn.close()

    def send(self, paths: list[str]) -> list[Answer]:
        """POST every path, CLIENTS at a time, in order (neighbours go out together)."""
        with ThreadPoolExecutor(CLIENTS) as pool:
            return list(pool.map(self.post, paths))

    def click_orders(self, pattern: str, orders: int, clicks: int) -> list[Answer]:
        """Place ``orders`` orders, then send each ``clicks`` payment requests at once."""
        self.place_orders(orders)
        return self.send(
            [f"/{pattern}/{order}" for order in range(1, orders + 1) for _ in range(clicks)]
        )

    def click_apart(self, pattern: str, orders: int, clicks: int, gap: float) -> list[Answer]:
        """Place ``orders`` orders, then click each ``clicks`` times, ``gap`` seconds apart,
        every order at once (a click does not wait for the previous one's answer)."""
        self.place_orders(orders)
        with ThreadPoolExecutor(orders * clicks) as pool:
            futures = []
            for _ in range(clicks):
                futures += [
                    pool.submit(self.post, f"/{pattern}/{order}") for order in range(1, orders + 1)
                ]
                time.sleep(gap)
            return [future.result() for future in futures]

    def click_then_pay(self, pattern: str, orders: int, gap: float) -> list[Answer]:
        """Place ``orders`` orders, click ``pattern`` once for each, then ``pay`` for each
        ``gap`` seconds later (a second click while the first requests work on)."""
        self.place_orders(orders)
        with ThreadPoolExecutor(2 * orders) as pool:
            first = [pool.submit(self.post, f"/{pattern}/{n}") for n in range(1, orders + 1)]
            time.sleep(gap)
            second = [pool.submit(self.post, f"/pay/{n}") for n in range(1, orders + 1)]
            return [future.result() for future in first + second]

    def buy(self, buyers: int) -> list[Answer]:
        return self.send(["/buy"] * buyers)

    # --- what the database holds --------------------------------------------------------
    def place_orders(self, orders: int) -> None:
        """Insert the orders numbered 1 to ``orders``."""
        self.query(
            "INSERT INTO shop_order (id) VALUES "
            + ", ".join(f"({order})" for order in range(1, orders + 1))
        )

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        conn = self._db.connect(self.database)
        try:
            cursor = conn.cursor()
            cursor.execute(sql)
            rows = list(cursor.fetchall()) if cursor.description else []
            conn.commit()
            return rows
        finally:
            conn.close()

    def charges_per_order(self) -> dict[int, int]:
        rows = self.query("SELECT order_id, COUNT(*) FROM shop_charge GROUP BY order_id")
        return {int(order): int(count) for order, count in rows}

    def stock(self, units: int) -> None:
        self.query(f"INSERT INTO shop_product (id, units) VALUES (1, {int(units)})")

    def units_left(self) -> int:
        return int(self.query("SELECT units FROM shop_product WHERE id = 1")[0][0])

    def sales(self) -> int:
        return int(self.query("SELECT COUNT(*) FROM shop_sale")[0][0])


def assert_each_charged_once(answers: list[Answer], charges: dict[int, int], orders: int) -> None:
    """Every request was answered 200, and each of the orders numbered 1 to ``orders`` was
    charged once (``charges``: ``Shop.charges_per_order()``); the message counts the orders
    charged twice."""
    assert Counter(answer.status for answer in answers) == {200: len(answers)}
    twice = {order: n for order, n in charges.items() if n > 1}
    assert sorted(charges) == list(range(1, orders + 1)), charges
    assert not twice, f"{len(twice)} of {orders} orders charged twice"


def shop_env(
    database: DatabaseServer, name: str, redis_url: str, hold_until_commit: bool = True
) -> dict[str, str]:
    return {
        **database.env(name=name),
        **distlock_variables(url=redis_url),
        "SHOP_HOLD_UNTIL_COMMIT": "1" if hold_until_commit else "0",
    }


def shop_locks(redis_url: str) -> dict[str, Any]:
    """The DISTLOCK setting that sees the shop's locks (for a test to look at them)."""
    return {
        "default": {
            "BACKEND": "distlock.backends.redis.RedisBackend",
            "LOCATION": redis_url,
            "KEY_PREFIX": "shop",
        }
    }


@contextlib.contextmanager
def serve_shop(
    database: DatabaseServer,
    redis_url: str,
    *,
    workers: int,
    hold_until_commit: bool = True,
    gc_disabled: bool = False,
    server: str = "gunicorn",
    django_middleware: bool = False,
) -> Iterator[Shop]:
    """A migrated database of its own on ``database``, served by ``workers`` gunicorn
    workers (0: not served; ``gc_disabled``: with the garbage collector off in each; or
    ``server="uvicorn"``: one uvicorn process, its ASGI application; ``"gunicorn-uvicorn"``:
    gunicorn's ``workers`` uvicorn worker processes; ``django_middleware``: Django's own
    middleware instead of the shop's, devkit/shop/settings.py), dropped afterwards."""
    name = database.create_database()
    try:
        env = shop_env(database, name, redis_url, hold_until_commit)
        if gc_disabled:
            env["SHOP_GC_DISABLED"] = "1"
        if django_middleware:
            env["SHOP_DJANGO_MIDDLEWARE"] = "1"
        run_process(
            [sys.executable, "-m", "django", "migrate", "--noinput", "-v", "0"],
            {**child_env(settings=SETTINGS), **env},
            check=True,
            timeout=180,
        )
        if not workers:
            yield Shop(database, name, None)
            return
        with LiveServerProcess(
            f"devkit.shop.{'wsgi' if server == 'gunicorn' else 'asgi'}:application",
            server=server,
            workers=workers,
            settings=SETTINGS,
            env=env,
        ) as server:
            yield Shop(database, name, server)
    finally:
        database.drop_database(name)


def printed_report(arguments: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run ``python -m *arguments`` with ``env``; return the JSON line it printed last."""
    done = run_process(
        [sys.executable, "-m", *arguments],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def isolation_run(
    database: DatabaseServer, redis_url: str, name: str, level: str, order: str
) -> dict[str, Any]:
    """Run devkit.shop.isolation ORDER at isolation ``level`` on database ``name``
    of ``database``; return what it printed."""
    env = child_env(
        python_path=False,
        settings="devkit.shop.settings",
        url=redis_url,
        SHOP_ISOLATION=level,
        **database.env(name=name),
    )
    return printed_report(["devkit.shop.isolation", order], env)


def scenario_report(database: DatabaseServer, redis_url: str, module: str) -> dict[str, Any]:
    """Run ``python -m module`` (a scenario script of the shop: ends, holder) against a
    migrated database of its own on ``database``; return the JSON it printed last."""
    with serve_shop(database, redis_url, workers=0) as served:
        env = child_env(
            python_path=False,
            settings=SETTINGS,
            **shop_env(database, served.database, redis_url),
        )
        return printed_report([module], env)
