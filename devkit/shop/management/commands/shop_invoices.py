"""``manage.py shop_invoices``: process every unpaid order, one transaction each, under one
fenced lock (LockedCommandMixin with ``lock_fence = True``), for
tests/core/test_fence_processes.py: what a nightly invoicing command does.

Each transaction reads the first unpaid order, works on it (SHOP_ROW_SECONDS), and writes its
charge. The first statement of each transaction claims the lock's fencing token, so a copy
whose lease ended (paused, or the lock server restarted empty) is refused once a newer copy
has claimed it. It prints ``token N`` (``self.lock.fencing_token``) when it starts and
``row ID`` after each commit. ``SHOP_UNFENCED=1`` turns the fence off (the control run).

``SHOP_STOP_AT_ROW=N`` makes the command stop itself (SIGSTOP) in its Nth transaction, its
charge written, just before the COMMIT: a pause at the worst moment, with a row in flight.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from devkit.shop.models import Charge, Order
from distlock.management import LockedCommandMixin

ROW_SECONDS = float(os.environ.get("SHOP_ROW_SECONDS", "0.05"))
STOP_AT_ROW = int(os.environ.get("SHOP_STOP_AT_ROW", "0"))


class Command(LockedCommandMixin, BaseCommand):
    help = "Charge every unpaid order, one transaction each, under a fenced lock."
    lock_name = "invoices"
    lock_ttl = float(os.environ.get("SHOP_INVOICES_LEASE", "6"))
    lock_fence = os.environ.get("SHOP_UNFENCED") != "1"

    def handle(self, *args: Any, **options: Any) -> None:
        assert self.lock is not None
        self.stdout.write(f"token {self.lock.fencing_token}")
        self.stdout.flush()
        rows = 0
        while True:
            with transaction.atomic():
                order = Order.objects.filter(charges__isnull=True).order_by("pk").first()
                if order is None:
                    return
                time.sleep(ROW_SECONDS)
                Charge.objects.create(order=order, worker_pid=os.getpid())
                rows += 1
                if rows == STOP_AT_ROW:
                    os.kill(os.getpid(), signal.SIGSTOP)  # resumed by the test
            self.stdout.write(f"row {order.pk}")
            self.stdout.flush()
