"""distlock itself as a conformance client: ``python -m tests.conformance.python_client``
speaks the runner's line protocol (tests/conformance/README.md) with ``distlock.lock()``, so
that the runner drives the client under test and the Python processes beside it alike.
Configured by DISTLOCK_URL, DISTLOCK_KEY_PREFIX and DISTLOCK_CLUSTER, as every client is."""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def configure() -> None:
    from django.conf import settings

    options: dict[str, Any] = {"socket_timeout": 2.0, "socket_connect_timeout": 2.0}
    if os.environ.get("DISTLOCK_CLUSTER") == "1":
        options["CLUSTER"] = True
    settings.configure(
        INSTALLED_APPS=["distlock"],
        USE_TZ=True,
        DISTLOCK={
            "default": {
                "BACKEND": "distlock.backends.redis.RedisBackend",
                "LOCATION": os.environ["DISTLOCK_URL"],
                "KEY_PREFIX": os.environ.get("DISTLOCK_KEY_PREFIX", "distlock"),
                "OPTIONS": options,
            }
        },
    )
    import django

    django.setup()


class Client:
    """The line protocol's operations on distlock.lock(); held Lock objects by token."""

    def __init__(self) -> None:
        self.held: dict[str, Any] = {}

    def hello(self) -> dict[str, Any]:
        import distlock

        return {"client": f"distlock {distlock.__version__}", "features": ["exclusive", "shared"]}

    def acquire(self, name: str, ttl_ms: int, wait_ms: int | None, shared: bool, purpose: Any):
        import distlock

        wait = None if wait_ms is None else wait_ms / 1000
        lock = distlock.lock(
            name, ttl=ttl_ms / 1000, shared=shared, purpose=purpose, hold_until_commit=False
        )
        if not lock.acquire(wait=wait):
            return {"acquired": False}
        self.held[lock.token] = lock
        return {"acquired": True, "token": lock.token, "fencing": str(lock.fencing_token)}

    def release(self, name: str, token: str, shared: bool) -> dict[str, Any]:
        from distlock import LockNotOwned

        lock = self.held.pop(token, None)
        if lock is None:
            return {"released": False}
        try:
            lock.release()
        except LockNotOwned:
            return {"released": False}
        return {"released": True}

    def extend(self, name: str, token: str, ttl_ms: int, shared: bool) -> dict[str, Any]:
        from distlock import LockNotOwned

        lock = self.held.get(token)
        if lock is None:
            return {"extended": False}
        try:
            lock.extend(ttl_ms / 1000)
        except LockNotOwned:
            return {"extended": False}
        return {"extended": True}

    def holder(self, name: str) -> dict[str, Any]:
        from distlock.handler import locks

        info = locks["default"].info(name)
        if info is None:
            return {"holder": None}
        fields = {"token": info.token, "fencing": str(info.fencing_token), "host": info.host}
        fields.update(pid=info.pid, purpose=info.purpose, shared=info.shared)
        return {"holder": fields}


def answer(client: Client, request: dict[str, Any]) -> dict[str, Any]:
    fields = {key: value for key, value in request.items() if key not in ("id", "op")}
    try:
        reply = getattr(client, request["op"])(**fields)
    except Exception as exc:  # the line protocol reports every error and goes on
        return {"id": request.get("id"), "ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"id": request["id"], "ok": True, **reply}


def main() -> None:
    configure()
    client = Client()
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(answer(client, json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
