"""``manage.py shop_charge --order N``: charge an order under the lock ``pay:{order}``
(LockedCommandMixin), for tests/core/test_transactions_surfaces.py. It returns what it did
("charged", "already paid"), which ``call_command`` hands back and writes to stdout."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from devkit.shop.surfaces import HOLD, charge
from distlock.management import LockedCommandMixin


class Command(LockedCommandMixin, BaseCommand):
    help = "Charge an order unless it is paid, under its lock."
    lock_name = "pay:{order}"
    lock_ttl = 30
    lock_wait = 10
    if not HOLD:  # otherwise the default, True
        lock_hold_until_commit = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--order", type=int, required=True)

    def handle(self, *args: Any, order: int, **options: Any) -> str:
        return charge(order)
