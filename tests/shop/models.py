"""The rows a double click must not duplicate: charges of an order, sales of a product."""
from __future__ import annotations

from django.db import models


class Order(models.Model):
    pass


class Charge(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="charges")
    worker_pid = models.PositiveIntegerField()


class Product(models.Model):
    units = models.IntegerField()


class Sale(models.Model):
    product = models.ForeignKey(Product, on_delete=models.CASCADE, related_name="sales")
