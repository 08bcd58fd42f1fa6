"""What the processes forked by the zygote do (tests/faults/zygote.py).

Every role runs in a child of its own: configure() first points it at the test's Redis and
database, then the role runs until it returns or is killed. Roles report through files
(written whole, then renamed, so a killed process never leaves half a report).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def configure(kind: str, url: str, db: str | None = None) -> None:
    from django.conf import settings

    from devkit.configs import distlock_settings

    settings.DISTLOCK, settings.CACHES = distlock_settings(kind, url)
    if db:
        settings.DATABASES["default"]["NAME"] = db


def write_report(path: str, report: dict[str, Any]) -> None:
    temporary = f"{path}.{os.getpid()}.tmp"
    Path(temporary).write_text(json.dumps(report))
    os.replace(temporary, path)


def hold(name: str, ttl: float) -> None:
    """Acquire and hold until killed: a holder that crashes inside its critical section."""
    import distlock

    lk = distlock.lock(name, ttl=ttl, wait=30)
    if not lk.acquire():
        raise SystemExit(3)
    time.sleep(3600)


def stale_writer(
    name: str, ttl: float, account: int, action: str, out: str, auto_renew: bool = False
) -> None:
    """Acquire, say so (``out``.held), and wait for the test's go (``out``.go): meanwhile the
    test pauses this process past its lease while another holder takes the lock and writes.
    Then write to the account fenced by the token, and try ``action`` (release or extend).
    Report what each step answered (``out``), and why when acquire() failed (exit status 3).

    The test waits for ``out``.held, not for the server to show this process as the holder:
    a grant the server made but this process had not read yet when it was paused arrives
    after its lease, and acquire() rightly treats it as not acquired."""
    import threading

    from django.db.models import F

    import distlock
    from devkit.fencingapp.models import Account
    from distlock.fencing import fenced_update

    lost = threading.Event()
    lk = distlock.lock(
        name, ttl=ttl, wait=30, auto_renew=auto_renew, on_lost=lambda lock: lost.set()
    )
    started = time.monotonic()
    if not lk.acquire():
        write_report(
            out,
            {
                "acquire": f"returned False after {time.monotonic() - started:.2f} s",
                "holder": repr(lk.holder()),
            },
        )
        raise SystemExit(3)
    report: dict[str, Any] = {"fencing_token": lk.fencing_token}
    write_report(f"{out}.held", report)
    if not _wait_for_file(f"{out}.go", timeout=60):
        write_report(out, {**report, "go": "never came"})
        raise SystemExit(4)
    if auto_renew:  # the renewal thread, resumed too, finds the lease gone (on_lost)
        report["on_lost"] = lost.wait(30)
    try:
        fenced_update(
            Account.objects.filter(pk=account),
            lk.fencing_token,
            strict=True,
            balance=F("balance") + 1,
        )
        report["write"] = "accepted"
    except distlock.FencedUpdateRejected as exc:
        report["write"] = type(exc).__name__
        report["newest"] = exc.newest
    try:
        getattr(lk, action)()
        report[action] = "returned"
    except distlock.LockError as exc:
        report[action] = type(exc).__name__
    write_report(out, report)


def _wait_for_file(path: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def create_resource(accounts: int = 1) -> None:
    """Create the guarded resource's tables (without migrate) and its account rows."""
    from django.db import connection

    from devkit.fencingapp.models import Account, FencedWrite

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode=WAL")  # kept by the file: readers never block
    with connection.schema_editor() as editor:
        editor.create_model(Account)
        editor.create_model(FencedWrite)
    Account.objects.bulk_create(Account(pk=pk, balance=0) for pk in range(1, accounts + 1))


def soak_worker(name: str, lease: float, target: int, counter: str, log: str) -> None:
    """Take the lock again and again until ``target`` acquisitions were counted; inside each
    critical section make two fenced writes ("enter", "exit") to the guarded resource.

    Every step is logged as one line, written with a single write(2) so that a SIGKILL never
    leaves half a line: ``A token acquired_at lease_deadline``, ``W token kind started
    finished accepted``, ``R token releasing_at``, ``E token outcome``. Times are
    time.monotonic() (CLOCK_MONOTONIC: the same clock in every process on Linux)."""
    import redis
    from django.db import transaction
    from django.db.models import F

    import distlock
    from devkit.fencingapp.models import Account, FencedWrite
    from distlock.fencing import fenced_update

    pid = os.getpid()
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    url = distlock.locks["default"].location
    count = redis.Redis.from_url(url, socket_timeout=5)

    def emit(*fields: object) -> None:
        os.write(out, (" ".join(map(str, fields)) + "\n").encode())

    def write(token: int, kind: str) -> bool:
        with transaction.atomic():
            accepted = (
                fenced_update(Account.objects.filter(pk=1), token, balance=F("balance") + 1) == 1
            )
            if accepted:
                FencedWrite.objects.create(token=token, writer=pid, kind=kind)
        return accepted

    counted = 0
    while counted < target:
        lk = distlock.lock(name, ttl=lease, wait=10)
        try:
            if not lk.acquire():
                counted = int(count.get(counter) or 0)
                continue
        except distlock.BackendUnavailable:
            continue
        token = lk.fencing_token
        # The client's own bound on the lease: the request was sent at deadline - lease.
        emit("A", token, repr(time.monotonic()), repr(lk._lease.deadline))
        counted = count.incr(counter)
        for kind in ("enter", "exit"):
            started = time.monotonic()
            accepted = write(token, kind)
            emit("W", token, kind, repr(started), repr(time.monotonic()), int(accepted))
        emit("R", token, repr(time.monotonic()))
        try:
            lk.release()
            emit("E", token, "released")
        except distlock.LockError as exc:
            emit("E", token, type(exc).__name__)
