"""Issue 40 adversary: attacks on ``fence=True`` (distlock/claims.py) in one process, on
SQLite. Each test says what a fenced holder is owed; each failed on the code it attacked."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection, connections, transaction

import distlock
from distlock.claims import claim_first
from distlock.fencing import claim
from distlock.models import Fence

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _redis(redis_backend: str) -> str:
    return redis_backend


def passthrough(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
    """A user's execute wrapper (query logging, django-pghistory's context, ...)."""
    return execute(sql, params, many, context)


def in_new_thread(work: Any) -> Any:
    """Run ``work`` in a fresh thread (its own database connection, as a new worker's)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = work()
        except BaseException as exc:  # handed to the test
            out["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    if "error" in out:
        raise out["error"]
    return out.get("value")


def test_a_users_execute_wrapper_block_does_not_take_the_fence_off() -> None:
    """A fresh worker's first query runs inside ``connection.execute_wrapper(w)`` (Django's
    public API, which appends ``w`` and pops the LAST wrapper on exit). The connection opens
    there, so the fence's wrapper is appended after ``w``, and the block's exit pops the
    fence's wrapper instead of ``w``. Expected: the stale holder's later statement is refused
    (FencedUpdateRejected); the user's wrapper is gone after its block."""
    name = "wrapped"

    def stale_holder() -> dict[str, Any]:
        stale = distlock.lock(name, ttl=0.3, fence=True, hold_until_commit=False)
        assert stale.acquire(wait=0)
        with connection.execute_wrapper(passthrough):
            Fence.objects.filter(name="first").exists()  # opens this thread's connection
        time.sleep(0.6)  # the lease ends (a pause)
        newer = in_new_thread(lambda: newer_holder())
        seen: dict[str, Any] = {
            "newer": newer,
            "fence_wrapper_kept": claim_first in connection.execute_wrappers,
            "user_wrapper_left": passthrough in connection.execute_wrappers,
        }
        try:
            with transaction.atomic():
                Fence.objects.filter(name="work").exists()  # the stale holder's work
            seen["stale"] = "accepted"
        except distlock.FencedUpdateRejected:
            seen["stale"] = "refused"
        return seen

    def newer_holder() -> int:
        with distlock.lock(name, ttl=30, fence=True) as newer, transaction.atomic():
            Fence.objects.filter(name="work").exists()
            assert newer.fencing_token is not None
            return newer.fencing_token

    seen = in_new_thread(stale_holder)
    assert Fence.objects.get(name=name).token == seen["newer"], "the newer holder claimed"
    assert seen["stale"] == "refused", f"the stale holder's transaction was {seen['stale']}"
    assert seen["fence_wrapper_kept"] and not seen["user_wrapper_left"], seen


def test_a_stale_holder_that_tried_to_extend_stays_fenced() -> None:
    """A holder whose lease ended (a pause) calls ``extend()`` (the surfaces hand it out for
    long work) and, as a per-row loop with ``except Exception: continue`` does, runs on.
    The failed extend makes the Lock forget its hold (token None), and the fence drops it:
    its next transactions claim nothing and are accepted although a newer holder claimed.
    Expected: refused (FencedUpdateRejected), as before the extend."""
    name = "extended"
    stale = distlock.lock(name, ttl=0.3, fence=True, hold_until_commit=False)
    assert stale.acquire(wait=0)
    with transaction.atomic():
        Fence.objects.filter(name="work").exists()  # claimed while it was the holder
    time.sleep(0.6)  # paused past its lease
    with distlock.lock(name, ttl=30, fence=True), transaction.atomic():
        Fence.objects.filter(name="work").exists()  # the newer holder claims
    before = "accepted"
    try:
        with transaction.atomic():
            Fence.objects.filter(name="work").exists()
    except distlock.FencedUpdateRejected:
        before = "refused"
    with pytest.raises(distlock.LockError):
        stale.extend(30)  # the lease is gone: LockNotOwned, caught by the loop
    after = "accepted"
    try:
        with transaction.atomic():
            Fence.objects.filter(name="work").exists()  # the stale holder's next row
    except distlock.FencedUpdateRejected:
        after = "refused"
    assert (before, after) == ("refused", "refused"), "the stale holder's transactions"


def test_the_fence_kept_after_a_failed_extend_ends_with_release() -> None:
    """The stale holder stays fenced after a failed extend() only until it ends its hold on
    purpose: its release() (which reports the lease gone) ends the fence, and the wrapper
    leaves the connection once no fenced lock is held."""
    name = "released-after-extend"
    stale = distlock.lock(name, ttl=0.3, fence=True, hold_until_commit=False)
    assert stale.acquire(wait=0)
    time.sleep(0.6)  # paused past its lease
    with distlock.lock(name, ttl=30, fence=True), transaction.atomic():
        Fence.objects.filter(name="work").exists()  # the newer holder claims
    with pytest.raises(distlock.LockError):
        stale.extend(30)
    with pytest.raises(distlock.LockNotOwned):
        stale.release()  # the end of its with block: the lease was gone
    with transaction.atomic():
        Fence.objects.filter(name="work").exists()  # no fenced hold: no claim, no refusal
    Fence.objects.filter(name="work").exists()  # the statement that takes the wrapper off
    assert claim_first not in connection.execute_wrappers


def test_claim_claims_now_in_the_running_transaction() -> None:
    """distlock.fencing.claim() (for work past Django's execute wrappers: callproc, COPY):
    claims the holder's token in the running atomic block, refuses the stale holder, and
    says what to do outside atomic() or after the release."""
    name = "claimed-by-hand"
    stale = distlock.lock(name, ttl=0.3, fence=True, hold_until_commit=False)
    assert stale.acquire(wait=0)
    time.sleep(0.6)  # paused past its lease

    def newer_holder() -> tuple[int | None, str]:
        with distlock.lock(name, ttl=30, fence=True) as newer:
            with transaction.atomic():
                claim(newer)
            token = Fence.objects.get(name=name).token
            try:
                claim(newer)  # autocommit: a claim would end with its own statement
                outside = "claimed"
            except distlock.LockError as exc:
                outside = str(exc)
        try:
            with transaction.atomic():
                claim(newer)  # released
            return token, "claimed"
        except distlock.LockError as exc:
            return token, f"{outside} / {exc}"

    token, errors = in_new_thread(newer_holder)
    assert "transaction.atomic()" in errors and "fences nothing" in errors, errors
    with pytest.raises(distlock.FencedUpdateRejected), transaction.atomic():
        claim(stale)
    with pytest.raises(distlock.LockNotOwned):
        stale.release()  # its fence ends: the read below is not claimed
    assert Fence.objects.get(name=name).token == token, "the newer holder's claim stands"


def test_a_fenced_holder_can_vacuum_sqlite() -> None:
    """SQLite refuses VACUUM inside a transaction: under a fenced lock, in autocommit, it
    passes unclaimed (wrapped in atomic() with the claim, it could not run)."""
    with distlock.lock("vacuum", ttl=30, fence=True), connection.cursor() as cursor:
        cursor.execute("VACUUM")
    assert not Fence.objects.filter(name="vacuum").exists(), "nothing claimed for it"
