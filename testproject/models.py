"""The demo shop's records: an order, and the payments charged for it.

The Pay view (views.pay) runs under ``@lock_view`` with ``ATOMIC_REQUESTS``: the lock is
taken before the request's transaction begins and released after it commits, so a second
click reads the first click's payment, and an order is charged once.
"""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"Order {self.pk}"


class Payment(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="payments")
    amount_cents = models.PositiveIntegerField(default=1999)
    charged_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.amount_cents / 100:.2f} for order {self.order_id}"
