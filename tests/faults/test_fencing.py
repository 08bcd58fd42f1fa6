"""Fencing that protects the database: distlock.fencing.fenced_update makes a model write
conditional on the fencing token, so a holder whose lease ended cannot overwrite the work of
the holder after it, even when it wakes up convinced it still holds the lock."""

# Its holders are forked by the zygote (tests/faults/conftest.py): these tests need its speed,
# killing and replacing holders many times.

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.db.models import F

import distlock
from devkit.fencingapp.models import Account, FencedWrite
from distlock import FencedUpdateRejected, LockNotOwned
from distlock.fencing import afenced_update, fenced_update
from tests.faults.helpers import exit_story, wait_for_report


@pytest.fixture
def account(db) -> Account:
    return Account.objects.create(balance=100, fence=0)


def accounts(account: Account):
    return Account.objects.filter(pk=account.pk)


# --- the helper -----------------------------------------------------------------------
def test_a_newer_token_writes_and_an_older_one_is_left_out(account) -> None:
    assert fenced_update(accounts(account), 34, balance=F("balance") + 5) == 1
    assert fenced_update(accounts(account), 33, balance=0) == 0  # a paused, expired holder
    account.refresh_from_db()
    assert (account.balance, account.fence) == (105, 34)


def test_the_same_holder_may_write_several_times(account) -> None:
    assert fenced_update(accounts(account), 7, balance=1) == 1
    assert fenced_update(accounts(account), 7, balance=2) == 1
    account.refresh_from_db()
    assert (account.balance, account.fence) == (2, 7)


def test_strict_raises_with_the_newer_token_and_changes_nothing(account) -> None:
    fenced_update(accounts(account), 50)  # a claim: sets the fence, nothing else
    with pytest.raises(FencedUpdateRejected, match="newer token 50") as caught:
        fenced_update(accounts(account), 49, strict=True, balance=0)
    assert (caught.value.token, caught.value.newest) == (49, 50)
    assert isinstance(caught.value, distlock.LockError)
    account.refresh_from_db()
    assert (account.balance, account.fence) == (100, 50)


def test_strict_does_not_mistake_no_rows_for_a_rejection(account) -> None:
    assert fenced_update(Account.objects.filter(pk=account.pk + 1), 5, strict=True) == 0


def test_only_the_rows_the_token_may_write_change(db) -> None:
    old = Account.objects.create(balance=1, fence=10)
    new = Account.objects.create(balance=1, fence=30)
    assert fenced_update(Account.objects.all(), 20, balance=F("balance") + 1) == 1
    old.refresh_from_db()
    new.refresh_from_db()
    assert (old.balance, old.fence, new.balance, new.fence) == (2, 20, 1, 30)


@pytest.mark.django_db(transaction=True)  # the queries run in another thread
async def test_async_twin() -> None:
    account = await Account.objects.acreate(balance=100, fence=0)
    assert await afenced_update(accounts(account), 9, balance=F("balance") - 1) == 1
    with pytest.raises(FencedUpdateRejected):
        await afenced_update(accounts(account), 8, strict=True, balance=0)
    await account.arefresh_from_db()
    assert (account.balance, account.fence) == (99, 9)


@pytest.mark.parametrize(
    ("token", "error", "message"),
    [
        (None, TypeError, "not held"),
        (True, TypeError, "bool"),
        ("34", TypeError, "str"),
        (34.0, TypeError, "float"),
        (0, ValueError, "> 0"),
        (-1, ValueError, "> 0"),
    ],
)
def test_bad_tokens_are_refused(account, token, error, message) -> None:
    with pytest.raises(error, match=message):
        fenced_update(accounts(account), token, balance=0)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"field": "nope"}, "has no field 'nope'"),
        ({"field": "balance"}, "must be a BigIntegerField"),  # 32 bits: tokens would overflow
        ({"fence": 5}, "is the fence field"),
        ({"strict": "yes"}, "strict must be True or False"),
    ],
)
def test_bad_fields_are_refused_with_a_hint(account, arguments, message) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        fenced_update(accounts(account), 5, **arguments)


def test_only_querysets(account) -> None:
    with pytest.raises(TypeError, match="QuerySet"):
        fenced_update(account, 5)  # type: ignore[arg-type]


# --- a paused, expired holder in another process --------------------------------------
def stale_writer(
    spawn: Any, url: str, tmp_path: Path, name: str, **options: Any
) -> tuple[Account, Path, Any]:
    """Start the holder to be frozen (tests.faults.roles.stale_writer) on ``name`` with a
    0.5 s lease and a new account; return the account, its report's path and the process."""
    account = Account.objects.using("fencing").create(balance=100, fence=0)
    out = tmp_path / "stale.json"
    stale = spawn(
        "stale_writer",
        url=url,
        db=connections["fencing"].settings_dict["NAME"],
        name=name,
        ttl=0.5,
        account=account.pk,
        out=str(out),
        **options,
    )
    return account, out, stale


@pytest.mark.django_db(transaction=True, databases=["fencing"])
@pytest.mark.parametrize("action", ["release", "extend"])
def test_a_paused_expired_holders_late_write_is_rejected(
    spawn, redis_backend, tmp_path, action, record
) -> None:
    """Kleppmann's scenario with real processes: the holder is frozen (SIGSTOP) past its
    lease, another holder takes the lock and writes, the first wakes up and writes too."""
    account, out, stale = stale_writer(spawn, redis_backend, tmp_path, "acct", action=action)
    backend = distlock.locks["default"]
    # Paused once it knows it holds the lock (not once the server shows it as the holder: a
    # grant it had not read yet would reach it after its lease, and count as not acquired).
    held = wait_for_report(Path(f"{out}.held"), stale, final=out)
    stale.pause()
    paused_at = time.monotonic()
    current = distlock.lock("acct", ttl=30)
    assert current.acquire(wait=30), "the frozen holder's 0.5 s lease never ended"
    before = backend.info("acct")
    rows = Account.objects.using("fencing").filter(pk=account.pk)
    assert fenced_update(rows, current.fencing_token, strict=True, balance=F("balance") + 10) == 1
    Path(f"{out}.go").touch()
    stale.resume()
    paused_for = time.monotonic() - paused_at
    assert stale.wait(timeout=30) == 0, exit_story(stale, out)
    report = json.loads(out.read_text())
    assert report["fencing_token"] == held["fencing_token"]
    assert report["write"] == "FencedUpdateRejected"
    assert report["newest"] == current.fencing_token > report["fencing_token"]
    assert report[action] == LockNotOwned.__name__
    # The current holder is untouched: same token, its write stands, and its lease ends when
    # it did (the server's clock, to the millisecond; however long the test took meanwhile).
    info = backend.info("acct")
    assert info.token == current.token and current.owned()
    assert info.expires_at >= before.expires_at - timedelta(milliseconds=5)
    account.refresh_from_db(using="fencing")
    assert (account.balance, account.fence) == (110, current.fencing_token)
    current.release()
    record(
        "Holder paused (SIGSTOP) past its lease, then resumed",
        f"late write rejected by fencing (FencedUpdateRejected); its {action}() raised "
        "LockNotOwned; the new holder's lease, token and write untouched",
        paused_seconds=round(paused_for, 2),
        lease_seconds=0.5,
    )


@pytest.mark.django_db(transaction=True, databases=["fencing"])
def test_an_auto_renewed_holder_paused_past_its_lease_learns_it_lost(
    spawn, redis_backend, tmp_path, record
) -> None:
    account, out, stale = stale_writer(
        spawn, redis_backend, tmp_path, "renewed", action="release", auto_renew=True
    )
    wait_for_report(Path(f"{out}.held"), stale, final=out)
    stale.pause()  # the renewal thread is frozen too
    current = distlock.lock("renewed", ttl=30)
    assert current.acquire(wait=30), "the frozen holder's 0.5 s lease never ended"
    rows = Account.objects.using("fencing").filter(pk=account.pk)
    fenced_update(rows, current.fencing_token, balance=F("balance") + 10)
    Path(f"{out}.go").touch()
    stale.resume()
    assert stale.wait(timeout=30) == 0, exit_story(stale, out)
    report = json.loads(out.read_text())
    assert report == {
        "fencing_token": report["fencing_token"],
        "on_lost": True,
        "write": "FencedUpdateRejected",
        "newest": current.fencing_token,
        "release": "LockLost",
    }
    assert current.owned()
    current.release()
    assert FencedWrite.objects.using("fencing").count() == 0
    record(
        "Auto-renewed holder paused (SIGSTOP) past its lease, then resumed",
        "its renewal found the lease gone: release() raised LockLost; its late write was "
        "rejected by fencing",
    )
