"""Sync code is placed in the transactions open on its own thread's connections
(``transactions._begun_on``): the registry must never place it in another thread's."""

from __future__ import annotations

import gc
import threading
from typing import Any

import pytest
from django.db import connections, transaction

import distlock
from distlock import transactions
from tests.support.lock_helpers import is_held

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_backend"),
]


def _run_in_a_thread(target: Any) -> threading.Thread:
    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    return thread


def test_a_new_thread_that_reuses_a_dead_threads_identity_is_not_in_its_transaction() -> None:
    """A thread dies inside an atomic block (its ``__exit__`` never runs) and its connection
    is not collected yet (Django's connections are in reference cycles: the collector, not
    the thread's end, frees them). A new thread gets the same identity, as the OS reuses
    them: its lock, taken and released outside any transaction, is freed at once.
    Observed at 5f6a5f4 (the registry keyed by identity alone): the new thread was placed in
    the dead thread's transaction, its release waited for a COMMIT that never comes."""
    kept: list[Any] = []

    def dies_inside_a_transaction() -> None:
        transaction.atomic().__enter__()
        kept.append(connections["default"])

    ident = _run_in_a_thread(dies_inside_a_transaction).ident
    assert kept[0].in_atomic_block
    seen: dict[str, Any] = {}

    def locks_and_releases() -> None:
        if threading.get_ident() != ident:
            return
        lk = distlock.lock("registry:reused-ident", ttl=10)
        assert lk.acquire()
        lk.release()
        seen["held_after_release"] = is_held("registry:reused-ident")

    for _ in range(200):  # glibc reuses a joined thread's stack, and so its identity
        _run_in_a_thread(locks_and_releases)
        if seen:
            break
    try:
        assert seen == {"held_after_release": False}, seen or "no thread reused the identity"
    finally:
        kept[0].inc_thread_sharing()
        kept[0].close()


def test_the_registry_keeps_no_entry_of_threads_that_ended() -> None:
    """A thread-per-request server: 300 threads, each beginning a transaction on a
    connection of its own, then ending. The registry keeps none of them once a new thread
    registers (and holds no connection alive: weakly)."""

    def one_request() -> None:
        with transaction.atomic():
            connections["default"].ensure_connection()
        connections["default"].close()

    for _ in range(300):
        _run_in_a_thread(one_request)
    gc.collect()
    _run_in_a_thread(one_request)
    assert len(transactions._begun_on) <= 3, len(transactions._begun_on)
