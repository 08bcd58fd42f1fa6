"""The rows a double click must not duplicate: charges of an order, sales of a product."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    def __str__(self) -> str:
        return f"order {self.pk}"


class Charge(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="charges")
    worker_pid = models.PositiveIntegerField()

    def __str__(self) -> str:
        return f"charge of order {self.order_id} by pid {self.worker_pid}"


class Product(models.Model):
    units = models.IntegerField()

    def __str__(self) -> str:
        return f"product {self.pk}: {self.units} units"


class Sale(models.Model):
    product = models.ForeignKey(Product, on_delete=models.CASCADE, related_name="sales")

    def __str__(self) -> str:
        return f"sale of product {self.product_id}"
