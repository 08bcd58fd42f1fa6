"""A demo cron job: send a mailing list's digest, once across every host that runs it.

    python manage.py send_digest --list weekly --seconds 5

Scheduled on several hosts at the same minute, one sends and the others print one line
saying who is sending and exit 0. It only pretends to send, slowly, and says what it does.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from distlock.management import LockedCommandMixin

BATCHES = 4


class Command(LockedCommandMixin, BaseCommand):
    help = "Send the digest of a mailing list (a demo: it pretends, taking --seconds)."
    lock_name = "send_digest:{mailing_list}"  # one lock per list: lists are sent in parallel
    lock_ttl = 30

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--list",
            dest="mailing_list",
            default="weekly",
            help="The mailing list whose digest to send (default: weekly).",
        )
        parser.add_argument(
            "--seconds", type=float, default=3.0, help="How long sending takes (default: 3)."
        )

    def handle(self, *args: Any, mailing_list: str, seconds: float, **options: Any) -> None:
        self.say(f"sending the {mailing_list!r} digest on {socket.gethostname()} pid {os.getpid()}")
        for batch in range(1, BATCHES + 1):
            time.sleep(seconds / BATCHES)
            self.say(f"batch {batch}/{BATCHES} sent")
        self.say(self.style.SUCCESS(f"the {mailing_list!r} digest is sent"))

    def say(self, text: str) -> None:
        now = datetime.now(UTC).isoformat(timespec="milliseconds")
        self.stdout.write(f"{now} {text}")
        self.stdout.flush()
