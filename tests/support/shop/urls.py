from django.urls import path

from . import views

urlpatterns = [
    path("", views.health),
    path("pay/<int:order_id>", views.pay),
    path("pay-inside/<int:order_id>", views.pay_inside),
    path("pay-atomic/<int:order_id>", views.pay_atomic),
    path("buy", views.buy),
]
