"""A LockedCommandMixin command's metrics carry the command's name, never the lock name its
options fill in (through the real OpenTelemetry SDK)."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from distlock import metrics
from testproject.management.commands.send_digest import Command as SendDigest
from tests.support.otel import collect, reader

pytestmark = pytest.mark.django_db(databases=[])


def test_a_command_reports_its_name(redis_backend: str) -> None:
    reader()
    collect()
    for mailing_list in ("weekly", "daily", "monthly"):
        call_command(SendDigest(), "--list", mailing_list, "--seconds", "0", stdout=io.StringIO())
    found = collect()
    assert {p.attributes["distlock.name"] for p in found} == {"send_digest"}
    holds = [p for p in found if p.instrument == metrics.HOLD_DURATION]
    assert sum(p.count for p in holds) == 3
