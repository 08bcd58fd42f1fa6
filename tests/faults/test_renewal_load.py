"""Renewal under load: 1,000 acquire/release cycles with auto_renew leave no thread behind
and send no renewal after (or during) a release."""

from __future__ import annotations

import random
import threading
import time

import pytest

import distlock
from distlock import renewal
from distlock.handler import locks

pytestmark = pytest.mark.django_db(databases=[])
CYCLES = 1000


def renewer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "distlock-renewer"]


def test_a_thousand_auto_renewed_cycles(redis_backend, monkeypatch, record) -> None:
    backend = locks["default"].exclusive  # kept by the patch: every Lock gets this one
    events: list[tuple[float, str, str]] = []  # (monotonic, "renew" or "release", token)
    guard = threading.Lock()
    real_extend, real_release = backend.extend, backend.release

    def extend(name, token, ttl_ms, **flags):
        if flags.get("renewal"):
            with guard:
                events.append((time.monotonic(), "renew", token))
        return real_extend(name, token, ttl_ms, **flags)

    def release(name, token, **kwargs):
        with guard:
            events.append((time.monotonic(), "release", token))
        return real_release(name, token, **kwargs)

    monkeypatch.setattr(backend, "extend", extend)
    monkeypatch.setattr(backend, "release", release)
    threads_before = threading.active_count() - len(renewer_threads())
    started = time.monotonic()
    for cycle in range(CYCLES):
        lk = distlock.lock(f"cycle:{cycle % 7}", ttl=0.3, auto_renew=True)
        assert lk.acquire(wait=5)
        # mostly short holds; every 50th outlives a few renewal periods (0.1 s)
        time.sleep(0.25 if cycle % 50 == 0 else random.uniform(0, 0.003))
        lk.release()
    took = time.monotonic() - started
    deadline = time.monotonic() + 2
    while renewer_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert renewer_threads() == [], "the renewal thread outlived the last lock"
    assert renewal.renewer.active() == 0
    assert threading.active_count() == threads_before
    time.sleep(0.35)  # a renewal still scheduled for a released lock would be sent by now
    released_at = {token: at for at, kind, token in events if kind == "release"}
    renewals = [(at, token) for at, kind, token in events if kind == "renew"]
    assert len(released_at) == CYCLES
    late = [token for at, token in renewals if at >= released_at[token]]
    assert late == [], f"{len(late)} renewals sent after their lock's release began"
    assert len(renewals) >= 20  # renewals did happen: the check above checked something
    assert backend.list() == []
    record(
        "Renewal under load: 1,000 acquire/release cycles with auto_renew",
        f"{len(renewals)} renewals, none sent after its lock's release began; the renewal "
        f"thread ended with the last lock (0 threads left); {took:.1f}s",
        cycles=CYCLES,
        renewals=len(renewals),
        renewals_after_release=0,
        threads_left=0,
    )
