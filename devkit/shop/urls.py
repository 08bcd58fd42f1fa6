from django.urls import path

from . import adversary5, adversary6, adversary8, adversary9, adversary39b, fenced, views

urlpatterns = [
    path("", views.health),
    path("pay/<int:order_id>", views.pay),
    path("pay-inside/<int:order_id>", views.pay_inside),
    path("pay-atomic/<int:order_id>", views.pay_atomic),
    path("pay-outside/<int:order_id>", views.pay_outside),
    path("pay-for-update/<int:order_id>", views.pay_for_update),
    path("pay-python-redis-lock/<int:order_id>", views.pay_python_redis_lock),
    path("buy", views.buy),
    path("pay-batch/<int:order_id>", views.pay_batch),
    path("pay-hook-fails/<int:order_id>", views.pay_hook_fails),
    path("pay-fenced/<int:order_id>", fenced.pay_fenced),
    path("pay-service/<int:order_id>", views.pay_service),
    path("pay-receipt/<int:order_id>", adversary5.pay_receipt),
    path("pay-tasks/<int:order_id>", adversary5.pay_tasks),
    path("pay-follow-up/<int:order_id>", adversary6.pay_follow_up),
    path("pay-follow-up-slow/<int:order_id>", adversary6.pay_follow_up_slow),
    path("pay-background-loop/<int:order_id>", adversary6.pay_background_loop),
    path("pay-nested-follow-up/<int:order_id>", adversary39b.pay_nested_follow_up),
    path("pay-legacy-client/<int:order_id>", adversary8.pay_legacy_client),
    path("pay-items-slow/<int:order_id>", adversary8.pay_items_slow),
    path("pay-callback-thread/<int:order_id>", adversary8.pay_callback_thread),
    path("pay-then-loyalty/<int:order_id>", adversary8.pay_then_loyalty),
    path("pay-asyncio-run/<int:order_id>", adversary8.pay_asyncio_run),
    path("pay-callback-busy/<int:order_id>", adversary9.pay_callback_busy),
    path("pay-shutdown-reconcile/<int:order_id>", adversary9.pay_shutdown_reconcile),
]
