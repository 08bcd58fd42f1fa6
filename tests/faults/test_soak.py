"""The soak (tests/faults/soak.py): 8 processes take one lock while holders and waiters are
killed and paused at random; zero overlapping critical sections, by fencing order at the
guarded resource and by the monotonic timestamps the processes recorded. 3,000 acquisitions
in the normal run, 100,000 in the full one (scripts/reliability)."""

# Its holders are forked by the zygote (tests/faults/conftest.py): these tests need its speed,
# killing and replacing holders many times.

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from devkit.redis_server import RedisServer
from tests.faults.conftest import scaled
from tests.faults.soak import VIOLATIONS, Section, Soak, _fast_tmp, check

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.timeout(scaled(ci=300, full=7200))]


def test_soak_with_random_kills_and_pauses(zygote, record, tmp_path) -> None:
    acquisitions = scaled(ci=3_000, full=100_000)
    with (
        tempfile.TemporaryDirectory(prefix="distlock-soak-", dir=_fast_tmp()) as directory,
        RedisServer() as server,
    ):
        figures = Soak(
            zygote, server.url, Path(directory), workers=8, acquisitions=acquisitions
        ).run()
        failed = any(figures["violations"].values()) or figures["worker_errors"]
        if failed:  # keep the evidence: the workers' logs and the resource's ledger
            shutil.copytree(directory, tmp_path / "soak")
    kills, pauses = figures["kills"], figures["pauses"]
    # Recorded before the checks, so that a failed run still reports what it measured.
    record(
        f"Soak: 8 processes, {figures['acquisitions']:,} acquisitions, random kills and pauses",
        f"{figures['violations']['protected_intervals_overlap']} overlapping critical "
        f"sections (lease-protected intervals) and "
        f"{sum(figures['violations'].values())} violations in all; "
        f"{kills.get('holder', 0)} holders and {kills.get('waiter', 0)} waiters SIGKILLed, "
        f"{pauses.get('holder', 0)} holders and {pauses.get('waiter', 0)} waiters paused "
        f"({figures['pauses_longer_than_lease']} longer than the {figures['lease_seconds']}s "
        f"lease); {figures['leases_outlived']} holders outlived their lease, "
        f"{figures['writes_rejected']} late writes rejected by fencing, "
        f"{figures['wall_time_overlaps']} wall-time overlaps, each with an older holder past "
        f"its lease; {figures['acquisitions_per_second']:.0f} acquisitions/s",
        **figures,
    )
    evidence = f" (logs and ledger kept in {tmp_path / 'soak'})" if failed else ""
    assert figures["violations"] == dict.fromkeys(VIOLATIONS, 0), f"{figures}{evidence}"
    assert figures["worker_errors"] == [], f"{figures}{evidence}"
    assert figures["acquisitions"] >= acquisitions
    assert sum(kills.values()) > 0 and sum(pauses.values()) > 0
    # the ledger agrees with the workers, and every accepted write is in it
    assert figures["ledger_writes"] == figures["balance"] >= figures["writes_accepted"]


# --- the checker catches what it is meant to catch -----------------------------------
def section(
    token: int,
    acquired: float,
    deadline: float,
    releasing: float | None,
    *writes: tuple[str, float, float, bool],
) -> Section:
    found = Section(
        token,
        f"{token}.log",
        acquired,
        deadline,
        releasing,
        "released" if releasing else None,
        list(writes),
    )
    found.ended = releasing if releasing is not None else deadline
    return found


def clean_run() -> tuple[list[Section], list[tuple[int, str]]]:
    sections = [
        section(10, 0.0, 1.0, 0.3, ("enter", 0.1, 0.11, True), ("exit", 0.2, 0.21, True)),
        section(20, 0.4, 1.4, 0.7, ("enter", 0.5, 0.51, True), ("exit", 0.6, 0.61, True)),
    ]
    return sections, [(10, "enter"), (10, "exit"), (20, "enter"), (20, "exit")]


def test_the_checker_passes_a_clean_run() -> None:
    sections, ledger = clean_run()
    assert check(sections, ledger, balance=4) == dict.fromkeys(VIOLATIONS, 0)


def test_the_checker_catches_overlapping_leases_and_token_disorder() -> None:
    sections, ledger = clean_run()
    sections[1].acquired = 0.25  # granted while the first still held its lease
    found = check(sections, ledger, balance=4)
    assert found["protected_intervals_overlap"] == 1
    assert found["wall_overlap_within_a_lease"] == 1
    sections[1].token = 5  # a later grant with an older token
    assert check(sections, ledger, balance=4)["tokens_out_of_acquisition_order"] == 1


def test_the_checker_catches_a_resource_that_let_a_stale_write_through() -> None:
    sections, _ = clean_run()
    sections[0].ended = 0.9  # the first holder was paused and ran on after the second began
    sections[0].deadline = 0.35
    sections[0].releasing = 0.9
    sections[0].writes[1] = ("exit", 0.8, 0.81, True)  # ...and its late write was accepted
    ledger = [(10, "enter"), (20, "enter"), (20, "exit"), (10, "exit")]
    found = check(sections, ledger, balance=4)
    assert found["resource_accepted_an_older_token"] == 1
    assert found["stale_write_accepted_after_newer"] == 1
    assert found["wall_overlap_within_a_lease"] == 0  # that holder did outlive its lease


def test_the_checker_orders_overlaps_by_token_not_by_logged_start() -> None:
    """Found by the first full soak: a holder paused between its grant and its first
    timestamp logs a start after the next holder's; the overlap is that paused (older)
    holder's, and it outlived its lease."""
    newer = section(20, 0.5, 1.5, 1.2, ("enter", 0.6, 0.61, True), ("exit", 1.1, 1.11, True))
    older = section(10, 0.9, 0.4, 1.0, ("enter", 0.95, 0.96, False), ("exit", 0.97, 0.98, False))
    ledger = [(20, "enter"), (20, "exit")]
    assert check([newer, older], ledger, balance=2) == dict.fromkeys(VIOLATIONS, 0)
    older.writes[0] = ("enter", 0.95, 0.96, True)  # had the resource let it through...
    found = check([newer, older], [(20, "enter"), (10, "enter"), (20, "exit")], balance=3)
    assert found["stale_write_accepted_after_newer"] == 1
    assert found["resource_accepted_an_older_token"] == 1


def test_the_checker_catches_a_write_rejected_within_its_lease_and_a_bad_ledger() -> None:
    sections, ledger = clean_run()
    sections[1].writes[1] = ("exit", 0.6, 0.61, False)
    found = check(sections, ledger, balance=3)
    assert found["write_rejected_within_its_lease"] == 1
    assert found["ledger_write_not_accepted"] == 1
    assert found["balance_differs_from_ledger"] == 1
    assert (
        check(sections, [*ledger[:-1], (99, "exit")], balance=4)["ledger_write_not_accepted"] == 1
    )
    sections, ledger = clean_run()
    assert check(sections, ledger[:-1], balance=3)["accepted_write_missing_from_ledger"] == 1
