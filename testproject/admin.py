"""The demo shop in the admin: orders with the number of payments each was charged."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from .models import Order, Payment


class PaymentInline(admin.TabularInline):
    model = Payment
    extra = 0
    readonly_fields = ["amount_cents", "charged_at"]


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ["id", "created_at", "payment_count"]
    inlines = [PaymentInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Order]:
        return super().get_queryset(request).annotate(payment_count=Count("payments"))

    @admin.display(description="payments", ordering="payment_count")
    def payment_count(self, order: Order) -> int:
        return order.payment_count  # type: ignore[attr-defined]


@admin.register(Payment)
class PaymentAdmin(admin.ModelAdmin):
    list_display = ["id", "order", "amount_cents", "charged_at"]
