from django.contrib import admin
from django.urls import path

from . import capabilities, views

urlpatterns = [
    path("", views.home, name="home"),
    path("rebuild/", views.rebuild, name="rebuild"),
    path("pay/", views.pay_page, name="pay-page"),
    path("pay/<int:order_id>/", views.pay, name="pay"),
    path("api/pay/<int:order_id>/", views.api_pay, name="api-pay"),
    path("shared/", capabilities.shared, name="shared"),
    path("semaphore/", capabilities.semaphore, name="semaphore"),
    path("cache/", capabilities.cache_page, name="cache"),
    path("leader/", capabilities.leader, name="leader"),
    path("transaction/", capabilities.transaction_page, name="transaction"),
    path("transaction/<int:order_id>/charge/", capabilities.charge, name="charge"),
    path("admin/", admin.site.urls),
]
